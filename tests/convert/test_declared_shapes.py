"""An artifact is held to the shapes it declares: a declared fixed dim that takes other sizes fails its check, and an
ONNX artifact's declared outputs are repaired (the dim made dynamic), validated again, and the repair recorded."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from convert.artifacts import Artifact
from convert.checks.repair import declared_repairs
from convert.specs import parse_input_specs
from convert.validation import (
    ValidationCase,
    checks_on,
    name_onnx_output_dims,
)
from convert.validators import TolerancePolicy, generate_feed, plan_shape_cases

SPECS = parse_input_specs(["x:float32[B,S]"])


def _onnx_declaring(path, output_shape) -> Artifact:
    """A named fake for the logic below: y = relu(x) whose output is declared ``output_shape`` (as an exporter
    freezing a dim would write it); the values are right at every shape."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "declared",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output_shape)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return Artifact(format="onnx", path=path, files=[path], inputs=SPECS, output_names=("y",))


def _cases():
    cases = []
    for shape in plan_shape_cases(("B", "S")):
        feeds = [generate_feed(SPECS, shape.sizes, sample) for sample in range(2)]
        cases.append(ValidationCase(shape, feeds, [{"y": np.maximum(feed["x"], 0)} for feed in feeds]))
    return cases


@pytest.fixture(scope="module")
def cases():
    return _cases()


def test_a_declared_fixed_dim_that_varies_fails_with_where_and_what(tmp_path, cases):
    export_s = cases[0].shape.sizes["S"]
    artifact = _onnx_declaring(tmp_path / "frozen.onnx", ["B", export_s])
    checks = checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())
    assert checks[0].status == "passed"  # at the export shape the declaration holds
    failed = [c for c in checks if c.status == "failed"]
    assert failed and all(c.shape != checks[0].shape for c in failed)
    for check in failed:
        size = check.input_shapes["x"][1]
        assert f"output 'y' is declared [B,{export_s}] but its axis 1 was {size} at {check.shape}" in check.reason
        assert all(o.status == "passed" for o in check.outputs)  # the values were right: only the declaration lies
        assert [(m.tensor, m.role, m.axis) for m in check.declared_mismatches] == [("y", "output", 1)]


def test_one_dim_name_taking_two_sizes_fails(tmp_path, cases):
    """An output declared [B, B] (an export that tied S to B) is wrong wherever B != S."""
    checks = checks_on(_onnx_declaring(tmp_path / "tied.onnx", ["B", "B"]), "onnxruntime", "cpu", cases, TolerancePolicy())
    failed = [c for c in checks if c.status == "failed"]
    assert failed and "also declared B" in failed[0].reason
    assert all(c.input_shapes["x"][0] != c.input_shapes["x"][1] for c in failed)


def test_a_repaired_onnx_declares_the_symbol_and_passes(tmp_path, cases):
    export_s = cases[0].shape.sizes["S"]
    artifact = _onnx_declaring(tmp_path / "frozen.onnx", ["B", export_s])
    repairs = declared_repairs(checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy()), cases)
    assert list(repairs) == [("y", 1)] and repairs[("y", 1)][0] == "S"
    name_onnx_output_dims(artifact.path, {where: name for where, (name, _) in repairs.items()})
    dims = onnx.load(str(artifact.path)).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param for d in dims] == ["B", "S"]
    assert {c.status for c in checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())} == {"passed"}


LSTM_MODULE = """
import torch


class Lstm(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(4, 8, batch_first=True)

    def forward(self, x):
        return self.lstm(x)[0]


def build():
    torch.manual_seed(0)
    return Lstm().eval()
"""


def test_torch_lstm_onnx_declares_its_sequence_dynamic_after_the_repair(tmp_path):
    """torch 2.13's torch.onnx.export(dynamo=True) declares an LSTM's output [B, <export S>, H] although S is dynamic
    (ONNX Runtime only warns at other lengths). The run repairs the declaration, validates again and says so.
    The model is a file, exported in a fresh worker process: after one torch.export of an LSTM in a process, torch
    2.13 specializes the sequence length of every later LSTM export there (README, known sharp edges)."""
    import convert

    (tmp_path / "lstm_model.py").write_text(LSTM_MODULE)
    result = convert.convert(f"{tmp_path / 'lstm_model.py'}:build", inputs=["x:float32[B,S,4]"], to=["onnx"], out=tmp_path / "out")
    record = result.report.artifacts[0]
    assert result.passed, [c.reason for c in record.checks]
    assert record.strategy == "torch.onnx.export(dynamo=True)"
    assert len(record.repairs) == 1 and "axis 1 of output 'output'" in record.repairs[0] and "'S'" in record.repairs[0]
    assert all(not c.declared_mismatches for c in record.checks)
    assert {c.shape.split(",")[1] for c in record.checks if c.status == "passed"} >= {"S=1", "S=15"}
    dims = onnx.load(str(result.artifacts["onnx"].path)).graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["B", "S", 8]
