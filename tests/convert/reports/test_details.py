"""An artifact's details (convert/reports/details.py): one of each kind on a report built by hand, shown by every
rendering through its one loop over ``record.details``, judged by the gate, and a 1.9 report's detail fields read
into ``details``."""

from __future__ import annotations

import html
import io
import json
import xml.etree.ElementTree as ET
from typing import get_args

import pytest
from rich.console import Console

from convert.gate.judge import judge
from convert.policy import Policy
from convert.reports import details, markdown
from convert.reports import model as rm
from convert.reports.console import print_summary
from convert.reports.html import render_html
from convert.reports.junit import render_junit
from convert.reports.versions import upgrade

pytestmark = pytest.mark.fast

CHECK = {"runtime": "onnxruntime", "device": "cpu", "shape": "B=2"}


def _divergence() -> rm.Divergence:
    return rm.Divergence(
        status="found",
        **CHECK,
        node="node_relu",
        op_type="Sigmoid",
        layer="features.2",
        value="relu",
        region=["node_relu"],
        metrics=rm.OutputMetrics(name="relu", status="failed", max_abs_error=2.16, cosine_similarity=0.5),
        probes=[
            rm.ProbePoint(value="conv", node="node_conv", op_type="Conv", status="passed", max_abs_error=1e-7),
            rm.ProbePoint(value="relu", node="node_relu", op_type="Sigmoid", status="failed", max_abs_error=2.16),
        ],
        compared=2,
        matched=2,
        chunks=1,
    )


def _sensitivity() -> rm.Sensitivity:
    return rm.Sensitivity(
        status="found",
        optimization="int8",
        rows=[rm.SensitivityRow(node="node_gemm", op_type="Gemm", layer="middle", rel_rms_error=0.4)],
        keep=["node_gemm"],
        suggestion="--optimize int8 --keep-fp32 node_gemm",
    )


def _accuracy_control() -> rm.AccuracyControl:
    return rm.AccuracyControl(
        method="NNCF quantize_with_accuracy_control",
        status="met",
        metric="top1",
        budget=0.02,
        plain_drop=0.08,
        drop=0.01,
        kept_fp32=["conv1"],
    )


def _delegation() -> rm.Delegation:
    return rm.Delegation(
        backend="XnnpackBackend", delegated={"aten.convolution.default": 2}, portable={"aten.view_copy.default": 1}, share=0.67
    )


def _weight_compression() -> rm.WeightCompression:
    return rm.WeightCompression(
        method="NNCF compress_weights(INT4_ASYM)",
        group_size=128,
        ratio=0.8,
        layers={"int4, group 128": 12, "int8, per channel": 3},
        notes=["group sizes 64 where a layer's channels do not divide by 128"],
    )


def _precision() -> rm.PrecisionAttestation:
    return rm.PrecisionAttestation(
        status="passed",
        claimed="int8",
        attested_share=0.96,
        threshold=0.5,
        measured="the OpenVINO IR",
        shape="B=2",
        macs=2_000_000,
        products=3,
        compute={"int8": 0.96, "fp32": 0.04},
        weights={"int8": 0.96, "fp32": 0.04},
        runtime="openvino on cpu (f32 inference precision)",
        runtime_compute={"int8": 0.96, "fp32": 0.04},
    )


def _chain() -> rm.ChainLinks:
    def measured(kind: str, error: float, within: bool) -> rm.ChainLink:
        return rm.ChainLink(
            link=kind, step="torch.onnx.export(dynamo=True)", compares="", status="measured", max_abs_error=error, within_tolerance=within
        )

    return rm.ChainLinks(shape="B=2", runtime="onnxruntime", links=[measured("capture", 0.0, True), measured("conversion", 2.16, False)])


def _report(later_kinds: bool = True) -> rm.Report:
    """A failing ONNX artifact that was localised and ranked, and a passing INT8 IR with accuracy control, delegation
    and weight compression (kinds no IR has together: the renderings do not care which format a detail comes from)."""
    failing = rm.ArtifactRecord(
        format="onnx",
        path="out/model.onnx",
        checks=[
            rm.Check(**CHECK, status="failed", reason="output 'y' out of tolerance"),
            rm.Check(**{**CHECK, "shape": "B=1"}, status="passed"),
        ],
    )
    failing.add(_divergence())
    failing.add(_sensitivity())
    passing = rm.ArtifactRecord(
        format="openvino", optimization="openvino:int8", precision="int8", passed=True, checks=[rm.Check(**CHECK, status="passed")]
    )
    passing.add(_accuracy_control())
    passing.add(_delegation())
    if later_kinds:  # kinds 1.9 did not have
        failing.add(_chain())
        passing.add(_precision())
        passing.add(_weight_compression())
    return rm.Report(
        tool_version="0",
        created_at="2026-01-01T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=["cpu"]),
        artifacts=[failing, passing],
        passed=False,
        exit_code=1,
    )


def _sentences(report: rm.Report, every: bool = False) -> list[str]:
    """The sentences the short renderings show: those of the notable details (a claim met is not a line of its own);
    ``every``: the HTML report's, all of them."""
    return [detail.describe() for record in report.artifacts for detail in record.details if every or detail.notable()]


