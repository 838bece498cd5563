"""The validation stage: the loop over the registered checks (convert/checks/) that apply to an artifact. While it is
validated, the comparison with the source on every runtime × device × shape case, the repair of declared shapes, and
what explains it (attestation, the chain); then it is judged, and published: moved to its final path, or to the failed
folder; a failing one is then diagnosed (localisation, sensitivity). A check that declares it cacheable has its detail
kept in the stage cache and given back for the same artifact, cases, tolerances and packages."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from convert.artifacts import Artifact
from convert.cache import artifact_data
from convert.checks.base import Subject
from convert.checks.localize import REPRODUCER_SUFFIX
from convert.pipeline.context import RunContext
from convert.registry import REGISTRY, CheckSpec, load_target
from convert.reports import model as rm
from convert.safety import FAILED_FOLDER
from convert.validation import ValidationCase, fixed_dims


def validate_and_publish(
    ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord, validated: bool = False, made_by: Any = None
) -> None:
    """Validate a staged artifact (unless ``validated`` already), then move it into place and record where it went; a
    failing one is then diagnosed (``made_by``: the pass's job, for an artifact an optimization made)."""
    if not validated:
        validate(ctx, key, artifact, record)
    publish(ctx, key, artifact, record)
    published = ctx.artifacts[key]
    reproducer = published.path.with_name(f"{published.path.name}{REPRODUCER_SUFFIX}")
    for stale in (reproducer, reproducer.with_name(f".{reproducer.name}.partial")):  # an earlier run's, or one a kill cut short
        shutil.rmtree(stale, ignore_errors=True)
    if not record.passed:
        run_checks(ctx, "diagnose", Subject(key, published, record, ctx.cases, made_by=made_by))


def validate_given(ctx: RunContext, name: str, path: Path, fmt: str) -> None:
    """Validate an artifact someone already has, as it is: against the source, on the same cases as an exported one,
    never repaired, moved or changed. An ONNX file whose outputs carry other names than the source's, as many of them,
    and none in common, is compared output by output in order, and the report says which name met which."""
    spec = REGISTRY.format(fmt)
    files = [path, *spec.files_beside(path)]
    # named like the source's outputs in its order where the format names none (a .pte); ONNX files name their own
    outputs = () if spec.output_names else ctx.source.signature.outputs
    artifact = Artifact(
        format=fmt, path=path, files=files, exporter="given", strategy="given", inputs=ctx.source.signature.inputs, output_names=outputs
    )
    record = rm.ArtifactRecord(format=fmt, given=name, path=str(path), files=[str(f) for f in files], exporter="given", strategy="given")
    ctx.report.artifacts.append(record)
    cases = ctx.cases
    if spec.output_names:
        cases, matched = _by_the_artifacts_output_names(spec.names_of_outputs(path), ctx.source.signature.outputs, ctx.cases)
        if matched:
            ctx.report.notes.append(f"{name}: its outputs are compared in order, the source's names against its own: {matched}")
    validate(ctx, name, artifact, record, cases=cases, repair=False)
    ctx.artifacts[name] = artifact


def _by_the_artifacts_output_names(
    names: list[str], outputs: tuple[str, ...], cases: list[ValidationCase]
) -> tuple[list[ValidationCase], str]:
    """The cases with the source's outputs under the artifact's output names where they differ but are as many, and
    which name met which ("" where the names are the same, or cannot be matched: the checks then name what is missing)."""
    import dataclasses

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
    """Run the checks of the validate phase on a staged artifact, on ``cases`` (the run's by default; ``repair``: its
    declared output shapes may be repaired where its format can be), and judge it."""
    subject = Subject(key, artifact, record, ctx.cases if cases is None else cases, repair=repair)
    with ctx.stages.run("validate", key) as stage:
        subject.stage = stage
        run_checks(ctx, "validate", subject)
    record.fixed_dims = list(fixed_dims(artifact, subject.cases))
    record.passed = artifact_passed(record)


def run_checks(ctx: RunContext, phase: str, subject: Subject) -> None:
    """Every registered check of ``phase`` that applies to the artifact's format, in registration order."""
    for spec in REGISTRY.entries("check", phase=phase):
        if spec.applies_to(subject.artifact.format):
            if spec.cacheable:
                _cached(ctx, spec, subject)
            else:
                spec.load()(ctx, subject)


def _cached(ctx: RunContext, spec: CheckSpec, subject: Subject) -> None:
    """A cacheable check's detail from the stage cache where kept for this artifact's bytes, cases and tolerances;
    else the check runs and its detail is kept."""
    artifact, record = subject.artifact, subject.record
    kind = load_target(spec.detail)
    lookup = ctx.cache.find(
        "validate",
        f"{spec.name}:{subject.key}",
        spec.all_packages,
        spec.name,
        artifact.sha256,
        artifact_data(artifact),
        ctx.cache.cases_digest(subject.cases),
        ctx.policy.given,
        judge=lambda hit: "" if isinstance(hit.data.get("detail"), dict) else "it holds no detail",
    )
    if lookup.hit is not None:
        record.add(kind.model_validate(lookup.hit.data["detail"]))
        return
    spec.load()(ctx, subject)
    found = record.detail(kind)
    if found is not None:
        ctx.cache.keep(lookup, {"detail": found.model_dump(mode="json")})


def artifact_passed(record: rm.ArtifactRecord) -> bool:
    """A check passed and none failed (skipped checks alone are no pass), and it computes in the precision its pass
    claims (where that was judged)."""
    statuses = [c.status for c in record.checks]
    attested = record.detail(rm.PrecisionAttestation)
    return "passed" in statuses and "failed" not in statuses and (attested is None or attested.status != "failed")


def publish(ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Move a validated artifact to its final path; one that failed validation goes to the failed folder instead."""
    failed = ctx.out_dir / FAILED_FOLDER
    folder, other = (ctx.out_dir, failed) if record.passed else (failed, ctx.out_dir)
    ctx.staging.publish(sorted(artifact.files, key=lambda f: f == artifact.path), folder, other)  # its data before the model
    artifact = artifact.relocated(folder)
    ctx.artifacts[key] = artifact
    record.path, record.files = str(artifact.path), [str(f) for f in artifact.files]
