"""The console summary: one row per artifact × runtime × device (shapes folded in), then the verdict."""

from __future__ import annotations

from itertools import groupby

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from convert.reports.model import Report, Verdict

STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


def print_summary(report: Report, console: Console, report_path: str | None = None, verdict: bool = True) -> None:
    table = Table(title="Validation against the source model")
    for column in ("artifact", "runtime", "device", "shapes", "status", "max abs err", "min cosine", "detail"):
        table.add_column(column, overflow="fold")
    skipped = {s.name.partition(":")[2]: s.reason for s in report.stages if s.status == "skipped" and s.name.startswith(("optimize:", "auto:"))}
    for artifact in report.artifacts:
        name = f"{artifact.format} ({artifact.optimization})" if artifact.optimization else artifact.format
        if not artifact.checks and artifact.optimization in skipped:
            table.add_row(name, "-", "-", "-", f"[{STYLE['skipped']}]skipped[/]", "-", "-", cell(skipped[artifact.optimization], 100))
        elif not artifact.checks:
            error = artifact.attempts[0].error if artifact.attempts else "not exported"
            table.add_row(name, "-", "-", "-", "[bold red]not exported[/]", "-", "-", cell(error, 100))
        for (runtime, device), group in groupby(artifact.checks, key=lambda c: (c.runtime, c.device)):
            checks = list(group)
            statuses = [c.status for c in checks]
            status = "failed" if "failed" in statuses else "passed" if "passed" in statuses else "skipped"
            outputs = [o for c in checks for o in c.outputs]
            errors = [o.max_abs_error for o in outputs if o.max_abs_error is not None]
            cosines = [o.cosine_similarity for o in outputs if o.cosine_similarity is not None]
            detail = next((c.reason for c in checks if c.status == "failed"), "") or next((c.reason for c in checks if c.reason), "")
            shapes = " ".join(c.shape for c in checks if c.shape != "*") or "-"
            table.add_row(name, runtime, device, shapes, f"[{STYLE[status]}]{status}[/]",
                          f"{max(errors):.1e}" if errors else "-", f"{min(cosines):.6f}" if cosines else "-",
                          cell(detail, 100))
    console.print(table)
    _print_benchmarks(report, console)
    _print_auto(report, console)
    for artifact in report.artifacts:
        if artifact.path:
            kept = "" if artifact.passed else " [red]failed validation: kept for inspection, not at a final path[/]"
            bounds = "".join(f", {symbol} {low}..{'' if high is None else high} only" for symbol, (low, high) in artifact.dim_bounds.items())
            console.print(f"  {artifact.format}: {escape(artifact.path)} ({artifact.size_bytes / 1e6:.2f} MB, {artifact.strategy}{bounds}){kept}")
    cache = report.cache
    if cache.reused or cache.rebuilt:
        console.print(f"  cache: {len(cache.reused)} stage jobs reused from {escape(cache.folder or '-')}"
                      + "".join(f"; rebuilt {escape(r.stage)}: {escape(r.reason)}" for r in cache.rebuilt))
    for note in report.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if verdict:
        status = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
        console.print(f"Verdict: {status} (exit code {report.exit_code})" + (f"; report: {escape(report_path)}" if report_path else ""))


