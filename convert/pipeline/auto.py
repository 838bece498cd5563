"""--optimize auto's choice: the candidates (the exported artifact they start from included) ranked by p50 latency, or a
decoder's by decode tokens per second; the fastest that passed is published, unless a simpler candidate is as fast
within the noise (their paired interval holds 1), which is then published instead; the report says why each other one
lost."""

from __future__ import annotations

import math

from convert.pipeline.context import RunContext
from convert.pipeline.validate import publish
from convert.precision import figure
from convert.reports import model as rm
from convert.reports.ratios import describe_ratio, paired_ratio
from convert.text import first_line

AUTO_BASE = "onnx"  # the artifact auto's candidates start from: every pass it tries takes an exported ONNX model
# the simpler of two candidates as fast as each other: full precision first, then the exported artifact itself
PRECISION_ORDER = {"fp32": 0, "fp16": 1, "bf16": 1, "int8": 2, "int4": 3}


def simplicity(candidate: rm.AutoCandidate) -> tuple[int, int]:
    return PRECISION_ORDER.get(candidate.precision, 4), 0 if candidate.name == "none" else 1


def choose(ctx: RunContext) -> None:
    """Rank the candidates and the exported AUTO_BASE artifact they start from; publish the chosen one."""
    report = ctx.report
    source = next((b for b in report.source_benchmark if b.status == "ok"), None)
    stage_of = {s.subject: s for s in ctx.stages.records if s.kind == "auto"}
    ranked, others, timed_on = [], [], {}
    for record in report.artifacts:
        if not (record.candidate or (record.format == AUTO_BASE and not record.optimization)):
            continue
        name = record.optimization or "none"
        attested = record.detail(rm.PrecisionAttestation)
        computes = figure(attested.compute) if attested is not None and attested.compute else ""
        entry = rm.AutoCandidate(name=name, format=record.format, precision=record.precision, computes=computes, status="lost")
        best = fastest_benchmark([b for b in record.benchmarks if b.status == "ok"])
        stage = stage_of.get(name)
        if best is not None:
            entry.device, entry.latency_ms_p50, entry.throughput_per_s = best.device, best.latency_ms_p50, best.throughput_per_s
            entry.latency_ms_interval, entry.unstable, entry.compute_limit = best.latency_ms_interval, best.unstable, best.compute_limit
            entry.speedup_vs_source = _times(source and source.latency_ms_p50, best.latency_ms_p50)
            entry.prefill_ms_p50, entry.decode_tokens_per_s = best.prefill_ms_p50, best.decode_tokens_per_s
            entry.decode_tokens_per_s_interval = best.decode_tokens_per_s_interval
            entry.decode_speedup_vs_source = _times(best.decode_tokens_per_s, source and source.decode_tokens_per_s)
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
                else f"failed its precision claim: it {attested.diagnosis()[0]}"
                if attested is not None and attested.status == "failed"
                else "no check passed"
                if not record.passed
                else "its benchmark failed: " + "; ".join(b.reason for b in record.benchmarks)
            )
            others.append(entry)
    report.auto = rm.AutoSelection(candidates=rank(ranked, timed_on) + others)
    if _decoding(ranked):
        report.auto.criterion = rm.DECODE_CRITERION
    if not ranked:
        return
    chosen = report.auto.candidates[0]
    report.auto.chosen = chosen.name
    candidate = ctx.candidates.get(chosen.name)
    if candidate is not None:
        record = next(r for r in report.artifacts if r.optimization == chosen.name)
        publish(ctx, chosen.name, candidate, record)


def fastest_benchmark(timed: list[rm.Benchmark]) -> rm.Benchmark | None:
    """The benchmark a candidate is ranked by: a decoder's fastest decode, any other's lowest p50."""
    decoded = [b for b in timed if b.decode_tokens_per_s]
    if decoded:
        return max(decoded, key=lambda b: b.decode_tokens_per_s)
    return min(timed, key=lambda b: b.latency_ms_p50) if timed else None


def _times(faster: float | None, slower: float | None) -> float | None:
    return round(faster / slower, 3) if faster and slower else None


def _decoding(timed: list[rm.AutoCandidate]) -> bool:
    """Candidates of a decoder timed as it generates are ranked by their decode speed."""
    return any(c.decode_tokens_per_s for c in timed)


