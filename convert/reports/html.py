"""The HTML report: one self-contained page rendered from the JSON report.

Everything is inline (CSS, SVG charts drawn here, no scripts, no fonts or images fetched), so the page can be
attached to a CI run or a review and opened offline. Every piece of text taken from the report is escaped (the pieces
the page is built of are in ``convert/reports/html_kit.py``): model paths, commands and error messages may hold ``<``
and ``&``. The page leads with one row per artifact, to compare them at a glance, and names files relative to its own
folder, so that it moves with them.
"""

from __future__ import annotations

import math
import os
import shlex
from pathlib import Path

import convert.reports.html_kit as kit
from convert.reports import facts
from convert.reports.model import (
    ArtifactRecord,
    AutoCandidate,
    AutoSelection,
    BaselineComparison,
    Benchmark,
    Check,
    Divergence,
    Environment,
    PrecisionAttestation,
    Report,
    Stage,
    Verdict,
    decode_figure,
)
from convert.safety import atomic_write_text
from convert.validators.task_metrics import drop_unit


def render_html(report: Report, folder: Path | None = None) -> str:
    """The whole page as one string. ``folder``: the absolute folder the page is written to; the absolute paths of the
    report, commands included, are shown relative to it (see ``_seen_from``)."""
    if folder is not None:
        report = _seen_from(report, folder)
    outcome = facts.outcome(report)
    word, good = outcome.title, outcome.good
    sections = [
        _composite_section(report),
        _artifacts_section(report, relative_paths=folder is not None),
        _summary_section(report),
        _packages_section(report),
        _task_section(report),
        _gate_section(report.gate) if report.gate else "",
        _auto_section(report.auto) if report.auto else "",
        *(_artifact_section(report, index, artifact) for index, artifact in enumerate(report.artifacts)),
        _timeline_section(report.stages),
        _environment_section(report.environment),
    ]
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{kit.escape(word)} · {kit.escape(facts.source_name(report))} · convert report</title>",
            f"<style>{kit.CSS}</style>",
            "</head>",
            "<body>",
            _verdict_banner(report, word, good),
            '<main class="wrap">',
            *[section for section in sections if section],
            "</main>",
            "</body>",
            "</html>",
            "",
        ]
    )


def write_html(report: Report, path: Path) -> None:
    # resolved as the report's own paths are (the run's out folder is), so that a symlinked /tmp still matches
    atomic_write_text(path, render_html(report, path.parent.resolve()))


# ---------------------------------------------------------------------------------------------------------------
# Paths as seen from the page's folder: a page written next to report.json shows cnn.onnx, not /tmp/.../out/cnn.onnx.


def _seen_from(report: Report, folder: Path) -> Report:
    """A copy of the report whose absolute paths (source, artifacts, data, packages, gate files) are relative to
    ``folder``, and whose commands (the run's, the reproducers) name their paths so and run from ``folder``."""

    def path(value: str | None) -> str | None:
        return _relative_path(value, folder) if value else value

    def command(value: str) -> str:
        return _relative_command(value, folder) if value else value

    artifacts = [
        artifact.model_copy(
            update={
                "path": path(artifact.path),
                "derived_from": path(artifact.derived_from),
                "files": [path(file) for file in artifact.files],
                "reproduce": command(artifact.reproduce),
                "details": [
                    d.model_copy(update={"reproduce": command(d.reproduce)}) if isinstance(d, Divergence) else d for d in artifact.details
                ],
            }
        )
        for artifact in report.artifacts
    ]
    gate = report.gate
    if gate is not None:
        baseline = gate.baseline.model_copy(update={"path": path(gate.baseline.path)}) if gate.baseline else None
        gate = gate.model_copy(update={"policy": path(gate.policy), "report": path(gate.report), "baseline": baseline})
    return report.model_copy(
        update={
            "command": command(report.command),
            "source": report.source.model_copy(update={"path": path(report.source.path)}),
            "artifacts": artifacts,
            "data": [d.model_copy(update={"path": path(d.path)}) for d in report.data],
            "packages": [p.model_copy(update={"path": path(p.path)}) for p in report.packages],
            "gate": gate,
        }
    )


def _relative_path(path: str, folder: Path) -> str:
    """An absolute path on ``folder``'s filesystem root relative to it (with ``..`` where it lies outside); a relative
    path (relative to where the run started, which the page cannot know) and one on another drive as given."""
    if not os.path.isabs(path) or Path(path).anchor != folder.anchor:
        return path
    return os.path.relpath(path, folder)


