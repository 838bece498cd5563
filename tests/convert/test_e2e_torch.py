"""End to end through the real CLI: every PyTorch fixture, every target, validated on CPU at several shapes."""

from __future__ import annotations

import pytest

from convert.reports.model import SCHEMA_VERSION
from convert.specs import parse_input_specs
from fixtures.torch_models import FIXTURES
from tests.conftest import LazyRuns, load_report, run_cli, sizes_checked

TARGETS = ("onnx", "torchscript", "torch_export")


@pytest.fixture(scope="module")
def pt2_runs(torch_files, converted):
    """One CLI run per fixture (.pt2 source, every target), shared by the assertions below; each when a test first
    reads it, one at a time (the other xdist worker has the other core), once per session (``converted``)."""
    return LazyRuns(FIXTURES, lambda name: converted(str(torch_files / f"{name}.pt2"), "--to", ",".join(TARGETS)))


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.fast] if n == "cnn" else []) for n in FIXTURES])
def test_pt2_fixture_exports_and_validates_every_target(pt2_runs, name):
    run, out = pt2_runs[name]
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    assert report["passed"] is True and report["exit_code"] == 0
    assert report["source"]["framework"] == "torch" and len(report["source"]["sha256"]) == 64
    formats = {a["format"]: a for a in report["artifacts"]}
    assert set(formats) == set(TARGETS)
    for artifact in formats.values():
        assert artifact["passed"] is True
        assert (out / artifact["path"].split("/")[-1]).is_file()
        assert len(artifact["sha256"]) == 64
        assert artifact["reproduce"].startswith("python -m convert ")
        cpu = [c for c in artifact["checks"] if c["device"] == "cpu" and c["status"] == "passed"]
        assert cpu, artifact["checks"]
        for check in cpu:
            assert check["samples"] >= 3
            for output in check["outputs"]:
                assert output["status"] == "passed" and output["max_abs_error"] is not None
        cuda = [c for c in artifact["checks"] if c["device"] == "cuda"]
        assert cuda and all(c["status"] in ("passed", "skipped") and (c["status"] == "passed" or c["reason"]) for c in cuda)
    symbols = {s for text in report["source"]["inputs"] for s in parse_input_specs([text])[0].symbols}
    for fmt in ("onnx", "torch_export"):  # these keep every dynamic dim: each symbol validated at >= 2 sizes
        shapes = [c["shape"] for c in formats[fmt]["checks"] if c["device"] == "cpu" and c["status"] == "passed"]
        for symbol in symbols:
            sizes = {part.split("=")[1] for shape in shapes for part in shape.split(",") if part.startswith(symbol + "=")}
            assert len(sizes) >= 2, (fmt, symbol, shapes)


def test_stages_are_recorded_with_status_and_time(pt2_runs):
    report = load_report(pt2_runs["cnn"][1] / "report.json")
    names = [s["name"] for s in report["stages"]]
    assert names[:2] == ["load", "reference"]
    assert {f"export:{t}" for t in TARGETS} | {f"validate:{t}" for t in TARGETS} <= set(names)
    assert all(s["status"] == "ok" and s["seconds"] >= 0 for s in report["stages"])
    assert report["schema_version"] == SCHEMA_VERSION
    assert {"torch", "onnx", "onnxruntime"} <= set(report["environment"]["packages"])
    assert "cpu" in report["environment"]["devices"]


def test_no_staging_folder_is_left_behind(pt2_runs):
    for _, out in pt2_runs.values():
        assert not [p for p in out.iterdir() if p.name.startswith(".convert-staging-")]


def test_factory_with_safetensors_weights(torch_files, tmp_path):
    run = run_cli(
        "fixtures.torch_models:build_two_input_dict",
        "--weights",
        str(torch_files / "two_input_dict.safetensors"),
        "--input",
        "image:float32[B,3,16,16]",
        "--input",
        "features:float32[B,12]",
        "--to",
        ",".join(TARGETS),
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "report.json")
    assert report["source"]["kind"] == "factory"
    outputs = {o["name"] for a in report["artifacts"] for c in a["checks"] for o in c["outputs"]}
    assert outputs == {"logits", "embedding"}  # the dict output keeps its names in every format


def test_factory_with_state_dict_and_example_inputs(torch_files, tmp_path):
    run = run_cli(
        "fixtures.torch_models:build_lstm",
        "--weights",
        str(torch_files / "lstm.state.pt"),
        "--example-inputs",
        str(torch_files / "lstm.npz"),
        "--to",
        "onnx,torchscript",
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "report.json")
    assert report["source"]["inputs"] == ["x:float32[2,8,16]"]


def test_pickled_module_with_trust_code_and_token_domains(torch_files, tmp_path):
    run = run_cli(
        str(torch_files / "tokens.pt"),
        "--trust-code",
        "--input",
        "input_ids:int64[B,S]{0..999}",
        "--input",
        "attention_mask:int64[B,S]{0..1}",
        "--to",
        "onnx",
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 0, run.output
    assert load_report(tmp_path / "report.json")["source"]["kind"] == "pickled-module"


def test_a_torchscript_source_is_converted_into_a_program_for_onnx_and_torch_export(torch_files, tmp_path):
    """torch.export cannot take a ScriptModule: torch's TorchScript converter makes a program of it first."""
    run = run_cli(
        str(torch_files / "cnn.torchscript.pt"),
        "--trust-code",
        "--input",
        "x:float32[B,3,32,32]",
        "--to",
        "onnx,torchscript,torch_export",
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 0, run.output
    artifacts = {a["format"]: a for a in load_report(tmp_path / "report.json")["artifacts"]}
    assert artifacts["onnx"]["strategy"] == "TS2EPConverter, then torch.onnx.export(dynamo=True)"
    assert artifacts["torch_export"]["strategy"] == "TS2EPConverter, then torch.export.export(strict=False)"
    assert all(len(sizes_checked(a, "B")) >= 2 for a in artifacts.values())


@pytest.mark.parametrize("name", list(FIXTURES))
def test_torchscript_traced_from_the_module_keeps_every_dynamic_dim(torch_files, tmp_path, name):
    """Traced from the nn.Module (not from a .pt2), TorchScript is validated at >= 2 sizes of every symbol."""
    specs = [arg for text in FIXTURES[name].inputs for arg in ("--input", text)]
    run = run_cli(
        f"fixtures.torch_models:build_{name}",
        "--weights",
        str(torch_files / f"{name}.safetensors"),
        *specs,
        "--to",
        "torchscript",
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 0, run.output
    checks = load_report(tmp_path / "report.json")["artifacts"][0]["checks"]
    passed = [c["shape"] for c in checks if c["device"] == "cpu" and c["status"] == "passed"]
    assert not [c for c in checks if c["device"] == "cpu" and c["status"] != "passed"]
    for symbol in {s for text in FIXTURES[name].inputs for s in parse_input_specs([text])[0].symbols}:
        assert len({part for shape in passed for part in shape.split(",") if part.startswith(symbol + "=")}) >= 2
