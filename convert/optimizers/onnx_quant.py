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
from convert.backends.onnx import onnx_artifact, save_onnx
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
