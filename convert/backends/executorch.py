"""ExecuTorch as the exporter, the INT8 pass and the runner use it: a torch.export program lowered with the XNNPACK
partitioner into a ``.pte``, the operators the delegate took over, and the sizes the program's inputs can take.

ExecuTorch plans every tensor's memory at its largest size, so each dynamic dim needs an upper bound: where neither
--shape-range nor torch gives one, ``DEFAULT_MAX_SIZE`` does (raised to the largest size validation checks by
default), and the report says so. The memory plan is evaluated against the bounds the program declares: the XNNPACK
passes re-run ATen's convolution meta function, whose backend choice guards ``B < 16`` and narrows the batch in the
shared shape environment (ExecuTorch 1.5.1 with torch 2.13 then planned B at 15 for a program declaring B <= 64).
The sizes the written program takes are read back from its plan, so that what is recorded is what it takes.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from convert.artifacts import Artifact
from convert.backends import native_stderr_silenced
from convert.errors import require
from convert.specs import InputSpec, is_sum

EXTRA = "executorch"
LOWERING = "to_edge_transform_and_lower(XnnpackPartitioner), to_executorch"  # as the strategies name it
BACKEND = "XnnpackBackend"  # the backend id of the programs the XNNPACK partitioner lowers
# The largest size a dynamic dim takes where nothing else bounds it: ExecuTorch allocates every planned buffer at
# its bound when a program loads (a 2-layer BERT of width 32 plans 37 MB at B, S <= 64 and 590 MB at B <= 1024).
DEFAULT_MAX_SIZE = 64


def require_executorch(purpose: str):
    return require("executorch", EXTRA, purpose)


def default_bounds(
    specs: tuple[InputSpec, ...], feed: dict[str, Any], dim_ranges: dict[str, tuple[int, int | None]]
) -> dict[str, tuple[int, int]]:
    """(min, max) for each symbol of the specs that has no upper bound: ``DEFAULT_MAX_SIZE``, or the largest size
    validation checks by default (twice the export size plus one, see validators' plan_shape_cases) where larger."""
    bounds: dict[str, tuple[int, int]] = {}
    for spec in specs:
        for axis, dim in enumerate(spec.dims):
            if not isinstance(dim, str) or is_sum(dim) or dim in bounds:
                continue
            low, high = dim_ranges.get(dim, (1, None))
            if high is None:
                bounds[dim] = (low, max(DEFAULT_MAX_SIZE, 2 * int(feed[spec.name].shape[axis]) + 1))
    return bounds


def call_order(convention, specs: tuple[InputSpec, ...]) -> tuple[InputSpec, ...]:
    """The specs in the order the lowered program takes its flat inputs: the pytree leaves of (args, kwargs)."""
    from torch.utils._pytree import tree_leaves

    by_name = {spec.name: spec for spec in specs}
    return tuple(by_name[name] for name in tree_leaves(convention.arguments([spec.name for spec in specs])))


def output_order(program) -> tuple[str, ...]:
    """The source's output names in the order the lowered program returns its flat outputs: its output tree rebuilt
    from stand-in tensors, named as the source's outputs are (convert/backends/torch.py flatten_outputs)."""
    import torch
    from torch.utils._pytree import tree_unflatten

    from convert.backends.torch import flatten_outputs

    spec = program.call_spec.out_spec
    leaves = [torch.empty(0) for _ in range(spec.num_leaves)]
    named = {id(tensor): name for name, tensor in flatten_outputs(tree_unflatten(leaves, spec)).items()}
    return tuple(named[id(leaf)] for leaf in leaves)


def bounded_dynamic_shapes(convention, inputs: tuple[InputSpec, ...], bounds: dict[str, tuple[int, int | None]]):
    """torch.export's dynamic_shapes for the artifact's inputs (in the convention's shape), one Dim per symbol within
    its recorded bounds; a sum of symbols is derived by torch."""
    import torch

    if not any(spec.symbols for spec in inputs):
        return None
    dims: dict[str, Any] = {}
    per_input = []
    for spec in inputs:
        axes = {}
        for axis, dim in enumerate(spec.dims):
            if not isinstance(dim, str):
                continue
            if is_sum(dim):
                axes[axis] = torch.export.Dim.DYNAMIC
                continue
            if dim not in dims:
                low, high = bounds.get(dim, (1, None))
                dims[dim] = torch.export.Dim(dim, min=low, **({"max": high} if high else {}))
            axes[axis] = dims[dim]
        per_input.append(axes)
    return convention.dynamic_shapes(per_input)


def lower(program, path: Path) -> tuple[dict, list[list[int]]]:
    """Lower a torch.export program with the XNNPACK partitioner and write its ``.pte`` at ``path``; what the
    delegate took over (a report.Delegation), and the planned sizes of each flat input (its largest)."""
    with native_stderr_silenced():  # torchao, which executorch imports, reports on fd 2 the CUDA kernels it cannot load
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
        from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower

    edge = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    edge_program = edge.exported_program()
    taken = delegation(edge_program.graph_module)
    config = ExecutorchBackendConfig(sym_shape_eval_pass=_declared_bounds_pass(edge_program.range_constraints))
    lowered = edge.to_executorch(config)
    path.write_bytes(lowered.buffer)
    plan = lowered.executorch_program.execution_plan[0]
    return taken, [list(getattr(plan.values[index].val, "sizes", ())) for index in plan.inputs]


def delegation(graph_module) -> dict:
    """The operator calls the XNNPACK delegate runs and those left on the portable kernels (a report.Delegation)."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    delegated: Counter[str] = Counter()
    backends: list[str] = []
    for node in graph_module.graph.nodes:
        lowered = getattr(graph_module, node.target) if node.op == "get_attr" else None
        if isinstance(lowered, LoweredBackendModule):
            backends.append(lowered.backend_id)
            delegated.update(_operator_calls(lowered.original_module.graph))
    portable = Counter(_operator_calls(graph_module.graph))
    total = sum(delegated.values()) + sum(portable.values())
    return {
        "kind": "delegation",
        "backend": ", ".join(dict.fromkeys(backends)) or BACKEND,
        "delegated": dict(sorted(delegated.items())),
        "portable": dict(sorted(portable.items())),
        "share": round(sum(delegated.values()) / total, 4) if total else 0.0,
    }


def _operator_calls(graph) -> list[str]:
    """The graph's operator calls that compute tensors, by operator name: not the delegate calls, the getitems that
    unpack their results, or arithmetic on sizes."""
    import operator

    import torch
    from torch._higher_order_ops.executorch_call_delegate import executorch_call_delegate

    names = []
    for node in graph.nodes:
        if node.op != "call_function" or node.target in (operator.getitem, executorch_call_delegate):
            continue
        value = node.meta.get("val")
        values = [v for v in (value if isinstance(value, (tuple, list)) else (value,)) if v is not None]
        if values and all(isinstance(v, torch.Tensor) for v in values):
            # an edge dialect operator is named "aten.mul.Tensor" by its __name__, an ATen one left in the graph by str()
            target = node.target
            names.append(str(target) if isinstance(target, torch._ops.OpOverload) else getattr(target, "__name__", str(target)))
    return names


def planned_bounds(
    inputs: tuple[InputSpec, ...], planned: list[list[int]], bounds: dict[str, tuple[int, int | None]]
) -> dict[str, tuple[int, int]]:
    """The symbols whose planned size (the largest the program takes) is below their recorded bound, with the
    bounds the plan gives them."""
    narrowed: dict[str, tuple[int, int]] = {}
    for spec, sizes in zip(inputs, planned):
        for dim, size in zip(spec.dims, sizes):
            if not isinstance(dim, str) or is_sum(dim):
                continue
            low, high = narrowed.get(dim) or bounds.get(dim, (1, None))
            if high is None or size < high:
                narrowed[dim] = (low, size)
    return narrowed


def _declared_bounds_pass(ranges: dict):
    """ExecuTorch's sym-shape evaluation (ConstraintBasedSymShapeEvalPass) with the program's declared ranges
    (``range_constraints``) in place of the shape environment's, which the lowering's guards may have narrowed."""
    import torch
    from executorch.exir.pass_base import PassBase, PassResult
    from executorch.exir.tensor import TensorSpec
    from torch.utils._pytree import tree_leaves
    from torch.utils._sympy.value_ranges import bound_sympy

    def upper(size) -> int:
        if isinstance(size, int):
            return size
        node = size.node
        bound = bound_sympy(node.expr, {**node.shape_env.var_to_range, **ranges}).upper
        if not bound.is_Integer:
            raise RuntimeError(f"ExecuTorch plans memory at a size's upper bound, and {node.expr} has none ({bound})")
        return int(bound)

    class DeclaredBoundsShapeEval(PassBase):
        def call(self, graph_module):
            for module in graph_module.modules():
                if not isinstance(module, torch.fx.GraphModule):
                    continue
                for node in module.graph.nodes:
                    for spec in tree_leaves(node.meta.get("spec", [])):
                        if isinstance(spec, TensorSpec):
                            spec.shape = [upper(s) for s in spec.shape]
                            spec.stride = [upper(s) for s in spec.stride]
            return PassResult(graph_module, True)

    return DeclaredBoundsShapeEval()


def in_call_order(artifact: Artifact, program, convention, planned: list[list[int]]) -> Artifact:
    """The artifact's inputs and outputs in the order the .pte takes and returns them, and any bound its memory plan
    narrowed (noted: the artifact is checked within it)."""
    artifact.inputs = call_order(convention, artifact.inputs)
    artifact.output_names = output_order(program)
    for symbol, (low, high) in planned_bounds(artifact.inputs, planned, artifact.dim_bounds).items():
        artifact.dim_bounds[symbol] = (low, high)
        artifact.notes.append(f"{symbol} takes {low} to {high} in the .pte's memory plan: the artifact is checked at those sizes only")
    return artifact
