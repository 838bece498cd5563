"""What the PyTorch exporters share: example arguments and dynamic shapes from the input specs, shaped the way the
source takes its inputs (positionally, by keyword, or as a torch.export program's ``(args, kwargs)``), and the
bounds a torch.export program puts on the specs' symbols."""

from __future__ import annotations

from typing import Any

from convert.artifacts import Artifact
from convert.backends.torch import to_tensors
from convert.exporters.base import ExportJob
from convert.specs import dim_symbols, is_sum


def example_arguments(job: ExportJob) -> tuple[tuple, dict[str, Any]]:
    """Positional and keyword example arguments at the export shape."""
    return job.source.convention.arguments(to_tensors(job.source.signature.inputs, job.feed))


def dynamic_shapes(job: ExportJob, lowest: dict[str, int] | None = None, named_sums: bool = False) -> tuple | dict[str, Any] | None:
    """One torch.export Dim per symbol, shared by every input axis that names it; ``lowest`` raises a symbol's min.
    ``named_sums``: a sum of symbols is a Dim named after it (``sum_dim_name``) instead of Dim.DYNAMIC, for torch
    functions that name every dim they meet (never for an export: the sum is no symbol of its own)."""
    import torch

    specs = job.source.signature.inputs
    if not any(spec.symbols for spec in specs):
        return None
    dims: dict[str, Any] = {}
    for spec in specs:
        for symbol in spec.symbols:
            if symbol not in dims:
                low, high = job.dim_ranges.get(symbol, (1, None))
                low = max(low, (lowest or {}).get(symbol, low))
                dims[symbol] = torch.export.Dim(symbol, min=low, **({"max": high} if high else {}))
        for dim in spec.dims:
            if named_sums and is_sum(dim):
                dims.setdefault(dim, torch.export.Dim(sum_dim_name(dim)))
    # a sum of symbols (P+S) is no Dim of its own: torch.export derives it from the trace
    return job.source.convention.dynamic_shapes(
        [
            {
                axis: torch.export.Dim.DYNAMIC if is_sum(d) and not named_sums else dims[d]
                for axis, d in enumerate(spec.dims)
                if isinstance(d, str)
            }
            for spec in specs
        ]
    )


def sum_dim_name(dim: str) -> str:
    """The name a sum of symbols goes by where a Dim needs a name: ``P+S`` is ``P_plus_S``."""
    return "_plus_".join(dim_symbols(dim))


def dynamic_axes(job: ExportJob) -> dict[str, dict[int, str]]:
    return {
        spec.name: {axis: d for axis, d in enumerate(spec.dims) if isinstance(d, str)}
        for spec in job.source.signature.inputs
        if spec.symbols
    }


def export_program(job: ExportJob) -> tuple[Any, str]:
    """torch.export.export(strict=False) of the source with the specs' dynamic dims, and what bounds its sizes. Where torch finds that a dim cannot take every size (a position table bounds the
    sequence), it says so with a suggested fix; the fix is applied and the export retried once. Where its guard has no
    suggested fix (ResNet's ``1 + (H - 1) // 16 != 1``), the dims it names are bounded below by their export size,
    where the trace held, and the export retried once. ``record_bounds`` tells what the program takes."""
    import torch

    args, kwargs = example_arguments(job)
    shapes = dynamic_shapes(job)
    module = exportable_module(job)
    try:
        return torch.export.export(module, args, kwargs, dynamic_shapes=shapes, strict=False), "torch.export's bound"
    except torch._dynamo.exc.UserError as exc:
        message = getattr(exc, "msg", "") or str(exc)  # msg: without the advice torch appends after the fixes
        violated = _violated_symbols(message, job)
        if shapes is None or ("Suggested fixes:" not in message and not violated):
            raise
    if "Suggested fixes:" in message:
        refined = _refined(message, job)
        fixes = message.split("Suggested fixes:", 1)[1]
        why = "torch.export's suggested fix ({}), applied".format("; ".join(line.strip() for line in fixes.splitlines() if line.strip()))
    else:
        refined = dynamic_shapes(job, lowest=violated)
        why = "torch.export's guard on {} had no suggested fix: bounded below by the export size".format(", ".join(violated))
    return torch.export.export(module, args, kwargs, dynamic_shapes=refined, strict=False), why


