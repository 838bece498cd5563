"""A decoder's benchmarks as it generates: the prefill (one call on a batch-1 prompt, the cache empty) and the decode
(one token a step, the cache fed back), timed in every benchmark of a real decoder, the source's included, with their
intervals; the plan of their sizes within the model's bounds; the timing of the steps on a fake clock; --optimize
auto ranking a decoder's candidates by decode speed; the renderings showing the figures for a decoder and only then."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from markdown_it import MarkdownIt
from rich.console import Console

from convert.benchmark import (
    BenchmarkPlan,
    BenchmarkSettings,
    Contender,
    DecodeFeeds,
    DecodePlan,
    Entry,
    benchmark_session,
    measure,
    plan_decode,
)
from convert.pipeline.auto import choose, rank
from convert.reports import model as rm
from convert.reports.console import print_summary
from convert.reports.html import render_html
from convert.reports.markdown import render_markdown
from convert.reports.ratios import paired_ratio
from convert.validators.generation import PAST, CacheLayout
from tests.conftest import run_cli, shared_folder

SETTINGS = BenchmarkSettings(threads=1, warmup=3, rounds=20, seconds=0.2, max_runs=500, idle_gap_s=0.0)
LAYOUT = CacheLayout(layers=2, kv_heads=2, head_dim=4, dtype="float32", vocab_size=50, position_ids=True)
# the latency's feed: one token, the cache empty (what a fake decoder below takes)
PLAN = BenchmarkPlan(
    latency_feed={
        "input_ids": np.zeros((1, 1), np.int64),
        **{n: np.zeros((1, h, 0, d), np.float32) for n, (h, d) in LAYOUT.past_shapes().items()},
    },
    latency_shape="B=1,S=1,P=0",
    throughput_feed=None,
    throughput_shape="",
    throughput_items=1,
)
FIELDS = ("prefill_ms_p50", "decode_tokens_per_s")


# --- a real decoder: the llama fixture to ONNX and OpenVINO IR, benchmarked ---------------------------------------------


@pytest.fixture(scope="module")
def llama_run(tmp_path_factory) -> tuple[str, Path]:
    """(stdout of -v, the output folder) of the llama fixture to ONNX and OpenVINO IR (two runtimes), benchmarked; once
    per session for every xdist worker."""
    from fixtures.transformers_folders import write_folder

    def build(folder: Path) -> None:
        model = write_folder("llama", folder / "llama")
        out = folder / "out"
        args = (
            "--task",
            "text-generation-with-past",
            "--to",
            "onnx",
            "--optimize",
            "openvino",
            "--benchmark",
            "--benchmark-seconds",
            "0.2",
        )
        run = run_cli(str(model), *args, "-v", "--out", str(out))
        assert run.returncode == 0, run.output
        (folder / "stdout.txt").write_text(run.stdout)

    folder = shared_folder(tmp_path_factory, "decode_benchmark_llama", build)
    return (folder / "stdout.txt").read_text(), folder / "out"


@pytest.fixture(scope="module")
def llama_report(llama_run) -> rm.Report:
    return rm.Report.model_validate(json.loads((llama_run[1] / "report.json").read_text()))


def _every_benchmark(report: rm.Report) -> list[tuple[str, rm.Benchmark]]:
    return [("source", b) for b in report.source_benchmark] + [(a.key, b) for a in report.artifacts for b in a.benchmarks]


def test_every_benchmark_of_a_decoder_the_sources_included_has_its_prefill_and_decode_with_intervals(llama_report):
    measured = _every_benchmark(llama_report)
    assert [(name, b.runtime) for name, b in measured] == [("source", "torch (source)"), ("onnx", "onnxruntime"), ("openvino", "openvino")]
    for name, b in measured:
        assert b.status == "ok", (name, b.reason)
        assert (b.prefill_length, b.decode_steps) == (32, 32), name  # the defaults: the fixture has 128 positions
        assert b.prefill_ms_p50 > 0 and b.decode_tokens_per_s > 0, name
        low, high = b.prefill_ms_interval
        assert 0 < low <= b.prefill_ms_p50 <= high, name
        low, high = b.decode_tokens_per_s_interval
        assert 0 < low <= b.decode_tokens_per_s <= high, name
        assert len(b.decode_round_ms) == b.rounds == 20 and all(t > 0 for t in b.decode_round_ms), name
    sessions = {b.session for _, b in measured}
    assert len(sessions) == 1, sessions  # timed interleaved, side by side: paired round by round
    ratio = paired_ratio(llama_report.source_benchmark[0], llama_report.artifacts[0].benchmarks[0], "decode")
    assert ratio is not None and ratio.paired and ratio.rounds == 20


def test_the_console_markdown_and_html_show_a_decoders_prefill_and_decode(llama_run, llama_report):
    stdout, _ = llama_run
    lines = [line for line in stdout.splitlines() if line.startswith("benchmark ")]
    assert len(lines) == 3, stdout
    for line, (_, b) in zip(lines, _every_benchmark(llama_report)):
        assert f" decode_tokens_per_s={b.decode_tokens_per_s:.4g} " in line and " decode_steps=32" in line, line
        assert f" prefill_ms={b.prefill_ms_p50:.4g} " in line and " prefill_tokens=32" in line, line
    compact = _plain(lambda console: print_summary(llama_report, console, "out/report.json"))
    source = llama_report.source_benchmark[0]
    assert any(line.startswith("source p50_ms=") and f"decode_tokens_per_s={source.decode_tokens_per_s:.4g}" in line for line in compact)
    onnx = next(line for line in compact if line.startswith("onnx "))
    assert f"decode_tokens_per_s={llama_report.artifacts[0].benchmarks[0].decode_tokens_per_s:.4g}" in onnx
    table = Console(file=io.StringIO(), force_terminal=True, width=300)
    print_summary(llama_report, table, "out/report.json", verbose=True)
    assert "decode tok/s (95%)" in table.file.getvalue() and "prefill ms (95%)" in table.file.getvalue()

    rows = _markdown_table(render_markdown(llama_report), "prefill ms (95%)")
    header = rows[0]
    assert header[-4:] == ["prefill ms (95%)", "decode tok/s (95%)", "decode vs source", "note"], header
    for row, (_, b) in zip(rows[1:], _every_benchmark(llama_report)):
        cells = dict(zip(header, row))
        assert cells["prefill ms (95%)"] == b.prefill() and "at 32 tokens" in cells["prefill ms (95%)"]
        low, high = b.decode_tokens_per_s_interval
        assert cells["decode tok/s (95%)"] == f"{b.decode_tokens_per_s:.4g} tok/s ({low:.4g}–{high:.4g}) over 32 steps"
    page = render_html(llama_report)
    assert "decode tokens / s (95% interval)" in page and "prefill ms (95% interval)" in page
    for _, b in _every_benchmark(llama_report):
        assert b.decode() in page and b.prefill() in page


# --- the plan of the prefill's and the decode's sizes ----------------------------------------------------------------


def test_the_decode_plan_is_32_and_32_tokens_where_the_model_takes_them():
    assert plan_decode(SETTINGS, 7, "S", [{"S": (1, 128), PAST: (0, None)}]) == (DecodePlan(32, 32, 7), "")
    assert plan_decode(SETTINGS, 0, "S", [{}]) == (DecodePlan(32, 32, 0), "")  # no bound at all


@pytest.mark.parametrize(
    "bounds, length, steps",
    [
        ([{"S": (1, 40), PAST: (0, None)}], 20, 20),  # 40 positions: the prompt keeps its half
        ([{"S": (1, 16)}], 8, 8),
        ([{"S": (1, 128)}, {PAST: (0, 23)}], 12, 12),  # an artifact's bound: a past of 23 at most, so 24 tokens in all
        ([{"S": (1, 128)}, {"S": (1, 30)}], 15, 15),  # the narrowest of the source's and the artifacts' bounds
    ],
)
def test_the_decode_plan_fits_the_narrowest_bound_of_the_source_and_every_artifact(bounds, length, steps):
    plan, why = plan_decode(SETTINGS, 0, "S", bounds)
    assert (plan.length, plan.steps, why) == (length, steps, "")


def test_a_model_of_one_position_has_no_decode_plan_and_says_why():
    plan, why = plan_decode(SETTINGS, 0, "S", [{"S": (1, 1)}])
    assert plan is None and "no prefill and decode benchmark" in why and "S up to 1" in why


# --- the steps: what each is fed, and their timing on a fake clock -----------------------------------------------------


class FakeDecoder:
    """A decoder with a cache whose every call advances a fake clock by ``ms`` per new token, and records its feeds."""

    def __init__(self, clock: list[float], ms: float, layout: CacheLayout = LAYOUT):
        self.clock, self.ms, self.layout, self.feeds = clock, ms, layout, []

    def __call__(self, feed: dict) -> dict:
        self.feeds.append(feed)
        batch, new = feed["input_ids"].shape
        self.clock[0] += self.ms / 1e3 * (1 + 0.1 * (new > 1))
        past = feed["past_key_values.0.key"].shape[2]
        present = {
            name.replace("past_key_values", "present"): np.zeros((batch, heads, past + new, dim), np.float32)
            for name, (heads, dim) in self.layout.past_shapes().items()
        }
        return {"logits": np.zeros((batch, new, self.layout.vocab_size), np.float32), **present}


def _source(layout: CacheLayout = LAYOUT):
    return SimpleNamespace(generation=layout, generation_inputs=lambda seed: (np.zeros((2, 5), np.int64), {}))


def test_each_decode_step_takes_the_cache_the_step_before_returned_and_starts_over_from_the_prefills():
    feeds = DecodeFeeds.of(_source(), DecodePlan(length=6, steps=3, seed=0))
    decoder = FakeDecoder([0.0], 1.0)
    prefill, step = feeds.runs(decoder)
    assert feeds.prefill["input_ids"].shape == (1, 6) and feeds.prefill["past_key_values.1.value"].shape == (1, 2, 0, 4)
    for _ in range(7):
        step()
    fed = decoder.feeds[1:]  # after the prefill run for the decode's cache
    assert [f["past_key_values.0.key"].shape[2] for f in fed] == [6, 7, 8, 6, 7, 8, 6]
    assert [f["attention_mask"].shape[1] for f in fed] == [7, 8, 9, 7, 8, 9, 7]
    assert [int(f["position_ids"][0, 0]) for f in fed] == [6, 7, 8, 6, 7, 8, 6]
    assert [int(f["input_ids"][0, 0]) for f in fed[:3]] == feeds.tokens[0].tolist()  # the same seeded tokens for everyone
    prefill()
    assert decoder.feeds[-1] is feeds.prefill


def test_measure_times_the_prefill_and_the_decode_steps_of_each_contender_interleaved():
    clock = [0.0]
    feeds = DecodeFeeds.of(_source(), DecodePlan(length=8, steps=4, seed=0))
    fast, slow = FakeDecoder(clock, 0.5), FakeDecoder(clock, 2.0)
    contenders = [
        Contender(rm.Benchmark(runtime=name, device="cpu"), decoder, generates=True) for name, decoder in (("fast", fast), ("slow", slow))
    ]
    measure(contenders, PLAN, SETTINGS, "s", clock=lambda: clock[0], feeds=feeds)
    fast_record, slow_record = (c.record for c in contenders)
    assert fast_record.decode_tokens_per_s == pytest.approx(2000) and slow_record.decode_tokens_per_s == pytest.approx(500)
    assert fast_record.prefill_ms_p50 == pytest.approx(0.55) and slow_record.prefill_ms_p50 == pytest.approx(2.2)
    assert (fast_record.prefill_length, fast_record.decode_steps) == (8, 4)
    assert len(fast_record.decode_round_ms) == SETTINGS.rounds
    ratio = paired_ratio(fast_record, slow_record, "decode")
    assert ratio.paired and ratio.ratio == pytest.approx(4.0) and not ratio.within_noise


def test_a_decoder_whose_step_fails_fails_its_benchmark_and_leaves_no_decode_figure():
    clock = [0.0]
    feeds = DecodeFeeds.of(_source(), DecodePlan(length=8, steps=4, seed=0))
    good = FakeDecoder(clock, 1.0)

    def no_cache_out(feed):
        outputs = good(feed)
        return outputs if feed["input_ids"].shape[1] > 1 or feed is feeds.prefill else {"logits": outputs["logits"]}

    broken = Contender(rm.Benchmark(runtime="broken", device="cpu"), no_cache_out, generates=True)
    other = Contender(rm.Benchmark(runtime="fine", device="cpu"), FakeDecoder(clock, 1.0), generates=True)
    measure([broken, other], PLAN, SETTINGS, "s", clock=lambda: clock[0], feeds=feeds)
    assert broken.record.status == "failed" and "no output 'present.0.key'" in broken.record.reason
    assert "the decode (8-token prefill, 4 steps)" in broken.record.reason
    assert broken.record.decode_tokens_per_s is None and broken.record.latency_ms_p50 is not None
    assert other.record.status == "ok" and other.record.decode_tokens_per_s == pytest.approx(1000)


def test_a_contender_that_does_not_generate_is_timed_as_before():
    clock = [0.0]
    feeds = DecodeFeeds.of(_source(), DecodePlan(length=8, steps=4, seed=0))
    contender = Contender(rm.Benchmark(runtime="rt", device="cpu"), FakeDecoder(clock, 1.0), generates=False)
    measure([contender], PLAN, SETTINGS, "s", clock=lambda: clock[0], feeds=feeds)
    assert contender.record.latency_ms_p50 is not None
    assert all(getattr(contender.record, name) is None for name in (*FIELDS, "prefill_length", "decode_steps"))


def _session_source(generation_inputs) -> SimpleNamespace:
    """A source as benchmark_session takes it: a fake decoder on the real clock."""
    return SimpleNamespace(
        info=SimpleNamespace(framework="fake"),
        pinned_threads=lambda threads: contextlib.nullcontext(False),
        run=FakeDecoder([0.0], 0.0),
        generation=LAYOUT,
        generation_inputs=generation_inputs,
    )


def test_a_session_of_a_decoder_times_the_sources_own_prefill_and_decode():
    source = _session_source(lambda seed: (np.zeros((2, 5), np.int64), {}))
    plan = dataclasses.replace(PLAN, decode=DecodePlan(length=6, steps=4, seed=0))
    (record,) = benchmark_session(source, [Entry(None, None, "cpu")], plan, dataclasses.replace(SETTINGS, seconds=0.02), "s")
    assert record.runtime == "fake (source)" and record.status == "ok" and record.reason == ""
    assert (record.prefill_length, record.decode_steps) == (6, 4) and record.prefill_ms_p50 > 0 and record.decode_tokens_per_s > 0
    assert max(f["past_key_values.0.key"].shape[2] for f in source.run.feeds) == 9  # the cache of the 4th step: 6 + 3


def test_a_decoder_whose_decode_inputs_cannot_be_made_is_timed_without_and_says_why():
    def broken(seed):
        raise RuntimeError("no encoder")

    plan = dataclasses.replace(PLAN, decode=DecodePlan(length=6, steps=4, seed=0))
    (record,) = benchmark_session(
        _session_source(broken), [Entry(None, None, "cpu")], plan, dataclasses.replace(SETTINGS, seconds=0.02), "s"
    )
    assert record.status == "ok" and record.latency_ms_p50 is not None and record.decode_tokens_per_s is None
    assert record.reason == "no prefill and decode benchmark: their inputs could not be made: RuntimeError: no encoder"


# --- --optimize auto: a decoder's candidates ranked by decode speed --------------------------------------------------


def _bench(latency_ms: float, tokens_per_s: float | None, rounds: list[float] | None = None, session: str = "s") -> rm.Benchmark:
    """A benchmark timed in ``session`` with a latency and (a decoder's) decode speed; ``rounds`` its per-round step
    times (by default 20 rounds of exactly its step time, i.e. no noise)."""
    step_ms = 1e3 / tokens_per_s if tokens_per_s else None
    return rm.Benchmark(
        runtime="onnxruntime",
        device="cpu",
        session=session,
        rounds=20,
        latency_ms_p50=latency_ms,
        latency_ms_interval=[latency_ms * 0.98, latency_ms * 1.02],
        round_ms=[latency_ms] * 20,
        decode_steps=32 if tokens_per_s else None,
        prefill_length=32 if tokens_per_s else None,
        prefill_ms_p50=latency_ms * 3 if tokens_per_s else None,
        decode_tokens_per_s=tokens_per_s,
        decode_tokens_per_s_interval=[tokens_per_s * 0.98, tokens_per_s * 1.02] if tokens_per_s else None,
        decode_round_ms=rounds if rounds is not None else ([step_ms] * 20 if step_ms else []),
    )


def _candidates(benches: dict[str, rm.Benchmark], precisions: dict[str, str]) -> list[rm.AutoCandidate]:
    return [
        rm.AutoCandidate(
            name=name,
            format="onnx",
            precision=precisions[name],
            status="lost",
            device="cpu",
            latency_ms_p50=b.latency_ms_p50,
            decode_tokens_per_s=b.decode_tokens_per_s,
            decode_tokens_per_s_interval=b.decode_tokens_per_s_interval,
        )
        for name, b in benches.items()
    ]


PRECISIONS = {"none": "fp32", "int8": "int8", "int4": "int4", "fp16": "fp16"}


def test_auto_ranks_a_decoders_candidates_by_decode_speed_not_latency():
    # int8 has the lowest latency at the export shape but decodes slowest; int4 decodes fastest
    benches = {"none": _bench(1.0, 1000), "int8": _bench(0.5, 800), "int4": _bench(2.0, 2000)}
    ranked = rank(_candidates(benches, PRECISIONS), benches)
    assert [c.name for c in ranked] == ["int4", "none", "int8"] and [c.rank for c in ranked] == [1, 2, 3]
    assert ranked[0].status == "chosen" and ranked[0].reason.startswith("the fastest candidate that passed validation: decode 2000")
    assert ranked[1].reason.startswith("slower: decode 1000 tokens/s") and ranked[2].reason.startswith("slower: decode 800 tokens/s")
    assert ranked[1].decode_vs_chosen.ratio == pytest.approx(2.0) and ranked[1].decode_vs_chosen.paired
    assert ranked[2].vs_chosen.ratio == pytest.approx(0.25)  # vs_chosen stays the latency's ratio


def test_auto_prefers_the_simpler_decoder_candidate_as_fast_within_the_decodes_noise():
    noisy = [0.5 * (1 + 0.05 * ((i % 5) - 2)) for i in range(20)]  # step times about 0.5 ms, 2000 tokens/s
    faster_by_a_hair = [t * 0.99 for t in noisy[::-1]]
    benches = {
        "none": _bench(3.0, 2000, noisy),
        "int8": _bench(1.0, 2020, faster_by_a_hair),  # far faster at the export shape: latency does not rank a decoder
    }
    ranked = rank(_candidates(benches, PRECISIONS), benches)
    assert [c.name for c in ranked] == ["none", "int8"]
    assert "as fast as the fastest (int8) within the noise: its decode time per token" in ranked[0].reason
    assert ranked[1].decode_vs_chosen.within_noise and "none is simpler" in ranked[1].reason
    assert not ranked[1].vs_chosen.within_noise  # its latency is three times better, which does not count here


def test_int4_is_the_least_simple_precision():
    benches = {"int8": _bench(1.0, 1000), "int4": _bench(1.0, 1000)}
    assert rank(_candidates(benches, PRECISIONS), benches)[0].name == "int8"


def test_a_decoder_candidate_with_no_decode_figure_ranks_last():
    benches = {"none": _bench(1.0, 1000), "int8": _bench(0.1, None)}
    benches["int8"].reason = "no prefill and decode benchmark: the artifact fixes axis 1 of 'input_ids' at 1"
    ranked = rank(_candidates(benches, PRECISIONS), benches)
    assert [c.name for c in ranked] == ["none", "int8"] and ranked[1].decode_vs_chosen is None
    assert ranked[1].reason.startswith("no decode speed was measured (no prefill and decode benchmark: the artifact fixes axis 1")


def test_a_models_candidates_without_decode_figures_are_ranked_by_latency_as_before():
    benches = {"none": _bench(1.0, None), "int8": _bench(0.5, None)}
    ranked = rank(_candidates(benches, PRECISIONS), benches)
    assert [c.name for c in ranked] == ["int8", "none"] and ranked[0].reason == "the fastest candidate that passed validation"
    assert ranked[1].decode_vs_chosen is None


def test_choose_carries_the_decode_figures_and_says_its_criterion():
    source = _bench(4.0, 250)
    source.runtime = "torch (source)"
    report = rm.Report(
        tool_version="0",
        created_at="2026-11-27T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=["cpu"]),
        source_benchmark=[source],
        artifacts=[
            rm.ArtifactRecord(format="onnx", passed=True, benchmarks=[_bench(1.0, 1000)]),
            rm.ArtifactRecord(
                format="onnx", optimization="int8", candidate=True, precision="int8", passed=True, benchmarks=[_bench(0.5, 500)]
            ),
        ],
    )
    ctx = SimpleNamespace(report=report, stages=SimpleNamespace(records=[]), candidates={})
    choose(ctx)
    auto = report.auto
    assert auto.criterion == rm.DECODE_CRITERION and auto.chosen == "none"
    none, int8 = auto.candidates
    assert (none.decode_tokens_per_s, none.decode_speedup_vs_source, none.prefill_ms_p50) == (1000, 4.0, 3.0)
    assert none.decode_tokens_per_s_interval == [980.0, 1020.0] and int8.decode_speedup_vs_source == 2.0
    assert none.speedup_vs_source == 4.0  # the latency's, as for any model
    rendered = render_markdown(report), render_html(report), "\n".join(_plain(lambda c: print_summary(report, c, verbose=True)))
    assert "decode tokens / s (95% interval)" in rendered[1] and "1000 tok/s (980–1020)" in rendered[1]
    assert "decode_tokens_per_s=1000 decode_vs_source=4.00x" in rendered[2]


# --- any other model: nothing changes ----------------------------------------------------------------------------------


def test_the_renderings_of_a_model_that_is_no_decoder_show_no_decode():
    report = rm.Report(
        tool_version="0",
        created_at="2026-11-27T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=["cpu"]),
        source_benchmark=[_bench(2.0, None)],
        artifacts=[rm.ArtifactRecord(format="onnx", passed=True, benchmarks=[_bench(1.0, None)])],
    )
    ctx = SimpleNamespace(report=report, stages=SimpleNamespace(records=[]), candidates={})
    choose(ctx)
    assert report.auto.criterion == rm.AutoSelection().criterion
    for benchmark in (*report.source_benchmark, *report.artifacts[0].benchmarks):  # the helper's figures, all none
        benchmark.peak_memory_mb, benchmark.throughput_per_s, benchmark.latency_ms_p90, benchmark.latency_ms_p99 = 1.0, 10.0, 1.0, 1.0
    verbose = "\n".join(_plain(lambda c: print_summary(report, c, verbose=True)))
    compact = "\n".join(_plain(lambda c: print_summary(report, c)))
    table = Console(file=io.StringIO(), force_terminal=True, width=300)
    print_summary(report, table, verbose=True)
    for text in (render_markdown(report), render_html(report), verbose, compact, table.file.getvalue()):
        assert "decode" not in text.lower() and "prefill" not in text.lower()
    assert _markdown_table(render_markdown(report), "p50 ms")[0][-1] == "note"


def _plain(render) -> list[str]:
    console = Console(file=io.StringIO(), width=100_000)
    render(console)
    return console.file.getvalue().splitlines()


def _markdown_table(markdown: str, column: str) -> list[list[str]]:
    """The rows (header first) of the first Markdown table with ``column`` in its header, as cell texts."""
    tokens = MarkdownIt("commonmark").enable("table").parse(markdown)
    tables, rows, row, inside = [], [], None, None
    for token in tokens:
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            inside = token.content
            row.append(inside.replace("\\", ""))
        elif token.type == "tr_close":
            rows.append(row)
            row = None
        elif token.type == "table_close":
            tables.append(rows)
    return next(t for t in tables if column in t[0])


# --- the gate's budgets on a decoder's prefill and decode ----------------------------------------------------------------


def test_a_gate_budget_judges_a_decoders_prefill_and_decode_on_their_intervals(llama_report):
    from convert.gate.budgets import budget_results
    from convert.policy import ArtifactBudget

    record = next(a for a in llama_report.artifacts if a.key == "onnx")
    (bench,) = record.benchmarks
    met = ArtifactBudget(
        decode_tokens_per_s=bench.decode_tokens_per_s_interval[0] / 2, prefill_ms_p50={"cpu": bench.prefill_ms_interval[1] * 2}
    )
    assert met.timed()
    results = budget_results("onnx", record, met, set(), [])
    assert [(r.metric, r.kind, r.status, r.interval) for r in results] == [
        ("prefill_ms_p50", "latency", "passed", bench.prefill_ms_interval),
        ("decode_tokens_per_s", "throughput", "passed", bench.decode_tokens_per_s_interval),
    ]
    assert [r.shape for r in results] == ["B=1, 32 prompt tokens", "B=1, 32 decode steps"]
    missed = ArtifactBudget(decode_tokens_per_s=bench.decode_tokens_per_s_interval[1] * 2, prefill_ms_p50=bench.prefill_ms_interval[0] / 2)
    results = budget_results("onnx", record, missed, set(), [])
    assert [(r.metric, r.status) for r in results] == [("prefill_ms_p50", "failed"), ("decode_tokens_per_s", "failed")]
    assert all("whole 95% interval" in r.reason for r in results)


def test_a_decode_budget_on_a_model_that_does_not_generate_is_not_measured():
    from convert.gate.budgets import budget_results
    from convert.policy import ArtifactBudget

    bench = rm.Benchmark(runtime="onnxruntime", device="cpu", status="ok", shape="B=2", latency_ms_p50=1.0)
    record = SimpleNamespace(benchmarks=[bench])
    (result,) = budget_results("onnx", record, ArtifactBudget(decode_tokens_per_s=10), set(), [])
    assert result.status == "skipped" and "text-generation-with-past" in result.reason
