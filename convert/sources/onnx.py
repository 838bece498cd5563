"""An ONNX file as the source: a model someone already exported (a vendor's, a model zoo's, another exporter's).

Its reference outputs come from ONNX Runtime on the original graph with every graph optimization off, on the CPU:
the reference is then a runtime, not the framework the model was trained in, and the report says so. Its input specs
are read from the graph: a named dynamic dim (``dim_param``) keeps its name as the symbol, an unnamed one is named
after its input and axis, and ``--input`` replaces them. An integer input that indexes an embedding table (a Gather of
a weight) gets that table's rows as its domain, so generated token ids stay in range.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from convert.errors import ConvertError
from convert.safety import sha256_files
from convert.sources.base import SourceInfo, SourceModel, example_arrays
from convert.sources.request import SourceRequest
from convert.sources.signature import export_sizes_from_arrays, order_by_parameters
from convert.specs import InputSpec, SourceSignature

REFERENCE = "ONNX Runtime on the original graph, graph optimizations off, CPU"


class OnnxSource(SourceModel):
    def __init__(self, path: Path, info: SourceInfo, specs: tuple[InputSpec, ...], outputs: tuple[str, ...]):
        self.path = path
        self.info = info
        self.signature = SourceSignature(inputs=specs, outputs=outputs)
        self.export_sizes = {}
        self._session = None

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        session = self.session()
        values = session.run(list(self.signature.outputs), {spec.name: feed[spec.name] for spec in self.signature.inputs})
        return dict(zip(self.signature.outputs, values))

    def session(self):
        if self._session is None:
            import onnxruntime

            options = onnxruntime.SessionOptions()
            options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
            options.log_severity_level = 3
            self._session = onnxruntime.InferenceSession(str(self.path), options, providers=["CPUExecutionProvider"])
        return self._session

    @property
    def native(self) -> Path:
        return self.path


def load_onnx_source(request: SourceRequest) -> OnnxSource:
    import onnx

    from convert.backends.onnx import check_external_data, ops_without_kernels

    path = request.model
    if not isinstance(path, Path) or path.is_dir():
        raise ConvertError("an ONNX source is given as the path of its .onnx file", "Pass the .onnx file (its external data beside it).")
    if request.weights is not None:
        raise ConvertError("--weights goes with PyTorch and Keras factories", "Drop --weights: an ONNX file holds its weights.")
    data_files = check_external_data(path)
    try:
        onnx.checker.check_model(str(path))
    except (onnx.checker.ValidationError, onnx.onnx_cpp2py_export.checker.ValidationError) as exc:
        raise ConvertError(
            f"{path} is not a valid ONNX model: {str(exc).strip().splitlines()[0]}",
            "Check that the file is complete and was written by an ONNX exporter; onnx.checker.check_model tells the same.",
        ) from None
    model = onnx.load(str(path), load_external_data=False)
    custom = ops_without_kernels(model)
    if custom:
        raise ConvertError(
            f"{path} uses ops that ONNX Runtime, which computes the reference, has no kernel for: {', '.join(custom)} (custom ops "
            "whose library is not loaded)",
            "This tool loads no custom op library: export the model with standard ONNX ops, or write the custom op as an ONNX "
            "function in the model (ONNX Runtime inlines those).",
        )
    own_specs = graph_specs(model.graph)
    specs = (
        order_by_parameters(request.inputs, [s.name for s in own_specs], False, f"the ONNX graph {path.name}", keyword=True)
        if request.inputs
        else own_specs
    )
    missing = [s.name for s in own_specs if s.name not in {t.name for t in specs}]
    if missing:
        raise ConvertError(f"no spec is given for the input '{missing[0]}' of {path.name}", "Give an --input spec for every input.")
    producer = " ".join(filter(None, (model.producer_name, model.producer_version))) or "an unnamed producer"
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    info = SourceInfo(
        framework="onnx",
        kind="onnx",
        path=str(path),
        sha256=sha256_files([path, *data_files]),
        description=f"ONNX opset {opset} from {producer}; reference: {REFERENCE}",
    )
    source = OnnxSource(path, info, specs, tuple(o.name for o in model.graph.output))
    example = example_arrays(request.example_inputs, [spec.name for spec in specs])
    if example is not None:
        source.example_feed = example
        source.export_sizes = export_sizes_from_arrays(specs, source.example_feed)
    return source


def graph_specs(graph) -> tuple[InputSpec, ...]:
    """The graph's inputs (not its initializers) as specs: dims by value, by name, or named after input and axis."""
    from onnx.helper import tensor_dtype_to_np_dtype

    initializers = {t.name for t in graph.initializer}
    domains = _embedding_domains(graph)
    specs = []
    for value in graph.input:
        if value.name in initializers:
            continue
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type"):
            raise ConvertError(
                f"the ONNX input '{value.name}' is not a tensor (a sequence or map)", "Give a graph whose inputs are tensors."
            )
        if not tensor.HasField("shape"):
            raise ConvertError(
                f"the ONNX input '{value.name}' declares no shape, not even its rank",
                f'Give its spec with --input, e.g. --input "{value.name}:float32[B,3,224,224]".',
            )
        dims = tuple(
            dim.dim_value if dim.HasField("dim_value") and dim.dim_value > 0 else _symbol(dim.dim_param or f"{value.name}_{axis}")
            for axis, dim in enumerate(tensor.shape.dim)
        )
        dtype = np.dtype(tensor_dtype_to_np_dtype(tensor.elem_type)).name
        low, high = (0, domains[value.name] - 1) if value.name in domains else (None, None)
        specs.append(InputSpec(value.name, dtype, dims, low, high))
    return tuple(specs)


def _symbol(name: str) -> str:
    """A dim name as a spec symbol (letters, digits and underscores, not starting with a digit)."""
    symbol = re.sub(r"\W", "_", name)
    return symbol if re.match(r"[A-Za-z_]", symbol) else f"d_{symbol}"


def _embedding_domains(graph) -> dict[str, int]:
    """Integer inputs used as the indices of a Gather of a weight: the table's rows (the smallest, if several)."""
    rows = {t.name: t.dims[0] for t in graph.initializer if t.dims}
    domains: dict[str, int] = {}
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) == 2 and node.input[0] in rows:
            axis = next((a.i for a in node.attribute if a.name == "axis"), 0)
            if axis == 0:
                domains[node.input[1]] = min(rows[node.input[0]], domains.get(node.input[1], rows[node.input[0]]))
    return domains