def _refined(message: str, job: ExportJob) -> tuple | dict[str, Any] | None:
    """The specs' dynamic shapes with torch.export's suggested fixes applied. torch's refine_dynamic_shapes_from_
    suggested_fixes reads the ``__name__`` of every dim it meets, and a sum's Dim.DYNAMIC (a _DimHint) has none
    ("'_DimHint' object has no attribute '__name__'"): it refines shapes where each sum is a Dim named after it, and
    the sums it left alone are given back to torch.export as Dim.DYNAMIC."""
    import torch
    from torch.export.dynamic_shapes import refine_dynamic_shapes_from_suggested_fixes

    sums = {sum_dim_name(d) for spec in job.source.signature.inputs for d in spec.dims if is_sum(d)}
    refined = refine_dynamic_shapes_from_suggested_fixes(message, dynamic_shapes(job, named_sums=True))

    def unnamed(tree):
        if isinstance(tree, dict):
            return {key: unnamed(value) for key, value in tree.items()}
        if isinstance(tree, (tuple, list)):
            return type(tree)(unnamed(value) for value in tree)
        return torch.export.Dim.DYNAMIC if isinstance(tree, torch.export.Dim) and tree.__name__ in sums else tree

    return unnamed(refined)


def _violated_symbols(message: str, job: ExportJob) -> dict[str, int]:
    """The symbols of a "Constraints violated (H, W)!" message whose values do not all satisfy a guard, with their
    export sizes."""
    import re

    named = re.search(r"Constraints violated \(([^)]*)\)", message)
    if not named or "satisfy the generated guard" not in message:
        return {}
    sizes: dict[str, int] = {}
    for spec in job.source.signature.inputs:
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, str) and not is_sum(dim):
                sizes.setdefault(dim, int(job.feed[spec.name].shape[axis]))
    return {symbol: sizes[symbol] for symbol in (s.strip() for s in named.group(1).split(",")) if symbol in sizes}


def exportable_module(job: ExportJob):
    """The module torch.export traces. torch.export cannot take a ScriptModule: one is first converted into a static
    program by torch's TorchScript converter (TS2EPConverter, which torch.export's own error suggests; a private API in
    torch 2.13), and that program's module is then exported with the specs' dynamic dims like any module."""
    if not job.source.is_scripted:
        return job.source.native
    from torch._export.converter import TS2EPConverter

    args, kwargs = example_arguments(job)
    return TS2EPConverter(job.source.native, args, kwargs).convert().module()


def record_bounds(artifact: Artifact, program, job: ExportJob, why: str = "torch.export's bound", guarded: bool = False) -> Artifact:
    """Record on the artifact the sizes the program takes for each symbol the specs made dynamic, where it does not
    take every size: bounds (S <= 128) limit its checks to those sizes, and a symbol the program fixed (torch
    specialized it) makes the artifact fixed at that size. Each finding is noted for the report."""
    from dataclasses import replace

    if program is None:
        return artifact
    specs = job.source.signature.inputs
    user_inputs = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    if len(user_inputs) != len(specs):
        return artifact
    by_name = {node.name: node for node in program.graph.nodes if node.op == "placeholder"}
    ranges = {str(symbol): bounds for symbol, bounds in program.range_constraints.items()}
    fixed: dict[str, int] = {}
    for spec, name in zip(specs, user_inputs):
        value = by_name[name].meta.get("val")
        if value is None or not hasattr(value, "shape") or len(value.shape) != len(spec.dims):
            continue
        for dim, size in zip(spec.dims, value.shape):
            # a program that checks its inputs (a .pt2: ``guarded``) keeps the range tracing gave a sum of symbols (P+S >= 4,
            # traced with P and S at 2 or more); a graph made from it (ONNX) checks nothing and takes smaller sums
            if not isinstance(dim, str) or dim in artifact.dim_bounds or dim in fixed or (is_sum(dim) and not guarded):
                continue
            if str(size).isdigit():
                fixed[dim] = int(str(size))
                continue
            bounds = ranges.get(str(size))
            if bounds is None:
                continue
            upper = None if str(bounds.upper) in ("int_oo", "oo") else int(bounds.upper)
            if upper is not None or int(bounds.lower) > 1:
                artifact.dim_bounds[dim] = (max(int(bounds.lower), 1), upper)
    for dim, (low, high) in artifact.dim_bounds.items():
        artifact.notes.append(
            f"{dim} takes {low} to {'any size' if high is None else high} ({why}): the artifact is checked at those sizes only"
        )
    if fixed:
        artifact.inputs = tuple(
            replace(spec, dims=tuple(fixed.get(d, d) if isinstance(d, str) else d for d in spec.dims)) for spec in specs
        )
        artifact.fixed_shape_reason = f"torch.export fixed {', '.join(f'{d}={n}' for d, n in fixed.items())} ({why})"
        artifact.notes.append(artifact.fixed_shape_reason)
    return artifact
