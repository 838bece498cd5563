"""JUnit XML rendered from real reports, validated against the Jenkins xunit-plugin junit-10.xsd and read back."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from convert.reports.junit import render_junit, write_junit
from convert.reports.model import (
    ArtifactRecord,
    Attempt,
    AutoSelection,
    Report,
    Stage,
)
from tests.convert.reports.conftest import TRICKY, load, with_hand_made_verdict

SCHEMA = Path(__file__).resolve().parents[2] / "data" / "junit-10.xsd"


@pytest.fixture(scope="module")
def schema() -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(SCHEMA)


def _suites(xml: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    assert root.tag == "testsuites" and root.get("name") == "convert"
    return {suite.get("name"): suite for suite in root.findall("testsuite")}


def _assert_counts_match(root: ET.Element) -> None:
    """Every suite's tests / failures / errors / skipped attributes count its testcases; the root sums the suites."""
    for suite in root.findall("testsuite"):
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        for outcome in ("failure", "error", "skipped"):
            attribute = "failures" if outcome == "failure" else "errors" if outcome == "error" else "skipped"
            assert int(suite.get(attribute)) == sum(case.find(outcome) is not None for case in cases)
        assert float(suite.get("time")) == pytest.approx(sum(float(case.get("time")) for case in cases), abs=0.01)
    for total in ("tests", "failures", "errors"):
        assert int(root.get(total)) == sum(int(suite.get(total)) for suite in root.findall("testsuite"))


def _valid_junit(report: Report, schema: xmlschema.XMLSchema) -> tuple[str, ET.Element]:
    """The report's JUnit XML, validated against junit-10.xsd, with counts that match its test cases."""
    xml = render_junit(report)
    schema.validate(xml)
    root = ET.fromstring(xml)
    _assert_counts_match(root)
    return xml, root


def _check_cases(suite) -> list:
    """Its testcases less those of the precision claims (one per reduced-precision artifact judged)."""
    return [case for case in suite.findall("testcase") if not case.get("classname").endswith(".precision")]


def test_one_testcase_per_check_and_the_xml_validates(exported_report, schema):
    report = load(exported_report)
    xml, root = _valid_junit(report, schema)
    suites = _suites(xml)
    assert list(suites) == ["validation"]
    cases = _check_cases(suites["validation"])
    assert len(cases) == sum(len(a.checks) for a in report.artifacts)
    precision = [case for case in suites["validation"].findall("testcase") if case.get("classname").endswith(".precision")]
    assert [case.get("classname") for case in precision] == [
        f"convert.{a.key}.precision" for a in report.artifacts if a.precision != "fp32"
    ]
    assert precision and all(case.find("failure") is None for case in precision)  # the fp16 artifact computes in fp16
    expected = [
        (f"convert.{a.optimization or a.format}", f"{c.runtime} on {c.device} at {c.shape}") for a in report.artifacts for c in a.checks
    ]
    assert [(case.get("classname"), case.get("name")) for case in cases] == expected
    assert {"convert.onnx", "convert.torchscript", "convert.fp16"} == {classname for classname, _ in expected}
    assert suites["validation"].get("failures") == "0" and suites["validation"].get("timestamp") == report.created_at
    properties = {p.get("name"): p.get("value") for p in suites["validation"].find("properties")}
    assert properties["verdict"] == "passed" and properties["tool_version"] == report.tool_version
    assert properties["source_sha256"] == report.source.sha256 and properties["schema_version"] == report.schema_version


def test_skipped_checks_carry_their_reason_and_passed_ones_their_metrics(exported_report):
    report = load(exported_report)
    cases = _check_cases(_suites(render_junit(report))["validation"])
    checks = [c for a in report.artifacts for c in a.checks]
    for case, check in zip(cases, checks, strict=True):
        if check.status == "skipped":
            assert case.find("skipped").get("message") == check.reason.strip()
        else:
            assert check.status == "passed" and case.find("failure") is None and case.find("skipped") is None
            details = case.find("system-out").text
            assert all(f"output '{o.name}': passed" in details for o in check.outputs)
            assert f"max_abs_error {check.outputs[0].max_abs_error:.6g}" in details and "cosine" in details
    assert any(c.status == "skipped" for c in checks)  # CUDA, on a machine without it


