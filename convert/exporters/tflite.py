"""TFLite (float32) through the TFLite converter: TFLite's built-in ops first; the SELECT_TF_OPS
fallback (TensorFlow kernels through the Flex delegate) is a second, recorded strategy.

The converter keeps an axis dynamic when the SavedModel's signature has None there; where it fixes one,
the artifact records it and checks at other sizes are skipped with that reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.tf import SERVING_KEY, native_stderr_silenced, record_fixed_axes, tensorflow
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.tf_common import write_savedmodel


class TfLite(Exporter):
    def strategies(self, job: ExportJob):
        return [
            ("TFLiteConverter(TFLITE_BUILTINS)", lambda path: self._convert(job, path, select_tf_ops=False)),
            ("TFLiteConverter(TFLITE_BUILTINS+SELECT_TF_OPS)", lambda path: self._convert(job, path, select_tf_ops=True)),
        ]

    def _convert(self, job: ExportJob, path: Path, select_tf_ops: bool) -> Artifact:
        write_tflite(job, path, select_tf_ops)
        return _with_fixed_axes(Artifact(format=self.format, path=path, files=[path]), job)


def write_tflite(job: ExportJob, path: Path, select_tf_ops: bool = False) -> None:
    """Convert the source's serving function (through an intermediate SavedModel) to a .tflite file."""
    tf = tensorflow()
    intermediate = path.with_name(f".{path.name}.savedmodel")
    try:
        write_savedmodel(job, intermediate)
        converter = tf.lite.TFLiteConverter.from_saved_model(str(intermediate), signature_keys=[SERVING_KEY])
        ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if select_tf_ops:
            ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
        converter.target_spec.supported_ops = ops
        with native_stderr_silenced():  # the converter prints its errors to fd 2 too; the exception keeps them
            path.write_bytes(converter.convert())
    finally:
        shutil.rmtree(intermediate, ignore_errors=True)


def _with_fixed_axes(artifact: Artifact, job: ExportJob) -> Artifact:
    """Record the symbolic axes the converter fixed (shape_signature not -1)."""
    return record_fixed_axes(artifact, job.source.signature.inputs, "the TFLite converter")
