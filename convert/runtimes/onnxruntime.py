"""ONNX Runtime: the CPU execution provider, and the CUDA one where a GPU and onnxruntime-gpu are present."""

from __future__ import annotations

import numpy as np

from convert.runtimes.base import InputMeta, Runner

_ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(double)": "float64",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(int16)": "int16",
    "tensor(int8)": "int8",
    "tensor(uint8)": "uint8",
    "tensor(bool)": "bool",
    "tensor(bfloat16)": "bfloat16",
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider"}


class OnnxRuntimeRunner(Runner):
    pins_threads = True

    @classmethod
    def build_unavailable_reason(cls, device: str) -> str | None:
        import onnxruntime

        if PROVIDERS[device] not in onnxruntime.get_available_providers():
            return f"this onnxruntime build has no {PROVIDERS[device]} (install onnxruntime-gpu for CUDA)"
        return None

    def activate(self) -> None:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.log_severity_level = 3
        if self.threads:
            options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
        if self.weights_exceed_memory():
            # ONNX Runtime maps page-aligned external data from its file, and pre-packing copies every matrix product's
            # weight into memory of its own: without it the weights are read from the file as they are used
            options.add_session_config_entry("session.disable_prepacking", "1")
            self.memory_mapped = True
        self.session = onnxruntime.InferenceSession(str(self.path), options, providers=[PROVIDERS[self.device]])
        if self.session.get_providers()[0] != PROVIDERS[self.device]:
            raise RuntimeError(f"onnxruntime fell back to {self.session.get_providers()[0]} instead of {PROVIDERS[self.device]}")
        self.output_names = [o.name for o in self.session.get_outputs()]

    def deactivate(self) -> None:
        self.session = None

    def input_metadata(self) -> dict[str, InputMeta]:
        return _metadata(self.session.get_inputs())

    def output_metadata(self) -> dict[str, InputMeta]:
        return _metadata(self.session.get_outputs())

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self.session.run(self.output_names, feed)
        return dict(zip(self.output_names, (np.asarray(v) for v in values)))


def _metadata(values) -> dict[str, InputMeta]:
    return {v.name: InputMeta(_ORT_TYPES.get(v.type, v.type), tuple(v.shape)) for v in values}
