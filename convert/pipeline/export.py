"""The export stage (one per target) and what optimizations share with it: a job in the worker, from the cache when
its entry is there and trusted, its attempts recorded."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from convert.artifacts import Artifact
from convert.cache import Judge, Lookup, RunCache, artifact_data, cached_artifact
from convert.checks.base import crashed
from convert.errors import ConvertError
from convert.exporters.base import ExportJob
from convert.pipeline.context import RunContext
from convert.pipeline.reproduce import reproduce_command
from convert.pipeline.validate import validate_and_publish
from convert.reports import model as rm
from convert.worker import Export, Job, Optimize, StageCrashed, log_bytes


def export_target(ctx: RunContext, target: str, exporter: str) -> None:
    """Export one target with the named exporter, then validate and publish it."""
    record = rm.ArtifactRecord(format=target, reproduce=reproduce_command(ctx.request, target, ctx.out_dir))
    ctx.report.artifacts.append(record)
    dim_ranges = ctx.source.dim_ranges
    with ctx.stages.run("export", target) as stage:
        job = ExportJob(
            source=None, feed=ctx.export_feed, folder=ctx.staging.path, stem=ctx.stem, opset=ctx.request.opset, dim_ranges=dim_ranges
        )
        lookup = ctx.cache.find(
            stage.kind,
            stage.name,
            ctx.cache.source_packages,
            exporter,
            ctx.stem,
            ctx.export_feed,
            dim_ranges,
            judge=artifact_judge(stage.name, target, ctx.source.precision, exporter),  # exporters write what the source holds
        )
        artifact = recorded(made(ctx, stage, lookup, Export(exporter, job)), record, stage)
    if artifact is not None:
        validate_and_publish(ctx, target, artifact, record)


def artifact_judge(label: str, fmt: str, precision: str, exporter: str, base: Artifact | None = None) -> Judge:
    """What a cached export or optimization must record to be reused: the format, precision and maker its stage makes
    (the precision chooses how the artifact is judged: int8 by a looser budget than fp32's tolerance), its files and
    none other, readable input specs and attempts; an optimization, the inputs of the artifact it starts from."""
    from convert.exporters.base import Attempt
    from convert.specs import parse_input_spec

    def judge(hit) -> str:
        data = hit.data
        made = {"format": fmt, "precision": precision, "exporter": exporter}
        for field, wanted in made.items():
            if data[field] != wanted:
                return f"it records {field} {data[field]} where {label} makes {wanted}"
        if sorted(data["files"]) != sorted(data["_files"]) or data["path"] not in data["files"]:
            return f"its artifact's files {data['files']} (at {data['path']}) are not the entry's {data['_files']}"
        inputs = [str(parse_input_spec(spec)) for spec in data["inputs"]]
        if base is not None and base.inputs and inputs != [str(spec) for spec in base.inputs]:
            return f"it records the inputs {inputs} where the artifact it starts from takes {[str(s) for s in base.inputs]}"
        if base is not None and data["fixed_shape_reason"] != base.fixed_shape_reason:
            return "it records another fixed-shape reason than the artifact it starts from"
        if not all(isinstance(low, int) and (high is None or isinstance(high, int)) for low, high in data["dim_bounds"].values()):
            return f"its dim bounds {data['dim_bounds']} are not sizes"
        if not any(Attempt(**attempt).status == "ok" for attempt in data["attempts"]):
            return "it records no attempt that made its artifact"
        return ""

    return judge


def setup_job(worker, stage: rm.Stage, job: Job):
    """A job the worker must have done before any other (loading the source): a crash here is the model's fault."""
    try:
        return worker.call(job, setup=True)
    except StageCrashed as exc:
        crashed(stage, exc)
        printed = _log_kept_outside(worker)
        raise ConvertError(
            f"loading the model did not finish: {exc}",
            "The file may be corrupt or truncated, or need other versions of its framework's native "
            "libraries: "
            + (
                f"what they printed before the crash is in {printed}."
                if printed
                else "load it in a Python shell with the same packages to see the crash."
            ),
        ) from None


def _log_kept_outside(worker) -> str | None:
    """The worker's log (the crash's own words: a native abort, an out-of-memory message) copied to a temporary file,
    since a run that stops while loading has no output folder to keep it in; None when nothing was printed."""
    text = log_bytes(worker.log) if getattr(worker, "log", None) is not None else b""
    if not text:
        return None
    try:
        descriptor, name = tempfile.mkstemp(prefix="model-convert-load-", suffix=".log")
        with os.fdopen(descriptor, "wb") as file:
            file.write(text)
    except OSError:
        return None
    return name


def made(ctx: RunContext, stage: rm.Stage, lookup: Lookup, job: Export | Optimize):
    """An export or optimization: from the cache when its entry is there and trusted, else made and then cached."""
    from convert.exporters.base import Attempt, ExportOutcome

    cache: RunCache = ctx.cache
    folder: Path = ctx.staging.path
    if lookup.hit is not None:
        stage.reused = True
        attempts = [Attempt(**attempt) for attempt in lookup.hit.data["attempts"]]
        return ExportOutcome(cached_artifact(lookup.hit, folder), attempts)
    started = time.perf_counter()
    try:
        outcome = ctx.worker.call(job)
    except StageCrashed as exc:  # a crash or timeout: a failed attempt of a failed stage
        return ExportOutcome(None, [Attempt(job.name, "failed", time.perf_counter() - started, crashed(stage, exc))])
    if outcome.artifact is not None:
        cache.keep(lookup, {**artifact_data(outcome.artifact), "attempts": [a.__dict__ for a in outcome.attempts]}, outcome.artifact.files)
    return outcome


def recorded(outcome, record: rm.ArtifactRecord, stage: rm.Stage) -> Artifact | None:
    """Record an export's (or optimization's) attempts; the artifact, or None when every strategy failed."""
    record.attempts = list(outcome.attempts)  # the report's Attempt, whose log the report leaves out
    if outcome.artifact is None:
        stage.status, stage.error = "failed", outcome.primary_error
        return None
    artifact = outcome.artifact
    record.exporter, record.strategy, record.precision = artifact.exporter, artifact.strategy, artifact.precision
    record.dim_bounds = {symbol: list(bounds) for symbol, bounds in artifact.dim_bounds.items()}
    for detail in artifact.details:
        record.add(rm.parse_detail(detail))
    return artifact
