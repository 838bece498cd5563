"""Timings on a noisy machine: the interleaved rounds, the p50's interval, the paired ratio, and what --optimize auto
and the gate make of them. The machine here is a deliberately noisy one made for these tests (NoisyMachineForTest):
a fake clock that every runner's run advances by its base time, scaled by a load shared by all of them that drifts
between slow and fast phases, and by a jitter of its own. Seeded, so every outcome is reproducible; the claims are
made over many seeds, as rates, since a 95% interval misses by design one time in twenty."""

from __future__ import annotations

import random

import pytest

from convert.benchmark import BenchmarkPlan, BenchmarkSettings, Contender, interleaved, measure
from convert.gate.baseline import _latency_deltas
from convert.gate.budgets import _judge_timed
from convert.hardware import compute_limit
from convert.pipeline.auto import rank
from convert.policy import Allowance
from convert.reports import model as rm
from convert.reports.ratios import paired_ratio
from convert.timing import median_interval

SEEDS = range(40)
SETTINGS = BenchmarkSettings(threads=1, warmup=3, rounds=20, seconds=0.2, max_runs=500, idle_gap_s=0.0)
PLAN = BenchmarkPlan(latency_feed={}, latency_shape="B=1", throughput_feed=None, throughput_shape="", throughput_items=1)


class NoisyMachineForTest:
    """A fake clock and runners whose runs cost base × the shared load × their own jitter (see the module docstring)."""

    def __init__(self, seed: int):
        self.now, self.load, self.rng = 0.0, 1.0, random.Random(seed)

    def clock(self) -> float:
        return self.now

    def runner(self, base_ms: float):
        def run(_feed=None) -> None:
            if self.rng.random() < 0.03:  # a neighbour starts or stops: the load changes for whoever runs next
                self.load = self.rng.choice((1.0, 1.0, 1.6, 3.0))
            self.now += base_ms / 1e3 * self.load * self.rng.lognormvariate(0.0, 0.2)

        return run


def timed(seed: int, base_ms: dict[str, float]) -> dict[str, rm.Benchmark]:
    """Each named runner's benchmark record, all timed in one interleaved session on the noisy machine."""
    machine = NoisyMachineForTest(seed)
    contenders = [Contender(rm.Benchmark(runtime=name, device="cpu"), machine.runner(ms)) for name, ms in base_ms.items()]
    measure(contenders, PLAN, SETTINGS, f"session-{seed}", clock=machine.clock)
    return {c.record.runtime: c.record for c in contenders}


def candidates(records: dict[str, rm.Benchmark], precisions: dict[str, str]) -> list[rm.AutoCandidate]:
    return [
        rm.AutoCandidate(name=name, format="onnx", precision=precisions[name], status="lost", device="cpu", latency_ms_p50=b.latency_ms_p50)
        for name, b in records.items()
    ]


def test_the_median_interval_is_the_binomial_order_statistics():
    assert median_interval(list(range(10))) == (1, 8)  # 97.9% coverage; cutting 2 from each end would give 89%
    assert median_interval(list(range(20))) == (5, 14)
    assert median_interval([3.0, 1.0, 2.0, 5.0, 4.0]) == (1.0, 5.0)  # five samples cannot give 95%: their whole range


def test_every_round_runs_a_block_of_every_contender_in_an_order_rotated_round_by_round():
    order: list[str] = []
    results = interleaved([lambda name=name: order.append(name) for name in "abc"], SETTINGS)
    assert all(len(r.round_ms) == SETTINGS.rounds and len(r.runs_ms) >= SETTINGS.rounds for r in results)
    blocks = [name for i, name in enumerate(order[3 * SETTINGS.warmup :]) if i == 0 or order[3 * SETTINGS.warmup + i - 1] != name]
    assert blocks == [name for r in range(SETTINGS.rounds) for name in ("abc"[r % 3 :] + "abc"[: r % 3])]


