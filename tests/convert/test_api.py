"""The Python API returns a result object: artifacts, report, passed."""

import json

import numpy as np
import pytest
import torch

import convert
from fixtures.torch_models import build


def test_convert_module_with_example_inputs(tmp_path):
    module = build("cnn")
    x = torch.randn(2, 3, 32, 32)
    result = convert.convert(module, example_inputs=(x,), to=["onnx", "torch_export"], out=tmp_path)
    assert result.passed and result.exit_code == 0
    assert set(result.artifacts) == {"onnx", "torch_export"}
    assert result.artifacts["onnx"].path.is_file() and result.artifacts["onnx"].path.parent == tmp_path
    report = json.loads(result.report.to_json())
    assert report["source"]["kind"] == "object" and report["source"]["inputs"] == ["x:float32[2,3,32,32]"]
    assert report["artifacts"][0]["reproduce"].startswith("convert.convert(<SmallCNN object>")


def test_convert_with_symbolic_inputs_validates_other_batch_sizes(tmp_path):
    result = convert.convert(
        build("tokens"),
        inputs=["input_ids:int64[B,S]{0..999}", "attention_mask:int64[B,S]{0..1}"],
        to="onnx",
        dims=["B=2,1,4"],
        out=tmp_path,
    )
    assert result.passed
    shapes = {c.shape for c in result.report.artifacts[0].checks if c.status == "passed"}
    assert {s.split(",")[0] for s in shapes} == {"B=2", "B=1", "B=4"}


def test_wrong_model_is_not_an_exception_but_passed_is_false(tmp_path):
    result = convert.convert(build("off_in_onnx"), inputs=["x:float32[B,8]"], to=["onnx"], out=tmp_path)
    assert result.passed is False and result.exit_code == 1


def test_user_error_raises_convert_error(tmp_path):
    with pytest.raises(convert.ConvertError, match="not a torch.nn.Module|cannot tell which framework"):
        convert.convert(object(), to=["onnx"], out=tmp_path)


def test_load_gives_reference_inference():
    source = convert.load(build("two_input_dict"), inputs=["image:float32[B,3,16,16]", "features:float32[B,12]"])
    outputs = source.run({"image": np.zeros((1, 3, 16, 16), np.float32), "features": np.zeros((1, 12), np.float32)})
    assert set(outputs) == {"logits", "embedding"} and outputs["logits"].shape == (1, 4)
