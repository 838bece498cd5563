"""ONNX files as every layer writes and reads them: the artifact record of a written model, its tensors and external
data, saving a model built in memory, renaming graph values.

Weights go to external data (``model.onnx.data``) only when the model is too large for one protobuf message.
Every ONNX file the tool writes goes through ``save_onnx`` (or a library's own external data option), and is read
back by path, never as one serialized message: protobuf refuses to serialize past 2 GB, and a large model's
``ByteSize()`` raises instead of answering.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from convert.artifacts import Artifact

# Weights past this go to external data: torch.onnx's own threshold, which leaves the graph room under the limit.
EXTERNAL_DATA_THRESHOLD = 1536 * 2**20
# What an output named like an input is renamed with (Optimum's convention: a UNet's ``sample`` out is ``out_sample``).
OUTPUT_PREFIX = "out_"
# where a large tensor of streamed external data starts (ONNX Runtime's writer's rule): a mappable boundary on every OS
MAPPED_TENSOR_BYTES, MAPPED_ALIGNMENT = 2**20, 2**16
_COPY_CHUNK = 64 * 2**20


def onnx_artifact(path: Path, opset: int | None = None) -> Artifact:
    """Check the written model (and that it has the opset asked for) and list its files (the .onnx and any
    external data beside it)."""
    import onnx

    onnx.checker.check_model(str(path))  # by path: it checks the external data without loading it
    model = onnx.load(str(path), load_external_data=False)
    written = next((entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), None)
    if opset is not None and written != opset:
        # torch.onnx.export(dynamo=True) quietly writes its own minimum opset when asked for a lower one
        raise ValueError(f"the exporter wrote opset {written} where --opset {opset} was asked for: it cannot export at that opset")
    files = [path] + [path.parent / location for location in external_data_locations(model)]
    mode = stat.S_IMODE(path.stat().st_mode)
    for data in files[1:]:
        os.chmod(data, mode)  # onnx writes external data files 0600 whatever the umask: readable like the model
    return Artifact(
        format="onnx",
        path=path,
        files=files,
        output_names=tuple(o.name for o in model.graph.output),
    )


def output_names(path: Path) -> list[str]:
    """The names an ONNX file gives its outputs (its weights not read)."""
    import onnx

    return [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]


def graph_inputs(path: Path) -> dict[str, tuple[str, int]]:
    """What an ONNX file takes, by input name: (NumPy dtype name, rank); initializers a graph also lists as inputs
    (an older exporter's habit) are weights, not inputs."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {tensor.name for tensor in graph.initializer}
    named = {"float": "float32", "double": "float64"}  # ONNX's names for NumPy's
    inputs = {}
    for value in graph.input:
        if value.name not in weights:
            kind = onnx.helper.tensor_dtype_to_string(value.type.tensor_type.elem_type).removeprefix("TensorProto.").lower()
            inputs[value.name] = (named.get(kind, kind), len(value.type.tensor_type.shape.dim))
    return inputs


def outputs_apart(outputs, inputs) -> dict[str, str]:
    """The name an ONNX graph gives each output named like an input (a graph names its inputs and outputs alike: an
    output ``sample`` beside an input ``sample`` breaks every export), prefixed until it is no other input's or output's.
    The source's outputs keep their names; validation matches the two by this rule (convert/validation.py)."""
    taken = {*outputs, *inputs}
    renamed = {}
    for name in outputs:
        if name in inputs:
            new = OUTPUT_PREFIX + name
            while new in taken:
                new = OUTPUT_PREFIX + new
            taken.add(new)
            renamed[name] = new
    return renamed


def name_dims_after_specs(model, specs) -> dict[str, str]:
    """Give the dims an exporter named after itself (``s53``, ``unk__24``) the specs' names for them (``B``, ``S``),
    wherever the graph declares them (inputs, outputs, value_info), and return which name became which. An exporter's
    name is known by where it stands on an input axis the specs name; one standing where the specs give two names, or
    whose new name the graph already gives another dim, keeps its own."""
    import re

    by_input = {spec.name: spec for spec in specs}
    seen: dict[str, set[str]] = {}
    for value in model.graph.input:
        spec = by_input.get(value.name)
        if spec is None or len(value.type.tensor_type.shape.dim) != len(spec.dims):
            continue
        for dim, wanted in zip(value.type.tensor_type.shape.dim, spec.dims):
            if dim.dim_param and isinstance(wanted, str):
                seen.setdefault(dim.dim_param, set()).add(wanted)
    declared = [*model.graph.input, *model.graph.output, *model.graph.value_info]
    used = {dim.dim_param for value in declared for dim in value.type.tensor_type.shape.dim if dim.dim_param}
    names = {own: wanted.pop() for own, wanted in seen.items() if len(wanted) == 1}
    # a new name that is already another dim's would make the two one
    mapping = {own: new for own, new in names.items() if own != new and (new not in used or new in names)}
    if not mapping:
        return {}
    token = re.compile(r"\b(" + "|".join(re.escape(own) for own in sorted(mapping, key=len, reverse=True)) + r")\b")
    for value in declared:
        for dim in value.type.tensor_type.shape.dim:
            if dim.dim_param in mapping:
                dim.dim_param = mapping[dim.dim_param]
            elif dim.dim_param:  # an expression of the exporter's names (s53 + 1)
                dim.dim_param = token.sub(lambda found: mapping[found.group(1)], dim.dim_param)
    return mapping


def tensors(graph):
    """Every tensor of a graph: initializers, tensors in node attributes, and those of subgraphs."""
    from onnx import AttributeProto

    yield from graph.initializer
    for sparse in graph.sparse_initializer:
        yield from (sparse.values, sparse.indices)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == AttributeProto.TENSOR:
                yield attribute.t
            elif attribute.type == AttributeProto.TENSORS:
                yield from attribute.tensors
        for subgraph in subgraphs(node):
            yield from tensors(subgraph)


def subgraphs(node):
    """The graphs a node holds (the branches of If, the bodies of Loop and Scan)."""
    from onnx import AttributeProto

    for attribute in node.attribute:
        if attribute.type == AttributeProto.GRAPH:
            yield attribute.g
        elif attribute.type == AttributeProto.GRAPHS:
            yield from attribute.graphs


def external_data_locations(model) -> list[str]:
    """The external data files a model's tensors name (relative to its folder), sorted."""
    return sorted({entry.value for tensor in tensors(model.graph) for entry in tensor.external_data if entry.key == "location"})


def check_external_data(path: Path) -> list[Path]:
    """The external data files of a model someone gave, each refused unless it is a file inside the model's folder
    (an absolute location, ``..`` or a symlink could make a loader read any file on the machine)."""
    import onnx
    from google.protobuf.message import DecodeError

    from convert.errors import ConvertError

    try:
        model = onnx.load(str(path), load_external_data=False)
    except (DecodeError, OSError) as exc:
        raise ConvertError(
            f"{path} is not a valid ONNX model: it cannot be read ({type(exc).__name__}: {exc})",
            "Check that the file is complete and was written by an ONNX exporter.",
        ) from None
    folder = path.parent.resolve()
    files = []
    for location in external_data_locations(model):
        data = path.parent / location
        if os.path.isabs(location) or not data.resolve().is_relative_to(folder):
            raise ConvertError(
                f"{path} names external data outside its folder: {location!r}",
                "Refused: put the weights file beside the model and name it by a relative path inside that folder.",
            )
        if not data.is_file():
            raise ConvertError(
                f"{path} names the external data file {location!r}, which is not in {path.parent}",
                "Copy the weights file the model was saved with beside it.",
            )
        links = data.stat().st_nlink
        if links > 1:
            # onnx refuses it as a guard against hard-link attacks: another name can change the weights under the model
            raise ConvertError(
                f"the external data file {location!r} of {path} has {links} hard links, and onnx refuses to read a file that "
                "another name can change",
                f"Give it a file of its own: cp {data} {data}.copy && mv {data}.copy {data}",
            )
        files.append(data)
    return files


def graphs(graph):
    """A graph and every subgraph its nodes hold, however deep."""
    yield graph
    for node in graph.node:
        for subgraph in subgraphs(node):
            yield from graphs(subgraph)


def reinfer_inner_shapes(model):
    """The model with the shapes it declares inside (the value_info of its graphs and functions, the inputs and outputs
    of its subgraphs) dropped and inferred again from its inputs by ONNX's shape inference. An exporter writes there the sizes
    it traced, a frozen one included, and ONNX Runtime takes those over the graph outputs' own declarations."""
    import onnx

    for graph in graphs(model.graph):
        del graph.value_info[:]
        if graph is not model.graph:  # an If branch's declared outputs are the shape ONNX Runtime gives the If's
            for value in [*graph.input, *graph.output]:
                if value.type.HasField("tensor_type"):
                    value.type.tensor_type.ClearField("shape")
    for function in model.functions:
        del function.value_info[:]
    # data_prop: sizes computed from Shape ops (the reshapes after an RNN) stay symbolic instead of unknown
    return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)


