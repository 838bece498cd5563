"""The localisation stage: for an artifact that failed a check on its outputs, where it first diverged from the source
(convert/localize.py runs in the worker); the report, the renderings and the gate's reasons show it."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.exporters.base import ExportJob
from convert.pipeline.context import RunContext, crashed
from convert.reports import model as rm
from convert.text import first_line
from convert.worker import Session, StageCrashed

REPRODUCER_SUFFIX = ".divergence"
LOCATED_FORMATS = ("onnx", "openvino")


def localize(ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Trace the first failing check's first sample through the artifact's graph; the result goes on the record."""
    check = next((c for c in record.checks if c.status == "failed" and c.kind == "shape" and c.outputs), None)
    case = next((c for c in ctx.cases if check is not None and c.shape.describe() == check.shape and c.feeds), None)
    if case is None:
        return
    if artifact.format not in LOCATED_FORMATS:
        record.divergence = rm.Divergence(
            status="skipped", reason=f"localisation reads ONNX graphs and OpenVINO IRs converted from one, not {artifact.format} artifacts"
        )
        return
    graph = Path(record.derived_from) if artifact.format == "openvino" and record.derived_from else None
    failing = next(o.name for o in check.outputs if o.status == "failed") if any(o.status == "failed" for o in check.outputs) else ""
    tolerance = ctx.policy.for_output(failing, artifact.precision)
    job = ExportJob(
        source=None, feed=ctx.export_feed, folder=ctx.staging.path, stem=ctx.stem, opset=ctx.request.opset, dim_ranges=ctx.source.dim_ranges
    )
    folder = artifact.path.with_name(f"{artifact.path.name}{REPRODUCER_SUFFIX}")
    exported = _exported(ctx.report, record)
    with ctx.stages.run(f"localize:{key}") as stage:
        try:
            divergence = ctx.worker.call(
                Session.localize,
                artifact,
                exported.exporter,
                exported.strategy,
                job,
                case.feeds[0],
                case.references[0],
                tolerance,
                folder,
                graph,
            )
        except StageCrashed as exc:
            divergence = rm.Divergence(status="skipped", reason=crashed(stage, exc))
            # a diagnosis that could not finish fails nothing the checks have not failed
            stage.status, stage.reason, stage.error = "skipped", stage.error, ""
        except Exception as exc:  # a diagnosis that failed is reported, and the run goes on
            divergence = rm.Divergence(status="skipped", reason=f"localisation failed: {type(exc).__name__}: {first_line(str(exc))}")
            stage.status, stage.reason = "skipped", f"{type(exc).__name__}: {exc}"  # the whole message, with its traceback
    divergence.runtime, divergence.device, divergence.shape = check.runtime, check.device, check.shape
    record.divergence = divergence


def _exported(report: rm.Report, record: rm.ArtifactRecord) -> rm.ArtifactRecord:
    """The exported artifact an optimized one was derived from (through every pass), or the record itself."""
    by_path = {r.path: r for r in report.artifacts if r.path}
    while record.derived_from and record.derived_from in by_path:
        record = by_path[record.derived_from]
    return record
