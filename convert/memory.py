"""The memory the validation inputs and reference outputs of a run need, checked against what the machine has.

A run keeps every generated input and every reference output of every shape case until it ends, and its worker
process holds a copy while it validates: a spec or ``--dim`` far too large for the machine is refused before the
reference stage runs for minutes and the process is killed. The estimate counts inputs and outputs, not the
model's own activations, so it is a lower bound.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from convert.errors import ConvertError

GIB = 1 << 30
_CGROUP = Path("/sys/fs/cgroup")


def available_bytes() -> int:
    """Memory available to this process: the system's available memory, within its cgroup's limit when there is one
    (cgroup v2's memory.max, or v1's memory.limit_in_bytes less the memory its processes hold, page cache not counted:
    the kernel reclaims it)."""
    import psutil

    available = psutil.virtual_memory().available
    limit = memory_limit_bytes()
    if limit is None:
        return available
    try:
        used = int((_CGROUP / "memory.current").read_text())
    except (OSError, ValueError):
        used = _cgroup_v1_held()
    return min(available, max(0, limit - used)) if used is not None else available


def memory_limit_bytes() -> int | None:
    """This process's cgroup memory limit; None where there is none (or none below the machine's memory)."""
    import psutil

    for path in (_CGROUP / "memory.max", _v1_folder() / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < psutil.virtual_memory().total:
            return int(text)
    return None


def _v1_folder() -> Path:
    """This process's cgroup v1 memory folder (/sys/fs/cgroup/memory/PATH, PATH from /proc/self/cgroup)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return _CGROUP / "memory"
    path = next((line.split(":", 2)[2] for line in lines if line.split(":")[1:2] == ["memory"]), "/")
    return _CGROUP / "memory" / path.lstrip("/")


def _cgroup_v1_held() -> int | None:
    """The anonymous memory the processes of this cgroup hold (v1's memory.stat total_rss)."""
    try:
        stat = dict(line.split() for line in (_v1_folder() / "memory.stat").read_text().splitlines())
        return int(stat["total_rss"])
    except (OSError, KeyError, ValueError):
        return None


def peak_rss_bytes(pids: list[int]) -> int | None:
    """The largest peak resident memory (VmHWM) of these processes since they started or since the last call, which
    resets each one's peak; None where /proc cannot tell (not Linux)."""
    peaks = []
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            peaks.append(int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) * 1024)
            Path(f"/proc/{pid}/clear_refs").write_text("5")
        except (OSError, StopIteration, ValueError):
            continue
    return max(peaks) if peaks else None


def feed_bytes(specs, sizes: dict[str, int]) -> int:
    """Bytes of one generated sample at these sizes."""
    return sum(math.prod(spec.shape(sizes)) * _itemsize(spec.dtype) for spec in specs)


def _itemsize(dtype: str) -> int:
    return 4 if dtype == "bfloat16" else np.dtype(dtype).itemsize  # bfloat16 is generated as float32


def check_fits(inputs: int, outputs: int | None, copies: int, largest: str, samples: int, cases: int) -> None:
    """Refuse when ``copies`` × (inputs + outputs) bytes exceed the memory available. ``outputs`` is None before the
    source has run (then the inputs alone are judged)."""
    need = copies * (inputs + (outputs or 0))
    available = available_bytes()
    if need <= available:
        return
    held = "this process and its worker both hold them" if copies > 1 else "this process holds them"
    out_text = f" and reference outputs {outputs / GIB:.1f} GiB" if outputs is not None else ""
    raise ConvertError(
        f"validating at these shapes needs about {need / GIB:.1f} GiB of memory and this machine has {available / GIB:.1f} GiB "
        f"available: the generated inputs take {inputs / GIB:.1f} GiB{out_text} ({samples} samples at each of {cases} shapes, "
        f"the largest {largest}), counted {copies}x as {held}; the model's own activations come on top",
        f"Lower the sizes of the symbolic dims with --dim (e.g. --dim B=2,1,5) or the fixed dims in --input, or use fewer "
        f"--samples (now {samples}).",
    )
