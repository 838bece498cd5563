"""Precision attestation's parts on graphs built here with ONNX's own helpers and ONNX Runtime's own quantizers: what
each matrix product computes in and stores its weight in, sized from the graph's inferred shapes, and the claim judged."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from convert.backends.onnx import compute_precision
from convert.backends.tensorrt import engine_products
from convert.checks.attestation import attested_share, judged, unsized_for
from convert.precision import MatrixProduct, shares

pytestmark = pytest.mark.fast


def _matmul_model(path, dtype=TensorProto.FLOAT, np_dtype=np.float32):
    """x[B,16] @ w1[16,32] -> relu -> @ w2[32,8]; and x @ x^T, a product of two computed operands."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((16, 32)).astype(np_dtype), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((32, 8)).astype(np_dtype), "w2")
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h"], name="first"),
        helper.make_node("Relu", ["h"], ["r"], name="relu"),
        helper.make_node("MatMul", ["r", "w2"], ["y"], name="second"),
        helper.make_node("Transpose", ["x"], ["xt"], name="transpose"),
        helper.make_node("MatMul", ["x", "xt"], ["gram"], name="gram"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", dtype, ["B", 16])],
        [helper.make_tensor_value_info("y", dtype, ["B", 8]), helper.make_tensor_value_info("gram", dtype, ["B", "B"])],
        [w1, w2],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_products_are_sized_at_the_input_shapes_given(tmp_path):
    measured = compute_precision(_matmul_model(tmp_path / "m.onnx"), {"x": [4, 16]})
    assert [(p.name, p.macs, p.compute, p.weights) for p in measured.products] == [
        ("first", 4 * 16 * 32, "fp32", "fp32"),
        ("second", 4 * 32 * 8, "fp32", "fp32"),
        ("gram", 4 * 4 * 16, "fp32", None),  # both operands computed: no stored weight
    ]
    assert shares(measured.products, "compute") == {"fp32": 1.0} and measured.runtime_shares() == {"fp32": 1.0}


def test_an_fp16_graph_computes_in_fp16_and_the_cpu_provider_casts_it(tmp_path):
    measured = compute_precision(_matmul_model(tmp_path / "m.onnx", TensorProto.FLOAT16, np.float16), {"x": [2, 16]})
    assert shares(measured.products, "compute") == {"fp16": 1.0}
    assert measured.runtime_shares() == {"fp32": 1.0} and "no MatMul kernel" in measured.runtime_reason
    assert attested_share("fp16", "compute", measured.products) == 1.0


def test_onnx_runtimes_dynamic_int8_computes_in_int8_but_not_the_product_of_two_computed_operands(tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quantize_dynamic(_matmul_model(tmp_path / "m.onnx"), tmp_path / "q.onnx", weight_type=QuantType.QInt8)
    measured = compute_precision(tmp_path / "q.onnx", {"x": [4, 16]})
    computes = {p.name: (p.op, p.compute, p.weights) for p in measured.products}
    assert computes["first_quant"][1:] == ("int8", "int8") and computes["second_quant"][1:] == ("int8", "int8")
    assert computes["gram"] == ("MatMul", "fp32", None)  # ORT's dynamic quantizer leaves it in float
    weighted = 4 * 16 * 32 + 4 * 32 * 8
    assert attested_share("int8", "compute", measured.products) == pytest.approx(weighted / (weighted + 4 * 4 * 16))


def test_a_weight_only_pass_is_judged_on_the_products_that_have_a_stored_weight(tmp_path):
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    model = onnx.load(_matmul_model(tmp_path / "m.onnx"))
    quantizer = MatMulNBitsQuantizer(model, block_size=16, is_symmetric=True)
    quantizer.process()
    onnx.save(quantizer.model.model, tmp_path / "int4.onnx")
    measured = compute_precision(tmp_path / "int4.onnx", {"x": [4, 16]})
    stored = {p.name: (p.op, p.weights) for p in measured.products}
    assert stored["gram"] == ("MatMul", None) and {op for op, _ in stored.values()} == {"MatMulNBits", "MatMul"}
    assert shares(measured.products, "weights") == {"int4": 1.0}  # the gram matrix has no weight to store
    # MatMulNBits is sized from its K and N attributes: the same multiply-accumulates as the MatMuls it replaced
    assert sorted(p.macs for p in measured.products if p.op == "MatMulNBits") == [4 * 32 * 8, 4 * 16 * 32]
    assert attested_share("int4", "weights", measured.products) == 1.0
    assert attested_share("int4", "compute", measured.products) < 1.0


def test_a_qdq_weight_alone_dequantized_is_stored_in_int8_and_computed_in_float(tmp_path):
    rng = np.random.default_rng(1)
    weight = numpy_helper.from_array(rng.integers(-8, 8, (16, 4)).astype(np.int8), "w_q")
    scale = numpy_helper.from_array(np.array(0.1, np.float32), "w_scale")
    nodes = [
        helper.make_node("DequantizeLinear", ["w_q", "w_scale"], ["w"], name="dq"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="product"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight, scale],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), tmp_path / "w.onnx")
    (product,) = compute_precision(tmp_path / "w.onnx", {"x": [3, 16]}).products
    assert (product.macs, product.compute, product.weights) == (3 * 16 * 4, "fp32", "int8")


def test_shares_are_by_layer_where_no_product_is_sized_and_a_claim_accepts_any_integer_type():
    unsized = [MatrixProduct("MatMul", "a", None, "int8", "int4"), MatrixProduct("MatMul", "b", None, "fp32", "int8")]
    assert shares(unsized, "compute") == {"int8": 0.5, "fp32": 0.5}
    assert attested_share("int4", "weights", unsized) == 1.0  # INT4 with an INT8 backup is all integer
    assert attested_share("int8", "compute", unsized) == 0.5
    assert attested_share("int8", "compute", []) is None
    assert not judged("fp32", 0.5) and not judged("int8", 0.0) and judged("fp16", 0.5)


def test_a_claim_with_some_of_its_products_unsized_is_not_judged():
    mixed = [
        MatrixProduct("MatMul", "sized", 100, "fp32", "fp32"),
        MatrixProduct("MatMulNBits", "unsized", None, "fp32", "int4"),
        MatrixProduct("MatMul", "scores", None, "fp32", None),
    ]
    assert unsized_for("weights", mixed) == 1 and unsized_for("compute", mixed) == 2
    assert unsized_for("weights", mixed[2:]) == 0  # nothing the weights claim counts
    assert unsized_for("compute", [p for p in mixed if p.macs is None]) == 0  # none sized: shares by layer


def test_an_engine_inspectors_layers_in_the_layout_tensorrt_documents():
    """TensorRT cannot run here: the JSON is in the layout NVIDIA's engine inspector documents for detailed verbosity
    (``Layers``, each with ``ParameterType``, ``Inputs`` / ``Outputs`` with ``Format/Datatype``, ``Weights``)."""
    information = {
        "Layers": [
            {
                "Name": "conv1",
                "LayerType": "CaskConvolution",
                "ParameterType": "Convolution",
                "Inputs": [{"Name": "x", "Dimensions": [1, 3, 8, 8], "Format/Datatype": "Row major linear FP32"}],
                "Outputs": [{"Name": "c", "Dimensions": [1, 4, 8, 8], "Format/Datatype": "Row major linear FP32"}],
                "Weights": {"Type": "Float", "Count": 108},
            },
            {
                "Name": "fc",
                "LayerType": "CaskGemmMatrixMultiply",
                "ParameterType": "MatrixMultiply",
                "Inputs": [{"Name": "c", "Dimensions": [1, 256], "Format/Datatype": "Channel major FP16 format where channel % 8 == 0"}],
                "Outputs": [{"Name": "y", "Dimensions": [1, 10], "Format/Datatype": "Row major linear FP16"}],
            },
            {"Name": "relu", "LayerType": "PointWiseV2", "Inputs": [{"Format/Datatype": "Row major linear FP32"}]},
            {
                "Name": "{ForeignNode[attention]}",
                "LayerType": "Myelin",
                "Inputs": [{"Format/Datatype": "Row major linear Int8"}],
                "Outputs": [{"Format/Datatype": "Row major linear FP16"}],
            },
        ]
    }
    products = engine_products(information)
    assert [(p.name, p.macs, p.compute, p.weights) for p in products] == [
        ("conv1", 1 * 4 * 8 * 8 * 27, "fp32", "fp32"),
        ("fc", 10 * 256, "fp16", None),
        ("{ForeignNode[attention]}", None, "int8", None),
    ]
    assert shares(products, "compute") == pytest.approx({"fp32": 6912 / (6912 + 2560), "fp16": 2560 / (6912 + 2560)})


def test_a_16_bit_qdq_product_computes_in_int16_not_int8(tmp_path):
    """ONNX Runtime fuses 8-bit QDQ pairs into its integer kernels; a 16-bit pair is no INT8 arithmetic."""
    weight = numpy_helper.from_array(np.arange(64, dtype=np.int16).reshape(16, 4), "w_q")
    scale = numpy_helper.from_array(np.array(0.01, np.float32), "scale")
    zero = numpy_helper.from_array(np.array(0, np.int16), "zero")
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["x_q"], name="q"),
        helper.make_node("DequantizeLinear", ["x_q", "scale", "zero"], ["x_dq"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["w_q", "scale", "zero"], ["w"], name="dq_w"),
        helper.make_node("MatMul", ["x_dq", "w"], ["y"], name="product"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [weight, scale, zero],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), tmp_path / "q16.onnx")
    (product,) = compute_precision(tmp_path / "q16.onnx", {"x": [2, 16]}).products
    assert (product.compute, product.weights, product.macs) == ("int16", "int16", 2 * 16 * 4)
