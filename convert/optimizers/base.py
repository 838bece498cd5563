"""Optimizers: passes from a validated artifact to a new one, with recorded strategies like the exporters."""

from __future__ import annotations

import contextlib
import gc
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob


@dataclass
class OptimizeJob(ExportJob):
    base: Artifact | None = None  # the validated artifact the pass starts from
    calibration: list[dict[str, np.ndarray]] = field(default_factory=list)  # feeds for calibrated quantization
    shape_ranges: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # symbol -> (min, opt, max) sizes
    keep_fp32: tuple[str, ...] = ()  # node-name or module-path patterns a reduced-precision pass leaves in FP32


class Optimizer(Exporter):
    """Writes an optimized artifact of ``format`` at ``precision`` from ``job.base`` (an artifact of ``takes``)."""

    takes = "onnx"
    precision = "fp32"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this pass cannot run on this machine (its stage is then skipped with the reason), or None."""
        return None

    def export(self, job: ExportJob):
        with temporary_files_in(job.folder):
            outcome = super().export(job)
        # onnxslim and ONNX Runtime's quantization leave their copies of the model in reference cycles (4.5 GB after
        # onnxslim on a 2.4 GB model), which the next job would otherwise start with
        gc.collect()
        if outcome.artifact is not None:
            outcome.artifact.precision = self.precision
            outcome.artifact.inputs = job.base.inputs or outcome.artifact.inputs
            outcome.artifact.fixed_shape_reason = job.base.fixed_shape_reason
            outcome.artifact.dim_bounds = {**job.base.dim_bounds, **outcome.artifact.dim_bounds}  # a TensorRT profile narrows them
        return outcome


@contextlib.contextmanager
def temporary_files_in(folder: Path) -> Iterator[None]:
    """Send the libraries' temporary files to the staging folder: ONNX Runtime's quantization and onnxslim write whole
    copies of the model there (gigabytes for a large one), which /tmp may have no room for (or hold in memory, as a
    tmpfs); and what a killed worker leaves in the staging folder, the next run removes."""
    before = tempfile.tempdir
    tempfile.tempdir = str(folder)
    try:
        yield
    finally:
        tempfile.tempdir = before
