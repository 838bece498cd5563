"""Unit tests of convert/reports/versions.py: which report.json files the tool reads (its schema version, a newer minor
of it, the older versions an upgrade brings up to it), what each upgrade step rewrites, and the refusal of the rest."""

from __future__ import annotations

import json

import pytest

from convert.errors import ConvertError
from convert.gate.baseline import load_report
from convert.reports import model as rm
from convert.reports.versions import UPGRADES, readable_versions, upgrade, upgrade_1_8_to_1_9

CURRENT_MAJOR = rm.SCHEMA_VERSION.split(".")[0]


def _report_json(version: str = rm.SCHEMA_VERSION) -> dict:
    """A report with a benchmarked artifact and an auto choice, as JSON of ``version``."""
    bench = rm.Benchmark(
        runtime="onnxruntime",
        device="cpu",
        latency_ms_p50=10.0,
        latency_ms_interval=[9.5, 10.5],
        throughput_per_s=800.0,
        throughput_interval=[790.0, 810.0],
    )
    report = rm.Report(
        tool_version="0",
        created_at="2026-01-01T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=["cpu"], outside_tested={"onnx": ">=1.17"}),
        artifacts=[rm.ArtifactRecord(format="onnx", passed=True, path="out/model.onnx", size_bytes=10, benchmarks=[bench])],
        auto=rm.AutoSelection(candidates=[rm.AutoCandidate(name="none", format="onnx", status="chosen", latency_ms_p50=10.0)]),
    )
    data = json.loads(report.to_json())
    data["schema_version"] = version
    if version == "1.8":  # 1.9 added environment.outside_tested
        del data["environment"]["outside_tested"]
    return data


def _write(tmp_path, data: dict):
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    return path


def test_the_upgrades_lead_step_by_step_to_this_version():
    version = next(iter(UPGRADES))
    while version in UPGRADES:
        version = UPGRADES[version]({"schema_version": version})["schema_version"]
    assert version == rm.SCHEMA_VERSION
    assert readable_versions() == f"{CURRENT_MAJOR}.x, and 1.8 and 1.9 (upgraded)"


@pytest.mark.parametrize("version", [rm.SCHEMA_VERSION, *UPGRADES])
def test_a_report_of_every_version_read_loads_as_this_version(tmp_path, version):
    report = load_report(_write(tmp_path, _report_json(version)))
    assert report.schema_version == rm.SCHEMA_VERSION
    assert report.artifacts[0].benchmarks[0].latency_ms_p50 == 10.0 and report.artifacts[0].key == "onnx"


def test_a_1_9_report_is_upgraded_unchanged_but_for_its_version():
    data = _report_json("1.9")
    upgraded = upgrade(json.loads(json.dumps(data)), "report")
    assert upgraded == {**data, "schema_version": rm.SCHEMA_VERSION}


def test_a_1_8_report_has_no_outside_tested_record_and_reads_as_none_recorded(tmp_path):
    report = load_report(_write(tmp_path, _report_json("1.8")))
    assert report.environment.outside_tested == {}


def test_1_8_to_1_9_widens_an_interval_that_misses_its_p50_and_judges_unstable_on_it():
    data = _report_json("1.8")
    bench = data["artifacts"][0]["benchmarks"][0]
    bench["latency_ms_interval"], bench["unstable"] = [10.5, 11.0], False  # the p50 10.0 below its interval
    data["auto"]["candidates"][0]["latency_ms_interval"] = [8.0, 9.0]
    upgraded = upgrade_1_8_to_1_9(data)
    bench = upgraded["artifacts"][0]["benchmarks"][0]
    assert upgraded["schema_version"] == "1.9"
    assert bench["latency_ms_interval"] == [10.0, 11.0] and bench["unstable"] is False
    assert upgraded["auto"]["candidates"][0]["latency_ms_interval"] == [8.0, 10.0]
    assert upgraded["auto"]["candidates"][0]["unstable"] is False  # (10 - 8) / 10 is not wider than 20%
    data["artifacts"][0]["benchmarks"][0]["latency_ms_interval"] = [5.0, 9.0]
    assert upgrade_1_8_to_1_9(data)["artifacts"][0]["benchmarks"][0]["unstable"] is True  # 5..10 is half the p50


