"""The localisation stage: for an artifact that failed a check on its outputs, where it first diverged from the source
(convert/localize.py runs in the worker); the report, the renderings and the gate's reasons show it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from convert.artifacts import Artifact
from convert.exporters.base import ExportJob
from convert.localize import Localize
from convert.pipeline.context import RunContext, crashed
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.text import first_line
from convert.validation import ValidationCase
from convert.worker import Job, StageCrashed

T = TypeVar("T")

REPRODUCER_SUFFIX = ".divergence"


def failing_case(ctx: RunContext, record: rm.ArtifactRecord) -> tuple[rm.Check, ValidationCase] | None:
    """The artifact's first check that failed on its outputs, and the shape case it ran (None where none did). A
    decoder's text with padding is left out: its hidden positions differ between runtimes by design (validators/
    generation.py hide_padding), and a trace or a sensitivity ranking over them would follow that difference."""
    cases = {c.shape.describe(): c for c in ctx.cases if c.feeds and c.padding is None}
    check = next((c for c in record.checks if c.status == "failed" and c.kind == "shape" and c.outputs and c.shape in cases), None)
    return (check, cases[check.shape]) if check is not None else None


def diagnosis(ctx: RunContext, stage_id: tuple[rm.StageKind, str], skipped: Callable[[str], T], job: Job) -> T:
    """A diagnosing job in the worker as the stage ``stage_id`` (kind, subject); one that crashes or fails is a skipped
    stage with its whole message, gives ``skipped(why)``, and fails nothing the checks have not failed."""
    with ctx.stages.run(*stage_id) as stage:
        try:
            return ctx.worker.call(job)
        except StageCrashed as exc:
            reason = crashed(stage, exc)
            stage.status, stage.reason, stage.error = "skipped", reason, ""
            return skipped(reason)
        except Exception as exc:
            stage.status, stage.reason = "skipped", f"{type(exc).__name__}: {exc}"  # the whole message, with its traceback
            return skipped(f"{type(exc).__name__}: {first_line(str(exc))}")


def localize(ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Trace the first failing check's first sample through the artifact's graph; the result goes on the record."""
    failing = failing_case(ctx, record)
    if failing is None:
        return
    check, case = failing
    if not REGISTRY.format(artifact.format).localizable:
        record.add(
            rm.Divergence(
                status="skipped",
                reason="localisation reads ONNX graphs, OpenVINO IRs converted from one, torch.export programs and TorchScript "
                f"archives, not {artifact.format} artifacts (their intermediate values are not compared with the source's)",
            )
        )
        return
    graph = Path(record.derived_from) if artifact.format == "openvino" and record.derived_from else None
    output = next((o.name for o in check.outputs if o.status == "failed"), "")
    exported = _exported(ctx.report, record)
    divergence = diagnosis(
        ctx,
        ("localize", key),
        lambda why: rm.Divergence(status="skipped", reason=f"localisation failed: {why}"),
        Localize(
            artifact,
            exported.exporter,
            exported.strategy,
            export_job(ctx),
            case.feeds[0],
            case.references[0],
            ctx.policy.for_output(output, artifact.precision),
            artifact.path.with_name(f"{artifact.path.name}{REPRODUCER_SUFFIX}"),
            graph,
        ),
    )
    divergence.runtime, divergence.device, divergence.shape = check.runtime, check.device, check.shape
    record.add(divergence)


def export_job(ctx: RunContext) -> ExportJob:
    """The export's job as the worker traces the source again (the worker fills in its source)."""
    return ExportJob(
        source=None, feed=ctx.export_feed, folder=ctx.staging.path, stem=ctx.stem, opset=ctx.request.opset, dim_ranges=ctx.source.dim_ranges
    )


def _exported(report: rm.Report, record: rm.ArtifactRecord) -> rm.ArtifactRecord:
    """The exported artifact an optimized one was derived from (through every pass), or the record itself."""
    by_path = {r.path: r for r in report.artifacts if r.path}
    while record.derived_from and record.derived_from in by_path:
        record = by_path[record.derived_from]
    return record
