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
from convert.options import DEFAULTS
from convert.registry import REGISTRY, FromSpec
from convert.validators.tolerances import loosest


@dataclass
class TaskControl:
    """A task metric's drop budget that an INT8 pass must meet on labelled samples (accuracy control)."""

    feeds: list[dict[str, np.ndarray]]
    labels: list[np.ndarray]
    output: str  # the output the labels score
    metric: str  # top1, top5, token_accuracy, exact_match, perplexity or metric
    max_drop: float
    source_value: float  # the source's value of the metric on these samples
    user_metric: str | None = None  # the user's --metric, module:function

    def score(self, outputs: list[dict[str, np.ndarray]], labels: list[np.ndarray]) -> float:
        """The metric on these outputs of (a subset of) the samples, and their labels."""
        from convert.validation import user_metric
        from convert.validators.task_metrics import task_scores

        _, scores = task_scores(outputs, labels, user_metric(self.user_metric) if self.metric == "metric" else None, self.output)
        return scores[self.metric]

    def drop(self, outputs: list[dict[str, np.ndarray]], labels: list[np.ndarray]) -> float:
        from convert.validators.task_metrics import metric_drop

        return metric_drop(self.metric, self.source_value, self.score(outputs, labels))


@dataclass
class OptimizeJob(ExportJob):
    base: Artifact | None = None  # the validated artifact the pass starts from
    calibration: list[dict[str, np.ndarray]] = field(default_factory=list)  # feeds for calibrated quantization
    shape_ranges: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # symbol -> (min, opt, max) sizes
    keep_fp32: tuple[str, ...] = DEFAULTS["keep_fp32"]  # node-name or module-path patterns a reduced-precision pass leaves in FP32
    calibration_method: str = DEFAULTS["calibration_method"]  # how static INT8 sets activation ranges: minmax, entropy or percentile
    task: TaskControl | None = None  # a task-drop budget the INT8 passes control their accuracy by
    weight_group_size: int = DEFAULTS["weight_group_size"]  # weights per scale in the weight-only passes; -1: one per output channel
    weight_ratio: float = DEFAULTS["weight_ratio"]  # share of the layers NNCF's INT4 compression puts in INT4, the rest in INT8
    calibration_given: bool = False  # the calibration feeds are the user's --calibration-data (the data-aware methods need them)


class Optimizer(Exporter):
    """Writes an optimized artifact of ``format`` at ``precision`` from ``job.base`` (an artifact of ``takes``)."""

    # read from the class's registered spec (convert/optimizers/__init__.py)
    takes = FromSpec()
    precision = FromSpec()

    @classmethod
    def artifact_suffix(cls) -> str:
        return REGISTRY.spec_of(cls).suffix

    @classmethod
    def unavailable_reason(cls) -> str | None:
        """Why this pass cannot run on this machine (its stage is then skipped with the reason), or None."""
        return None

    @classmethod
    def made_precision(cls, base: str) -> str:
        """The precision of what this pass makes from an artifact of ``base``: the looser of the two (a format change
        of a bfloat16 export is bfloat16, and so is an fp16 pass's artifact of it, whose reference is still bfloat16)."""
        return loosest((base, cls.precision))

    @classmethod
    def variant(cls, job: OptimizeJob) -> str:
        """What decides how this pass writes its artifact beyond the job's inputs and options (the machine's memory, for
        one), as part of its cache key: "" where nothing does."""
        return ""

    def export(self, job: ExportJob):
        with temporary_files_in(job.folder):
            outcome = super().export(job)
        # onnxslim and ONNX Runtime's quantization leave their copies of the model in reference cycles (4.5 GB after
        # onnxslim on a 2.4 GB model), which the next job would otherwise start with
        gc.collect()
        if outcome.artifact is not None:
            outcome.artifact.precision = self.made_precision(job.base.precision)
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
