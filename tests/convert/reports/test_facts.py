"""The facts every rendering derives from a report (convert/reports/facts.py), on reports built by hand: each function,
then, for each fact two renderings used to compute on their own, that they now agree on it."""

from __future__ import annotations

import html
import io
import xml.etree.ElementTree as ET

import pytest
from rich.console import Console

from convert.reports import facts
from convert.reports import model as rm
from convert.reports.console import print_failures, print_summary, print_verdict
from convert.reports.html import render_html
from convert.reports.junit import render_junit
from convert.reports.markdown import render_markdown

pytestmark = pytest.mark.fast


def _check(status: str = "passed", shape: str = "B=2", reason: str = "", **fields) -> rm.Check:
    return rm.Check(runtime="onnxruntime", device="cpu", shape=shape, status=status, reason=reason, **fields)


def _output(name: str = "y", status: str = "passed", **metrics) -> rm.OutputMetrics:
    return rm.OutputMetrics(name=name, status=status, **metrics)


def _benchmark(p50: float | None, status: str = "ok", runtime: str = "onnxruntime") -> rm.Benchmark:
    return rm.Benchmark(runtime=runtime, device="cpu", status=status, latency_ms_p50=p50, latency_ms_p90=p50, latency_ms_p99=p50)


def _report(*artifacts: rm.ArtifactRecord, **fields) -> rm.Report:
    fields.setdefault("passed", all(a.passed for a in artifacts))
    return rm.Report(
        tool_version="0",
        created_at="2026-01-01T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=["cpu"]),
        artifacts=list(artifacts),
        **fields,
    )


def _auto_report() -> rm.Report:
    """fp16 chosen by --optimize auto over int8, whose check failed."""
    chosen = rm.ArtifactRecord(format="onnx", optimization="fp16", candidate=True, passed=True, checks=[_check()])
    loser = rm.ArtifactRecord(
        format="onnx", optimization="int8", candidate=True, checks=[_check("failed", reason="output 'y': cosine 0.5 < 0.98")]
    )
    exported = rm.ArtifactRecord(format="onnx", passed=True, checks=[_check()])
    auto = rm.AutoSelection(
        chosen="fp16",
        candidates=[
            rm.AutoCandidate(name="fp16", format="onnx", status="chosen", rank=1),
            rm.AutoCandidate(name="int8", format="onnx", status="failed"),
        ],
    )
    return _report(exported, chosen, loser, auto=auto, passed=True, exit_code=0)


def _console(report: rm.Report, terminal: bool = False) -> str:
    stream = io.StringIO()
    console = Console(file=stream, width=100_000, force_terminal=terminal, color_system=None, highlight=False)
    print_summary(report, console, "out/report.json", verbose=True)
    print_failures(report, console, "out/report.json")
    if report.gate is not None:
        print_verdict(report.gate, console)
    return stream.getvalue()


def _testcases(report: rm.Report) -> list[ET.Element]:
    return ET.fromstring(render_junit(report)).find("testsuite[@name='validation']").findall("testcase")


# each function


def test_not_chosen_is_a_candidate_other_than_the_chosen_one():
    report = _auto_report()
    exported, chosen, loser = report.artifacts
    assert [facts.not_chosen(report, a) for a in report.artifacts] == [False, False, True]
    assert [facts.label(report, a) for a in report.artifacts] == ["onnx", "fp16", "int8 (auto candidate, not chosen)"]
    nothing_chosen = report.model_copy(update={"auto": rm.AutoSelection(chosen=None)})
    assert facts.not_chosen(nothing_chosen, chosen) and facts.not_chosen(nothing_chosen, loser)
    assert not facts.not_chosen(nothing_chosen, exported)


