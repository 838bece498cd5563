"""What every stage of a run shares: the request, the report being written, the worker, the cache, the staging
folder, and what the earlier stages made (the source, its shape cases, the artifacts)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from convert.artifacts import Artifact
from convert.cache import RunCache
from convert.errors import ConvertError
from convert.memory import peak_rss_bytes
from convert.options import DEFAULTS
from convert.protected_inputs import Read, Write
from convert.reports import model as rm
from convert.safety import Staging, atomic_write_text, no_space_error
from convert.validation import ValidationCase
from convert.validators import TolerancePolicy
from convert.worker import SourceSummary


@dataclass
class ConvertRequest:
    """One run's options (declared once, with their flags, policy keys and defaults, in convert/options.py: each field's
    default is read from there); the caller's hooks are a RunHooks beside it."""

    model: Any
    to: tuple[str, ...] = DEFAULTS["to"]  # (): the model's own, onnx for an ONNX model (convert.convert's: onnx)
    out: Path = DEFAULTS["out"]
    framework: str | None = DEFAULTS["framework"]
    task: str | None = DEFAULTS["task"]  # a Hugging Face task
    component: tuple[str, ...] = DEFAULTS["component"]  # the components of a model made of several to convert (): all
    dtype: str = DEFAULTS["dtype"]  # what a Hugging Face folder's floating weights compute in ("source": the checkpoint's)
    weights: Path | None = DEFAULTS["weights"]
    weights_key: str | None = DEFAULTS["weights_key"]  # a training checkpoint's entry holding the state dict
    params: Any = DEFAULTS["params"]  # a JAX model's params: a file path, or a pytree from Python
    inputs: tuple[str, ...] = DEFAULTS["inputs"]
    example_inputs: Any = DEFAULTS["example_inputs"]  # an .npz path, a dict of arrays, or a tuple of tensors
    dims: tuple[str, ...] = DEFAULTS["dims"]
    opset: int | None = DEFAULTS["opset"]
    tolerances: tuple[str, ...] = DEFAULTS["tolerances"]
    optimize: tuple[str, ...] = DEFAULTS["optimize"]
    package: tuple[str, ...] = DEFAULTS["package"]  # packagers to run on the validated artifacts
    # artifacts someone already has, by the name the report gives them: validated against the source as they are
    given: dict[str, Path] = field(default_factory=dict)
    data: Path | None = DEFAULTS["data"]  # the user's samples, validated on besides the generated ones
    data_samples: int = DEFAULTS["data_samples"]
    columns: tuple[str, ...] = DEFAULTS["columns"]  # INPUT=COLUMN
    preprocess: str | None = DEFAULTS["preprocess"]  # an image folder's preprocessing
    metric: str | None = DEFAULTS["metric"]  # module:function of the user's own task metric
    calibration_data: Path | None = DEFAULTS["calibration_data"]
    calibration_method: str = DEFAULTS["calibration_method"]
    keep_fp32: tuple[str, ...] = DEFAULTS["keep_fp32"]  # node-name or module-path patterns the reduced-precision passes leave in FP32
    weight_group_size: int = DEFAULTS["weight_group_size"]  # weights per scale in the weight-only passes; -1: per output channel
    weight_ratio: float = DEFAULTS["weight_ratio"]  # share of the layers openvino:int4 puts in INT4
    accuracy: tuple[str, ...] = DEFAULTS["accuracy"]  # accuracy budgets of reduced-precision artifacts
    shape_ranges: tuple[str, ...] = DEFAULTS["shape_ranges"]  # "B=1..8..32": TensorRT profiles and the validation sizes
    benchmark: bool = DEFAULTS["benchmark"]
    threads: int | None = DEFAULTS["threads"]  # intra-op threads of every benchmarked runtime (default: every core)
    benchmark_batch: int = DEFAULTS["benchmark_batch"]
    benchmark_seconds: float = DEFAULTS["benchmark_seconds"]  # each measurement's least duration
    samples: int = DEFAULTS["samples"]
    allow_fixed_shapes: bool = DEFAULTS["allow_fixed_shapes"]  # an artifact that fixes a dim asked dynamic passes, its checks there skipped
    min_precision_share: float = DEFAULTS["min_precision_share"]  # a reduced-precision artifact computing less in it fails
    unbuilt: str = DEFAULTS["unbuilt"]  # "warn": a requested artifact that could not be built here does not fail the run
    seed: int = DEFAULTS["seed"]
    trust_code: bool = DEFAULTS["trust_code"]
    force: bool = DEFAULTS["force"]
    stage_timeout: float | None = DEFAULTS["stage_timeout"]  # seconds per stage in the worker process; None: no limit
    isolate: bool = DEFAULTS["isolate"]  # False: the framework work runs in this process (for debuggers and profilers)
    cache: bool = DEFAULTS["cache"]  # reuse the results of unchanged stages (convert/cache.py)
    cache_dir: Path | None = DEFAULTS["cache_dir"]  # default: $CONVERT_CACHE_DIR, else ~/.cache/convert
    report_json: Path | None = DEFAULTS["report_json"]
    command: str = ""


