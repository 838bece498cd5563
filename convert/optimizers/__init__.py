"""Optimizers: one per pass, each taking an artifact of one format (``takes``) and giving a new artifact.

``cacheable=False``: a TensorRT engine is made for one GPU model and driver, and its runner checks only engines built
in this run, so its results are never reused from the cache."""

from convert.registry import REGISTRY

REGISTRY.add(
    "optimizer", "simplify", "convert.optimizers.simplify:Simplify", takes="onnx", format="onnx", packages=("onnxslim",), extra="optimize"
)
REGISTRY.add("optimizer", "fp16", "convert.optimizers.onnx_quant:Fp16", takes="onnx", format="onnx")
REGISTRY.add("optimizer", "int8", "convert.optimizers.onnx_quant:StaticInt8", takes="onnx", format="onnx", calibrated=True)
REGISTRY.add("optimizer", "int8-dynamic", "convert.optimizers.onnx_quant:DynamicInt8", takes="onnx", format="onnx")
REGISTRY.add(
    "optimizer",
    "openvino",
    "convert.optimizers.openvino:OpenVinoIR",
    takes="onnx",
    format="openvino",
    packages=("openvino",),
    requires=("openvino",),
    extra="openvino",
)
REGISTRY.add(
    "optimizer",
    "openvino:fp16",
    "convert.optimizers.openvino:OpenVinoFp16",
    takes="onnx",
    format="openvino",
    packages=("openvino",),
    requires=("openvino",),
    extra="openvino",
)
REGISTRY.add(
    "optimizer",
    "openvino:int8",
    "convert.optimizers.openvino:OpenVinoInt8",
    takes="onnx",
    format="openvino",
    packages=("openvino", "nncf"),
    requires=("openvino", "nncf"),
    extra="openvino",
    calibrated=True,
)
REGISTRY.add(
    "optimizer",
    "trt",
    "convert.optimizers.tensorrt:TensorRtFp32",
    takes="onnx",
    format="tensorrt",
    packages=("tensorrt",),
    extra="tensorrt",
)
REGISTRY.add(
    "optimizer",
    "trt:fp16",
    "convert.optimizers.tensorrt:TensorRtFp16",
    takes="onnx",
    format="tensorrt",
    packages=("tensorrt",),
    extra="tensorrt",
)
REGISTRY.add(
    "optimizer",
    "trt:int8",
    "convert.optimizers.tensorrt:TensorRtInt8",
    takes="onnx",
    format="tensorrt",
    packages=("tensorrt",),
    extra="tensorrt",
    calibrated=True,
)
REGISTRY.add(
    "optimizer",
    "executorch:int8",
    "convert.optimizers.executorch:ExecuTorchInt8",
    takes="executorch",
    format="executorch",
    packages=("torch", "executorch", "torchao"),
    requires=("executorch",),
    extra="executorch",
    calibrated=True,
)