def test_the_outcome_is_the_gates_decision_else_the_runs():
    report = _report(passed=True)
    assert facts.outcome(report) == facts.run_outcome(report) == facts.Outcome("PASSED", True)
    assert facts.outcome(report).status == "passed" and facts.outcome(report).title == "PASSED"
    interrupted = _report(passed=False, interrupted=True)
    assert facts.outcome(interrupted).word == "FAILED" and facts.outcome(interrupted).title == "INTERRUPTED"
    rejected = interrupted.model_copy(update={"gate": rm.Verdict(decision="reject", promoted=False, exit_code=1, policy="p.yaml")})
    assert facts.outcome(rejected) == facts.gate_outcome(rejected.gate) == facts.Outcome("REJECT", False)
    assert facts.outcome(rejected).title == "REJECT" and facts.run_outcome(rejected).title == "INTERRUPTED"
    promoted = rm.Verdict(decision="promote", promoted=True, exit_code=0, policy="p.yaml")
    assert facts.gate_outcome(promoted).status == "promote" and facts.gate_outcome(promoted).good


def test_the_source_is_named_by_its_file_else_its_description():
    assert facts.source_name(_report(source=rm.SourceRecord(path="/models/net.pt", description="Net"))) == "net.pt"
    assert facts.source_name(_report(source=rm.SourceRecord(description="Module Net"))) == "Module Net"
    assert facts.source_name(_report()) == "model"


def test_status_counts_place_where_and_failed_checks():
    assert facts.status_counts(["failed", "passed", "passed", "other"]) == {"passed": 2, "failed": 1, "skipped": 0}
    assert list(facts.status_counts([])) == ["passed", "failed", "skipped"]
    assert facts.place(_check(shape="B=5")) == "onnxruntime on cpu at B=5"
    budget = rm.BudgetResult(
        artifact="onnx",
        kind="accuracy",
        metric="cosine",
        limit=">=0.9",
        output="y",
        runtime="ort",
        device="cpu",
        shape="B=1",
        status="passed",
    )
    assert facts.where(budget) == "output 'y', ort on cpu at B=1"
    size = rm.BaselineDelta(artifact="onnx", kind="size", metric="size_bytes", status="ok")
    assert facts.where(size) == ""
    first, second = _check("failed", shape="B=1"), _check("failed", shape="B=3")
    artifact = rm.ArtifactRecord(format="onnx", checks=[_check(), first, second])
    assert facts.failed_checks(artifact) == [first, second]


def test_check_errors_take_every_output_and_a_generations_logits():
    outputs = [_output(max_abs_error=1e-3, cosine_similarity=0.99), _output("z", max_abs_error=2e-3, cosine_similarity=0.999)]
    generation = rm.GenerationMetrics(steps=4, prompts=1, token_agreement=1.0, max_abs_logits=0.5, min_cosine=0.9, judged_by="tolerance")
    assert facts.check_errors([_check(outputs=outputs)]) == (2e-3, 0.99)
    assert facts.check_errors([_check(outputs=outputs), _check(kind="generation", generation=generation)]) == (0.5, 0.9)
    assert facts.check_errors([_check("skipped")]) == (None, None)


def test_why_an_artifact_has_no_checks():
    skipped = rm.ArtifactRecord(format="openvino", optimization="openvino:int8")
    broken = rm.ArtifactRecord(format="tflite")
    crashed = rm.ArtifactRecord(format="savedmodel", path="out/sm")
    given = rm.ArtifactRecord(format="onnx", given="theirs", path="/x.onnx")
    report = _report(
        skipped,
        broken,
        crashed,
        given,
        stages=[
            rm.Stage(kind="optimize", subject="openvino:int8", status="skipped", reason="openvino is not installed"),
            rm.Stage(kind="export", subject="tflite", status="failed", error="converter crashed"),
            rm.Stage(kind="export", subject="savedmodel", status="ok"),
            rm.Stage(kind="validate", subject="savedmodel", status="failed", error="validate crashed"),
        ],
    )
    found = [facts.unchecked(report, a) for a in report.artifacts]
    assert [(u.status, u.reason) for u in found] == [
        ("skipped", "openvino is not installed"),
        ("not built", "converter crashed"),
        ("not validated", "validate crashed"),
        ("not validated", "no check was run on this artifact"),
    ]
    assert [u.stage.name if u.stage else None for u in found] == ["optimize:openvino:int8", "export:tflite", "validate:savedmodel", None]