def _relative_command(command: str, folder: Path) -> str:
    """A shell command with its absolute paths (arguments, and ``--option=PATH`` values) relative to ``folder``, so that
    it runs from there; as given where it holds none, or does not split as a shell line."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    shown = [_relative_word(word, folder) for word in words]
    return shlex.join(shown) if shown != words else command


def _relative_word(word: str, folder: Path) -> str:
    name, equals, value = word.partition("=")
    if equals and name.startswith("-"):
        return f"{name}={_relative_path(value, folder)}"
    return _relative_path(word, folder)


# ---------------------------------------------------------------------------------------------------------------
# Small helpers. _e escapes; _num, _rate and _size format numbers as plain text (escaped where they are placed);
# the other helpers return HTML.


def _short_sha(sha256: str | None) -> str:
    return f'<code title="{kit.escape(sha256)}">{kit.escape(sha256[:12])}</code>' if sha256 else "–"


def _unstable_badge(timed: Benchmark | AutoCandidate) -> str:
    """A warning beside a p50 too noisy to rank, its reason in the tooltip; "" beside a stable one."""
    why = facts.instability(timed)
    return f'<span class="badge unstable" title="{kit.escape(why)}" aria-label="{kit.escape(why)}">⚠ unstable</span>' if why else ""


def _p50_cell(timed: Benchmark | AutoCandidate | None, tooltip: str = "") -> str:
    """A p50 in ms with its unstable warning; "–" where it was not measured."""
    title = f' title="{kit.escape(tooltip)}"' if tooltip else ""
    if timed is None:
        return f'<td class="num"{title}>–</td>'
    return f'<td class="num"{title}>{kit.escape(kit.number(timed.latency_ms_p50))}{_unstable_badge(timed)}</td>'


# ---------------------------------------------------------------------------------------------------------------
# Verdict and summary


def _status_counts(checks: list[Check]) -> str:
    counts = facts.status_counts([check.status for check in checks])
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none"


def _run_summary(report: Report) -> str:
    plural = "s" * (len(report.artifacts) != 1)
    checks = _status_counts([check for artifact in report.artifacts for check in artifact.checks])
    return f"{len(report.artifacts)} artifact{plural}; checks: {checks}"


def _verdict_banner(report: Report, word: str, good: bool) -> str:
    gate = report.gate
    parts = [f'<div class="verdict-word">{kit.escape(word)}</div>']
    parts.append(f'<div class="verdict-summary">{kit.escape(gate.summary() if gate else _run_summary(report))}</div>')
    if gate and gate.reasons:
        items = "".join(
            f'<li><span class="code">{kit.escape(r.code)}</span>'
            + (f'<span class="artifact">{kit.escape(r.artifact)}</span>' if r.artifact else "")
            + f"{kit.escape(r.message)}</li>"
            for r in gate.reasons
        )
        parts.append(f'<ul class="reasons">{items}</ul>')
    if gate and gate.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>note: {kit.escape(n)}</li>" for n in gate.notes) + "</ul>")
    if report.unbuilt and not gate:  # a gate names them among its reasons
        items = "".join(
            f'<li><span class="code">not built</span><span class="artifact">{kit.escape(u.artifact)}</span>{kit.escape(u.reason)}</li>'
            for u in report.unbuilt
        )
        parts.append(f'<ul class="reasons">{items}</ul>')
    if report.error:
        parts.append(f'<ul class="reasons"><li><span class="code">error</span>{kit.escape(report.error)}</li></ul>')
    exit_code = gate.exit_code if gate else report.exit_code
    meta = [f"exit code {exit_code}"] if exit_code is not None else []
    if gate:
        meta.append(f"policy: {gate.policy}")
    parts.append(f'<p class="verdict-meta">{kit.escape(" · ".join(meta))}</p>')
    return f'<header id="verdict" class="verdict {"good" if good else "bad"}"><div class="wrap">{"".join(parts)}</div></header>'


def _composite_section(report: Report) -> str:
    """A composite's components (each with its own report), then the checks of them run together."""
    if not report.composite:
        return ""
    parts = []
    for title, header, rows in (
        (f"Components of the {report.composite}", facts.COMPONENT_HEADER, facts.component_rows(report)),
        ("Run together", facts.ASSEMBLED_HEADER, facts.assembled_rows(report)),
    ):
        body = [(kit.row_class(status), "".join(kit.cell(cell) for cell in cells)) for status, cells in rows]
        parts.append(f"<section><h2>{kit.escape(title)}</h2>" + kit.table(header, body) + "</section>")
    return "\n".join(parts)


def _summary_section(report: Report) -> str:
    source = report.source
    framework = " / ".join(kit.escape(part) for part in (source.framework, source.kind, source.description) if part)
    pairs = [
        ("source", f"<code>{kit.escape(source.path)}</code>" if source.path else "–"),
        ("framework", framework or "–"),
        ("source sha256", _short_sha(source.sha256)),
        ("inputs", ", ".join(f"<code>{kit.escape(i)}</code>" for i in source.inputs) or "–"),
        ("outputs", ", ".join(f"<code>{kit.escape(o)}</code>" for o in source.outputs) or "–"),
        ("command", f"<pre>{kit.escape(report.command)}</pre>" if report.command else "–"),
        ("tool version", kit.escape(report.tool_version)),
        ("created", kit.escape(report.created_at)),
        ("conversion exit code" if report.gate else "exit code", kit.escape(report.exit_code if report.exit_code is not None else "–")),
    ]
    if report.calibration:
        pairs.append(("calibration", kit.escape(report.calibration)))
    return "<section><h2>Summary</h2>" + kit.definitions(pairs) + "</section>"


# ---------------------------------------------------------------------------------------------------------------
# Artifacts and packages


def _packages_section(report: Report) -> str:
    if not report.packages:
        return ""
    rows = [
        (
            "" if package.passed else "failed",
            kit.cell(package.packager)
            + kit.cell(kit.file_size(package.size_bytes), numeric=True)
            + f"<td>{_short_sha(package.sha256)}</td>"
            + f"<td>{kit.badge('passed' if package.passed else 'failed')}</td>"
            + kit.cell(", ".join(a.key for a in package.artifacts))
            + kit.cell("; ".join(f"{c.name}: {c.status}" + (f" ({c.reason})" if c.status != "passed" else "") for c in package.checks))
            + f"<td><code>{kit.escape(package.path or '–')}</code></td>",
        )
        for package in report.packages
    ]
    headers = ["packager", "size", "sha256", "status", "holds", "structural checks", "path"]
    return "<section><h2>Packages</h2>" + kit.table(headers, rows) + "</section>"


