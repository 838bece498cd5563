"""Latency, throughput and peak memory of the source model and of every artifact that passed validation.

Everything is measured in this process, one runtime at a time, with the same intra-op thread count for every
runtime that lets it be set, after warm-up runs, on the same inputs — so the figures compare runtimes, not
settings. Latency is measured at the export shape; throughput at a larger batch (the first input's leading
symbolic dim set to ``batch``) where the model has one.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from convert.artifacts import Artifact
from convert.reports import model as rm
from convert.validators import generate_feed


@dataclass(frozen=True)
class BenchmarkSettings:
    threads: int = field(default_factory=lambda: os.cpu_count() or 1)
    warmup: int = 3
    min_runs: int = 10
    seconds: float = 2.0  # timed runs continue until both min_runs and this many seconds are reached
    max_runs: int = 500
    batch: int = 8  # size of the batch dim for the throughput measurement


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


def _timed(run: Callable[[], object], settings: BenchmarkSettings) -> list[float]:
    for _ in range(settings.warmup):
        run()
    times: list[float] = []
    started = time.perf_counter()
    while len(times) < settings.min_runs or (time.perf_counter() - started < settings.seconds and len(times) < settings.max_runs):
        begin = time.perf_counter()
        run()
        times.append(time.perf_counter() - begin)
    return times


def _measure(record: rm.Benchmark, infer: Callable[[dict], object], plan: BenchmarkPlan, settings: BenchmarkSettings) -> None:
    latencies = np.array(_timed(lambda: infer(plan.latency_feed), settings)) * 1e3
    record.shape, record.warmup, record.runs = plan.latency_shape, settings.warmup, len(latencies)
    record.latency_ms_p50, record.latency_ms_p90, record.latency_ms_p99 = (
        round(float(np.percentile(latencies, q)), 4) for q in (50, 90, 99)
    )
    if plan.throughput_feed is not None:
        seconds = float(np.median(_timed(lambda: infer(plan.throughput_feed), settings)))
        record.throughput_shape, record.throughput_per_s = plan.throughput_shape, round(plan.throughput_items / seconds, 2)
    else:
        record.throughput_shape = plan.latency_shape
        record.throughput_per_s = round(1e3 / float(np.median(latencies)), 2)


def benchmark_source(source, plan: BenchmarkPlan, settings: BenchmarkSettings) -> rm.Benchmark:
    """The source framework's own run (torch eager, Keras, JAX jit) on the CPU; the model is already loaded."""
    record = rm.Benchmark(runtime=f"{source.info.framework} (source)", device="cpu", memory_scope="while running (loaded before)")
    try:
        with source.pinned_threads(settings.threads) as pinned, _PeakMemory() as memory:
            record.threads = settings.threads if pinned else None
            _measure(record, source.run, plan, settings)
        record.peak_memory_mb = memory.growth_mb
    except Exception as exc:  # a benchmark that cannot run is reported, it does not stop the run
        record.status, record.reason = "failed", f"{type(exc).__name__}: {exc}"
    return record


def benchmark_artifact(runner_class, artifact: Artifact, device: str, plan: BenchmarkPlan, settings: BenchmarkSettings) -> rm.Benchmark:
    """Load the artifact on the device, then time it; the throughput batch is skipped where the artifact cannot take it."""
    pinned = runner_class.pins_threads and device == "cpu"
    record = rm.Benchmark(
        runtime=runner_class.name, device=device, threads=settings.threads if pinned else None, memory_scope="loading and running"
    )
    if plan.throughput_feed is not None and artifact.fixed_dims_mismatch({n: a.shape for n, a in plan.throughput_feed.items()}):
        plan = BenchmarkPlan(plan.latency_feed, plan.latency_shape, None, "", 1)
    runner = runner_class(artifact, device, threads=settings.threads if pinned else None)
    try:
        with _PeakMemory() as memory:
            runner.activate()
            try:
                _measure(record, runner.infer, plan, settings)
            finally:
                runner.deactivate()
        record.peak_memory_mb = memory.growth_mb
    except Exception as exc:  # a benchmark that cannot run is reported, it does not stop the run
        record.status, record.reason = "failed", f"{type(exc).__name__}: {exc}"
    return record
