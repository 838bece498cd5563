"""ONNX Runtime: the CPU execution provider, and the CUDA one where a GPU and onnxruntime-gpu are present."""

from __future__ import annotations

import ctypes

import numpy as np

from convert.errors import ArtifactUnsupported
from convert.runtimes.base import InputMeta, Runner, bfloat16_bits, from_bfloat16_bits
from convert.text import first_line

BFLOAT16 = 16  # onnx.TensorProto.BFLOAT16

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
    bfloat16_io: bool | None = None

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
        else:
            # a session that is not timed does not spin its idle threads: they would take the cores the source model's
            # framework and anything else on the machine compute on between its runs
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if self.weights_exceed_memory():
            # ONNX Runtime maps page-aligned external data from its file, and pre-packing copies every matrix product's
            # weight into memory of its own: without it the weights are read from the file as they are used
            options.add_session_config_entry("session.disable_prepacking", "1")
            self.memory_mapped = True
        try:
            self.session = onnxruntime.InferenceSession(str(self.path), options, providers=[PROVIDERS[self.device]])
        except Exception as exc:
            if self.device == "cpu" and "NOT_IMPLEMENTED" in str(exc) and _computes_in_bfloat16(self.path):
                raise ArtifactUnsupported(
                    f"ONNX Runtime's CPU provider has no bfloat16 kernel for this graph ({first_line(str(exc))}); a bfloat16 "
                    "artifact runs on its CUDA provider, or on OpenVINO (--optimize openvino), or convert with --dtype float32"
                ) from None
            raise
        if self.session.get_providers()[0] != PROVIDERS[self.device]:
            raise RuntimeError(f"onnxruntime fell back to {self.session.get_providers()[0]} instead of {PROVIDERS[self.device]}")
        self.output_names = [o.name for o in self.session.get_outputs()]

    def deactivate(self) -> None:
        self.session = None
        self.bfloat16_io = None

    def _find_bfloat16_io(self) -> None:
        # found once per session, as _infer is what benchmarks time (and a subclass may open its own session): the inputs
        # fed as bfloat16 bits, and whether any tensor needs OrtValues
        self.bfloat16_inputs = {i.name for i in self.session.get_inputs() if i.type == "tensor(bfloat16)"}
        self.bfloat16_io = bool(self.bfloat16_inputs) or any(o.type == "tensor(bfloat16)" for o in self.session.get_outputs())

    def input_metadata(self) -> dict[str, InputMeta]:
        return _metadata(self.session.get_inputs())

    def output_metadata(self) -> dict[str, InputMeta]:
        return _metadata(self.session.get_outputs())

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self.bfloat16_io is None:
            self._find_bfloat16_io()
        if not self.bfloat16_io:
            values = self.session.run(self.output_names, feed)
            return dict(zip(self.output_names, (np.asarray(v) for v in values)))
        import onnxruntime

        # NumPy has no bfloat16: such inputs go in, and outputs come out, as OrtValues of their bits
        feed = {
            name: onnxruntime.OrtValue.ortvalue_from_numpy_with_onnx_type(bfloat16_bits(value), BFLOAT16)
            if name in self.bfloat16_inputs
            else value
            for name, value in feed.items()
        }
        values = self.session.run_with_ort_values(self.output_names, {n: _ort_value(onnxruntime, v) for n, v in feed.items()})
        return {name: _from_ort_value(value) for name, value in zip(self.output_names, values)}


def _ort_value(onnxruntime, value):
    return value if isinstance(value, onnxruntime.OrtValue) else onnxruntime.OrtValue.ortvalue_from_numpy(np.asarray(value, order="C"))


def _from_ort_value(value) -> np.ndarray:
    if value.data_type() != "tensor(bfloat16)":
        return np.asarray(value.numpy())
    # numpy() of a bfloat16 OrtValue raises (NumPy has no bfloat16): its bits are copied out of its memory and widened
    if value.device_name().lower() != "cpu":
        raise RuntimeError(f"a bfloat16 output on {value.device_name()} cannot be read here: only host memory is")
    count = int(np.prod(value.shape(), dtype=np.int64))
    bits = np.ctypeslib.as_array((ctypes.c_uint16 * count).from_address(value.data_ptr())) if count else np.zeros(0, np.uint16)
    return from_bfloat16_bits(bits.copy()).reshape(value.shape())


def _computes_in_bfloat16(path) -> bool:
    """Whether the graph holds a bfloat16 tensor (its graph read without the weights' external data)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    graph = model.graph
    typed = [*graph.input, *graph.output, *graph.value_info]
    cast = any(n.op_type == "Cast" and any(a.name == "to" and a.i == BFLOAT16 for a in n.attribute) for n in graph.node)
    return cast or any(v.type.tensor_type.elem_type == BFLOAT16 for v in typed) or any(t.data_type == BFLOAT16 for t in graph.initializer)


def _metadata(values) -> dict[str, InputMeta]:
    return {v.name: InputMeta(_ORT_TYPES.get(v.type, v.type), tuple(v.shape)) for v in values}