def _artifacts_section(report: Report, relative_paths: bool) -> str:
    """One row per artifact, so that they compare at a glance; the source's benchmark first where it was measured, as
    the reference of the speed-ups."""
    if not report.artifacts:
        return '<section><h2>Artifacts</h2><p class="muted">No artifact was produced.</p></section>'
    rows = [_source_row(report)] if facts.reference_benchmark(report) else []
    rows += [_artifact_row(report, index, artifact) for index, artifact in enumerate(report.artifacts)]
    headers = [
        "format / pass",
        "verdict",
        "checks",
        "max |err|",
        "worst output",
        "min cosine",
        "p50 ms",
        "vs source",
        *(("decode tokens / s",) if facts.generates(report) else ()),
        "size",
        "precision",
        "file",
    ]
    note = '<p class="muted">Paths are relative to the folder of this page; the commands run from it.</p>' if relative_paths else ""
    return '<section id="artifacts"><h2>Artifacts</h2>' + kit.table(headers, rows) + note + "</section>"


def _source_row(report: Report) -> tuple[str, str]:
    reference = facts.reference_benchmark(report)
    return (
        "reference",
        kit.cell(f"source model ({report.source.framework or 'source'})")
        + f"<td>{kit.badge('reference', 'the speed-ups are measured against this p50')}</td>"
        + kit.cell("–") * 4
        + _p50_cell(reference)
        + kit.cell("1.00x", numeric=True)
        + _decode_cell(report, reference)
        + kit.cell("–") * 2
        + f"<td><code>{kit.escape(report.source.path or '–')}</code></td>",
    )


def _artifact_row(report: Report, index: int, artifact: ArtifactRecord) -> tuple[str, str]:
    made = f' <span class="muted">({kit.escape(artifact.format)})</span>' if artifact.key != artifact.format else ""
    if artifact.checks:
        status = "passed" if artifact.passed else "failed"
        attested = artifact.detail(PrecisionAttestation)
        why = "; ".join(
            [f"failed: {facts.place(c)}" for c in facts.failed_checks(artifact)]
            + ([f"precision: {attested.diagnosis()[0]}"] if attested is not None and attested.status == "failed" else [])
        )
    else:
        unchecked = facts.unchecked(report, artifact)
        status, why = unchecked.status, unchecked.reason
    worst = facts.worst_error(artifact.checks)
    _, cosine = facts.check_errors(artifact.checks)
    benchmark = facts.headline_benchmark(report, artifact)
    where = f"{benchmark.runtime} on {benchmark.device} at {benchmark.shape}" if benchmark else "not measured"
    return (
        {"passed": "", "skipped": "skipped"}.get(status, "failed"),
        f'<td><a href="#artifact-{index}">{kit.escape(facts.label(report, artifact))}</a>{made}</td>'
        + f"<td>{kit.badge(status, why)}</td>"
        + kit.cell(_status_counts(artifact.checks))
        + kit.cell(kit.number(worst[0] if worst else None), numeric=True)
        + (f"<td><code>{kit.escape(worst[1])}</code></td>" if worst else kit.cell("–"))
        + kit.cell(kit.number(cosine, ".6f"), numeric=True)
        + _p50_cell(benchmark, where)
        + kit.cell(facts.times(facts.speedup(report, benchmark)) if benchmark else "–", numeric=True)
        + _decode_cell(report, benchmark)
        + kit.cell(kit.file_size(artifact.size_bytes) if artifact.path else "–", numeric=True)
        + kit.cell(artifact.precision)
        + f"<td><code>{kit.escape(artifact.path or '–')}</code></td>",
    )


def _decode_cell(report: Report, benchmark: Benchmark | None) -> str:
    """A decoder's decode tokens/s in the artifacts table, its interval in the tooltip; nothing for any other model."""
    if not facts.generates(report):
        return ""
    if benchmark is None or benchmark.decode_tokens_per_s is None:
        return kit.cell("–", numeric=True)
    return f'<td class="num" title="{kit.escape(benchmark.decode())}">{kit.escape(kit.rate(benchmark.decode_tokens_per_s))}</td>'


