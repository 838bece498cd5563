"""An ONNX artifact with external data is listed, hashed, published and run as one artifact."""

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from convert.backends.onnx import onnx_artifact
from convert.runtimes.onnxruntime import OnnxRuntimeRunner
from convert.safety import Staging
from convert.specs import parse_input_spec


def test_external_data_files_travel_with_the_model(tmp_path):
    weight = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 4])],
        [weight],
    )
    staging = Staging(tmp_path / "out")
    path = staging.path / "model.onnx"
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)  # newest onnx defaults past what ORT reads
    onnx.save(model, str(path), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    artifact = onnx_artifact(path)
    assert [f.name for f in artifact.files] == ["model.onnx", "model.onnx.data"]
    staging.publish(artifact.files)
    staging.cleanup()
    moved = artifact.relocated(tmp_path / "out")
    moved.inputs = (parse_input_spec("x:float32[B,3]"),)
    assert all(f.is_file() for f in moved.files)
    with OnnxRuntimeRunner(moved, "cpu") as runner:
        y = runner.infer({"x": np.ones((2, 3), np.float32)})["y"]
    assert np.array_equal(y, np.ones((2, 3), np.float32) @ np.arange(12, dtype=np.float32).reshape(3, 4))
