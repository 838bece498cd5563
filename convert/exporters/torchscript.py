"""TorchScript from PyTorch: tracing first, scripting as the recorded fallback.

Tracing an nn.Module records ``x.size(0)`` as a traced value, so dynamic dims stay dynamic. Tracing a
torch.export program's module does not: its ``aten.sym_size`` calls hand the tracer plain ints, which
become constants. A program that computes with its symbolic sizes (a node whose value is a SymInt) is
therefore recorded as fixed at the export shape: running it at another shape gives wrong values or even
crashes the interpreter. A program that never reads a size (a CNN that flattens with ``flatten(1)``) traces
to a graph that takes any size, and is validated at every size like any artifact.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import example_arguments


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

        module = job.source.native
        args, kwargs = example_arguments(job)
        if kwargs:  # a program's keyword inputs, or a forward's parameters the inputs skip: traced by name
            named = inspect.signature(module.forward).bind(*args, **kwargs).arguments
            traced = torch.jit.trace(module, example_kwarg_inputs=dict(named), strict=False, check_trace=False)
        else:
            traced = torch.jit.trace(module, args, strict=False, check_trace=False)
        artifact = self._save(traced, path)
        if job.source.info.kind in ("pt2", "exported-program") and job.source.signature.symbols and _computes_with_sizes(module):
            artifact.inputs = tuple(replace(spec, dims=tuple(int(n) for n in job.feed[spec.name].shape))
                                    for spec in job.source.signature.inputs)
            artifact.fixed_shape_reason = "traced from a torch.export program, whose symbolic sizes tracing turns into constants"
        return artifact

    def _script(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        return self._save(torch.jit.script(job.source.native), path)


def _computes_with_sizes(module) -> bool:
    """Whether a torch.export program's module reads a symbolic size anywhere (tracing would freeze it)."""
    import torch

    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    graphs = [m.graph for m in module.modules() if isinstance(getattr(m, "graph", None), torch.fx.Graph)]
    return any(isinstance(node.meta.get("val"), symbolic) for graph in graphs for node in graph.nodes)
