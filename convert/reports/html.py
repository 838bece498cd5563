"""The HTML report: one self-contained page rendered from the JSON report.

Everything is inline (CSS, SVG charts drawn here, no scripts, no fonts or images fetched), so the page can be
attached to a CI run or a review and opened offline. Every piece of text taken from the report goes through
``html.escape``: model paths, commands and error messages may hold ``<`` and ``&``. The page leads with one row per
artifact, to compare them at a glance, and names files relative to its own folder, so that it moves with them.
"""

from __future__ import annotations

import math
import os
import shlex
from html import escape
from pathlib import Path

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

PASS_COLOR = "#1a7f37"
FAIL_COLOR = "#cf222e"
BAR_COLOR = "#0969da"  # the main bars of the histogram and latency charts
PERCENTILE_COLORS = {"p50": BAR_COLOR, "p90": "#54aeff", "p99": "#b6e3ff"}
SOURCE_PERCENTILE_COLORS = {"p50": "#59636e", "p90": "#8c959f", "p99": "#d1d9e0"}
STAGE_COLORS = {"ok": "#2da44e", "failed": "#e5534b", "skipped": "#afb8c1"}
UNSTABLE_COLOR = "#bc4c00"  # orange: a warning, apart from the skipped badges' brown
AXIS_COLOR = "#8c959f"
GRID_COLOR = "#eaeef2"

CSS = f"""
* {{ box-sizing: border-box; }}
body {{ margin: 0; color: #1f2328; background: #ffffff; line-height: 1.45;
  font: 14px/1.45 -apple-system, BlinkMacSystemFont, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }}
.wrap {{ max-width: 1180px; margin: 0 auto; padding: 0 24px; }}
.verdict {{ color: #ffffff; padding: 28px 0 24px; }}
.verdict.good {{ background: {PASS_COLOR}; }}
.verdict.bad {{ background: {FAIL_COLOR}; }}
.verdict-word {{ font-size: 48px; font-weight: 800; letter-spacing: 2px; line-height: 1.1; }}
.verdict-summary {{ font-size: 18px; margin-top: 6px; font-weight: 600; }}
.verdict ul {{ margin: 14px 0 0; padding: 0; list-style: none; }}
.verdict li {{ background: rgba(255, 255, 255, 0.14); border-radius: 6px; padding: 6px 10px; margin: 4px 0;
  overflow-wrap: anywhere; }}
.verdict .code {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-weight: 700;
  margin-right: 8px; }}
.verdict .artifact {{ font-weight: 700; margin-right: 8px; }}
.verdict .notes li {{ background: rgba(0, 0, 0, 0.12); }}
.verdict-meta {{ margin: 12px 0 0; opacity: 0.9; font-size: 13px; overflow-wrap: anywhere; }}
main {{ padding-bottom: 48px; }}
h2 {{ font-size: 22px; margin: 36px 0 12px; padding-bottom: 6px; border-bottom: 1px solid #d1d9e0; }}
h3 {{ font-size: 16px; margin: 22px 0 8px; }}
.facts {{ display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 0; }}
.facts dt {{ color: #59636e; }}
.facts dd {{ margin: 0; overflow-wrap: anywhere; }}
code, pre {{ font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }}
pre {{ background: #f6f8fa; border: 1px solid #d1d9e0; border-radius: 6px; padding: 8px 10px; margin: 0;
  white-space: pre-wrap; overflow-wrap: anywhere; }}
.scroll {{ overflow-x: auto; }}
table {{ border-collapse: collapse; width: 100%; margin: 6px 0 10px; font-size: 13px; }}
th, td {{ border: 1px solid #d1d9e0; padding: 4px 8px; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }}
th {{ background: #f6f8fa; font-weight: 600; white-space: nowrap; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
table.compact {{ width: auto; min-width: 420px; }}
tr.failed > td {{ background: #ffebe9; }}
tr.skipped > td {{ background: #fff8c5; }}
tr.good > td {{ background: #dafbe1; }}
tr.reference > td {{ background: #f6f8fa; font-style: italic; }}
.badge {{ display: inline-block; border-radius: 10px; padding: 0 8px; font-size: 12px; font-weight: 600;
  white-space: nowrap; color: #ffffff; background: #59636e; }}
.badge.passed, .badge.ok, .badge.chosen, .badge.improved {{ background: {PASS_COLOR}; }}
.badge.failed, .badge.regressed {{ background: {FAIL_COLOR}; }}
.badge.skipped, .badge.lost, .badge.not_compared {{ background: #9a6700; }}
.badge.unstable {{ background: {UNSTABLE_COLOR}; margin-left: 6px; cursor: help; }}
.muted {{ color: #59636e; }}
.artifact-section {{ border: 1px solid #d1d9e0; border-radius: 8px; padding: 4px 18px 12px; margin: 18px 0; }}
.artifact-section h2 {{ border: 0; margin-top: 14px; }}
.charts {{ display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 16px; }}
figure {{ margin: 0; border: 1px solid #eaeef2; border-radius: 6px; padding: 8px 10px; }}
figcaption {{ font-weight: 600; margin-bottom: 4px; overflow-wrap: anywhere; }}
figcaption .muted {{ font-weight: 400; }}
svg.chart {{ display: block; max-width: 100%; height: auto; }}
svg.chart text {{ font-family: inherit; fill: #1f2328; }}
svg.chart text.axis {{ fill: #59636e; }}
.legend {{ display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; color: #59636e; margin: 2px 0 4px; }}
.swatch {{ display: inline-block; width: 10px; height: 10px; border-radius: 2px; margin-right: 4px;
  vertical-align: -1px; }}
"""


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
            f"<title>{_e(word)} · {_e(facts.source_name(report))} · convert report</title>",
            f"<style>{CSS}</style>",
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


