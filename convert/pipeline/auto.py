"""--optimize auto's choice: the candidates (the exported artifact they start from included) ranked by p50 latency;
the fastest that passed is published, and the report says why each other one lost."""

from __future__ import annotations

from convert.pipeline.context import RunContext
from convert.pipeline.validate import publish
from convert.reports import model as rm
from convert.text import first_line


def choose(ctx: RunContext, base_format: str) -> None:
    """Rank the candidates and the exported ``base_format`` artifact they start from; publish the fastest that passed."""
    report = ctx.report
    source_p50 = next((b.latency_ms_p50 for b in report.source_benchmark if b.status == "ok"), None)
    stage_of = {s.subject: s for s in ctx.stages.records if s.kind == "auto"}
    ranked, others = [], []
    for record in report.artifacts:
        if not (record.candidate or (record.format == base_format and not record.optimization)):
            continue
        name = record.optimization or "none"
        entry = rm.AutoCandidate(name=name, format=record.format, precision=record.precision, status="lost")
        timed = [b for b in record.benchmarks if b.status == "ok"]
        best = min(timed, key=lambda b: b.latency_ms_p50) if timed else None
        stage = stage_of.get(name)
        if best is not None:
            entry.device, entry.latency_ms_p50, entry.throughput_per_s = best.device, best.latency_ms_p50, best.throughput_per_s
            entry.speedup_vs_source = round(source_p50 / best.latency_ms_p50, 3) if source_p50 and best.latency_ms_p50 else None
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
    ranked.sort(key=lambda c: c.latency_ms_p50)
    for rank, entry in enumerate(ranked, 1):
        entry.rank = rank
        if rank > 1:
            entry.reason = (
                f"slower: p50 {entry.latency_ms_p50:.4g} ms on {entry.device}, "
                f"{entry.latency_ms_p50 / ranked[0].latency_ms_p50:.2f}x the chosen's {ranked[0].latency_ms_p50:.4g} ms"
            )
    report.auto = rm.AutoSelection(candidates=ranked + others)
    if not ranked:
        return
    ranked[0].status, ranked[0].reason = "chosen", "the fastest candidate that passed validation"
    report.auto.chosen = ranked[0].name
    chosen = ctx.candidates.get(ranked[0].name)
    if chosen is not None:
        record = next(r for r in report.artifacts if r.optimization == ranked[0].name)
        publish(ctx, ranked[0].name, chosen, record)