def _artifact_section(report: Report, index: int, artifact: ArtifactRecord) -> str:
    status = "passed" if artifact.passed else "failed"
    details = [("format", kit.escape(artifact.format)), ("precision", kit.escape(artifact.precision))]
    if artifact.path:
        details += [("file", f"<code>{kit.escape(artifact.path)}</code>"), ("sha256", _short_sha(artifact.sha256))]
    if artifact.given:
        details.append(("given", f"<code>{kit.escape(artifact.path)}</code>, validated as it is"))
    if artifact.exporter or artifact.strategy:
        details.append(("exporter", kit.escape(" · ".join(p for p in (artifact.exporter, artifact.strategy) if p))))
    if artifact.dim_bounds or any(a.note for a in artifact.attempts):
        details.append(("found on export", kit.escape("; ".join(a.note for a in artifact.attempts if a.note))))
    if artifact.derived_from:
        details.append(("derived from", f"<code>{kit.escape(artifact.derived_from)}</code>"))
    if artifact.reproduce:
        details.append(("reproduce", f"<pre>{kit.escape(artifact.reproduce)}</pre>"))
    failed_attempts = [a for a in artifact.attempts if a.status == "failed"]
    attempts = "".join(
        f"<h3>Failed attempt: {kit.escape(a.strategy)} ({a.seconds:.3g} s)</h3><pre>{kit.escape(a.error)}</pre>" for a in failed_attempts
    )
    return (
        f'<section class="artifact-section" id="artifact-{index}">'
        f"<h2>{kit.escape(artifact.key)} {kit.badge(status)}</h2>"
        + kit.definitions(details)
        + attempts
        + "<h3>Checks</h3>"
        + _checks_table(artifact.checks)
        + "".join(detail.html() for detail in artifact.details)  # each kind's own section (convert/reports/details.py)
        + "<h3>Error histograms and latency</h3>"
        + _charts(artifact, report)
        + "</section>"
    )


def _charts(artifact: ArtifactRecord, report: Report) -> str:
    """The histograms and the latency chart share one grid, so they sit side by side on a wide screen."""
    histograms, histogram_notes = _histograms(artifact, report.error_histogram_edges)
    latency, benchmark_notes = _latency(artifact, report)
    figures = histograms + latency
    return (f'<div class="charts">{"".join(figures)}</div>' if figures else "") + histogram_notes + benchmark_notes


def _checks_table(checks: list[Check]) -> str:
    if not checks:
        return '<p class="muted">No checks were run.</p>'
    rows = []
    for check in checks:
        outputs = check.outputs or [None]
        check_cells = (
            f'<td rowspan="{len(outputs)}">{kit.escape(check.runtime)}</td><td rowspan="{len(outputs)}">'
            f'{kit.escape(check.device)}</td><td rowspan="{len(outputs)}">{kit.escape(check.shape)}</td>'
            f'<td rowspan="{len(outputs)}">{kit.badge(check.status)}</td>'
        )
        for position, output in enumerate(outputs):
            first = position == 0
            if output is None and check.generation is not None:
                cells = f'<td colspan="5">{kit.escape(check.generation.describe())}</td>' + kit.cell(check.reason)
                status = check.status
            elif output is None:
                cells = '<td colspan="5" class="muted">no outputs compared</td>' + kit.cell(check.reason)
                status = check.status
            else:
                reason = output.reason or (check.reason if first else "")
                cells = (
                    kit.cell(output.name)
                    + kit.cell(kit.number(output.max_abs_error), numeric=True)
                    + kit.cell(kit.number(output.cosine_similarity, ".6f"), numeric=True)
                    + kit.cell(kit.number(output.rel_rms_error), numeric=True)
                    + kit.cell(kit.number(output.top1_agreement, ".1%"), numeric=True)
                    + kit.cell(reason)
                )
                status = "failed" if output.status == "failed" else check.status
            rows.append((kit.row_class(status), (check_cells if first else "") + cells))
    headers = ["runtime", "device", "shape", "status", "output", "max |err|", "cosine", "rel rms", "top-1", "reason"]
    return kit.table(headers, rows)


def _task_section(report: Report) -> str:
    """The datasets used, and each artifact's task metrics beside the source's, with their budgets."""
    if not report.data:
        return ""
    data = kit.table(
        ["role", "path", "form", "samples used", "sha256", "detail"],
        [
            (
                "",
                kit.cell(d.role)
                + f"<td><code>{kit.escape(d.path)}</code></td>"
                + kit.cell(d.kind)
                + kit.cell(f"{len(d.used)} of {d.size}", True)
                + f"<td>{_short_sha(d.sha256)}</td>"
                + kit.cell(d.detail or "-"),
            )
            for d in report.data
        ],
    )
    rows = [
        (
            kit.row_class(m.status),
            kit.cell(artifact.key)
            + kit.cell(f"{check.runtime} · {check.device}")
            + kit.cell(m.name)
            + kit.cell(kit.number(m.source, ".4f"), True)
            + kit.cell(kit.number(m.artifact, ".4f"), True)
            + kit.cell(f"{m.drop * 100:+.2f}{drop_unit(m.name)}", True)
            + kit.cell("-" if m.budget is None else f"≤ {m.budget * 100:.2f}{drop_unit(m.name)}", True)
            + f"<td>{kit.badge(m.status)}</td>",
        )
        for artifact, check, m in report.task_rows()
    ]
    headers = ["artifact", "runtime · device", "metric", "source", "artifact value", "drop", "budget", "status"]
    reasons = sorted({c.task.reason for a in report.artifacts for c in a.task_checks() if c.task.reason})
    metrics = (
        kit.table(headers, rows)
        if rows
        else f"<p>No task metric was computed: {kit.escape('; '.join(reasons) or 'the data has no labels')}.</p>"
    )
    return "<section><h2>Task metrics on your data</h2>" + data + metrics + "</section>"


# Error histograms


def _bin_labels(edges: list[float]) -> list[str]:
    """'0' for the first bin (exact zeros and anything below the second edge), '>=X' for the open last one."""

    def decade(edge: float) -> str:
        exponent = math.log10(edge)
        if exponent.is_integer() and exponent not in (0, 1):
            return f"1e{int(exponent)}"
        return f"{edge:g}"

    return ["0", *(decade(edge) for edge in edges[1:-1]), f">={decade(edges[-1])}"] if len(edges) > 1 else ["0"]


