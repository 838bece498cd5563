"""ONNX from Keras / TensorFlow: tf2onnx on the serving function first; Keras's own ONNX export
(``Model.export(format="onnx")``) as the recorded fallback for Keras models."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.onnx import onnx_artifact, rename_by_position
from convert.exporters.tf_common import input_signature, serving_function
from convert.sources.keras import tensorflow

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


class KerasToOnnx(Exporter):
    format = "onnx"
    name = "keras-onnx"
    suffix = ".onnx"

    def strategies(self, job: ExportJob):
        strategies = [("tf2onnx.convert.from_function", lambda path: self._tf2onnx(job, path))]
        if job.source.is_keras:
            strategies.append(("keras.Model.export(format='onnx')", lambda path: self._keras(job, path)))
        return strategies

    def _tf2onnx(self, job: ExportJob, path: Path) -> Artifact:
        import tf2onnx

        tf = tensorflow()
        _register_missing_tf2onnx_ops()
        signature = input_signature(job)
        function = tf.function(serving_function(job), input_signature=signature)
        tf2onnx.convert.from_function(function, input_signature=signature, opset=job.opset or DEFAULT_OPSET, output_path=str(path))
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