def nodes(graph):
    """Every node of a graph and of its subgraphs."""
    for node in graph.node:
        yield node
        for subgraph in subgraphs(node):
            yield from nodes(subgraph)


def ops_without_kernels(model) -> list[str]:
    """``domain:op`` of every op that neither ONNX Runtime nor the model itself defines: a custom op whose library
    is not loaded (ops of the model's own functions are inlined by ONNX Runtime, so they run)."""
    from onnxruntime.capi.onnxruntime_pybind11_state import get_all_operator_schema

    def domain(name: str) -> str:
        return "" if name == "ai.onnx" else name

    known = {(domain(schema.domain), schema.name) for schema in get_all_operator_schema()}
    known |= {(domain(function.domain), function.name) for function in model.functions}
    missing = {(domain(node.domain), node.op_type) for node in nodes(model.graph)} - known
    return sorted(f"{name or 'ai.onnx'}:{op}" for name, op in missing)


def save_onnx(model, path: Path) -> None:
    """Write a model built in memory; its weights go to ``PATH.data`` when they pass ``EXTERNAL_DATA_THRESHOLD``.
    Weights are counted tensor by tensor: the whole model's ``ByteSize()`` raises past 2 GB."""
    import onnx

    if sum(tensor.ByteSize() for tensor in tensors(model.graph)) <= EXTERNAL_DATA_THRESHOLD:
        onnx.save(model, str(path))
        return
    data = path.with_name(f"{path.name}.data")
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save(
        model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data.name, convert_attribute=True
    )  # the tensors counted above include those of Constant nodes


