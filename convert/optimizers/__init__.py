"""Optimizers: one per pass, each taking a validated artifact of one format (``takes``) and giving a new artifact.

``cacheable=False``: a TensorRT engine is made for one GPU model and driver, and its runner loads only engines built in
this process, so its results are never reused from the cache (decided from the spec, before TensorRT is imported)."""

from convert.registry import CORE_EXTRA, REGISTRY, OptimizerSpec

_ONNX_RUNTIME_PASS = dict(takes="onnx", format="onnx", packages=(), extra=CORE_EXTRA, cacheable=True, requires=())
_OPENVINO_PASS = dict(takes="onnx", format="openvino", extra="openvino", cacheable=True)
_TENSORRT_PASS = dict(takes="onnx", format="tensorrt", packages=("tensorrt",), extra="tensorrt", cacheable=False, requires=())

for spec in (
    OptimizerSpec(
        name="simplify",
        target="convert.optimizers.simplify:Simplify",
        takes="onnx",
        format="onnx",
        suffix=".slim.onnx",
        precision="fp32",
        calibrated=False,
        cacheable=True,
        packages=("onnxslim",),
        requires=(),
        extra="optimize",
    ),
    OptimizerSpec(
        name="fp16",
        target="convert.optimizers.onnx_quant:Fp16",
        suffix=".fp16.onnx",
        precision="fp16",
        calibrated=False,
        **_ONNX_RUNTIME_PASS,
    ),
    OptimizerSpec(
        name="int8",
        target="convert.optimizers.onnx_quant:StaticInt8",
        suffix=".int8.onnx",
        precision="int8",
        calibrated=True,
        **_ONNX_RUNTIME_PASS,
    ),
    OptimizerSpec(
        name="int8-dynamic",
        target="convert.optimizers.onnx_quant:DynamicInt8",
        suffix=".int8-dynamic.onnx",
        precision="int8",
        calibrated=False,
        **_ONNX_RUNTIME_PASS,
    ),
    OptimizerSpec(
        name="openvino",
        target="convert.optimizers.openvino:OpenVinoIR",
        suffix="_openvino",
        precision="fp32",
        calibrated=False,
        packages=("openvino",),
        requires=("openvino",),
        **_OPENVINO_PASS,
    ),
    OptimizerSpec(
        name="openvino:fp16",
        target="convert.optimizers.openvino:OpenVinoFp16",
        suffix="_openvino_fp16",
        precision="fp16",
        calibrated=False,
        packages=("openvino",),
        requires=("openvino",),
        **_OPENVINO_PASS,
    ),
    OptimizerSpec(
        name="openvino:int8",
        target="convert.optimizers.openvino:OpenVinoInt8",
        suffix="_openvino_int8",
        precision="int8",
        calibrated=True,
        packages=("openvino", "nncf"),
        requires=("openvino", "nncf"),
        **_OPENVINO_PASS,
    ),
    OptimizerSpec(
        name="trt",
        target="convert.optimizers.tensorrt:TensorRtFp32",
        suffix=".engine",
        precision="fp32",
        calibrated=False,
        **_TENSORRT_PASS,
    ),
    OptimizerSpec(
        name="trt:fp16",
        target="convert.optimizers.tensorrt:TensorRtFp16",
        suffix="_fp16.engine",
        precision="fp16",
        calibrated=False,
        **_TENSORRT_PASS,
    ),
    OptimizerSpec(
        name="trt:int8",
        target="convert.optimizers.tensorrt:TensorRtInt8",
        suffix="_int8.engine",
        precision="int8",
        calibrated=True,
        **_TENSORRT_PASS,
    ),
    OptimizerSpec(
        name="executorch:int8",
        target="convert.optimizers.executorch:ExecuTorchInt8",
        takes="executorch",
        format="executorch",
        suffix=".int8.pte",
        precision="int8",
        calibrated=True,
        cacheable=True,
        packages=("torch", "executorch", "torchao"),
        requires=("executorch",),
        extra="executorch",
    ),
):
    REGISTRY.add(spec)
