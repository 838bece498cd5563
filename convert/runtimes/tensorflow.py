"""TensorFlow runtimes: a SavedModel's serving signature, and the TFLite interpreter (CPU only).

Both load only artifacts this run wrote.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from convert.runtimes.base import InputMeta, Runner
from convert.sources.keras import SERVING_KEY, tensorflow, to_numpy

_DEVICES = {"cpu": "/CPU:0", "cuda": "/GPU:0"}


def tflite_interpreter(path: Path):
    tf = tensorflow()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter warns that it moves to the ai-edge-litert package
        return tf.lite.Interpreter(model_path=str(path))


class SavedModelRunner(Runner):
    name = "tensorflow"

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        reason = super().unavailable_reason(device)
        if reason:
            return reason
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

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tf = tensorflow()
        with tf.device(_DEVICES[self.device]):
            outputs = self.function(**{name: tf.constant(value) for name, value in feed.items()})
        return {name: to_numpy(value) for name, value in outputs.items()}


class TfliteRunner(Runner):
    name = "tflite"

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        if device != "cpu":
            return "the TFLite interpreter runs on the CPU only"
        return super().unavailable_reason(device)

    def activate(self) -> None:
        self.interpreter = tflite_interpreter(self.path)
        self.runner = self.interpreter.get_signature_runner(SERVING_KEY)

    def deactivate(self) -> None:
        self.interpreter = self.runner = None

    def input_metadata(self) -> dict[str, InputMeta]:
        return {name: InputMeta(np.dtype(d["dtype"]).name, tuple(None if n == -1 else int(n) for n in d["shape_signature"]))
                for name, d in self.runner.get_input_details().items()}

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        outputs = self.runner(**feed)  # the signature runner resizes the inputs to the feed's shapes
        return {name: np.array(value, copy=True) for name, value in outputs.items()}