def _histograms(artifact: ArtifactRecord, edges: list[float]) -> tuple[list[str], str]:
    """(a figure per output, notes): the histograms summed over the artifact's checks; outputs compared exactly
    have none."""
    summed: dict[str, list[int]] = {}
    checks_per_output: dict[str, int] = {}
    atols: dict[str, set[float]] = {}
    exact: list[str] = []
    for check in artifact.checks:
        for output in check.outputs:
            if not output.error_histogram:
                exact.append(output.name)
                continue
            previous = summed.get(output.name)
            summed[output.name] = [a + b for a, b in zip(previous, output.error_histogram)] if previous else list(output.error_histogram)
            checks_per_output[output.name] = checks_per_output.get(output.name, 0) + 1
            if output.atol is not None:
                atols.setdefault(output.name, set()).add(output.atol)
    figures = []
    for name, counts in summed.items():
        atol = next(iter(atols[name])) if len(atols.get(name, ())) == 1 else None
        figures.append(
            f'<figure><figcaption>{kit.escape(name)} <span class="muted">· |actual − expected| of '
            f"{sum(counts)} values over {checks_per_output[name]} check"
            f"{'s' * (checks_per_output[name] != 1)}</span></figcaption>" + _histogram_svg(name, counts, edges, atol) + "</figure>"
        )
    notes = "".join(
        f'<p class="muted">Output <code>{kit.escape(name)}</code>: compared exactly (integer or boolean), no error histogram.</p>'
        for name in dict.fromkeys(exact)
        if name not in summed
    )
    if not figures and not notes:
        notes = '<p class="muted">No outputs were compared, so there are no error histograms.</p>'
    return figures, notes


def _histogram_svg(name: str, counts: list[int], edges: list[float], atol: float | None) -> str:
    """Bars on a log count axis (the zero bin often dwarfs the tail); the count is written above each bar."""
    labels = _bin_labels(edges)
    width, height = 540, 250
    left, right, top, bottom = 46, 10, 18, 44
    plot_width, plot_height = width - left - right, height - top - bottom
    top_count = 10 ** math.ceil(math.log10(max(max(counts), 1)))
    decades = math.log10(top_count) + 1  # a count of 1 gets one decade of height, so it stays visible

    def y_of(count: float) -> float:
        return top + plot_height * (1 - (math.log10(count) + 1) / decades) if count >= 1 else top + plot_height

    parts = []
    tick = 1
    while tick <= top_count:
        y = y_of(tick)
        parts.append(kit.svg_line(left, y, left + plot_width, y, kit.GRID_COLOR))
        parts.append(kit.svg_text(left - 6, y + 4, f"{tick:,}", anchor="end", size=10, css="axis"))
        tick *= 10
    parts.append(kit.svg_text(left - 6, top + plot_height + 4, "0", anchor="end", size=10, css="axis"))
    slot = plot_width / len(counts)
    for index, count in enumerate(counts):
        x = left + index * slot
        label = labels[index] if index < len(labels) else ""
        if count:
            y = y_of(count)
            parts.append(kit.svg_rect(x + slot * 0.12, y, slot * 0.76, top + plot_height - y, kit.BAR_COLOR, f"{label}: {count:,}"))
            parts.append(kit.svg_text(x + slot / 2, y - 3, f"{count:,}", size=9))
        parts.append(kit.svg_text(x + slot / 2, top + plot_height + 14, label, size=9.5, css="axis"))
    if atol is not None and 0 < atol and len(edges) > 1:
        # Place the tolerance on the decade axis: bin i spans edges[i]..edges[i+1], log-interpolated within it.
        index = max(i for i, edge in enumerate(edges) if edge <= atol)
        inside = (
            0.0 if index == 0 or index == len(edges) - 1 else math.log10(atol / edges[index]) / math.log10(edges[index + 1] / edges[index])
        )
        x = left + (index + inside) * slot
        parts.append(kit.svg_line(x, top - 4, x, top + plot_height, kit.FAIL_COLOR, dashed=True))
        parts.append(kit.svg_text(x + 3, top + 6, f"atol {atol:g}", anchor="start", size=10, extra=f' fill="{kit.FAIL_COLOR}"'))
    parts.append(kit.svg_line(left, top + plot_height, left + plot_width, top + plot_height, kit.AXIS_COLOR))
    parts.append(kit.svg_text(left + plot_width / 2, height - 6, "|actual − expected| (decade bins)", size=10, css="axis"))
    parts.append(
        kit.svg_text(
            12, top + plot_height / 2, "count (log)", size=10, css="axis", extra=f' transform="rotate(-90 12 {top + plot_height / 2:.1f})"'
        )
    )
    return kit.svg(width, height, "histogram", f"error histogram of {name}", parts)


# ---------------------------------------------------------------------------------------------------------------
# Latency