def rank(timed: list[rm.AutoCandidate], timed_on: dict[str, rm.Benchmark]) -> list[rm.AutoCandidate]:
    """The timed candidates, the chosen one first and then by speed (a decoder's decode tokens/s, fastest first; any
    other's p50), each with its rank and why it won or lost; ``timed_on`` holds each one's fastest benchmark, by name.
    A decoder's candidate with no decode figure ranks after those with one."""
    if not timed:
        return []
    figure = "decode" if _decoding(timed) else "latency"
    by_speed = sorted(timed, key=lambda c: _time_of(c, figure))
    fastest = by_speed[0]
    ties = [c for c in by_speed[1:] if _within_noise(_ratio(timed_on, fastest, c, figure))]
    chosen = min([fastest, *ties], key=simplicity)
    ordered = [chosen, *(c for c in by_speed if c is not chosen)]
    for position, entry in enumerate(ordered, 1):
        entry.rank = position
        entry.vs_chosen = None if entry is chosen else _ratio(timed_on, chosen, entry, "latency")
        if figure == "decode":
            entry.decode_vs_chosen = None if entry is chosen else _ratio(timed_on, chosen, entry, "decode")
        why = _why_decode if figure == "decode" else _why
        entry.reason = why(entry, chosen, fastest, ties, timed_on) + (f"; {entry.compute_limit}" if entry.compute_limit else "")
    chosen.status = "chosen"
    return ordered


def _time_of(candidate: rm.AutoCandidate, figure: str) -> float:
    """What a candidate is ranked by, lowest first: its p50, or its decode time per token (none: last)."""
    if figure == "latency":
        return candidate.latency_ms_p50
    return 1e3 / candidate.decode_tokens_per_s if candidate.decode_tokens_per_s else math.inf


def _within_noise(ratio: rm.PairedRatio | None) -> bool:
    return ratio is not None and ratio.within_noise


def _ratio(timed_on: dict[str, rm.Benchmark], base: rm.AutoCandidate, other: rm.AutoCandidate, figure: str) -> rm.PairedRatio | None:
    return paired_ratio(timed_on[base.name], timed_on[other.name], figure)


def _why(entry: rm.AutoCandidate, chosen: rm.AutoCandidate, fastest: rm.AutoCandidate, ties: list, timed_on: dict) -> str:
    if entry is chosen:
        if chosen is fastest:
            return "the fastest candidate that passed validation"
        return (
            f"as fast as the fastest ({fastest.name}) within the noise: its p50 is {describe_ratio(_ratio(timed_on, fastest, chosen, 'latency'))} "
            f"{fastest.name}'s; the simpler candidate is chosen"
        )
    if entry is fastest:
        return f"the fastest, as fast as {chosen.name} within the noise: p50 {describe_ratio(entry.vs_chosen)} the chosen's; {chosen.name} is simpler"
    if entry in ties:
        return (
            f"as fast as the fastest ({fastest.name}) within the noise: p50 {describe_ratio(_ratio(timed_on, fastest, entry, 'latency'))} "
            f"{fastest.name}'s; {chosen.name} is simpler"
        )
    if chosen is fastest:
        return f"slower: p50 {entry.latency_ms_p50:.4g} ms on {entry.device}, {describe_ratio(entry.vs_chosen)} the chosen's {chosen.latency_ms_p50:.4g} ms"
    return (
        f"slower than the fastest ({fastest.name}) beyond the noise: p50 {entry.latency_ms_p50:.4g} ms on {entry.device}, "
        f"{describe_ratio(_ratio(timed_on, fastest, entry, 'latency'))} {fastest.name}'s"
    )


def _why_decode(entry: rm.AutoCandidate, chosen: rm.AutoCandidate, fastest: rm.AutoCandidate, ties: list, timed_on: dict) -> str:
    """As ``_why``, of a decoder's candidates ranked by decode speed (the ratios are of decode time per token)."""
    if entry.decode_tokens_per_s is None:
        reason = timed_on[entry.name].reason
        return "no decode speed was measured" + (f" ({reason})" if reason else "") + ", so it ranks after those timed as they generate"
    if entry is chosen:
        if chosen is fastest:
            return f"the fastest candidate that passed validation: decode {chosen.decode_tokens_per_s:.4g} tokens/s on {chosen.device}"
        return (
            f"as fast as the fastest ({fastest.name}) within the noise: its decode time per token is "
            f"{describe_ratio(_ratio(timed_on, fastest, chosen, 'decode'))} {fastest.name}'s; the simpler candidate is chosen"
        )
    if entry is fastest:
        return (
            f"the fastest, as fast as {chosen.name} within the noise: decode time per token {describe_ratio(entry.decode_vs_chosen)} "
            f"the chosen's; {chosen.name} is simpler"
        )
    if entry in ties:
        return (
            f"as fast as the fastest ({fastest.name}) within the noise: decode time per token "
            f"{describe_ratio(_ratio(timed_on, fastest, entry, 'decode'))} {fastest.name}'s; {chosen.name} is simpler"
        )
    if chosen is fastest:
        return (
            f"slower: decode {entry.decode_tokens_per_s:.4g} tokens/s on {entry.device}, time per token "
            f"{describe_ratio(entry.decode_vs_chosen)} the chosen's ({chosen.decode_tokens_per_s:.4g} tokens/s)"
        )
    return (
        f"slower than the fastest ({fastest.name}) beyond the noise: decode {entry.decode_tokens_per_s:.4g} tokens/s on "
        f"{entry.device}, time per token {describe_ratio(_ratio(timed_on, fastest, entry, 'decode'))} {fastest.name}'s"
    )