def _e(value: object) -> str:
    return escape(str(value))


def _num(value: float | None, spec: str = ".3g") -> str:
    return "–" if value is None else format(value, spec)


def _rate(per_second: float | None) -> str:
    """Throughput: whole numbers with thousands separators once large, three digits below."""
    if per_second is None:
        return "–"
    return f"{per_second:,.0f}" if per_second >= 1000 else f"{per_second:.3g}"


def _size(size_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.3g} {unit}"
    return f"{size_bytes} B"


def _short_sha(sha256: str | None) -> str:
    return f'<code title="{_e(sha256)}">{_e(sha256[:12])}</code>' if sha256 else "–"


def _badge(status: str, tooltip: str = "") -> str:
    title = f' title="{_e(tooltip)}"' if tooltip else ""
    return f'<span class="badge {_e(status.replace(" ", "_"))}"{title}>{_e(status.replace("_", " "))}</span>'


def _unstable_badge(timed: Benchmark | AutoCandidate) -> str:
    """A warning beside a p50 too noisy to rank, its reason in the tooltip; "" beside a stable one."""
    why = facts.instability(timed)
    return f'<span class="badge unstable" title="{_e(why)}" aria-label="{_e(why)}">⚠ unstable</span>' if why else ""


def _p50_cell(timed: Benchmark | AutoCandidate | None, tooltip: str = "") -> str:
    """A p50 in ms with its unstable warning; "–" where it was not measured."""
    title = f' title="{_e(tooltip)}"' if tooltip else ""
    if timed is None:
        return f'<td class="num"{title}>–</td>'
    return f'<td class="num"{title}>{_e(_num(timed.latency_ms_p50))}{_unstable_badge(timed)}</td>'


def _table(headers: list[str], rows: list[tuple[str, str]], compact: bool = False) -> str:
    """A table from (css class, cells HTML) rows; ``th`` cells come from plain header names."""
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "\n".join(f'<tr class="{css}">{cells}</tr>' for css, cells in rows)
    table = '<table class="compact">' if compact else "<table>"
    return f'<div class="scroll">{table}<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div>'


def _td(text: object, numeric: bool = False) -> str:
    return f'<td class="num">{_e(text)}</td>' if numeric else f"<td>{_e(text)}</td>"


def _row_class(status: str) -> str:
    return {"failed": "failed", "regressed": "failed", "skipped": "skipped", "not_compared": "skipped"}.get(status, "")


def _svg(width: int, height: int, kind: str, label: str, parts: list[str]) -> str:
    return (
        f'<svg class="chart" data-chart="{kind}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{_e(label)}"><title>{_e(label)}</title>' + "".join(parts) + "</svg>"
    )


