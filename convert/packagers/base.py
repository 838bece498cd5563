"""The packager protocol: a package written from validated artifacts, then checked as a reader would open it."""

from __future__ import annotations

import abc
from dataclasses import dataclass
from pathlib import Path

from convert.registry import REGISTRY, FromSpec
from convert.reports import model as rm


@dataclass(frozen=True)
class PackedArtifact:
    """A validated artifact a package holds: what it is, its files, and the digest its checks were made on."""

    key: str
    format: str
    precision: str
    path: Path
    files: tuple[Path, ...]
    sha256: str


@dataclass(frozen=True)
class PackageJob:
    folder: Path  # where to write the package (the run's staging folder)
    stem: str
    artifacts: tuple[PackedArtifact, ...]
    report: rm.Report  # the run's report so far: the source, the environment, each artifact's checks


class Packager(abc.ABC):
    # read from the class's registered spec (convert/packagers/__init__.py)
    name = FromSpec()
    takes = FromSpec()

    @classmethod
    def package_path(cls, folder: Path, stem: str) -> Path:
        return folder / f"{stem}{REGISTRY.spec_of(cls).suffix}"

    @abc.abstractmethod
    def build(self, job: PackageJob) -> Path:
        """Write the package at ``package_path(job.folder, job.stem)`` and return that path."""

    @abc.abstractmethod
    def check(self, path: Path, job: PackageJob) -> list[rm.PackageCheck]:
        """The package's structural checks, read back from ``path`` as its consumer would read it; one check per artifact
        must prove its bytes are the validated ones (their digest), so their checks hold for the package."""