def tensor_values(tensor, folder: Path):
    """A tensor's values as NumPy, read from its external data file in ``folder`` where it has one, without loading
    them into the model (onnx's own reader keeps them in the tensor it reads)."""
    from onnx import TensorProto, numpy_helper

    copy = TensorProto()
    copy.CopyFrom(tensor)  # an external tensor's message holds only where its bytes are
    return numpy_helper.to_array(copy, str(folder))


def save_onnx_streamed(model, path: Path, folder: Path) -> None:
    """Write a model some of whose tensors still name external data in ``folder`` (the model it was made from): every
    tensor of a kilobyte or more goes to ``PATH.data``, those in files copied a slice at a time, so their bytes are never
    all in memory (those already in memory stay there until the model is freed: protobuf releases bytes only with their
    message). A tensor of a megabyte or more starts on a 64 KiB boundary, as ONNX Runtime's own writer places them, so
    that it can be mapped from the file. A model with no external tensor is saved as ``save_onnx`` saves it."""
    import onnx
    from onnx.external_data_helper import ExternalDataInfo, uses_external_data

    if not any(uses_external_data(tensor) for tensor in tensors(model.graph)):
        save_onnx(model, path)
        return
    data = path.with_name(f"{path.name}.data")
    if any((folder / location).resolve() == data.resolve() for location in external_data_locations(model)):
        raise ValueError(f"{data} is where the model's own weights are read from: write the model to another name")
    with open(data, "wb") as out:
        for tensor in tensors(model.graph):
            external = uses_external_data(tensor)
            if not external and len(tensor.raw_data) < 1024:
                continue
            info = ExternalDataInfo(tensor) if external else None
            size = (info.length or (folder / info.location).stat().st_size - (info.offset or 0)) if external else len(tensor.raw_data)
            if size >= MAPPED_TENSOR_BYTES:
                out.seek(-out.tell() % MAPPED_ALIGNMENT, os.SEEK_CUR)
            offset = out.tell()
            if external:
                _copy_slice(folder / info.location, info.offset or 0, size, out)
            else:
                out.write(tensor.raw_data)
                tensor.ClearField("raw_data")
            del tensor.external_data[:]
            for key, value in (("location", data.name), ("offset", offset), ("length", out.tell() - offset)):
                tensor.external_data.add(key=key, value=str(value))
            tensor.data_location = onnx.TensorProto.EXTERNAL
    onnx.save(model, str(path))


