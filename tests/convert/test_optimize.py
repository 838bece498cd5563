"""--optimize end to end through the CLI: every optimizer on a fixture of each source framework, each
optimized artifact validated on CPU against the source; reduced precisions judged by accuracy budgets."""

from __future__ import annotations

import numpy as np
import pytest

from convert.registry import REGISTRY
from tests.conftest import load_report, run_cli

EVERY_OPTIMIZER = [e.name for e in REGISTRY.entries("optimizer")]


def _optimized(report: dict) -> dict[str, dict]:
    return {a["optimization"]: a for a in report["artifacts"] if a["optimization"]}


def _assert_validated_on_cpu(artifact: dict) -> None:
    assert artifact["passed"] is True, artifact["checks"]
    cpu = [c for c in artifact["checks"] if c["device"] == "cpu"]
    assert cpu and all(c["status"] == "passed" and c["samples"] >= 3 for c in cpu)
    for output in (o for c in cpu for o in c["outputs"]):
        if artifact["precision"] == "fp32":
            assert output["max_abs_error"] < 1e-4 and not output["budget"]
        else:  # judged by the precision's budget, and the report says which
            assert output["budget"].startswith("cosine>=") and output["budget_source"] == f"default {artifact['precision']}"
            assert output["cosine_similarity"] >= 0.98 and output["rel_rms_error"] is not None


@pytest.fixture(scope="module")
def torch_optimized(torch_files, tmp_path_factory):
    out = tmp_path_factory.mktemp("optimize_torch")
    run = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--optimize", ",".join(EVERY_OPTIMIZER), "--out", str(out))
    return run, out


def test_every_optimizer_on_a_torch_fixture(torch_optimized):
    run, out = torch_optimized
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    optimized = _optimized(report)
    assert list(optimized) == EVERY_OPTIMIZER
    onnx_path = next(a["path"] for a in report["artifacts"] if a["format"] == "onnx" and not a["optimization"])
    for name, artifact in optimized.items():
        _assert_validated_on_cpu(artifact)
        assert artifact["derived_from"] == onnx_path and len(artifact["sha256"]) == 64
        assert {c["runtime"] for c in artifact["checks"]} == {"openvino" if name.startswith("openvino") else "onnxruntime"}
    assert {n: a["precision"] for n, a in optimized.items()} == {
        "simplify": "fp32", "fp16": "fp16", "int8": "int8", "int8-dynamic": "int8",
        "openvino": "fp32", "openvino:fp16": "fp16", "openvino:int8": "int8"}
    assert report["calibration"].startswith("generated from the input specs")
    assert (out / "cnn_openvino_int8" / "model.xml").is_file() and (out / "cnn.int8.onnx").is_file()


@pytest.mark.parametrize("framework, args, passes", [
    ("keras", ["fixtures.keras_models:build_bn_dropout", "--framework", "keras"], "simplify,int8,openvino:fp16,openvino:int8"),
    ("keras", ["fixtures.keras_models:build_two_io", "--framework", "keras"], "fp16,openvino"),  # two named outputs
    ("jax", ["fixtures.jax_models:make_nnx_cnn", "--framework", "jax", "--input", "x:float32[B,28,28,1]"],
     "simplify,int8,openvino:fp16,openvino:int8"),
])
def test_optimizers_on_keras_and_jax_fixtures(framework, args, passes, tmp_path):
    run = run_cli(*args, "--to", "onnx", "--optimize", passes, "--out", str(tmp_path))
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "report.json")
    assert report["source"]["framework"] == framework
    assert list(_optimized(report)) == passes.split(",")
    for artifact in _optimized(report).values():
        _assert_validated_on_cpu(artifact)


def test_a_harsh_budget_makes_an_int8_artifact_fail(torch_files, tmp_path):
    run = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--optimize", "int8", "--accuracy", "cosine>=0.9999999",
                  "--out", str(tmp_path))
    assert run.returncode == 1, run.output
    int8 = _optimized(load_report(tmp_path / "report.json"))["int8"]
    assert int8["passed"] is False
    failed = [c for c in int8["checks"] if c["status"] == "failed"]
    assert failed and all("misses the budget cosine>=1" in c["reason"] and "--accuracy cosine>=0.9999999" in c["reason"] for c in failed)


def test_calibration_data_is_used_and_checked(torch_files, tmp_path):
    good = tmp_path / "calib"
    good.mkdir()
    rng = np.random.default_rng(0)
    for index in range(4):
        np.savez(good / f"{index}.npz", x=rng.standard_normal((2, 3, 32, 32)).astype(np.float32))
    run = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--optimize", "int8", "--calibration-data", str(good),
                  "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.output
    assert load_report(tmp_path / "out" / "report.json")["calibration"] == f"{good} (4 feeds)"
    bad = tmp_path / "bad.npz"
    np.savez(bad, image=np.zeros((2, 3, 32, 32), np.float32))
    refused = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--optimize", "int8", "--calibration-data", str(bad),
                      "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2 and "Traceback" not in refused.output and "image" in refused.stderr
    assert not (tmp_path / "refused" / "cnn.onnx").exists() and not (tmp_path / "refused" / "cnn.int8.onnx").exists()


@pytest.mark.parametrize("args, message", [
    (["--to", "torchscript", "--optimize", "int8"], "Add onnx to --to"),
    (["--to", "onnx", "--optimize", "int4"], "unknown optimization 'int4'"),
    (["--to", "onnx", "--optimize", "int8", "--accuracy", "cosine>0.9"], "cannot read the accuracy budget"),
])
def test_bad_optimize_options_are_user_errors(torch_files, tmp_path, args, message):
    run = run_cli(str(torch_files / "cnn.pt2"), *args, "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()
