"""A format or pass the user asked for that could not be built is never a plain PASSED: by default the run fails (exit
code 1) and its verdict names what was not built and why, as the gate fails closed on it; --unbuilt warn lets it pass
(exit code 0) as PASSED WITH GAPS, still listing it. The report's ``unbuilt`` carries it for every rendering, and
--optimize auto's candidates, which it tries where it can, never count. TensorRT cannot build here (no GPU), so
trt:fp16 is the pass asked for and not built."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from convert.registry import REGISTRY
from convert.reports import facts
from convert.reports import model as rm
from convert.reports.html import render_html
from convert.reports.junit import render_junit
from convert.reports.markdown import render_markdown
from convert.reports.versions import upgrade
from tests.conftest import load_report
from tests.convert.test_optimize import AUTO_ARGS

# why trt:fp16 cannot be built here; None on a machine with TensorRT and a GPU, where these runs build it
TENSORRT_MISSING = REGISTRY.get("optimizer", "trt:fp16").load().unavailable_reason()
needs_no_tensorrt = pytest.mark.skipif(TENSORRT_MISSING is None, reason="TensorRT builds trt:fp16 on this machine")


@pytest.fixture(scope="module")
def asked_for_trt(converted, torch_files):
    """The cnn fixture to ONNX with trt:fp16 asked for, by default (fail) and with --unbuilt warn: (run, out) each."""
    command = (str(torch_files / "cnn.pt2"), "--to", "onnx", "--optimize", "trt:fp16")
    return {"fail": converted(*command), "warn": converted(*command, "--unbuilt", "warn")}


def _verdict_line(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("Verdict: ")]
    return line


def _validation_cases(report: rm.Report) -> dict[str, ET.Element]:
    suite = ET.fromstring(render_junit(report)).find("testsuite[@name='validation']")
    return {case.get("classname"): case for case in suite.findall("testcase")}


@needs_no_tensorrt
def test_a_pass_asked_for_and_not_built_fails_the_run_and_the_verdict_says_what_and_why(asked_for_trt):
    run, out = asked_for_trt["fail"]
    assert run.returncode == 1, run.output
    reason = TENSORRT_MISSING.splitlines()[0]
    assert _verdict_line(run.stdout).startswith("Verdict: FAILED — requested but not built: trt:fp16 (exit code 1)")
    assert reason in run.stdout.split("Verdict:")[0]  # why: in the summary above the verdict, said once
    assert "TensorRT is not installed" in reason or "CUDA" in reason
    (error,) = [line for line in run.stderr.splitlines() if line.startswith("error: trt:fp16 ")]
    assert "cannot be built here" in error and "--unbuilt warn" in error
    assert (out / "cnn.onnx").is_file() and not list(out.glob("*.engine"))  # no engine, and none claimed


@needs_no_tensorrt
def test_the_report_lists_what_was_asked_for_and_not_built_with_why(asked_for_trt):
    for mode, (_, out) in asked_for_trt.items():
        report = load_report(out / "report.json")
        assert report["schema_version"] == rm.SCHEMA_VERSION and report["options"]["unbuilt"] == mode
        (stage,) = [s for s in report["stages"] if s["name"] == "optimize:trt:fp16"]
        assert report["unbuilt"] == [
            {
                "artifact": "trt:fp16",
                "stage": "optimize:trt:fp16",
                "status": "skipped",
                "reason": stage["reason"],
                "accepted": mode == "warn",
            }
        ]
        assert (report["passed"], report["exit_code"]) == ((False, 1) if mode == "fail" else (True, 0))
        onnx = next(a for a in report["artifacts"] if a["format"] == "onnx" and not a["optimization"])
        assert onnx["passed"] is True  # what was built passed: the gap alone decides


@needs_no_tensorrt
def test_warn_accepts_the_gap_with_exit_0_but_never_a_plain_passed(asked_for_trt):
    run, out = asked_for_trt["warn"]
    assert run.returncode == 0, run.output
    line = _verdict_line(run.stdout)
    assert line.startswith("Verdict: PASSED WITH GAPS — requested but not built: trt:fp16 (exit code 0)")
    assert "error:" not in run.stderr
    assert (out / "cnn.onnx").is_file() and not list(out.glob("*.engine"))


@needs_no_tensorrt
def test_markdown_junit_and_html_show_what_was_not_built(asked_for_trt):
    for mode, word, testcase in (("fail", "FAILED", "failure"), ("warn", "PASSED WITH GAPS", "skipped")):
        _, out = asked_for_trt[mode]
        report = rm.Report.from_json((out / "report.json").read_text())
        reason = report.unbuilt[0].reason
        markdown = render_markdown(report)
        assert markdown.startswith(f"## ❌ {word}: cnn.pt2")  # not green, passed with gaps or not
        assert "**Requested but not built**" in markdown and "- trt:fp16: TensorRT" in markdown
        case = _validation_cases(report)["convert.trt:fp16"]
        assert case.find(testcase) is not None and reason.splitlines()[0][:100] in case.find(testcase).get("message")
        if mode == "fail":
            assert case.find("failure").get("type") == "NotBuilt"
        root = ET.fromstring(render_junit(report))
        verdict = root.find("testsuite[@name='validation']/properties/property[@name='verdict']").get("value")
        assert verdict == ("failed" if mode == "fail" else "passed_with_gaps")
        page = render_html(report)
        assert f'<div class="verdict-word">{word}</div>' in page and '<span class="code">not built</span>' in page


def test_the_candidates_auto_could_not_build_are_no_gap(converted, torch_files):
    """--optimize auto tries every pass, TensorRT's too: one this machine cannot build is exploration, not a request."""
    run, out = converted(str(torch_files / "cnn.pt2"), *AUTO_ARGS)
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    assert report["unbuilt"] == [] and report["passed"] is True
    if TENSORRT_MISSING is not None:
        skipped = {c["name"] for c in report["auto"]["candidates"] if c["status"] == "skipped"}
        assert {"trt", "trt:fp16", "trt:int8"} <= skipped
    assert _verdict_line(run.stdout).startswith("Verdict: PASSED (exit code 0)")


