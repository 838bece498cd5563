"""The checks of one artifact on one runtime and device: every shape case, every sample, every output.

Besides the values, a check holds the artifact to the shapes it declares: a declared fixed dim that takes another
size, or one dim name that takes two sizes at once, fails the check (consumers that read declared shapes, such as
TensorRT profiles or serving configs, would be wrong). An artifact that fixes a dim the user asked dynamic fails at
the other sizes unless fixed shapes are allowed; then those checks are skipped with the reason.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from convert.artifacts import Artifact
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.text import first_line
from convert.validators import TolerancePolicy, compare_outputs, merge_results
from convert.validators.compare import ReferenceStats, reference_stats
from convert.validators.generation import GenerationTrace, hide_padding
from convert.validators.inputs import ShapeCase, is_padding_mask
from convert.validators.task_metrics import describe_drop

ALLOW_FIXED_HINT = "--allow-fixed-shapes (allow_fixed_shapes=True) accepts fixed shapes"


@dataclass
class ValidationCase:
    """One shape case: its input samples and the source's outputs for them (or why the source failed there)."""

    shape: ShapeCase
    feeds: list[dict[str, np.ndarray]] = field(default_factory=list)
    references: list[dict[str, np.ndarray]] = field(default_factory=list)
    source_error: str = ""
    reused: bool = False  # its references came from the cache
    generation: GenerationTrace | None = None  # the source's greedy decoding: this case checks the artifact over it
    labels: list[np.ndarray] | None = None  # the labels of the user's --data samples: task metrics are compared
    task: rm.TaskResult | None = None  # the source's task metrics on them (``metrics`` with source values only)
    metric: str | None = None  # the user's --metric, module:function
    padding: list[np.ndarray] | None = None  # a decoder's text: each feed's attention mask, whose hidden positions are not compared


def token_outputs(specs, cases: list[ValidationCase]) -> dict[str, str]:
    """Output → the padding mask input whose [batch, tokens] its leading axes are in every sample of every case that
    ran: a token-level output, compared only at the tokens the mask keeps. An output that fits two masks alike is
    compared everywhere (which mask hides it is not known), as is one whose axes match a mask only by chance at some
    size (a hidden size equal to a sequence length)."""
    masks = [spec.name for spec in specs if is_padding_mask(spec) and len(spec.dims) == 2]
    ran = [case for case in cases if case.feeds and case.references and case.generation is None]
    if not masks or not ran:
        return {}
    samples = [(feed, reference) for case in ran for feed, reference in zip(case.feeds, case.references)]
    found = {}
    for output in ran[0].references[0]:
        fits = [
            mask
            for mask in masks
            if all(mask in feed and output in ref and np.shape(ref[output])[:2] == np.shape(feed[mask]) for feed, ref in samples)
        ]
        if len(fits) == 1:
            found[output] = fits[0]
    return found


def case_comparison(
    case: ValidationCase, masked: dict[str, str]
) -> tuple[list[dict[str, tuple[str, np.ndarray]]], dict[str, ReferenceStats | None]]:
    """What comparing a case's outputs takes besides the values: per sample, each token-level output's mask input
    and the positions it keeps; per output, the source's statistics over every sample (the atol's scale, the spread)."""
    shown = [{output: (mask, np.asarray(feed[mask]) != 0) for output, mask in masked.items()} for feed in case.feeds]
    names = list(case.references[0]) if case.references else []
    stats = {
        name: reference_stats(
            [reference[name] for reference in case.references],
            [positions.get(name, ("", None))[1] for positions in shown],
        )
        for name in names
        if all(name in reference for reference in case.references)
    }
    return shown, stats


