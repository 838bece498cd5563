"""The numeric comparison: every runtime that can run an artifact × every device × every shape case, each runtime ×
device a job of its own (``Validate``) whose checks the stage cache keeps. A cached check is reused where its
measurements can stand for this run's (``reusable``), and judged again by the judge of fresh checks
(convert/validation.py ``judge_cached``) under this run's tolerances and budgets."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from convert.artifacts import Artifact
from convert.cache import RunCache, artifact_data
from convert.checks.base import Run, Subject, crashed
from convert.devices import ALL_DEVICES, absent_reason, cuda_gpus
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import sha256_files, size_of
from convert.validation import (
    CaseComparison,
    ValidationCase,
    checks_on,
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
from convert.worker.protocol import WorkerState, worker_job


def compare(run: Run, subject: Subject) -> None:
    """The artifact's checks against the source on its cases (its digest taken first: the cache keys its results on it)."""
    subject.record.checks = measure(run, subject)


def measure(run: Run, subject: Subject) -> list[rm.Check]:
    """The artifact's checks as its bytes are now (a repair measures them again)."""
    artifact, record = subject.artifact, subject.record
    artifact.sha256 = sha256_files(artifact.files)
    artifact.size_bytes = size_of(artifact.files)
    record.sha256, record.size_bytes = artifact.sha256, artifact.size_bytes
    return validate_artifact(run.worker, subject.stage, artifact, subject.cases, run.policy, run.cache, run.request.allow_fixed_shapes)


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


@worker_job
@dataclass(frozen=True)
class Validate:
    """The checks of an artifact on one runtime and device (``checks_on``); on the CPU, the outputs of its first sample
    are kept for the chain's links, once per artifact."""

    artifact: Artifact
    runtime: str
    device: str
    cases: list[ValidationCase]
    policy: TolerancePolicy
    allow_fixed_shapes: bool

    def run(self, state: WorkerState) -> list[rm.Check]:
        import functools

        from convert.checks.chain import keep_outputs

        first = None
        if self.device == "cpu" and not any(key[0] == self.artifact.sha256 for key in state.chain_outputs):
            first = functools.partial(keep_outputs, state.chain_outputs, self.artifact)
        return checks_on(self.artifact, self.runtime, self.device, self.cases, self.policy, self.allow_fixed_shapes, first)
