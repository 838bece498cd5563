"""Latency, throughput and peak memory of the source model and of every artifact that passed validation.

Everything of one device is measured in one process, in one session: every runtime is loaded, warmed up, and then
timed interleaved, in rounds (A B C, B C A, C A B …), each round a block of runs of each, so that the machine's slow
moments fall on all of them alike and two of them can be compared round by round (convert/timing.py). Every runtime
that lets it be set runs on the same intra-op thread count, on the same inputs, so the figures compare runtimes, not
settings. Latency is measured at the export shape; throughput at a larger batch (the first input's leading symbolic
dim set to ``batch``) where the model has one.

A decoder with a cache (the source's ``generation`` layout) is also measured as it generates, on one prompt (batch 1):
the prefill (one call on a prompt of ``prefill_length`` tokens, the cache empty) and the decode (``decode_steps`` calls
of one new token each, every one given the cache the one before returned, starting from the prefill's, and over again
from the prefill's once it has made ``decode_steps``), each timed interleaved in rounds like the latency, on the same
tokens for every contender (convert/validators/generation.py builds each step's feed, as the generation check does).
A decode step is the run the rounds time, so the decode costs what a latency measurement costs however slow a step is;
its tokens per second are one over a step's p50. The prefill and the decode share the time one latency measurement takes.
"""

from __future__ import annotations

import dataclasses
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
    prefill_length: int = 32  # a decoder's prefill: prompt tokens (batch 1), fewer where the model takes fewer
    decode_steps: int = 32  # a decoder's decode: tokens generated one a step after the prefill, fewer where it takes fewer


@dataclass(frozen=True)
class DecodePlan:
    """A decoder's prefill and decode: the seeded prompt of ``length`` tokens, then ``steps`` seeded tokens one a step."""

    length: int
    steps: int
    seed: int


@dataclass
class BenchmarkPlan:
    """The inputs every runtime is measured on."""

    latency_feed: dict[str, np.ndarray]
    latency_shape: str
    throughput_feed: dict[str, np.ndarray] | None
    throughput_shape: str
    throughput_items: int  # batch items per throughput run
    decode: DecodePlan | None = None  # a decoder's prefill and decode; None for any other model


def plan_decode(
    settings: BenchmarkSettings, seed: int, sequence: str, bounds: list[dict[str, tuple[int, int | None]]]
) -> tuple[DecodePlan | None, str]:
    """A decoder's prefill length and decode steps within ``bounds`` (the sizes each symbol may take: the source's, and
    each timed artifact's), and why there is none ("" where there is). ``sequence`` is the symbol of the new tokens
    (input_ids' second axis): the prompt is at most as long as it may be, and prompt and decoded tokens together at
    most as many as its largest size (a model's positions) and one more than the longest past (PAST) allows."""
    from convert.validators.generation import PAST

    def highest(symbol: str) -> int | None:
        highs = [b[symbol][1] for b in bounds if b.get(symbol, (None, None))[1] is not None]
        return min(highs) if highs else None

    sequence_high, past_high = highest(sequence), highest(PAST)
    total = min([h for h in (sequence_high, None if past_high is None else past_high + 1) if h is not None], default=None)
    length, steps = settings.prefill_length, settings.decode_steps
    if sequence_high is not None:
        length = min(length, sequence_high)
    if total is not None and length + steps > total:
        # both shortened in proportion: the prompt keeps its share of the positions the model has
        share = settings.prefill_length / (settings.prefill_length + settings.decode_steps)
        length = max(1, min(length, round(total * share)))
        steps = total - length
    if length < 1 or steps < 1:
        return None, (
            f"no prefill and decode benchmark: the model takes at most {total} tokens in all "
            f"({sequence} up to {sequence_high}, {PAST} up to {past_high})"
        )
    return DecodePlan(length, steps, seed), ""


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
    generates: bool = False  # a decoder's prefill and decode are timed too (it takes their shapes)


