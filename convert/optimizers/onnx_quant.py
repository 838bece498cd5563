"""ONNX Runtime quantization: static INT8 (QDQ, calibrated), dynamic INT8 (weights), and FP16.

Graphs from the torch.export-based exporter carry shape annotations that make ``quantize_dynamic`` fail
shape inference; ``quant_pre_process`` (symbolic shape inference, then ORT's basic optimizations) first
makes them quantizable, so every INT8 pass starts from a pre-processed copy.
"""

from __future__ import annotations

import contextlib
import gc
import tempfile
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.onnx import onnx_artifact, save_onnx, save_onnx_streamed, tensor_values
from convert.optimizers.base import OptimizeJob, Optimizer


def _quantize_from(job: OptimizeJob, path: Path, preprocess: bool, quantize) -> Artifact:
    """Run ``quantize(input_path, external_data)`` on the base model, pre-processed first (a temporary copy) when
    asked. A base with external data (a large model) is pre-processed and quantized with external data too."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    external_data = len(job.base.files) > 1
    model = (path.with_name(f".{path.name}.pre.onnx") if preprocess else job.base.path).resolve()
    try:
        if preprocess:
            # an incomplete symbolic shape inference saves sym_shape_infer_temp.onnx and its data into the working
            # folder before raising: a scratch folder of its own, never the user's
            with tempfile.TemporaryDirectory(dir=model.parent) as scratch, contextlib.chdir(scratch):
                quant_pre_process(
                    str(job.base.path.resolve()),
                    str(model),
                    skip_symbolic_shape=False,
                    save_as_external_data=external_data,
                    all_tensors_to_one_file=True,
                    external_data_location=f"{model.name}.data",
                )
            gc.collect()  # quant_pre_process leaves its copy of the model in reference cycles: free it before quantizing
        quantize(str(model), external_data)
    finally:
        # both quantizers shape-infer into MODEL-inferred.onnx beside their input, and leave it there when they fail
        model.with_name(f"{model.stem}-inferred{model.suffix}").unlink(missing_ok=True)
        if preprocess:
            model.unlink(missing_ok=True)
            model.with_name(f"{model.name}.data").unlink(missing_ok=True)
    return onnx_artifact(path)


def kept_in_fp32(job: OptimizeJob, model: str | Path) -> list[str]:
    """The nodes of ``model`` that --keep-fp32 names, by node name or by the module path on the exported artifact's
    nodes (pre-processing may drop that metadata, not the names of the nodes it keeps)."""
    import onnx

    from convert.backends.onnx import matching_nodes

    if not job.keep_fp32:
        return []
    graphs = [onnx.load(str(p), load_external_data=False).graph for p in dict.fromkeys((str(job.base.path), str(model)))]
    names = {n.name for n in graphs[-1].node}
    return sorted({name for graph in graphs for name in matching_nodes(graph, job.keep_fp32)} & names)


class _Int8(Optimizer):
    """An INT8 pass: from the pre-processed model first, from the model as exported as the fallback."""

    call = ""  # the ONNX Runtime call, as the strategies name it

    def strategies(self, job: OptimizeJob):
        return [
            (f"quant_pre_process + {self.call}", lambda path: _quantize_from(job, path, True, self.quantizer(job, path))),
            (self.call, lambda path: _quantize_from(job, path, False, self.quantizer(job, path))),
        ]

    def quantizer(self, job: OptimizeJob, path: Path):
        """A function of the input model's path, and whether to write external data, that writes the quantized model
        at ``path``."""
        raise NotImplementedError


class StaticInt8(_Int8):
    call = "quantize_static(QDQ, per-channel)"

    def quantizer(self, job: OptimizeJob, path: Path):
        from onnxruntime.quantization import CalibrationDataReader, CalibrationMethod, QuantFormat, QuantType, quantize_static

        class Feeds(CalibrationDataReader):
            def __init__(self, feeds):
                self.feeds = iter(feeds)

            def get_next(self):
                return next(self.feeds, None)

        return lambda model, external_data: quantize_static(
            model,
            str(path),
            Feeds(job.calibration),
            quant_format=QuantFormat.QDQ,
            per_channel=True,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            use_external_data_format=external_data,
            nodes_to_exclude=kept_in_fp32(job, model),
            calibrate_method={
                "minmax": CalibrationMethod.MinMax,
                "entropy": CalibrationMethod.Entropy,
                "percentile": CalibrationMethod.Percentile,
            }[job.calibration_method],
        )


class DynamicInt8(_Int8):
    call = "quantize_dynamic"

    def quantizer(self, job: OptimizeJob, path: Path):
        from onnxruntime.quantization import QuantType, quantize_dynamic

        return lambda model, external_data: quantize_dynamic(
            model,
            str(path),
            weight_type=QuantType.QInt8,
            use_external_data_format=external_data,
            # quantize_dynamic first splits a Gemm into NAME_MatMul + NAME_Add, and checks the exclusions on the split
            nodes_to_exclude=[name for kept in kept_in_fp32(job, model) for name in (kept, f"{kept}_MatMul")],
        )


class Fp16(Optimizer):
    def strategies(self, job: OptimizeJob):
        return [("onnxruntime float16 conversion (float32 inputs and outputs kept)", lambda path: self._convert(job, path))]

    def _convert(self, job: OptimizeJob, path: Path) -> Artifact:
        import onnx
        from onnxruntime.transformers.float16 import convert_float_to_float16

        # shape inference on the graph alone: on the whole model it serializes it, which fails past 2 GB
        model = onnx.shape_inference.infer_shapes(onnx.load(str(job.base.path), load_external_data=False))
        onnx.load_external_data_for_model(model, str(job.base.path.parent))
        model = convert_float_to_float16(
            model, keep_io_types=True, disable_shape_infer=True, node_block_list=kept_in_fp32(job, job.base.path) or None
        )
        _sort_topologically(model.graph)
        save_onnx(model, path)
        return onnx_artifact(path)


def _sort_topologically(graph) -> None:
    """ONNX Runtime's float16 converter appends the Cast nodes that keep float32 inputs at the end of the
    graph, which the ONNX checker rejects; put every node after the nodes that produce its inputs."""
    available = {i.name for i in graph.input} | {t.name for t in graph.initializer} | {""}
    pending, ordered = list(graph.node), []
    while pending:
        ready = [n for n in pending if all(i in available for i in n.input)]
        if not ready:  # inputs from outer scopes (subgraphs) or a cycle: keep the rest in their order
            ready = pending[:1]
        placed = {id(node) for node in ready}
        for node in ready:
            ordered.append(node)
            available.update(node.output)
        pending = [n for n in pending if id(n) not in placed]
    copies = [type(n)() for n in ordered]
    for copy, node in zip(copies, ordered):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)


class _WeightOnly(Optimizer):
    """Weight-only quantization through ONNX Runtime's MatMulNBits: every MatMul with a constant weight stores its
    weight in ``bits`` per value, asymmetric, with one scale and zero point per group of ``--weight-group-size`` input
    channels; the activations stay float between operators (accuracy level 4 quantizes them per block inside the
    kernel, to multiply in int8)."""

    bits = 4

    def strategies(self, job: OptimizeJob):
        return [
            (f"onnxruntime MatMulNBitsQuantizer(bits={self.bits}, asymmetric, accuracy_level=4)", lambda path: self._quantize(job, path))
        ]

    def _quantize(self, job: OptimizeJob, path: Path) -> Artifact:
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        from convert.reports.details import WeightCompression

        # the graph without its weights: each MatMul's weight is read from its file as it is quantized, and the model is
        # written tensor by tensor, so a decoder larger than memory is compressed (peak: a few copies of the largest
        # weight, beside the compressed ones)
        folder = job.base.path.parent
        model = onnx.load(str(job.base.path), load_external_data=False)
        _gemms_as_matmuls(model.graph, folder)
        weights = _constant_matmul_weights(model.graph)
        if not weights:
            raise ValueError("the model has no MatMul with a constant two-dimensional weight: there is nothing to store in fewer bits")
        group, notes = _block_size(job.weight_group_size, weights)
        # accuracy level 4 multiplies in int8 (the activations quantized per block as they come): on this suite's CPUs
        # 2.6x the decode speed of the float level (1), at the same logits cosine on a 1B-class decoder
        quantizer = MatMulNBitsQuantizer(
            model,
            bits=self.bits,
            block_size=group,
            is_symmetric=False,
            accuracy_level=4,
            nodes_to_exclude=kept_in_fp32(job, job.base.path),
        )
        quantizer.node_quantizer = _OneWeightAtATime(quantizer.node_quantizer, folder)
        quantizer.process()
        quantized = quantizer.model.model
        compressed = sum(node.op_type == "MatMulNBits" for node in quantized.graph.node)
        storage = f"int{self.bits}, " + ("per channel" if job.weight_group_size == -1 else f"group {group}")
        record = WeightCompression(
            method=f"ONNX Runtime MatMulNBitsQuantizer (bits={self.bits}, asymmetric, accuracy_level=4)",
            group_size=job.weight_group_size,
            layers={storage: compressed} if compressed else {},
            uncompressed=len(_constant_matmul_weights(quantized.graph)),
            notes=notes,
        )
        save_onnx_streamed(quantized, path, folder)
        artifact = onnx_artifact(path)
        artifact.details = [record.model_dump()]
        return artifact


class _OneWeightAtATime:
    """ONNX Runtime's node quantizer (of MatMul, whose weight is its second input), handed each weight read from its
    file just before it quantizes it, in a scratch graph searched first: protobuf frees a message's bytes only with the
    whole message, so a weight loaded into the model itself would stay in memory to the end. What the quantizer adds
    (the packed weight, its scales and zero points) is moved into the model's graph, and the scratch graph, with the
    float weight, is dropped."""

    def __init__(self, quantizer, folder: Path):
        self.quantizer, self.folder = quantizer, folder

    def quantize(self, node, graph_stack):
        from onnx import GraphProto, TensorProto
        from onnx.external_data_helper import load_external_data_for_tensor, uses_external_data

        name = node.input[1] if len(node.input) > 1 else None
        owner = next((graph for graph in reversed(graph_stack) if any(t.name == name for t in graph.initializer)), None)
        weight = next((t for t in owner.initializer if t.name == name), None) if owner is not None else None
        if weight is None or not uses_external_data(weight):
            return self.quantizer.quantize(node, graph_stack)
        scratch = GraphProto()
        loaded = scratch.initializer.add()
        loaded.CopyFrom(weight)
        load_external_data_for_tensor(loaded, str(self.folder))
        del loaded.external_data[:]
        loaded.data_location = TensorProto.DEFAULT
        nodes = self.quantizer.quantize(node, [*graph_stack, scratch])
        owner.initializer.extend(t for t in scratch.initializer if t.name != name)
        if len(nodes) != 1 or nodes[0] is not node:
            # quantized: ONNX Runtime drops the weight from the inputs of the graph it found it in
            kept = [value for value in owner.input if value.name != name]
            del owner.input[:]
            owner.input.extend(kept)
        return nodes


class Int4Weights(_WeightOnly):
    bits = 4


class Int8Weights(_WeightOnly):
    bits = 8


def _constant_matmul_weights(graph) -> dict[str, list[int]]:
    """The shapes of the constant two-dimensional weights that MatMul nodes take as their second input, by node."""
    shapes = {tensor.name: list(tensor.dims) for tensor in graph.initializer}
    return {
        node.name: shapes[node.input[1]]
        for node in graph.node
        if node.op_type == "MatMul" and len(node.input) > 1 and len(shapes.get(node.input[1], ())) == 2
    }


def _gemms_as_matmuls(graph, folder: Path) -> None:
    """Rewrite each Gemm with a constant weight (what a Linear on a batch of vectors exports as) as MatMul + Add, the form
    MatMulNBits quantizes: a transposed weight is stored transposed, alpha folded into it and beta into a constant bias.
    Those are read from ``folder`` and held in memory until the model is written; an untransposed weight with alpha 1
    (GPT-2's Conv1D) is the MatMul's weight as it is, read from its file when it is quantized."""
    from onnx import helper, numpy_helper

    initializers = {tensor.name: tensor for tensor in graph.initializer}
    nodes = []
    for node in graph.node:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        weight = initializers.get(node.input[1]) if node.op_type == "Gemm" and len(node.input) > 1 else None
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        beta = attributes.get("beta", 1.0)
        if weight is None or attributes.get("transA", 0) or len(weight.dims) != 2 or (bias and beta != 1.0 and bias not in initializers):
            nodes.append(node)
            continue
        transposed, alpha = attributes.get("transB", 0), attributes.get("alpha", 1.0)
        matrix = weight.name
        if transposed or alpha != 1.0:
            values = tensor_values(weight, folder)
            values = (values.T if transposed else values) * values.dtype.type(alpha)
            matrix = f"{node.name}_weight"
            graph.initializer.append(numpy_helper.from_array(values, matrix))
        product = f"{node.name}_product" if bias else node.output[0]
        nodes.append(helper.make_node("MatMul", [node.input[0], matrix], [product], name=f"{node.name}_MatMul"))
        if bias and beta != 1.0:
            scaled = tensor_values(initializers[bias], folder)
            graph.initializer.append(numpy_helper.from_array(scaled * scaled.dtype.type(beta), f"{node.name}_bias"))
            bias = f"{node.name}_bias"
        if bias:
            nodes.append(helper.make_node("Add", [product, bias], [node.output[0]], name=f"{node.name}_Add"))
    del graph.node[:]
    graph.node.extend(nodes)


def _block_size(asked: int, weights: dict[str, list[int]]) -> tuple[int, list[str]]:
    """MatMulNBits' block size for --weight-group-size, and what differs from it: -1 (per output channel) is one block
    as long as the longest input dimension (rounded up to the power of two the operator takes), where a block longer
    than a weight's input channels is padded."""
    longest = max(rows for rows, _ in weights.values())
    if asked == -1:
        return max(16, 1 << (longest - 1).bit_length()), []
    short = sorted({rows for rows, _ in weights.values() if rows % asked})
    notes = [f"layers of {', '.join(map(str, short))} input channels have a last group padded to {asked}"] if short else []
    return asked, notes