def _copy_slice(source: Path, offset: int, length: int, out) -> None:
    with open(source, "rb") as file:
        file.seek(offset)
        left = length
        while left > 0:
            chunk = file.read(min(left, _COPY_CHUNK))
            if not chunk:
                raise ValueError(f"{source.name} ends before the {length} bytes a tensor names at offset {offset}")
            out.write(chunk)
            left -= len(chunk)


def rename_values(model, mapping: dict[str, str]) -> None:
    """Rename graph values (inputs, outputs, intermediates) everywhere they appear."""
    graph = model.graph
    for node in graph.node:
        node.input[:] = [mapping.get(n, n) for n in node.input]
        node.output[:] = [mapping.get(n, n) for n in node.output]
    for value in [*graph.input, *graph.output, *graph.value_info]:
        value.name = mapping.get(value.name, value.name)


def rename_by_position(model, names: list[str], wanted: list[str]) -> None:
    """Give graph values the source's names, which come in the same order."""
    if len(names) == len(wanted) and names != wanted:
        rename_values(model, dict(zip(names, wanted)))


def module_path(node) -> str:
    """The module path torch.onnx's dynamo exporter writes on a node (``pkg.torch.onnx.name_scopes``), else ""."""
    for prop in node.metadata_props:
        if prop.key == "pkg.torch.onnx.name_scopes":
            scopes = [s.strip(" '\"") for s in prop.value.strip("[]").split(",")]
            return scopes[-2] if len(scopes) > 1 else ""
    return ""


def matching_nodes(graph, patterns: tuple[str, ...] | list[str]) -> list[str]:
    """The names of the nodes whose name or module path matches one of the fnmatch ``patterns``."""
    import fnmatch

    return [
        node.name
        for node in graph.node
        if any(fnmatch.fnmatchcase(node.name, p) or fnmatch.fnmatchcase(module_path(node), p) for p in patterns)
    ]


# ONNX tensor types in the precision report's spelling
_PRECISION_OF_TYPE = {
    **{1: "fp32", 10: "fp16", 16: "bf16", 11: "fp64", 3: "int8", 2: "int8", 5: "int16", 4: "int16", 22: "int4", 21: "int4"},
    **dict.fromkeys((17, 18, 19, 20), "fp8"),
}
# integer matrix products: op type -> the index of its weight input (its first input is the activation)
_INTEGER_PRODUCTS = {
    "MatMulInteger": 1,
    "QLinearMatMul": 3,
    "DynamicQuantizeMatMul": 1,
    "MatMulIntegerToFloat": 1,
    "QGemm": 3,
    "ConvInteger": 1,
    "QLinearConv": 3,
}
_FLOAT_PRODUCTS = ("MatMul", "FusedMatMul", "Gemm", "Conv", "ConvTranspose", "MatMulNBits")
# what stands between a quantized tensor and the product that takes it in a QDQ graph
_LAYOUT_OPS = ("Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity")


