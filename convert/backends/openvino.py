"""OpenVINO as the optimizer writes its IR and the runtime reads it: the model file's name in the IR folder; the values of
an IR's tensors by the names of the ONNX values they were converted from (localisation)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convert.formats import IR_NAME

# f32 for every artifact, INT8 included: the CPU plugin's default on CPUs with bf16 would run a computation the
# artifact does not describe
F32_CPU = {"INFERENCE_PRECISION_HINT": "f32"}
# what stands between a low-precision weight constant and the operation that takes it
DEQUANTIZING_OPS = ("Convert", "Subtract", "Multiply", "Reshape", "Transpose")
WEIGHTED_OPS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul")
# OpenVINO element types in the precision report's spelling
_PRECISION_OF_TYPE = {"f32": "fp32", "f16": "fp16", "bf16": "bf16", "f64": "fp64", "i8": "int8", "u8": "int8", "i4": "int4", "u4": "int4"}
# ops a quantized value passes through quantized (NNCF puts a FakeQuantize before a MaxPool, not after it)
_QUANTIZATION_AGNOSTIC = (
    "Reshape",
    "Transpose",
    "Squeeze",
    "Unsqueeze",
    "MaxPool",
    "Pad",
    "StridedSlice",
    "Split",
    "VariadicSplit",
    "Concat",
)
# the compiled CPU model's matrix products (the plugin fuses a MatMul with a constant weight into FullyConnected)
_RUNTIME_PRODUCTS = ("Convolution", "FullyConnected", "MatMul", "Deconvolution")


def tensor_values(folder: Path, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The IR's tensors that carry the given names (OpenVINO keeps the ONNX value names of the ops it converted), as
    extra outputs of one inference on the CPU plugin at f32; a name no tensor carries any more is left out."""
    import openvino

    core = openvino.Core()
    model = core.read_model(str(folder / IR_NAME))
    carried = {name for op in model.get_ops() for port in op.outputs() for name in port.get_names()}
    wanted = [name for name in names if name in carried]
    if not wanted:
        return {}
    model.add_outputs(wanted)
    compiled = core.compile_model(model, "CPU", F32_CPU)
    results = compiled.create_infer_request().infer({p.get_any_name(): feed[p.get_any_name()] for p in compiled.inputs})
    found = {}
    for port in compiled.outputs:
        for name in port.get_names() & set(wanted):
            found[name] = np.array(results[port])
    return found


def stored_weight(node, depth: int = 0):
    """The low-precision constant a weight is dequantized from; None where it is stored in float."""
    kind = node.get_type_name()
    if kind == "Constant":
        return node if node.get_element_type().get_type_name() in ("i8", "u8", "i4", "u4") else None
    if kind in DEQUANTIZING_OPS and depth < 6:
        return stored_weight(node.input_value(0).get_node(), depth + 1)
    return None


def compute_precision(folder: Path, input_shapes: dict[str, list[int]]):
    """What the IR's matrix products compute in, sized at ``input_shapes``: an operand through a FakeQuantize is
    quantized, a weight is stored in its constant's type (through the ops that dequantize it); and what the CPU
    plugin's compiled model runs each layer in, compiled as the runner compiles it (at f32 inference precision), where
    the IR takes less than a quarter of the memory available."""
    import math

    import openvino

    from convert.memory import available_bytes
    from convert.precision import MatrixProduct, Measured

    core = openvino.Core()
    model = core.read_model(str(folder / IR_NAME))
    model.reshape({port.get_any_name(): input_shapes[port.get_any_name()] for port in model.inputs if port.get_any_name() in input_shapes})

    def through(node, passing: tuple[str, ...]):
        for _ in range(8):
            if node.get_type_name() not in passing:
                break
            node = node.input_value(0).get_node()
        return node

    def precision(element_type) -> str:
        return _PRECISION_OF_TYPE.get(element_type.get_type_name(), "other")

    products = []
    for op in model.get_ordered_ops():
        if op.get_type_name() not in WEIGHTED_OPS:
            continue
        activation = through(op.input_value(0).get_node(), _QUANTIZATION_AGNOSTIC)
        weight = through(op.input_value(1).get_node(), ("Reshape", "Transpose"))
        low = stored_weight(op.input_value(1).get_node())
        stored_at = through(op.input_value(1).get_node(), DEQUANTIZING_OPS)
        quantized_weight = low is not None or weight.get_type_name() == "FakeQuantize"
        if low is not None:
            stored = precision(low.get_element_type())
        elif weight.get_type_name() == "FakeQuantize":
            stored = "int8"
        else:
            stored = precision(stored_at.get_output_element_type(0)) if stored_at.get_type_name() == "Constant" else None
        quantized_input = activation.get_type_name() == "FakeQuantize"
        compute = "int8" if quantized_input and quantized_weight else precision(op.get_input_element_type(0))
        products.append(MatrixProduct(op.get_type_name(), op.get_friendly_name(), _ov_macs(op, math), compute, stored))
    files = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    if files > available_bytes() // 4:
        return Measured(
            products,
            how="the OpenVINO IR",
            runtime="openvino on cpu",
            runtime_reason="the compiled model was not read: the IR takes more than a quarter of the memory available",
            runtime_products=[],
        )
    compiled = core.compile_model(model, "CPU", F32_CPU)
    runtime = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        layer = op.get_rt_info()["layerType"].astype(str)
        if layer not in _RUNTIME_PRODUCTS:
            continue
        # its arithmetic runs in its activation's type: runtimePrecision names the narrower of its inputs' types, FP16
        # where an FP16 weight is widened to f32 as the layer reads it
        runs = precision(op.input(0).get_element_type())
        runtime.append(MatrixProduct(layer, op.get_friendly_name(), _runtime_macs(op, math), runs, None))
    return Measured(products, how="the OpenVINO IR", runtime="openvino on cpu (f32 inference precision)", runtime_products=runtime)


def _ov_macs(op, math) -> int | None:
    """Multiply-accumulates of one IR product from its static shapes (None where a shape is not static)."""
    shapes = [op.get_input_partial_shape(i) for i in range(2)] + [op.get_output_partial_shape(0)]
    if not all(shape.is_static for shape in shapes):
        return None
    first, weight, output = (list(shape.to_shape()) for shape in shapes)
    kind = op.get_type_name()
    if kind == "Convolution":
        return math.prod(output) * math.prod(weight[1:])
    if kind == "GroupConvolution":
        return math.prod(output) * math.prod(weight[2:])
    if kind == "ConvolutionBackpropData":
        return math.prod(first) * math.prod(weight[1:])
    reduced = first[-2] if op.get_attributes().get("transpose_a") and len(first) > 1 else first[-1]
    return math.prod(output) * reduced


def _runtime_macs(op, math) -> int | None:
    """Multiply-accumulates of one layer of the compiled model (a grouped convolution's weight has one more dim)."""
    if op.get_input_size() < 2 or not all(op.input(i).get_partial_shape().is_static for i in range(2)):
        return None
    first, weight = (list(op.input(i).get_shape()) for i in range(2))
    output = list(op.output(0).get_shape())
    if op.get_rt_info()["layerType"].astype(str) in ("Convolution", "Deconvolution"):
        grouped = len(weight) == len(output) + 1
        return math.prod(first if op.get_rt_info()["layerType"].astype(str) == "Deconvolution" else output) * math.prod(
            weight[2 if grouped else 1 :]
        )
    return math.prod(output) * first[-1]
