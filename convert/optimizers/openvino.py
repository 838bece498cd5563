"""OpenVINO IR (``model.xml`` + ``model.bin`` in a folder) from the ONNX artifact: FP32, FP16-compressed
weights, or INT8 through NNCF post-training quantization on the calibration feeds."""

from __future__ import annotations

import shutil
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.openvino import IR_NAME
from convert.optimizers.base import OptimizeJob, Optimizer


class OpenVinoIR(Optimizer):
    format = "openvino"
    name = "openvino"
    suffix = "_openvino"

    def strategies(self, job: OptimizeJob):
        return [(f"openvino.convert_model{self._detail}", lambda path: self._write(job, path))]

    _detail = ""

    def _write(self, job: OptimizeJob, path: Path) -> Artifact:
        import openvino

        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        model = self.transform(openvino.convert_model(str(job.base.path)), job)
        openvino.save_model(model, str(path / IR_NAME), compress_to_fp16=self.precision == "fp16")
        return Artifact(format=self.format, path=path, files=[path])

    def transform(self, model, job: OptimizeJob):
        return model


class OpenVinoFp16(OpenVinoIR):
    name = "openvino:fp16"
    suffix = "_openvino_fp16"
    precision = "fp16"
    _detail = " + save_model(compress_to_fp16=True)"


class OpenVinoInt8(OpenVinoIR):
    name = "openvino:int8"
    suffix = "_openvino_int8"
    precision = "int8"
    _detail = " + nncf.quantize (model_type TRANSFORMER where the graph has a Softmax)"

    def transform(self, model, job: OptimizeJob):
        import nncf

        names = [port.get_any_name() for port in model.inputs]
        # NNCF's transformer scheme (SmoothQuant, attention-aware placement) keeps encoders accurate
        transformer = any(op.get_type_name() == "Softmax" for op in model.get_ops())
        return nncf.quantize(
            model,
            nncf.Dataset(job.calibration, lambda feed: {n: feed[n] for n in names}),
            subset_size=len(job.calibration),
            model_type=nncf.ModelType.TRANSFORMER if transformer else None,
            ignored_scope=nncf.IgnoredScope(names=_kept_in_fp32(model, job), validate=False),
        )


def _kept_in_fp32(model, job: OptimizeJob) -> list[str]:
    """The OpenVINO ops that --keep-fp32 names: those converted from the matching ONNX nodes (an op keeps its node's
    name, or the names of its outputs)."""
    import onnx

    from convert.backends.onnx import matching_nodes

    if not job.keep_fp32:
        return []
    graph = onnx.load(str(job.base.path), load_external_data=False).graph
    nodes = set(matching_nodes(graph, job.keep_fp32))
    values = {value for node in graph.node if node.name in nodes for value in node.output}
    return [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_friendly_name() in nodes or any(values & output.get_names() for output in op.outputs())
    ]
