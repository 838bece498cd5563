"""The validation stage: every runtime that can run an artifact × every device × every shape case, each runtime ×
device cached on its own; an ONNX artifact whose declared shapes did not hold is repaired and validated again. A
validated artifact is then published: moved to its final path, or to the failed folder."""

from __future__ import annotations

import shutil
from pathlib import Path

from convert.artifacts import Artifact
from convert.cache import RunCache, artifact_data
from convert.devices import ALL_DEVICES, absent_reason, cuda_gpus
from convert.pipeline.context import RunContext, crashed
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import FAILED_FOLDER, sha256_files, size_of
from convert.validation import ValidationCase
from convert.validators import TolerancePolicy
from convert.worker import Session, StageCrashed


def validate_and_publish(ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord, validated: bool = False) -> None:
    """Validate a staged artifact (unless ``validated`` already), then move it into place and record where it went;
    where a failing one diverged."""
    from convert.pipeline.localize import REPRODUCER_SUFFIX, localize

    if not validated:
        validate(ctx, key, artifact, record)
    publish(ctx, key, artifact, record)
    published = ctx.artifacts[key]
    reproducer = published.path.with_name(f"{published.path.name}{REPRODUCER_SUFFIX}")
    for stale in (reproducer, reproducer.with_name(f".{reproducer.name}.partial")):  # an earlier run's, or one a kill cut short
        shutil.rmtree(stale, ignore_errors=True)
    if not record.passed:
        localize(ctx, key, published, record)


def validate_given(ctx: RunContext, name: str, path: Path, fmt: str) -> None:
    """Validate an artifact someone already has, as it is: against the source, on the same cases as an exported one,
    never repaired, moved or changed. An ONNX file whose outputs carry other names than the source's, as many of them,
    and none in common, is compared output by output in order, and the report says which name met which."""
    from convert.backends.onnx import check_external_data

    files = [path, *check_external_data(path)] if fmt == "onnx" else [path]
    # named like the source's outputs in its order where the format names none (a .pte); ONNX files name their own
    outputs = () if fmt == "onnx" else ctx.source.signature.outputs
    artifact = Artifact(
        format=fmt, path=path, files=files, exporter="given", strategy="given", inputs=ctx.source.signature.inputs, output_names=outputs
    )
    record = rm.ArtifactRecord(format=fmt, given=name, path=str(path), files=[str(f) for f in files], exporter="given", strategy="given")
    ctx.report.artifacts.append(record)
    cases = ctx.cases
    if fmt == "onnx":
        cases, matched = _by_the_artifacts_output_names(path, ctx.source.signature.outputs, ctx.cases)
        if matched:
            ctx.report.notes.append(f"{name}: its outputs are compared in order, the source's names against its own: {matched}")
    validate(ctx, name, artifact, record, cases=cases, repair=False)
    ctx.artifacts[name] = artifact


def _by_the_artifacts_output_names(path: Path, outputs: tuple[str, ...], cases: list[ValidationCase]) -> tuple[list[ValidationCase], str]:
    """The cases with the source's outputs under the ONNX file's output names where they differ but are as many, and
    which name met which ("" where the names are the same, or cannot be matched: the checks then name what is missing)."""
    import dataclasses

    import onnx

    names = [o.name for o in onnx.load(str(path), load_external_data=False).graph.output]
    if set(names) & set(outputs) or len(names) != len(outputs):  # a shared name is matched by name, never moved
        return cases, ""
    renamed = dict(zip(outputs, names))
    moved = [
        dataclasses.replace(case, references=[{renamed.get(k, k): v for k, v in reference.items()} for reference in case.references])
        for case in cases
    ]
    return moved, ", ".join(f"'{a}' ↔ '{b}'" for a, b in renamed.items())


