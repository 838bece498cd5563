"""TensorFlow as every layer uses it: imported quietly on first use, Keras, the serving signature's key, tensors to
NumPy, and the TFLite interpreter with its serving signature's tensor details."""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from convert.errors import ArtifactUnsupported, require

SERVING_KEY = "serving_default"


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """TensorFlow's C++ side writes to file descriptor 2 on import; keep that off the user's terminal."""
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def tensorflow():
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with native_stderr_silenced():
        return require("tensorflow", "tensorflow", "A Keras or TensorFlow model")


def keras():
    tensorflow()
    return require("keras", "tensorflow", "A Keras model")


def to_numpy(value) -> np.ndarray:
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def tflite_interpreter(path: Path, allocate: bool = True, threads: int | None = None):
    tf = tensorflow()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter warns that it moves to the ai-edge-litert package
        interpreter = tf.lite.Interpreter(model_path=str(path), num_threads=threads)
    if allocate:
        try:
            with native_stderr_silenced():  # the first allocation prints an INFO line about the XNNPACK delegate
                interpreter.allocate_tensors()
        except RuntimeError as exc:
            if "Select TensorFlow op" in str(exc):
                raise ArtifactUnsupported(
                    "the model uses TensorFlow ops through SELECT_TF_OPS (Flex), and the TFLite interpreter of this "
                    "TensorFlow build has no Flex delegate: run it where one is linked in"
                ) from exc
            raise
    return interpreter


def signature_details(interpreter) -> tuple[dict[str, dict], dict[str, dict]]:
    """Input and output tensor details of the serving signature, by signature name.

    Read through the signature's tensor indices: holding a SignatureRunner keeps numpy views of the
    interpreter's buffers alive, which makes every later resize_tensor_input fail.
    """
    signature = interpreter._get_full_signature_list()[SERVING_KEY]
    by_index = {d["index"]: d for d in interpreter.get_input_details() + interpreter.get_output_details()}
    return (
        {name: by_index[index] for name, index in signature["inputs"].items()},
        {name: by_index[index] for name, index in signature["outputs"].items()},
    )
