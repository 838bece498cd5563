"""An ONNX model as the source (made by tf2onnx and jax2onnx, as their users make them), and `convert validate` of
artifacts someone already has, through the real CLI."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO, load_report, run_cli, sizes_checked

THIRD_PARTY = ("keras_tf2onnx", "flax_jax2onnx")
TARGETS = ("onnx",)  # what an ONNX source is exported to (checked and normalised)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def onnx_files(tmp_path_factory) -> Path:
    """The files of fixtures/onnx_models.py, each exporter in a process of its own, one at a time (the other xdist
    worker has the other core)."""
    folder = tmp_path_factory.mktemp("onnx_models")
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def build(names: tuple[str, ...]):
        return subprocess.run(
            [sys.executable, "-m", "fixtures.onnx_models", str(folder), *names], cwd=REPO, env=env, capture_output=True, text=True
        )

    groups = [("keras_tf2onnx",), ("flax_jax2onnx",), ("torch_plain", "outside_external_data")]
    for done in map(build, groups):
        assert done.returncode == 0, done.stderr[-4000:]
    return folder


@pytest.fixture(scope="module")
def auto_runs(onnx_files, tmp_path_factory):
    """`convert FILE.onnx --optimize auto` (no --to: onnx is the default for an ONNX model) of each third-party file."""
    before = {name: _sha256(onnx_files / f"{name}.onnx") for name in THIRD_PARTY}

    def run(name: str):
        out = tmp_path_factory.mktemp(f"auto_{name}")
        return run_cli(str(onnx_files / f"{name}.onnx"), "--optimize", "auto", "--benchmark-seconds", "0.2", "--out", str(out)), out

    runs = dict(zip(THIRD_PARTY, map(run, THIRD_PARTY)))
    return runs, before


@pytest.mark.slow(reason="--optimize auto on a third-party ONNX file: every pass built, validated and timed")
@pytest.mark.parametrize("name", THIRD_PARTY)
def test_a_third_party_onnx_file_goes_through_optimize_auto(auto_runs, onnx_files, name):
    runs, before = auto_runs
    run, out = runs[name]
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    assert report["source"]["framework"] == "onnx"
    assert "ONNX Runtime on the original graph, graph optimizations off" in report["source"]["description"]
    artifacts = {a["optimization"] or a["format"]: a for a in report["artifacts"]}
    base = artifacts["onnx"]
    assert base["passed"] is True and base["exporter"] == "onnx-check"
    symbols = {dim for text in report["source"]["inputs"] for dim in text.split("[")[1].split("]")[0].split(",") if not dim.isdigit()}
    assert symbols, report["source"]["inputs"]
    for symbol in symbols:  # the graph's dynamic dims are validated at independent sizes
        assert len(sizes_checked(base, symbol)) >= 2, (symbol, base["checks"])
    validated = [a for a in report["artifacts"] if a["candidate"] and a["checks"]]
    assert {"simplify", "fp16", "int8-dynamic", "openvino"} <= {a["optimization"] for a in validated}
    for artifact in validated:  # every derived artifact is judged against the ONNX Runtime reference
        assert any(c["status"] in ("passed", "failed") for c in artifact["checks"] if c["device"] == "cpu")
    assert report["auto"]["chosen"]
    assert _sha256(onnx_files / f"{name}.onnx") == before[name]


def test_onnx_with_external_data_outside_its_folder_is_refused(onnx_files, tmp_path):
    out = tmp_path / "out"
    run = run_cli(str(onnx_files / "outside" / "model.onnx"), "--out", str(out))
    assert run.returncode == 2, run.output
    assert "names external data outside its folder: '../secret.bin'" in run.stderr
    assert "Traceback" not in run.output
    assert not out.exists()


@pytest.fixture(scope="module")
def validated(onnx_files, tmp_path_factory):
    plain, edited = onnx_files / "torch_plain.onnx", onnx_files / "torch_edited.onnx"
    before = {path: (_sha256(path), path.stat().st_mtime_ns) for path in (plain, edited)}
    out = tmp_path_factory.mktemp("validate")
    run = run_cli("validate", str(plain), str(edited), "--against", str(onnx_files / "torch_cnn.pt2"), "--out", str(out))
    return run, out, before


def test_validate_passes_a_plain_torch_onnx_export_and_fails_an_edited_one(validated):
    run, out, before = validated
    assert run.returncode == 1, run.output
    report = load_report(out / "report.json")
    records = {a["given"]: a for a in report["artifacts"]}
    assert set(records) == {"torch_plain.onnx", "torch_edited.onnx"}
    assert records["torch_plain.onnx"]["passed"] is True
    edited = records["torch_edited.onnx"]
    assert edited["passed"] is False
    failed = [c for c in edited["checks"] if c["status"] == "failed"]
    assert failed and all("differ beyond" in c["reason"] for c in failed)
    assert "torch_edited.onnx artifact failed validation" in run.stderr and "left as it was" in run.stderr
    # torch.onnx named the output after its last layer; the source calls it 'output': compared in order, and said so
    assert any("compared in order" in note and "'output' ↔ 'linear'" in note for note in report["notes"])
    for path, (digest, mtime) in before.items():  # never moved or changed
        assert path.is_file() and _sha256(path) == digest and path.stat().st_mtime_ns == mtime
    assert not (out / "failed").exists() and not list(out.glob("*.onnx"))


def test_the_gate_requires_artifacts_given_by_path(onnx_files, tmp_path):
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        f"model:\n  path: {onnx_files / 'torch_cnn.pt2'}\nrequire:\n  artifacts:\n"
        f"    plain: {onnx_files / 'torch_plain.onnx'}\n    edited: {onnx_files / 'torch_edited.onnx'}\nout: {tmp_path / 'out'}\n"
    )
    run = run_cli("gate", str(policy))
    assert run.returncode == 1, run.output
    gate = load_report(tmp_path / "out" / "report.json")["gate"]
    assert gate["required_artifacts"] == ["plain", "edited"]
    assert {(r["code"], r["artifact"]) for r in gate["reasons"]} == {("failed_check", "edited")}


def test_validate_refuses_an_artifact_of_unknown_format(onnx_files, tmp_path):
    stray = tmp_path / "weights.bin"
    stray.write_bytes(b"\0" * 16)
    run = run_cli("validate", str(stray), "--against", str(onnx_files / "torch_cnn.pt2"), "--out", str(tmp_path / "out"))
    assert run.returncode == 2, run.output
    assert "cannot tell which format the artifact" in run.stderr and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()


def test_graph_specs_keep_named_dims_name_the_others_and_bound_token_ids():
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from convert.sources.onnx import graph_specs

    table = numpy_helper.from_array(np.zeros((30, 4), np.float32), "table")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["embedded"]), helper.make_node("Add", ["embedded", "bias"], ["y"])],
        "g",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch size", None]),
            helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, 1, 4]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch size", None, 4])],
        [table],
    )
    onnx.checker.check_model(helper.make_model(graph))
    ids, bias = graph_specs(graph)
    assert str(ids) == "ids:int64[batch_size,ids_1]{0..29}"
    assert str(bias) == "bias:float32[1,1,4]"


def test_the_python_api_validates_an_artifact_and_refuses_options_that_make_one(onnx_files, tmp_path):
    import convert

    result = convert.validate(onnx_files / "torch_plain.onnx", against=str(onnx_files / "torch_cnn.pt2"), out=tmp_path / "out")
    assert result.passed and [a.given for a in result.report.artifacts] == ["torch_plain.onnx"]
    with pytest.raises(convert.ConvertError, match="validate\\(\\) makes no artifact, and optimize= asks for one"):
        convert.validate(onnx_files / "torch_plain.onnx", against=str(onnx_files / "torch_cnn.pt2"), optimize=["int8"])


def _matmul_model_with_external_data(folder: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])
    weight = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], initializer=[weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    folder.mkdir()
    onnx.save(model, str(folder / "model.onnx"), save_as_external_data=True, location="model.data", size_threshold=0)
    return folder / "model.onnx"


def test_hardlinked_external_data_is_refused_with_the_step_that_fixes_it(tmp_path):
    model = _matmul_model_with_external_data(tmp_path / "m")
    os.link(model.parent / "model.data", tmp_path / "other-name")
    run = run_cli(str(model), "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "Traceback" not in run.output, run.output
    assert "the external data file 'model.data'" in run.stderr and "has 2 hard links" in run.stderr
    assert "Give it a file of its own: cp" in run.stderr and "check that the file is complete" not in run.stderr.lower()
    assert not (tmp_path / "out").exists()


def test_a_custom_op_without_its_library_is_named_not_blamed_on_the_input_shapes(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])
    graph = helper.make_graph([helper.make_node("MyRelu", ["x"], ["y"], domain="my.custom")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.custom", 1)])
    onnx.save(model, str(tmp_path / "custom.onnx"))
    run = run_cli(str(tmp_path / "custom.onnx"), "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "Traceback" not in run.output, run.output
    assert "has no kernel for: my.custom:MyRelu" in run.stderr and "--input" not in run.stderr
    assert not (tmp_path / "out").exists()


def test_an_op_the_model_defines_as_an_onnx_function_is_not_a_custom_op(tmp_path):
    from onnx import TensorProto, helper

    from convert.backends.onnx import ops_without_kernels

    relu = helper.make_function(
        "my.custom", "MyRelu", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])], [helper.make_opsetid("", 17)]
    )
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])
    graph = helper.make_graph([helper.make_node("MyRelu", ["x"], ["y"], domain="my.custom")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.custom", 1)], functions=[relu])
    assert ops_without_kernels(model) == []
    model.ClearField("functions")
    assert ops_without_kernels(model) == ["my.custom:MyRelu"]
