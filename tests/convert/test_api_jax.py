"""The Python API with JAX models: module objects, jitted functions with a params pytree, linen modules."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import convert
from fixtures import jax_models


def test_convert_an_nnx_module_object(tmp_path):
    result = convert.convert(jax_models.make_transformer(), inputs=["tokens:int32[B,S]{0..999}"], to=["onnx"], out=tmp_path)
    assert result.passed, result.report.to_json()
    assert result.report.source.framework == "jax" and result.report.source.kind == "object"
    assert set(result.report.source.outputs) == {"hidden", "pooled"}
    assert result.artifacts["onnx"].path.is_file()


def test_convert_a_jitted_function_with_params_and_example_inputs(tmp_path):
    x = np.random.default_rng(0).standard_normal((3, 4, 8)).astype(np.float32)
    result = convert.convert(
        jax.jit(jax_models.scan_rnn),
        params=jax_models.scan_rnn_params(),
        example_inputs=(x,),
        inputs=["x:float32[B,T,8]"],
        to="onnx",
        out=tmp_path,
    )
    assert result.passed
    checked = {c.shape for c in result.report.artifacts[0].checks if c.status == "passed"}
    assert "B=3,T=4" in checked and len(checked) >= 2  # the example's shape is the export shape, then others


def test_a_linen_module_takes_its_variables_or_its_params_alone():
    variables = jax_models.mlp_variables()
    x = np.random.default_rng(1).standard_normal((2, 28, 28, 1)).astype(np.float32)
    expected = np.asarray(jax_models.apply_mlp(variables, x))
    for params in (variables, variables["params"]):
        source = convert.load(jax_models.Mlp(), params=params, inputs=["x:float32[B,28,28,1]"])
        np.testing.assert_allclose(source.run({"x": x})["output"], expected, rtol=1e-6, atol=1e-6)


def test_a_linen_module_without_variables_is_refused():
    with pytest.raises(convert.ConvertError, match="without its variables"):
        convert.load(jax_models.Mlp(), inputs=["x:float32[B,28,28,1]"])


def test_a_plain_function_needs_the_framework_named():
    def double(x):
        return x * 2

    with pytest.raises(convert.ConvertError, match="cannot tell which framework"):
        convert.load(double, inputs=["x:float32[2]"])
    assert convert.load(double, framework="jax", inputs=["x:float32[2]"]).run({"x": np.ones(2, np.float32)})["output"].tolist() == [2, 2]


def test_64_bit_inputs_are_refused_while_jax_runs_in_32_bits():
    with pytest.raises(convert.ConvertError, match="int32"):
        convert.load(jax_models.make_transformer(), inputs=["tokens:int64[B,S]{0..999}"])
