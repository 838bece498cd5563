"""Runtimes: one runner per way of executing an artifact, on each device it supports."""

from convert.registry import CORE_EXTRA, REGISTRY, RuntimeSpec

for spec in (
    RuntimeSpec(
        name="onnxruntime",
        target="convert.runtimes.onnxruntime:OnnxRuntimeRunner",
        formats=("onnx",),
        packages=("onnxruntime",),
        extra=CORE_EXTRA,
    ),
    RuntimeSpec(
        name="torch.jit", target="convert.runtimes.torch:TorchScriptRunner", formats=("torchscript",), packages=("torch",), extra="torch"
    ),
    RuntimeSpec(
        name="torch.export",
        target="convert.runtimes.torch:ExportedProgramRunner",
        formats=("torch_export",),
        packages=("torch",),
        extra="torch",
    ),
    RuntimeSpec(
        name="tensorflow",
        target="convert.runtimes.tensorflow:SavedModelRunner",
        formats=("savedmodel",),
        packages=("tensorflow",),
        extra="tensorflow",
    ),
    RuntimeSpec(
        name="tflite",
        target="convert.runtimes.tensorflow:TfliteRunner",
        formats=("tflite",),
        packages=("ai_edge_litert", "tensorflow"),  # the LiteRT interpreter where it is installed, else TensorFlow's
        extra="litert",
    ),
    RuntimeSpec(
        name="openvino", target="convert.runtimes.openvino:OpenVinoRunner", formats=("openvino",), packages=("openvino",), extra="openvino"
    ),
    RuntimeSpec(
        name="tensorrt", target="convert.runtimes.tensorrt:TensorRtRunner", formats=("tensorrt",), packages=("tensorrt",), extra="tensorrt"
    ),
    RuntimeSpec(
        name="executorch",
        target="convert.runtimes.executorch:ExecuTorchRunner",
        formats=("executorch",),
        packages=("executorch",),
        extra="executorch",
    ),
):
    REGISTRY.add(spec)
