"""The console summary: one row per artifact × runtime × device (shapes folded in), then the verdict."""

from __future__ import annotations

from itertools import groupby

from rich.console import Console
from rich.table import Table

from convert.reports.model import Report

STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}


def print_summary(report: Report, console: Console, report_path: str | None = None) -> None:
    table = Table(title="Validation against the source model")
    for column in ("artifact", "runtime", "device", "shapes", "status", "max abs err", "min cosine", "detail"):
        table.add_column(column, overflow="fold")
    for artifact in report.artifacts:
        if not artifact.checks:
            error = artifact.attempts[0].error if artifact.attempts else "not exported"
            table.add_row(artifact.format, "-", "-", "-", "[bold red]not exported[/]", "-", "-", first_line(error, 100))
        for (runtime, device), group in groupby(artifact.checks, key=lambda c: (c.runtime, c.device)):
            checks = list(group)
            statuses = [c.status for c in checks]
            status = "failed" if "failed" in statuses else "passed" if "passed" in statuses else "skipped"
            outputs = [o for c in checks for o in c.outputs]
            errors = [o.max_abs_error for o in outputs if o.max_abs_error is not None]
            cosines = [o.cosine_similarity for o in outputs if o.cosine_similarity is not None]
            detail = next((c.reason for c in checks if c.status == "failed"), "") or next((c.reason for c in checks if c.reason), "")
            shapes = " ".join(c.shape for c in checks if c.shape != "*") or "-"
            table.add_row(artifact.format, runtime, device, shapes, f"[{STYLE[status]}]{status}[/]",
                          f"{max(errors):.1e}" if errors else "-", f"{min(cosines):.6f}" if cosines else "-",
                          first_line(detail, 100))
    console.print(table)
    for artifact in report.artifacts:
        if artifact.path:
            console.print(f"  {artifact.format}: {artifact.path} ({artifact.size_bytes / 1e6:.2f} MB, {artifact.strategy})")
    verdict = "[bold green]PASSED[/]" if report.passed else "[bold red]FAILED[/]"
    console.print(f"Verdict: {verdict} (exit code {report.exit_code})" + (f"; report: {report_path}" if report_path else ""))


def first_line(text: str, limit: int = 160) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    line = lines[0].strip() if lines else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."
