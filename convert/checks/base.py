"""What a check is given: the run it belongs to (``Run``: what a check reads of the pipeline's run context) and the
artifact it checks (``Subject``); and what several checks share: a diagnosing job run as a stage of its own, the
failing check a diagnosis starts from, and the export's job as the worker traces the source again.

A check is a function ``check(run, subject)``, registered with a ``CheckSpec`` (convert/registry.py) in this package's
``__init__`` (or a plugin's module), that records its result on ``subject.record``: the artifact's checks, or a detail.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from convert.artifacts import Artifact
from convert.cache import RunCache
from convert.reports import model as rm
from convert.text import first_line
from convert.validation import ValidationCase
from convert.validators import TolerancePolicy
from convert.worker import Job, StageCrashed

T = TypeVar("T")


class Run(Protocol):
    """What a check reads of the run (the pipeline's RunContext)."""

    request: Any  # the run's options (min_precision_share, allow_fixed_shapes, opset)
    report: rm.Report
    stages: Any  # the run's stages: ``stages.run(kind, subject)`` is a stage as a context
    worker: Any  # the worker the checks' jobs run in (``worker.call(job)``)
    cache: RunCache
    policy: TolerancePolicy
    stem: str
    staging: Any  # the run's staging folder (``staging.path``)
    source: Any  # the source's summary (its dim ranges)
    cases: list[ValidationCase]
    export_feed: dict[str, Any]
    artifacts: dict[str, Artifact]  # published, by key


@dataclass
class Subject:
    """The artifact a check is run on, with its record; ``cases`` are the shape cases it is validated on (the run's,
    or a given artifact's with its output names), ``stage`` the validation stage the validate phase runs in."""

    key: str
    artifact: Artifact
    record: rm.ArtifactRecord
    cases: list[ValidationCase]
    stage: rm.Stage | None = None
    repair: bool = True  # where its format can be, an artifact whose declared output shapes did not hold is repaired
    made_by: Any = None  # the pass's OptimizeJob, for an artifact an optimization made


def crashed(stage: rm.Stage, exc: StageCrashed) -> str:
    """Mark the stage failed by a worker crash or timeout; the message."""
    stage.status, stage.signal, stage.timed_out = "failed", exc.signal, exc.timed_out
    stage.error = f"the {stage.name} stage did not finish: {exc}"
    return stage.error


def diagnosis(run: Run, stage_id: tuple[rm.StageKind, str], skipped: Callable[[str], T], job: Job) -> T:
    """A diagnosing job in the worker as the stage ``stage_id`` (kind, subject); one that crashes or fails is a skipped
    stage with its whole message, gives ``skipped(why)``, and fails nothing the checks have not failed."""
    with run.stages.run(*stage_id) as stage:
        try:
            return run.worker.call(job)
        except StageCrashed as exc:
            reason = crashed(stage, exc)
            stage.status, stage.reason, stage.error = "skipped", reason, ""
            return skipped(reason)
        except Exception as exc:
            stage.status, stage.reason = "skipped", f"{type(exc).__name__}: {exc}"  # the whole message, with its traceback
            return skipped(f"{type(exc).__name__}: {first_line(str(exc))}")


def measured(job: Callable[[], T], failed: Callable[[str], T]) -> T:
    """A measuring job's result; ``failed(why)`` where it crashes the worker or fails: a figure that cannot be measured
    is reported, never fails the run."""
    try:
        return job()
    except StageCrashed as exc:
        return failed(f"measuring it crashed the worker: {exc}")
    except Exception as exc:  # noqa: BLE001 - reported, never fails the run
        return failed(f"measuring it failed: {type(exc).__name__}: {first_line(str(exc))}")


def failing_case(run: Run, record: rm.ArtifactRecord) -> tuple[rm.Check, ValidationCase] | None:
    """The artifact's first check that failed on its outputs, and the shape case it ran (None where none did). A
    decoder's text with padding is left out: its hidden positions differ between runtimes by design (validators/
    generation.py hide_padding), and a trace or a sensitivity ranking over them would follow that difference."""
    cases = {c.shape.describe(): c for c in run.cases if c.feeds and c.padding is None}
    check = next((c for c in record.checks if c.status == "failed" and c.kind == "shape" and c.outputs and c.shape in cases), None)
    return (check, cases[check.shape]) if check is not None else None


def export_job(run: Run):
    """The export's job as the worker traces the source again (the worker fills in its source)."""
    from convert.exporters.base import ExportJob

    return ExportJob(
        source=None, feed=run.export_feed, folder=run.staging.path, stem=run.stem, opset=run.request.opset, dim_ranges=run.source.dim_ranges
    )


def exported(report: rm.Report, record: rm.ArtifactRecord) -> rm.ArtifactRecord:
    """The exported artifact an optimized one was derived from (through every pass), or the record itself."""
    by_path = {r.path: r for r in report.artifacts if r.path}
    while record.derived_from and record.derived_from in by_path:
        record = by_path[record.derived_from]
    return record