@pytest.mark.fast
def test_a_failed_check_carries_the_metrics_of_every_output(failed_report, schema):
    report = load(failed_report)
    xml, _ = _valid_junit(report, schema)
    suite = _suites(xml)["validation"]
    onnx = next(a for a in report.artifacts if a.format == "onnx")
    failed_checks = [c for c in onnx.checks if c.status == "failed"]
    assert len([c for c in failed_checks if c.device == "cpu"]) == 3 and suite.get("failures") == str(len(failed_checks))
    for check in failed_checks:
        case = suite.find(f"testcase[@name='{check.runtime} on {check.device} at {check.shape}']")
        assert case.get("classname") == "convert.onnx" and float(case.get("time")) == pytest.approx(check.seconds, abs=1e-3)
        failure = case.find("failure")
        assert failure.get("type") == "ValidationFailed" and failure.get("message") == check.reason
        scores, probabilities = (next(o for o in check.outputs if o.name == name) for name in ("scores", "probabilities"))
        assert f"output 'scores': failed: {scores.reason}" in failure.text
        assert f"max_abs_error {scores.max_abs_error:.6g}, max_rel_error {scores.max_rel_error:.6g}" in failure.text
        assert f"cosine {scores.cosine_similarity:.8f}, rel_rms {scores.rel_rms_error:.6g}" in failure.text
        assert f"nan 0, inf 0, mismatches {scores.mismatch_count} of {scores.elements}" in failure.text
        assert "tolerance atol=0.0001 rtol=0.001 (default fp32)" in failure.text
        assert "output 'probabilities': passed" in failure.text and f"{probabilities.max_abs_error:.6g}" in failure.text
    properties = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert properties["verdict"] == "failed" and properties["exit_code"] == "1"


def test_the_gate_suite_shows_why_the_model_was_rejected(exported_report, schema):
    xml, root = _valid_junit(with_hand_made_verdict(load(exported_report)), schema)
    gate = _suites(xml)["gate"]
    cases = gate.findall("testcase")
    # 3 budgets, 3 deltas, and the reasons that neither shows as a failure: the skipped budget rejects too
    assert [case.get("classname") for case in cases] == ["gate.budget"] * 3 + ["gate.baseline"] * 3 + [
        "gate.missing_device",
        "gate.missing_artifact",
        "gate.budget",
    ]
    assert (gate.get("tests"), gate.get("failures"), gate.get("skipped")) == ("9", "5", "2")
    assert root.get("failures") == "5"
    over_budget = cases[1].find("failure")
    assert cases[1].get("name") == "fp16 cosine>=0.999 (output 'output', onnxruntime on cpu at d0=2)"
    assert over_budget.get("type") == "BudgetExceeded" and over_budget.get("message") == f"cosine = 0.97, allowed >=0.999: {TRICKY}"
    assert cases[2].find("skipped").get("message") == "not measured: no CUDA device"
    regressed = cases[3].find("failure")
    assert regressed.get("type") == "Regression" and TRICKY in regressed.get("message") and "+40.0%" in regressed.text
    assert cases[4].find("failure") is None and cases[5].find("skipped").get("message") == "the baseline has no fp16 artifact"
    assert cases[8].get("name") == "latency_ms_p50<=5 on onnxruntime (cuda): not measured"
    missing = cases[6].find("failure")
    assert missing.get("type") == "missing_device" and missing.get("message") == f"onnx was not checked on cuda: {TRICKY}"
    assert "&lt;" in xml and "&amp;" in xml  # escaped by ElementTree, read back intact above
    properties = {p.get("name"): p.get("value") for p in gate.find("properties")}
    assert properties["decision"] == "reject" and properties["baseline"] == "baseline/report.json"
    assert "openvino may be absent" in gate.find("system-out").text
    assert {p.get("name"): p.get("value") for p in _suites(xml)["validation"].find("properties")}["verdict"] == "reject"