def compute_precision(path: Path, input_shapes: dict[str, list[int]]):
    """What the graph's matrix products compute in, sized at ``input_shapes`` (ONNX Runtime's symbolic shape inference,
    which knows its contrib ops), and where ONNX Runtime's CPU provider has no kernel for a product's type (it casts its
    inputs to FP32 then)."""
    import onnx

    from convert.precision import MatrixProduct, Measured

    model = onnx.load(str(path), load_external_data=False)
    _drop_weight_values(model)
    for graph_input in model.graph.input:
        if graph_input.name in input_shapes:
            dims = graph_input.type.tensor_type.shape.dim
            for dim, size in zip(dims, input_shapes[graph_input.name]):
                dim.Clear()
                dim.dim_value = size
    inferred = _inferred(model)
    graph = inferred.graph
    types = {t.name: t.data_type for t in graph.initializer}
    shapes = {t.name: list(t.dims) for t in graph.initializer}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        tensor = value.type.tensor_type
        types.setdefault(value.name, tensor.elem_type)
        if tensor.HasField("shape") and all(d.HasField("dim_value") for d in tensor.shape.dim):
            shapes.setdefault(value.name, [d.dim_value for d in tensor.shape.dim])
    constants = {t.name for t in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    producer = {output: node for node in graph.node for output in node.output}
    kernels = _cpu_kernel_types()
    products = []
    for node in graph.node:
        if node.op_type not in _INTEGER_PRODUCTS and node.op_type not in _FLOAT_PRODUCTS:
            continue
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        compute, weights = _product_types(node, attributes, types, producer, constants)
        runtime = None
        if compute in ("fp16", "bf16") and compute not in kernels.get((node.domain or "", node.op_type), ()):
            runtime = "fp32"
        products.append(MatrixProduct(node.op_type, node.name, _macs(node, attributes, shapes), compute, weights, runtime))
    note = ""
    if any(p.runtime_compute for p in products):
        cast = sorted({p.op for p in products if p.runtime_compute})
        note = f"ONNX Runtime's CPU provider has no {', '.join(cast)} kernel of this type: it casts their inputs to fp32"
    casts = sum(1 for node in graph.node if node.op_type == "Cast")
    return Measured(
        products,
        how="the ONNX graph",
        casts=casts,
        runtime="onnxruntime on cpu",
        runtime_reason=note,
    )


# a tensor larger than this is a weight: its values size nothing (shape inference reads those of small constants)
_SIZING_VALUE_BYTES = 2**16


def _drop_weight_values(model) -> None:
    """Clear the values of the graph's large initializers, in place, keeping their names, types and dims: shape
    inference copies the model, and a model under the 2 GB protobuf limit holds its weights inline."""
    for tensor in model.graph.initializer:
        if tensor.ByteSize() > _SIZING_VALUE_BYTES:
            for values in ("raw_data", "float_data", "int32_data", "int64_data", "double_data", "uint64_data", "string_data"):
                tensor.ClearField(values)


def _inferred(model):
    """The model with every value's type and, where it can be known, its shape: ONNX Runtime's symbolic shape inference
    (it knows the com.microsoft ops), else ONNX's own."""
    import onnx

    try:
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

        return SymbolicShapeInference.infer_shapes(model, auto_merge=True, guess_output_rank=True)
    except Exception:  # noqa: BLE001 - it refuses some graphs; ONNX's inference still gives types and most shapes
        return onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)


