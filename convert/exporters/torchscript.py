"""TorchScript from PyTorch: tracing first, scripting as the recorded fallback.

Tracing an nn.Module records ``x.size(0)`` as a traced value, so dynamic dims stay dynamic. Tracing a
torch.export program's module does not: its ``aten.sym_size`` calls hand the tracer plain ints, which
become constants. Such an artifact is recorded as fixed at the export shape, and checks at other shapes
are skipped with that reason (running it at another shape can even crash the interpreter).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import example_args


class TorchToTorchScript(Exporter):
    format = "torchscript"
    name = "torch-torchscript"
    suffix = ".torchscript.pt"

    def strategies(self, job: ExportJob):
        if job.source.is_scripted:
            return [("torch.jit.save", lambda path: self._save(job.source.native, path))]
        return [("torch.jit.trace", lambda path: self._trace(job, path)),
                ("torch.jit.script", lambda path: self._script(job, path))]

    def _save(self, scripted, path: Path) -> Artifact:
        import torch

        torch.jit.save(scripted, str(path))
        return Artifact(format=self.format, path=path, files=[path])

    def _trace(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        traced = torch.jit.trace(job.source.native, example_args(job), strict=False, check_trace=False)
        artifact = self._save(traced, path)
        if job.source.info.kind in ("pt2", "exported-program") and job.source.signature.symbols:
            artifact.inputs = tuple(replace(spec, dims=tuple(int(n) for n in job.feed[spec.name].shape))
                                    for spec in job.source.signature.inputs)
            artifact.fixed_shape_reason = "traced from a torch.export program, whose symbolic sizes tracing turns into constants"
        return artifact

    def _script(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        return self._save(torch.jit.script(job.source.native), path)