def test_artifacts_that_were_not_built_are_not_silently_absent(exported_report, schema):
    report = load(exported_report)
    ansi_error = "\x1b[31mtflite converter crashed\x1b[0m: op <Gelu> & friends unsupported\ntraceback follows"
    unchosen = report.artifacts[2].model_copy(
        update={
            "optimization": "int8",
            "candidate": True,
            "checks": [
                check.model_copy(update={"status": "failed", "reason": "output 'output': cosine 0.9 < 0.98"})
                for check in report.artifacts[2].checks
                if check.status == "passed"
            ],
        }
    )
    broken = report.model_copy(
        update={
            "artifacts": [
                *report.artifacts,
                ArtifactRecord(format="tflite", attempts=[Attempt(strategy="tf2onnx", status="failed", seconds=1.5, error=ansi_error)]),
                ArtifactRecord(format="openvino", optimization="openvino:int8"),
                unchosen,
            ],
            "stages": [
                *report.stages,
                Stage(kind="export", subject="tflite", status="failed", seconds=1.5, error=ansi_error),
                Stage(kind="optimize", subject="openvino:int8", status="skipped", reason="openvino is not installed"),
                Stage(kind="auto", subject="int8", status="ok"),
                Stage(kind="benchmark", subject="tflite", status="failed", error="RuntimeError: boom"),
            ],
            "auto": AutoSelection(chosen=None),
        }
    )
    xml, _ = _valid_junit(broken, schema)  # valid: the ANSI escape, which XML 1.0 cannot hold, was replaced
    suite = _suites(xml)["validation"]
    checks = sum(len(a.checks) for a in broken.artifacts)
    assert len(_check_cases(suite)) == checks + 3  # + the failed export, the skipped pass, the failed benchmark stage
    export = suite.find("testcase[@classname='convert.tflite']")
    assert export.get("name") == "export:tflite" and export.find("failure").get("type") == "ExportFailed"
    assert "tflite converter crashed" in export.find("failure").get("message") and "\x1b" not in xml
    assert "- tf2onnx: failed in 1.500s" in export.find("failure").text
    skipped = suite.find("testcase[@classname='convert.openvino:int8']")
    assert skipped.find("skipped").get("message") == "openvino is not installed"
    assert suite.find("testcase[@classname='convert.run']").find("error").get("message") == "RuntimeError: boom"
    candidates = suite.findall("testcase[@classname='convert.int8']")
    assert candidates and all(c.get("name").endswith("(auto candidate, not chosen)") for c in candidates)
    assert all(
        c.find("failure") is None and c.find("skipped").get("message").startswith("auto candidate, not chosen: ") for c in candidates
    )
    assert suite.get("failures") == "1" and suite.get("errors") == "1"  # the candidate's failures do not fail the run


def test_write_junit_writes_what_render_junit_returns(failed_report, tmp_path):
    report = load(failed_report)
    path = tmp_path / "junit" / "convert.xml"
    write_junit(report, path)
    assert path.read_text(encoding="utf-8") == render_junit(report)


def test_a_real_gate_rejection_validates_and_fails_for_each_reason(rejected_gate_report, schema):
    report = load(rejected_gate_report)
    xml, root = _valid_junit(report, schema)
    validation = _check_cases(_suites(xml)["validation"])
    assert len(validation) == sum(max(len(a.checks), 1) for a in report.artifacts)
    gate = _suites(xml)["gate"]
    failures = [case.find("failure") for case in gate.findall("testcase") if case.find("failure") is not None]
    text = " ".join(f"{f.get('type')} {f.get('message')}" for f in failures)
    assert "missing_artifact" in text and "throughput_per_s" in text
    assert int(root.get("failures")) >= len({r.code for r in report.gate.reasons})
