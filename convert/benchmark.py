"""Latency, throughput and peak memory of the source model and of every artifact that passed validation.

Everything of one device is measured in one process, in one session: every runtime is loaded, warmed up, and then
timed interleaved, in rounds (A B C, B C A, C A B …), each round a block of runs of each, so that the machine's slow
moments fall on all of them alike and two of them can be compared round by round (convert/timing.py). Every runtime
that lets it be set runs on the same intra-op thread count, on the same inputs, so the figures compare runtimes, not
settings. Latency is measured at the export shape; throughput at a larger batch (the first input's leading symbolic
dim set to ``batch``) where the model has one.
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from convert import timing
from convert.artifacts import Artifact
from convert.reports import model as rm
from convert.validators import generate_feed


@dataclass(frozen=True)
class BenchmarkSettings:
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    warmup: int = 3
    rounds: int = 20  # interleaved rounds: each contender's p50 gets an interval from this many round medians
    seconds: float = 2.0  # each contender's timed runs, summed over the rounds, last about this long (at least one a round)
    max_runs: int = 500
    batch: int = 8  # size of the batch dim for the throughput measurement
    idle_gap_s: float = 0.002  # between two blocks: a runtime's spinning worker threads go idle before the next is timed


@dataclass
class BenchmarkPlan:
    """The inputs every runtime is measured on."""

    latency_feed: dict[str, np.ndarray]
    latency_shape: str
    throughput_feed: dict[str, np.ndarray] | None
    throughput_shape: str
    throughput_items: int  # batch items per throughput run


def plan_benchmark(signature, export_sizes: dict[str, int], latency_feed, settings: BenchmarkSettings, seed: int) -> BenchmarkPlan:
    describe = lambda sizes: ",".join(f"{k}={v}" for k, v in sizes.items()) or "static"  # noqa: E731
    batch_symbol = next((s.dims[0] for s in signature.inputs if s.dims and isinstance(s.dims[0], str)), None)
    if batch_symbol is None:
        return BenchmarkPlan(latency_feed, describe(export_sizes), None, "", 1)
    sizes = {**export_sizes, batch_symbol: settings.batch}
    return BenchmarkPlan(
        latency_feed, describe(export_sizes), generate_feed(signature.inputs, sizes, 0, seed), describe(sizes), settings.batch
    )


class _PeakMemory:
    """Peak resident memory growth over the value on entry, sampled by a thread every few milliseconds."""

    def __enter__(self) -> _PeakMemory:
        import psutil

        self._process = psutil.Process()
        self.baseline = self.peak = self._process.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._process.memory_info().rss)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)

    @property
    def growth_mb(self) -> float:
        return round((self.peak - self.baseline) / 2**20, 1)


@dataclass
class Contender:
    """One thing timed in a session: the source's own run, or an artifact on a runtime and device."""

    record: rm.Benchmark
    infer: Callable[[dict], object]
    takes_throughput_batch: bool = True
    failed: bool = False


@dataclass
class Timings:
    runs_ms: list[float] = field(default_factory=list)
    round_ms: list[float] = field(default_factory=list)


