"""A bfloat16 input or output crosses the runners as float32 holding bfloat16 values: NumPy has no bfloat16, ONNX
Runtime's OrtValue.numpy() raises on one, and OpenVINO's Python API hands one over as its bits viewed as float16. Both
runners feed the bits and widen them back exactly, so the values that come out are the values the graph made."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from convert.backends.onnx import onnx_artifact
from convert.runtimes.base import bfloat16_bits, from_bfloat16_bits
from convert.runtimes.onnxruntime import OnnxRuntimeRunner
from convert.specs import parse_input_spec

# bfloat16 values (their low 16 bits are zero), with signs, a fraction and magnitudes far apart: read as float16 bits
# they would be other numbers entirely
VALUES = from_bfloat16_bits(bfloat16_bits(np.array([[-0.1396, 1.5, 3.0e4, -2.0e-3]], np.float32)))


def bfloat16_graph(path):
    """x (bfloat16) → same (bfloat16, unchanged) and doubled (float32, after a Cast): kernels ONNX Runtime's CPU
    provider has for bfloat16."""
    graph = helper.make_graph(
        [
            helper.make_node("Identity", ["x"], ["same"]),
            helper.make_node("Cast", ["x"], ["wide"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["wide", "wide"], ["doubled"]),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.BFLOAT16, ["B", 4])],
        [
            helper.make_tensor_value_info("same", TensorProto.BFLOAT16, ["B", 4]),
            helper.make_tensor_value_info("doubled", TensorProto.FLOAT, ["B", 4]),
        ],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), str(path))
    artifact = onnx_artifact(path)
    artifact.inputs = (parse_input_spec("x:bfloat16[B,4]"),)
    return artifact


def test_bits_round_to_nearest_even_and_widen_exactly():
    assert np.array_equal(from_bfloat16_bits(bfloat16_bits(VALUES)), VALUES)
    # 1 + 2^-8 lies halfway between two bfloat16 values: it rounds to the even one, 1.0
    assert from_bfloat16_bits(bfloat16_bits(np.array([1 + 2**-8], np.float32)))[0] == 1.0


def test_onnx_runtime_feeds_and_reads_bfloat16(tmp_path):
    with OnnxRuntimeRunner(bfloat16_graph(tmp_path / "model.onnx"), "cpu") as runner:
        assert runner.input_metadata()["x"].dtype == "bfloat16"
        outputs = runner.infer({"x": VALUES})
    assert outputs["same"].dtype == np.float32 and np.array_equal(outputs["same"], VALUES)
    assert np.array_equal(outputs["doubled"], 2 * VALUES)


def test_openvino_feeds_and_reads_bfloat16(tmp_path):
    openvino = pytest.importorskip("openvino")
    from convert.artifacts import Artifact
    from convert.runtimes.openvino import IR_NAME, OpenVinoRunner

    source = bfloat16_graph(tmp_path / "model.onnx")
    folder = tmp_path / "ir"
    folder.mkdir()
    openvino.save_model(openvino.convert_model(str(source.path)), str(folder / IR_NAME), compress_to_fp16=False)
    artifact = Artifact(format="openvino", path=folder, files=sorted(folder.iterdir()), output_names=("same", "doubled"))
    artifact.inputs = source.inputs
    with OpenVinoRunner(artifact, "cpu") as runner:
        assert runner.input_metadata()["x"].dtype == "bfloat16"
        outputs = runner.infer({"x": VALUES})
    assert np.array_equal(outputs["same"], VALUES)
    assert np.array_equal(outputs["doubled"], 2 * VALUES)
