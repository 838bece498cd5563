"""TensorFlow runtimes: a SavedModel's serving signature, and the TFLite interpreter (CPU only): LiteRT's
(ai-edge-litert) wherever it is installed, else TensorFlow's tf.lite.Interpreter. A report tells which ran by its
environment's packages: ai_edge_litert listed there is the interpreter that ran.

Both load artifacts this run wrote, or that the user gave to validate (a SavedModel folder only with --trust-code).
"""

from __future__ import annotations

import numpy as np

from convert.backends.tf import (
    SERVING_KEY,
    invoke_tflite,
    signature_details,
    tensorflow,
    tflite_interpreter,
    tflite_unavailable_reason,
    to_numpy,
)
from convert.runtimes.base import InputMeta, Runner

_DEVICES = {"cpu": "/CPU:0", "cuda": "/GPU:0"}


class SavedModelRunner(Runner):
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
    pins_threads = True
    cpu_only = "the TFLite interpreter runs on the CPU only"

    @classmethod
    def build_unavailable_reason(cls, device: str) -> str | None:
        return tflite_unavailable_reason()

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
        return invoke_tflite(self.interpreter, self.inputs, self.outputs, feed)


def _tflite_metadata(details: dict[str, dict]) -> dict[str, InputMeta]:
    return {
        name: InputMeta(np.dtype(d["dtype"]).name, tuple(None if n == -1 else int(n) for n in d["shape_signature"]))
        for name, d in details.items()
    }
