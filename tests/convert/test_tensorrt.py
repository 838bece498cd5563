"""The TensorRT pass and runner without a GPU: what they report when they cannot run, the rule that only engines
this process built are loaded, the optimization profile's shapes, and the timing cache's file handling.
Building and running engines needs TensorRT and a CUDA device, which these machines do not have."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from convert.artifacts import Artifact
from convert.backends.tensorrt import ENGINES_BUILT_THIS_RUN
from convert.cache import Hit, Lookup
from convert.devices import cuda_gpus
from convert.errors import ArtifactUnsupported, ConvertError
from convert.optimizers import tensorrt as trt_build
from convert.optimizers.tensorrt import (
    TensorRtFp16,
    TensorRtFp32,
    TensorRtInt8,
    profile_shapes,
    timing_cache_path,
)
from convert.pipeline.optimize import _lookup
from convert.registry import REGISTRY
from convert.runtimes.tensorrt import TensorRtRunner
from convert.specs import parse_input_spec
from tests.conftest import REPO

HAVE_TENSORRT = importlib.util.find_spec("tensorrt") is not None
INSTALL = "TensorRT is not installed: pip install 'model-convert[tensorrt]' on a machine with an NVIDIA GPU"


@pytest.mark.parametrize("optimizer", [TensorRtFp32, TensorRtFp16, TensorRtInt8])
def test_the_passes_say_why_they_cannot_run_here(optimizer):
    reason = optimizer.unavailable_reason()
    if not HAVE_TENSORRT:
        assert reason.startswith(INSTALL)
    elif not cuda_gpus():
        assert reason == "no CUDA device on this machine"
    else:
        pytest.skip("TensorRT and a CUDA device are both here: the passes run")


def test_the_runner_never_runs_on_the_cpu_and_says_why_not_on_cuda():
    assert TensorRtRunner.unavailable_reason("cpu") == "TensorRT runs on NVIDIA GPUs only"
    reason = TensorRtRunner.unavailable_reason("cuda")
    if not cuda_gpus():
        assert reason == "no CUDA device on this machine"
    elif not HAVE_TENSORRT:
        assert reason.startswith(INSTALL)


def test_the_modules_import_and_report_without_tensorrt():
    """Even where TensorRT is installed: with it blocked, both modules import and the pass reports the install."""
    code = (
        "import sys; sys.modules['tensorrt'] = None; sys.modules['cuda'] = None\n"
        "import convert.optimizers.tensorrt as o, convert.runtimes.tensorrt as r\n"
        "print(o.TensorRtFp32.unavailable_reason())\n"
        "print(r.TensorRtRunner.unavailable_reason('cpu'))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    optimizer_reason, runner_reason = done.stdout.splitlines()
    assert optimizer_reason.startswith(INSTALL)
    assert runner_reason == "TensorRT runs on NVIDIA GPUs only"


def test_the_runner_refuses_an_engine_this_run_did_not_build(tmp_path):
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"not an engine this process built")
    runner = TensorRtRunner(Artifact(format="tensorrt", path=engine), "cuda")
    with pytest.raises(ArtifactUnsupported, match="not built by this run"):
        runner.activate()


def test_the_runner_goes_past_the_check_for_an_engine_this_run_built(tmp_path, monkeypatch):
    """The same bytes, once recorded as built here, get to TensorRT (blocked here, so the import fails)."""
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"an engine this process built")
    digest = hashlib.sha256(engine.read_bytes()).hexdigest()
    monkeypatch.setitem(sys.modules, "tensorrt", None)
    ENGINES_BUILT_THIS_RUN.add(digest)
    try:
        with pytest.raises(ImportError):
            TensorRtRunner(Artifact(format="tensorrt", path=engine), "cuda").activate()
        engine.write_bytes(b"an engine this process built, changed on disk")
        with pytest.raises(ArtifactUnsupported, match="not built by this run"):
            TensorRtRunner(Artifact(format="tensorrt", path=engine), "cuda").activate()
    finally:
        ENGINES_BUILT_THIS_RUN.discard(digest)


def test_the_timing_cache_lives_under_convert_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CONVERT_CACHE_DIR", str(tmp_path / "cache"))
    assert timing_cache_path() == tmp_path / "cache" / "tensorrt-timing.cache"
    monkeypatch.delenv("CONVERT_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert timing_cache_path() == tmp_path / "home" / ".cache" / "model-convert" / "tensorrt-timing.cache"


class _FakeCache:
    def __init__(self, blob: bytes):
        self.blob = blob

    def serialize(self) -> bytes:
        return self.blob + b"+new timings"


class _FakeConfig:
    """The two IBuilderConfig calls the timing cache uses; a blob that is not a cache makes TensorRT return None."""

    def __init__(self):
        self.attached = None

    def create_timing_cache(self, blob: bytes):
        return None if blob.startswith(b"garbage") else _FakeCache(blob)

    def set_timing_cache(self, cache, ignore_mismatch: bool) -> bool:
        self.attached = cache
        return True


@pytest.mark.parametrize("on_disk, attached", [(None, b""), (b"saved timings", b"saved timings"), (b"garbage", b"")])
def test_the_timing_cache_is_loaded_or_started_afresh_then_saved(tmp_path, monkeypatch, on_disk, attached):
    monkeypatch.setenv("CONVERT_CACHE_DIR", str(tmp_path))
    if on_disk is not None:
        timing_cache_path().write_bytes(on_disk)
    config = _FakeConfig()
    cache = trt_build._attach_timing_cache(config)
    assert config.attached is cache and cache.blob == attached
    trt_build._save_timing_cache(cache)
    assert timing_cache_path().read_bytes() == attached + b"+new timings"
    assert [p.name for p in tmp_path.iterdir()] == ["tensorrt-timing.cache"]  # no temporary file left behind


SPECS = [parse_input_spec(text) for text in ("x:float32[B,3,S]", "mask:int64[B,S]", "scale:float32[4]", "y:float32[B,8]")]
RANGES = {"B": (1, 8, 32), "S": (16, 128, 512)}


def test_profile_shapes_give_each_dynamic_axis_its_symbols_range():
    shapes = profile_shapes([("x", (-1, 3, -1)), ("mask", (-1, -1)), ("scale", (4,)), ("y", (-1, -1))], SPECS, RANGES)
    assert shapes == {
        "x": ((1, 3, 16), (8, 3, 128), (32, 3, 512)),
        "mask": ((1, 16), (8, 128), (32, 512)),
        "scale": ((4,), (4,), (4,)),  # every dim fixed
        "y": ((1, 8), (8, 8), (32, 8)),  # the graph left an axis open that the spec fixes
    }


def test_profile_shapes_keep_what_the_graph_fixed():
    assert profile_shapes([("x", (2, 3, -1))], SPECS, RANGES) == {"x": ((2, 3, 16), (2, 3, 128), (2, 3, 512))}


@pytest.mark.parametrize(
    "network_inputs, ranges, names",
    [
        ([("x", (-1, 3, -1))], {"B": (1, 8, 32)}, ("axis 2 of input 'x'", "symbol S")),
        ([("unknown", (-1, 4))], RANGES, ("axis 0 of input 'unknown'",)),
    ],
)
def test_profile_shapes_refuse_a_dynamic_axis_with_no_range(network_inputs, ranges, names):
    with pytest.raises(ConvertError) as raised:
        profile_shapes(network_inputs, SPECS, ranges)
    for name in names:
        assert name in raised.value.problem
    assert "--shape-range" in raised.value.next_step


def test_the_passes_are_registered_with_their_files_and_precisions():
    from convert.registry import REGISTRY

    found = {e.name: e.load() for e in REGISTRY.entries("optimizer", format="tensorrt")}
    assert {name: (cls.artifact_suffix(), cls.precision) for name, cls in found.items()} == {
        "trt": (".engine", "fp32"),
        "trt:fp16": ("_fp16.engine", "fp16"),
        "trt:int8": ("_int8.engine", "int8"),
    }
    assert all(Path(f"m{cls.artifact_suffix()}").suffix == ".engine" for cls in found.values())


class _CacheThatWouldServeEverything:
    """A cache (a fake, named as such) whose every lookup would be a hit: a stage that consults it is recorded."""

    def __init__(self):
        self.consulted = []

    def find(self, kind, label, *parts, judge=None):
        self.consulted.append(label)
        return Lookup("key", (), Hit({}, None), judge)


@pytest.mark.parametrize("name", ["trt", "trt:fp16", "trt:int8"])
def test_an_engine_is_never_restored_from_the_cache_and_that_is_decided_before_tensorrt_is_imported(name):
    """A TensorRT engine is built for one GPU and driver, and its runner loads only engines this process built: its
    stage never asks the cache, even one that holds an entry for it, and the spec says so without importing TensorRT."""
    import textwrap

    probe = textwrap.dedent(
        f"""
        import sys
        from types import SimpleNamespace
        from convert.pipeline.optimize import _lookup
        from convert.registry import REGISTRY
        spec = REGISTRY.get("optimizer", {name!r})
        found = _lookup(SimpleNamespace(cache=None), SimpleNamespace(kind="optimize", name="optimize:{name}"), spec, {name!r}, None)
        assert found.hit is None and found.key is None, found
        print(sorted(m for m in sys.modules if m.startswith(("tensorrt", "convert.optimizers.tensorrt", "convert.runtimes.tensorrt"))))
        """
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # decided from the spec: neither TensorRT nor the pass's module was imported

    cache = _CacheThatWouldServeEverything()
    spec = REGISTRY.get("optimizer", name)
    assert spec.cacheable is False
    assert _lookup(SimpleNamespace(cache=cache), SimpleNamespace(kind="optimize", name=f"optimize:{name}"), spec, name, None).hit is None
    assert cache.consulted == []


def test_a_cacheable_pass_does_consult_the_cache_that_an_engine_never_does():
    """The same lookup for a pass whose results may be reused asks the cache (the test above could fail)."""
    cache = _CacheThatWouldServeEverything()
    ctx = SimpleNamespace(
        cache=cache, stem="m", artifacts={"onnx": SimpleNamespace(sha256="0" * 64)}, export_feed={}, calibration=None, profile_ranges={}
    )
    job = SimpleNamespace(keep_fp32=(), calibration_method="minmax", task=None, base=SimpleNamespace(precision="fp32", sha256="0" * 64))
    found = _lookup(ctx, SimpleNamespace(kind="optimize", name="optimize:fp16"), REGISTRY.get("optimizer", "fp16"), "fp16", job)
    assert found.hit is not None and cache.consulted == ["optimize:fp16"]


class _FakeTensorRt:
    """A fake of the TensorRT 11 Python API the build calls (for this tool's own build code; it builds nothing): it
    records what the build asks for, and has no precision flags, as TensorRT 11 has none."""

    __version__ = "11.5.0"

    def __init__(self):
        self.calls: list[tuple] = []
        fake = self

        class Network:
            num_inputs = 1

            def get_input(self, index):
                return SimpleNamespace(name="x", shape=(-1, 3, 32, 32))

        class Parser:
            num_errors = 0

            def __init__(self, network, logger):
                pass

            def parse_from_file(self, path):
                fake.calls.append(("parse", Path(path).name))
                return True

        class Profile:
            def set_shape(self, name, low, opt, high):
                fake.calls.append(("profile", name, low, opt, high))

        class Config:
            def set_memory_pool_limit(self, pool, size):
                pass

            def clear_flag(self, flag):
                fake.calls.append(("clear", flag))

            def set_flag(self, flag):
                fake.calls.append(("set", flag))

            def add_optimization_profile(self, profile):
                pass

            def create_timing_cache(self, blob):
                return SimpleNamespace(serialize=lambda: b"timings")

            def set_timing_cache(self, cache, ignore_mismatch):
                return True

            def __setattr__(self, name, value):
                fake.calls.append(("config", name, value))

        class Builder:
            def __init__(self, logger):
                pass

            def create_network(self, flags):
                fake.calls.append(("network", flags))
                return Network()

            def create_builder_config(self):
                return Config()

            def create_optimization_profile(self):
                return Profile()

            def build_serialized_network(self, network, config):
                return b"engine bytes"

        self.Builder, self.OnnxParser = Builder, Parser
        self.Logger = type("Logger", (), {"WARNING": 2, "__init__": lambda logger, level: None})
        self.MemoryPoolType = SimpleNamespace(WORKSPACE="workspace")
        self.ProfilingVerbosity = SimpleNamespace(DETAILED="detailed")
        self.BuilderFlag = SimpleNamespace(TF32="tf32")  # TensorRT 11 has no FP16, INT8 or calibration


@pytest.mark.parametrize("name, base", [("trt", "m.onnx"), ("trt:fp16", "m.fp16.onnx"), ("trt:int8", "m.int8.onnx")])
def test_an_engine_is_a_strongly_typed_network_of_the_onnx_graph_its_pass_starts_from(tmp_path, monkeypatch, name, base):
    """Each pass parses the validated ONNX of its precision, builds a strongly typed network, sets no precision flag
    (TensorRT 11 has none), keeps FP32 arithmetic out of TF32, and asks for the inspector's detailed layer types."""
    fake = _FakeTensorRt()
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setenv("CONVERT_CACHE_DIR", str(tmp_path / "cache"))
    (tmp_path / base).write_bytes(b"graph")
    job = SimpleNamespace(
        base=Artifact(format="onnx", path=tmp_path / base, inputs=(parse_input_spec("x:float32[B,3,32,32]"),)),
        shape_ranges={"B": (1, 8, 32)},
    )
    optimizer = REGISTRY.get("optimizer", name).load()()
    artifact = optimizer._build(job, tmp_path / "m.engine")
    assert REGISTRY.get("optimizer", name).starts_from == {"trt": "", "trt:fp16": "fp16", "trt:int8": "int8"}[name]
    assert fake.calls[:2] == [("network", 0), ("parse", base)]
    assert ("config", "profiling_verbosity", "detailed") in fake.calls and ("clear", "tf32") in fake.calls
    assert not [call for call in fake.calls if call[0] == "set"]
    assert ("profile", "x", (1, 3, 32, 32), (8, 3, 32, 32), (32, 3, 32, 32)) in fake.calls
    assert artifact.dim_bounds == {"B": (1, 32)} and (tmp_path / "m.engine").read_bytes() == b"engine bytes"
    assert hashlib.sha256(b"engine bytes").hexdigest() in ENGINES_BUILT_THIS_RUN


def test_tensorrt_10_is_refused_with_the_version_the_passes_need(monkeypatch):
    """A fake TensorRT 10 module (weakly typed builds): the passes say they need 11, where a GPU is here."""
    fake = _FakeTensorRt()
    fake.__version__ = "10.8.0"
    monkeypatch.setitem(sys.modules, "tensorrt", fake)
    monkeypatch.setattr(trt_build, "tensorrt_missing", lambda: None)
    monkeypatch.setattr(trt_build, "absent_reason", lambda device: None)
    reason = TensorRtFp16.unavailable_reason()
    assert "TensorRT 10.8.0 is installed" in reason and "tensorrt>=11" in reason


def test_an_engine_pass_runs_after_the_pass_whose_onnx_it_builds_from():
    from convert.pipeline.plan import check_optimizations

    assert check_optimizations(["trt:fp16"], ["onnx"]) == (["fp16", "trt:fp16"], False)
    assert check_optimizations(["trt:int8", "fp16", "int8"], ["onnx"]) == (["int8", "trt:int8", "fp16"], False)


def test_an_engine_is_not_built_from_an_fp16_graph_that_failed_validation(tmp_path, monkeypatch):
    """trt:fp16 starts from the validated fp16 artifact: where that fails its budget, the engine pass is skipped with
    why (never built from a graph known to be wrong). TensorRT is not here, so its absence is faked away (the pass's
    own availability, for this tool's ordering of reasons); where it is absent, that is the reason given first."""
    import convert

    model = "fixtures.torch_models:build_cnn"
    options = dict(inputs=["x:float32[B,3,32,32]"], to=["onnx"], optimize=["trt:fp16"], isolate=False, cache=False)
    plain = convert.convert(model, out=tmp_path / "plain", **options)
    stages = {s.name: s for s in plain.report.stages}
    assert stages["optimize:fp16"].status == "ok" and stages["optimize:trt:fp16"].status == "skipped"
    if not HAVE_TENSORRT:
        assert stages["optimize:trt:fp16"].reason.startswith(INSTALL)
    monkeypatch.setattr(TensorRtFp16, "unavailable_reason", classmethod(lambda cls: None))
    strict = convert.convert(model, out=tmp_path / "strict", accuracy=["max_abs<=1e-9"], **options)
    stages = {s.name: s for s in strict.report.stages}
    assert strict.exit_code == 1 and stages["optimize:trt:fp16"].status == "skipped"
    assert stages["optimize:trt:fp16"].reason == "the fp16 artifact it starts from failed validation"
