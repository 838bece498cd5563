"""TFLite (LiteRT) from PyTorch through litert-torch, with the specs' symbols dynamic; where litert-torch cannot convert
the model with them dynamic, a second, recorded strategy converts it at the export shape, and the artifact records that
it is fixed there.

litert-torch names a signature's inputs after the keyword arguments it traces the module with (positional ones become
``args_0``...), and its outputs after the keys of a returned dict (``output_0``... otherwise): the source is converted
through a module that takes the specs' names as keywords and returns its outputs under the source's output names.

It declares an output's dynamic axes at their export size (``[2, 4]`` where the interpreter gives ``(5, 4)``): the axes
torch.export leaves symbolic are declared dynamic in the file, and a note names them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.jax import x64_mode_within
from convert.backends.tf import (
    declare_dynamic_outputs,
    invoke_tflite,
    native_stderr_silenced,
    record_fixed_axes,
    signature_details,
    tflite_interpreter,
)
from convert.backends.torch import flatten_outputs, to_tensors
from convert.errors import require
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import dynamic_shapes, export_program, exportable_module, record_bounds
from convert.specs import InputSpec, is_sum
from convert.text import first_line


class TorchToLiteRt(Exporter):
    def strategies(self, job: ExportJob):
        converted = "TS2EPConverter, then " if job.source.is_scripted else ""  # see torch_common.exportable_module
        strategies = [(f"{converted}litert_torch.convert", lambda path: self._convert(job, path))]
        if any(spec.symbols for spec in job.source.signature.inputs):
            strategies.append((f"{converted}litert_torch.convert at the export shape", lambda path: self._convert_fixed(job, path)))
        return strategies

    def _convert(self, job: ExportJob, path: Path) -> Artifact:
        program, why = export_program(job)  # what bounds or fixes each symbol, and which output axes follow them
        artifact = record_bounds(Artifact(format=self.format, path=path, files=[path]), program, job, why)
        specs = artifact.inputs or job.source.signature.inputs
        shapes = _dynamic_shapes_by_name(job, specs, artifact.dim_bounds)
        try:
            _write(job, path, shapes)
        except Exception as exc:
            if not shapes:
                raise
            symbols = sorted({d for spec in specs for d in spec.dims if isinstance(d, str)})
            raise RuntimeError(f"litert-torch could not convert the model with {', '.join(symbols)} dynamic: {_summary(exc)}") from exc
        record_fixed_axes(artifact, specs, "litert-torch")
        _run_at_other_sizes(artifact, job)
        declared = declare_dynamic_outputs(path, _symbolic_output_axes(program))
        if declared:
            artifact.notes.append(
                f"litert-torch declared {', '.join(declared)} at the export size, where torch.export leaves them dynamic: "
                "declared dynamic (-1) in the file"
            )
        return artifact

    def _convert_fixed(self, job: ExportJob, path: Path) -> Artifact:
        _write(job, path, None)
        sizes = _export_sizes(job)
        artifact = Artifact(format=self.format, path=path, files=[path])
        artifact.inputs = tuple(
            replace(spec, dims=tuple(int(n) for n in job.feed[spec.name].shape)) for spec in job.source.signature.inputs
        )
        artifact.fixed_shape_reason = (
            "converted at the export shape ({}): the conversion with {} dynamic failed (the first attempt says why)".format(
                ", ".join(f"{d}={n}" for d, n in sizes.items()), "them" if len(sizes) > 1 else "it"
            )
        )
        artifact.notes.append(artifact.fixed_shape_reason)
        return artifact


def _write(job: ExportJob, path: Path, shapes: dict[str, dict] | None) -> None:
    """Convert the source, called with the specs' names as keywords, to a .tflite file at ``path``. 64-bit inputs and
    outputs stay 64-bit (litert-torch narrows them by default): the artifact takes what the source takes."""
    with x64_mode_within():
        with native_stderr_silenced():  # litert-torch imports TensorFlow and JAX, whose C++ side writes to descriptor 2
            litert_torch = require("litert_torch", "Converting a PyTorch model to TFLite (LiteRT)")
        specs = job.source.signature.inputs
        module = _named_module(exportable_module(job), job.source.convention, specs)
        sample = {spec.name: value for spec, value in zip(specs, to_tensors(specs, job.feed))}
        with native_stderr_silenced():  # the converter writes its progress and errors there too; the exception keeps them
            litert_torch.convert(module, (), sample, dynamic_shapes=shapes, enable_x64=True).export(str(path))


def _named_module(module, convention, specs: tuple[InputSpec, ...]):
    """``module``, called as the source is, taking the specs' names as keywords and returning its outputs as a dict
    under the source's output names. torch.export binds keywords to the forward's signature: it declares the names."""
    import inspect

    import torch

    names = [spec.name for spec in specs]
    unnamable = [name for name in names if not name.isidentifier()]
    if unnamable:
        raise ValueError(
            f"litert-torch names a .tflite's inputs after keyword arguments, and {unnamable[0]!r} is not a Python identifier: "
            "name the inputs with identifiers (--input NAME:...)"
        )

    class NamedInputsAndOutputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.source = module

        def forward(self, **inputs):
            return flatten_outputs(convention(self.source, [inputs[name] for name in names]))

    parameter = inspect.Parameter
    NamedInputsAndOutputs.forward.__signature__ = inspect.Signature(
        [parameter("self", parameter.POSITIONAL_OR_KEYWORD), *(parameter(name, parameter.KEYWORD_ONLY) for name in names)]
    )
    named = NamedInputsAndOutputs()
    named.training = False  # not .eval(): a program's module refuses train(), and the source is already in eval mode
    return named


def _dynamic_shapes_by_name(job: ExportJob, specs: tuple[InputSpec, ...], bounds: dict) -> dict[str, dict] | None:
    """torch.export's dynamic shapes keyed by input name, for the symbols ``specs`` keep (an axis torch.export fixed is
    an int there), each bounded as the program bounds it."""
    from torch.utils._pytree import tree_leaves

    shapes = dynamic_shapes(replace(job, dim_ranges={**job.dim_ranges, **bounds}))
    if shapes is None:
        return None
    # one {axis: Dim} per input, in the specs' order, however the source's call convention nests them
    per_input = tree_leaves(shapes, is_leaf=lambda node: isinstance(node, dict) and all(isinstance(k, int) for k in node))
    named = {
        spec.name: {axis: dim for axis, dim in axes.items() if isinstance(spec.dims[axis], str)} for spec, axes in zip(specs, per_input)
    }
    return named if any(named.values()) else None


def _symbolic_output_axes(program) -> dict[str, list[int]]:
    """The axes of each output, named as the source's, whose size the program leaves symbolic."""
    from torch.export.graph_signature import OutputKind
    from torch.utils._pytree import tree_unflatten

    values = [
        node.meta.get("val")
        for node, spec in zip(program.graph.output_node().args[0], program.graph_signature.output_specs)
        if spec.kind == OutputKind.USER_OUTPUT
    ]
    outputs = flatten_outputs(tree_unflatten(values, program.call_spec.out_spec))
    return {name: [axis for axis, size in enumerate(value.shape) if not isinstance(size, int)] for name, value in outputs.items()}