def test_the_report_holds_one_detail_of_each_kind_and_reads_them_back_by_kind():
    report = _report()
    kinds = {detail.kind for record in report.artifacts for detail in record.details}
    assert kinds == set(details.KINDS) == {cls.model_fields["kind"].default for cls in get_args(get_args(details.BuiltInDetail)[0])}
    again = rm.Report.from_json(report.to_json())
    assert again == report
    failing, passing = again.artifacts
    assert failing.detail(rm.Divergence).node == "node_relu" and failing.detail("sensitivity").keep == ["node_gemm"]
    assert passing.detail(rm.Delegation).share == 0.67 and failing.detail(rm.Delegation) is None
    assert failing.diagnosis() == [_divergence().describe(), _sensitivity().describe()]
    failing.add(rm.Divergence(status="skipped", reason="again"))  # one of each kind: the newer replaces the older
    assert [d.kind for d in failing.details] == ["sensitivity", "chain", "divergence"]
    assert failing.detail(rm.Divergence).reason == "again"


def test_the_console_summary_shows_every_detail_sentence():
    stream = io.StringIO()
    print_summary(_report(), Console(file=stream, width=100_000, force_terminal=False, highlight=False))
    text = stream.getvalue()
    for sentence in _sentences(_report()):
        assert sentence in text
    assert f"onnx: {_divergence().describe()}" in text and f"openvino:int8: {_delegation().describe()}" in text
    assert _precision().describe() not in text  # the INT8 claim met: in the JSON and HTML only


def test_markdown_shows_every_detail_sentence_the_failures_among_the_failures():
    text = markdown.render_markdown(_report())
    for sentence in _sentences(_report()):
        assert markdown._cell(sentence, markdown.BULLET_LIMIT) in text
    failures, rest = text.split("**Details**")
    assert markdown._cell(_divergence().describe(), markdown.BULLET_LIMIT) in failures.split("**Failures**")[1]
    assert markdown._cell(_delegation().describe(), markdown.BULLET_LIMIT) in rest


def test_html_gives_every_detail_its_section_in_its_artifact():
    page = render_html(_report())
    for sentence in _sentences(_report(), every=True):
        assert html.escape(sentence) in page
    for title in (
        "Where it diverged",
        "Sensitivity",
        "Accuracy control",
        "Delegated operators",
        "What it computes in",
        "Weight compression",
        "Error link by link",
    ):
        assert f"<h3>{title}</h3>" in page
    chart = page[page.index('data-chart="divergence"') :]
    assert chart[: chart.index("</svg>")].count("<circle") == 2  # a point per compared value
    assert page.index("Where it diverged") < page.index('id="artifact-1"') < page.index("Delegated operators")


def test_junit_puts_each_detail_on_its_check():
    root = ET.fromstring(render_junit(_report()).split("\n", 1)[1])
    texts = {
        (case.get("classname"), case.get("name")): "".join(case.itertext())
        for case in root.iter("testcase")
        if case.get("classname") in ("convert.onnx", "convert.openvino:int8")
    }
    traced = texts[("convert.onnx", "onnxruntime on cpu at B=2")]
    assert f"where it diverged: {_divergence().describe()}" in traced and f"sensitivity: {_sensitivity().describe()}" in traced
    assert f"error link by link: {_chain().describe()}" in traced
    assert "where it diverged" not in texts[("convert.onnx", "onnxruntime on cpu at B=1")]
    passed = texts[("convert.openvino:int8", "onnxruntime on cpu at B=2")]
    assert f"accuracy control: {_accuracy_control().describe()}" in passed and f"delegated operators: {_delegation().describe()}" in passed


def test_the_gate_gives_a_diverged_reason_from_the_details_that_locate_the_failure():
    policy = Policy.model_validate({"model": {"path": "model.pt2"}, "require": {"targets": ["onnx"]}})
    verdict = judge(_report(), policy)
    (diverged,) = [r for r in verdict.reasons if r.code == "diverged"]
    assert diverged.message == f"{_divergence().describe()}; {_sensitivity().describe()}"
    report = _report()
    report.artifacts[0].details = [rm.Divergence(status="skipped", reason="not an ONNX graph")]
    assert "diverged" not in [r.code for r in judge(report, policy).reasons]


def test_a_1_9_report_has_its_detail_fields_read_into_details():
    data = json.loads(_report(later_kinds=False).to_json())  # kinds 2.3 added
    for artifact in data["artifacts"]:  # as 1.9 wrote it: a field for each kind, null where absent, no kind
        found = {d.pop("kind"): d for d in artifact.pop("details")}
        artifact.update({name: found.get(name) for name in ("divergence", "sensitivity", "accuracy_control", "delegation")})
    data["schema_version"] = "1.9"
    upgraded = upgrade(data, "the report")
    assert [[d["kind"] for d in a["details"]] for a in upgraded["artifacts"]] == [
        ["divergence", "sensitivity"],
        ["accuracy_control", "delegation"],
    ]
    assert not any(name in a for a in upgraded["artifacts"] for name in ("divergence", "sensitivity", "accuracy_control", "delegation"))
    assert rm.Report.model_validate(upgraded).artifacts == _report(later_kinds=False).artifacts


def test_a_detail_of_a_kind_a_newer_minor_version_added_is_left_out():
    data = json.loads(_report().to_json())
    data["schema_version"] = "2.1"
    data["artifacts"][1]["details"].append({"kind": "pruning", "sparsity": 0.5})
    read = rm.Report.model_validate(upgrade(data, "the report"))
    assert [d.kind for d in read.artifacts[1].details] == ["accuracy_control", "delegation", "precision", "weight_compression"]
