"""TensorRT engines, built as TensorRT 11 builds every network: strongly typed, each tensor in the type the ONNX graph
gives it. The precision comes from the graph, not from builder flags (TensorRT 11 removed FP16/INT8 flags and
calibrators): ``trt`` builds from the exported FP32 ONNX (TF32 off), ``trt:fp16`` from the validated ``fp16`` pass's
FP16 ONNX, ``trt:int8`` from the validated ``int8`` pass's Q/DQ ONNX (explicit quantization, calibrated there). Each
starts from that artifact only once it passed validation (``OptimizerSpec.starts_from``). An engine is built with one
optimization profile whose dynamic axes span each symbol's ``--shape-range``. Engines are executable code for one GPU
and one TensorRT version, so the runner loads only engines this process built: their sha256 is kept in
``ENGINES_BUILT_THIS_RUN``.

Written against TensorRT 11's Python API; this project's machines have neither TensorRT nor an NVIDIA GPU, so it has
not run there.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.tensorrt import ENGINES_BUILT_THIS_RUN, tensorrt_missing
from convert.devices import absent_reason
from convert.errors import ConvertError
from convert.optimizers.base import OptimizeJob, Optimizer
from convert.specs import InputSpec

WORKSPACE_BYTES = 4 << 30  # a cap on tactic scratch memory; TensorRT allocates only what it uses
Shape = tuple[int, ...]


def timing_cache_path() -> Path:
    """Where tactic timings are kept between runs, so a rebuild of a similar network is faster."""
    root = os.environ.get("CONVERT_CACHE_DIR")
    return (Path(root) if root else Path.home() / ".cache" / "model-convert") / "tensorrt-timing.cache"


def profile_shapes(
    network_inputs: list[tuple[str, Shape]], specs: tuple[InputSpec, ...] | list[InputSpec], shape_ranges: dict[str, tuple[int, int, int]]
) -> dict[str, tuple[Shape, Shape, Shape]]:
    """(min, opt, max) shapes of each network input: an axis the ONNX graph leaves dynamic (-1) takes the
    range of the symbol the input spec names there; fixed axes stay fixed."""
    by_name = {spec.name: spec for spec in specs}
    profile = {}
    for name, dims in network_inputs:
        spec = by_name.get(name)
        low, opt, high = [], [], []
        for axis, size in enumerate(dims):
            dim = spec.dims[axis] if spec is not None and axis < len(spec.dims) else None
            if size < 0 and isinstance(dim, int):
                size = dim  # the spec fixes an axis the graph left open
            if size >= 0:
                sizes = (size, size, size)
            elif isinstance(dim, str) and dim in shape_ranges:
                sizes = shape_ranges[dim]
            else:
                named = f" (symbol {dim})" if isinstance(dim, str) else ""
                raise ConvertError(
                    f"the TensorRT optimization profile needs a size range for axis {axis} of input '{name}', "
                    f"which is dynamic in the ONNX graph{named}, and none is known",
                    'Name the axis with a symbol in --input (e.g. "x:float32[B,3,224,224]") and give its range '
                    "with --shape-range SYMBOL=MIN..OPT..MAX.",
                )
            for bound, value in zip((low, opt, high), sizes):
                bound.append(value)
        profile[name] = (tuple(low), tuple(opt), tuple(high))
    return profile


TENSORRT_MAJOR = 11  # strongly typed networks only: the version this pass is written for


class TensorRtFp32(Optimizer):
    detail = "FP32 ONNX, TF32 off"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        reason = tensorrt_missing() or absent_reason("cuda")
        if reason is None:
            import tensorrt as trt

            major = int(trt.__version__.split(".")[0])
            if major < TENSORRT_MAJOR:
                reason = (
                    f"TensorRT {trt.__version__} is installed, and the {cls.name} pass builds strongly typed networks as "
                    f"TensorRT {TENSORRT_MAJOR} does: pip install 'model-convert[tensorrt]' (tensorrt>={TENSORRT_MAJOR})"
                )
        return reason

    def strategies(self, job: OptimizeJob):
        return [(f"TensorRT build_serialized_network, strongly typed ({self.detail})", lambda path: self._build(job, path))]

    def _build(self, job: OptimizeJob, path: Path) -> Artifact:
        import tensorrt as trt

        logger = trt.Logger(trt.Logger.WARNING)
        builder = trt.Builder(logger)
        network = builder.create_network(0)  # strongly typed: the only kind TensorRT 11 builds
        parser = trt.OnnxParser(network, logger)
        if not parser.parse_from_file(str(job.base.path)):
            errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
            raise RuntimeError(f"TensorRT's ONNX parser rejected {job.base.path.name}: {errors or 'no detail given'}")

        config = builder.create_builder_config()
        config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
        config.profiling_verbosity = trt.ProfilingVerbosity.DETAILED  # the inspector's layer types attest its precision
        if hasattr(trt.BuilderFlag, "TF32"):
            config.clear_flag(trt.BuilderFlag.TF32)  # TF32 rounds FP32 matmul inputs to 10 bits: not an FP32 engine
        inputs = [network.get_input(i) for i in range(network.num_inputs)]
        profile = builder.create_optimization_profile()
        for name, (low, opt, high) in profile_shapes([(t.name, tuple(t.shape)) for t in inputs], job.base.inputs, job.shape_ranges).items():
            profile.set_shape(name, low, opt, high)
        config.add_optimization_profile(profile)
        timing_cache = _attach_timing_cache(config)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            raise RuntimeError("TensorRT could not build the engine (its warnings and errors are on stderr)")
        _save_timing_cache(timing_cache)

        engine = bytes(serialized)
        path.write_bytes(engine)
        ENGINES_BUILT_THIS_RUN.add(hashlib.sha256(engine).hexdigest())
        symbols = {dim for spec in job.base.inputs for dim in spec.symbols}
        bounds = {symbol: (low, high) for symbol, (low, _, high) in job.shape_ranges.items() if symbol in symbols}
        return Artifact(format=self.format, path=path, files=[path], dim_bounds=bounds)


class TensorRtFp16(TensorRtFp32):
    detail = "the fp16 pass's FP16 ONNX"


class TensorRtInt8(TensorRtFp32):
    detail = "the int8 pass's Q/DQ ONNX, explicit quantization"


def _attach_timing_cache(config):
    """Give the build the saved timing cache; a missing, corrupt or foreign one is replaced by an empty one."""
    try:
        blob = timing_cache_path().read_bytes()
    except OSError:
        blob = b""
    cache = None
    if blob:
        try:
            cache = config.create_timing_cache(blob)
        except Exception:  # noqa: BLE001 - whatever the file holds, the build goes on with a fresh cache
            cache = None
    if cache is None or not config.set_timing_cache(cache, ignore_mismatch=False):
        cache = config.create_timing_cache(b"")
        config.set_timing_cache(cache, ignore_mismatch=False)
    return cache


def _save_timing_cache(cache) -> None:
    """Write the timing cache atomically; failing to write it only costs time on the next build."""
    path = timing_cache_path()
    temporary = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
        with os.fdopen(handle, "wb") as stream:
            stream.write(memoryview(cache.serialize()))
        os.replace(temporary, path)
    except OSError:
        if temporary is not None:
            Path(temporary).unlink(missing_ok=True)