def validate(
    ctx: RunContext,
    key: str,
    artifact: Artifact,
    record: rm.ArtifactRecord,
    cases: list[ValidationCase] | None = None,
    repair: bool = True,
) -> None:
    """Validate a staged artifact on ``cases`` (the run's by default); an artifact whose declared output shapes did not
    hold has those dims made dynamic in its graph where its format can be repaired (ONNX) and ``repair`` allows it, and
    is validated again (the report records the repair)."""
    from convert.validation import declared_repairs, fixed_dims

    cases = ctx.cases if cases is None else cases
    with ctx.stages.run(f"validate:{key}") as stage:
        record.checks = _checks(ctx, stage, artifact, record, cases)
        repairs = declared_repairs(record.checks, cases) if artifact.format == "onnx" and repair else {}
        if repairs:
            ctx.worker.call(Session.name_onnx_output_dims, artifact.path, {where: name for where, (name, _) in repairs.items()})
            record.repairs = [why for _, why in repairs.values()]
            record.checks = _checks(ctx, stage, artifact, record, cases)
    record.fixed_dims = list(fixed_dims(artifact, cases))
    record.passed = artifact_passed(record)


def artifact_passed(record: rm.ArtifactRecord) -> bool:
    """A check passed and none failed (skipped checks alone are no pass)."""
    statuses = [c.status for c in record.checks]
    return "passed" in statuses and "failed" not in statuses


def _checks(ctx: RunContext, stage: rm.Stage, artifact: Artifact, record: rm.ArtifactRecord, cases: list[ValidationCase]) -> list[rm.Check]:
    artifact.sha256 = sha256_files(artifact.files)  # before validation: the cache keys its results on it
    artifact.size_bytes = size_of(artifact.files)
    record.sha256, record.size_bytes = artifact.sha256, artifact.size_bytes
    return validate_artifact(ctx.worker, stage, artifact, cases, ctx.policy, ctx.cache, ctx.request.allow_fixed_shapes)


def publish(ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Move a validated artifact to its final path; one that failed validation goes to the failed folder instead."""
    failed = ctx.out_dir / FAILED_FOLDER
    folder, other = (ctx.out_dir, failed) if record.passed else (failed, ctx.out_dir)
    ctx.staging.publish(artifact.files, folder, other)
    artifact = artifact.relocated(folder)
    ctx.artifacts[key] = artifact
    record.path, record.files = str(artifact.path), [str(f) for f in artifact.files]


def validate_artifact(
    worker,
    stage: rm.Stage,
    artifact: Artifact,
    cases: list[ValidationCase],
    policy: TolerancePolicy,
    cache: RunCache,
    allow_fixed_shapes: bool = False,
) -> list[rm.Check]:
    """Every runtime that can run the artifact × every device × every shape case; a runtime that crashes the
    worker fails its checks on that device, and the others still run. Each runtime × device is cached on its own."""
    checks: list[rm.Check] = []
    jobs = reused = 0
    for entry in REGISTRY.entries("runtime", formats=artifact.format):
        runner_class = entry.load()
        for device in ALL_DEVICES:
            if runner_class.never_runs_on(device) or absent_reason(device):  # known here, without a job
                checks.append(
                    rm.Check(
                        runtime=entry.name,
                        device=device,
                        shape="*",
                        status="skipped",
                        reason=runner_class.unavailable_reason(device),
                        device_unsupported=runner_class.never_runs_on(device),
                    )
                )
                continue
            jobs += 1
            lookup = cache.find(
                f"{stage.name} {entry.name} {device}",
                entry.packages,
                artifact.sha256,
                artifact_data(artifact),
                entry.name,
                device,
                cuda_gpus() if device != "cpu" else [],
                cache.cases_digest(cases),
            )
            if lookup.hit is not None:
                checks += [rm.Check.model_validate(check) for check in lookup.hit.data["checks"]]
                reused += 1
                continue
            try:
                found = worker.call(Session.validate, artifact, entry.name, device, cases, policy, allow_fixed_shapes)
            except StageCrashed as exc:
                checks.append(rm.Check(runtime=entry.name, device=device, shape="*", status="failed", reason=crashed(stage, exc)))
                continue
            checks += found
            cache.keep(lookup, {"checks": [check.model_dump() for check in found]})
    stage.reused = jobs > 0 and reused == jobs
    if not checks:
        checks.append(
            rm.Check(runtime="-", device="-", shape="*", status="skipped", reason=f"no runtime is registered for {artifact.format}")
        )
    return checks
