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
    """Memory available to this process: the system's available memory, within a cgroup's limit when there is one."""
    import psutil

    available = psutil.virtual_memory().available
    try:
        limit, used = (_CGROUP / "memory.max").read_text().strip(), (_CGROUP / "memory.current").read_text().strip()
    except OSError:
        return available
    return min(available, int(limit) - int(used)) if limit.isdigit() and used.isdigit() else available


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