@dataclass
class DecodeFeeds:
    """What every contender's prefill and decode are given: the prefill's feed (batch 1, the cache empty), then one
    token a step [1, steps] with ``context`` (an encoder-decoder's encoder outputs) in every step."""

    plan: DecodePlan
    layout: object  # the source's CacheLayout
    prefill: dict[str, np.ndarray]
    tokens: np.ndarray
    context: dict[str, np.ndarray]

    @classmethod
    def of(cls, source, plan: DecodePlan) -> DecodeFeeds:
        from convert.validators.generation import empty_past, make_prompts, step_feed

        layout = source.generation
        tokens = make_prompts(layout, plan.seed, batch=1, length=plan.length + plan.steps)
        _, context = source.generation_inputs(plan.seed)
        context = {name: np.ascontiguousarray(value[:1]) for name, value in context.items()}  # its first prompt's
        prefill = step_feed(layout, tokens[:, : plan.length], empty_past(layout, 1), 0, context)
        return cls(plan, layout, prefill, tokens[:, plan.length :], context)

    def shapes(self) -> list[dict[str, tuple[int, ...]]]:
        """The shapes of the prefill's feed and of the last decode step's (the longest cache)."""
        from convert.validators.generation import step_feed

        cached = self.plan.length + self.plan.steps - 1
        past = {name: (1, heads, cached, dim) for name, (heads, dim) in self.layout.past_shapes().items()}
        last = step_feed(self.layout, self.tokens[:, -1:], {}, cached, self.context)
        return [{n: a.shape for n, a in self.prefill.items()}, {**{n: a.shape for n, a in last.items()}, **past}]

    def runs(self, infer: Callable[[dict], dict]) -> tuple[Callable[[], object], Callable[[], object]]:
        """(the prefill, one decode step) of one contender: each call of the step decodes the next token with the cache
        the one before returned, from the prefill's cache (the prefill is run once here, untimed, for it) and from it
        again after ``steps`` of them."""
        from convert.validators.generation import fed_back, step_feed

        empty = {name: value for name, value in self.prefill.items() if name.startswith("past_key_values.")}
        # copied: a runtime may hand back its own output buffers, which its next call overwrites
        start = {name: np.array(value, copy=True) for name, value in fed_back(infer(self.prefill), empty).items()}
        layout, tokens, context, length = self.layout, self.tokens, self.context, self.plan.length
        state = {"step": 0, "past": start}

        def decode_step() -> None:
            step, past = state["step"], state["past"]
            outputs = infer(step_feed(layout, tokens[:, step : step + 1], past, length + step, context))
            following = step + 1
            state["past"] = fed_back(outputs, past) if following < tokens.shape[1] else start
            state["step"] = following % tokens.shape[1]

        return (lambda: infer(self.prefill)), decode_step


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
    feeds: DecodeFeeds | None = None,
) -> None:
    """Latency of every contender at the export shape, then throughput at the batch, then (a decoder's ``feeds``) the
    prefill and the decode of those that generate, each interleaved; ``clock`` is what the runs are timed with."""
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
    if plan.throughput_feed is not None and batched:
        _measure_throughput(batched, plan, settings, clock)
    generating = [c for c in contenders if not c.failed and c.generates]
    if feeds is not None and generating:
        _measure_generation(generating, feeds, settings, clock)


def _measure_throughput(batched: list[Contender], plan: BenchmarkPlan, settings: BenchmarkSettings, clock: Callable[[], float]) -> None:
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
    feeds, why = None, ""
    if plan.decode is not None and source.generation is not None:
        try:
            feeds = DecodeFeeds.of(source, plan.decode)
        except Exception as exc:  # the source's encoder outputs (an encoder-decoder's) could not be made: timed without
            why = f"no prefill and decode benchmark: their inputs could not be made: {type(exc).__name__}: {exc}"
    with source.pinned_threads(settings.threads) as source_pinned:
        try:
            for entry in entries:
                record, contender = _load(source, source_pinned, entry, plan, settings, runners)
                record.reason = record.reason or why
                records.append(record)
                if contender is not None:
                    contender.generates = feeds is not None and _generates(entry, feeds, record)
                    contenders.append(contender)
            if contenders:
                measure(contenders, plan, settings, session, feeds=feeds)
        finally:
            for runner in runners:
                runner.deactivate()
    return records


def _generates(entry: Entry, feeds: DecodeFeeds, record: rm.Benchmark) -> bool:
    """Whether an entry takes the prefill's and the decode's shapes; where it does not, its record says why."""
    why = next((w for shapes in feeds.shapes() if entry.artifact is not None and (w := entry.artifact.fixed_dims_mismatch(shapes))), "")
    if why:
        record.reason = f"no prefill and decode benchmark: {why}"
    return not why


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


def _measure_generation(contenders: list[Contender], feeds: DecodeFeeds, settings: BenchmarkSettings, clock: Callable[[], float]) -> None:
    """The prefill, then the decode steps, of each contender, interleaved in rounds as the latency is; the two share
    ``settings.seconds``."""
    length, steps = feeds.plan.length, feeds.plan.steps
    what = f"the decode ({length}-token prefill, {steps} steps)"
    timed, runs = [], []
    for contender in contenders:
        try:
            runs.append(feeds.runs(contender.infer))
            timed.append(contender)
        except Exception as exc:  # the prefill that gives the decode its cache
            _generation_failed(contender.record, what, exc)
    if not timed:
        return
    half = dataclasses.replace(settings, seconds=settings.seconds / 2)
    prefills = interleaved([prefill for prefill, _ in runs], half, clock)
    decodes = interleaved([decode for _, decode in runs], half, clock)
    for contender, prefill, decode in zip(timed, prefills, decodes):
        record = contender.record
        failure = prefill if isinstance(prefill, Exception) else decode if isinstance(decode, Exception) else None
        if failure is not None:
            _generation_failed(record, what, failure)
            continue
        p50 = statistics.median(prefill.runs_ms)
        low, high = timing.p50_interval(prefill.round_ms, p50)
        record.prefill_length, record.prefill_ms_p50, record.prefill_ms_interval = length, round(p50, 4), [round(low, 4), round(high, 4)]
        per_token = statistics.median(decode.runs_ms)
        low, high = timing.p50_interval(decode.round_ms, per_token)
        record.decode_steps, record.decode_tokens_per_s = steps, round(1e3 / per_token, 2)
        record.decode_tokens_per_s_interval = [round(1e3 / high, 2), round(1e3 / low, 2)]
        record.decode_round_ms = [round(t, 4) for t in decode.round_ms]


def _generation_failed(record: rm.Benchmark, what: str, exc: Exception) -> None:
    """A decode that cannot run fails the benchmark, as a throughput run does: no figure stands in for it."""
    record.status = "failed"
    record.reason = "; ".join(r for r in (record.reason, f"{what}: {type(exc).__name__}: {exc}") if r)