def _latency(artifact: ArtifactRecord, report: Report) -> tuple[list[str], str]:
    """(the latency figure, if any benchmark ran, and the benchmark table or a note that none was measured)."""
    if not artifact.benchmarks:
        return [], '<p class="muted">No benchmarks were measured (run with <code>--benchmark</code>).</p>'
    measured = [b for b in artifact.benchmarks if b.status == "ok"]
    references = [b for b in report.source_benchmark if b.status == "ok"]
    table = "<h3>Benchmarks</h3>" + _benchmark_table(report, artifact.benchmarks, references)
    if not measured:
        return [], table
    # The source's runtime is named "<framework> (source)" already.
    groups = [(f"{b.runtime}/{b.device}", b, True) for b in references]
    groups += [(f"{b.runtime}/{b.device}", b, False) for b in measured]
    legend = "".join(
        f'<span><span class="swatch" style="background:{color}"></span>{p}</span>' for p, color in kit.PERCENTILE_COLORS.items()
    )
    if references:
        legend += (
            f'<span><span class="swatch" style="background:{kit.SOURCE_PERCENTILE_COLORS["p50"]}"></span>source model (reference)</span>'
        )
    figure = (
        f'<figure><figcaption>Latency <span class="muted">· ms after warm-up, at the export shape'
        f'</span></figcaption><div class="legend">{legend}</div>' + _latency_svg(artifact.key, groups) + "</figure>"
    )
    return [figure], table


def _latency_svg(name: str, groups: list[tuple[str, Benchmark, bool]]) -> str:
    """Grouped bars of p50 / p90 / p99 per runtime and device.

    The axis is linear from zero, unless the latencies span more than a factor of 20 (a 1 ms median beside an
    80 ms tail): then it is logarithmic, so that the short bars stay readable.
    """
    width, height = 540, 250
    left, right, top, bottom = 58, 10, 16, 40
    plot_width, plot_height = width - left - right, height - top - bottom
    percentiles = [{"p50": b.latency_ms_p50, "p90": b.latency_ms_p90, "p99": b.latency_ms_p99} for _, b, _ in groups]
    values = [v for row in percentiles for v in row.values() if v]
    logarithmic = bool(values) and max(values) / min(values) > 20
    if logarithmic:
        # The axis starts at least a factor of 2 below the shortest bar, so that it never looks empty.
        lowest, highest = 10 ** math.floor(math.log10(min(values) / 2)), 10 ** math.ceil(math.log10(max(values)))
        ticks = [lowest * 10**k for k in range(round(math.log10(highest / lowest)) + 1)]

        def fraction(value: float) -> float:
            return max(math.log10(value / lowest), 0.0) / math.log10(highest / lowest)
    else:
        highest = kit.nice_ceiling(max(values, default=1.0))
        ticks = [highest * step / 4 for step in range(5)]

        def fraction(value: float) -> float:
            return value / highest

    parts = []
    for tick in ticks:
        y = top + plot_height * (1 - fraction(tick))
        parts.append(kit.svg_line(left, y, left + plot_width, y, kit.GRID_COLOR))
        parts.append(kit.svg_text(left - 6, y + 4, f"{tick:g} ms", anchor="end", size=10, css="axis"))
    if logarithmic:
        parts.append(
            kit.svg_text(
                12,
                top + plot_height / 2,
                "log scale",
                size=10,
                css="axis",
                extra=f' transform="rotate(-90 12 {top + plot_height / 2:.1f})"',
            )
        )
    slot = plot_width / len(groups)
    bar = min(slot * 0.8 / 3, 44)
    for index, (label, benchmark, is_source) in enumerate(groups):
        start = left + index * slot + (slot - 3 * bar) / 2
        colors = kit.SOURCE_PERCENTILE_COLORS if is_source else kit.PERCENTILE_COLORS
        for position, (percentile, value) in enumerate(percentiles[index].items()):
            if value is None:
                continue
            bar_height = max(plot_height * fraction(value), 1.0) if value > 0 else 0.0  # 1 px keeps a tiny bar visible
            x, y = start + position * bar, top + plot_height - bar_height
            parts.append(kit.svg_rect(x + 1, y, bar - 2, bar_height, colors[percentile], f"{label} {percentile}: {value:.3g} ms"))
            parts.append(kit.svg_text(x + bar / 2, y - 3, f"{value:.3g}", size=9))
        parts.append(kit.svg_text(left + index * slot + slot / 2, top + plot_height + 15, label, size=10, css="axis"))
        parts.append(kit.svg_text(left + index * slot + slot / 2, top + plot_height + 28, benchmark.shape, size=9, css="axis"))
    parts.append(kit.svg_line(left, top + plot_height, left + plot_width, top + plot_height, kit.AXIS_COLOR))
    return kit.svg(width, height, "latency", f"latency of {name}", parts)


