"""Markdown step summaries rendered from real reports, read back with a GitHub-flavoured Markdown parser."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from markdown_it import MarkdownIt

from convert.reports.markdown import MAX_ROWS, render_markdown, write_markdown
from tests.convert.reports.conftest import TRICKY, load, with_hand_made_verdict

CHECK_HEADER = ["artifact", "runtime", "device", "shape", "status", "worst output", "max abs error", "cosine", "reason"]
BENCHMARK_HEADER = [
    "artifact",
    "runtime",
    "device",
    "p50 ms",
    "95% interval",
    "p90 ms",
    "p99 ms",
    "vs source",
    "throughput/s",
    "peak MB",
    "note",
]


class _Rendered(HTMLParser):
    """The headings, list items and tables (rows of cell texts, header row first) of rendered HTML."""

    def __init__(self, html: str):
        super().__init__()
        self.headings: list[str] = []
        self.items: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._text: list[str] | None = None
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        if tag in ("h2", "h3", "li", "th", "td"):
            self._text = []

    def handle_endtag(self, tag):
        if tag in ("h2", "h3", "li", "th", "td") and self._text is not None:
            text = "".join(self._text).strip()
            if tag in ("th", "td"):
                self.tables[-1][-1].append(text)
            else:
                (self.items if tag == "li" else self.headings).append(text)
            self._text = None

    def handle_data(self, data):
        if self._text is not None:
            self._text.append(data)


def _rendered(markdown: str) -> _Rendered:
    return _Rendered(MarkdownIt("commonmark").enable("table").render(markdown))


def test_a_passing_report_renders_its_checks_and_benchmarks_as_tables(exported_report):
    report = load(exported_report)
    rendered = _rendered(render_markdown(report))
    assert rendered.headings[0] == "✅ PASSED: lstm.pt2" and not rendered.items
    checks, benchmarks = rendered.tables
    assert checks[0] == CHECK_HEADER and benchmarks[0] == BENCHMARK_HEADER
    assert len(checks) - 1 == sum(len(a.checks) for a in report.artifacts)
    assert all(len(row) == len(CHECK_HEADER) for row in checks)
    statuses = [row[4] for row in checks[1:]]
    assert statuses == sorted(statuses, key=lambda s: "passed" in s)  # skipped before passed
    onnx = next(row for row in checks[1:] if row[:4] == ["onnx", "onnxruntime", "cpu", "d0=2"])
    output = report.artifacts[0].checks[0].outputs[0]
    assert onnx[4:8] == ["✅ passed", "output", f"{output.max_abs_error:.2e}", f"{output.cosine_similarity:.6f}"]
    assert [row[0] for row in benchmarks[1:]] == ["source"] + [a.optimization or a.format for a in report.artifacts for _ in a.benchmarks]
    assert all(row[3] and row[4] and row[7].endswith("x") for row in benchmarks[1:])
    counts = [sum(c.status == status for a in report.artifacts for c in a.checks) for status in ("passed", "failed", "skipped")]
    assert rendered.headings[1] == "Validation ({} passed, {} failed, {} skipped)".format(*counts)


@pytest.mark.fast
def test_a_failed_report_lists_what_failed_first(failed_report):
    report = load(failed_report)
    rendered = _rendered(render_markdown(report))
    assert rendered.headings[0] == "❌ FAILED: OffInOnnxExport"
    onnx = next(a for a in report.artifacts if a.format == "onnx")
    failed = [c for c in onnx.checks if c.status == "failed"]
    assert len(rendered.items) == 3
    assert rendered.items[0].startswith(f"onnx: {len(failed)} of {len(onnx.checks)} checks failed, first onnxruntime on cpu at B=2")
    # the shift is made under torch.onnx.is_in_onnx_export(): the program torch.onnx captured already has it
    assert rendered.items[1].startswith("onnx: the program the exporter captured already differs from the source model at output 'scores'")
    assert rendered.items[2].startswith("onnx: error link by link: max abs error each link adds, at B=2: capture 0.05 (out of tolerance)")
    rows = rendered.tables[0][1:]
    assert [row[4] for row in rows[: len(failed)]] == ["❌ failed"] * len(failed) and all(row[5] == "scores" for row in rows[:3])
    assert rows[0][6] == "5.00e-02" and rows[0][8].startswith("output 'scores': 24 of 24 values differ")


def test_the_gate_verdict_adds_reasons_budgets_and_baseline_deltas(exported_report):
    markdown = render_markdown(with_hand_made_verdict(load(exported_report)))
    rendered = _rendered(markdown)
    assert rendered.headings[0] == "❌ REJECT: lstm.pt2"
    assert rendered.headings[-2:] == ["Budgets", "Baseline deltas (against baseline/report.json: same source, different environment)"]
    assert rendered.items[:4] == [
        "budget fp16: fp16: cosine 0.97 on 'output' is below 0.999",
        f"regression onnx: onnx: latency_ms_p50 regressed: {TRICKY}",
        f"missing_device onnx: onnx was not checked on cuda: {TRICKY}",
        "missing_artifact int8: int8 is required but was not built",
    ]
    assert rendered.items[5:] == ["openvino may be absent: the policy allows it"]
    budgets, deltas = rendered.tables[2:]
    assert budgets[0] == ["artifact", "metric", "limit", "value", "where", "status", "reason"]
    assert budgets[1] == ["fp16", "cosine", ">=0.999", "0.97", "output 'output', onnxruntime on cpu at d0=2", "❌ failed", TRICKY]
    assert [row[5] for row in budgets[1:]] == ["❌ failed", "⏭️ skipped", "✅ passed"]
    assert deltas[0] == ["artifact", "metric", "where", "baseline", "current", "delta", "delta %", "allowed", "status", "reason"]
    assert deltas[1] == [
        "onnx",
        "latency_ms_p50",
        "onnxruntime on cpu",
        "0.05",
        "0.07",
        "+0.02",
        "+40.0",
        "+10% +0.005",
        "❌ regressed",
        TRICKY,
    ]  # the escaped | kept the row at ten cells
    assert [row[8] for row in deltas[1:]] == ["❌ regressed", "⏭️ not compared", "✅ ok"]


def test_pipes_and_newlines_in_messages_keep_the_columns_and_long_ones_are_cut(exported_report):
    report = load(exported_report)
    message = "first | second\nthird <b>not bold</b> *nor this* " + "x" * 400
    torchscript = report.artifacts[1]
    checks = [check.model_copy(update={"reason": message}) for check in torchscript.checks]
    report.artifacts[1] = torchscript.model_copy(update={"checks": checks})
    rendered = _rendered(render_markdown(report))
    rows = [row for row in rendered.tables[0][1:] if row[0] == "torchscript"]
    assert len(rows) == len(checks) and all(len(row) == len(CHECK_HEADER) for row in rows)
    reason = rows[0][8]
    assert reason.startswith("first | second third <b>not bold</b> *nor this* xxx") and reason.endswith("…")
    assert len(reason) == 160


def test_the_check_rows_are_capped_with_failures_first(failed_report):
    report = load(failed_report)
    onnx, exported = report.artifacts
    many = exported.model_copy(update={"checks": exported.checks * 100})
    report = report.model_copy(update={"artifacts": [many, onnx]})  # the failures come last in the report
    markdown = render_markdown(report)
    rendered = _rendered(markdown)
    rows = rendered.tables[0][1:]
    assert len(rows) == MAX_ROWS
    assert [row[4] for row in rows[:3]] == ["❌ failed"] * 3 and rows[0][0] == "onnx"
    hidden = len(many.checks) + len(onnx.checks) - MAX_ROWS
    assert f"… {hidden} more rows (" in markdown and "are in the JSON report." in markdown
    assert len(markdown.encode()) < 1024 * 1024


def test_write_markdown_appends_like_a_step_summary_or_replaces(exported_report, failed_report, tmp_path):
    passed, failed = load(exported_report), load(failed_report)
    summary = tmp_path / "step_summary.md"
    summary.write_text("# Earlier step\n", encoding="utf-8")
    write_markdown(passed, summary, append=True)
    write_markdown(failed, summary, append=True)
    text = summary.read_text(encoding="utf-8")
    assert text == "# Earlier step\n\n" + render_markdown(passed) + "\n" + render_markdown(failed)
    assert [h for h in _rendered(text).headings if h.startswith(("✅", "❌"))] == ["✅ PASSED: lstm.pt2", "❌ FAILED: OffInOnnxExport"]
    write_markdown(failed, summary)
    assert summary.read_text(encoding="utf-8") == render_markdown(failed)


def test_a_real_gate_rejection_renders_its_reasons_budgets_and_deltas(rejected_gate_report):
    report = load(rejected_gate_report)
    rendered = _rendered(render_markdown(report))
    assert rendered.headings[0].startswith("❌ REJECT")
    assert len(rendered.items) >= len(report.gate.reasons)
    headers = [table[0] for table in rendered.tables]
    budgets = next(t for t in rendered.tables if "limit" in t[0])
    deltas = next(t for t in rendered.tables if "allowed" in t[0])
    assert len(budgets) - 1 == len(report.gate.budgets) and len(deltas) - 1 == len(report.gate.baseline.deltas)
    assert all(len(row) == len(table[0]) for table in rendered.tables for row in table), headers
