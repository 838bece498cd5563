"""OpenVINO runtime on the CPU plugin, always with the f32 inference precision hint: the CPU plugin's default
on CPUs with bf16 support is bf16, which would validate a different computation than the artifact's."""

from __future__ import annotations

import numpy as np

from convert.backends.openvino import F32_CPU, IR_NAME
from convert.runtimes.base import InputMeta, Runner, bfloat16_bits, from_bfloat16_bits


class OpenVinoRunner(Runner):
    pins_threads = True
    cpu_only = "OpenVINO's GPU plugin runs on Intel GPUs, not on a CUDA device"

    def activate(self) -> None:
        import openvino

        core = openvino.Core()
        config = {"PERFORMANCE_HINT": "LATENCY", **F32_CPU}  # one request at a time, as validation and benchmarks run it
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = self.threads
        self.compiled = core.compile_model(core.read_model(str(self.path / IR_NAME)), "CPU", config)
        self.request = self.compiled.create_infer_request()
        wanted = [s.name for s in self.artifact.inputs]
        # the inputs fed as bfloat16 bits, found once: _infer is what benchmarks time
        self.bfloat16_inputs = {self._name(p, wanted) for p in self.compiled.inputs if p.get_element_type() == openvino.Type.bf16}

    def deactivate(self) -> None:
        self.compiled = self.request = None

    def input_metadata(self) -> dict[str, InputMeta]:
        return self._metadata(self.compiled.inputs, [s.name for s in self.artifact.inputs])

    def output_metadata(self) -> dict[str, InputMeta]:
        ranked = [port for port in self.compiled.outputs if port.get_partial_shape().rank.is_static]
        return self._metadata(ranked, self.artifact.output_names)

    def _metadata(self, ports, wanted) -> dict[str, InputMeta]:
        meta = {}
        for port in ports:
            shape = tuple(d.get_length() if d.is_static else None for d in port.get_partial_shape())
            meta[self._name(port, wanted)] = InputMeta(_dtype_name(port.get_element_type()), shape)
        return meta

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import openvino

        feed = {
            name: openvino.Tensor(bfloat16_bits(value), value.shape, openvino.Type.bf16) if name in self.bfloat16_inputs else value
            for name, value in feed.items()
        }
        results = self.request.infer(feed)
        return {self._name(port, self.artifact.output_names): _as_numpy(port, results[port]) for port in self.compiled.outputs}

    @staticmethod
    def _name(port, wanted) -> str:
        """A tensor can carry several names in OpenVINO; the one the artifact's source used, when present."""
        names = port.get_names()
        return next((name for name in wanted if name in names), port.get_any_name())


def _dtype_name(element_type) -> str:
    # OpenVINO's to_dtype() of bf16 says float16: NumPy has no bfloat16
    return "bfloat16" if element_type.get_type_name() == "bf16" else np.dtype(element_type.to_dtype()).name


def _as_numpy(port, value) -> np.ndarray:
    """An output as NumPy: a bfloat16 one comes back from OpenVINO as its bits viewed as float16, and is widened to
    float32 from those bits (read as float16 its values would be wrong)."""
    value = np.array(value)
    return from_bfloat16_bits(value) if port.get_element_type().get_type_name() == "bf16" else value
