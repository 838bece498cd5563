"""OpenVINO runtime on the CPU plugin, always with the f32 inference precision hint: the CPU plugin's default
on CPUs with bf16 support is bf16, which would validate a different computation than the artifact's."""

from __future__ import annotations

import numpy as np

from convert.backends.openvino import F32_CPU, IR_NAME
from convert.runtimes.base import InputMeta, Runner


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
            meta[self._name(port, wanted)] = InputMeta(np.dtype(port.get_element_type().to_dtype()).name, shape)
        return meta

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = self.request.infer(feed)
        return {self._name(port, self.artifact.output_names): np.array(results[port]) for port in self.compiled.outputs}

    @staticmethod
    def _name(port, wanted) -> str:
        """A tensor can carry several names in OpenVINO; the one the artifact's source used, when present."""
        names = port.get_names()
        return next((name for name in wanted if name in names), port.get_any_name())