def checks_on(
    artifact: Artifact,
    runtime: str,
    device: str,
    cases: list[ValidationCase],
    policy: TolerancePolicy,
    allow_fixed_shapes: bool = False,
    first_outputs: Callable[[dict, dict], None] | None = None,
) -> list[rm.Check]:
    """One check per shape case; one skipped check with the reason where the runtime cannot run here. The outputs of
    the first sample that ran are handed to ``first_outputs(feed, outputs)`` where given (the chain's links reuse them)."""
    from convert.errors import ArtifactUnsupported
    from convert.runtimes.base import FeedMismatch, runtime_failure

    runner_class = REGISTRY.get("runtime", runtime).load()
    reason = runner_class.unavailable_reason(device)
    if reason:
        return [
            rm.Check(
                runtime=runtime,
                device=device,
                shape="*",
                status="skipped",
                reason=reason,
                device_unsupported=runner_class.never_runs_on(device),
            )
        ]
    runner = runner_class(artifact, device)
    try:
        runner.activate()
    except ArtifactUnsupported as exc:
        return [rm.Check(runtime=runtime, device=device, shape="*", status="skipped", reason=str(exc))]
    except Exception as exc:
        return [
            rm.Check(
                runtime=runtime, device=device, shape="*", status="failed", reason=f"cannot load the artifact: {type(exc).__name__}: {exc}"
            )
        ]
    checks = []
    masked = token_outputs(artifact.inputs, cases)
    try:
        declared_inputs, declared_outputs = runner.input_metadata(), runner.output_metadata()
        for case in cases:
            if case.generation is not None:
                checks.append(_generation_check(runner, runtime, device, case, policy, artifact.precision))
                continue
            check = rm.Check(
                runtime=runtime,
                device=device,
                shape=case.shape.describe(),
                status="passed",
                input_shapes={n: list(a.shape) for n, a in case.feeds[0].items()},
            )
            started = time.perf_counter()
            fixed = artifact.fixed_dims_mismatch({n: a.shape for n, a in case.feeds[0].items()}) if case.feeds else ""
            symbols = fixed_dims(artifact, cases, [case]) if fixed else {}
            if case.source_error:
                check.status, check.reason = "skipped", f"the source model itself fails at this shape: {case.source_error}"
            elif symbols and not allow_fixed_shapes:
                check.status, check.reason = "failed", f"{_fixed_reason(artifact, symbols)}; {ALLOW_FIXED_HINT}"
            elif fixed:
                check.status, check.reason = "skipped", f"not run at this shape: {fixed}"
            else:
                per_sample, scored = [], []
                shown, stats = case_comparison(case, masked)
                for index, (feed, reference) in enumerate(zip(case.feeds, case.references)):
                    try:
                        actual = runner.infer(feed)
                    except FeedMismatch as exc:
                        check.status, check.reason = "failed", f"the artifact does not take these inputs: {exc}"
                        break
                    except Exception as exc:
                        check.status, check.reason = "failed", f"the runtime failed: {runtime_failure(exc)}"
                        break
                    if not per_sample:
                        check.declared_mismatches = declared_mismatches(
                            declared_inputs,
                            {n: a.shape for n, a in feed.items()},
                            declared_outputs,
                            {n: getattr(a, "shape", ()) for n, a in actual.items()},
                            check.shape,
                        )
                    actual = named_as_the_source(actual, reference, tuple(feed))
                    if first_outputs is not None and index == 0 and case.padding is None:
                        first_outputs(feed, actual)
                        first_outputs = None
                    if case.padding is not None:
                        actual = hide_padding(actual, case.padding[index])
                    per_sample.append(compare_outputs(reference, actual, policy, artifact.precision, shown[index], stats))
                    if case.labels is not None:
                        scored.append(actual)
                check.samples = len(per_sample)
                if check.status == "passed":
                    check.outputs = [result.metrics() for result in merge_results(per_sample)]
                    if case.labels is not None:
                        check.task = task_result(case, scored, policy)
                    verdict(check, policy)
            if case.labels is not None and policy.task_budget and check.task is None and check.status == "skipped":
                # the task budget replaced the default budget of reduced precision: a data check that cannot run fails
                check.status, check.reason = (
                    "failed",
                    f"a task budget judges this artifact and its data check could not run: {check.reason}",
                )
            check.seconds = round(time.perf_counter() - started, 3)
            checks.append(check)
    finally:
        runner.deactivate()
    for check in checks:
        check.memory_mapped = runner.memory_mapped
    return checks


def named_as_the_source(actual: dict[str, np.ndarray], reference: dict[str, np.ndarray], inputs: tuple[str, ...]) -> dict:
    """An artifact's outputs under the source's names: an ONNX graph names an output apart from the input of its name
    (a UNet's ``sample`` is ``out_sample``: convert/backends/onnx.py outputs_apart), and that one is compared with the
    source's ``sample``; every other name as it is."""
    from convert.backends.onnx import outputs_apart

    apart = {new: name for name, new in outputs_apart(tuple(reference), inputs).items() if new in actual and name not in actual}
    return {apart.get(name, name): value for name, value in actual.items()}