def _text(x: float, y: float, text: str, anchor: str = "middle", size: float = 11, css: str = "", extra: str = "") -> str:
    css_attr = f' class="{css}"' if css else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{css_attr}{extra}>{_e(text)}</text>'


def _rect(x: float, y: float, width: float, height: float, fill: str, tooltip: str = "") -> str:
    title = f"<title>{_e(tooltip)}</title>" if tooltip else ""
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" fill="{fill}">{title}</rect>'


def _line(x1: float, y1: float, x2: float, y2: float, color: str, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" stroke-width="1"{dash}/>'


def _nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value``: round axis maxima."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


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
    parts = [f'<div class="verdict-word">{_e(word)}</div>']
    parts.append(f'<div class="verdict-summary">{_e(gate.summary() if gate else _run_summary(report))}</div>')
    if gate and gate.reasons:
        items = "".join(
            f'<li><span class="code">{_e(r.code)}</span>'
            + (f'<span class="artifact">{_e(r.artifact)}</span>' if r.artifact else "")
            + f"{_e(r.message)}</li>"
            for r in gate.reasons
        )
        parts.append(f'<ul class="reasons">{items}</ul>')
    if gate and gate.notes:
        parts.append('<ul class="notes">' + "".join(f"<li>note: {_e(n)}</li>" for n in gate.notes) + "</ul>")
    if report.unbuilt and not gate:  # a gate names them among its reasons
        items = "".join(
            f'<li><span class="code">not built</span><span class="artifact">{_e(u.artifact)}</span>{_e(u.reason)}</li>'
            for u in report.unbuilt
        )
        parts.append(f'<ul class="reasons">{items}</ul>')
    if report.error:
        parts.append(f'<ul class="reasons"><li><span class="code">error</span>{_e(report.error)}</li></ul>')
    exit_code = gate.exit_code if gate else report.exit_code
    meta = [f"exit code {exit_code}"] if exit_code is not None else []
    if gate:
        meta.append(f"policy: {gate.policy}")
    parts.append(f'<p class="verdict-meta">{_e(" · ".join(meta))}</p>')
    return f'<header id="verdict" class="verdict {"good" if good else "bad"}"><div class="wrap">{"".join(parts)}</div></header>'


def _facts(pairs: list[tuple[str, str]]) -> str:
    """A definition list from (plain label, value HTML) pairs."""
    return '<dl class="facts">' + "".join(f"<dt>{_e(label)}</dt><dd>{value}</dd>" for label, value in pairs) + "</dl>"


def _composite_section(report: Report) -> str:
    """A composite's components (each with its own report), then the checks of them run together."""
    if not report.composite:
        return ""
    parts = []
    for title, header, rows in (
        (f"Components of the {report.composite}", facts.COMPONENT_HEADER, facts.component_rows(report)),
        ("Run together", facts.ASSEMBLED_HEADER, facts.assembled_rows(report)),
    ):
        body = [(_row_class(status), "".join(_td(cell) for cell in cells)) for status, cells in rows]
        parts.append(f"<section><h2>{_e(title)}</h2>" + _table(header, body) + "</section>")
    return "\n".join(parts)


def _summary_section(report: Report) -> str:
    source = report.source
    framework = " / ".join(_e(part) for part in (source.framework, source.kind, source.description) if part)
    pairs = [
        ("source", f"<code>{_e(source.path)}</code>" if source.path else "–"),
        ("framework", framework or "–"),
        ("source sha256", _short_sha(source.sha256)),
        ("inputs", ", ".join(f"<code>{_e(i)}</code>" for i in source.inputs) or "–"),
        ("outputs", ", ".join(f"<code>{_e(o)}</code>" for o in source.outputs) or "–"),
        ("command", f"<pre>{_e(report.command)}</pre>" if report.command else "–"),
        ("tool version", _e(report.tool_version)),
        ("created", _e(report.created_at)),
        ("conversion exit code" if report.gate else "exit code", _e(report.exit_code if report.exit_code is not None else "–")),
    ]
    if report.calibration:
        pairs.append(("calibration", _e(report.calibration)))
    return "<section><h2>Summary</h2>" + _facts(pairs) + "</section>"


# ---------------------------------------------------------------------------------------------------------------
# Artifacts and packages


def _packages_section(report: Report) -> str:
    if not report.packages:
        return ""
    rows = [
        (
            "" if package.passed else "failed",
            _td(package.packager)
            + _td(_size(package.size_bytes), numeric=True)
            + f"<td>{_short_sha(package.sha256)}</td>"
            + f"<td>{_badge('passed' if package.passed else 'failed')}</td>"
            + _td(", ".join(a.key for a in package.artifacts))
            + _td("; ".join(f"{c.name}: {c.status}" + (f" ({c.reason})" if c.status != "passed" else "") for c in package.checks))
            + f"<td><code>{_e(package.path or '–')}</code></td>",
        )
        for package in report.packages
    ]
    headers = ["packager", "size", "sha256", "status", "holds", "structural checks", "path"]
    return "<section><h2>Packages</h2>" + _table(headers, rows) + "</section>"


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
    return '<section id="artifacts"><h2>Artifacts</h2>' + _table(headers, rows) + note + "</section>"


def _source_row(report: Report) -> tuple[str, str]:
    reference = facts.reference_benchmark(report)
    return (
        "reference",
        _td(f"source model ({report.source.framework or 'source'})")
        + f"<td>{_badge('reference', 'the speed-ups are measured against this p50')}</td>"
        + _td("–") * 4
        + _p50_cell(reference)
        + _td("1.00x", numeric=True)
        + _decode_cell(report, reference)
        + _td("–") * 2
        + f"<td><code>{_e(report.source.path or '–')}</code></td>",
    )


def _artifact_row(report: Report, index: int, artifact: ArtifactRecord) -> tuple[str, str]:
    made = f' <span class="muted">({_e(artifact.format)})</span>' if artifact.key != artifact.format else ""
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
        f'<td><a href="#artifact-{index}">{_e(facts.label(report, artifact))}</a>{made}</td>'
        + f"<td>{_badge(status, why)}</td>"
        + _td(_status_counts(artifact.checks))
        + _td(_num(worst[0] if worst else None), numeric=True)
        + (f"<td><code>{_e(worst[1])}</code></td>" if worst else _td("–"))
        + _td(_num(cosine, ".6f"), numeric=True)
        + _p50_cell(benchmark, where)
        + _td(facts.times(facts.speedup(report, benchmark)) if benchmark else "–", numeric=True)
        + _decode_cell(report, benchmark)
        + _td(_size(artifact.size_bytes) if artifact.path else "–", numeric=True)
        + _td(artifact.precision)
        + f"<td><code>{_e(artifact.path or '–')}</code></td>",
    )


