"""OpenVINO IR (``model.xml`` + ``model.bin`` in a folder) from the ONNX artifact: FP32, FP16-compressed
weights, or INT8 through NNCF post-training quantization on the calibration feeds."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.backends.openvino import F32_CPU, IR_NAME
from convert.optimizers.base import OptimizeJob, Optimizer


class OpenVinoIR(Optimizer):
    def strategies(self, job: OptimizeJob):
        return [(f"openvino.convert_model{self._detail}", lambda path: self._write(job, path))]

    _detail = ""

    def _write(self, job: OptimizeJob, path: Path) -> Artifact:
        import openvino

        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        model, control = self.transform(openvino.convert_model(str(job.base.path)), job)
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
            "ignored_scope": nncf.IgnoredScope(names=_kept_in_fp32(model, job), validate=False),
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


WEIGHTED_OPS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "MatMul")


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
        reason = f"plain INT8 drops {task.metric} by {record['plain_drop'] * 100:.2f} points, within the budget"
        return plain, {**record, "status": "not-needed", "reason": reason, "drop": record["plain_drop"]}
    advanced = {"advanced_quantization_parameters": settings["advanced_parameters"]} if "advanced_parameters" in settings else {}
    controlled = nncf.quantize_with_accuracy_control(
        model,
        calibration,
        nncf.Dataset(list(zip(task.feeds, task.labels)), lambda item: {n: item[0][n] for n in names}),
        lambda compiled, items: task.score(outputs_of(compiled, [feed for feed, _ in items]), [label for _, label in items]),
        max_drop=task.max_drop,
        drop_type=nncf.DropType.ABSOLUTE,
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
        if kind in ("Convert", "Subtract", "Multiply", "Reshape", "Transpose") and depth < 6:
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