def task_result(case: ValidationCase, outputs: list[dict[str, np.ndarray]], policy: TolerancePolicy) -> rm.TaskResult:
    """The artifact's task metrics on the labelled samples beside the source's, each drop judged by its budget."""
    from convert.validators.task_metrics import TaskMetricError, metric_drop, task_scores

    source = case.task
    if source is None or not source.metrics:
        return rm.TaskResult(reason=source.reason if source else "the source's task metrics are unknown")
    try:
        _, scores = task_scores(outputs, case.labels, user_metric(case.metric), source.output)
    except TaskMetricError as exc:
        return rm.TaskResult(output=source.output, reason=str(exc))
    except Exception as exc:  # the user's metric
        return rm.TaskResult(output=source.output, reason=f"{case.metric} raised {type(exc).__name__}: {first_line(str(exc))}")
    metrics = []
    for reference in source.metrics:
        value = scores.get(reference.name, float("nan"))
        drop = metric_drop(reference.name, reference.source, value)
        metrics.append(judge_task_metric(reference.model_copy(update={"artifact": value, "drop": drop}), policy))
    return rm.TaskResult(output=source.output, samples=len(outputs), metrics=metrics)


# --- the judge ------------------------------------------------------------------------------------------------------
# A check's measurements (each output's metrics, the declared shapes that did not hold, the task metrics) are judged by
# the functions below, under one run's tolerances and budgets: a fresh check as it is measured (checks_on), and one the
# cache kept (judge_cached) when a later run reuses it, so that a changed budget judges a kept measurement again.


def verdict(check: rm.Check, policy: TolerancePolicy) -> None:
    """Set a measured check's status and reason: failed where an output failed its tolerance, a declared shape did not
    hold, a task metric fell beyond its budget or none was computed under a task budget; passed otherwise."""
    failing = [f"output '{o.name}': {o.reason}" for o in check.outputs if o.status == "failed"]
    failing += [m.reason for m in check.declared_mismatches]
    if check.task is not None:
        failing += [
            f"task {m.name} {describe_drop(m.name, m.drop)} ({m.source:.4f} → {m.artifact:.4f}), over the budget "
            f"task_{m.name}_drop<={m.budget * 100:.4g}%"
            for m in check.task.metrics
            if m.status == "failed"
        ]
        if check.task.reason and policy.task_budget:
            failing.append(f"a task budget was given and {check.task.describe()}")
    check.status, check.reason = ("failed", "; ".join(failing)) if failing else ("passed", "")


def judge_task_metric(metric: rm.TaskMetric, policy: TolerancePolicy) -> rm.TaskMetric:
    """A task metric's drop judged by this run's budget for it (not-budgeted where it has none)."""
    budget = policy.task_budget.get(f"task_{metric.name}_drop")
    status = "not-budgeted" if budget is None else "passed" if metric.drop <= budget + 1e-12 else "failed"
    return metric.model_copy(update={"budget": budget, "status": status})


def judge_output(output: rm.OutputMetrics, case: ValidationCase, tolerance, compared: CaseComparison) -> rm.OutputMetrics:
    """An output's recorded metrics judged under ``tolerance`` by the validators' own judgement (compare.merge_results,
    which sets an output's status from its metrics): the problems compare_output finds besides the values, derived
    again from the source's references. Its mismatch count is the one measured, at the tolerance it records."""
    from convert.validators.compare import OutputResult, merge_results

    references = compared.all_references(output.name)
    if not references or output.dtype is None or output.shape is None:  # an output the source lacks, or the artifact did
        return output.model_copy(update={"status": "failed", "reason": output.reason or "not compared"})
    reference = references[0]
    exact = not (is_float(reference.dtype) or named_float(output.dtype))
    problems = []
    if output.dtype != str(reference.dtype):
        problems.append(f"dtype {output.dtype} where the source gives {reference.dtype}")
    if output.shape != list(reference.shape):
        problems.append(f"shape {output.shape} where the source gives {list(reference.shape)}")
    if reference.size == 0 or math.prod(output.shape) == 0:
        problems.append("it is empty")
    if is_float(reference.dtype) and not all(np.isfinite(r).all() for r in references):
        problems.append("the source's own output is not finite")
    if output.nan_count or output.inf_count:
        problems.append(f"{output.nan_count} NaN and {output.inf_count} Inf values")
    result = OutputResult(
        **output.model_dump(exclude={"status", "reason", "atol", "rtol", "budget", "budget_source"}),
        status="passed",
        **tolerance.recorded(),
        exact=exact and not problems,
        by_deviation=not exact and compared.low_spread(output.name, tolerance),
        reasons=problems,
    )
    judged = merge_results([[result]])[0].metrics()
    if (judged.status, judged.atol, judged.rtol, judged.budget) == (output.status, output.atol, output.rtol, output.budget):
        return output  # judged as recorded: its own words stand
    return judged


