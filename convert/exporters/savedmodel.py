"""TF SavedModel: a folder with a ``serving_default`` signature, dynamic on every symbolic axis."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.tf_common import write_savedmodel


class TfSavedModel(Exporter):
    def strategies(self, job: ExportJob):
        bridge = getattr(job.source, "tf_bridge", "")
        strategy = (
            "keras.export.ExportArchive" if job.source.is_keras else f"{bridge} + tf.saved_model.save" if bridge else "tf.saved_model.save"
        )
        return [(strategy, lambda path: self._write(job, path))]

    def _write(self, job: ExportJob, path: Path) -> Artifact:
        write_savedmodel(job, path)
        return Artifact(format=self.format, path=path, files=[path])
