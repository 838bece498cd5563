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
    return require("executorch", purpose)


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


# XNNPACK's value types (runtime_schema.fbs XNNDatatype), in the report's spelling: a quantized type by its width
_XNN_TYPES = {
    "xnn_datatype_fp32": "fp32",
    "xnn_datatype_pfp32": "fp32",
    "xnn_datatype_fp16": "fp16",
    "xnn_datatype_bf16": "bf16",
    "xnn_datatype_qint8": "int8",
    "xnn_datatype_quint8": "int8",
    "xnn_datatype_qcint8": "int8",
    "xnn_datatype_qdint8": "int8",
    "xnn_datatype_qpint8": "int8",
    "xnn_datatype_qcint4": "int4",
    "xnn_datatype_qbint4": "int4",
}
# ExecuTorch's ScalarType codes (scalar_type.fbs) of the float and 8-bit types an undelegated product can take
_SCALAR_TYPES = {0: "int8", 1: "int8", 5: "fp16", 6: "fp32", 7: "fp64", 15: "bf16"}
_XNN_PRODUCTS = ("XNNFullyConnected", "XNNConv2d", "XNNDepthwiseConv2d", "XNNConvTranspose2d", "XNNBatchMatrixMultiply")
_ATEN_PRODUCTS = ("aten::convolution", "aten::mm", "aten::addmm", "aten::bmm", "aten::linear", "aten::matmul")


def pte_precision(path: Path, input_shapes: dict[str, list[int]]):
    """What an ExecuTorch program's matrix products compute in: each XNNPACK delegate's graph (its flatbuffer, read with
    the schema and flatc ExecuTorch ships), where a product's input type is its arithmetic's and its filter's type its
    weight's (an FP32 input with an INT8 filter is XNNPACK's weight-only kernel: FP32 arithmetic); and the products left
    on the portable kernels, from the program's own tensors. Both are sized at the dims the program stores, a dynamic
    dim at the upper bound ExecuTorch plans its memory for, not at ``input_shapes``: the program holds no shape
    function to size them at another."""
    import math

    from convert.precision import MatrixProduct, Measured

    with native_stderr_silenced():
        from executorch.exir._serialize._program import deserialize_pte_binary

    data = path.read_bytes()
    program = deserialize_pte_binary(data).program
    plan = program.execution_plan[0]
    products = []
    for index, delegate in enumerate(plan.delegates):
        if delegate.id != BACKEND:
            continue
        graph = _xnnpack_graph(_delegate_bytes(program, data, delegate.processed))
        values = {}
        for value in graph["xvalues"]:
            found = value["xvalue_union"]
            tensor = found.get("tensor_value", found)
            values[tensor["id_out"]] = tensor
        for number, node in enumerate(graph["xnodes"]):
            kind, fields = node["xnode_union_type"], node["xnode_union"]
            if kind not in _XNN_PRODUCTS:
                continue
            first, output = values[fields["input1_id"]], values[fields["output_id"]]
            weight = values[fields["filter_id"] if "filter_id" in fields else fields["input2_id"]]
            stored = _XNN_TYPES.get(weight["datatype"], "other") if _is_constant(weight) else None
            compute = _XNN_TYPES.get(first["datatype"], "other")
            dims, filter_dims = output["dims"], weight["dims"]
            if kind == "XNNConvTranspose2d":  # every input element meets kh × kw × Cout weights
                macs = math.prod(first["dims"]) * math.prod(filter_dims[:-1])
            elif kind in ("XNNConv2d", "XNNDepthwiseConv2d"):  # [Cout, kh, kw, Cin] / [1, kh, kw, C]
                macs = math.prod(dims) * math.prod(filter_dims[1:] if kind == "XNNConv2d" else filter_dims[1:-1])
            else:  # [.., M, K] times a [N, K] filter or a [.., K, N] operand
                macs = math.prod(dims) * first["dims"][-1]
            products.append(MatrixProduct(kind.removeprefix("XNN"), f"delegate {index} node {number}", macs or None, compute, stored))
    operators = [f"{op.name}" for op in plan.operators]
    for chain in plan.chains:
        for number, instruction in enumerate(chain.instructions):
            call = instruction.instr_args
            if type(call).__name__ != "KernelCall" or operators[call.op_index] not in _ATEN_PRODUCTS:
                continue
            tensors = [plan.values[i].val for i in call.args]
            tensors = [t for t in tensors if type(t).__name__ == "Tensor"]
            first, weight, output = tensors[0], tensors[1], tensors[-1]
            out_elements = math.prod(output.sizes)
            if operators[call.op_index] == "aten::convolution":
                macs = out_elements * math.prod(weight.sizes[1:])
            else:
                macs = out_elements * first.sizes[-1]
            stored = _SCALAR_TYPES.get(weight.scalar_type, "other") if weight.constant_buffer_idx else None
            compute = _SCALAR_TYPES.get(first.scalar_type, "other")
            products.append(MatrixProduct(operators[call.op_index], f"instruction {number}", macs or None, compute, stored))
    return Measured(
        products,
        how="the .pte's XNNPACK graphs and portable kernels",
        sized_at="the dims the program's graphs store (each dynamic one at a bound the program planned)",
    )


def _is_constant(tensor: dict) -> bool:
    """A value the graph stores (a weight): it has constant data, in the delegate's buffer or named in the program's."""
    return bool(tensor.get("constant_buffer_idx") or tensor.get("named_key"))


def _delegate_bytes(program, data: bytes, processed) -> bytes:
    """A delegate's payload: inline in the program, or in a segment after it (offsets from the extended header)."""
    from executorch.exir._serialize._program import _get_extended_header

    if processed.location.name == "INLINE":
        return program.backend_delegate_data[processed.index].data
    segment = program.segments[processed.index]
    base = _get_extended_header(data).segment_base_offset
    return data[base + segment.offset : base + segment.offset + segment.size]


def _xnnpack_graph(payload: bytes) -> dict:
    """An XNNPACK payload's graph as JSON, decoded by flatc (ExecuTorch's own) with XNNPACK's schema."""
    import json
    import re
    import tempfile

    with native_stderr_silenced():  # torchao, which the XNNPACK backend imports, reports on fd 2 what it cannot load
        import executorch.backends.xnnpack as xnnpack
        from executorch.backends.xnnpack.serialization.xnnpack_graph_serialize import XNNHeader
        from executorch.exir._serialize._flatbuffer import _flatc_decompile

    header = XNNHeader.from_bytes(payload[: XNNHeader.EXPECTED_LENGTH])
    graph = payload[header.flatbuffer_offset : header.flatbuffer_offset + header.flatbuffer_size]
    with tempfile.TemporaryDirectory() as folder:
        binary = Path(folder) / "graph.bin"
        binary.write_bytes(graph)
        schema = Path(xnnpack.__file__).parent / "serialization" / "schema.fbs"
        _flatc_decompile(folder, str(schema), str(binary), ["--raw-binary"])
        text = (Path(folder) / "graph.json").read_text()
    return json.loads(re.sub(r"(:\s*)(-?)inf\b", r"\1\2Infinity", text))  # flatc writes infinite bounds bare