def judge_cached(check: rm.Check, case: ValidationCase, precision: str, policy: TolerancePolicy, compared: CaseComparison) -> rm.Check:
    """A check the cache kept, judged under this run's tolerances and budgets where it measured every output (a check
    decided before running, or stopped by its runtime, stands as recorded)."""
    if not check.outputs or case.generation is not None:
        return check
    judged = check.model_copy(deep=True)
    judged.outputs = [judge_output(o, case, compared.tolerance(policy, o.name, precision), compared) for o in check.outputs]
    if judged.task is not None:
        judged.task.metrics = [judge_task_metric(m, policy) for m in judged.task.metrics]
    verdict(judged, policy)
    return judged


class CaseComparison:
    """A case's outputs as its checks compare them (case_comparison): the values at the positions a padding mask keeps,
    and the tolerance scaled by the source's statistics."""

    def __init__(self, case: ValidationCase, masked: dict[str, str]):
        self.case = case
        self.shown, self.stats = case_comparison(case, masked)

    def tolerance(self, policy: TolerancePolicy, name: str, precision: str):
        tolerance = policy.for_output(name, precision)
        stats = self.stats.get(name)
        return tolerance.scaled(stats.rms) if stats is not None else tolerance

    def all_references(self, name: str) -> list[np.ndarray]:
        """Each sample's reference values of an output, every position."""
        return [np.asarray(reference[name]) for reference in self.case.references if name in reference]

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


def is_float(dtype) -> bool:
    return np.issubdtype(dtype, np.floating) or np.issubdtype(dtype, np.complexfloating)


def named_float(name: str) -> bool:
    """Whether a recorded dtype name is a float's (bfloat16 and the float8 types are known to NumPy only once ml_dtypes
    is imported)."""
    try:
        return is_float(np.dtype(name))
    except TypeError:
        return "float" in name


def user_metric(reference: str | None):
    """The user's ``module:function`` metric (imported where it runs: the worker), or None."""
    if not reference:
        return None
    from convert.sources.request import import_reference

    return import_reference(reference)


def _generation_check(runner, runtime: str, device: str, case: ValidationCase, policy: TolerancePolicy, precision: str) -> rm.Check:
    """The artifact decodes the source's prompts with its own cache fed back, teacher-forced with the source's tokens."""
    from convert.runtimes.base import runtime_failure
    from convert.validators.generation import compare_generation, decode

    reference = case.generation
    check = rm.Check(runtime=runtime, device=device, shape=case.shape.label, status="passed", kind="generation")
    started = time.perf_counter()
    try:
        actual = decode(runner.infer, reference.layout, reference.prompts, reference.tokens.shape[1], reference.tokens, reference.context)
    except Exception as exc:
        check.status, check.reason = (
            "failed",
            f"the artifact cannot decode with its cache fed back: {runtime_failure(exc)}",
        )
    else:
        check.generation, reason = compare_generation(reference, actual, policy.for_output("logits", precision), precision)
        check.samples = reference.prompts.shape[0]
        if reason:
            check.status, check.reason = "failed", reason
    check.seconds = round(time.perf_counter() - started, 3)
    return check