def _decode_cell(report: Report, benchmark: Benchmark | None) -> str:
    """A decoder's decode tokens/s in the artifacts table, its interval in the tooltip; nothing for any other model."""
    if not facts.generates(report):
        return ""
    if benchmark is None or benchmark.decode_tokens_per_s is None:
        return _td("–", numeric=True)
    return f'<td class="num" title="{_e(benchmark.decode())}">{_e(_rate(benchmark.decode_tokens_per_s))}</td>'


def _artifact_section(report: Report, index: int, artifact: ArtifactRecord) -> str:
    status = "passed" if artifact.passed else "failed"
    details = [("format", _e(artifact.format)), ("precision", _e(artifact.precision))]
    if artifact.path:
        details += [("file", f"<code>{_e(artifact.path)}</code>"), ("sha256", _short_sha(artifact.sha256))]
    if artifact.given:
        details.append(("given", f"<code>{_e(artifact.path)}</code>, validated as it is"))
    if artifact.exporter or artifact.strategy:
        details.append(("exporter", _e(" · ".join(p for p in (artifact.exporter, artifact.strategy) if p))))
    if artifact.dim_bounds or any(a.note for a in artifact.attempts):
        details.append(("found on export", _e("; ".join(a.note for a in artifact.attempts if a.note))))
    if artifact.derived_from:
        details.append(("derived from", f"<code>{_e(artifact.derived_from)}</code>"))
    if artifact.reproduce:
        details.append(("reproduce", f"<pre>{_e(artifact.reproduce)}</pre>"))
    failed_attempts = [a for a in artifact.attempts if a.status == "failed"]
    attempts = "".join(f"<h3>Failed attempt: {_e(a.strategy)} ({a.seconds:.3g} s)</h3><pre>{_e(a.error)}</pre>" for a in failed_attempts)
    return (
        f'<section class="artifact-section" id="artifact-{index}">'
        f"<h2>{_e(artifact.key)} {_badge(status)}</h2>"
        + _facts(details)
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
            f'<td rowspan="{len(outputs)}">{_e(check.runtime)}</td><td rowspan="{len(outputs)}">'
            f'{_e(check.device)}</td><td rowspan="{len(outputs)}">{_e(check.shape)}</td>'
            f'<td rowspan="{len(outputs)}">{_badge(check.status)}</td>'
        )
        for position, output in enumerate(outputs):
            first = position == 0
            if output is None and check.generation is not None:
                cells = f'<td colspan="5">{_e(check.generation.describe())}</td>' + _td(check.reason)
                status = check.status
            elif output is None:
                cells = '<td colspan="5" class="muted">no outputs compared</td>' + _td(check.reason)
                status = check.status
            else:
                reason = output.reason or (check.reason if first else "")
                cells = (
                    _td(output.name)
                    + _td(_num(output.max_abs_error), numeric=True)
                    + _td(_num(output.cosine_similarity, ".6f"), numeric=True)
                    + _td(_num(output.rel_rms_error), numeric=True)
                    + _td(_num(output.top1_agreement, ".1%"), numeric=True)
                    + _td(reason)
                )
                status = "failed" if output.status == "failed" else check.status
            rows.append((_row_class(status), (check_cells if first else "") + cells))
    headers = ["runtime", "device", "shape", "status", "output", "max |err|", "cosine", "rel rms", "top-1", "reason"]
    return _table(headers, rows)


