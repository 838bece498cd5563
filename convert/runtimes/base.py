"""The runner protocol: load an artifact once on one device, then run feeds of named arrays.

The base class checks every feed against the runner's input metadata (names, dtypes, ranks, fixed dims),
so each runtime does not have to. A runner that can read its artifact's declared output shapes reports them too:
validation holds the artifact to what it declares.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.devices import absent_reason
from convert.registry import FromSpec


@dataclass(frozen=True)
class InputMeta:
    """An input's (or output's) declared dtype and shape."""

    dtype: str
    shape: tuple[int | str | None, ...]  # None or a name where the dim is dynamic


def bfloat16_bits(array: np.ndarray) -> np.ndarray:
    """A float32 array as bfloat16 bit patterns (uint16), rounded to nearest even: NumPy has no bfloat16, so a
    bfloat16 input is fed as float32 (exact where its values came from bfloat16) and handed to the runtime as bits."""
    wide = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    return ((wide + 0x7FFF + ((wide >> 16) & 1)) >> 16).astype(np.uint16)


def from_bfloat16_bits(bits: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns (uint16, or any 2-byte view of them) as float32, exactly."""
    return (np.ascontiguousarray(bits).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


# Where a runtime's C++ code raised: ONNX Runtime's "/onnxruntime_src/…/reshape_helper.h:91 onnxruntime::ReshapeHelper::
# ReshapeHelper(const onnxruntime::TensorShape&, …) " before its reason, OpenVINO's "Exception from src/…/node.cpp:794:" and
# "failed at src/…/reshape.cpp:77:" around it. The function's signature (its parentheses nested one deep, a gcc
# "[with T = float]") goes with the location.
_SOURCE_LOCATION = re.compile(
    r"(?:Exception from |(?<=failed) at )?(?:[A-Za-z]:)?[\w./\\-]+\.(?:c|cc|cpp|cxx|cu|cuh|h|hh|hpp|hxx):\d+"
    r"(?: (?:[\w:<>,*&~]+ )*[\w:<>,*&~]*::[\w<>,*&~]+\((?:[^()]|\([^()]*\))*\)(?: const)?(?: \[with [^\]]*\])?)?"
)
RUNTIME_FAILURE_CHARS = 400  # as much of a runtime's reason as a check keeps; the CLI shows 400 characters of a reason


def runtime_failure(exc: BaseException, limit: int = RUNTIME_FAILURE_CHARS) -> str:
    """A runtime's error as one line that keeps its reason: the C++ source locations a runtime puts before it are
    dropped, and a line that ends at one (OpenVINO's) goes on with the next."""
    kept = ""
    for line in str(exc).splitlines():
        if not line.strip():
            continue
        stripped = _SOURCE_LOCATION.sub("", line).strip()
        stripped = "" if stripped == ":" else stripped  # a line that was only a location
        kept = f"{kept} {stripped}".strip() if stripped else kept
        if kept and not line.rstrip().endswith(":"):
            break
    text = re.sub(r"\s+", " ", f"{type(exc).__name__}: {kept}").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class FeedMismatch(Exception):
    """The feed does not fit the artifact's inputs (a validation failure, not a crash)."""


class Runner(abc.ABC):
    name = FromSpec()  # read from the class's registered spec (convert/runtimes/__init__.py)
    pins_threads = False  # whether ``threads`` sets this runtime's intra-op thread count (benchmarks pin them alike)
    cpu_only = ""  # set to the reason for runtimes that run on the CPU only
    gpu_only = ""  # set to the reason for runtimes that run on GPUs only

    def __init__(self, artifact: Artifact, device: str, threads: int | None = None):
        self.artifact = artifact
        self.device = device
        self.threads = threads  # None: the runtime's default
        self.path: Path = artifact.path
        self.memory_mapped = False  # activate() set the runtime to read the weights from their files as it uses them

    @classmethod
    def unavailable_reason(cls, device: str) -> str | None:
        """Why this runner cannot run on ``device`` here, or None when it can."""
        if cls.never_runs_on(device):
            return cls.cpu_only or cls.gpu_only
        return absent_reason(device) or cls.build_unavailable_reason(device)

    @classmethod
    def never_runs_on(cls, device: str) -> bool:
        """Whether the runtime cannot run on this kind of device anywhere (not a missing check, but no check to make)."""
        return bool(cls.cpu_only) and device != "cpu" or bool(cls.gpu_only) and device == "cpu"

    @classmethod
    def build_unavailable_reason(cls, device: str) -> str | None:
        """Why the installed runtime cannot use a device that is present (e.g. a CPU-only build)."""
        return None

    def weights_exceed_memory(self) -> bool:
        """Whether the artifact's files take more than half the memory available: a runtime that can then leaves its
        weights in their files (memory-mapped) rather than copying them into memory."""
        from convert.memory import available_bytes

        files = self.artifact.files or [self.path]
        return sum(f.stat().st_size for f in map(Path, files) if f.is_file()) > available_bytes() // 2

    def __enter__(self) -> Runner:
        self.activate()
        return self

    def __exit__(self, *exc) -> None:
        self.deactivate()

    @abc.abstractmethod
    def activate(self) -> None:
        """Load the artifact onto the device."""

    def deactivate(self) -> None:  # noqa: B027 (optional: a runner that holds nothing needs no release)
        """Release what activate() loaded."""

    @abc.abstractmethod
    def input_metadata(self) -> dict[str, InputMeta]: ...

    def output_metadata(self) -> dict[str, InputMeta] | None:
        """The outputs' declared dtypes and shapes by name, once activated; None where this runtime cannot read them."""
        return None

    @abc.abstractmethod
    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]: ...

    def infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.check_feed(feed)
        return self._infer(feed)

    def check_feed(self, feed: dict[str, np.ndarray]) -> None:
        meta = self.input_metadata()
        if set(feed) != set(meta):
            raise FeedMismatch(f"the artifact takes inputs {sorted(meta)} but was fed {sorted(feed)}")
        for name, expected in meta.items():
            array = feed[name]
            if str(array.dtype) != expected.dtype and (expected.dtype, str(array.dtype)) != ("bfloat16", "float32"):
                raise FeedMismatch(f"input '{name}' is {array.dtype} but the artifact takes {expected.dtype}")
            if array.ndim != len(expected.shape):
                raise FeedMismatch(f"input '{name}' has rank {array.ndim} but the artifact takes rank {len(expected.shape)}")
            for axis, (size, want) in enumerate(zip(array.shape, expected.shape)):
                if isinstance(want, int) and want != size:
                    raise FeedMismatch(f"input '{name}' has size {size} on axis {axis} but the artifact fixes it at {want}")