def _product_types(node, attributes: dict, types: dict, producer: dict, constants: set) -> tuple[str, str | None]:
    """The type a product's arithmetic runs in and the type its weight is stored in (None where its second operand is
    computed). A QDQ product whose operands are both dequantized runs in INT8 (ONNX Runtime fuses it into its integer
    kernel); one whose weight alone is dequantized stores it in the quantized type and computes in float."""

    def precision(name: str) -> str:
        return _PRECISION_OF_TYPE.get(types.get(name, 0), "other")

    def source(name: str, through_casts: bool = False):
        """The tensor a value is read from through layout ops (and casts: where a weight is stored), and the node that
        dequantizes it (None where none does)."""
        passing = (*_LAYOUT_OPS, "DequantizeLinear", *(("Cast",) if through_casts else ()))
        dequantized = None
        for _ in range(8):
            node = producer.get(name)
            if node is None or node.op_type not in passing or not node.input:
                break
            if node.op_type == "DequantizeLinear":
                if dequantized is not None:
                    break
                dequantized = node
            name = node.input[0]
        return name, dequantized

    if node.op_type in _INTEGER_PRODUCTS:
        weight, _ = source(node.input[_INTEGER_PRODUCTS[node.op_type]], through_casts=True)
        return "int8", precision(weight) if weight in constants else None
    if node.op_type == "MatMulNBits":
        stored = f"int{attributes.get('bits', 4)}"
        return ("int8" if attributes.get("accuracy_level") == 4 else precision(node.input[0])), stored
    activation, activation_dq = source(node.input[0])
    weight, weight_dq = source(node.input[1])
    stored_as, _ = source(node.input[1], through_casts=True)
    stored = precision(stored_as) if stored_as in constants else None
    if activation_dq is not None and weight_dq is not None:
        # ONNX Runtime fuses 8-bit QDQ pairs into its integer kernels; a 16-bit or FP8 pair computes as its type says
        return precision(activation), stored
    return precision(activation if activation_dq is None else node.input[0]), stored


def _macs(node, attributes: dict, shapes: dict) -> int | None:
    """Multiply-accumulates of one product from its inferred shapes: the output's elements times the length of the
    reduction (a convolution's: its kernel's size times its input channels per group)."""
    import math

    first = shapes.get(node.input[0])
    if node.op_type == "MatMulNBits":  # [..., K] by a K x N weight, from its attributes (no shape inference needed)
        return math.prod(first[:-1]) * int(attributes["K"]) * int(attributes["N"]) if first else None
    output = shapes.get(node.output[0])
    if output is None:
        return None
    if node.op_type in ("Conv", "ConvInteger", "QLinearConv"):
        weight = shapes.get(node.input[_INTEGER_PRODUCTS.get(node.op_type, 1)])
        return math.prod(output) * math.prod(weight[1:]) if weight else None
    if node.op_type == "ConvTranspose":
        weight = shapes.get(node.input[1])
        return math.prod(first) * math.prod(weight[1:]) if first and weight else None
    if not first:
        return None
    if node.op_type in ("Gemm", "QGemm", "FusedMatMul") and attributes.get("transA") and len(first) > 1:
        return math.prod(output) * first[-2]
    return math.prod(output) * first[-1]


def _cpu_kernel_types() -> dict[tuple[str, str], set[str]]:
    """(domain, op type) -> the precisions ONNX Runtime's CPU provider has a kernel for."""
    from onnxruntime.capi import _pybind_state

    names = {"tensor(float)": "fp32", "tensor(float16)": "fp16", "tensor(bfloat16)": "bf16", "tensor(double)": "fp64"}
    found: dict[tuple[str, str], set[str]] = {}
    for kernel in _pybind_state.get_all_opkernel_def():
        if kernel.provider == "CPUExecutionProvider":
            domain = "" if kernel.domain == "ai.onnx" else kernel.domain
            kinds = {names[t] for allowed in kernel.type_constraints.values() for t in allowed if t in names}
            found.setdefault((domain, kernel.op_name), set()).update(kinds)
    return found