def _run_at_other_sizes(artifact: Artifact, job: ExportJob) -> None:
    """Run the file once with every symbol it keeps dynamic at another size than the export size, within its bounds:
    litert-torch can write kernels that keep the export size (XNNPack then fails to reshape them at any other)."""
    from convert.validators.inputs import generate_feed

    exported = _export_sizes(job)
    specs = artifact.inputs or job.source.signature.inputs
    kept = {dim for spec in specs for dim in spec.dims if isinstance(dim, str)}
    sizes = dict(exported)
    for symbol in kept & set(exported):
        low, high = artifact.dim_bounds.get(symbol, (1, None))
        size = exported[symbol]
        sizes[symbol] = size + 1 if high is None or size < high else max(low, size - 1)
    if sizes == exported:
        return
    interpreter = tflite_interpreter(artifact.path, allocate=False)
    inputs, outputs = signature_details(interpreter)
    try:
        with native_stderr_silenced():  # the first allocation prints an INFO line about the XNNPACK delegate
            invoke_tflite(interpreter, inputs, outputs, generate_feed(specs, sizes, sample=0))
    except RuntimeError as exc:
        at = ", ".join(f"{symbol}={size}" for symbol, size in sizes.items() if size != exported[symbol])
        raise RuntimeError(f"the .tflite litert-torch wrote with dynamic dims does not run at {at}: {_summary(exc)}") from exc


def _export_sizes(job: ExportJob) -> dict[str, int]:
    """Each symbol's size in the example inputs (a sum of symbols, P+S, follows from its parts)."""
    sizes: dict[str, int] = {}
    for spec in job.source.signature.inputs:
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, str) and not is_sum(dim):
                sizes.setdefault(dim, int(job.feed[spec.name].shape[axis]))
    return sizes


def _summary(exc: BaseException) -> str:
    """The error's first line, and the graph node it was raised at where the message names one."""
    text = str(exc)
    node = next((line.strip() for line in text.splitlines() if line.strip().startswith("While executing")), "")
    return f"{type(exc).__name__}: {first_line(text, 300)}" + (f" ({first_line(node, 300)})" if node else "")
