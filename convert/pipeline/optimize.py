"""The optimize stage: one --optimize pass from the validated artifact it takes; the result is validated like any
artifact. Under --optimize auto the validated result stays staged as a candidate until one is chosen."""

from __future__ import annotations

import importlib.util
from dataclasses import replace

from convert.cache import Lookup
from convert.checks.sensitivity import RankSensitivity
from convert.pipeline.context import RunContext
from convert.pipeline.export import artifact_judge, made, recorded
from convert.pipeline.reproduce import reproduce_command
from convert.pipeline.validate import validate, validate_and_publish
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.worker import Optimize


def optimize(ctx: RunContext, name: str, candidate: bool) -> None:
    """Run the pass ``name``; a ``candidate`` (--optimize auto) is validated but not published."""
    from convert.optimizers.base import OptimizeJob

    entry = REGISTRY.get("optimizer", name)
    optimizer = entry.load()
    start = entry.starts_from or entry.takes
    base = ctx.artifacts.get(start) or ctx.candidates.get(start)
    started_from = next((r for r in ctx.report.artifacts if r.key == start), None)  # an auto candidate has no path yet
    record = rm.ArtifactRecord(
        format=entry.format,
        optimization=name,
        candidate=candidate,
        precision=optimizer.made_precision(base.precision) if base is not None else optimizer.precision,
        reproduce=reproduce_command(ctx.request, entry.takes, ctx.out_dir, name),
    )
    ctx.report.artifacts.append(record)
    with ctx.stages.run("auto" if candidate else "optimize", name) as stage:
        missing = [p for p in entry.requires if importlib.util.find_spec(p) is None]
        if base is None:
            stage.status, stage.reason = (
                "skipped",
                f"the {start} artifact it starts from was not {'built' if entry.starts_from else 'exported'}",
            )
            return
        reason = (
            f"{', '.join(missing)} is not installed: pip install 'model-convert[{entry.extra}]'"
            if missing
            else optimizer.unavailable_reason()
        )
        if not reason and entry.starts_from and (started_from is None or not started_from.passed):
            reason = f"the {start} artifact it starts from failed validation"  # an engine of a graph known to be wrong
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
            calibration_method=ctx.request.calibration_method,
            task=task_control(ctx) if optimizer.precision == "int8" else None,
            weight_group_size=ctx.request.weight_group_size,
            weight_ratio=ctx.request.weight_ratio,
            calibration_given=ctx.request.calibration_data is not None,
        )
        artifact = recorded(made(ctx, stage, _lookup(ctx, stage, entry, name, job), Optimize(name, job)), record, stage)
    if artifact is None:
        return
    validated = False
    if job.task is not None and name in TASK_CONTROLLED:
        artifact, validated = _excluded_until_the_task_holds(ctx, name, entry, job, artifact, record)
    if candidate:
        if not validated:
            validate(ctx, name, artifact, record)
        ctx.candidates[name] = artifact
    else:
        validate_and_publish(ctx, name, artifact, record, validated, made_by=job)
    if ctx.calibration and entry.calibrated:
        ctx.report.calibration = getattr(ctx.calibration, "origin", "")


TASK_CONTROLLED = ("int8", "int8-dynamic")  # ONNX Runtime's INT8 passes: accuracy control by excluding nodes


def _lookup(ctx: RunContext, stage: rm.Stage, entry, name: str, job) -> Lookup:
    if not entry.cacheable:  # read from the spec: the pass's packages (TensorRT) are not imported to decide it
        return Lookup(None)
    optimizer = entry.load()
    return ctx.cache.find(
        stage.kind,
        stage.name,
        entry.all_packages,
        name,
        ctx.stem,
        job.base.sha256,
        ctx.export_feed,
        ctx.calibration,
        ctx.profile_ranges,
        job.keep_fp32,
        job.calibration_method,
        job.task and (job.task.feeds, job.task.labels, job.task.metric, job.task.max_drop, job.task.user_metric),
        optimizer.variant(job),
        judge=artifact_judge(stage.name, entry.format, optimizer.made_precision(job.base.precision), optimizer.name, job.base),
    )


def task_control(ctx: RunContext):
    """The first task-drop budget with the labelled --data it is measured on (None without both)."""
    from convert.optimizers.base import TaskControl

    data = next((case for case in ctx.cases if case.labels is not None), None)
    budgets = [(name.removeprefix("task_").removesuffix("_drop"), bound) for name, bound in ctx.policy.task_budget.items()]
    if data is None or not budgets:
        return None
    metric, bound = budgets[0]
    source = {m.name: m.source for m in data.task.metrics}
    return TaskControl(data.feeds, data.labels, data.task.output, metric, bound, source[metric], ctx.request.metric)


def _excluded_until_the_task_holds(ctx: RunContext, name: str, entry, job, artifact, record: rm.ArtifactRecord):
    """An ONNX Runtime INT8 artifact under a task-drop budget: where its drop misses the budget, its most sensitive
    nodes are kept in FP32, one more at a time, until the drop holds; that artifact replaces it (the report says
    which nodes and why). Gives the artifact, and whether it has been validated already (the plain one kept)."""
    import glob

    from convert.checks.base import diagnosis

    task = job.task
    validate(ctx, name, artifact, record)
    drops = [m.drop for check in record.task_checks() for m in check.task.metrics if m.name == task.metric]
    control = rm.AccuracyControl(
        method="ONNX Runtime nodes_to_exclude, by sensitivity",
        status="not-met",
        metric=task.metric,
        budget=task.max_drop,
        plain_drop=max(drops, default=None),
    )
    record.add(control)
    if not drops:
        control.status, control.reason = "skipped", "no check on the labelled data ran"
        return artifact, True
    if max(drops) <= task.max_drop:
        control.status, control.drop, control.reason = "not-needed", control.plain_drop, "plain INT8 meets the budget"
        return artifact, True
    data = next(case for case in ctx.cases if case.labels is not None)
    found = diagnosis(
        ctx,
        ("accuracy-control", name),
        lambda why: rm.Sensitivity(status="skipped", optimization=name, reason=why),
        RankSensitivity(name, job, list(zip(data.feeds, data.references)), ctx.policy),
    )
    control.seconds, control.drop = found.seconds, found.drop
    if found.status != "found":
        control.status, control.reason = ("skipped" if found.status == "skipped" else "not-met"), found.reason
        return artifact, True
    kept = replace(job, keep_fp32=(*job.keep_fp32, *(glob.escape(node) for node in found.keep)))
    with ctx.stages.run("optimize", name, f"keeping {len(found.keep)} in FP32") as stage:
        rebuilt = recorded(made(ctx, stage, _lookup(ctx, stage, entry, name, kept), Optimize(name, kept)), record, stage)
    if rebuilt is None:
        control.status, control.reason = "not-met", "the pass failed with the nodes kept in FP32"
        return artifact, True
    control.status, control.kept_fp32 = "met", found.keep
    control.reason = (
        f"most sensitive first: {', '.join(f'{n} ({layer})' if layer else n for n, layer in zip(found.keep, found.keep_layers))}"
    )
    return rebuilt, False
