"""An ONNX source to an ONNX artifact: the model checked and normalised, not re-exported.

The graph is kept as it is; its inputs declare the specs' dims (a dim the user named with --input, or named after its
input and axis where the file left it unnamed), and so do its outputs where they declare an input's named dim; its
weights move beside it under the artifact's own name (external data only past the size one protobuf message can hold),
and --opset converts it with ONNX's version converter."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob


class OnnxToOnnx(Exporter):
    def strategies(self, job: ExportJob):
        converted = f", version_converter to opset {job.opset}" if job.opset else ""
        return [(f"onnx.checker + declared input dims{converted}", lambda path: self._normalise(job, path))]

    def _normalise(self, job: ExportJob, path: Path) -> Artifact:
        import onnx

        from convert.backends.onnx import name_dims_after_specs, onnx_artifact, save_onnx

        model = onnx.load(str(job.source.native))  # with its external data, checked when the source was loaded
        if job.opset:
            model = onnx.version_converter.convert_version(model, job.opset)
        name_dims_after_specs(model, job.source.signature.inputs)  # the outputs' too, where they share an input's dim
        specs = {spec.name: spec for spec in job.source.signature.inputs}
        for value in model.graph.input:
            spec = specs.get(value.name)
            if spec is None:
                continue
            for dim, wanted in zip(value.type.tensor_type.shape.dim, spec.dims):
                if isinstance(wanted, str):
                    dim.dim_param = wanted
                else:
                    dim.dim_value = wanted
        save_onnx(model, path)
        return onnx_artifact(path, job.opset)
