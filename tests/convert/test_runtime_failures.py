"""A runtime that fails at run time is reported with its reason: the C++ source location and function signature a
runtime writes before it (ONNX Runtime) or around it (OpenVINO) are dropped, not the reason they precede."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from convert.artifacts import Artifact
from convert.runtimes.base import RUNTIME_FAILURE_CHARS, runtime_failure
from convert.specs import parse_input_specs
from convert.validation import ValidationCase, checks_on
from convert.validators import TolerancePolicy, generate_feed, plan_shape_cases

SPECS = parse_input_specs(["x:float32[B,S]"])


def _pairs_model(path):
    """y = x reshaped to [2, -1]: it runs where B*S is even, and ONNX Runtime fails in the Reshape node elsewhere."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "pairs"], ["y"], name="to_pairs")],
        "pairs",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None])],
        [helper.make_tensor("pairs", TensorProto.INT64, [2], [2, -1])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_an_onnx_runtime_failure_keeps_its_reason(tmp_path):
    path = _pairs_model(tmp_path / "pairs.onnx")
    artifact = Artifact(format="onnx", path=path, files=[path], inputs=SPECS, output_names=("y",))
    cases = []
    for shape in plan_shape_cases(("B", "S")):
        feed = generate_feed(SPECS, shape.sizes, 0)
        cases.append(ValidationCase(shape, [feed], [{"y": feed["x"].reshape(2, -1) if feed["x"].size % 2 == 0 else feed["x"]}]))
    checks = checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())
    odd = [c for c in checks if np.prod(c.input_shapes["x"]) % 2]
    assert odd and all(c.status == "failed" for c in odd)
    for check in odd:
        shape = ",".join(map(str, check.input_shapes["x"]))
        assert check.reason.startswith("the runtime failed: Fail: [ONNXRuntimeError]"), check.reason
        assert "Name:'to_pairs' Status Message: " in check.reason and " was false. " in check.reason
        assert f"The input tensor cannot be reshaped to the requested shape. Input shape:{{{shape}}}" in check.reason
        assert "onnxruntime_src" not in check.reason and "ReshapeHelper" not in check.reason


def test_an_openvino_failure_keeps_the_reason_after_its_locations(tmp_path):
    """OpenVINO writes each location on a line of its own, and ends the line that says what failed with one."""
    ov = pytest.importorskip("openvino")
    compiled = ov.Core().compile_model(str(_pairs_model(tmp_path / "pairs.onnx")), "CPU")
    with pytest.raises(Exception) as raised:
        compiled({"x": np.zeros((1, 3), np.float32)})
    reason = runtime_failure(raised.value)
    assert "Reshape node" in reason and "conflicts with the reshape pattern" in reason, (reason, str(raised.value))
    assert "Exception from" not in reason and ".cpp" not in reason


def test_a_long_runtime_failure_is_cut_after_its_reason_begins():
    signature = "void onnxruntime::Foo<float>::Bar(const onnxruntime::TensorShape&, std::vector<long int>&) const"
    text = f"Status Message: /onnxruntime_src/core/foo.cc:12 {signature} {{3,2,31,16}} != {{3,2,32,16}} " + "detail " * 200
    reason = runtime_failure(RuntimeError(text))
    assert reason.startswith("RuntimeError: Status Message: {3,2,31,16} != {3,2,32,16} detail")
    assert len(reason) == RUNTIME_FAILURE_CHARS and reason.endswith("…")