def _task_section(report: Report) -> str:
    """The datasets used, and each artifact's task metrics beside the source's, with their budgets."""
    if not report.data:
        return ""
    data = _table(
        ["role", "path", "form", "samples used", "sha256", "detail"],
        [
            (
                "",
                _td(d.role)
                + f"<td><code>{_e(d.path)}</code></td>"
                + _td(d.kind)
                + _td(f"{len(d.used)} of {d.size}", True)
                + f"<td>{_short_sha(d.sha256)}</td>"
                + _td(d.detail or "-"),
            )
            for d in report.data
        ],
    )
    rows = [
        (
            _row_class(m.status),
            _td(artifact.key)
            + _td(f"{check.runtime} · {check.device}")
            + _td(m.name)
            + _td(_num(m.source, ".4f"), True)
            + _td(_num(m.artifact, ".4f"), True)
            + _td(f"{m.drop * 100:+.2f}{drop_unit(m.name)}", True)
            + _td("-" if m.budget is None else f"≤ {m.budget * 100:.2f}{drop_unit(m.name)}", True)
            + f"<td>{_badge(m.status)}</td>",
        )
        for artifact, check, m in report.task_rows()
    ]
    headers = ["artifact", "runtime · device", "metric", "source", "artifact value", "drop", "budget", "status"]
    reasons = sorted({c.task.reason for a in report.artifacts for c in a.task_checks() if c.task.reason})
    metrics = (
        _table(headers, rows) if rows else f"<p>No task metric was computed: {_e('; '.join(reasons) or 'the data has no labels')}.</p>"
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
            f'<figure><figcaption>{_e(name)} <span class="muted">· |actual − expected| of '
            f"{sum(counts)} values over {checks_per_output[name]} check"
            f"{'s' * (checks_per_output[name] != 1)}</span></figcaption>" + _histogram_svg(name, counts, edges, atol) + "</figure>"
        )
    notes = "".join(
        f'<p class="muted">Output <code>{_e(name)}</code>: compared exactly (integer or boolean), no error histogram.</p>'
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
        parts.append(_line(left, y, left + plot_width, y, GRID_COLOR))
        parts.append(_text(left - 6, y + 4, f"{tick:,}", anchor="end", size=10, css="axis"))
        tick *= 10
    parts.append(_text(left - 6, top + plot_height + 4, "0", anchor="end", size=10, css="axis"))
    slot = plot_width / len(counts)
    for index, count in enumerate(counts):
        x = left + index * slot
        label = labels[index] if index < len(labels) else ""
        if count:
            y = y_of(count)
            parts.append(_rect(x + slot * 0.12, y, slot * 0.76, top + plot_height - y, BAR_COLOR, f"{label}: {count:,}"))
            parts.append(_text(x + slot / 2, y - 3, f"{count:,}", size=9))
        parts.append(_text(x + slot / 2, top + plot_height + 14, label, size=9.5, css="axis"))
    if atol is not None and 0 < atol and len(edges) > 1:
        # Place the tolerance on the decade axis: bin i spans edges[i]..edges[i+1], log-interpolated within it.
        index = max(i for i, edge in enumerate(edges) if edge <= atol)
        inside = (
            0.0 if index == 0 or index == len(edges) - 1 else math.log10(atol / edges[index]) / math.log10(edges[index + 1] / edges[index])
        )
        x = left + (index + inside) * slot
        parts.append(_line(x, top - 4, x, top + plot_height, FAIL_COLOR, dashed=True))
        parts.append(_text(x + 3, top + 6, f"atol {atol:g}", anchor="start", size=10, extra=f' fill="{FAIL_COLOR}"'))
    parts.append(_line(left, top + plot_height, left + plot_width, top + plot_height, AXIS_COLOR))
    parts.append(_text(left + plot_width / 2, height - 6, "|actual − expected| (decade bins)", size=10, css="axis"))
    parts.append(
        _text(
            12, top + plot_height / 2, "count (log)", size=10, css="axis", extra=f' transform="rotate(-90 12 {top + plot_height / 2:.1f})"'
        )
    )
    return _svg(width, height, "histogram", f"error histogram of {name}", parts)


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
    legend = "".join(f'<span><span class="swatch" style="background:{color}"></span>{p}</span>' for p, color in PERCENTILE_COLORS.items())
    if references:
        legend += f'<span><span class="swatch" style="background:{SOURCE_PERCENTILE_COLORS["p50"]}"></span>source model (reference)</span>'
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
        highest = _nice_ceiling(max(values, default=1.0))
        ticks = [highest * step / 4 for step in range(5)]

        def fraction(value: float) -> float:
            return value / highest

    parts = []
    for tick in ticks:
        y = top + plot_height * (1 - fraction(tick))
        parts.append(_line(left, y, left + plot_width, y, GRID_COLOR))
        parts.append(_text(left - 6, y + 4, f"{tick:g} ms", anchor="end", size=10, css="axis"))
    if logarithmic:
        parts.append(
            _text(
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
        colors = SOURCE_PERCENTILE_COLORS if is_source else PERCENTILE_COLORS
        for position, (percentile, value) in enumerate(percentiles[index].items()):
            if value is None:
                continue
            bar_height = max(plot_height * fraction(value), 1.0) if value > 0 else 0.0  # 1 px keeps a tiny bar visible
            x, y = start + position * bar, top + plot_height - bar_height
            parts.append(_rect(x + 1, y, bar - 2, bar_height, colors[percentile], f"{label} {percentile}: {value:.3g} ms"))
            parts.append(_text(x + bar / 2, y - 3, f"{value:.3g}", size=9))
        parts.append(_text(left + index * slot + slot / 2, top + plot_height + 15, label, size=10, css="axis"))
        parts.append(_text(left + index * slot + slot / 2, top + plot_height + 28, benchmark.shape, size=9, css="axis"))
    parts.append(_line(left, top + plot_height, left + plot_width, top + plot_height, AXIS_COLOR))
    return _svg(width, height, "latency", f"latency of {name}", parts)


def _benchmark_table(report: Report, benchmarks: list[Benchmark], references: list[Benchmark]) -> str:
    rows = []
    generates = facts.generates(report)  # a decoder's prefill and decode, before the note
    for benchmark, is_source in [(b, True) for b in references] + [(b, False) for b in benchmarks]:
        speedup = "–" if is_source else facts.times(facts.speedup(report, benchmark)) or "–"
        generation = (
            _td(benchmark.prefill() or "–")
            + _td(benchmark.decode() or "–")
            + _td("–" if is_source else facts.times(facts.decode_speedup(report, benchmark)) or "–", numeric=True)
            if generates
            else ""
        )
        throughput = (
            f"{_rate(benchmark.throughput_per_s)} ({benchmark.throughput_shape})" if benchmark.throughput_per_s is not None else "–"
        )
        memory = f"{benchmark.peak_memory_mb:.3g} MB ({benchmark.memory_scope})" if benchmark.peak_memory_mb is not None else "–"
        css = "reference" if is_source else _row_class(benchmark.status)
        rows.append(
            (
                css,
                _td(benchmark.runtime)
                + _td(benchmark.device)
                + f"<td>{_badge(benchmark.status)}</td>"
                + _td(benchmark.threads or "default", numeric=True)
                + _td(benchmark.shape)
                + _td(benchmark.runs, numeric=True)
                + _p50_cell(benchmark)
                + _td(benchmark.spread() or "–")
                + "".join(_td(_num(v), numeric=True) for v in (benchmark.latency_ms_p90, benchmark.latency_ms_p99))
                + _td(speedup, numeric=True)
                + _td(throughput)
                + _td(memory)
                + generation
                + _td(
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
    return _table(headers, rows)


# ---------------------------------------------------------------------------------------------------------------
# Gate, --optimize auto, stages, environment


def _gate_section(gate: Verdict) -> str:
    requirements = [("policy", f"<code>{_e(gate.policy)}</code>")]
    for label, names in (
        ("required targets", gate.required_targets),
        ("required optimizations", gate.required_optimizations),
        ("required devices", gate.required_devices),
    ):
        if names:
            requirements.append((label, _e(", ".join(names))))
    if gate.report:
        requirements.append(("gated report", f"<code>{_e(gate.report)}</code>"))
    budgets = '<p class="muted">The policy sets no budgets.</p>'
    if gate.budgets:
        rows = [
            (
                _row_class(b.status),
                _td(b.artifact)
                + _td(b.kind)
                + _td(b.metric)
                + _td(b.output or "–")
                + _td("/".join(p for p in (b.runtime, b.device, b.shape) if p) or "–")
                + _td(b.limit, numeric=True)
                + _td(_num(b.value), numeric=True)
                + f"<td>{_badge(b.status)}</td>"
                + _td(b.reason),
            )
            for b in gate.budgets
        ]
        budgets = _table(["artifact", "kind", "metric", "output", "runtime/device/shape", "limit", "value", "status", "reason"], rows)
    baseline = _baseline(gate.baseline) if gate.baseline else '<p class="muted">No baseline report was compared.</p>'
    return (
        "<section><h2>Promotion gate</h2>"
        + _facts(requirements)
        + "<h3>Budgets</h3>"
        + budgets
        + "<h3>Against the baseline</h3>"
        + baseline
        + "</section>"
    )


def _baseline(comparison: BaselineComparison) -> str:
    allowance = ", ".join(f"{k} {v:g}" for k, v in comparison.allowance.items())
    facts = _facts(
        [
            ("baseline report", f"<code>{_e(comparison.path)}</code>"),
            ("made by", _e(" · ".join(p for p in (comparison.tool_version, comparison.created_at) if p) or "–")),
            ("same source", _e("yes" if comparison.same_source else "no")),
            (
                "same environment",
                _e("yes (latency deltas comparable)" if comparison.same_environment else "no (latency deltas are only indicative)"),
            ),
            ("allowance", _e(allowance or "–")),
        ]
    )
    if not comparison.deltas:
        return facts + '<p class="muted">Nothing was compared.</p>'
    rows = [
        (
            _row_class(d.status) or ("good" if d.status == "improved" else ""),
            _td(d.artifact)
            + _td(d.kind)
            + _td(d.metric)
            + _td(d.output or "–")
            + _td("/".join(p for p in (d.runtime, d.device) if p) or "–")
            + _td(_num(d.baseline), numeric=True)
            + _td(_num(d.current), numeric=True)
            + _td(_num(d.delta, "+.3g"), numeric=True)
            + _td(_num(d.delta_pct, "+.3g") + ("%" if d.delta_pct is not None else ""), numeric=True)
            + _td(d.allowed or "–")
            + f"<td>{_badge(d.status)}</td>"
            + _td(d.reason),
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
    return facts + _table(headers, rows)


def _auto_section(auto: AutoSelection) -> str:
    classes = {"chosen": "good", "failed": "failed", "skipped": "skipped"}
    decoding = any(c.decode_tokens_per_s for c in auto.candidates)
    rows = [
        (
            classes.get(c.status, ""),
            _td(c.rank or "–", numeric=True)
            + _td(c.name)
            + _td(c.format)
            + _td(c.precision)
            + _td(c.computes or "–")
            + f"<td>{_badge(c.status)}</td>"
            + _td(c.device or "–")
            + _p50_cell(c)
            + _td(_rate(c.throughput_per_s), numeric=True)
            + _td(facts.times(c.speedup_vs_source) or "–", numeric=True)
            + (
                _td(_num(c.prefill_ms_p50), numeric=True)
                + _td(decode_figure(c.decode_tokens_per_s, c.decode_tokens_per_s_interval, None) or "–")
                + _td(facts.times(c.decode_speedup_vs_source) or "–", numeric=True)
                if decoding
                else ""
            )
            + _td(c.reason),
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
    chosen = f"chose <b>{_e(auto.chosen)}</b>" if auto.chosen else "<b>no candidate passed</b>"
    return (
        f"<section><h2>--optimize auto</h2><p>{chosen}; criterion: {_e(auto.criterion)}.</p>"
        + (_table(headers, rows) if rows else '<p class="muted">No candidates.</p>')
        + "</section>"
    )


def _timeline_section(stages: list[Stage]) -> str:
    if not stages:
        return '<section><h2>Stages</h2><p class="muted">No stages were recorded.</p></section>'
    noted = [s for s in stages if s.error or s.reason]
    rows = [
        (
            _row_class(s.status),
            _td(s.name)
            + f"<td>{_badge(s.status)}</td>"
            + _td(f"{s.seconds:.3g} s", numeric=True)
            + f"<td><pre>{_e(s.error or s.reason)}</pre></td>",
        )
        for s in noted
    ]
    notes = _table(["stage", "status", "time", "error or reason"], rows) if rows else ""
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
    tick_step = _nice_ceiling(total / 5)
    for tick in (tick_step * k for k in range(int(total / tick_step + 1e-9) + 1)):
        x = left + tick * scale
        parts.append(_line(x, top, x, height - bottom, GRID_COLOR))
        parts.append(_text(x, height - 8, f"{tick:g} s", size=10, css="axis"))
    start = 0.0
    for index, stage in enumerate(stages):
        y = top + index * row
        x = left + start * scale
        bar_width = max(stage.seconds * scale, 2.0)  # 2 px keeps an instant stage visible
        parts.append(_text(left - 8, y + 14, stage.name, anchor="end", size=11))
        parts.append(
            _rect(x, y + 3, bar_width, row - 6, STAGE_COLORS[stage.status], f"{stage.name}: {stage.status}, {stage.seconds:.3g} s")
        )
        parts.append(_text(x + bar_width + 4, y + 14, f"{stage.seconds:.3g} s", anchor="start", size=10, css="axis"))
        start += stage.seconds
    parts.append(_line(left, height - bottom, left + plot_width, height - bottom, AXIS_COLOR))
    legend = "".join(
        f'<span><span class="swatch" style="background:{color}"></span>{status}</span>' for status, color in STAGE_COLORS.items()
    )
    return f'<div class="legend">{legend}</div>' + _svg(width, height, "timeline", "stage timeline", parts)


def _environment_section(environment: Environment) -> str:
    facts = _facts(
        [
            ("python", _e(environment.python)),
            ("platform", _e(environment.platform)),
            ("CPU", _e(environment.cpu.describe() if environment.cpu else "–")),
            ("benchmark threads", _e(environment.benchmark_threads or "–")),
            ("devices", _e(", ".join(environment.devices) or "–")),
            ("device names", _e(", ".join(environment.device_names) or "–")),
        ]
    )
    rows = [
        ("skipped" if name in environment.outside_tested else "", _td(name) + _td(version) + _td(environment.outside_tested.get(name, "")))
        for name, version in sorted(environment.packages.items())
    ]
    packages = (
        _table(["package", "version", "outside the tested versions"], rows, compact=True)
        if rows
        else '<p class="muted">No package versions recorded.</p>'
    )
    return "<section><h2>Environment</h2>" + facts + "<h3>Packages</h3>" + packages + "</section>"
