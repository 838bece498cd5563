"""The JSON report as GitHub-flavoured Markdown, compact enough for a GitHub Actions step summary (1 MiB at most).

A heading with the verdict (the gate's when the report has one), why as bullets (and the gate's notes), then tables: one
row per artifact × runtime × device × shape (failed and skipped first, at most MAX_ROWS), the benchmarks, the gate's
budgets and baseline deltas, and an environment line. Cell text is kept to one line and escaped: messages hold ``|``,
which would split a cell, and ``<``, ``*``, ``_``, which GitHub would read as HTML or emphasis.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from convert.reports import facts
from convert.reports.model import Benchmark, Check, OutputMetrics, Report, Verdict
from convert.safety import atomic_write_text
from convert.validators.task_metrics import drop_unit

MAX_ROWS = 200
MAX_BULLETS = 50
CELL_LIMIT = 160
BULLET_LIMIT = 300
STATUS = {
    "passed": "✅ passed",
    "failed": "❌ failed",
    "skipped": "⏭️ skipped",
    "ok": "✅ ok",
    "improved": "✅ improved",
    "regressed": "❌ regressed",
    "not_compared": "⏭️ not compared",
}
SEVERITY = {"failed": 0, "regressed": 0, "skipped": 1, "not_compared": 1}  # the rest (passed, ok, improved) sort last
MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_\[\]<>|&~])")


def render_markdown(report: Report) -> str:
    sections = [
        _heading(report),
        _bullets(report),
        _composite(report),
        _checks(report),
        _details(report),
        _packages(report),
        _task_metrics(report),
        _benchmarks(report),
    ]
    if report.gate is not None:
        sections += [_budgets(report.gate), _deltas(report.gate)]
    sections.append(_environment(report))
    return "\n\n".join(section for section in sections if section) + "\n"


def write_markdown(report: Report, path: str | Path, append: bool = False) -> None:
    """Write the summary; ``append`` adds it after what is there, as every step of a job appends to $GITHUB_STEP_SUMMARY."""
    path, text = Path(path), render_markdown(report)
    if not append:
        atomic_write_text(path, text)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    separator = "\n" if path.exists() and path.stat().st_size else ""
    with path.open("a", encoding="utf-8") as stream:
        stream.write(separator + text)


def _heading(report: Report) -> str:
    outcome = facts.outcome(report)
    if report.gate is not None:
        summary = report.gate.summary()
    else:
        summary = f"exit code {report.exit_code}" + (", interrupted" if report.interrupted else "")
    return f"## {'✅' if outcome.good else '❌'} {outcome.word}: {_cell(facts.source_name(report))}\n\n{_cell(summary)}"


def _bullets(report: Report) -> str:
    """Why: the gate's reasons and notes, or without a gate what failed the run."""
    if report.gate is not None:
        reasons = [
            f"`{r.code}`" + (f" {_cell(r.artifact)}" if r.artifact else "") + f": {_cell(r.message, BULLET_LIMIT)}"
            for r in report.gate.reasons
        ]
        notes = [_cell(note, BULLET_LIMIT) for note in report.gate.notes]
        return "\n\n".join(filter(None, (_bullet_list("Reasons", reasons), _bullet_list("Notes", notes))))
    failures = [
        f"{_cell(s.name)} failed: {_cell(s.error, BULLET_LIMIT)}" for s in report.stages if s.status == "failed" and s.kind != "auto"
    ]  # a candidate not built does not fail the run
    for artifact in report.artifacts:
        if facts.not_chosen(report, artifact):
            continue
        failed = facts.failed_checks(artifact)
        if failed:
            first = failed[0]
            failures.append(
                f"{_cell(artifact.key)}: {len(failed)} of {len(artifact.checks)} checks failed, first "
                f"{_cell(facts.place(first))}: {_cell(first.reason, BULLET_LIMIT)}"
            )
        failures += [f"{_cell(artifact.key)}: {_cell(line, BULLET_LIMIT)}" for line in artifact.diagnosis()]
    if report.interrupted:
        failures.append(_cell(report.error or "the run was interrupted", BULLET_LIMIT))
    # a failed build is a failure above; one that cannot be built here is listed here, fails the run or not
    unbuilt = [f"{_cell(u.artifact)}: {_cell(u.reason, BULLET_LIMIT)}" for u in report.unbuilt if u.status == "skipped"]
    return "\n\n".join(filter(None, (_bullet_list("Failures", failures), _bullet_list("Requested but not built", unbuilt))))


def _bullet_list(title: str, items: list[str]) -> str:
    if not items:
        return ""
    shown = [f"- {item}" for item in items[:MAX_BULLETS]]
    if len(items) > MAX_BULLETS:
        shown.append(f"- … {len(items) - MAX_BULLETS} more in the JSON report")
    return f"**{title}**\n\n" + "\n".join(shown)


