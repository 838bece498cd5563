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
from convert.validation import ValidationCase, case_comparison, fixed_dims, token_outputs
from convert.validators import TolerancePolicy
from convert.validators.task_metrics import metric_drop
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

    from convert.precision import Measured, attested_share, judged, shares, unsized_for

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
            measured = ctx.worker.call(Session.attest, artifact.format, artifact.path, sizing.input_shapes)
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
            Session.chain,
            artifact,
            record.exporter,
            record.optimization or record.strategy,
            export_job(ctx),
            case.feeds[0],
            case.references[0],
            ctx.policy,
            base,
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
        ctx.worker.call(Session.repair_output_dims, artifact.format, artifact.path, {where: name for where, (name, _) in repairs.items()})
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
                judge=lambda hit, runtime=entry.name, device=device: rejudged(
                    hit.data["checks"], artifact, runtime, device, cases, policy, allow_fixed_shapes
                ),
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


# --- a cached result judged again ------------------------------------------------------------------------------------
# Reused checks are held to what this run would decide: what checks_on (convert/validation.py) decides before running
# (a skip where the source fails or the artifact cannot take the shape, a failure where it fixes a dim asked dynamic)
# is decided again here, and a pass must be supported by its metrics under this run's tolerances and budgets, through
# the validators' own judgement (compare.merge_results, which sets an output's status from its metrics). A recorded
# failure must have a cause in what it records. Metrics that are forged consistently are not caught here: the cache's
# digest, and whoever may write the cache, are what stands behind those.

RELATIVE_SLACK = 1e-6  # the float rounding allowed between a recomputed bound and a recorded metric


def rejudged(
    stored: list,
    artifact: Artifact,
    runtime: str,
    device: str,
    cases: list[ValidationCase],
    policy: TolerancePolicy,
    allow_fixed_shapes: bool,
) -> str:
    """Why the cached checks of ``runtime`` on ``device`` cannot be taken as they are ("" when they can)."""
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
        why = _rejudged_check(check, case, artifact, cases, policy, allow_fixed_shapes, masked)
        if why:
            return f"{check.shape}: {why}"
    return ""


