"""The versions of each framework and runtime this release was tested with, and how the installed ones compare.

``tested_versions.json`` beside this file is written by ``python -m tools.versions`` (``make lock`` and ``make
test-latest`` run it) from the checks recorded in ``compat/``: the locked set the whole suite passed with, and the newest
releases the latest check passed with. A version between the lowest and the highest that passed is in the tested range.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from convert.errors import ConvertError

TESTED_FILE = Path(__file__).with_name("tested_versions.json")


@dataclass(frozen=True)
class TestedRange:
    distribution: str  # what pip installs it as (tensorflow-cpu provides tensorflow)
    low: str
    high: str

    def __str__(self) -> str:
        return self.low if self.low == self.high else f"{self.low} to {self.high}"

    def holds(self, version: str) -> bool:
        """Whether ``version`` lies in the range; a local build label (``+cpu``) is the same release, and a pre-release
        comes before its release (2.13.0rc1 is outside a range from 2.13.0)."""
        from packaging.version import InvalidVersion, Version

        try:
            installed = Version(Version(version).public)
        except InvalidVersion:
            return False
        return Version(self.low) <= installed <= Version(self.high)


@functools.cache
def tested_ranges() -> dict[str, TestedRange]:
    """Import package name → the range of versions its checks passed with."""
    recorded = json.loads(TESTED_FILE.read_text(encoding="utf-8"))
    return {name: TestedRange(**entry) for name, entry in recorded["packages"].items()}


def outside_tested(versions: dict[str, str]) -> dict[str, str]:
    """Of installed ``versions`` (import name → version), those outside their tested range, each with its range."""
    ranges = tested_ranges()
    return {
        name: f"{version} (tested: {ranges[name]})"
        for name, version in versions.items()
        if name in ranges and version != "-" and not ranges[name].holds(version)
    }


def library_mismatch(package: str, what: str) -> ConvertError:
    """The error for a library whose API is not the one this tool was written against: it names the library, its
    installed version and the tested range, never a fault of the user's model."""
    version = package_version(package)
    tested = tested_ranges().get(package)
    if tested is None:
        return ConvertError(
            f"{package} {version} does not have the API this tool expects: {what}", "Report it with the output of convert doctor."
        )
    where = "within" if tested.holds(version) else "outside"
    return ConvertError(
        f"{package} {version} does not have the API this tool expects: {what}. It is {where} the tested range of {package} ({tested})",
        f"Install a tested version (pip install '{tested.distribution}=={tested.high}'), or report it with the output of convert doctor.",
    )


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return metadata.packages_distributions()


@functools.cache
def package_version(package: str) -> str:
    """The installed version of an import package, whichever distribution provides it (tensorflow-cpu
    provides tensorflow), or "-". Read once per process: a package already imported keeps its version."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        pass
    if importlib.util.find_spec(package) is None:
        return "-"
    # the distributions that declare their packages first: inferring every distribution's packages from its file
    # list (packages_distributions) reads them all, 0.2 to 0.8 s with the frameworks installed
    for distribution in metadata.distributions():
        if package in (distribution.read_text("top_level.txt") or "").split():
            return distribution.version
    for name in _distributions().get(package, []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "-"
