"""``convert doctor``: which frameworks, runtimes and devices are usable here, with versions."""

from __future__ import annotations

from dataclasses import dataclass

from convert.compat import package_version
from convert.devices import ALL_DEVICES, cuda_gpus
from convert.errors import ConvertError
from convert.hardware import cpu_info
from convert.registry import CORE_EXTRA, REGISTRY


@dataclass
class Row:
    name: str
    version: str
    status: str
    detail: str


def package_rows() -> list[Row]:
    """One row per package the registry declares: missing (with the extra that installs it), installed, or installed
    outside the range this release was tested with; then the packages that change what a source loads when installed."""
    from convert.compat import tested_ranges

    ranges = tested_ranges()
    rows = []
    for name in (*REGISTRY.packages(), *REGISTRY.loading_packages()):
        version = package_version(name)
        if version == "-":
            if name in REGISTRY.loading_packages():
                rows.append(Row(name, "-", "absent", "optional: when installed, it changes what a model folder loads as"))
            else:
                extra = REGISTRY.extra_of(name)
                rows.append(
                    Row(name, "-", "missing", f"pip install 'model-convert[{extra}]'" if extra != CORE_EXTRA else "reinstall model-convert")
                )
        elif name in ranges and not ranges[name].holds(version):
            rows.append(Row(name, version, "untested", f"outside the tested range ({ranges[name]}): results may differ or fail"))
        else:
            rows.append(Row(name, version, "installed", f"tested: {ranges[name]}" if name in ranges else ""))
    return rows


def runtime_rows() -> list[Row]:
    rows = []
    for entry in REGISTRY.entries("runtime"):
        try:
            runner = entry.load()
        except ImportError as exc:
            rows.append(Row(entry.name, "-", "missing", str(exc)))
            continue
        for device in ALL_DEVICES:
            try:
                reason = runner.unavailable_reason(device)
            except (ImportError, ConvertError):
                reason = (
                    f"not installed: pip install 'model-convert[{entry.extra}]'" if entry.extra != CORE_EXTRA else "reinstall model-convert"
                )
            rows.append(
                Row(
                    f"{entry.name} on {device}",
                    package_version(entry.packages[0]) if entry.packages else "-",
                    "usable" if reason is None else "unusable",
                    reason or "",
                )
            )
    return rows


def device_rows() -> list[Row]:
    rows = [Row("cpu", "-", "present", cpu_info().describe())]
    gpus = cuda_gpus()
    rows.append(Row("cuda", "-", "present" if gpus else "absent", "; ".join(gpus) or "nvidia-smi lists no GPU"))
    return rows
