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
        )