@dataclass(frozen=True)
class RunHooks:
    """What a caller (the gate) adds to a run besides its options, passed beside the request: none of it is an option,
    recorded in the report or part of a cache key."""

    reads: tuple[Read, ...] = ()  # what the caller reads besides the model's files (the gate's policy and baseline)
    writes: tuple[Write, ...] = ()  # what the caller writes besides the run's outputs (the gate's renderings)
    # the gate's baseline report and its path: those of its artifacts still on disk are timed beside their successors
    baseline: tuple[rm.Report, Path | None] | None = None
    judge: Callable[[rm.Report, Path], rm.Verdict] | None = None  # the gate's verdict, written into the report
    # called once the report is written, still under the output lock (the gate's renderings and MLflow run); what it
    # changes in the report is written again
    publish: Callable[[rm.Report, Path], None] | None = None
    stem: str | None = None  # the artifacts' file name stem a composite gives its component (encoder_model)


@dataclass
class ConversionResult:
    report: rm.Report
    artifacts: dict[str, Artifact]
    report_path: Path | None
    log_path: Path | None = None  # what the frameworks printed, warned and logged during the run; None where nothing

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def exit_code(self) -> int:
        return self.report.exit_code if self.report.exit_code is not None else 3


class Progress:
    """Receives stage events; the CLI prints them, the Python API stays quiet by default."""

    def started(self, name: str) -> None: ...

    def finished(self, stage: rm.Stage, detail: str = "") -> None: ...


class Stages:
    """The run's stage records, in the order they ran; each says how it ended and how long it took."""

    def __init__(self, progress: Progress):
        self.records: list[rm.Stage] = []
        self.progress = progress
        self.processes: Callable[[], list[int]] = lambda: [os.getpid()]  # whose peak memory each stage records

    @contextlib.contextmanager
    def run(self, kind: rm.StageKind, subject: str = "", detail: str = "") -> Iterator[rm.Stage]:
        record = rm.Stage(kind=kind, subject=subject, detail=detail, status="ok")
        self.progress.started(record.name)
        started = time.perf_counter()
        try:
            yield record
        except ConvertError as exc:
            record.status, record.error = "failed", exc.paragraph()
            raise
        except BaseException as exc:
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            record.seconds = round(time.perf_counter() - started, 3)
            peak = peak_rss_bytes(self.processes())
            record.peak_rss_mb = round(peak / 2**20, 1) if peak is not None else None
            self.records.append(record)
            self.progress.finished(record)


@dataclass
class RunContext:
    """One run's shared state; each stage reads what it needs and adds what it makes."""

    request: ConvertRequest
    report: rm.Report
    stages: Stages
    worker: Any  # convert.worker's InProcessWorker or ChildWorker
    cache: RunCache
    policy: TolerancePolicy
    out_dir: Path
    stem: str
    report_path: Path
    staging: Staging | None = None
    source: SourceSummary | None = None
    cases: list[ValidationCase] = field(default_factory=list)
    export_feed: dict[str, Any] = field(default_factory=dict)
    calibration: list[dict[str, Any]] = field(default_factory=list)
    profile_ranges: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    artifacts: dict[str, Artifact] = field(default_factory=dict)  # published, by key
    candidates: dict[str, Artifact] = field(default_factory=dict)  # --optimize auto's, staged until one is chosen
    baseline_artifacts: dict[str, Artifact] = field(default_factory=dict)  # the gate baseline's, by key, timed beside
    hooks: RunHooks = field(default_factory=RunHooks)


def write_report(path: Path, report: rm.Report) -> None:
    try:
        atomic_write_text(path, report.to_json())
    except OSError as exc:
        full = no_space_error(exc, path.parent)
        if full is not None:
            raise full from exc
        raise ConvertError(
            f"cannot write the report {path}: {exc.strerror or exc}", "Choose a writable path with --report-json or --out."
        ) from exc


def finish(report: rm.Report, stages: Stages, unbuilt: str = DEFAULTS["unbuilt"]) -> None:
    """The verdict and exit code: 0 passed, 1 a check failed or a requested artifact could not be built here (unless
    ``unbuilt`` is "warn"), 2 an export or optimization failed, 130 interrupted."""
    report.stages = stages.records
    report.unbuilt = rm.unbuilt_of(report.stages, accept_skipped=unbuilt == "warn")
    export_failed = any(s.status == "failed" and s.makes_artifact for s in report.stages)
    check_failed = any(not a.passed for a in report.artifacts if a.checks and not a.candidate) or any(
        not p.passed for p in report.packages if p.checks
    )
    # an artifact asked for and missing fails the run as the gate fails closed on it: the promise is never to pass
    # without what was asked for
    missing = any(not record.accepted for record in report.unbuilt)
    report.passed = bool(report.artifacts) and not export_failed and not check_failed and not missing and not report.interrupted
    report.exit_code = 0 if report.passed else 1 if check_failed else 2 if export_failed else 1
    if report.interrupted:
        report.exit_code = 130


def report_stop(report: rm.Report, stages: Stages, report_path: Path, exc: Exception, unbuilt: str = DEFAULTS["unbuilt"]) -> None:
    """Write the report of a run an error stopped: exit code 2 for a user error, 3 for an internal one. A report that
    cannot be written (the error may be a full disk) leaves the error to say so."""
    finish(report, stages, unbuilt)
    user_error = isinstance(exc, ConvertError)
    report.error = exc.paragraph() if user_error else f"internal error: {type(exc).__name__}: {exc}"
    report.passed, report.exit_code = False, 2 if user_error else 3
    try:
        write_report(report_path, report)
    except ConvertError:
        pass
