"""Optimizers: passes from a validated artifact to a new one, with recorded strategies like the exporters."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from convert.artifacts import Artifact
from convert.exporters.base import Exporter, ExportJob


@dataclass
class OptimizeJob(ExportJob):
    base: Artifact | None = None  # the validated artifact the pass starts from
    calibration: list[dict[str, np.ndarray]] = field(default_factory=list)  # feeds for calibrated quantization
    shape_ranges: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # symbol -> (min, opt, max) sizes


class Optimizer(Exporter):
    """Writes an optimized artifact of ``format`` at ``precision`` from ``job.base`` (an artifact of ``takes``)."""

    takes = "onnx"
    precision = "fp32"

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this pass cannot run on this machine (its stage is then skipped with the reason), or None."""
        return None

    def export(self, job: ExportJob):
        outcome = super().export(job)
        if outcome.artifact is not None:
            outcome.artifact.precision = self.precision
            outcome.artifact.inputs = job.base.inputs or outcome.artifact.inputs
            outcome.artifact.fixed_shape_reason = job.base.fixed_shape_reason
        return outcome