def interleaved(
    runs: list[Callable[[], object]], settings: BenchmarkSettings, clock: Callable[[], float] = time.perf_counter
) -> list[Timings | Exception]:
    """Time each of ``runs`` in ``settings.rounds`` rounds, in an order rotated every round; each round runs a block of
    each, sized from its warm-up so that its timed runs last about ``settings.seconds`` in all, after one untimed run
    where the block has more than one (a run long enough to be timed alone pays the wake-up on its own). A run that
    raises leaves the rounds with its exception in its place."""
    results: list[Timings | Exception] = [Timings() for _ in runs]
    blocks = []
    for index, run in enumerate(runs):
        try:
            warmup = [_duration(run, clock) for _ in range(settings.warmup)]
        except Exception as exc:  # reported on its record, the others go on
            results[index] = exc
            blocks.append(0)
            continue
        # the fastest warm-up run: a slow one (a JIT compiling, a descheduled thread) would shrink the block, and a
        # block of two runs has no robust median
        each = min(warmup) if warmup else 0.0
        per_round = settings.seconds / settings.rounds / each if each > 0 else 1
        blocks.append(max(1, min(math.ceil(per_round), settings.max_runs // settings.rounds)))
    for round_index in range(settings.rounds):
        shift = round_index % len(runs)
        for index in [*range(shift, len(runs)), *range(shift)]:
            timings = results[index]
            if isinstance(timings, Exception):
                continue
            try:
                if blocks[index] > 1:  # after the others' blocks its caches are cold and its threads asleep: not timed
                    runs[index]()
                block = [_duration(runs[index], clock) * 1e3 for _ in range(blocks[index])]
            except Exception as exc:
                results[index] = exc
                continue
            timings.runs_ms += block
            timings.round_ms.append(statistics.median(block))
            time.sleep(settings.idle_gap_s)
    return results


def _duration(run: Callable[[], object], clock: Callable[[], float]) -> float:
    begin = clock()
    run()
    return clock() - begin


def measure(
    contenders: list[Contender],
    plan: BenchmarkPlan,
    settings: BenchmarkSettings,
    session: str,
    clock: Callable[[], float] = time.perf_counter,
) -> None:
    """Latency of every contender at the export shape, then throughput at the batch, each interleaved; ``clock`` is
    what the runs are timed with."""
    latency = interleaved([lambda c=c: c.infer(plan.latency_feed) for c in contenders], settings, clock)
    for contender, result in zip(contenders, latency):
        record = contender.record
        if isinstance(result, Exception):
            contender.failed = True
            record.status, record.reason = "failed", f"{type(result).__name__}: {result}"
            continue
        p50, p90, p99 = (float(q) for q in np.percentile(result.runs_ms, (50, 90, 99)))
        interval = timing.p50_interval(result.round_ms, p50)
        record.shape, record.warmup, record.runs, record.rounds, record.session = (
            plan.latency_shape,
            settings.warmup,
            len(result.runs_ms),
            len(result.round_ms),
            session,
        )
        record.latency_ms_p50, record.latency_ms_p90, record.latency_ms_p99 = (round(q, 4) for q in (p50, p90, p99))
        record.latency_ms_interval = [round(interval[0], 4), round(interval[1], 4)]
        record.round_ms = [round(t, 4) for t in result.round_ms]
        cv = timing.coefficient_of_variation(result.round_ms)
        record.latency_cv = round(cv, 4) if cv is not None else None
        record.unstable = timing.is_unstable(record.latency_ms_p50, interval)
        record.throughput_shape = plan.latency_shape
        record.throughput_per_s = round(1e3 / record.latency_ms_p50, 2)
        record.throughput_interval = [round(1e3 / interval[1], 2), round(1e3 / interval[0], 2)]
    batched = [c for c in contenders if not c.failed and c.takes_throughput_batch]
    if plan.throughput_feed is None or not batched:
        return
    throughput = interleaved([lambda c=c: c.infer(plan.throughput_feed) for c in batched], settings, clock)
    for contender, result in zip(batched, throughput):
        record = contender.record
        if isinstance(result, Exception):
            record.status, record.reason = "failed", f"throughput at {plan.throughput_shape}: {type(result).__name__}: {result}"
            # no throughput at the batch: the figure from the latency runs must not stand in for it in a budget
            record.throughput_shape, record.throughput_per_s, record.throughput_interval = "", None, None
            continue
        seconds = statistics.median(result.runs_ms) / 1e3
        low, high = timing.p50_interval(result.round_ms, seconds * 1e3)
        record.throughput_shape, record.throughput_per_s = plan.throughput_shape, round(plan.throughput_items / seconds, 2)
        record.throughput_interval = [round(plan.throughput_items * 1e3 / high, 2), round(plan.throughput_items * 1e3 / low, 2)]


@dataclass(frozen=True)
class Entry:
    """What a session times: ``runner_class`` None for the source's own run."""

    runner_class: type | None
    artifact: Artifact | None
    device: str


def benchmark_session(source, entries: list[Entry], plan: BenchmarkPlan, settings: BenchmarkSettings, session: str) -> list[rm.Benchmark]:
    """Load every entry, then time them all interleaved; one that cannot load or run is reported, the others go on.
    All are loaded at once: the session holds every artifact in memory while it runs."""
    records, contenders, runners = [], [], []
    with source.pinned_threads(settings.threads) as source_pinned:
        try:
            for entry in entries:
                record, contender = _load(source, source_pinned, entry, plan, settings, runners)
                records.append(record)
                if contender is not None:
                    contenders.append(contender)
            if contenders:
                measure(contenders, plan, settings, session)
        finally:
            for runner in runners:
                runner.deactivate()
    return records


def _load(source, source_pinned: bool, entry: Entry, plan: BenchmarkPlan, settings: BenchmarkSettings, runners: list):
    if entry.runner_class is None:
        record = rm.Benchmark(
            runtime=f"{source.info.framework} (source)",
            device="cpu",
            threads=settings.threads if source_pinned else None,
            memory_scope="one run (the model was loaded before)",
        )
        infer, throughput = source.run, True
    else:
        pinned = entry.runner_class.pins_threads and entry.device == "cpu"
        record = rm.Benchmark(
            runtime=entry.runner_class.name,
            device=entry.device,
            threads=settings.threads if pinned else None,
            memory_scope="loading and one run",
        )
        runner = entry.runner_class(entry.artifact, entry.device, threads=settings.threads if pinned else None)
        infer = runner.infer
        throughput = plan.throughput_feed is None or not entry.artifact.fixed_dims_mismatch(
            {n: a.shape for n, a in plan.throughput_feed.items()}
        )
    try:
        with _PeakMemory() as memory:
            if entry.runner_class is not None:
                runner.activate()
                runners.append(runner)
            infer(plan.latency_feed)
        record.peak_memory_mb = memory.growth_mb
    except Exception as exc:  # a benchmark that cannot run is reported, it does not stop the others
        record.status, record.reason = "failed", f"{type(exc).__name__}: {exc}"
        return record, None
    return record, Contender(record, infer, throughput)
