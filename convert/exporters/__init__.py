"""Exporters: one module per target format; each spec says which source frameworks it takes."""

from convert.registry import CORE_EXTRA, REGISTRY, ExporterSpec

for spec in (
    ExporterSpec(
        name="torch-onnx",
        target="convert.exporters.onnx:TorchToOnnx",
        format="onnx",
        sources=("torch",),
        packages=("torch", "onnxscript"),
        extra="torch",
    ),
    ExporterSpec(
        name="onnx-check", target="convert.exporters.onnx_check:OnnxToOnnx", format="onnx", sources=("onnx",), packages=(), extra=CORE_EXTRA
    ),
    ExporterSpec(
        name="torch-torchscript",
        target="convert.exporters.torchscript:TorchToTorchScript",
        format="torchscript",
        sources=("torch",),
        packages=("torch",),
        extra="torch",
    ),
    ExporterSpec(
        name="torch-torch_export",
        target="convert.exporters.torch_export:TorchToExportedProgram",
        format="torch_export",
        sources=("torch",),
        packages=("torch",),
        extra="torch",
    ),
    ExporterSpec(
        name="tf-savedmodel",
        target="convert.exporters.savedmodel:TfSavedModel",
        format="savedmodel",
        sources=("keras", "jax"),
        packages=("tensorflow",),
        extra="tensorflow",
    ),
    ExporterSpec(
        name="keras-onnx",
        target="convert.exporters.keras_onnx:KerasToOnnx",
        format="onnx",
        sources=("keras",),
        packages=("tensorflow", "tf2onnx"),
        extra="tensorflow",
    ),
    ExporterSpec(
        name="tflite-converter",
        target="convert.exporters.tflite:TfLite",
        format="tflite",
        sources=("keras", "jax"),
        packages=("tensorflow",),
        extra="tensorflow",
    ),
    ExporterSpec(
        name="jax-onnx",
        target="convert.exporters.jax_onnx:JaxToOnnx",
        format="onnx",
        sources=("jax",),
        packages=("jax2onnx", "tensorflow", "tf2onnx"),
        extra="jax",
    ),
    ExporterSpec(
        name="torch-executorch",
        target="convert.exporters.executorch:TorchToExecuTorch",
        format="executorch",
        sources=("torch",),
        packages=("torch", "executorch"),
        extra="executorch",
    ),
    ExporterSpec(
        name="litert-torch",
        target="convert.exporters.litert_torch:TorchToLiteRt",
        format="tflite",
        sources=("torch",),
        packages=("torch", "litert_torch"),
        extra="litert",
    ),
):
    REGISTRY.add(spec)
