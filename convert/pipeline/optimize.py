"""The optimize stage: one --optimize pass from the validated artifact it takes; the result is validated like any
artifact. Under --optimize auto the validated result stays staged as a candidate until one is chosen."""

from __future__ import annotations

import importlib.util

from convert.cache import Lookup
from convert.pipeline.context import RunContext
from convert.pipeline.export import made, recorded
from convert.pipeline.reproduce import reproduce_command
from convert.pipeline.validate import validate, validate_and_publish
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.worker import Session


def optimize(ctx: RunContext, name: str, candidate: bool) -> None:
    """Run the pass ``name``; a ``candidate`` (--optimize auto) is validated but not published."""
    from convert.optimizers.base import OptimizeJob

    entry = REGISTRY.get("optimizer", name)
    optimizer = entry.load()
    base = ctx.artifacts.get(entry.meta["takes"])
    record = rm.ArtifactRecord(
        format=entry.meta["format"],
        optimization=name,
        candidate=candidate,
        precision=optimizer.precision,
        reproduce=reproduce_command(ctx.request, entry.meta["takes"], ctx.out_dir, name),
    )
    ctx.report.artifacts.append(record)
    with ctx.stages.run(f"{'auto' if candidate else 'optimize'}:{name}") as stage:
        missing = [p for p in entry.meta.get("requires", ()) if importlib.util.find_spec(p) is None]
        if base is None:
            stage.status, stage.reason = "skipped", f"the {entry.meta['takes']} artifact it starts from was not exported"
            return
        reason = (
            f"{', '.join(missing)} is not installed: pip install 'model-convert[{entry.meta['extra']}]'"
            if missing
            else optimizer.unavailable_reason()
        )
        if reason:
            stage.status, stage.reason = "skipped", reason
            return
        record.derived_from = str(base.path)
        job = OptimizeJob(
            source=None,
            feed=ctx.export_feed,
            folder=ctx.staging.path,
            stem=ctx.stem,
            opset=ctx.request.opset,
            base=base,
            calibration=ctx.calibration,
            shape_ranges=ctx.profile_ranges,
            keep_fp32=ctx.request.keep_fp32,
        )
        lookup = (
            ctx.cache.find(
                stage.name, entry.packages, name, ctx.stem, base.sha256, ctx.export_feed, ctx.calibration, ctx.profile_ranges, job.keep_fp32
            )
            if entry.meta.get("cacheable", True)
            else Lookup(None)
        )
        artifact = recorded(made(ctx, stage, lookup, Session.optimize, name, job), record, stage)
    if artifact is None:
        return
    if candidate:
        validate(ctx, name, artifact, record)
        ctx.candidates[name] = artifact
    else:
        validate_and_publish(ctx, name, artifact, record)
        if not record.passed:
            sensitivity(ctx, name, job, record)
    if ctx.calibration and entry.meta.get("calibrated"):
        ctx.report.calibration = getattr(ctx.calibration, "origin", "")


def sensitivity(ctx: RunContext, name: str, job, record: rm.ArtifactRecord) -> None:
    """For a reduced-precision artifact that failed its budget: its most sensitive nodes, and which to keep in FP32."""
    from convert.pipeline.localize import diagnosis, failing_case
    from convert.sensitivity import PASSES

    failing = failing_case(ctx, record)
    if failing is None or record.precision == "fp32":
        return
    if name not in PASSES:
        record.sensitivity = rm.Sensitivity(
            status="skipped", optimization=name, reason=f"sensitivity is measured for ONNX Runtime's passes ({', '.join(PASSES)})"
        )
        return
    case = failing[1]
    cases = [case, *(c for c in ctx.cases if c is not case and c.generation is None)]  # the failing case ranks them
    record.sensitivity = diagnosis(
        ctx,
        f"sensitivity:{name}",
        lambda why: rm.Sensitivity(status="skipped", optimization=name, reason=f"sensitivity failed: {why}"),
        Session.sensitivity,
        name,
        job,
        [pair for c in cases for pair in zip(c.feeds, c.references)],
        ctx.policy,
    )
