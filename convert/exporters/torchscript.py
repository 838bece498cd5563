"""TorchScript from PyTorch: tracing first, scripting as the recorded fallback.

Tracing an nn.Module records ``x.size(0)`` as a traced value, so dynamic dims stay dynamic. Tracing a
torch.export program's module does not: its ``aten.sym_size`` calls hand the tracer plain ints, which
become constants. A program is therefore scripted from its own graph first: the graph already holds every
size computation as a node, so once its calling convention is flattened (TorchScript cannot compile the
pytree code an unlifted program runs) and its ``sym_size`` reads become ``Tensor.size`` calls, the script
keeps every dim dynamic. Where that fails, tracing is the fallback; a traced program that computes with its
symbolic sizes (a node whose value is a SymInt) is recorded as fixed at the export shape, since running it at
another shape gives wrong values or even crashes the interpreter.
"""

from __future__ import annotations

import inspect
import operator
from dataclasses import replace
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.torch import flatten_outputs, flattening_hook, save_script
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import example_arguments


class TorchToTorchScript(Exporter):
    def strategies(self, job: ExportJob):
        if job.source.is_scripted:
            return [("torch.jit.save", lambda path: self._save(job.source.native, path))]
        if job.source.info.kind in ("pt2", "exported-program"):
            return [
                ("torch.jit.script (program graph)", lambda path: self._script_program(job, path)),
                ("torch.jit.trace", lambda path: self._trace(job, path)),
            ]
        return [("torch.jit.trace", lambda path: self._trace(job, path)), ("torch.jit.script", lambda path: self._script(job, path))]

    def _save(self, scripted, path: Path, output_names: list[str] | None = None) -> Artifact:
        save_script(scripted, path, output_names)
        return Artifact(format=self.format, path=path, files=[path])

    def _trace(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        module = job.source.native
        args, kwargs = example_arguments(job)
        output_names: list[str] = []
        # traced returning its outputs flat (a dict or ModelOutput return is one Triton's LibTorch backend and other
        # positional callers cannot take) through a hook, so the module, its forward and its submodule paths stay the source's
        flattening = module.register_forward_hook(flattening_hook(output_names))
        try:
            if kwargs:  # a program's keyword inputs, or a forward's parameters the inputs skip: traced by name
                named = inspect.signature(module.forward).bind(*args, **kwargs).arguments
                traced = torch.jit.trace(module, example_kwarg_inputs=dict(named), strict=False, check_trace=False)
            else:
                traced = torch.jit.trace(module, args, strict=False, check_trace=False)
        finally:
            flattening.remove()
        artifact = self._save(traced, path, output_names)
        if job.source.info.kind in ("pt2", "exported-program") and job.source.signature.symbols and _computes_with_sizes(module):
            artifact.inputs = tuple(
                replace(spec, dims=tuple(int(n) for n in job.feed[spec.name].shape)) for spec in job.source.signature.inputs
            )
            artifact.fixed_shape_reason = "traced from a torch.export program, whose symbolic sizes tracing turns into constants"
        return artifact

    def _script(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        return self._save(torch.jit.script(job.source.native), path)

    def _script_program(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        module = job.source.native
        args, kwargs = example_arguments(job)
        with torch.inference_mode():
            names = list(flatten_outputs(module(*args, **kwargs)))
        flat = _flat_program_module(module)
        (returned,) = next(node for node in flat.graph.nodes if node.op == "output").args
        count = len(returned) if isinstance(returned, tuple) else 1
        if len(names) != count:  # the archive names each returned tensor: a program whose outputs name others is traced
            raise RuntimeError(f"the program returns {count} tensors and its outputs are named {', '.join(names)}")
        return self._save(torch.jit.script(flat), path, names)


def _flat_program_module(module):
    """A GraphModule TorchScript can compile from an unlifted program's module: positional inputs named as the
    program's, its outputs flat (the one tensor alone, else a tuple, in ``flatten_outputs``'s order), its runtime
    checks dropped (TorchScript has no symbolic shapes to check them against), its ops called through their overload
    packets (TorchScript resolves those by schema)."""
    import copy

    import torch
    from torch import fx

    checks = {
        torch.ops.aten._assert_scalar.default,
        torch.ops.aten.sym_constrain_range_for_size.default,
        torch.ops.aten._assert_tensor_metadata.default,
    }
    graph = copy.deepcopy(module.graph)
    graph._codegen = fx.graph.CodeGen()
    for node in list(graph.nodes):
        if (node.op == "call_function" and node.target in checks) or (node.op == "call_module" and node.target == "_guards_fn"):
            graph.erase_node(node)
        elif node.op == "call_function" and node.target is torch.ops.aten.sym_size.int:
            node.op, node.target = "call_method", "size"
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            node.target = node.target.overloadpacket
        elif node.op == "output":
            leaves = list(node.args[0])
            node.args = (leaves[0] if len(leaves) == 1 else tuple(leaves),)
    attributes = {node.target: operator.attrgetter(node.target)(module) for node in graph.nodes if node.op == "get_attr"}
    flat = fx.GraphModule(attributes, graph)
    flat.graph.eliminate_dead_code()
    flat.recompile()
    return flat


def _computes_with_sizes(module) -> bool:
    """Whether a torch.export program's module reads a symbolic size anywhere (tracing would freeze it)."""
    import torch

    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    graphs = [m.graph for m in module.modules() if isinstance(getattr(m, "graph", None), torch.fx.Graph)]
    return any(isinstance(node.meta.get("val"), symbolic) for graph in graphs for node in graph.nodes)
