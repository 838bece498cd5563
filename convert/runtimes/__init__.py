"""Runtimes: one runner per way of executing an artifact, on each device it supports."""

from convert.registry import REGISTRY

REGISTRY.add(
    "runtime",
    "onnxruntime",
    "convert.runtimes.onnxruntime:OnnxRuntimeRunner",
    formats=("onnx",),
    packages=("onnxruntime",),
    extra="onnxruntime",
)
REGISTRY.add(
    "runtime", "torch.jit", "convert.runtimes.torch:TorchScriptRunner", formats=("torchscript",), packages=("torch",), extra="torch"
)
REGISTRY.add(
    "runtime", "torch.export", "convert.runtimes.torch:ExportedProgramRunner", formats=("torch_export",), packages=("torch",), extra="torch"
)
REGISTRY.add(
    "runtime",
    "tensorflow",
    "convert.runtimes.tensorflow:SavedModelRunner",
    formats=("savedmodel",),
    packages=("tensorflow",),
    extra="tensorflow",
)
REGISTRY.add(
    "runtime",
    "tflite",
    "convert.runtimes.tensorflow:TfliteRunner",
    formats=("tflite",),
    packages=("ai_edge_litert", "tensorflow"),  # the LiteRT interpreter where it is installed, else TensorFlow's
    extra="litert",
)
REGISTRY.add(
    "runtime", "openvino", "convert.runtimes.openvino:OpenVinoRunner", formats=("openvino",), packages=("openvino",), extra="openvino"
)
REGISTRY.add(
    "runtime", "tensorrt", "convert.runtimes.tensorrt:TensorRtRunner", formats=("tensorrt",), packages=("tensorrt",), extra="tensorrt"
)
REGISTRY.add(
    "runtime",
    "executorch",
    "convert.runtimes.executorch:ExecuTorchRunner",
    formats=("executorch",),
    packages=("executorch",),
    extra="executorch",
)
