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


# the inspector's "Format/Datatype" words, in the precision report's spelling (the first that a description holds)
_ENGINE_TYPES = (("FP32", "fp32"), ("FP16", "fp16"), ("BF16", "bf16"), ("FP8", "fp8"), ("Int8", "int8"), ("INT8", "int8"), ("Int4", "int4"))
_ENGINE_PRODUCTS = ("Convolution", "Deconvolution", "MatrixMultiply", "FullyConnected")


def engine_precision(path, input_shapes: dict[str, list[int]]):
    """What an engine this process built computes in, from TensorRT's engine inspector (the engine is built with
    detailed profiling verbosity): each layer's first input type, sized where its parameters say how."""
    import hashlib
    import json

    from convert.precision import Measured, NotMeasured

    missing = tensorrt_missing()
    if missing:
        raise NotMeasured(missing)
    serialized = path.read_bytes()
    if hashlib.sha256(serialized).hexdigest() not in ENGINES_BUILT_THIS_RUN:
        raise NotMeasured("only engines built in this run are deserialized (an engine runs its plugins' code)")
    import tensorrt as trt

    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine(serialized)
    inspector = engine.create_engine_inspector()
    context = engine.create_execution_context()
    for name, shape in input_shapes.items():
        context.set_input_shape(name, shape)
    inspector.execution_context = context
    products = engine_products(json.loads(inspector.get_engine_information(trt.LayerInformationFormat.JSON)))
    return Measured(products, how="the engine's layers (TensorRT's engine inspector)")


def engine_products(information: dict) -> list:
    """The matrix products of an engine inspector's JSON (``Layers``, each with ``ParameterType``, ``Inputs`` and
    ``Outputs`` carrying ``Dimensions`` and ``Format/Datatype``, and ``Weights`` with their ``Type`` and ``Count``), and
    the fused layers (``Myelin``) unsized by the type they read."""
    import math

    from convert.precision import MatrixProduct

    def precision(description: str) -> str:
        return next((name for word, name in _ENGINE_TYPES if word in description), "other")

    products = []
    for layer in information.get("Layers", []):
        if not isinstance(layer, dict) or not layer.get("Inputs"):
            continue
        kind = layer.get("ParameterType") or layer.get("LayerType", "")
        if kind not in _ENGINE_PRODUCTS and "Myelin" not in kind:
            continue
        first, output = layer["Inputs"][0], (layer.get("Outputs") or [{}])[0]
        compute = precision(first.get("Format/Datatype", ""))
        weights = layer.get("Weights") or {}
        stored = {"Float": "fp32", "Half": "fp16", "Int8": "int8", "BFloat16": "bf16", "FP8": "fp8", "Int4": "int4"}.get(
            weights.get("Type", "")
        )
        macs = None
        dims, count = output.get("Dimensions"), weights.get("Count")
        into = first.get("Dimensions")
        if kind in ("Convolution", "FullyConnected") and dims and count and len(dims) > 1 and dims[1] > 0:
            macs = math.prod(dims) * count // dims[1]  # each output element: its weights over the output channels
        elif kind == "Deconvolution" and into and count and len(into) > 1 and into[1] > 0:
            macs = math.prod(into) * count // into[1]  # each input element spreads over its weights per input channel
        elif kind == "MatrixMultiply" and dims and into:
            macs = math.prod(dims) * into[-1]
        products.append(MatrixProduct(kind, layer.get("Name", ""), macs if macs and macs > 0 else None, compute, stored))
    return products
