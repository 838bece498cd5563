"""TensorFlow runtimes: a SavedModel's serving signature, and the TFLite interpreter (CPU only).

Both load only artifacts this run wrote.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from convert.runtimes.base import ArtifactUnsupported, InputMeta, Runner
from convert.sources.keras import SERVING_KEY, native_stderr_silenced, tensorflow, to_numpy

_DEVICES = {"cpu": "/CPU:0", "cuda": "/GPU:0"}


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


class SavedModelRunner(Runner):
    name = "tensorflow"

    @classmethod
    def build_unavailable_reason(cls, device: str) -> str | None:
        tf = tensorflow()
        if device == "cuda" and not tf.config.list_physical_devices("GPU"):
            return f"this tensorflow build ({tf.__version__}) sees no GPU"
        return None

    def activate(self) -> None:
        tf = tensorflow()
        with tf.device(_DEVICES[self.device]):
            self.loaded = tf.saved_model.load(str(self.path))
        self.function = self.loaded.signatures[SERVING_KEY]

    def deactivate(self) -> None:
        self.loaded = self.function = None

    def input_metadata(self) -> dict[str, InputMeta]:
        _, kwargs = self.function.structured_input_signature
        return {name: InputMeta(spec.dtype.name, tuple(spec.shape.as_list())) for name, spec in kwargs.items()}

    def output_metadata(self) -> dict[str, InputMeta] | None:
        outputs = self.function.structured_outputs
        if not isinstance(outputs, dict):
            return None
        return {
            name: InputMeta(value.dtype.name, tuple(value.shape.as_list()))
            for name, value in outputs.items()
            if value.shape.rank is not None
        }

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tf = tensorflow()
        with tf.device(_DEVICES[self.device]):
            outputs = self.function(**{name: tf.constant(value) for name, value in feed.items()})
        return {name: to_numpy(value) for name, value in outputs.items()}


class TfliteRunner(Runner):
    name = "tflite"
    pins_threads = True
    cpu_only = "the TFLite interpreter runs on the CPU only"

    def activate(self) -> None:
        self.interpreter = tflite_interpreter(self.path, threads=self.threads)
        self.inputs, self.outputs = signature_details(self.interpreter)

    def deactivate(self) -> None:
        self.interpreter = None

    def input_metadata(self) -> dict[str, InputMeta]:
        return _tflite_metadata(self.inputs)

    def output_metadata(self) -> dict[str, InputMeta]:
        return _tflite_metadata(self.outputs)

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = self.inputs
        # strict: only axes the model declares dynamic (-1) may change size; a failure here is the artifact's fault
        for name, value in feed.items():
            self.interpreter.resize_tensor_input(inputs[name]["index"], value.shape, strict=True)
        self.interpreter.allocate_tensors()
        for name, value in feed.items():
            self.interpreter.set_tensor(inputs[name]["index"], value)
        self.interpreter.invoke()
        return {name: self.interpreter.get_tensor(d["index"]).copy() for name, d in self.outputs.items()}


def _tflite_metadata(details: dict[str, dict]) -> dict[str, InputMeta]:
    return {
        name: InputMeta(np.dtype(d["dtype"]).name, tuple(None if n == -1 else int(n) for n in d["shape_signature"]))
        for name, d in details.items()
    }
