"""Keras → ONNX through tf2onnx: constants a model captures stay constants."""

from __future__ import annotations

import numpy as np

import convert


def test_a_normalization_layers_statistics_are_folded_back_into_the_graph(tmp_path):
    """keras 3 Normalization given its mean and variance keeps them as eager tensors that the serving function captures;
    tf2onnx 1.17 turned them into graph inputs the model does not have (as in keras.applications' EfficientNet)."""
    import keras
    import onnx

    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,), name="x")
    normalized = keras.layers.Normalization(mean=np.arange(8.0), variance=np.arange(1.0, 9.0))(inputs)
    model = keras.Model(inputs, keras.layers.Dense(4, name="scores")(normalized))
    result = convert.convert(model, to=["onnx"], out=tmp_path, cache=False)
    record = result.report.artifacts[0]
    assert result.passed, [(c.shape, c.reason) for c in record.checks]
    assert record.strategy == "tf2onnx.convert.from_function"
    assert [i.name for i in onnx.load(record.path).graph.input] == ["x"]
