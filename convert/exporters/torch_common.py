"""What the PyTorch exporters share: example tensors and dynamic shapes from the input specs."""

from __future__ import annotations

from typing import Any

from convert.exporters.base import ExportJob
from convert.sources.torch import to_tensors


def example_args(job: ExportJob) -> tuple:
    return to_tensors(job.source.signature.inputs, job.feed)


def dynamic_shapes(job: ExportJob) -> tuple[dict[int, Any], ...] | None:
    """One torch.export Dim per symbol, shared by every input axis that names it."""
    import torch

    specs = job.source.signature.inputs
    if not any(spec.symbols for spec in specs):
        return None
    dims: dict[str, Any] = {}
    for spec in specs:
        for symbol in spec.symbols:
            if symbol not in dims:
                low, high = job.dim_ranges.get(symbol, (1, None))
                dims[symbol] = torch.export.Dim(symbol, min=max(low, 1), **({"max": high} if high else {}))
    return tuple({axis: dims[d] for axis, d in enumerate(spec.dims) if isinstance(d, str)} for spec in specs)


def dynamic_axes(job: ExportJob) -> dict[str, dict[int, str]]:
    return {spec.name: {axis: d for axis, d in enumerate(spec.dims) if isinstance(d, str)}
            for spec in job.source.signature.inputs if spec.symbols}
