"""torch.export ``.pt2`` from PyTorch, with the input specs' symbols as dynamic dims."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import dynamic_shapes, example_args


class TorchToExportedProgram(Exporter):
    format = "torch_export"
    name = "torch-torch_export"
    suffix = ".pt2"

    def strategies(self, job: ExportJob):
        return [("torch.export.export(strict=False)", lambda path: self._export(job, path))]

    def _export(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        program = torch.export.export(job.source.native, example_args(job), dynamic_shapes=dynamic_shapes(job), strict=False)
        torch.export.save(program, str(path))
        return Artifact(format=self.format, path=path, files=[path])
