"""Optimization benchmark on CPU: a BERT-base-sized encoder (seq 128) and a ResNet-50-sized CNN, random weights,
batch 1 and 8 — the source's eager run against every artifact ``--optimize auto`` builds (ONNX Runtime and
OpenVINO, FP32, FP16 and INT8), each validated within its accuracy budget before it is timed. Then the edge
artifacts (ExecuTorch .pte with XNNPACK, FP32 and INT8; LiteRT .tflite) of a MobileNetV2-sized CNN and a small BERT
encoder beside ONNX Runtime and OpenVINO on the same model, at one thread and at every core.

    python -m benchmarks.optimize [RESULTS_FILE] [--edge-only | --server-only]

``--edge-only`` runs the edge part alone and ``--server-only`` the BERT/ResNet part alone, each keeping the other's
section of RESULTS_FILE as it is. Writes benchmarks/results/optimize.md by default.

Every figure comes from the tool's own report (``convert.convert(..., optimize=["auto"], threads=THREADS)``): the
p50 latency at the export shape and the median latency behind the batch-8 throughput figure, each with its 95%
interval from the interleaved rounds, and the tool's paired ratios. Rows are ranked by p50; rows as fast as their
neighbour (the interval of their ratio, paired where they were timed in one session, reaching within 5% of 1) share
a rank.

The compute lower bound is the model's FLOPs (torch's FlopCounterMode) over the FP32 matmul peak, measured at the
same thread count before and after the models (best of interleaved passes over torch, numpy, ONNX Runtime and
OpenVINO GEMMs, the higher of the two), and it bounds FP32 rows only. Where an FP32 row ran faster than that bound,
the peak missed what this CPU can do (measured in a slow moment, or no backend's GEMM reached a kernel the model's
runtime used): that model gets no bound. The targets (best FP32 ≤ 1.3x the bound, best INT8 ≥ 2x faster than best FP32) are judged on the intervals,
and the INT8 one only on a CPU with integer dot-product instructions (report.environment.cpu.int8_compute).
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import convert
from convert import timing
from convert.reports import model as rm
from convert.reports import ratios

THREADS = 2
BATCH = 8
DEFAULT_RESULTS = Path(__file__).parent / "results" / "optimize.md"
MODELS = {"bert": "BERT-base-sized encoder (12 layers, hidden 768, seq 128)", "resnet50": "ResNet-50-sized CNN (224x224)"}
# validation sizes: the benchmark batches, and one shorter sequence for the encoder
DIMS = {"bert": ("B=1,8", "S=128,64"), "resnet50": ("B=1,8",)}
# Both run with the default budgets. A random-weight ResNet's centred logits depend on the input for only a few
# percent of their norm, which amplifies INT8 rounding: its INT8 artifacts reach cosine 0.92-0.95, under the
# default 0.98, so they fail validation and are not timed (a property of random weights, not of a runtime).
ACCURACY: dict[str, tuple[str, ...]] = {"bert": (), "resnet50": ()}
BOUND_TARGET = 1.3  # best FP32 at most this many times the compute lower bound
INT8_TARGET = 2.0  # best INT8 at least this many times faster than the best FP32
NO_INT8_COMPUTE = "not applicable on this CPU (no VNNI/AMX/dot-product: INT8 runs widened)"


@dataclass
class Peak:
    """The FP32 matmul peak measured before and after the models; the bound uses the higher of the two."""

    before: float
    after: float
    details: dict[tuple[str, int], tuple[float, float]] = field(default_factory=dict)  # (backend, n) → (before, after)

    @property
    def gflops(self) -> float:
        return max(self.before, self.after)


def measure_peak(details: dict | None = None) -> float:
    from benchmarks import models

    return models.matmul_peak_gflops(THREADS, details=details)


def run_model(name: str, folder: Path) -> tuple[list[dict], dict]:
    """Every timed row of one model (the source's eager run and each artifact), and what auto chose and why."""
    from benchmarks import models

    model = models.build(name)
    flops = {batch: models.model_flops(model, models.example_inputs(name, batch)) for batch in (1, BATCH)}
    result = convert.convert(
        model,
        to=["onnx"],
        optimize=["auto"],
        example_inputs=models.example_inputs(name, 1),
        inputs=models.input_specs(name),
        dims=DIMS[name],
        accuracy=ACCURACY[name],
        out=folder / name,
        benchmark=True,
        threads=THREADS,
        benchmark_batch=BATCH,
        samples=2,
    )
    report = result.report
    rows = []
    for b in report.source_benchmark:
        if b.latency_ms_p50:
            rows.append(_row(name, "source", "torch eager", "fp32", b, True, None))
    for record in report.artifacts:
        cosines = [o.cosine_similarity for c in record.checks for o in c.outputs if o.cosine_similarity is not None]
        for b in record.benchmarks:
            if b.latency_ms_p50:
                rows.append(
                    _row(name, record.optimization or "none", b.runtime, record.precision, b, record.passed, min(cosines, default=None))
                )
    auto = {
        "chosen": report.auto.chosen if report.auto else None,
        "criterion": report.auto.criterion if report.auto else "",
        "candidates": list(report.auto.candidates) if report.auto else [],
        "passed": report.passed,
        "flops": flops,
        "cpu": report.environment.cpu,
        "threads": report.environment.benchmark_threads,
    }
    return rows, auto


def _row(model: str, candidate: str, runtime: str, precision: str, bench: rm.Benchmark, passed: bool, cosine: float | None) -> dict:
    """One timed artifact: its batch-1 figure (the benchmark itself) and its batch-8 one (from the throughput)."""
    return {
        "model": model,
        "candidate": candidate,
        "runtime": runtime,
        "precision": precision,
        "passed": passed,
        "figure": {1: bench, BATCH: _batch_figure(bench)},
        "memory_mb": bench.peak_memory_mb,
        "cosine": cosine,
        "compute_limit": bench.compute_limit,
    }


def _batch_figure(bench: rm.Benchmark) -> rm.Benchmark | None:
    """The median latency of one run at the throughput batch, with its interval, as a benchmark of its own (not timed
    in the latency rounds, so ratios to it come from the intervals, unpaired); None where it was not measured there."""
    if not bench.throughput_per_s or not bench.throughput_shape or bench.throughput_shape == bench.shape:
        return None
    items = BATCH  # every run here passes benchmark_batch=BATCH: the batch items of one throughput run
    interval = None
    if bench.throughput_interval:
        low, high = bench.throughput_interval
        interval = [items * 1e3 / high, items * 1e3 / low]
    p50 = items * 1e3 / bench.throughput_per_s
    return rm.Benchmark(
        runtime=bench.runtime,
        device=bench.device,
        shape=bench.throughput_shape,
        latency_ms_p50=p50,
        latency_ms_interval=interval,
        unstable=timing.is_unstable(p50, interval),
        rounds=bench.rounds,
    )


def _interval(bench: rm.Benchmark) -> tuple[float, float]:
    return tuple(bench.latency_ms_interval) if bench.latency_ms_interval else (bench.latency_ms_p50, bench.latency_ms_p50)


# ----------------------------------------------------------------------------------------------------------- judging
# Rows whose ratio's 95% interval reaches within 5% of 1 share a rank. A run's interval shows that run's noise only:
# between two runs on one machine the ratio of the same two artifacts moved by 2-3% (ResNet-50 at batch 1: OpenVINO
# FP16 over ONNX Runtime FP32 0.99 in one run, 1.01 in the next, each with an interval of ±1%), so an order that
# rests on less than that is not one the next run repeats.
SAME_SPEED = 1.05


def same_speed(ratio: rm.PairedRatio) -> bool:
    low, high = ratio.interval
    return low <= SAME_SPEED and high >= 1 / SAME_SPEED


def tied_ranks(figures: list[rm.Benchmark]) -> list[str]:
    """Rank labels for ``figures`` sorted by p50: a figure as fast as the one before it shares its rank, written
    ``k=`` (their order may change from run to run). As fast: the interval of their ratio (paired round by round where
    both were timed in one session, else from their two intervals) reaches within 5% of 1 (SAME_SPEED)."""
    ranks: list[int] = []
    for index, figure in enumerate(figures):
        if index and same_speed(ratios.paired_ratio(figures[index - 1], figure)):
            ranks.append(ranks[-1])
        else:
            ranks.append(index + 1)
    return [f"{r}=" if ranks.count(r) > 1 else str(r) for r in ranks]


def bound_ms(flops: float, peak_gflops: float) -> float:
    return flops / (peak_gflops * 1e9) * 1e3


def invalid_peak(rows: list[dict], flops: dict[int, float], peak_gflops: float) -> str:
    """Why the peak cannot bound this model ("" when it can): some FP32 row ran faster than its FLOPs allow at the peak,
    at its p50 or in its fastest rounds (the low end of the p50's interval, a round's median that happened)."""
    worst = None  # (the lowest latency / bound, row, batch, figure)
    for r in rows:
        if r["precision"] != "fp32":
            continue
        for batch, figure in r["figure"].items():
            if figure is not None and batch in flops:
                low = min(figure.latency_ms_p50, _interval(figure)[0]) / bound_ms(flops[batch], peak_gflops)
                if worst is None or low < worst[0]:
                    worst = (low, r, batch, figure)
    if worst is None or worst[0] >= 1.0:
        return ""
    _, r, batch, figure = worst
    if figure.latency_ms_p50 < bound_ms(flops[batch], peak_gflops):
        ms, at = figure.latency_ms_p50, "at its p50"
    else:
        ms, at = _interval(figure)[0], "in its fastest rounds, the low end of its p50's 95% interval"
    return (
        f"the measured peak ({peak_gflops:.1f} GFLOP/s) is below what {_name(r)} at batch {batch} achieved "
        f"({flops[batch] / ms / 1e6:.1f} GFLOP/s {at}): the peak missed what this CPU can do, so no compute bound is given"
    )


def _name(row: dict) -> str:
    return "torch eager" if row["candidate"] == "source" else f"{row['candidate']} ({row['runtime']}, {row['precision']})"


def _verdict(low: float, high: float, target: float, at_most: bool) -> str:
    """met / missed / within the noise, judged on the whole interval [low, high] against ``target``."""
    sign = "≤" if at_most else "≥"
    if (high <= target) if at_most else (low >= target):
        return f"**met** (the whole interval is {sign} {target:g}x)"
    if (low > target) if at_most else (high < target):
        return f"**missed** (the whole interval is {'>' if at_most else '<'} {target:g}x)"
    return f"**within the noise of the target** (the interval holds {target:g}x: neither met nor missed by this run)"


def bound_target(rows: list[dict], batch: int, flops: float, peak_gflops: float, invalid: str) -> str:
    """The 1.3x-the-bound target for the best FP32 artifact at ``batch``."""
    head = f"batch {batch}: best FP32 ≤ {BOUND_TARGET:g}x the compute lower bound:"
    if invalid:
        return f"{head} **not judged**: the peak is invalid"
    best = _best(rows, batch, "fp32")
    if best is None:
        return f"{head} **not judged**: no FP32 artifact was timed"
    figure, bound = best["figure"][batch], bound_ms(flops, peak_gflops)
    low, high = _interval(figure)
    return (
        f"{head} {_name(best)} at {figure.latency_ms_p50 / bound:.2f}x ({low / bound:.2f}–{high / bound:.2f}) "
        f"the bound: {_verdict(low / bound, high / bound, BOUND_TARGET, at_most=True)}"
    )


def int8_target(rows: list[dict], batch: int, cpu: rm.CpuInfo | None) -> str:
    """The ≥ 2x target for the best INT8 artifact over the best FP32 one at ``batch``: judged on the paired ratio's
    interval, and only where the CPU can compute INT8 faster than FP32."""
    head = f"batch {batch}: best INT8 ≥ {INT8_TARGET:g}x faster than the best FP32:"
    best32, best8 = _best(rows, batch, "fp32"), _best(rows, batch, "int8")
    # the best FP32's p50 over the best INT8's: how many times faster the INT8 one is
    ratio = ratios.paired_ratio(best8["figure"][batch], best32["figure"][batch]) if best32 and best8 else None
    speedup = f"{_name(best8)} is {ratios.describe_ratio(ratio)} as fast as {_name(best32)}" if ratio else ""
    if cpu is not None and cpu.known and not cpu.int8_compute:
        return f"{head} **{NO_INT8_COMPUTE}**" + (f"; for the record, {speedup}" if speedup else "")
    if best8 is None:
        return f"{head} **not judged**: no INT8 artifact passed validation and was timed"
    if ratio is None:
        return f"{head} **not judged**: no FP32 artifact was timed"
    unknown = "" if cpu is not None and cpu.known else " (the CPU's features are unknown: judged as if it had INT8 compute)"
    return f"{head} {speedup}: {_verdict(ratio.interval[0], ratio.interval[1], INT8_TARGET, at_most=False)}{unknown}"


def _best(rows: list[dict], batch: int, precision: str) -> dict | None:
    """The fastest artifact (not the source) of ``precision`` timed at ``batch``, by p50."""
    timed = [r for r in rows if r["candidate"] != "source" and r["precision"] == precision and r["figure"].get(batch)]
    return min(timed, key=lambda r: (r["figure"][batch].latency_ms_p50, r["candidate"]), default=None)


# --------------------------------------------------------------------------------------------------------- rendering
def cpu_line(cpu: rm.CpuInfo | None, threads: int | str | None) -> str:
    """The CPU, its ISA features, its usable cores and the threads used, in one sentence."""
    if cpu is None:
        from convert.hardware import cpu_info

        cpu = cpu_info()
    features = (", ".join(cpu.features) or "none of those that decide inference speed") if cpu.known else "unknown"
    return (
        f"CPU: {cpu.model} ({cpu.architecture}); ISA features: {features} (INT8 compute: "
        f"{'yes' if cpu.int8_compute else 'no'}, FP16 compute: {'yes' if cpu.fp16_compute else 'no'}); "
        f"{cpu.usable_cores} of {cpu.logical_cores} cores usable; {threads} intra-op thread{'' if threads == 1 else 's'} used."
    )


def render(all_rows: list[dict], autos: dict[str, dict], peak: Peak) -> str:
    cpu = next((a["cpu"] for a in autos.values() if a.get("cpu") is not None), None)
    threads = next((a["threads"] for a in autos.values() if a.get("threads")), THREADS)
    details = ", ".join(f"{backend} {n}: {b:.1f} / {a:.1f}" for (backend, n), (b, a) in sorted(peak.details.items()))
    lines = [
        "# Optimization benchmark (CPU)",
        "",
        f"Generated by `python -m benchmarks.optimize` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; Python "
        f"{platform.python_version()}, every runtime pinned to {threads} intra-op threads.",
        "",
        cpu_line(cpu, threads),
        "",
        f"FP32 matmul peak at {THREADS} threads, the best of interleaved passes over torch.mm, numpy matmul and one-MatMul "
        "models in ONNX Runtime and OpenVINO (FP32): "
        f"{peak.before:.1f} GFLOP/s before the models, {peak.after:.1f} GFLOP/s after; the bound uses the higher, "
        f"**{peak.gflops:.1f} GFLOP/s** (per backend and size, before / after: {details or 'not recorded'}). The compute "
        "lower bound of a model is its FLOPs over that peak; it bounds FP32 compute only. Where an FP32 row ran faster "
        "than it, the peak missed what this CPU can do (a slow moment, or a faster kernel than any of these GEMMs) and that "
        "model gets no bound.",
        "",
        "Latency: the p50 after warm-up, with its 95% interval in parentheses (from the medians of the interleaved "
        "rounds the tool timed every contender in, round by round), from the tool's report; batch 8 is the median "
        "latency behind the throughput figure, with its interval. `unstable`: the interval is wider than 20% of the "
        "p50. `rank`: by p50; `k=` marks rows as fast as their neighbour: the 95% interval of their ratio (paired round "
        "by round at batch 1, from the two intervals at batch 8) reaches within 5% of 1, as the ratio of two artifacts "
        "moves by a few percent from one run to the next (their order may change from run to run). Ratios: `x bound` = latency / compute lower bound (FP32 rows only); "
        "`vs best FP32` = the best FP32 artifact's latency / this one's; `vs eager` = torch eager's latency / this "
        "one's; each with its 95% interval, paired round by round at batch 1 (one session), from the two intervals at "
        "batch 8. Only artifacts that passed validation (FP32 element-wise, FP16/INT8 within their accuracy budget) "
        "are timed.",
        "",
    ]
    for model, title in MODELS.items():
        rows = [r for r in all_rows if r["model"] == model]
        if rows:
            lines += _render_model(title, rows, autos[model], peak, cpu)
    return "\n".join(lines)


def _render_model(title: str, rows: list[dict], auto: dict, peak: Peak, cpu: rm.CpuInfo | None) -> list[str]:
    model = rows[0]["model"]
    flops = auto["flops"]
    invalid = invalid_peak(rows, flops, peak.gflops)
    bounds = ", ".join(f"batch {b} {bound_ms(flops[b], peak.gflops):.1f} ms" for b in (1, BATCH))
    lines = [
        f"## {title}",
        "",
        f"FLOPs per forward: batch 1 {flops[1] / 1e9:.1f} G, batch {BATCH} {flops[BATCH] / 1e9:.1f} G. "
        + (f"No compute lower bound: {invalid}." if invalid else f"Compute lower bound at {peak.gflops:.1f} GFLOP/s: {bounds}."),
        "",
    ]
    budget = ", ".join(ACCURACY.get(model, ())) or "the defaults (INT8 cosine>=0.98,rel_rms<=0.2; FP16 cosine>=0.999,rel_rms<=0.02)"
    lines += [f"Accuracy budget of reduced-precision artifacts: {budget}.", ""]
    columns = ["rank", "candidate", "runtime", "precision", "batch", "p50 ms (95% interval)", "unstable"]
    columns += [] if invalid else ["x bound"]
    columns += ["vs best FP32", "vs eager", "min cosine", "peak MB"]
    lines += ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for batch in (1, BATCH):
        timed = sorted((r for r in rows if r["figure"].get(batch)), key=lambda r: (r["figure"][batch].latency_ms_p50, r["candidate"]))
        eager = next((r["figure"][batch] for r in timed if r["candidate"] == "source"), None)
        best32 = _best(timed, batch, "fp32")
        for rank, r in zip(tied_ranks([r["figure"][batch] for r in timed]), timed):
            figure = r["figure"][batch]
            cells = [
                rank,
                r["candidate"],
                r["runtime"],
                r["precision"],
                str(batch),
                _latency(figure),
                "unstable" if figure.unstable else "",
            ]
            if not invalid:
                cells.append(_times_bound(figure, bound_ms(flops[batch], peak.gflops)) if r["precision"] == "fp32" else "-")
            cells += [
                _speed(figure, best32["figure"][batch] if best32 else None),
                _speed(figure, eager),
                _cosine(r["cosine"]),
                _number(r["memory_mb"], 1),
            ]
            lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    if not invalid:
        lines += [
            "`x bound` is given for FP32 rows only (torch eager and the FP32 artifacts): the FP32 matmul peak is not the "
            "bound of an FP16 or INT8 artifact, whose arithmetic has its own peak, so those rows show `-`.",
            "",
        ]
    limits: dict[str, list[str]] = {}
    for r in rows:
        if r["compute_limit"] and r["candidate"] not in limits.setdefault(r["compute_limit"], []):
            limits[r["compute_limit"]].append(r["candidate"])
    for text, names in limits.items():
        lines += [f"Compute limit of {', '.join(names)}: {text}.", ""]
    lines += ["Targets:", ""]
    for batch in (1, BATCH):
        lines.append(f"- {bound_target(rows, batch, flops[batch], peak.gflops, invalid)}")
    for batch in (1, BATCH):
        lines.append(f"- {int8_target(rows, batch, cpu)}")
    lines += [
        "",
        f"`--optimize auto` chose **{auto['chosen']}**: {auto.get('criterion') or 'the lowest batch-1 p50 within budget'}. "
        "`p50 / chosen's`: the candidate's p50 over the chosen one's, paired round by round; `k=`: as fast as the chosen "
        "one (that ratio's interval reaches within 5% of 1). Candidates:",
        "",
        "| rank | candidate | precision | status | p50 ms (95% interval) | unstable | p50 / chosen's | vs eager | why |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    candidates = auto["candidates"]
    timed = [c for c in candidates if c.latency_ms_p50]
    # the report ranks them; the chosen one and those as fast as it share the best rank of them
    tied = [c for c in timed if c.status == "chosen" or (c.vs_chosen and same_speed(c.vs_chosen))]
    shared = f"{min(c.rank or 1 for c in tied)}=" if len(tied) > 1 else None
    ranks = {c.name: shared if shared and c in tied else str(c.rank) for c in timed}
    for c in candidates:
        vs_chosen = ratios.describe_ratio(c.vs_chosen) if c.vs_chosen else ("-" if c.status != "chosen" else "")
        speed = f"{c.speedup_vs_source:.2f}x" if c.speedup_vs_source else "-"
        reason = c.reason.replace("|", "/")[:400]
        lines.append(
            f"| {ranks.get(c.name, '-')} | {c.name} | {c.precision} | {c.status} | {_latency(_candidate_figure(c)) if c.latency_ms_p50 else '-'} | "
            f"{'unstable' if c.unstable else ''} | {vs_chosen} | {speed} | {reason} |"
        )
    lines.append("")
    return lines


def _candidate_figure(c: rm.AutoCandidate) -> rm.Benchmark:
    return rm.Benchmark(runtime="", device=c.device, latency_ms_p50=c.latency_ms_p50, latency_ms_interval=c.latency_ms_interval)


def _sig(value: float) -> str:
    """A latency to about three significant digits."""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else f"{value:.2f}"


def _latency(figure: rm.Benchmark | None) -> str:
    if figure is None or not figure.latency_ms_p50:
        return "-"
    if not figure.latency_ms_interval:
        return _sig(figure.latency_ms_p50)
    low, high = figure.latency_ms_interval
    return f"{_sig(figure.latency_ms_p50)} ({_sig(low)}–{_sig(high)})"


def _times_bound(figure: rm.Benchmark, bound: float) -> str:
    low, high = _interval(figure)
    return f"{figure.latency_ms_p50 / bound:.2f} ({low / bound:.2f}–{high / bound:.2f})"


def _speed(figure: rm.Benchmark | None, reference: rm.Benchmark | None) -> str:
    """How many times faster ``figure`` is than ``reference`` (the reference's p50 over its own), with the 95% interval
    of that ratio: paired round by round where both were timed in one session; "1.00" for the reference itself."""
    if figure is None or reference is None:
        return "-"
    if figure is reference:
        return "1.00"
    ratio = ratios.paired_ratio(figure, reference)
    return "-" if ratio is None else f"{ratio.ratio:.2f} ({ratio.interval[0]:.2f}–{ratio.interval[1]:.2f})"


def _cosine(value: float | None) -> str:
    return "-" if value is None else f"{value:.5f}"


EDGE_HEADING = "## Edge artifacts"
EDGE_MODELS = {"mobilenet_v2": "MobileNetV2-sized CNN (224x224)", "small_bert": "small BERT encoder (4 layers, hidden 256, seq 128)"}
EDGE_TARGETS = ("onnx", "executorch", "tflite")
EDGE_PASSES = ("int8", "openvino", "openvino:int8", "executorch:int8")
# exported at batch 2: torch.export specializes a dim exported at size 1, and the programs would be fixed at batch 1
EDGE_EXPORT_BATCH = 2


def run_edge(name: str, folder: Path, threads: int) -> list[dict]:
    """Every edge and server artifact of one model, validated and then timed at ``threads`` intra-op threads."""
    from benchmarks import models

    result = convert.convert(
        models.build(name),
        to=list(EDGE_TARGETS),
        optimize=list(EDGE_PASSES),
        example_inputs=models.example_inputs(name, EDGE_EXPORT_BATCH),
        inputs=models.input_specs(name),
        dims=(f"B={EDGE_EXPORT_BATCH},1",),
        allow_fixed_shapes=True,  # litert-torch keeps no dynamic dim of these models: its .tflite is timed at the export shape
        out=folder / f"{name}-{threads}",
        benchmark=True,
        threads=threads,
        benchmark_batch=BATCH,
        samples=2,
    )
    cpu = result.report.environment.cpu
    rows = []
    for record in result.report.artifacts:
        errors = [o.max_abs_error for c in record.checks for o in c.outputs if o.max_abs_error is not None]
        cosines = [o.cosine_similarity for c in record.checks for o in c.outputs if o.cosine_similarity is not None]
        benchmarks = [b for b in record.benchmarks if b.latency_ms_p50] or [None]
        for bench in benchmarks:
            rows.append(
                _edge_row(
                    name,
                    threads,
                    record.key,
                    bench,
                    record.precision,
                    record.passed,
                    cpu,
                    size_mb=record.size_bytes / 1e6,
                    max_abs=max(errors, default=None),
                    cosine=min(cosines, default=None),
                    delegated=delegation.share if (delegation := record.detail(rm.Delegation)) else None,
                    why="" if record.passed else _first_failure(record),
                    fixed=bool(record.fixed_dims) or any(c.status == "skipped" and "fixes axis" in c.reason for c in record.checks),
                )
            )
    for b in result.report.source_benchmark:
        if b.latency_ms_p50:
            rows.append(_edge_row(name, threads, "source", b, "fp32", True, cpu, runtime="torch eager"))
    return rows


def _edge_row(model: str, threads: int, artifact: str, bench: rm.Benchmark | None, precision: str, passed: bool, cpu, **extra) -> dict:
    batch = _batch_figure(bench) if bench else None  # none for an artifact fixed at the export shape
    row = {
        "model": model,
        "threads": threads,
        "artifact": artifact,
        "runtime": bench.runtime if bench else "-",
        "pinned": bench.threads if bench else None,
        "precision": precision,
        "passed": passed,
        "bench": bench,
        "batch": batch,
        "p50_ms": bench.latency_ms_p50 if bench else None,
        "batch_ms": batch.latency_ms_p50 if batch else None,
        "cpu": cpu,
        "size_mb": None,
        "max_abs": None,
        "cosine": None,
        "delegated": None,
        "why": "",
        "fixed": False,
    }
    return {**row, **extra}


def _first_failure(record) -> str:
    failed = next((c for c in record.checks if c.status == "failed"), None)
    return (failed.reason if failed else "no check ran")[:160].replace("|", "/")


def render_edge(rows: list[dict], thread_counts: tuple[int, ...]) -> str:
    cpu = next((r["cpu"] for r in rows if r.get("cpu") is not None), None)
    lines = [
        EDGE_HEADING,
        "",
        f"Generated by `python -m benchmarks.optimize` (this section alone: `--edge-only`) on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.",
        "",
        cpu_line(cpu, " / ".join(map(str, thread_counts))),
        "",
        f"Each model is converted once per thread count ({', '.join(map(str, thread_counts))}): every artifact is validated "
        "against torch eager (FP32 within the FP32 tolerances, INT8 within the default INT8 budget) at batch 2 and 1, "
        f"before it is timed at the export shape, batch {EDGE_EXPORT_BATCH} (p50 after warm-up), and batch {BATCH} (the "
        "median latency behind the throughput figure), each with its 95% interval in parentheses, from the interleaved "
        "rounds (`unstable` names the figures whose interval is wider than 20% of their p50), with every runtime that can be told pinned to "
        "that many intra-op threads (`pinned` says the count the runtime took; `-` where it cannot be told). `rank`: by "
        "batch-2 p50; `k=` marks rows as fast as their neighbour (their ratio's interval, paired at the export shape, "
        "reaches within 5% of 1). `vs onnx` = ONNX "
        "Runtime FP32's p50 / this one's, in the same run, paired round by round, with its 95% interval. `delegated` is "
        "the share of the .pte's operator calls that XNNPACK runs. litert-torch keeps no dynamic dim of these models: "
        "their .tflite is fixed at the export shape (run with --allow-fixed-shapes; `passed` says so) and timed there. "
        "One run on a shared machine: read the ratios, not the absolute times.",
        "",
    ]
    for model, title in EDGE_MODELS.items():
        for threads in thread_counts:
            chosen = [r for r in rows if r["model"] == model and r["threads"] == threads]
            if not chosen:
                continue
            onnx = next((r["bench"] for r in chosen if r["artifact"] == "onnx" and r["bench"] is not None), None)
            lines += [
                f"### {title}, {threads} thread{'s' if threads > 1 else ''}",
                "",
                f"| rank | artifact | runtime | pinned | precision | passed | size MB | max abs err | min cosine | delegated | "
                f"batch {EDGE_EXPORT_BATCH} p50 ms | unstable | batch {BATCH} ms | vs onnx |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
            ]
            timed = sorted((r for r in chosen if r["bench"] is not None), key=lambda r: (r["p50_ms"], r["artifact"]))
            ranks = tied_ranks([r["bench"] for r in timed]) + ["-"] * (len(chosen) - len(timed))
            for rank, r in zip(ranks, timed + [r for r in chosen if r["bench"] is None]):
                bench = r["bench"]
                passed = ("yes, fixed at the export shape" if r["fixed"] else "yes") if r["passed"] else "no: " + r["why"]
                lines.append(
                    f"| {rank} | {r['artifact']} | {r['runtime']} | {r['pinned'] if r['pinned'] is not None else '-'} | "
                    f"{r['precision']} | {passed} | {_number(r['size_mb'], 2)} | {_number(r['max_abs'], 6, 'e')} | "
                    f"{_cosine(r['cosine'])} | {_percent(r['delegated'])} | {_latency(bench)} | "
                    f"{_unstable(bench, r['batch'])} | {_latency(r['batch'])} | "
                    f"{_speed(bench, onnx)} |"
                )
            lines.append("")
    return "\n".join(lines)


def _unstable(bench: rm.Benchmark | None, batch: rm.Benchmark | None) -> str:
    """Which of an edge row's two figures has an interval wider than 20% of its p50."""
    return ", ".join(f"batch {b}" for b, f in ((EDGE_EXPORT_BATCH, bench), (BATCH, batch)) if f is not None and f.unstable)


def _number(value: float | None, digits: int, style: str = "f") -> str:
    return "-" if value is None else f"{value:.{digits}{style}}" if style == "f" else f"{value:.2e}"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def main(argv: list[str]) -> int:
    edge_only, server_only = "--edge-only" in argv, "--server-only" in argv
    if edge_only and server_only:
        print("--edge-only and --server-only exclude each other", file=sys.stderr)
        return 2
    paths = [a for a in argv if not a.startswith("--")]
    results = Path(paths[0]) if paths else DEFAULT_RESULTS
    existing = results.read_text() if results.is_file() else ""
    thread_counts = tuple(dict.fromkeys((1, os.cpu_count() or 1)))
    with tempfile.TemporaryDirectory() as tmp:
        if edge_only and existing:
            server = existing.split(EDGE_HEADING)[0].rstrip() + "\n"
        else:
            # the peak before and after the models: a slow moment at the start must not decide the bound
            print("… FP32 matmul peak", file=sys.stderr, flush=True)
            before_details: dict = {}
            before = measure_peak(before_details)
            all_rows, autos = [], {}
            for name in MODELS:
                print(f"… {name}", file=sys.stderr, flush=True)
                rows, auto = run_model(name, Path(tmp))
                all_rows += rows
                autos[name] = auto
            print("… FP32 matmul peak, again", file=sys.stderr, flush=True)
            after_details: dict = {}
            after = measure_peak(after_details)
            details = {k: (before_details.get(k, 0.0), after_details.get(k, 0.0)) for k in {*before_details, *after_details}}
            server = render(all_rows, autos, Peak(before, after, details)) + "\n"
        if server_only:
            edge = EDGE_HEADING + existing.split(EDGE_HEADING, 1)[1].rstrip() + "\n" if EDGE_HEADING in existing else ""
        else:
            edge_rows = []
            for name in EDGE_MODELS:
                for threads in thread_counts:
                    print(f"… {name} (edge, {threads} threads)", file=sys.stderr, flush=True)
                    edge_rows += run_edge(name, Path(tmp), threads)
            edge = render_edge(edge_rows, thread_counts) + "\n"
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(server + ("\n" + edge if edge else ""))
    print(f"wrote {results}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