def test_a_run_that_raises_is_reported_and_the_others_go_on():
    def broken():
        raise RuntimeError("kernel not found")

    contenders = [
        Contender(rm.Benchmark(runtime="ok", device="cpu"), lambda _f: None),
        Contender(rm.Benchmark(runtime="broken", device="cpu"), lambda _f: broken()),
    ]
    measure(contenders, PLAN, SETTINGS, "s")
    assert contenders[0].record.latency_ms_p50 is not None and contenders[0].record.rounds == SETTINGS.rounds
    assert contenders[1].record.status == "failed" and "kernel not found" in contenders[1].record.reason


def test_a_run_that_raises_at_the_throughput_batch_leaves_no_throughput_figure():
    def at_batch_8_broken(feed):
        if feed == "batch 8":
            raise RuntimeError("out of memory")

    plan = BenchmarkPlan(latency_feed="batch 1", latency_shape="B=1", throughput_feed="batch 8", throughput_shape="B=8", throughput_items=8)
    contender = Contender(rm.Benchmark(runtime="rt", device="cpu"), at_batch_8_broken)
    measure([contender], plan, SETTINGS, "s")
    record = contender.record
    assert record.latency_ms_p50 is not None and record.status == "failed" and "out of memory" in record.reason
    assert record.throughput_per_s is None and record.throughput_interval is None and record.throughput_shape == ""


def test_the_interval_holds_the_p50_of_all_the_runs_however_lopsided_the_rounds():
    """Blocks of three timed runs (after a 10 ms warm-up, for 25 ms a round: three runs), each after an untimed run: 15 rounds fast
    but for one slow run in three, 5 slow throughout. The rounds' medians are 1 ms bar five, so their interval is
    [1, 1]; the pooled p50 is 5.5 ms, outside it, and the interval is widened to hold it."""
    durations = iter([0.010] * 3 + [0.001, 0.001, 0.001, 0.010] * 15 + [0.010] * 4 * 5)
    clock_now = [0.0]

    def run(_feed=None):
        clock_now[0] += next(durations)

    settings = BenchmarkSettings(threads=1, warmup=3, rounds=20, seconds=0.025 * 20, max_runs=500, idle_gap_s=0.0)
    contender = Contender(rm.Benchmark(runtime="rt", device="cpu"), run)
    measure([contender], PLAN, settings, "s", clock=lambda: clock_now[0])
    record = contender.record
    low, high = record.latency_ms_interval
    assert record.latency_ms_p50 == 5.5 and (low, high) == (1.0, 5.5)


def test_identical_runners_are_as_fast_as_each_other_within_the_noise():
    within = [paired_ratio(r["a"], r["b"]).within_noise for r in (timed(seed, {"a": 1.0, "b": 1.0}) for seed in SEEDS)]
    assert sum(within) >= 0.9 * len(within), within  # 95% intervals: about 2 of 40 may miss


def test_the_noise_shows_in_the_interval_and_the_unstable_flag():
    noisy = [timed(seed, {"a": 1.0})["a"] for seed in SEEDS]
    assert all(b.latency_ms_interval[0] <= b.latency_ms_p50 <= b.latency_ms_interval[1] for b in noisy)
    assert all(len(b.round_ms) == SETTINGS.rounds and b.session for b in noisy)
    assert any(b.unstable for b in noisy) and not all(b.unstable for b in noisy)


def test_auto_takes_a_within_noise_difference_as_none_and_prefers_the_simpler_candidate():
    chosen = []
    for seed in SEEDS:
        records = timed(seed, {"none": 1.0, "int8": 1.0})
        ranked = rank(candidates(records, {"none": "fp32", "int8": "int8"}), records)
        chosen.append(ranked[0].name)
        if ranked[0].name == "none" and ranked[0].latency_ms_p50 > ranked[1].latency_ms_p50:
            assert "within the noise" in ranked[0].reason and "simpler" in ranked[0].reason
            assert ranked[1].vs_chosen.within_noise and "none is simpler" in ranked[1].reason
    assert chosen.count("none") >= 0.9 * len(chosen), chosen


def test_auto_takes_a_real_difference_as_one():
    for seed in SEEDS:
        records = timed(seed, {"none": 1.0, "int8": 0.5})
        ranked = rank(candidates(records, {"none": "fp32", "int8": "int8"}), records)
        assert ranked[0].name == "int8" and ranked[0].reason == "the fastest candidate that passed validation"
        assert ranked[1].vs_chosen.interval[0] > 1 and ranked[1].reason.startswith("slower: ")