def test_1_8_to_1_9_drops_the_latency_figure_a_failed_throughput_run_left_as_its_throughput():
    data = _report_json("1.8")
    bench = data["artifacts"][0]["benchmarks"][0]
    bench.update(status="failed", reason="throughput at B=8: RuntimeError: out of memory", throughput_shape="B=1")
    bench = upgrade_1_8_to_1_9(data)["artifacts"][0]["benchmarks"][0]
    assert (bench["throughput_per_s"], bench["throughput_interval"], bench["throughput_shape"]) == (None, None, "")
    assert bench["latency_ms_p50"] == 10.0


def test_an_upgrade_leaves_malformed_parts_to_the_schema_to_name(tmp_path):
    data = _report_json("1.8")
    data["artifacts"][0]["benchmarks"] = "not a list"
    data["auto"] = 3
    with pytest.raises(ConvertError, match="does not match the report schema"):
        load_report(_write(tmp_path, data))


def test_a_newer_minor_of_this_major_only_adds_fields_and_loads(tmp_path):
    data = {**_report_json(), "schema_version": f"{CURRENT_MAJOR}.99", "a_field_added_later": {"x": 1}}
    assert load_report(_write(tmp_path, data)).schema_version == f"{CURRENT_MAJOR}.99"


@pytest.mark.parametrize(
    "version, why",
    [
        ("1.7", "its fields meant something else then"),
        ("1.0", "its fields meant something else then"),
        (f"{int(CURRENT_MAJOR) + 1}.0", "a newer convert wrote it"),
    ],
)
def test_a_version_no_upgrade_reads_faithfully_is_refused_with_the_next_step(tmp_path, version, why):
    path = _write(tmp_path, _report_json(version))
    with pytest.raises(ConvertError) as refused:
        load_report(path)
    message = refused.value.paragraph()
    assert f"the baseline report {path} is a convert report of schema {version}" in message
    assert f"reads report schema {readable_versions()}" in message and why in message
    assert "Re-run the baseline with this version of convert" in message
    with pytest.raises(ConvertError, match="Re-run that model with this version of convert"):
        load_report(path, "report")


@pytest.mark.parametrize("version", [None, 19, "2", "two.zero", "1.9.1", "0x1.9"])
def test_a_schema_version_that_is_no_version_is_refused(tmp_path, version):
    data = {**_report_json(), "schema_version": version}
    with pytest.raises(ConvertError, match="is not a convert report of a schema version this tool knows"):
        load_report(_write(tmp_path, data))


def test_a_1_9_reports_stage_names_are_read_into_typed_stage_fields():
    """2.0 stages name what they are in fields (kind, subject, detail); a 1.9 report's names are read into them."""
    old = {
        "schema_version": "1.9",
        "stages": [
            {"name": "load", "status": "ok"},
            {"name": "optimize:openvino:int8", "status": "failed", "error": "boom"},
            {"name": "optimize:int8 (keeping 3 in FP32)", "status": "ok"},
        ],
    }
    stages = [rm.Stage.model_validate(s) for s in upgrade(old, "the baseline")["stages"]]
    assert [(s.kind, s.subject, s.detail) for s in stages] == [
        ("load", "", ""),
        ("optimize", "openvino:int8", ""),
        ("optimize", "int8", "keeping 3 in FP32"),
    ]
    assert [s.name for s in stages] == ["load", "optimize:openvino:int8", "optimize:int8 (keeping 3 in FP32)"]
    assert stages[1].error == "boom" and stages[1].makes_artifact
