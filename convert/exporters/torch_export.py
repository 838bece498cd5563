"""torch.export ``.pt2`` from PyTorch, with the input specs' symbols as dynamic dims (bounded where torch says a dim
cannot take every size, as recorded on the artifact)."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import export_program, record_bounds


class TorchToExportedProgram(Exporter):
    format = "torch_export"
    name = "torch-torch_export"
    suffix = ".pt2"

    def strategies(self, job: ExportJob):
        converted = "TS2EPConverter, then " if job.source.is_scripted else ""
        return [(f"{converted}torch.export.export(strict=False)", lambda path: self._export(job, path))]

    def _export(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        program, bounded = export_program(job)
        torch.export.save(program, str(path))
        return record_bounds(Artifact(format=self.format, path=path, files=[path]), program, job, bounded, guarded=True)