def _benchmark_table(report: Report, benchmarks: list[Benchmark], references: list[Benchmark]) -> str:
    rows = []
    generates = facts.generates(report)  # a decoder's prefill and decode, before the note
    for benchmark, is_source in [(b, True) for b in references] + [(b, False) for b in benchmarks]:
        speedup = "–" if is_source else facts.times(facts.speedup(report, benchmark)) or "–"
        generation = (
            kit.cell(benchmark.prefill() or "–")
            + kit.cell(benchmark.decode() or "–")
            + kit.cell("–" if is_source else facts.times(facts.decode_speedup(report, benchmark)) or "–", numeric=True)
            if generates
            else ""
        )
        throughput = (
            f"{kit.rate(benchmark.throughput_per_s)} ({benchmark.throughput_shape})" if benchmark.throughput_per_s is not None else "–"
        )
        memory = f"{benchmark.peak_memory_mb:.3g} MB ({benchmark.memory_scope})" if benchmark.peak_memory_mb is not None else "–"
        css = "reference" if is_source else kit.row_class(benchmark.status)
        rows.append(
            (
                css,
                kit.cell(benchmark.runtime)
                + kit.cell(benchmark.device)
                + f"<td>{kit.badge(benchmark.status)}</td>"
                + kit.cell(benchmark.threads or "default", numeric=True)
                + kit.cell(benchmark.shape)
                + kit.cell(benchmark.runs, numeric=True)
                + _p50_cell(benchmark)
                + kit.cell(benchmark.spread() or "–")
                + "".join(kit.cell(kit.number(v), numeric=True) for v in (benchmark.latency_ms_p90, benchmark.latency_ms_p99))
                + kit.cell(speedup, numeric=True)
                + kit.cell(throughput)
                + kit.cell(memory)
                + generation
                + kit.cell(
                    "; ".join(
                        t for t in (benchmark.computes and f"computes {benchmark.computes}", benchmark.reason, benchmark.compute_limit) if t
                    )
                ),
            )
        )
    headers = [
        "runtime",
        "device",
        "status",
        "threads",
        "shape",
        "runs",
        "p50 ms",
        "95% interval",
        "p90 ms",
        "p99 ms",
        "vs source",
        "throughput / s",
        "peak memory",
        *(("prefill ms (95% interval)", "decode tokens / s (95% interval)", "decode vs source") if generates else ()),
        "note",
    ]
    return kit.table(headers, rows)


# ---------------------------------------------------------------------------------------------------------------
# Gate, --optimize auto, stages, environment


def _gate_section(gate: Verdict) -> str:
    requirements = [("policy", f"<code>{kit.escape(gate.policy)}</code>")]
    for label, names in (
        ("required targets", gate.required_targets),
        ("required optimizations", gate.required_optimizations),
        ("required devices", gate.required_devices),
    ):
        if names:
            requirements.append((label, kit.escape(", ".join(names))))
    if gate.report:
        requirements.append(("gated report", f"<code>{kit.escape(gate.report)}</code>"))
    budgets = '<p class="muted">The policy sets no budgets.</p>'
    if gate.budgets:
        rows = [
            (
                kit.row_class(b.status),
                kit.cell(b.artifact)
                + kit.cell(b.kind)
                + kit.cell(b.metric)
                + kit.cell(b.output or "–")
                + kit.cell("/".join(p for p in (b.runtime, b.device, b.shape) if p) or "–")
                + kit.cell(b.limit, numeric=True)
                + kit.cell(kit.number(b.value), numeric=True)
                + f"<td>{kit.badge(b.status)}</td>"
                + kit.cell(b.reason),
            )
            for b in gate.budgets
        ]
        budgets = kit.table(["artifact", "kind", "metric", "output", "runtime/device/shape", "limit", "value", "status", "reason"], rows)
    baseline = _baseline(gate.baseline) if gate.baseline else '<p class="muted">No baseline report was compared.</p>'
    return (
        "<section><h2>Promotion gate</h2>"
        + kit.definitions(requirements)
        + "<h3>Budgets</h3>"
        + budgets
        + "<h3>Against the baseline</h3>"
        + baseline
        + "</section>"
    )


def _baseline(comparison: BaselineComparison) -> str:
    allowance = ", ".join(f"{k} {v:g}" for k, v in comparison.allowance.items())
    facts = kit.definitions(
        [
            ("baseline report", f"<code>{kit.escape(comparison.path)}</code>"),
            ("made by", kit.escape(" · ".join(p for p in (comparison.tool_version, comparison.created_at) if p) or "–")),
            ("same source", kit.escape("yes" if comparison.same_source else "no")),
            (
                "same environment",
                kit.escape("yes (latency deltas comparable)" if comparison.same_environment else "no (latency deltas are only indicative)"),
            ),
            ("allowance", kit.escape(allowance or "–")),
        ]
    )
    if not comparison.deltas:
        return facts + '<p class="muted">Nothing was compared.</p>'
    rows = [
        (
            kit.row_class(d.status) or ("good" if d.status == "improved" else ""),
            kit.cell(d.artifact)
            + kit.cell(d.kind)
            + kit.cell(d.metric)
            + kit.cell(d.output or "–")
            + kit.cell("/".join(p for p in (d.runtime, d.device) if p) or "–")
            + kit.cell(kit.number(d.baseline), numeric=True)
            + kit.cell(kit.number(d.current), numeric=True)
            + kit.cell(kit.number(d.delta, "+.3g"), numeric=True)
            + kit.cell(kit.number(d.delta_pct, "+.3g") + ("%" if d.delta_pct is not None else ""), numeric=True)
            + kit.cell(d.allowed or "–")
            + f"<td>{kit.badge(d.status)}</td>"
            + kit.cell(d.reason),
        )
        for d in comparison.deltas
    ]
    headers = [
        "artifact",
        "kind",
        "metric",
        "output",
        "runtime/device",
        "baseline",
        "current",
        "delta",
        "delta %",
        "allowed",
        "status",
        "reason",
    ]
    return facts + kit.table(headers, rows)


