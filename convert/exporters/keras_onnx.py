"""ONNX from Keras / TensorFlow: tf2onnx on the serving function first; Keras's own ONNX export
(``Model.export(format="onnx")``) as the recorded fallback for Keras models."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.backends.onnx import onnx_artifact, rename_by_position, save_onnx
from convert.backends.tf import tensorflow
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.tf_common import input_signature, serving_function

DEFAULT_OPSET = 17


@functools.cache
def _register_missing_tf2onnx_ops() -> None:
    """tf2onnx 1.17 has no handler for TensorFlow's Erfc, which Keras's exact GELU uses: it copies the op
    into the graph, which the ONNX checker then rejects. Erfc(x) = 1 - Erf(x)."""
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Erfc")
    class Erfc:
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
            erf = ctx.make_node("Erf", [node.input[0]], name=utils.make_name(node.name))
            one = ctx.make_const(utils.make_name("erfc_one"), np.array(1, dtype=dtype))
            node.type = "Sub"
            ctx.replace_inputs(node, [one.output[0], erf.output[0]])


def _fold_captured_inputs(model, function, wanted: set[str]) -> bool:
    """tf2onnx 1.17 turns some tensors a tf.function captures (Keras 3 Normalization's mean and variance) into graph
    inputs: each becomes an initializer holding the captured value again. Whether the graph changed; an input that is
    neither the model's nor a captured constant is an error."""
    from onnx import numpy_helper

    graph = function.get_concrete_function().graph
    captured = {inner.name: outer for outer, inner in zip(graph.external_captures, graph.internal_captures)}
    extra = [i for i in model.graph.input if i.name not in wanted]
    for graph_input in extra:
        value = captured.get(graph_input.name)
        if value is None or not hasattr(value, "numpy"):
            raise ValueError(f"tf2onnx left an input the model does not have: {graph_input.name}")
        model.graph.initializer.append(numpy_helper.from_array(value.numpy(), graph_input.name))
        model.graph.input.remove(graph_input)
    return bool(extra)


class KerasToOnnx(Exporter):
    def strategies(self, job: ExportJob):
        strategies = [("tf2onnx.convert.from_function", lambda path: self._tf2onnx(job, path))]
        if job.source.is_keras:
            strategies.append(("keras.Model.export(format='onnx')", lambda path: self._keras(job, path)))
        return strategies

    def traced(self, job: ExportJob, strategy: str):
        """tf2onnx names the graph's values after the frozen TensorFlow graph's tensors; Keras's own export does not."""
        from convert.backends.tf import TracedGraph

        if strategy != self.strategies(job)[0][0]:
            return None
        function = tensorflow().function(serving_function(job), input_signature=input_signature(job))
        return TracedGraph(function.get_concrete_function(), job.source)

    def _tf2onnx(self, job: ExportJob, path: Path) -> Artifact:
        import tf2onnx

        tf = tensorflow()
        _register_missing_tf2onnx_ops()
        signature = input_signature(job)
        function = tf.function(serving_function(job), input_signature=signature)
        model, _ = tf2onnx.convert.from_function(
            function, input_signature=signature, opset=job.opset or DEFAULT_OPSET, output_path=str(path)
        )
        if _fold_captured_inputs(model, function, {s.name for s in job.source.signature.inputs}):
            save_onnx(model, path)
        return onnx_artifact(path, job.opset)

    def _keras(self, job: ExportJob, path: Path) -> Artifact:
        import onnx

        # Keras derives the input signature from the model's own inputs (dynamic where they are None).
        job.source.native.export(str(path), format="onnx", verbose=False)
        model = onnx.load(str(path), load_external_data=False)  # renaming needs the graph only; external data stays put
        # Keras names outputs after graph tensors (``Identity:0``); the source's names come in the same (flattened) order
        rename_by_position(model, [i.name for i in model.graph.input], [s.name for s in job.source.signature.inputs])
        rename_by_position(model, [o.name for o in model.graph.output], list(job.source.signature.outputs))
        onnx.save(model, str(path))
        return onnx_artifact(path, job.opset)