def _rejudged_check(
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
    precision = artifact.precision
    compared = _Compared(case, masked)
    if check.status == "failed":
        if not check.outputs:  # the runtime failed, or did not take the feed, before every sample was compared
            return "" if check.samples < len(case.feeds) else "recorded failed with no output compared, yet every sample ran"
        outputs = [_rejudged_output(o, case, compared.tolerance(policy, o.name, precision), compared) for o in check.outputs]
        explained = "failed" in outputs or check.declared_mismatches or _task_failure(check, policy)
        return "" if explained else "recorded failed, but its metrics pass under this run's tolerances"
    # recorded passed: every sample compared, every output the source's and supported by its metrics, no other failure
    if not case.feeds or check.samples != len(case.feeds):
        return f"recorded passed over {check.samples} of {len(case.feeds)} samples"
    if check.declared_mismatches:
        return "recorded passed although declared shapes did not hold"
    expected = list(case.references[0]) if case.references else []
    if [o.name for o in check.outputs] != expected:
        return f"recorded passed with the outputs {[o.name for o in check.outputs]}, where the source's are {expected}"
    for output in check.outputs:
        tolerance = compared.tolerance(policy, output.name, precision)
        status = _rejudged_output(output, case, tolerance, compared)
        if status != "passed" or output.status != "passed":
            return f"output '{output.name}' is recorded {output.status}, re-judged {status}" + (
                f" ({_described(output)})" if output.max_abs_error is not None else ""
            )
        why = _unsupported_pass(output, case, tolerance, check.samples, compared)
        if why:
            return f"output '{output.name}' {why}"
    if case.labels is not None:
        return _unsupported_task_pass(check, case, policy)
    return ""


def _described(output) -> str:
    return f"max_abs_error {output.max_abs_error:.6g} at atol={output.atol}, rtol={output.rtol}"


def _references(case: ValidationCase, name: str) -> list[np.ndarray]:
    return [np.asarray(reference[name]) for reference in case.references if name in reference]


class _Compared:
    """A case's outputs as its checks compare them (convert/validation.py case_comparison): the values at the positions
    a padding mask keeps, and the tolerance scaled by the source's statistics."""

    def __init__(self, case: ValidationCase, masked: dict[str, str]):
        self.case = case
        self.shown, self.stats = case_comparison(case, masked)

    def tolerance(self, policy: TolerancePolicy, name: str, precision: str):
        tolerance = policy.for_output(name, precision)
        stats = self.stats.get(name)
        return tolerance.scaled(stats.rms) if stats is not None else tolerance

    def references(self, name: str) -> list[np.ndarray]:
        """Each sample's compared values of an output (every value where no mask applies to it)."""
        from convert.validators.compare import shown_values

        return [
            shown_values(np.asarray(reference[name]), positions.get(name, ("", None))[1])
            for reference, positions in zip(self.case.references, self.shown)
            if name in reference
        ]

    def low_spread(self, name: str, tolerance) -> bool:
        """Whether the output is judged by its deviations too (a low-spread float output at an elementwise tolerance)."""
        stats = self.stats.get(name)
        return stats is not None and not tolerance.budget and stats.low_spread(tolerance) == "cosine"


def _is_float(dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating)


def _named_float(name: str) -> bool:
    """Whether a recorded dtype name is a float's (bfloat16 and the float8 types are known to NumPy only once ml_dtypes
    is imported)."""
    try:
        return _is_float(np.dtype(name))
    except TypeError:
        return "float" in name


def _rejudged_output(output, case: ValidationCase, tolerance, compared: _Compared) -> str:
    """The status the validators' judgement gives an output from its recorded metrics and this run's tolerance: the
    problems compare_output finds besides the values, re-derived from the references, then merge_results' verdict."""
    from convert.validators.compare import OutputResult, merge_results

    references = _references(case, output.name)
    if not references or output.dtype is None or output.shape is None:
        return "failed"  # an output the source does not have, or one the artifact did not give
    reference = references[0]
    exact = not (_is_float(reference.dtype) or _named_float(output.dtype))
    problems = []
    if output.dtype != str(reference.dtype):
        problems.append("dtype")
    if output.shape != list(reference.shape):
        problems.append("shape")
    if reference.size == 0 or math.prod(output.shape) == 0:
        problems.append("empty")
    if _is_float(reference.dtype) and not all(np.isfinite(r).all() for r in references):
        problems.append("the source's own output is not finite")
    if output.nan_count or output.inf_count:
        problems.append("NaN or Inf")
    result = OutputResult(
        **output.model_dump(exclude={"status", "reason", "atol", "rtol", "budget", "budget_source"}),
        status="passed",
        atol=tolerance.atol,
        rtol=tolerance.rtol,
        bounds=tolerance.budget,
        budget=tolerance.describe_budget(),
        budget_source=tolerance.budget_source,
        elementwise=tolerance.elementwise,
        exact=exact and not problems,
        by_deviation=not exact and compared.low_spread(output.name, tolerance),
        reasons=problems,
    )
    return merge_results([[result]])[0].status


def _unsupported_pass(output, case: ValidationCase, tolerance, samples: int, compared: _Compared) -> str:
    """Why an output's recorded metrics cannot be those of a pass under ``tolerance`` ("" when they can): the tolerance
    it records, its counts, the metrics every compared output has, and the bounds a pass puts on its errors."""
    from convert.validators.compare import ERROR_HISTOGRAM_EDGES, TOP_K

    recorded = (output.atol, output.rtol, output.budget, output.atol_scale)
    if recorded != (tolerance.atol, tolerance.rtol, tolerance.describe_budget(), tolerance.scale):
        return (
            f"was judged with atol={output.atol:g}, rtol={output.rtol:g}{', ' + output.budget if output.budget else ''} where this "
            f"run's tolerance is atol={tolerance.atol:g}, rtol={tolerance.rtol:g}"
            + (f", {tolerance.describe_budget()}" if tolerance.budget else "")
            if output.atol is not None and output.rtol is not None
            else "records no tolerance"
        )
    references = compared.references(output.name)[:samples]
    elements = sum(r.size for r in references)
    masked = sum(r.size for r in _references(case, output.name)[:samples]) - elements
    if output.samples != samples or (output.elements, output.masked_values) != (elements, masked):
        return (
            f"counts {output.elements} values ({output.masked_values} masked) over {output.samples} samples where the source "
            f"gives {elements} ({masked} masked) over {samples}"
        )
    if not 0 <= output.mismatch_count <= elements:
        return f"counts {output.mismatch_count} mismatches of {elements} values"
    shape = references[0].shape  # the compared values' (a masked output's positions are one axis)
    exact = not (_is_float(references[0].dtype) or _named_float(output.dtype))
    needed = ["max_abs_error", "max_rel_error", "cosine_similarity"]
    if not exact:
        needed += ["rel_rms_error"] + (["top1_agreement"] if len(shape) >= 2 and shape[-1] >= 2 else [])
        needed += ["top5_agreement"] if len(shape) >= 2 and shape[-1] > TOP_K else []
    for name in needed:
        value = getattr(output, name)
        if value is None or not math.isfinite(value) or value < -1 - RELATIVE_SLACK:
            return f"is recorded passed while its {name} is missing or not finite"
    if exact:
        return "" if output.max_abs_error == 0 else f"compared exactly, is recorded passed with max_abs_error {output.max_abs_error:.6g}"
    if tolerance.elementwise and not tolerance.budget:
        # no value beyond atol + rtol * |expected| (validators/compare.py): nor the largest error, nor the relative one
        largest = max(float(np.abs(r.astype(np.float64)).max()) for r in references)
        bound = (tolerance.atol + tolerance.rtol * largest) * (1 + RELATIVE_SLACK)
        if output.max_abs_error > bound:
            return (
                f"is recorded passed with max_abs_error {output.max_abs_error:.6g}, beyond atol={tolerance.atol:g} + "
                f"rtol={tolerance.rtol:g} x max |reference| {largest:.6g} = {bound:.6g}"
            )
        relative = 2 * tolerance.rtol if tolerance.rtol > 0 else 1.0
        if output.max_rel_error > relative * (1 + RELATIVE_SLACK):
            return f"is recorded passed with max_rel_error {output.max_rel_error:.6g}, beyond the {relative:g} a pass allows"
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


def _task_failure(check: rm.Check, policy: TolerancePolicy) -> bool:
    """Whether a check's task metrics fail it (validation.checks_on): a drop over its budget, or none computed under a
    task budget."""
    task = check.task
    if task is None:
        return False
    over = any(m.budget is not None and not m.drop <= m.budget + 1e-12 for m in task.metrics)
    return over or bool(task.reason and policy.task_budget)


def _unsupported_task_pass(check: rm.Check, case: ValidationCase, policy: TolerancePolicy) -> str:
    """Why a passed check on the labelled data is not supported by its task metrics, judged by this run's budgets."""
    task = check.task
    if task is None:
        return "is recorded passed on the labelled data without its task metrics"
    if task.reason:
        return f"is recorded passed although a task budget was given and {task.describe()}" if policy.task_budget else ""
    source = {m.name: m.source for m in case.task.metrics} if case.task is not None else {}
    if {m.name for m in task.metrics} != set(source):
        return f"records the task metrics {sorted(m.name for m in task.metrics)} where the source's are {sorted(source)}"
    for metric in task.metrics:
        budget = policy.task_budget.get(f"task_{metric.name}_drop")
        status = "not-budgeted" if budget is None else "passed" if metric.drop <= budget + 1e-12 else "failed"
        if metric.source != source[metric.name] or not (
            metric.drop == metric_drop(metric.name, metric.source, metric.artifact) or budget is None
        ):
            return f"records task {metric.name} {metric.artifact} and a drop {metric.drop} that are not the source's {source[metric.name]}"
        if (metric.budget, metric.status) != (budget, status) or status == "failed":
            return f"records task {metric.name} {metric.status} under the budget {metric.budget}, re-judged {status} under {budget}"
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
