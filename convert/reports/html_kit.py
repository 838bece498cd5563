"""The pieces the HTML report is built of, for its renderer and for each report detail's own ``html()``: escaping,
number formats, tables, badges, definition lists, the page's CSS and colours, and SVG chart primitives.

Every piece of text passed in is escaped here; what a function takes as HTML (a table's cells, a definition's value)
says so.
"""

from __future__ import annotations

import html
import math

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


def escape(value: object) -> str:
    return html.escape(str(value))


def number(value: float | None, spec: str = ".3g") -> str:
    return "–" if value is None else format(value, spec)


def rate(per_second: float | None) -> str:
    """Throughput: whole numbers with thousands separators once large, three digits below."""
    if per_second is None:
        return "–"
    return f"{per_second:,.0f}" if per_second >= 1000 else f"{per_second:.3g}"


def file_size(size_bytes: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size_bytes >= scale:
            return f"{size_bytes / scale:.3g} {unit}"
    return f"{size_bytes} B"


def badge(status: str, tooltip: str = "") -> str:
    title = f' title="{escape(tooltip)}"' if tooltip else ""
    return f'<span class="badge {escape(status.replace(" ", "_"))}"{title}>{escape(status.replace("_", " "))}</span>'


def table(headers: list[str], rows: list[tuple[str, str]], compact: bool = False) -> str:
    """A table from (css class, cells HTML) rows; ``th`` cells come from plain header names."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "\n".join(f'<tr class="{css}">{cells}</tr>' for css, cells in rows)
    table = '<table class="compact">' if compact else "<table>"
    return f'<div class="scroll">{table}<thead><tr>{head}</tr></thead><tbody>\n{body}\n</tbody></table></div>'


def cell(text: object, numeric: bool = False) -> str:
    return f'<td class="num">{escape(text)}</td>' if numeric else f"<td>{escape(text)}</td>"


def row_class(status: str) -> str:
    return {"failed": "failed", "regressed": "failed", "skipped": "skipped", "not_compared": "skipped"}.get(status, "")


def svg(width: int, height: int, kind: str, label: str, parts: list[str]) -> str:
    return (
        f'<svg class="chart" data-chart="{kind}" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{escape(label)}"><title>{escape(label)}</title>' + "".join(parts) + "</svg>"
    )


def svg_text(x: float, y: float, text: str, anchor: str = "middle", size: float = 11, css: str = "", extra: str = "") -> str:
    css_attr = f' class="{css}"' if css else ""
    return f'<text x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}" font-size="{size}"{css_attr}{extra}>{escape(text)}</text>'


def svg_rect(x: float, y: float, width: float, height: float, fill: str, tooltip: str = "") -> str:
    title = f"<title>{escape(tooltip)}</title>" if tooltip else ""
    return f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" fill="{fill}">{title}</rect>'


def svg_line(x1: float, y1: float, x2: float, y2: float, color: str, dashed: bool = False) -> str:
    dash = ' stroke-dasharray="4 3"' if dashed else ""
    return f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" stroke="{color}" stroke-width="1"{dash}/>'


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten that is at least ``value``: round axis maxima."""
    if value <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(value))
    return next(step * power for step in (1, 2, 2.5, 5, 10) if step * power >= value)


def definitions(pairs: list[tuple[str, str]]) -> str:
    """A definition list from (plain label, value HTML) pairs."""
    return '<dl class="facts">' + "".join(f"<dt>{escape(label)}</dt><dd>{value}</dd>" for label, value in pairs) + "</dl>"
