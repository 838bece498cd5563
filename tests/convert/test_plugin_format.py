"""One registration reaches everything: a fake format registered from outside the package (tests/plugins/fake_format.py,
through $CONVERT_PLUGINS) with its exporter, runtime and packager shows up in the CLI's choices, is planned, keyed in
the cache, validated, packaged, reported and rendered, and listed by ``convert doctor``, with no other file edited."""

from __future__ import annotations

import numpy as np
import pytest

from tests.conftest import load_report, run_cli

PLUGIN = {"CONVERT_PLUGINS": "tests.plugins.fake_format"}


def _tiny_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 3])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return _tiny_onnx(tmp_path_factory.mktemp("tiny") / "tiny.onnx")


def test_the_fake_format_is_among_the_cli_choices():
    shown = run_cli("export", "--help", env=PLUGIN)
    assert shown.returncode == 0, shown.output
    assert "fakeonnx" in shown.stdout and "fake-bundle" in shown.stdout
    assert "fakeonnx" not in run_cli("export", "--help").stdout  # the plugin, not the package, brought it


def test_a_run_plans_exports_caches_validates_packages_and_reports_the_fake_format(tiny, tmp_path):
    env = {**PLUGIN, "CONVERT_NO_CACHE": "", "CONVERT_CACHE_DIR": str(tmp_path / "cache")}
    args = (str(tiny), "--to", "onnx,fakeonnx", "--package", "fake-bundle,archive", "--out", str(tmp_path / "out"))
    first = run_cli(*args, env=env)
    assert first.returncode == 0, first.output
    report = load_report(tmp_path / "out" / "report.json")
    fake = next(a for a in report["artifacts"] if a["format"] == "fakeonnx")
    assert fake["path"] == str(tmp_path / "out" / "tiny.fake") and fake["exporter"] == "onnx-fake"  # named by the format's suffix
    assert {c["runtime"] for c in fake["checks"] if c["status"] == "passed"} == {"fake-runtime"}
    assert all(c["device_unsupported"] for c in fake["checks"] if c["status"] == "skipped")
    packages = {p["packager"]: p for p in report["packages"]}
    assert packages["fake-bundle"]["passed"] and [a["key"] for a in packages["fake-bundle"]["artifacts"]] == ["fakeonnx"]
    assert packages["fake-bundle"]["path"] == str(tmp_path / "out" / "tiny.bundle.tar")
    assert {a["key"] for a in packages["archive"]["artifacts"]} == {"onnx", "fakeonnx"}  # the archive takes any format
    assert "package fake-bundle:" in first.stdout

    second = run_cli(*args, "--force", env=env)
    assert second.returncode == 0, second.output
    reused = load_report(tmp_path / "out" / "report.json")["cache"]["reused"]
    assert "export:fakeonnx" in reused and any(job.startswith("validate:fakeonnx fake-runtime") for job in reused)

    for flag, name in (("--markdown", "r.md"), ("--html", "r.html"), ("--junit", "r.xml")):
        rendered = run_cli("report", str(tmp_path / "out" / "report.json"), flag, str(tmp_path / name), env=PLUGIN)
        assert rendered.returncode == 0, rendered.output
        text = (tmp_path / name).read_text()
        assert "fakeonnx" in text and "fake-bundle" in text, name


def test_an_artifact_of_the_fake_format_is_told_by_its_suffix_when_given(tiny, tmp_path):
    from tests.plugins.fake_format import HEADER

    given = tmp_path / "mine.fake"
    given.write_bytes(HEADER + tiny.read_bytes())
    checked = run_cli("validate", str(given), "--against", str(tiny), "--out", str(tmp_path / "out"), env=PLUGIN)
    assert checked.returncode == 0, checked.output
    artifact = load_report(tmp_path / "out" / "report.json")["artifacts"][0]
    assert artifact["format"] == "fakeonnx" and artifact["passed"]


def test_a_packager_that_takes_no_format_the_run_makes_is_refused_before_any_work(tiny, tmp_path):
    refused = run_cli(str(tiny), "--to", "onnx", "--package", "fake-bundle", "--out", str(tmp_path / "out"), env=PLUGIN)
    assert refused.returncode == 2 and "Traceback" not in refused.output
    assert "--package fake-bundle packages fakeonnx artifacts, and the run makes none" in refused.stderr
    assert not (tmp_path / "out").exists()


def test_a_package_that_fails_its_check_fails_the_run_and_goes_to_the_failed_folder(tiny, tmp_path):
    env = {**PLUGIN, "FAKE_BUNDLE_CORRUPT": "1"}
    run = run_cli(str(tiny), "--to", "fakeonnx", "--package", "fake-bundle", "--out", str(tmp_path / "out"), env=env)
    assert run.returncode == 1, run.output
    package = load_report(tmp_path / "out" / "report.json")["packages"][0]
    assert not package["passed"] and package["checks"][0]["status"] == "failed"
    assert package["path"] == str(tmp_path / "out" / "failed" / "tiny.bundle.tar") and not (tmp_path / "out" / "tiny.bundle.tar").exists()
    assert (tmp_path / "out" / "tiny.fake").is_file()  # the artifact passed: it stays published


def test_doctor_lists_the_fake_runtime():
    shown = run_cli("doctor", env=PLUGIN)
    assert shown.returncode == 0, shown.output
    assert "fake-runtime on cpu" in shown.stdout and "fake-runtime on cuda" in shown.stdout