def _record(benchmark: rm.Benchmark, beside: rm.Benchmark | None = None) -> rm.ArtifactRecord:
    return rm.ArtifactRecord(format="onnx", benchmarks=[benchmark], baseline_benchmarks=[beside] if beside else [])


TEN_PERCENT = Allowance(latency=0.10, latency_ms=0.0)


def _regressed(
    before: rm.Benchmark, now: rm.Benchmark, beside: rm.Benchmark | None, allowance: Allowance = TEN_PERCENT
) -> rm.BaselineDelta:
    (delta,) = _latency_deltas("onnx", _record(now, beside), _record(before), allowance)
    return delta


@pytest.mark.parametrize("slower", [1.0, 2.0])
def test_the_gate_timed_beside_its_baseline_rejects_a_real_2x_regression_and_not_the_noise(slower):
    outcomes = []
    for seed in SEEDS:
        records = timed(seed, {"baseline": 1.0, "candidate": slower})
        # the baseline report's own figure comes from another run, in a slow moment: only the side-by-side ratio counts
        recorded = rm.Benchmark(runtime="baseline", device="cpu", latency_ms_p50=records["baseline"].latency_ms_p50 * 0.6)
        now = records["candidate"].model_copy(update={"runtime": "onnxruntime"})
        beside = records["baseline"].model_copy(update={"runtime": "onnxruntime"})
        delta = _regressed(recorded.model_copy(update={"runtime": "onnxruntime"}), now, beside)
        assert delta.side_by_side and delta.baseline == beside.latency_ms_p50
        outcomes.append(delta.status)
    if slower == 2.0:
        assert set(outcomes) == {"regressed"}
    else:
        assert "regressed" not in outcomes


def test_the_gate_against_a_recorded_figure_rejects_only_what_the_interval_says_is_real():
    base = rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=1.0)
    noisy = rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=1.3, latency_ms_interval=[0.95, 1.6], rounds=10)
    slow = rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=2.1, latency_ms_interval=[1.9, 2.4], rounds=10)
    strict = Allowance(latency_recorded=0.10, latency_ms=0.0)
    assert _regressed(base, noisy, None, strict).status == "ok" and "noise" in _regressed(base, noisy, None, strict).reason
    assert _regressed(base, slow, None, strict).status == "regressed"
    # by default a recorded figure from another run is allowed 2x, what a shared runner's load moves a timing by
    assert _regressed(base, slow, None).status == "ok" and _regressed(base, slow, None).allowed == "+100%"
    slower = rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=2.6, latency_ms_interval=[2.3, 2.9], rounds=10)
    assert _regressed(base, slower, None).status == "regressed"


def test_a_latency_budget_fails_only_when_the_whole_interval_misses_it():
    assert _judge_timed(5.2, [4.8, 5.6], "<=", 5.0)[0] == "passed"
    assert "within the noise" in _judge_timed(5.2, [4.8, 5.6], "<=", 5.0)[1]
    assert _judge_timed(6.0, [5.5, 6.4], "<=", 5.0)[0] == "failed"
    assert _judge_timed(90.0, [85.0, 101.0], ">=", 100.0)[0] == "passed"
    assert _judge_timed(90.0, [85.0, 95.0], ">=", 100.0)[0] == "failed"
    assert _judge_timed(6.0, None, "<=", 5.0)[0] == "failed"  # p90/p99 carry no interval: judged as measured


def test_the_report_says_when_a_precision_cannot_compute_faster_on_this_cpu():
    avx2_only = rm.CpuInfo(model="AMD EPYC", features=["avx2", "fma"], int8_compute=False, fp16_compute=False, known=True)
    vnni = rm.CpuInfo(model="Xeon", features=["avx512_vnni", "avx512f"], int8_compute=True, known=True)
    assert "VNNI" in compute_limit("int8", "cpu", avx2_only) and compute_limit("int8", "cpu", vnni) == ""
    assert compute_limit("int8", "cuda", avx2_only) == "" and compute_limit("fp32", "cpu", avx2_only) == ""
    assert compute_limit("int8", "cpu", rm.CpuInfo()) == ""  # features unknown: nothing is inferred