def _checks(report: Report) -> str:
    rows: list[tuple[str, list[str]]] = []  # (status, cells)
    for artifact in report.artifacts:
        label = facts.label(report, artifact)
        if not artifact.checks:
            rows.append(_unvalidated_row(label, facts.unchecked(report, artifact)))
        for check in artifact.checks:
            worst, generated = _worst_output(check), check.generation
            rows.append(
                (
                    check.status,
                    [
                        _cell(label),
                        _cell(check.runtime),
                        _cell(check.device),
                        _cell(check.shape),
                        STATUS[check.status],
                        _cell(worst.name) if worst else "logits over generation" if generated else "",
                        _number(worst.max_abs_error if worst else generated and generated.max_abs_logits, ".2e"),
                        _number(worst.cosine_similarity if worst else generated and generated.min_cosine, ".6f"),
                        _cell(check.reason),
                    ],
                )
            )
    if not rows:
        return ""
    header = ["artifact", "runtime", "device", "shape", "status", "worst output", "max abs error", "cosine", "reason"]
    counts = ", ".join(f"{n} {s}" for s, n in facts.status_counts([status for status, _ in rows]).items())
    return f"### Validation ({counts})\n\n" + _capped_table(header, rows, "rows")


def _composite(report: Report) -> str:
    """A composite's components, then its assembled checks."""
    if not report.composite:
        return ""
    components = [(status, [_cell(cell) for cell in cells]) for status, cells in facts.component_rows(report)]
    assembled = [(status, [_cell(cell) for cell in cells]) for status, cells in facts.assembled_rows(report)]
    return (
        f"### Components of the {report.composite}\n\n"
        + _capped_table(facts.COMPONENT_HEADER, components, "components")
        + "\n\n### Run together\n\n"
        + _capped_table(facts.ASSEMBLED_HEADER, assembled, "checks")
    )


def _unvalidated_row(label: str, unchecked: facts.Unchecked) -> tuple[str, list[str]]:
    """The row of an artifact without checks: not built, skipped (a pass that cannot run here), or not validated."""
    if unchecked.status == "skipped":
        status, shown = "skipped", STATUS["skipped"]
    else:
        status, shown = "failed", f"❌ {unchecked.status}"
    return status, [_cell(label), "", "", "", shown, "", "", "", _cell(unchecked.reason)]


def _worst_output(check: Check) -> OutputMetrics | None:
    """The output to show for a check: a failed one before a passed one, then the one with NaN/Inf or the largest error."""

    def badness(output: OutputMetrics) -> tuple:
        error = output.max_abs_error if output.max_abs_error is not None and not math.isnan(output.max_abs_error) else 0.0
        return output.status == "failed", output.nan_count + output.inf_count > 0, error

    return max(check.outputs, key=badness, default=None)


def _task_metrics(report: Report) -> str:
    """The datasets used and each artifact's task metrics beside the source's, with their budgets."""
    if not report.data:
        return ""
    used = [f"{d.role}: `{_cell(d.path)}` ({d.kind}, {len(d.used)} of {d.size} samples, sha256 `{d.sha256[:12]}`)" for d in report.data]
    rows = [
        (
            m.status,
            [
                _cell(artifact.key),
                _cell(f"{check.runtime} on {check.device}"),
                m.name,
                f"{m.source:.4f}",
                f"{m.artifact:.4f}",
                f"{m.drop * 100:+.2f}{drop_unit(m.name)}",
                "" if m.budget is None else f"≤ {m.budget * 100:.2f}{drop_unit(m.name)}",
                m.status,
            ],
        )
        for artifact, check, m in report.task_rows()
    ]
    header = ["artifact", "where", "metric", "source", "artifact", "drop", "budget", "status"]
    return "\n\n".join(
        filter(
            None,
            [
                "**Task metrics on your data**",
                "\n".join(f"- {line}" for line in used),
                _capped_table(header, rows, "task metrics") if rows else "",
            ],
        )
    )


def _details(report: Report) -> str:
    """Each artifact's details that explain no failure (those that do are among the failures): their sentences."""
    lines = [
        f"{_cell(a.key)}: {_cell(f'{d.title}: {d.describe()}', BULLET_LIMIT)}"
        for a in report.artifacts
        for d in a.details
        if not d.diagnosis() and d.notable()
    ]
    return _bullet_list("Details", lines)


def _packages(report: Report) -> str:
    """Each package built from the validated artifacts, with what it holds and how its structural checks went."""
    lines = [
        f"{_cell(p.packager)} {'passed' if p.passed else 'FAILED'}: {_cell(p.path or '-')} ({_cell(p.describe(), BULLET_LIMIT)})"
        for p in report.packages
    ]
    return _bullet_list("Packages", lines) if lines else ""


def _benchmarks(report: Report) -> str:
    rows = facts.benchmark_rows(report)
    if not rows:
        return ""
    header = ["artifact", "runtime", "device", "p50 ms", "95% interval", "p90 ms", "p99 ms", "vs source", "throughput/s", "peak MB", "note"]
    generates = facts.generates(report)  # a decoder's prefill and decode, before the note
    if generates:
        header[-1:-1] = ["prefill ms (95%)", "decode tok/s (95%)", "decode vs source"]
    return "### Benchmarks\n\n" + _table(
        header, [_benchmark_cells(name, b, facts.speedup(report, b), report if generates else None) for name, b in rows]
    )


