"""torch.export ``.pt2`` from PyTorch, with the input specs' symbols as dynamic dims (bounded where torch says a dim
cannot take every size, as recorded on the artifact)."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob, check_signature
from convert.exporters.torch_common import export_program, record_bounds


class TorchToExportedProgram(Exporter):
    def strategies(self, job: ExportJob):
        converted = "TS2EPConverter, then " if job.source.is_scripted else ""
        return [(f"{converted}torch.export.export(strict=False)", lambda path: self._export(job, path))]

    def _export(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        program, bounded = export_program(job)
        artifact = Artifact(format=self.format, path=path, files=[path])
        check_signature(artifact, job, _program_inputs(program, job))
        _number_provenance_graphs(program)
        torch.export.save(program, str(path))
        return record_bounds(artifact, program, job, bounded, guarded=True)


def _program_inputs(program, job: ExportJob) -> dict[str, tuple[str, int]] | None:
    """What the program takes, (dtype, rank) under each spec's name (its user inputs are the specs' in order); None
    where it does not pair them one for one."""
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    values = {node.name: node.meta.get("val") for node in program.graph.nodes if node.op == "placeholder"}
    specs = job.source.signature.inputs
    if len(user_inputs) != len(specs) or not all(hasattr(values.get(name), "dim") for name in user_inputs):
        return None
    return {spec.name: (str(values[name].dtype).removeprefix("torch."), values[name].dim()) for spec, name in zip(specs, user_inputs)}


def _number_provenance_graphs(program) -> None:
    """Each node's provenance (``meta["from_node"]``) names the graphs it passed through by ``id()``, a memory address
    that differs between runs; numbered in order of first appearance instead, two runs save the same bytes."""
    numbers: dict[int, int] = {}
    renumbered: set[int] = set()  # nodes share provenance objects: each is renumbered once

    def renumber(sources) -> None:
        for source in sources:
            if id(source) in renumbered:
                continue
            renumbered.add(id(source))
            if source.node_info is not None:
                source.node_info.graph_id = numbers.setdefault(source.node_info.graph_id, len(numbers))
            source._dict = None  # the cached serialisation holds the old id
            renumber(source.from_node)

    for module in program.graph_module.modules():
        graph = getattr(module, "graph", None)
        for node in graph.nodes if graph is not None else ():
            renumber(node.meta.get("from_node", ()))
