"""Runtimes: one runner per way of executing an artifact, on each device it supports."""

from convert.registry import REGISTRY

REGISTRY.add("runtime", "onnxruntime", "convert.runtimes.onnxruntime:OnnxRuntimeRunner", formats=("onnx",), package="onnxruntime", extra="onnxruntime")
REGISTRY.add("runtime", "torch.jit", "convert.runtimes.torch:TorchScriptRunner", formats=("torchscript",), package="torch", extra="torch")
REGISTRY.add("runtime", "torch.export", "convert.runtimes.torch:ExportedProgramRunner", formats=("torch_export",), package="torch", extra="torch")
REGISTRY.add("runtime", "tensorflow", "convert.runtimes.tensorflow:SavedModelRunner", formats=("savedmodel",), package="tensorflow", extra="tensorflow")
REGISTRY.add("runtime", "tflite", "convert.runtimes.tensorflow:TfliteRunner", formats=("tflite",), package="tensorflow", extra="tensorflow")
REGISTRY.add("runtime", "openvino", "convert.runtimes.openvino:OpenVinoRunner", formats=("openvino",), package="openvino", extra="openvino")
REGISTRY.add("runtime", "tensorrt", "convert.runtimes.tensorrt:TensorRtRunner", formats=("tensorrt",), package="tensorrt", extra="tensorrt")