# the outcome, on reports built by hand


def _report(stages: list[rm.Stage], unbuilt: str = "fail") -> rm.Report:
    from convert.pipeline.context import Progress, Stages, finish

    report = rm.Report(
        tool_version="0",
        created_at="2026-01-01T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=["cpu"]),
        artifacts=[
            rm.ArtifactRecord(format="onnx", passed=True, checks=[rm.Check(runtime="ort", device="cpu", shape="B=1", status="passed")])
        ],
    )
    records = Stages(Progress())
    records.records = stages
    finish(report, records, unbuilt)
    return report


SKIPPED_TRT = rm.Stage(kind="optimize", subject="trt:fp16", status="skipped", reason="TensorRT is not installed\nsecond line")


@pytest.mark.fast
def test_the_outcome_names_every_artifact_not_built_with_the_first_line_of_why():
    failed = _report([rm.Stage(kind="export", subject="onnx", status="ok"), SKIPPED_TRT])
    outcome = facts.run_outcome(failed)
    assert (outcome.word, outcome.good, outcome.status) == ("FAILED", False, "failed")
    assert outcome.not_built == "requested but not built: trt:fp16 (TensorRT is not installed)"
    accepted = facts.run_outcome(_report([rm.Stage(kind="export", subject="onnx", status="ok"), SKIPPED_TRT], "warn"))
    assert (accepted.word, accepted.good, accepted.status) == ("PASSED WITH GAPS", False, "passed_with_gaps")
    plain = facts.run_outcome(_report([rm.Stage(kind="export", subject="onnx", status="ok")]))
    assert (plain.word, plain.good, plain.not_built) == ("PASSED", True, "")
    auto = _report([rm.Stage(kind="export", subject="onnx", status="ok"), SKIPPED_TRT.model_copy(update={"kind": "auto"})])
    assert facts.run_outcome(auto).word == "PASSED" and auto.exit_code == 0


@pytest.mark.fast
def test_a_2_0_report_reads_its_skipped_passes_as_accepted_gaps():
    """A 2.0 run passed with a pass asked for and skipped: upgraded, it lists it, accepted, and reads PASSED WITH GAPS."""
    report = _report([rm.Stage(kind="export", subject="onnx", status="ok"), SKIPPED_TRT], "warn")
    data = json.loads(report.to_json())
    del data["unbuilt"]
    data["schema_version"] = "2.0"
    upgraded = rm.Report.model_validate(upgrade(data, "report"))
    assert upgraded.schema_version == rm.SCHEMA_VERSION
    assert [(u.artifact, u.status, u.accepted) for u in upgraded.unbuilt] == [("trt:fp16", "skipped", True)]
    assert facts.run_outcome(upgraded).word == "PASSED WITH GAPS"
