"""TensorRT as the optimizer and the runtime share it: whether it can be used here, cuda-python's runtime API and
device buffers, and the engines this process built.

A TensorRT engine is executable code: deserializing one runs what it holds. The optimizer records the sha256 of every
engine it writes in ``ENGINES_BUILT_THIS_RUN``, and the runner loads only those.
"""

from __future__ import annotations

import functools

import numpy as np

ENGINES_BUILT_THIS_RUN: set[str] = set()  # sha256 of every engine this process wrote


@functools.lru_cache(maxsize=1)
def tensorrt_missing() -> str | None:
    """Why TensorRT cannot be used from Python here (it or cuda-python is not installed), or None."""
    try:
        import tensorrt  # noqa: F401

        cudart()
    except (ImportError, OSError) as exc:  # OSError: a wheel whose shared libraries do not load
        return f"TensorRT is not installed: pip install 'model-convert[tensorrt]' on a machine with an NVIDIA GPU ({exc})"
    return None


@functools.lru_cache(maxsize=1)
def cudart():
    """cuda-python's CUDA runtime module (``cuda.bindings.runtime``; ``cuda.cudart`` before cuda-python 12.6)."""
    try:
        from cuda.bindings import runtime
    except ImportError:
        from cuda import cudart as runtime
    return runtime


def cuda_call(result):
    """The value(s) of a cuda-python call, which returns ``(error, *values)``; a failed call raises RuntimeError."""
    error, *values = result
    if error != cudart().cudaError_t.cudaSuccess:
        _, name = cudart().cudaGetErrorName(error)
        raise RuntimeError(f"CUDA call failed: {name.decode() if isinstance(name, bytes) else error}")
    return values[0] if len(values) == 1 else tuple(values)


class DeviceBuffers:
    """Device memory by tensor name, reused across runs and grown when a larger tensor needs it."""

    def __init__(self):
        self.allocations: dict[str, tuple[int, int]] = {}  # name -> (device pointer, bytes)

    def get(self, name: str, nbytes: int) -> int:
        pointer, size = self.allocations.get(name, (0, 0))
        if size < max(nbytes, 1):  # cudaMalloc(0) gives no pointer TensorRT accepts, so allocate at least 1 byte
            if pointer:
                cuda_call(cudart().cudaFree(pointer))
                del self.allocations[name]
            pointer = int(cuda_call(cudart().cudaMalloc(max(nbytes, 1))))
            self.allocations[name] = (pointer, max(nbytes, 1))
        return pointer

    def upload(self, name: str, array: np.ndarray, stream=None) -> int:
        """Copy ``array`` to the tensor's device buffer (on ``stream``, else synchronously); its pointer."""
        array = np.ascontiguousarray(array)
        pointer = self.get(name, array.nbytes)
        kind = cudart().cudaMemcpyKind.cudaMemcpyHostToDevice
        if stream is None:
            cuda_call(cudart().cudaMemcpy(pointer, array.ctypes.data, array.nbytes, kind))
        else:
            cuda_call(cudart().cudaMemcpyAsync(pointer, array.ctypes.data, array.nbytes, kind, stream))
        return pointer

    def free(self) -> None:
        allocations, self.allocations = self.allocations, {}
        for pointer, _ in allocations.values():
            cuda_call(cudart().cudaFree(pointer))
