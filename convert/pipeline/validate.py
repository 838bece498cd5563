"""The validation stage: every runtime that can run an artifact × every device × every shape case, each runtime ×
device cached on its own; an ONNX artifact whose declared shapes did not hold is repaired and validated again. A
validated artifact is then published: moved to its final path, or to the failed folder."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.cache import RunCache, artifact_data
from convert.devices import ALL_DEVICES, absent_reason, cuda_gpus
from convert.pipeline.context import RunContext, crashed
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import FAILED_FOLDER, sha256_files, size_of
from convert.text import first_line
from convert.validation import (
    CaseComparison,
    RepairOutputDims,
    Validate,
    ValidationCase,
    fixed_dims,
    is_float,
    judge_cached,
    judge_output,
    named_float,
    token_outputs,
)
from convert.validators import TolerancePolicy
from convert.validators.task_metrics import metric_drop
from convert.worker import StageCrashed


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
    """Validate a staged artifact on ``cases`` (the run's by default); an artifact whose declared output shapes did not
    hold has those dims made dynamic in its graph where its format can be repaired (ONNX) and ``repair`` allows it, and
    is validated again (the report records the repair where the checks show it took)."""
    from convert.validation import declared_repairs

    cases = ctx.cases if cases is None else cases
    with ctx.stages.run("validate", key) as stage:
        record.checks = _checks(ctx, stage, artifact, record, cases)
        repairs = declared_repairs(record.checks, cases) if REGISTRY.format(artifact.format).repair_output_dims and repair else {}
        if repairs:
            _repair(ctx, stage, key, artifact, record, cases, repairs)
        attest(ctx, artifact, record)
        chain(ctx, artifact, record)
    record.fixed_dims = list(fixed_dims(artifact, cases))
    record.passed = artifact_passed(record)


def attest(ctx: RunContext, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Record what the artifact's matrix products compute in, measured at the input shapes of its first check that
    passed (else that ran), and judge its pass's precision claim against ``--min-precision-share``
    (convert/precision.py). A measurement that fails or crashes is ``skipped`` with why: it fails nothing."""
    import time

    from convert.precision import Attest, Measured, attested_share, judged, shares, unsized_for

    spec = REGISTRY.format(artifact.format)
    pass_spec = REGISTRY.get("optimizer", record.optimization) if record.optimization else None
    # a pass claims its own precision (an FP32 pass on a BF16 base only changes the format); an export, the source's
    claimed, claim = (pass_spec.precision, pass_spec.claim) if pass_spec else (record.precision, "compute")
    threshold = ctx.request.min_precision_share
    attestation = rm.PrecisionAttestation(status="skipped", claimed=claimed, claim=claim, threshold=threshold)
    ran = [c for c in record.checks if c.input_shapes and c.kind == "shape"]
    sizing = next((c for c in ran if c.status == "passed"), None) or next((c for c in ran if c.status == "failed"), None)
    if spec.attest is None:
        attestation.reason = f"the tool cannot read the types of {spec.title}'s matrix products"
    elif sizing is None:
        attestation.reason = "no check ran, whose input shapes would size its products"
    else:
        started = time.perf_counter()
        try:
            measured = ctx.worker.call(Attest(artifact.format, artifact.path, sizing.input_shapes))
        except StageCrashed as exc:
            measured = f"measuring it crashed the worker: {exc}"
        except Exception as exc:  # noqa: BLE001 - a measurement that fails is reported, never fails the run
            measured = f"measuring it failed: {type(exc).__name__}: {first_line(str(exc))}"
        attestation.seconds = round(time.perf_counter() - started, 3)
        if isinstance(measured, Measured):
            products = measured.products
            attestation.shape, attestation.measured, attestation.casts = measured.sized_at or sizing.shape, measured.how, measured.casts
            attestation.products, attestation.macs = len(products), sum(p.macs or 0 for p in products)
            attestation.unsized = sum(1 for p in products if p.macs is None)
            attestation.compute, attestation.weights = shares(products, "compute"), shares(products, "weights")
            attestation.runtime, attestation.runtime_compute = measured.runtime, measured.runtime_shares()
            attestation.runtime_note = measured.runtime_reason
            attestation.attested_share = attested_share(claimed, claim, products)
            unsized = unsized_for(claim, products)
            if not products:
                attestation.reason = "it has no matrix products (convolutions, matrix multiplications, Gemm)"
            elif not judged(claimed, threshold) or attestation.attested_share is None:
                attestation.status = "measured"
            elif unsized:
                attestation.status = "measured"
                attestation.reason = f"{unsized} of its products the claim counts could not be sized: the claim is not judged"
            else:
                attestation.status = "passed" if attestation.attested_share >= threshold else "failed"
        else:
            attestation.reason = measured
    record.add(attestation)


def chain(ctx: RunContext, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Record the error each link of the artifact's chain adds (convert/chain.py), on the first sample of its first
    shape check that ran: an optimized artifact's base's links, then its pass's. A given artifact has no chain."""
    import time

    from convert.chain import MeasureChain
    from convert.pipeline.localize import export_job

    cases = {c.shape.describe(): c for c in ctx.cases if c.feeds and c.padding is None}
    ran = next((c for c in record.checks if c.kind == "shape" and c.status in ("passed", "failed") and c.shape in cases), None)
    if record.exporter == "given" or ran is None:
        return
    case = cases[ran.shape]
    by_path = {r.path: r for r in ctx.report.artifacts if r.path}
    base_record = by_path.get(record.derived_from) if record.derived_from else None
    base = next((a for a in ctx.artifacts.values() if str(a.path) == record.derived_from), None) if base_record else None
    started = time.perf_counter()
    try:
        found = ctx.worker.call(
            MeasureChain(
                artifact,
                record.exporter,
                record.optimization or record.strategy,
                export_job(ctx),
                case.feeds[0],
                case.references[0],
                ctx.policy,
                base,
            )
        )
    except StageCrashed as exc:
        found = rm.ChainLinks(links=[_chain_failed(record, f"measuring it crashed the worker: {exc}")])
    except Exception as exc:  # noqa: BLE001 - figures that cannot be measured are reported, never fail the run
        found = rm.ChainLinks(links=[_chain_failed(record, f"measuring it failed: {type(exc).__name__}: {first_line(str(exc))}")])
    before = base_record.detail(rm.ChainLinks) if base_record is not None else None
    found.links = [*(before.links if before is not None else []), *found.links]
    found.shape, found.runtime, found.seconds = ran.shape, ran.runtime, round(time.perf_counter() - started, 3)
    record.add(found)


def _chain_failed(record: rm.ArtifactRecord, reason: str) -> rm.ChainLink:
    kind = "optimization" if record.derived_from else "capture"
    return rm.ChainLink(link=kind, step=record.optimization or record.strategy, compares="", status="skipped", reason=reason)


def _repair(
    ctx: RunContext,
    stage: rm.Stage,
    key: str,
    artifact: Artifact,
    record: rm.ArtifactRecord,
    cases: list[ValidationCase],
    repairs: dict[tuple[str, int], tuple[str, str]],
) -> None:
    """Make the output dims whose declarations did not hold dynamic, and validate again. A repair is kept, and recorded,
    only where the checks after it show that it took; otherwise the artifact goes back to its exported bytes, its
    first checks stand, and a note says what was tried."""
    from convert.validation import repairs_not_held

    first, digest = record.checks, (artifact.sha256, artifact.size_bytes)
    exported = artifact.path.with_name(f".{artifact.path.name}.unrepaired")
    shutil.copy2(artifact.path, exported)
    try:
        ctx.worker.call(RepairOutputDims(artifact.format, artifact.path, {where: name for where, (name, _) in repairs.items()}))
        repaired = _checks(ctx, stage, artifact, record, cases)
    except BaseException:
        os.replace(exported, artifact.path)
        raise
    not_held = repairs_not_held(first, repaired, repairs)
    if not not_held:
        exported.unlink()
        record.checks, record.repairs = repaired, [why for _, why in repairs.values()]
        return
    os.replace(exported, artifact.path)
    artifact.sha256, artifact.size_bytes = record.sha256, record.size_bytes = digest
    dims = ", ".join(f"axis {axis} of '{tensor}' as '{name}'" for (tensor, axis), (name, _) in repairs.items())
    ctx.report.notes.append(
        f"{key}: its declared output dims were made dynamic ({dims}) and validated again, but the repair did not take "
        f"({not_held[0]}): the artifact is kept as exported, and its checks are those of its first validation"
    )


def artifact_passed(record: rm.ArtifactRecord) -> bool:
    """A check passed and none failed (skipped checks alone are no pass), and it computes in the precision its pass
    claims (where that was judged)."""
    statuses = [c.status for c in record.checks]
    attested = record.detail(rm.PrecisionAttestation)
    return "passed" in statuses and "failed" not in statuses and (attested is None or attested.status != "failed")


def _checks(ctx: RunContext, stage: rm.Stage, artifact: Artifact, record: rm.ArtifactRecord, cases: list[ValidationCase]) -> list[rm.Check]:
    artifact.sha256 = sha256_files(artifact.files)  # before validation: the cache keys its results on it
    artifact.size_bytes = size_of(artifact.files)
    record.sha256, record.size_bytes = artifact.sha256, artifact.size_bytes
    return validate_artifact(ctx.worker, stage, artifact, cases, ctx.policy, ctx.cache, ctx.request.allow_fixed_shapes)


def publish(ctx: RunContext, key: str, artifact: Artifact, record: rm.ArtifactRecord) -> None:
    """Move a validated artifact to its final path; one that failed validation goes to the failed folder instead."""
    failed = ctx.out_dir / FAILED_FOLDER
    folder, other = (ctx.out_dir, failed) if record.passed else (failed, ctx.out_dir)
    ctx.staging.publish(sorted(artifact.files, key=lambda f: f == artifact.path), folder, other)  # its data before the model
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
                stage.kind,
                f"{stage.name} {entry.name} {device}",
                entry.all_packages,
                artifact.sha256,
                artifact_data(artifact),
                entry.name,
                device,
                cuda_gpus() if device != "cpu" else [],
                cache.cases_digest(cases),
                judge=lambda hit, runtime=entry.name, device=device: reusable(
                    hit.data["checks"], artifact, runtime, device, cases, policy, allow_fixed_shapes
                ),
            )
            if lookup.hit is not None:
                checks += judged_again(lookup.hit.data["checks"], artifact, cases, policy)
                reused += 1
                continue
            try:
                found = worker.call(Validate(artifact, entry.name, device, cases, policy, allow_fixed_shapes))
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


# --- a cached measurement reused ---------------------------------------------------------------------------------
# The cache keeps a check's measurements; a run that reuses them judges them again with the judge of fresh checks
# (convert/validation.py judge_cached), under its own tolerances and budgets. What is held to this run here is whether
# the measurements can stand for this run's: the same cases and shapes, what checks_on decides before running (a skip
# where the source fails or the artifact cannot take the shape, a failure where it fixes a dim asked dynamic), every
# sample compared, mismatches counted at this run's elementwise tolerance, and metrics that agree with each other and
# with the source's references. Metrics that are forged consistently are not caught here: the cache's digest, and
# whoever may write the cache, are what stands behind those.

RELATIVE_SLACK = 1e-6  # the float rounding allowed between a recomputed bound and a recorded metric


def reusable(
    stored: list,
    artifact: Artifact,
    runtime: str,
    device: str,
    cases: list[ValidationCase],
    policy: TolerancePolicy,
    allow_fixed_shapes: bool,
) -> str:
    """Why the cached checks of ``runtime`` on ``device`` cannot stand for this run's measurements ("" when they can)."""
    checks = [rm.Check.model_validate(check) for check in stored]
    if not checks:
        return "it holds no check"
    for check in checks:
        if (check.runtime, check.device) != (runtime, device):
            return f"it holds a check of {check.runtime} on {check.device} in the entry of {runtime} on {device}"
        if check.device_unsupported:
            return f"it holds a check marked as never running on {device}, which is never a job of its own"
    if checks[0].shape == "*":
        if len(checks) == 1 and checks[0].status == "failed":
            return ""  # the artifact could not be loaded: a failure, which can only reject
        if len(checks) == 1 and checks[0].status == "skipped":
            return "a skip before any shape ran (the runtime could not take the artifact here) cannot be told again without running"
        return f"it holds {len(checks)} checks over no shape, one {checks[0].status}"
    if len(checks) != len(cases):
        return f"{len(cases)} shape cases but {len(checks)} checks in the entry"
    masked = token_outputs(artifact.inputs, cases)
    for check, case in zip(checks, cases):
        why = _reusable_check(check, case, artifact, cases, policy, allow_fixed_shapes, masked)
        if why:
            return f"{check.shape}: {why}"
    return ""


def judged_again(stored: list, artifact: Artifact, cases: list[ValidationCase], policy: TolerancePolicy) -> list[rm.Check]:
    """The cached checks (``reusable`` ones) judged under this run's tolerances and budgets."""
    checks = [rm.Check.model_validate(check) for check in stored]
    if checks[0].shape == "*":
        return checks
    masked = token_outputs(artifact.inputs, cases)
    return [judge_cached(check, case, artifact.precision, policy, CaseComparison(case, masked)) for check, case in zip(checks, cases)]


def _reusable_check(
    check: rm.Check,
    case: ValidationCase,
    artifact: Artifact,
    cases: list[ValidationCase],
    policy: TolerancePolicy,
    allow_fixed_shapes: bool,
    masked: dict[str, str],
) -> str:
    if case.generation is not None:
        if check.kind != "generation" or check.shape != case.shape.label:
            return f"the check of {check.kind} at {check.shape} where this run's case is the generation {case.shape.label}"
        return _rejudged_generation(check, case, policy.for_output("logits", artifact.precision), artifact.precision)
    if check.kind != "shape" or check.shape != case.shape.describe():
        return f"the check of {check.kind} at {check.shape} where this run's case is {case.shape.describe()}"
    if case.feeds and check.input_shapes != {n: list(a.shape) for n, a in case.feeds[0].items()}:
        return f"its input shapes {check.input_shapes} are not this case's"
    # what checks_on decides before running
    fixed = artifact.fixed_dims_mismatch({n: a.shape for n, a in case.feeds[0].items()}) if case.feeds else ""
    symbols = fixed_dims(artifact, cases, [case]) if fixed else {}
    before = "skipped" if case.source_error else "failed" if symbols and not allow_fixed_shapes else "skipped" if fixed else ""
    if before == "skipped" and case.labels is not None and policy.task_budget:
        before = "failed"  # a task budget judges the artifact and its data check could not run
    if before:
        return "" if check.status == before else f"recorded {check.status}, where this run decides {before} before running"
    if check.status == "skipped":
        return "recorded skipped, but this run would have run it"
    if not check.outputs:  # the runtime failed, or did not take the feed, before every sample was compared
        if check.status == "failed" and check.samples < len(case.feeds):
            return ""
        return f"recorded {check.status} with no output compared, yet every sample ran"
    # measured: every sample compared, every output the source's, its metrics consistent under this run's tolerance
    if not case.feeds or check.samples != len(case.feeds):
        return f"recorded {check.samples} of {len(case.feeds)} samples compared"
    expected = list(case.references[0]) if case.references else []
    if [o.name for o in check.outputs] != expected:
        return f"records the outputs {[o.name for o in check.outputs]}, where the source's are {expected}"
    compared = CaseComparison(case, masked)
    for output in check.outputs:
        tolerance = compared.tolerance(policy, output.name, artifact.precision)
        why = _unsupported_measurement(output, case, tolerance, check.samples, compared)
        if why:
            return f"output '{output.name}' {why}"
    if case.labels is not None:
        return _unsupported_task_measurement(check, case)
    return ""


def _unsupported_measurement(output, case: ValidationCase, tolerance, samples: int, compared: CaseComparison) -> str:
    """Why an output's recorded metrics cannot stand for this run's measurement ("" when they can): mismatches counted
    at another elementwise tolerance, its counts, the metrics every compared output has, and, where this run's judge
    passes it, the bounds a pass puts on its errors."""
    from convert.validators.compare import ERROR_HISTOGRAM_EDGES, TOP_K

    if output.atol is None or output.rtol is None:
        return "records no tolerance"
    if (output.atol, output.rtol, output.atol_scale) != (tolerance.atol, tolerance.rtol, tolerance.scale):
        return (
            f"counted its mismatches at atol={output.atol:g}, rtol={output.rtol:g} where this run's tolerance is "
            f"atol={tolerance.atol:g}, rtol={tolerance.rtol:g}"
        )
    references = compared.references(output.name)[:samples]
    elements = sum(r.size for r in references)
    masked = sum(r.size for r in compared.all_references(output.name)[:samples]) - elements
    if output.samples != samples or (output.elements, output.masked_values) != (elements, masked):
        return (
            f"counts {output.elements} values ({output.masked_values} masked) over {output.samples} samples where the source "
            f"gives {elements} ({masked} masked) over {samples}"
        )
    if not 0 <= output.mismatch_count <= elements:
        return f"counts {output.mismatch_count} mismatches of {elements} values"
    if judge_output(output, case, tolerance, compared).status != "passed":
        return ""  # a failure needs no more support than its metrics
    shape = references[0].shape  # the compared values' (a masked output's positions are one axis)
    exact = not (is_float(references[0].dtype) or named_float(output.dtype))
    needed = ["max_abs_error", "max_rel_error", "cosine_similarity"]
    if not exact:
        needed += ["rel_rms_error"] + (["top1_agreement"] if len(shape) >= 2 and shape[-1] >= 2 else [])
        needed += ["top5_agreement"] if len(shape) >= 2 and shape[-1] > TOP_K else []
    for name in needed:
        value = getattr(output, name)
        if value is None or not math.isfinite(value) or value < -1 - RELATIVE_SLACK:
            return f"is judged passed while its {name} is missing or not finite"
    if exact:
        return "" if output.max_abs_error == 0 else f"compared exactly, is judged passed with max_abs_error {output.max_abs_error:.6g}"
    if tolerance.elementwise and not tolerance.budget:
        # no value beyond atol + rtol * |expected| (validators/compare.py): nor the largest error, nor the relative one
        largest = max(float(np.abs(r.astype(np.float64)).max()) for r in references)
        bound = (tolerance.atol + tolerance.rtol * largest) * (1 + RELATIVE_SLACK)
        if output.max_abs_error > bound:
            return (
                f"is judged passed with max_abs_error {output.max_abs_error:.6g}, beyond atol={tolerance.atol:g} + "
                f"rtol={tolerance.rtol:g} x max |reference| {largest:.6g} = {bound:.6g}"
            )
        relative = 2 * tolerance.rtol if tolerance.rtol > 0 else 1.0
        if output.max_rel_error > relative * (1 + RELATIVE_SLACK):
            return f"is judged passed with max_rel_error {output.max_rel_error:.6g}, beyond the {relative:g} a pass allows"
    # the metrics must agree with each other: the error histogram counts every value, its largest bin holds the largest
    # error, and the largest error bounds the rms error from below (one value that large) and above (every value)
    histogram = output.error_histogram
    if histogram is None or len(histogram) != len(ERROR_HISTOGRAM_EDGES) or sum(histogram) != elements or min(histogram) < 0:
        return f"records an error histogram that does not count its {elements} values"
    top_bin = int(np.searchsorted(np.asarray(ERROR_HISTOGRAM_EDGES[1:]), output.max_abs_error, side="right"))
    if max(i for i, count in enumerate(histogram) if count) != top_bin:
        return f"records max_abs_error {output.max_abs_error:.6g} outside the largest bin its error histogram counts"
    norms = [float(np.linalg.norm(r.astype(np.float64))) for r in references]
    if all(norms):
        low = output.max_abs_error / max(norms) * (1 - RELATIVE_SLACK)
        high = max(output.max_abs_error * math.sqrt(r.size) / n for r, n in zip(references, norms)) * (1 + RELATIVE_SLACK)
        if not low <= output.rel_rms_error <= high:
            return f"records rel_rms_error {output.rel_rms_error:.6g}, which its max_abs_error {output.max_abs_error:.6g} rules out"
    return ""


def _unsupported_task_measurement(check: rm.Check, case: ValidationCase) -> str:
    """Why a check's task metrics on the labelled data cannot stand for this run's: the source's metrics, and drops that
    follow from the values."""
    task = check.task
    if task is None:
        return "records no task metrics on the labelled data"
    if task.reason:
        return ""
    source = {m.name: m.source for m in case.task.metrics} if case.task is not None else {}
    if {m.name for m in task.metrics} != set(source):
        return f"records the task metrics {sorted(m.name for m in task.metrics)} where the source's are {sorted(source)}"
    for metric in task.metrics:
        if metric.source != source[metric.name] or metric.drop != metric_drop(metric.name, metric.source, metric.artifact):
            return f"records task {metric.name} {metric.artifact} and a drop {metric.drop} that are not the source's {source[metric.name]}"
    return ""


def _rejudged_generation(check: rm.Check, case: ValidationCase, tolerance, precision: str) -> str:
    """A generation check judged again as validators/generation.compare_generation judges its metrics."""
    from convert.validators.generation import agreement_floor, by_agreement

    metrics, reference = check.generation, case.generation
    if metrics is None:
        return "" if check.status == "failed" else f"recorded {check.status} without its generation metrics"
    failing = []
    judged_by_agreement = by_agreement(tolerance, precision)
    if judged_by_agreement:
        floor = agreement_floor(tolerance, precision)
        cosine = next((bound for metric, _, bound in tolerance.budget if metric == "cosine"), None)
        if not metrics.token_agreement >= floor:
            failing.append(f"token agreement {metrics.token_agreement} below {floor}")
        if cosine is not None and not metrics.min_cosine >= cosine:
            failing.append(f"min cosine {metrics.min_cosine} below {cosine}")
    elif metrics.first_divergent_step is not None:
        failing.append(f"diverges at step {metrics.first_divergent_step}")
    if check.status == "failed":
        return "" if failing else "recorded failed, but its generation metrics pass under this run's tolerance"
    if check.status != "passed" or failing:
        return f"recorded {check.status}" + (f", but {'; '.join(failing)}" if failing else ", but a generation check always runs")
    steps, prompts = reference.logits.shape[0], reference.logits.shape[1]
    if (metrics.steps, metrics.prompts, check.samples) != (steps, prompts, prompts):
        return f"records {metrics.steps} steps x {metrics.prompts} prompts where this run decodes {steps} x {prompts}"
    values = (metrics.token_agreement, metrics.max_abs_logits, metrics.min_cosine)
    if not all(math.isfinite(v) for v in values) or not 0 <= metrics.token_agreement <= 1:
        return "records generation metrics that are missing or not finite"
    if not judged_by_agreement:
        bound = (tolerance.atol + tolerance.rtol * float(np.abs(reference.logits).max())) * (1 + RELATIVE_SLACK)
        if metrics.token_agreement != 1 or metrics.max_abs_logits > bound:
            return f"is recorded passed with token agreement {metrics.token_agreement} and max |logits error| {metrics.max_abs_logits:.6g} (a pass allows {bound:.6g})"
    return ""