def print_verdict(verdict: Verdict, console: Console, tables: bool = True) -> None:
    """The gate's budgets and baseline deltas (with ``tables``), then the decision and every reason."""
    if tables and verdict.budgets:
        table = Table(title="Budgets")
        for column in ("artifact", "metric", "output", "runtime", "device", "limit", "value", "status"):
            table.add_column(column, overflow="fold")
        for b in verdict.budgets:
            table.add_row(escape(b.artifact), b.metric, escape(b.output) or "-", b.runtime or "-", b.device or "-", b.limit,
                          "-" if b.value is None else f"{b.value:.4g}", f"[{STYLE[b.status]}]{b.status}[/]")
        console.print(table)
    if tables and verdict.baseline is not None:
        table = Table(title=f"Against the baseline {escape(verdict.baseline.path)}"
                            + ("" if verdict.baseline.same_environment else " (measured in another environment)"))
        for column in ("artifact", "metric", "output", "runtime", "device", "baseline", "now", "delta", "allowed", "status"):
            table.add_column(column, overflow="fold")
        styles = {"ok": "green", "improved": "green", "regressed": "bold red", "not_compared": "yellow"}
        for d in verdict.baseline.deltas:
            table.add_row(escape(d.artifact), d.metric, escape(d.output) or "-", d.runtime or "-", d.device or "-", _num(d.baseline), _num(d.current),
                          "-" if d.delta_pct is None else f"{d.delta_pct:+.1f}%", d.allowed, f"[{styles[d.status]}]{d.status}[/]")
        console.print(table)
    for note in verdict.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    decision = "[bold green]PROMOTE[/]" if verdict.promoted else "[bold red]REJECT[/]"
    console.print(f"Gate: {decision} (exit code {verdict.exit_code})" + (f"; report: {escape(verdict.report)}" if verdict.report else ""))
    for reason in verdict.reasons:
        console.print(f"  [red]✗[/] {escape(f'[{reason.code}]')} " + (f"{escape(reason.artifact)}: " if reason.artifact else "") + escape(reason.message),
                      soft_wrap=True)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _print_benchmarks(report: Report, console: Console) -> None:
    rows = [("source", b) for b in report.source_benchmark]
    rows += [(a.optimization or a.format, b) for a in report.artifacts for b in a.benchmarks]
    if not rows:
        return
    source_p50 = next((b.latency_ms_p50 for b in report.source_benchmark if b.status == "ok"), None)
    table = Table(title="Benchmark (after warm-up; same inputs and threads for every runtime)")
    for column in ("artifact", "runtime", "device", "threads", "p50 ms", "p90 ms", "p99 ms", "vs source", "throughput/s", "peak MB"):
        table.add_column(column, overflow="fold")
    for name, b in rows:
        if b.status != "ok":
            table.add_row(name, b.runtime, b.device, "-", f"[{STYLE['failed']}]{b.status}[/]", "", "", "", "", cell(b.reason, 60))
            continue
        speedup = f"{source_p50 / b.latency_ms_p50:.2f}x" if source_p50 and b.latency_ms_p50 else "-"
        table.add_row(name, b.runtime, b.device, str(b.threads or "default"), f"{b.latency_ms_p50:.3f}", f"{b.latency_ms_p90:.3f}",
                      f"{b.latency_ms_p99:.3f}", speedup, f"{b.throughput_per_s:g} ({b.throughput_shape})", f"{b.peak_memory_mb:g}")
    console.print(table)


def _print_auto(report: Report, console: Console) -> None:
    if report.auto is None:
        return
    table = Table(title="--optimize auto: " + (f"chose {report.auto.chosen}" if report.auto.chosen else "no candidate passed"))
    for column in ("rank", "candidate", "precision", "status", "p50 ms", "vs source", "why"):
        table.add_column(column, overflow="fold")
    for c in report.auto.candidates:
        style = "green" if c.status == "chosen" else "yellow" if c.status in ("lost", "skipped") else "bold red"
        table.add_row(str(c.rank or "-"), c.name, c.precision, f"[{style}]{c.status}[/]",
                      f"{c.latency_ms_p50:.3f}" if c.latency_ms_p50 else "-",
                      f"{c.speedup_vs_source:.2f}x" if c.speedup_vs_source else "-", cell(c.reason, 110))
    console.print(table)


def cell(text: str, limit: int) -> str:
    """The first line of a message, escaped: messages hold brackets (pip extras) that rich would read as markup."""
    return escape(first_line(text, limit))


def first_line(text: str, limit: int = 160) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    line = lines[0].strip() if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"