def test_benchmarks_speed_ups_against_the_sources_first_measured_p50():
    artifact = rm.ArtifactRecord(format="onnx", benchmarks=[_benchmark(2.0), _benchmark(None, status="failed")])
    report = _report(
        artifact, source_benchmark=[_benchmark(None, "failed", "torch"), _benchmark(0.0, runtime="torch"), _benchmark(5.0, runtime="torch")]
    )
    assert [name for name, _ in facts.benchmark_rows(report)] == ["source", "source", "source", "onnx", "onnx"]
    assert facts.source_p50(report) == 5.0  # neither the failed benchmark nor the one with no p50
    assert facts.speedup(report, artifact.benchmarks[0]) == 2.5 and facts.speedup(report, artifact.benchmarks[1]) is None
    assert facts.speedup(_report(artifact), artifact.benchmarks[0]) is None  # the source was not benchmarked
    assert facts.times(2.5) == "2.50x" and facts.times(None) is None and facts.times(0.0) is None


# the renderings agree


def test_every_rendering_treats_a_not_chosen_candidate_alike():
    report = _auto_report()
    markdown, page, console = render_markdown(report), render_html(report), _console(report)
    assert "int8 (auto candidate, not chosen)" in markdown and "fp16 (auto candidate" not in markdown
    assert "**Failures**" not in markdown  # its failure does not fail the run
    assert html.escape("int8 (auto candidate, not chosen)") in page and "fp16 (auto candidate" not in page
    cases = {case.get("name"): case for case in _testcases(report) if case.get("classname") == "convert.int8"}
    assert list(cases) == ["onnxruntime on cpu at B=2 (auto candidate, not chosen)"]
    assert next(iter(cases.values())).find("failure") is None
    assert "error:" not in console and "Verdict: PASSED" in console


def test_every_rendering_shows_the_same_verdict():
    for report, word in [
        (_report(passed=True, exit_code=0), "PASSED"),
        (_report(passed=False, exit_code=1), "FAILED"),
        (_report(gate=rm.Verdict(decision="reject", promoted=False, exit_code=1, policy="p.yaml")), "REJECT"),
        (_report(gate=rm.Verdict(decision="promote", promoted=True, exit_code=0, policy="p.yaml")), "PROMOTE"),
    ]:
        assert facts.outcome(report).word == word
        assert render_markdown(report).startswith(f"## {'✅' if facts.outcome(report).good else '❌'} {word}: model")
        assert f'<div class="verdict-word">{word}</div>' in render_html(report)
        assert f'<property name="verdict" value="{word.lower()}" />' in render_junit(report)
        assert f"{'Gate' if report.gate else 'Verdict'}: {word} " in _console(report)


def test_markdown_and_html_name_the_source_alike():
    report = _report(source=rm.SourceRecord(description="Module Net"))
    assert render_markdown(report).startswith("## ✅ PASSED: Module Net")
    assert "<title>PASSED · Module Net · convert report</title>" in render_html(report)


def test_markdown_junit_and_console_say_alike_why_an_artifact_has_no_checks():
    crashed = rm.ArtifactRecord(format="savedmodel", path="out/sm")
    broken = rm.ArtifactRecord(
        format="tflite", attempts=[rm.Attempt(strategy="tf2onnx", status="failed", seconds=1.0, error="converter crashed")]
    )
    report = _report(
        crashed,
        broken,
        stages=[
            rm.Stage(kind="export", subject="savedmodel", status="ok"),
            rm.Stage(kind="validate", subject="savedmodel", status="failed", error="validate crashed"),
            rm.Stage(kind="export", subject="tflite", status="failed", error="converter crashed"),
        ],
    )
    markdown = render_markdown(report)
    assert "| savedmodel |  |  |  | ❌ not validated |  |  |  | validate crashed |" in markdown
    assert "| tflite |  |  |  | ❌ not built |  |  |  | converter crashed |" in markdown
    cases = {case.get("classname"): case for case in _testcases(report)}
    assert cases["convert.savedmodel"].find("error").get("message") == "validate crashed"
    assert cases["convert.tflite"].find("failure").get("type") == "ExportFailed"
    lines = _console(report)
    assert "check savedmodel - - - not_validated reason: validate crashed" in lines
    assert "check tflite - - - not_built reason: converter crashed" in lines
    table = _console(report, terminal=True)
    assert "not validated" in table and "not built" in table and "not exported" not in table


