"""--optimize auto's choice: the candidates (the exported artifact they start from included) ranked by p50 latency;
the fastest that passed is published, unless a simpler candidate is as fast within the noise (their paired interval
holds 1), which is then published instead; the report says why each other one lost."""

from __future__ import annotations

from convert.pipeline.context import RunContext
from convert.pipeline.validate import publish
from convert.reports import model as rm
from convert.text import first_line
from convert.timing import describe_ratio, paired_ratio

AUTO_BASE = "onnx"  # the artifact auto's candidates start from: every pass it tries takes an exported ONNX model
# the simpler of two candidates as fast as each other: full precision first, then the exported artifact itself
PRECISION_ORDER = {"fp32": 0, "fp16": 1, "bf16": 1, "int8": 2}


def simplicity(candidate: rm.AutoCandidate) -> tuple[int, int]:
    return PRECISION_ORDER.get(candidate.precision, 3), 0 if candidate.name == "none" else 1


def choose(ctx: RunContext) -> None:
    """Rank the candidates and the exported AUTO_BASE artifact they start from; publish the chosen one."""
    report = ctx.report
    source_p50 = next((b.latency_ms_p50 for b in report.source_benchmark if b.status == "ok"), None)
    stage_of = {s.subject: s for s in ctx.stages.records if s.kind == "auto"}
    ranked, others, timed_on = [], [], {}
    for record in report.artifacts:
        if not (record.candidate or (record.format == AUTO_BASE and not record.optimization)):
            continue
        name = record.optimization or "none"
        entry = rm.AutoCandidate(name=name, format=record.format, precision=record.precision, status="lost")
        timed = [b for b in record.benchmarks if b.status == "ok"]
        best = min(timed, key=lambda b: b.latency_ms_p50) if timed else None
        stage = stage_of.get(name)
        if best is not None:
            entry.device, entry.latency_ms_p50, entry.throughput_per_s = best.device, best.latency_ms_p50, best.throughput_per_s
            entry.latency_ms_interval, entry.unstable, entry.compute_limit = best.latency_ms_interval, best.unstable, best.compute_limit
            entry.speedup_vs_source = round(source_p50 / best.latency_ms_p50, 3) if source_p50 and best.latency_ms_p50 else None
            timed_on[name] = best
            ranked.append(entry)
        elif stage is not None and stage.status == "skipped":
            entry.status, entry.reason = "skipped", f"not built: {stage.reason}"
            others.append(entry)
        elif stage is not None and stage.status == "failed":
            entry.status, entry.reason = "failed", f"not built: {first_line(stage.error)}"
            others.append(entry)
        else:
            failing = next((c for c in record.checks if c.status == "failed"), None)
            entry.status = "failed"
            entry.reason = (
                f"failed validation ({failing.runtime}, {failing.device}, {failing.shape}): {failing.reason}"
                if failing
                else "no check passed"
                if not record.passed
                else "its benchmark failed: " + "; ".join(b.reason for b in record.benchmarks)
            )
            others.append(entry)
    report.auto = rm.AutoSelection(candidates=rank(ranked, timed_on) + others)
    if not ranked:
        return
    chosen = report.auto.candidates[0]
    report.auto.chosen = chosen.name
    candidate = ctx.candidates.get(chosen.name)
    if candidate is not None:
        record = next(r for r in report.artifacts if r.optimization == chosen.name)
        publish(ctx, chosen.name, candidate, record)


def rank(timed: list[rm.AutoCandidate], timed_on: dict[str, rm.Benchmark]) -> list[rm.AutoCandidate]:
    """The timed candidates, the chosen one first and then by p50, each with its rank and why it won or lost;
    ``timed_on`` holds each one's fastest benchmark, by name."""
    if not timed:
        return []
    by_speed = sorted(timed, key=lambda c: c.latency_ms_p50)
    fastest = by_speed[0]
    ties = [c for c in by_speed[1:] if _ratio(timed_on, fastest, c).within_noise]
    chosen = min([fastest, *ties], key=simplicity)
    ordered = [chosen, *(c for c in by_speed if c is not chosen)]
    for position, entry in enumerate(ordered, 1):
        entry.rank = position
        entry.vs_chosen = None if entry is chosen else _ratio(timed_on, chosen, entry)
        entry.reason = _why(entry, chosen, fastest, ties, timed_on) + (f"; {entry.compute_limit}" if entry.compute_limit else "")
    chosen.status = "chosen"
    return ordered


def _ratio(timed_on: dict[str, rm.Benchmark], base: rm.AutoCandidate, other: rm.AutoCandidate) -> rm.PairedRatio:
    return paired_ratio(timed_on[base.name], timed_on[other.name])


def _why(entry: rm.AutoCandidate, chosen: rm.AutoCandidate, fastest: rm.AutoCandidate, ties: list, timed_on: dict) -> str:
    if entry is chosen:
        if chosen is fastest:
            return "the fastest candidate that passed validation"
        return (
            f"as fast as the fastest ({fastest.name}) within the noise: its p50 is {describe_ratio(_ratio(timed_on, fastest, chosen))} "
            f"{fastest.name}'s; the simpler candidate is chosen"
        )
    if entry is fastest:
        return f"the fastest, as fast as {chosen.name} within the noise: p50 {describe_ratio(entry.vs_chosen)} the chosen's; {chosen.name} is simpler"
    if entry in ties:
        return (
            f"as fast as the fastest ({fastest.name}) within the noise: p50 {describe_ratio(_ratio(timed_on, fastest, entry))} "
            f"{fastest.name}'s; {chosen.name} is simpler"
        )
    if chosen is fastest:
        return f"slower: p50 {entry.latency_ms_p50:.4g} ms on {entry.device}, {describe_ratio(entry.vs_chosen)} the chosen's {chosen.latency_ms_p50:.4g} ms"
    return (
        f"slower than the fastest ({fastest.name}) beyond the noise: p50 {entry.latency_ms_p50:.4g} ms on {entry.device}, "
        f"{describe_ratio(_ratio(timed_on, fastest, entry))} {fastest.name}'s"
    )