def _auto_section(auto: AutoSelection) -> str:
    classes = {"chosen": "good", "failed": "failed", "skipped": "skipped"}
    decoding = any(c.decode_tokens_per_s for c in auto.candidates)
    rows = [
        (
            classes.get(c.status, ""),
            kit.cell(c.rank or "–", numeric=True)
            + kit.cell(c.name)
            + kit.cell(c.format)
            + kit.cell(c.precision)
            + kit.cell(c.computes or "–")
            + f"<td>{kit.badge(c.status)}</td>"
            + kit.cell(c.device or "–")
            + _p50_cell(c)
            + kit.cell(kit.rate(c.throughput_per_s), numeric=True)
            + kit.cell(facts.times(c.speedup_vs_source) or "–", numeric=True)
            + (
                kit.cell(kit.number(c.prefill_ms_p50), numeric=True)
                + kit.cell(decode_figure(c.decode_tokens_per_s, c.decode_tokens_per_s_interval, None) or "–")
                + kit.cell(facts.times(c.decode_speedup_vs_source) or "–", numeric=True)
                if decoding
                else ""
            )
            + kit.cell(c.reason),
        )
        for c in auto.candidates
    ]
    headers = [
        "rank",
        "candidate",
        "format",
        "precision",
        "computes",
        "status",
        "device",
        "p50 ms",
        "throughput / s",
        "vs source",
        "reason",
    ]
    if decoding:  # a decoder's candidates, ranked by decode speed
        headers[-1:-1] = ["prefill ms", "decode tokens / s (95% interval)", "decode vs source"]
    chosen = f"chose <b>{kit.escape(auto.chosen)}</b>" if auto.chosen else "<b>no candidate passed</b>"
    return (
        f"<section><h2>--optimize auto</h2><p>{chosen}; criterion: {kit.escape(auto.criterion)}.</p>"
        + (kit.table(headers, rows) if rows else '<p class="muted">No candidates.</p>')
        + "</section>"
    )


def _timeline_section(stages: list[Stage]) -> str:
    if not stages:
        return '<section><h2>Stages</h2><p class="muted">No stages were recorded.</p></section>'
    noted = [s for s in stages if s.error or s.reason]
    rows = [
        (
            kit.row_class(s.status),
            kit.cell(s.name)
            + f"<td>{kit.badge(s.status)}</td>"
            + kit.cell(f"{s.seconds:.3g} s", numeric=True)
            + f"<td><pre>{kit.escape(s.error or s.reason)}</pre></td>",
        )
        for s in noted
    ]
    notes = kit.table(["stage", "status", "time", "error or reason"], rows) if rows else ""
    total = sum(s.seconds for s in stages)
    return (
        f'<section><h2>Stages <span class="muted">· {total:.3g} s in all</span></h2>' + _timeline_svg(stages, total) + notes + "</section>"
    )


def _timeline_svg(stages: list[Stage], total: float) -> str:
    """A Gantt chart: stages run one after another, so each bar starts where the previous one ended."""
    width, row = 1130, 20
    left, right, top, bottom = 200, 70, 6, 26
    plot_width = width - left - right
    height = top + row * len(stages) + bottom
    scale = plot_width / total if total > 0 else 0.0
    parts = []
    tick_step = kit.nice_ceiling(total / 5)
    for tick in (tick_step * k for k in range(int(total / tick_step + 1e-9) + 1)):
        x = left + tick * scale
        parts.append(kit.svg_line(x, top, x, height - bottom, kit.GRID_COLOR))
        parts.append(kit.svg_text(x, height - 8, f"{tick:g} s", size=10, css="axis"))
    start = 0.0
    for index, stage in enumerate(stages):
        y = top + index * row
        x = left + start * scale
        bar_width = max(stage.seconds * scale, 2.0)  # 2 px keeps an instant stage visible
        parts.append(kit.svg_text(left - 8, y + 14, stage.name, anchor="end", size=11))
        parts.append(
            kit.svg_rect(
                x, y + 3, bar_width, row - 6, kit.STAGE_COLORS[stage.status], f"{stage.name}: {stage.status}, {stage.seconds:.3g} s"
            )
        )
        parts.append(kit.svg_text(x + bar_width + 4, y + 14, f"{stage.seconds:.3g} s", anchor="start", size=10, css="axis"))
        start += stage.seconds
    parts.append(kit.svg_line(left, height - bottom, left + plot_width, height - bottom, kit.AXIS_COLOR))
    legend = "".join(
        f'<span><span class="swatch" style="background:{color}"></span>{status}</span>' for status, color in kit.STAGE_COLORS.items()
    )
    return f'<div class="legend">{legend}</div>' + kit.svg(width, height, "timeline", "stage timeline", parts)


def _environment_section(environment: Environment) -> str:
    facts = kit.definitions(
        [
            ("python", kit.escape(environment.python)),
            ("platform", kit.escape(environment.platform)),
            ("CPU", kit.escape(environment.cpu.describe() if environment.cpu else "–")),
            ("benchmark threads", kit.escape(environment.benchmark_threads or "–")),
            ("devices", kit.escape(", ".join(environment.devices) or "–")),
            ("device names", kit.escape(", ".join(environment.device_names) or "–")),
        ]
    )
    rows = [
        (
            "skipped" if name in environment.outside_tested else "",
            kit.cell(name) + kit.cell(version) + kit.cell(environment.outside_tested.get(name, "")),
        )
        for name, version in sorted(environment.packages.items())
    ]
    packages = (
        kit.table(["package", "version", "outside the tested versions"], rows, compact=True)
        if rows
        else '<p class="muted">No package versions recorded.</p>'
    )
    return "<section><h2>Environment</h2>" + facts + "<h3>Packages</h3>" + packages + "</section>"
