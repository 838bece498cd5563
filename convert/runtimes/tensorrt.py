"""TensorRT runtime: runs an engine this process built on the CUDA device, through cuda-python's runtime API.

A TensorRT engine is executable code: deserializing one runs what it holds. The runner loads only engines
whose sha256 the TensorRT optimizer recorded in this process, and checks that before importing TensorRT.
"""

from __future__ import annotations

import hashlib

import numpy as np

from convert.backends.tensorrt import ENGINES_BUILT_THIS_RUN, DeviceBuffers, cuda_call, cudart, tensorrt_missing
from convert.errors import ArtifactUnsupported
from convert.runtimes.base import InputMeta, Runner

NOT_BUILT_HERE = "the engine was not built by this run: TensorRT engines are executable and only engines this run built are loaded"


class TensorRtRunner(Runner):
    gpu_only = "TensorRT runs on NVIDIA GPUs only"
    runtime = engine = context = stream = buffers = None

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        return super().unavailable_reason(device) or tensorrt_missing()

    def activate(self) -> None:
        serialized = self.path.read_bytes()
        if hashlib.sha256(serialized).hexdigest() not in ENGINES_BUILT_THIS_RUN:
            raise ArtifactUnsupported(NOT_BUILT_HERE)
        import tensorrt as trt

        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(serialized)
        if self.engine is None:
            raise RuntimeError("TensorRT could not deserialize the engine (its errors are on stderr)")
        self.context = self.engine.create_execution_context()
        if self.context is None:
            raise RuntimeError("TensorRT could not create an execution context (its errors are on stderr)")
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if n not in self.inputs]
        self.dtypes = {n: _numpy_dtype(trt, n, self.engine.get_tensor_dtype(n)) for n in names}
        shape_inputs = [n for n in self.inputs if self.engine.is_shape_inference_io(n)]
        if shape_inputs:
            raise ArtifactUnsupported(f"the engine takes shape tensors {shape_inputs} in host memory, which this runner does not feed")
        self.buffers = DeviceBuffers()
        self.stream = cuda_call(cudart().cudaStreamCreate())

    def deactivate(self) -> None:
        if self.buffers is not None:
            self.buffers.free()
        if self.stream is not None:
            cuda_call(cudart().cudaStreamDestroy(self.stream))
        # the context before the engine, the engine before the runtime that made it
        self.context = self.engine = self.runtime = self.buffers = self.stream = None

    def input_metadata(self) -> dict[str, InputMeta]:
        return {
            name: InputMeta(self.dtypes[name], tuple(None if d < 0 else d for d in self.engine.get_tensor_shape(name)))
            for name in self.inputs
        }

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        runtime = cudart()
        for name in self.inputs:
            array = np.asarray(feed[name], order="C")  # rank 0 kept (np.ascontiguousarray makes it rank 1)
            if not self.context.set_input_shape(name, array.shape):
                raise RuntimeError(f"TensorRT refused shape {array.shape} for input '{name}' (outside the engine's profile?)")
            self._bind(name, self.buffers.upload(name, array, self.stream))
        results = {}
        for name in self.outputs:
            shape = tuple(self.context.get_tensor_shape(name))  # known once every input shape is set
            if any(d < 0 for d in shape):
                raise RuntimeError(f"output '{name}' has a data-dependent shape {shape}, which this runner does not support")
            results[name] = np.empty(shape, dtype=self.dtypes[name])
            self._bind(name, self.buffers.get(name, results[name].nbytes))
        if not self.context.execute_async_v3(int(self.stream)):
            raise RuntimeError("TensorRT failed to run the engine (its errors are on stderr)")
        kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost
        for name, array in results.items():
            source = self.buffers.get(name, array.nbytes)
            cuda_call(runtime.cudaMemcpyAsync(array.ctypes.data, source, array.nbytes, kind, self.stream))
        cuda_call(runtime.cudaStreamSynchronize(self.stream))
        return results

    def _bind(self, name: str, pointer: int) -> None:
        if not self.context.set_tensor_address(name, pointer):
            raise RuntimeError(f"TensorRT refused the device address for tensor '{name}'")


def _numpy_dtype(trt, name: str, dtype) -> str:
    try:
        return np.dtype(trt.nptype(dtype)).name
    except TypeError as exc:  # BF16, FP8, INT4 have no NumPy type
        raise ArtifactUnsupported(f"tensor '{name}' is TensorRT {dtype}, which has no NumPy type to feed or read") from exc
