"""What the TensorFlow-based exporters share: a serving function with named inputs and outputs, and a
SavedModel written with it as its ``serving_default`` signature.

A source they take gives ``call(named tensors) -> named tensors`` (traceable in a tf.function), ``trackable``
(the object whose variables the SavedModel holds) and ``is_keras``: Keras and TF SavedModel sources, and JAX
sources through jax2tf.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from convert.backends.tf import SERVING_KEY, tensorflow
from convert.exporters.base import ExportJob

_TF_NAME = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9_.\\/>-]*$")  # TensorFlow's op name rule


def input_signature(job: ExportJob) -> list[Any]:
    """One TensorSpec per input, named as the input, with None on every symbolic axis."""
    tf = tensorflow()
    for spec in job.source.signature.inputs:
        if not _TF_NAME.match(spec.name):
            raise ValueError(
                f"the input name {spec.name!r} cannot name a TensorFlow signature input "
                "(letters, digits and . _ / > - only, not starting with _ - / >): rename the model's input"
            )
    return [
        tf.TensorSpec(tuple(None if isinstance(d, str) else d for d in spec.dims), tf.as_dtype(spec.dtype), name=spec.name)
        for spec in job.source.signature.inputs
    ]


def serving_function(job: ExportJob):
    """A plain function of the inputs in spec order that returns the source's outputs by name."""
    names = [spec.name for spec in job.source.signature.inputs]

    def serve(*tensors):
        return job.source.call(dict(zip(names, tensors)))

    return serve


def write_savedmodel(job: ExportJob, path: Path) -> None:
    """A SavedModel whose ``serving_default`` takes the named inputs (dynamic on symbolic axes)."""
    tf = tensorflow()
    if path.exists():
        shutil.rmtree(path)
    if job.source.is_keras:
        from convert.backends.tf import keras

        # Keras's ExportArchive tracks the model's variables so that TFLite can freeze them; a plain
        # tf.saved_model.save of a tf.Module holding a Keras 3 model gives a TFLite model reading uninitialised variables.
        archive = keras().export.ExportArchive()
        archive.track(job.source.trackable)
        archive.add_endpoint(name=SERVING_KEY, fn=serving_function(job), input_signature=input_signature(job))
        archive.write_out(str(path), verbose=False)
    else:
        function = tf.function(serving_function(job), input_signature=input_signature(job))
        tf.saved_model.save(job.source.trackable, str(path), signatures={SERVING_KEY: function})
