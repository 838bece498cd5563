"""Framework-free helpers that settle a source's input specs from what the user gave."""

from __future__ import annotations

from dataclasses import replace

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


def fixed_shape_note(inputs: tuple[InputSpec, ...], specs_given: bool, examples_given: bool, kind: str) -> str:
    """What to tell a user whose specs, not given, fix every dim: each artifact is checked at one shape only, though a
    user who gave example inputs may well think the other sizes work too. Empty when a dim is dynamic."""
    if specs_given or any(spec.symbols for spec in inputs) or not any(spec.dims for spec in inputs):
        return ""
    fixed = (
        f"every input shape is fixed ({', '.join(map(str, inputs))}: "
        f"{'the example inputs set' if examples_given else 'the model declares'} each dim), so each artifact was "
        "exported and validated at this one shape only"
    )
    if kind in ("pt2", "exported-program"):
        return fixed + "; to make a dim dynamic, export the program with dynamic_shapes (torch.export.Dim)"
    spec = next(spec for spec in inputs if spec.dims)
    dynamic = InputSpec(spec.name, spec.dtype, ("B", *spec.dims[1:]), spec.low, spec.high)
    return (
        fixed + f'; to make a dim dynamic, name it with a symbol in an input spec: inputs=["{dynamic}"] in Python, '
        f'--input "{dynamic}" on the command line'
    )


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
            raise ConvertError(
                f"the example input '{spec.name}' has {array.ndim} dims but its spec {spec} has {len(spec.dims)}", "Make the two agree."
            )
        for axis, (dim, size) in enumerate(zip(spec.dims, array.shape)):
            if isinstance(dim, int) and dim != size:
                raise ConvertError(
                    f"the example input '{spec.name}' has size {size} on axis {axis} where its spec {spec} says {dim}",
                    "Make the two agree.",
                )
            if isinstance(dim, str):
                if sizes.setdefault(dim, int(size)) != size:
                    raise ConvertError(
                        f"the symbol {dim} takes two sizes ({sizes[dim]} and {size}) in the example inputs",
                        "Inputs that share a symbol must share its size.",
                    )
    return sizes


def order_by_parameters(
    specs: tuple[InputSpec, ...], parameters: list[str], accepts_any: bool, what: str, keyword: bool = False
) -> tuple[InputSpec, ...]:
    """Put specs in the model's call order; refuse names the model does not take. A model called by ``keyword``
    may be given inputs that skip some of its parameters; one called positionally may not."""
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
    if skipped and not keyword:
        raise ConvertError(
            f"no spec is given for the input '{skipped[0]}' of {what}, which comes before inputs that have one",
            "Give an --input spec for every input, in any order.",
        )
    return ordered


def with_declared_domains(specs: tuple[InputSpec, ...], domains: dict[str, tuple[float, float, str]]) -> tuple[InputSpec, ...]:
    """The specs with the value domain the model itself declares for an input (name -> (low, high, where it comes from)),
    where the spec has none: a domain given with --input wins. Only float inputs take one (they are drawn uniformly in
    it instead of from a standard normal)."""
    return tuple(
        replace(spec, low=domains[spec.name][0], high=domains[spec.name][1], domain_source=domains[spec.name][2])
        if spec.name in domains and spec.low is None and not spec.is_integer and spec.dtype != "bool"
        else spec
        for spec in specs
    )