def declared_mismatches(
    inputs: dict, input_shapes: dict[str, tuple[int, ...]], outputs: dict | None, output_shapes: dict[str, tuple[int, ...]], at: str
) -> list[rm.DeclaredShapeMismatch]:
    """Where the declared shapes (a runner's metadata; None where it cannot read them) do not hold for the shapes of
    one run at ``at``: a rank, a fixed size, or a dim name that takes two sizes."""
    found: list[rm.DeclaredShapeMismatch] = []
    named: dict[str, tuple[int, str]] = {}  # dim name → (its first size, where)
    for role, declared, shapes in (("input", inputs, input_shapes), ("output", outputs or {}, output_shapes)):
        for name, meta in declared.items():
            shape = shapes.get(name)
            if shape is None:
                continue
            record = rm.DeclaredShapeMismatch(tensor=name, role=role, declared=list(meta.shape), shape=[int(n) for n in shape])
            text = f"{role} '{name}' is declared [{','.join('?' if d is None else str(d) for d in meta.shape)}]"
            if len(meta.shape) != len(shape):
                found.append(record.model_copy(update={"reason": f"{text} but had rank {len(shape)} at {at}"}))
                continue
            for axis, (want, size) in enumerate(zip(meta.shape, shape)):
                if isinstance(want, int) and want != size:
                    found.append(record.model_copy(update={"axis": axis, "reason": f"{text} but its axis {axis} was {size} at {at}"}))
                elif isinstance(want, str):
                    first, where = named.setdefault(want, (int(size), f"axis {axis} of {role} '{name}'"))
                    if first != size:
                        found.append(
                            record.model_copy(
                                update={
                                    "axis": axis,
                                    "reason": (
                                        f"{text} but its axis {axis} was {size} at {at}, while {where}, also declared {want}, was {first}"
                                    ),
                                }
                            )
                        )
    return found


def fixed_dims(artifact: Artifact, cases: list[ValidationCase], at: Sequence[ValidationCase] | None = None) -> dict[str, str]:
    """The symbols the artifact fixes although the source takes them dynamic (where it fixes each), at the cases
    ``at`` (default: every case). A symbol is the one whose size an input axis took in every case."""
    found: dict[str, str] = {}
    for spec in artifact.inputs:
        for axis, dim in enumerate(spec.dims):
            if not isinstance(dim, int):
                continue
            symbol = _symbol_of(cases, spec.name, axis)
            if symbol is None:
                continue
            moved = any(case.feeds and case.feeds[0][spec.name].shape[axis] != dim for case in (cases if at is None else at))
            if moved:
                found.setdefault(symbol, f"axis {axis} of '{spec.name}' is fixed at {dim}")
    return found


def _symbol_of(cases: list[ValidationCase], name: str, axis: int) -> str | None:
    """The symbol an input axis follows in every case (None where it follows none, or several alike)."""
    fed = [case for case in cases if case.feeds and name in case.feeds[0] and case.feeds[0][name].ndim > axis]
    if not fed:
        return None
    symbols = [s for s in fed[0].shape.sizes if all(c.feeds[0][name].shape[axis] == c.shape.sizes[s] for c in fed if s in c.shape.sizes)]
    return symbols[0] if len(symbols) == 1 else None


def _fixed_reason(artifact: Artifact, symbols: dict[str, str]) -> str:
    dims = ", ".join(symbols)
    where = "; ".join(symbols.values())
    why = f": {artifact.fixed_shape_reason}" if artifact.fixed_shape_reason else ""
    several = len(symbols) > 1
    return f"the artifact fixes dim{'s' * several} {dims} that {'were' if several else 'was'} asked dynamic ({where}{why})"


def name_onnx_output_dims(path, dims: dict[tuple[str, int], str]) -> None:
    """Declare the given output axes of an ONNX file as named dynamic dims, and infer the shapes the graph declares
    inside again (the file is rewritten in place; external data files are left as they are). The intermediate
    declarations go too: they hold the same frozen size along the chain to the output, and ONNX Runtime would take
    them over the output's."""
    import onnx

    from convert.backends.onnx import reinfer_inner_shapes

    model = reinfer_inner_shapes(onnx.load(str(path), load_external_data=False))
    for output in model.graph.output:  # after the inference, which may write a size it derived on an output
        for (name, axis), dim_name in dims.items():
            if output.name == name:
                dim = output.type.tensor_type.shape.dim[axis]
                dim.Clear()
                dim.dim_param = dim_name
    onnx.save(model, str(path))
