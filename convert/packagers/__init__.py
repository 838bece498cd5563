"""Packagers: each builds one package from the run's validated artifacts of the formats it takes; the package inherits
their checks by digest (its bytes are checked to be the validated ones) and adds structural checks of its own."""

from convert.registry import ANY_FORMAT, CORE_EXTRA, REGISTRY, PackagerSpec

REGISTRY.add(
    PackagerSpec(
        name="archive",
        target="convert.packagers.archive:ModelArchive",
        takes=(ANY_FORMAT,),
        suffix=".model.zip",
        packages=(),
        extra=CORE_EXTRA,
    )
)
REGISTRY.add(
    PackagerSpec(
        name="triton",
        target="convert.packagers.triton:TritonRepository",
        takes=("onnx", "openvino", "torchscript", "tensorrt", "savedmodel"),
        suffix=".triton",  # a folder: the model repository itself (tritonserver --model-repository=STEM.triton)
        packages=("protobuf",),  # its configurations are checked with Triton's schema, protobuf generated code
        extra=CORE_EXTRA,  # protobuf is a core dependency, at the version the vendored schema checks
    )
)
