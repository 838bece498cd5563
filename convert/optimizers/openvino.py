"""OpenVINO IR (``model.xml`` + ``model.bin`` in a folder) from the ONNX artifact: FP32, FP16-compressed
weights, INT8 through NNCF post-training quantization on the calibration feeds, or INT4 / INT8 weights through NNCF's
weight compression."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.backends.openvino import DEQUANTIZING_OPS, F32_CPU, IR_NAME, WEIGHTED_OPS, stored_weight
from convert.optimizers.base import OptimizeJob, Optimizer
from convert.validators.task_metrics import LOWER_IS_BETTER, describe_drop


class OpenVinoIR(Optimizer):
    @classmethod
    def variant(cls, job: OptimizeJob) -> str:
        return "read_model" if _weights_exceed_memory(job) else ""

    def strategies(self, job: OptimizeJob):
        mapped = bool(self.variant(job))
        reader = "openvino.Core().read_model (weights mapped from the file)" if mapped else "openvino.convert_model"
        return [(f"{reader}{self._detail}", lambda path: self._write(job, path, mapped))]

    _detail = ""

    def _write(self, job: OptimizeJob, path: Path, mapped: bool) -> Artifact:
        import openvino

        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        base = str(job.base.path)
        model, control = self.transform(openvino.Core().read_model(base) if mapped else openvino.convert_model(base), job)
        openvino.save_model(model, str(path / IR_NAME), compress_to_fp16=self.precision == "fp16")
        return Artifact(format=self.format, path=path, files=[path], details=[control] if control else [])

    def transform(self, model, job: OptimizeJob) -> tuple[object, dict | None]:
        """The model to save, and what accuracy control kept in FP32 (a report.AccuracyControl's JSON; None where none ran)."""
        return model, None


class OpenVinoFp16(OpenVinoIR):
    _detail = " + save_model(compress_to_fp16=True)"


class OpenVinoInt8(OpenVinoIR):
    _detail = (
        " + nncf.quantize (model_type TRANSFORMER where the graph has a Softmax; quantize_with_accuracy_control under a task-drop budget)"
    )

    def transform(self, model, job: OptimizeJob):
        import nncf

        names = [port.get_any_name() for port in model.inputs]
        # NNCF's transformer scheme (SmoothQuant, attention-aware placement) keeps encoders accurate
        transformer = any(op.get_type_name() == "Softmax" for op in model.get_ops())
        settings = {
            "subset_size": len(job.calibration),
            "model_type": nncf.ModelType.TRANSFORMER if transformer else None,
            "ignored_scope": _ignored(model, job),
        }
        if job.calibration_method == "percentile":
            from nncf.quantization.advanced_parameters import AdvancedQuantizationParameters
            from nncf.quantization.range_estimator import RangeEstimatorParametersSet

            settings["advanced_parameters"] = AdvancedQuantizationParameters(
                activations_range_estimator_params=RangeEstimatorParametersSet.QUANTILE
            )
        calibration = nncf.Dataset(job.calibration, lambda feed: {n: feed[n] for n in names})
        plain = nncf.quantize(model, calibration, **settings)
        if job.task is None:
            return plain, None
        return _accuracy_controlled(model, plain, calibration, names, job, settings)


class _OpenVinoWeights(OpenVinoIR):
    """NNCF's weight compression: the weights of matrix products (and embeddings) stored in fewer bits, the activations
    left in float; with --calibration-data, INT4 also runs AWQ and scale estimation on it."""

    mode = "INT8_ASYM"

    def transform(self, model, job: OptimizeJob):
        import nncf
        from nncf.quantization.advanced_parameters import AdvancedCompressionParameters, GroupSizeFallbackMode

        from convert.reports.details import WeightCompression

        int4 = self.mode.startswith("INT4")
        settings = {"mode": getattr(nncf.CompressWeightsMode, self.mode), "ignored_scope": _ignored(model, job)}
        data_aware = []
        if int4:
            # a layer whose input channels do not divide into groups takes the largest size of 16 or more that does
            advanced = AdvancedCompressionParameters(group_size_fallback_mode=GroupSizeFallbackMode.ADJUST)
            settings.update(group_size=job.weight_group_size, ratio=job.weight_ratio, advanced_parameters=advanced)
            if job.calibration_given and job.calibration:
                names = [port.get_any_name() for port in model.inputs]
                settings.update(
                    dataset=nncf.Dataset(job.calibration, lambda feed: {n: feed[n] for n in names}),
                    subset_size=len(job.calibration),
                    awq=True,
                    scale_estimation=True,
                )
                data_aware = ["AWQ", "scale estimation"]
        compressed = nncf.compress_weights(model, **settings)
        layers, groups = _compressed_layers(compressed)
        asked = job.weight_group_size if int4 else -1
        notes = (
            [f"group sizes {', '.join(map(str, sorted(groups - {asked})))} where a layer's channels do not divide by {asked}"]
            if int4 and asked != -1 and groups - {asked}
            else []
        )
        record = WeightCompression(
            method=f"NNCF compress_weights({self.mode})",
            group_size=asked,
            ratio=job.weight_ratio if int4 else 1.0,
            layers=layers,
            uncompressed=len(_weighted(compressed)) - sum(layers.values()),
            data_aware=data_aware,
            notes=notes,
        )
        return compressed, record.model_dump()


class OpenVinoInt4Weights(_OpenVinoWeights):
    mode = "INT4_ASYM"
    _detail = " + nncf.compress_weights(INT4_ASYM)"


class OpenVinoInt8Weights(_OpenVinoWeights):
    mode = "INT8_ASYM"
    _detail = " + nncf.compress_weights(INT8_ASYM)"


def _weights_exceed_memory(job: OptimizeJob) -> bool:
    """Whether the base's files take more than half the memory available (the runners' rule). convert_model copies
    every weight into memory, transposed into the layout the CPU's matrix products read fastest; read_model maps them
    from the ONNX file instead and keeps the file's layout: a 2.7 GB decoder converts within a 2 GiB limit, and its
    INT4 IR decodes a token in 29.5 ms where convert_model's takes 21.6 ms."""
    from convert.memory import available_bytes

    return sum(f.stat().st_size for f in map(Path, job.base.files) if f.is_file()) > available_bytes() // 2


def _ignored(model, job: OptimizeJob):
    """NNCF's ignored scope: the operations --keep-fp32 names."""
    import nncf

    return nncf.IgnoredScope(names=_kept_in_fp32(model, job), validate=False)


def _weighted(model) -> list:
    """The matrix products whose weight is a constant (through the operations that dequantize it)."""

    def constant(node, depth: int = 0) -> bool:
        kind = node.get_type_name()
        if kind == "Constant":
            return True
        return (
            kind in DEQUANTIZING_OPS
            and depth < 6
            and all(constant(node.input_value(i).get_node(), depth + 1) for i in range(node.get_input_size()))
        )

    return [op for op in model.get_ops() if op.get_type_name() == "MatMul" and constant(op.input_value(1).get_node())]


def _compressed_layers(model) -> tuple[dict[str, int], set[int]]:
    """How many matrix products take a weight stored in each low-precision type and grouping, and the group sizes seen
    (a grouped weight is a [out, groups, group size] constant reshaped to [out, in] before its product)."""
    counts: dict[str, int] = {}
    groups: set[int] = set()
    for op in _weighted(model):
        stored = stored_weight(op.input_value(1).get_node())
        if stored is None:
            continue
        kind, shape = stored.get_element_type().get_type_name(), list(stored.get_output_shape(0))
        bits = {"i8": "int8", "u8": "int8", "i4": "int4", "u4": "int4"}[kind]
        if len(shape) == 3:
            # a weight MatMul reads transposed is stored [out, groups, group], one it reads as it is [groups, group, out]
            group = shape[1] if op.get_type_name() == "MatMul" and not op.get_attributes().get("transpose_b") else shape[2]
            groups.add(group)
            storage = f"{bits}, group {group}"
        else:
            storage = f"{bits}, per channel"
        counts[storage] = counts.get(storage, 0) + 1
    return dict(sorted(counts.items())), groups


def _accuracy_controlled(model, plain, calibration, names: list[str], job: OptimizeJob, settings: dict) -> tuple[object, dict]:
    """Plain INT8 where its task drop meets the budget; else NNCF's accuracy control, which puts back in FP32 the
    operations that cost the task most until it does (and the report names them)."""
    import nncf
    import openvino

    started = time.perf_counter()
    task, core = job.task, openvino.Core()

    def outputs_of(compiled, feeds):
        found = []
        for feed in feeds:
            values = compiled({n: feed[n] for n in names})
            found.append({port.get_any_name(): np.asarray(values[port]) for port in compiled.outputs})
        return found

    def drop_of(candidate) -> float:
        return task.drop(outputs_of(core.compile_model(candidate, "CPU", F32_CPU), task.feeds), task.labels)

    record = {
        "kind": "accuracy_control",
        "method": "NNCF quantize_with_accuracy_control",
        "metric": task.metric,
        "budget": task.max_drop,
        "plain_drop": drop_of(plain),
    }
    if record["plain_drop"] <= task.max_drop:
        reason = f"plain INT8's {task.metric} {describe_drop(task.metric, record['plain_drop'])}, within the budget"
        return plain, {**record, "status": "not-needed", "reason": reason, "drop": record["plain_drop"]}
    advanced = {"advanced_quantization_parameters": settings["advanced_parameters"]} if "advanced_parameters" in settings else {}
    # NNCF counts a metric that rose as no drop: a lower-is-better one (perplexity) is given negated, and its budget, a
    # relative rise, as NNCF's relative drop |1 - quantized / initial|
    lower = task.metric in LOWER_IS_BETTER
    controlled = nncf.quantize_with_accuracy_control(
        model,
        calibration,
        nncf.Dataset(list(zip(task.feeds, task.labels)), lambda item: {n: item[0][n] for n in names}),
        lambda compiled, items: (
            (-1 if lower else 1) * task.score(outputs_of(compiled, [feed for feed, _ in items]), [label for _, label in items])
        ),
        max_drop=task.max_drop,
        drop_type=nncf.DropType.RELATIVE if lower else nncf.DropType.ABSOLUTE,
        **{key: value for key, value in settings.items() if key != "advanced_parameters"},
        **advanced,
    )
    drop = drop_of(controlled)
    kept = sorted(_quantized_ops(plain) - _quantized_ops(controlled))
    status = "met" if drop <= task.max_drop else "not-met"
    return controlled, {**record, "status": status, "drop": drop, "kept_fp32": kept, "seconds": round(time.perf_counter() - started, 3)}


def _quantized_ops(model) -> set[str]:
    """The convolutions and matrix products that take a quantized input: a FakeQuantize, or int8 weights (a constant
    of a low-precision type through the Convert / Subtract / Multiply / Reshape that dequantize it)."""

    def quantized(node, depth: int = 0) -> bool:
        kind = node.get_type_name()
        if kind == "FakeQuantize" or (kind == "Constant" and node.get_element_type().get_type_name() in ("i8", "u8", "i4", "u4")):
            return True
        if kind in DEQUANTIZING_OPS and depth < 6:
            return any(quantized(node.input_value(i).get_node(), depth + 1) for i in range(node.get_input_size()))
        return False

    return {
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_type_name() in WEIGHTED_OPS and any(quantized(op.input_value(i).get_node()) for i in range(op.get_input_size()))
    }


def _kept_in_fp32(model, job: OptimizeJob) -> list[str]:
    """The OpenVINO ops that --keep-fp32 names: those converted from the matching ONNX nodes (an op keeps its node's
    name, or the names of its outputs)."""
    import onnx

    from convert.backends.onnx import matching_nodes

    if not job.keep_fp32:
        return []
    graph = onnx.load(str(job.base.path), load_external_data=False).graph
    nodes = set(matching_nodes(graph, job.keep_fp32))
    values = {value for node in graph.node if node.name in nodes for value in node.output}
    return [
        op.get_friendly_name()
        for op in model.get_ops()
        if op.get_friendly_name() in nodes or any(values & output.get_names() for output in op.outputs())
    ]
