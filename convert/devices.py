"""Which devices are present on this machine, found without importing any framework."""

from __future__ import annotations

import functools
import shutil
import subprocess

ALL_DEVICES = ("cpu", "cuda")


@functools.lru_cache(maxsize=1)
def cuda_gpus() -> tuple[str, ...]:
    """Names of the NVIDIA GPUs the driver reports (empty when there is none)."""
    if shutil.which("nvidia-smi") is None:
        return ()
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ()
    return tuple(line.strip() for line in listing.stdout.splitlines() if line.startswith("GPU "))


def present_devices() -> tuple[str, ...]:
    return ("cpu", "cuda") if cuda_gpus() else ("cpu",)


def absent_reason(device: str) -> str | None:
    if device == "cuda" and not cuda_gpus():
        return "no CUDA device on this machine"
    return None