def test_every_rendering_measures_speed_ups_against_the_same_source_p50():
    measured = {"throughput_per_s": 10.0, "throughput_shape": "B=8", "peak_memory_mb": 1.0}
    artifact = rm.ArtifactRecord(format="onnx", passed=True, checks=[_check()], benchmarks=[_benchmark(2.0).model_copy(update=measured)])
    source = [_benchmark(None, "failed", "torch (source)"), _benchmark(5.0, runtime="torch (source)").model_copy(update=measured)]
    report = _report(artifact, source_benchmark=source)
    assert facts.times(facts.speedup(report, artifact.benchmarks[0])) == "2.50x"
    assert "| onnx | onnxruntime | cpu | 2 |  | 2 | 2 | 2.50x |" in render_markdown(report)
    assert '<td class="num">2.50x</td>' in render_html(report)
    assert "benchmark onnx onnxruntime cpu ok" in _console(report) and "vs_source=2.50x" in _console(report)
    assert "2.50x" in _console(report, terminal=True)


def test_the_console_table_and_lines_show_the_same_errors_of_a_generation_check():
    generation = rm.GenerationMetrics(steps=4, prompts=1, token_agreement=1.0, max_abs_logits=0.02, min_cosine=0.999, judged_by="tolerance")
    artifact = rm.ArtifactRecord(format="onnx", passed=True, checks=[_check(shape="S=8", kind="generation", generation=generation)])
    report = _report(artifact)
    assert "max_abs_err=2.0e-02 min_cosine=0.999000" in _console(report)
    table = _console(report, terminal=True)
    assert "2.0e-02" in table and "0.999000" in table


def test_markdown_and_junit_place_a_gate_measurement_alike():
    budget = rm.BudgetResult(
        artifact="onnx",
        kind="accuracy",
        metric="cosine",
        limit=">=0.999",
        value=0.9,
        output="it's",
        runtime="ort",
        device="cpu",
        status="failed",
    )
    report = _report(gate=rm.Verdict(decision="reject", promoted=False, exit_code=1, policy="p.yaml", budgets=[budget]))
    where = facts.where(budget)
    assert where == "output 'it's', ort on cpu"
    gate = ET.fromstring(render_junit(report)).find("testsuite[@name='gate']")
    assert gate.find("testcase[@classname='gate.budget']").get("name") == f"onnx cosine>=0.999 ({where})"
    assert "output 'it's', ort on cpu" in render_markdown(report)


def test_the_figures_an_artifact_is_compared_by():
    """Its worst error and the output it is on, over checks and a generation check's logits; the benchmark that stands
    for it (on the device of the source's reference p50); why an unstable p50 cannot be ranked."""
    generation = rm.GenerationMetrics(steps=4, prompts=1, token_agreement=1.0, max_abs_logits=0.5, min_cosine=0.9, judged_by="tolerance")
    checks = [
        _check(outputs=[_output("y", max_abs_error=0.1, cosine_similarity=0.99), _output("z", max_abs_error=0.3, cosine_similarity=0.999)]),
        _check(outputs=[_output("y", max_abs_error=0.2, cosine_similarity=0.98)]),
    ]
    assert facts.worst_error(checks) == (0.3, "z") and facts.check_errors(checks) == (0.3, 0.98)
    assert facts.worst_error([*checks, _check(kind="generation", generation=generation)]) == (0.5, "logits")
    assert facts.worst_error([_check(status="skipped")]) is None

    on_cuda = _benchmark(1.0).model_copy(update={"device": "cuda"})
    on_cpu = _benchmark(4.0).model_copy(update={"unstable": True, "latency_ms_interval": [3.0, 4.5]})
    artifact = rm.ArtifactRecord(format="onnx", passed=True, benchmarks=[_benchmark(None, "failed"), on_cuda, on_cpu])
    assert facts.headline_benchmark(_report(artifact, source_benchmark=[_benchmark(8.0, runtime="torch (source)")]), artifact) is on_cpu
    assert facts.headline_benchmark(_report(artifact), artifact) is on_cuda, "without a source figure, its first measured"
    assert facts.instability(on_cpu) == "unstable: 95% interval 3–4.5 ms spans 38% of the p50 (over 20% cannot be ranked)"
    assert facts.instability(on_cuda) == ""
