"""Framework-free helpers that settle a source's input specs from what the user gave."""

from __future__ import annotations

import numpy as np

from convert.errors import ConvertError
from convert.specs import DTYPES, InputSpec

SPEC_HINT = 'Describe each input with --input, e.g. --input "x:float32[B,3,224,224]", or give --example-inputs inputs.npz.'


def dtype_name(array: np.ndarray) -> str:
    name = str(array.dtype)
    if name not in DTYPES:
        raise ConvertError(f"an example input has dtype {name}, which is not supported", f"Use one of {', '.join(DTYPES)}.")
    return name


def specs_from_arrays(arrays: dict[str, np.ndarray]) -> tuple[InputSpec, ...]:
    """Static specs (every dim fixed) from example arrays."""
    return tuple(InputSpec(name, dtype_name(a), tuple(int(d) for d in a.shape)) for name, a in arrays.items())


def export_sizes_from_arrays(specs: tuple[InputSpec, ...], arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """Check example arrays against specs and return the size each symbol takes in them."""
    missing = [s.name for s in specs if s.name not in arrays]
    extra = [n for n in arrays if n not in {s.name for s in specs}]
    if missing or extra:
        raise ConvertError(
            f"the example inputs do not match the input specs (missing: {missing or 'none'}, not in the specs: {extra or 'none'})",
            "Name each example array exactly as its input.",
        )
    sizes: dict[str, int] = {}
    for spec in specs:
        array = arrays[spec.name]
        if dtype_name(array) != spec.dtype:
            raise ConvertError(f"the example input '{spec.name}' is {array.dtype} but its spec says {spec.dtype}", "Make the two agree.")
        if array.ndim != len(spec.dims):
            raise ConvertError(f"the example input '{spec.name}' has {array.ndim} dims but its spec {spec} has {len(spec.dims)}", "Make the two agree.")
        for axis, (dim, size) in enumerate(zip(spec.dims, array.shape)):
            if isinstance(dim, int) and dim != size:
                raise ConvertError(f"the example input '{spec.name}' has size {size} on axis {axis} where its spec {spec} says {dim}", "Make the two agree.")
            if isinstance(dim, str):
                if sizes.setdefault(dim, int(size)) != size:
                    raise ConvertError(f"the symbol {dim} takes two sizes ({sizes[dim]} and {size}) in the example inputs", "Inputs that share a symbol must share its size.")
    return sizes


def order_by_parameters(specs: tuple[InputSpec, ...], parameters: list[str], accepts_any: bool, what: str) -> tuple[InputSpec, ...]:
    """Put specs in the model's call order; refuse names the model does not take."""
    if accepts_any:
        return specs
    unknown = [s.name for s in specs if s.name not in parameters]
    if unknown:
        raise ConvertError(
            f"the input '{unknown[0]}' is not an input of {what}, which takes ({', '.join(parameters)})",
            "Name each --input after the model's own input.",
        )
    by_name = {s.name: s for s in specs}
    ordered = tuple(by_name[p] for p in parameters if p in by_name)
    skipped = [p for p in parameters[: len(ordered)] if p not in by_name]
    if skipped:
        raise ConvertError(
            f"no spec is given for the input '{skipped[0]}' of {what}, which comes before inputs that have one",
            "Give an --input spec for every input, in any order.",
        )
    return ordered