def _benchmark_cells(name: str, benchmark: Benchmark, speedup: float | None, generating: Report | None = None) -> list[str]:
    """A benchmark's row; with ``generating`` (the report of a decoder) its prefill and decode cells before the note."""
    cells = [_cell(name), _cell(benchmark.runtime), _cell(benchmark.device)]
    generation = (
        [_cell(benchmark.prefill()), _cell(benchmark.decode()), facts.times(facts.decode_speedup(generating, benchmark)) or ""]
        if generating is not None
        else []
    )
    if benchmark.status != "ok":
        return cells + [""] * 7 + [""] * len(generation) + [_cell(f"{benchmark.status}: {benchmark.reason}")]
    p50 = benchmark.latency_ms_p50
    throughput = _number(benchmark.throughput_per_s, ".4g")
    if benchmark.throughput_per_s is not None and benchmark.throughput_shape:
        throughput += f" at {_cell(benchmark.throughput_shape)}"
    return cells + [
        _number(p50, ".4g"),
        _cell(benchmark.spread()),
        _number(benchmark.latency_ms_p90, ".4g"),
        _number(benchmark.latency_ms_p99, ".4g"),
        facts.times(speedup) or "",
        throughput,
        _number(benchmark.peak_memory_mb, ".4g"),
        *generation,
        _cell(
            "; ".join(t for t in (benchmark.computes and f"computes {benchmark.computes}", benchmark.compute_limit, benchmark.reason) if t)
        ),
    ]


def _budgets(verdict: Verdict) -> str:
    if not verdict.budgets:
        return ""
    header = ["artifact", "metric", "limit", "value", "where", "status", "reason"]
    rows = [
        (
            b.status,
            [
                _cell(b.artifact),
                _cell(b.metric),
                _cell(b.limit),
                _number(b.value, ".6g"),
                _cell(facts.where(b)),
                STATUS[b.status],
                _cell(b.reason),
            ],
        )
        for b in verdict.budgets
    ]
    return "### Budgets\n\n" + _capped_table(header, rows, "budgets")


def _deltas(verdict: Verdict) -> str:
    baseline = verdict.baseline
    if baseline is None or not baseline.deltas:
        return ""
    header = ["artifact", "metric", "where", "baseline", "current", "delta", "delta %", "allowed", "status", "reason"]
    rows = [
        (
            d.status,
            [
                _cell(d.artifact),
                _cell(d.metric),
                _cell(facts.where(d)),
                _number(d.baseline, ".6g"),
                _number(d.current, ".6g"),
                _number(d.delta, "+.6g"),
                _number(d.delta_pct, "+.1f"),
                _cell(d.allowed),
                STATUS[d.status],
                _cell(d.reason),
            ],
        )
        for d in baseline.deltas
    ]
    same = ", ".join(
        f"{'same' if flag else 'different'} {what}"
        for what, flag in (("source", baseline.same_source), ("environment", baseline.same_environment))
    )
    return f"### Baseline deltas (against {_cell(baseline.path)}: {same})\n\n" + _capped_table(header, rows, "deltas")


def _environment(report: Report) -> str:
    environment = report.environment
    devices = ", ".join(environment.devices) + (f" ({', '.join(environment.device_names)})" if environment.device_names else "")
    cache = report.cache
    reused = f"; {len(cache.reused)} stage jobs reused from the cache" if cache.reused else ""
    rebuilt = f", {len(cache.rebuilt)} rebuilt" if cache.rebuilt else ""
    return _cell(
        f"Environment: convert {report.tool_version} (report schema {report.schema_version}), {report.created_at}, "
        f"Python {environment.python}, {environment.platform}, devices: {devices or 'none'}"
        + (f"; CPU: {environment.cpu.describe()}" if environment.cpu else "")
        + "".join(f"; {name} {found}: outside the tested versions" for name, found in environment.outside_tested.items())
        + f"{reused}{rebuilt}",
        BULLET_LIMIT,
    )


def _capped_table(header: list[str], rows: list[tuple[str, list[str]]], what: str) -> str:
    """A table of the MAX_ROWS most severe rows (failed, then skipped, then the rest, each in report order)."""
    ordered = sorted(rows, key=lambda row: SEVERITY.get(row[0], 2))
    table = _table(header, [cells for _, cells in ordered[:MAX_ROWS]])
    hidden = ordered[MAX_ROWS:]
    if not hidden:
        return table
    statuses = ", ".join(f"{sum(s == status for s, _ in hidden)} {status}" for status in dict.fromkeys(s for s, _ in hidden))
    return table + f"\n\n… {len(hidden)} more {what} ({_cell(statuses)}) are in the JSON report."


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(cells) + " |" for cells in rows])


def _cell(text: str, limit: int = CELL_LIMIT) -> str:
    """One line of at most ``limit`` characters, escaped for a table cell (cut before escaping, so no escape is cut)."""
    line = " ".join(str(text).split())
    if len(line) > limit:
        line = line[: limit - 1] + "…"
    return MARKDOWN_PUNCTUATION.sub(r"\\\1", line)


def _number(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)
