"""Exporters: one module per target format; each entry says which source framework it takes."""

from convert.registry import REGISTRY

REGISTRY.add(
    "exporter",
    "torch-onnx",
    "convert.exporters.onnx:TorchToOnnx",
    format="onnx",
    source="torch",
    packages=("torch", "onnxscript"),
    extra="torch",
)
REGISTRY.add("exporter", "onnx-check", "convert.exporters.onnx_check:OnnxToOnnx", format="onnx", source="onnx", extra="(core)")
REGISTRY.add(
    "exporter",
    "torch-torchscript",
    "convert.exporters.torchscript:TorchToTorchScript",
    format="torchscript",
    source="torch",
    packages=("torch",),
    extra="torch",
)
REGISTRY.add(
    "exporter",
    "torch-torch_export",
    "convert.exporters.torch_export:TorchToExportedProgram",
    format="torch_export",
    source="torch",
    packages=("torch",),
    extra="torch",
)
REGISTRY.add(
    "exporter",
    "tf-savedmodel",
    "convert.exporters.savedmodel:TfSavedModel",
    format="savedmodel",
    source=("keras", "jax"),
    packages=("tensorflow",),
    extra="tensorflow",
)
REGISTRY.add(
    "exporter",
    "keras-onnx",
    "convert.exporters.keras_onnx:KerasToOnnx",
    format="onnx",
    source="keras",
    packages=("tensorflow", "tf2onnx"),
    extra="tensorflow",
)
REGISTRY.add(
    "exporter",
    "tflite-converter",
    "convert.exporters.tflite:TfLite",
    format="tflite",
    source=("keras", "jax"),
    packages=("tensorflow",),
    extra="tensorflow",
)
REGISTRY.add(
    "exporter",
    "jax-onnx",
    "convert.exporters.jax_onnx:JaxToOnnx",
    format="onnx",
    source="jax",
    packages=("jax2onnx", "tensorflow", "tf2onnx"),
    extra="jax",
)
REGISTRY.add(
    "exporter",
    "torch-executorch",
    "convert.exporters.executorch:TorchToExecuTorch",
    format="executorch",
    source="torch",
    packages=("torch", "executorch"),
    extra="executorch",
)
REGISTRY.add(
    "exporter",
    "litert-torch",
    "convert.exporters.litert_torch:TorchToLiteRt",
    format="tflite",
    source="torch",
    packages=("torch", "litert_torch"),
    extra="litert",
)
