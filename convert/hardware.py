"""The CPU this run measures on, and what its instruction set lets a reduced-precision artifact gain, found without
importing any framework.

An INT8 artifact computes faster than FP32 only where the CPU has integer dot-product instructions (x86 VNNI in
AVX-512 or AVX, AMX; Arm's dot-product and matrix-multiply extensions); without them the runtimes widen INT8 to 16
or 32 bits and the gain is the smaller file. FP16 compute needs AVX512-FP16 or AMX-FP16 (Arm: half-precision SIMD);
elsewhere an FP16 artifact is converted back to FP32 as it runs.
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
from pathlib import Path

from convert.reports import model as rm

# the ISA features that decide inference speed, as Linux /proc/cpuinfo and macOS sysctl name them → our name
FEATURES = {
    "avx2": "avx2",
    "fma": "fma",
    "avx512f": "avx512f",
    "avx512_vnni": "avx512_vnni",
    "avx_vnni": "avx_vnni",
    "avx512_bf16": "avx512_bf16",
    "avx512_fp16": "avx512_fp16",
    "amx_tile": "amx",
    "amx_int8": "amx_int8",
    "amx_bf16": "amx_bf16",
    "amx_fp16": "amx_fp16",
    # Arm (Linux): dot product, 8-bit matrix multiply, BF16, half-precision SIMD, SVE
    "asimddp": "dotprod",
    "i8mm": "i8mm",
    "bf16": "bf16",
    "asimdhp": "fp16",
    "sve": "sve",
    # Apple silicon (sysctl hw.optional.arm.FEAT_*)
    "FEAT_DotProd": "dotprod",
    "FEAT_I8MM": "i8mm",
    "FEAT_BF16": "bf16",
    "FEAT_FP16": "fp16",
}
INT8_COMPUTE = ("avx512_vnni", "avx_vnni", "amx_int8", "dotprod", "i8mm")
FP16_COMPUTE = ("avx512_fp16", "amx_fp16", "fp16")


@functools.lru_cache(maxsize=1)
def cpu_info() -> rm.CpuInfo:
    model, flags = _cpuinfo()
    features = sorted({ours for name, ours in FEATURES.items() if name in flags})
    return rm.CpuInfo(
        model=model or platform.processor() or platform.machine(),
        architecture=platform.machine(),
        logical_cores=os.cpu_count() or 1,
        usable_cores=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1),
        features=features,
        int8_compute=any(f in features for f in INT8_COMPUTE),
        fp16_compute=any(f in features for f in FP16_COMPUTE),
        known=bool(flags),
    )


def _cpuinfo() -> tuple[str, set[str]]:
    """(model name, feature flags) from /proc/cpuinfo on Linux or sysctl on macOS; empty where neither answers."""
    proc = Path("/proc/cpuinfo")
    if proc.is_file():
        model, flags = "", set()
        for line in proc.read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "Model", "Hardware") and not model:
                model = value.strip()
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
        return model, flags
    if platform.system() == "Darwin":
        try:
            listing = subprocess.run(["sysctl", "-a"], capture_output=True, text=True, timeout=10, check=False).stdout
        except (OSError, subprocess.SubprocessError):
            return "", set()
        values = dict(line.partition(": ")[::2] for line in listing.splitlines())
        flags = {name.rpartition(".")[2] for name, value in values.items() if name.startswith("hw.optional.arm.") and value == "1"}
        flags |= {name.rpartition(".")[2].lower() for name, value in values.items() if name.startswith("hw.optional.") and value == "1"}
        return values.get("machdep.cpu.brand_string", ""), flags
    return "", set()


def compute_limit(precision: str, device: str, cpu: rm.CpuInfo | None = None) -> str:
    """Why an artifact of ``precision`` cannot compute faster than FP32 on ``device`` of this machine; empty when it can
    or when the CPU's features are unknown."""
    cpu = cpu or cpu_info()
    if device != "cpu" or not cpu.known:
        return ""
    if precision == "int8" and not cpu.int8_compute:
        return (
            "this CPU has no integer dot-product instructions (VNNI, AMX-INT8, Arm dot product): INT8 runs on widening "
            "multiply-adds, so a speed-up over FP32 is small at best and not assured here; its sure gain is the smaller file"
        )
    if precision == "fp16" and not cpu.fp16_compute:
        return (
            "this CPU has no FP16 arithmetic (AVX512-FP16, AMX-FP16, Arm FP16): FP16 runs converted to FP32, so it cannot be "
            "faster than FP32 here; its gain is the smaller file"
        )
    return ""
