"""The policy's budgets judged on a report: accuracy on the worst value over the checks, latency and throughput on the
measurement's 95% interval (a figure misses its bound only when its whole interval does), size on the file.

Pure: every function here reads the report and the policy it is given, and nothing else.
"""

from __future__ import annotations

import math

from convert.policy import TIMED_METRICS, ArtifactBudget
from convert.reports import model as rm
from convert.validators.tolerances import parse_budget

# report field per budget metric, and whether a larger value is better
ACCURACY_FIELDS = {
    "cosine": ("cosine_similarity", True),
    "rel_rms": ("rel_rms_error", False),
    "top1": ("top1_agreement", True),
    "top5": ("top5_agreement", True),
    "max_abs": ("max_abs_error", False),
}
RATES = ("throughput_per_s", "decode_tokens_per_s")  # a minimum; the other timed metrics are maxima
# the 95% interval each timed figure is judged on, where the benchmark measures one
INTERVALS = {
    "latency_ms_p50": "latency_ms_interval",
    "throughput_per_s": "throughput_interval",
    "prefill_ms_p50": "prefill_ms_interval",
    "decode_tokens_per_s": "decode_tokens_per_s_interval",
}


def budget_results(
    key: str, record: rm.ArtifactRecord | None, budget: ArtifactBudget, skippable: set[str], notes: list[str]
) -> list[rm.BudgetResult]:
    """Every bound of one artifact's budget; a bound on a device the policy may skip, and that is absent, is a note."""
    results: list[rm.BudgetResult] = []
    if budget.accuracy is not None:
        results += _accuracy_results(key, record, budget.accuracy)
    for metric in TIMED_METRICS:
        limits = getattr(budget, metric)
        if limits is None:
            continue
        limits = limits if isinstance(limits, dict) else {"*": limits}
        op = ">=" if metric in RATES else "<="
        for device, limit in limits.items():
            if device in skippable:
                notes.append(f"{key}: {metric}{op}{limit:g} on {device} not judged: {device} is absent and the policy may skip it")
                continue
            results += _timed_results(key, record, budget.runtime, metric, op, device, limit)
    if budget.size_mb is not None:
        limit = f"<={budget.size_mb:g}"
        if record is None or record.path is None:
            results.append(
                rm.BudgetResult(
                    artifact=key,
                    kind="size",
                    metric="size_mb",
                    limit=limit,
                    status="skipped",
                    reason="not measured: the artifact was not made",
                )
            )
        else:
            value = record.size_bytes / 1e6
            results.append(
                rm.BudgetResult(
                    artifact=key,
                    kind="size",
                    metric="size_mb",
                    limit=limit,
                    value=round(value, 6),
                    status="passed" if value <= budget.size_mb else "failed",
                )
            )
    return results


def _accuracy_results(key: str, record: rm.ArtifactRecord | None, accuracy: str | dict[str, str]) -> list[rm.BudgetResult]:
    """Each bound on each output, judged on the worst value over the checks of each runtime and device."""
    texts = {"*": accuracy} if isinstance(accuracy, str) else accuracy
    results = []
    for output_name, text in texts.items():
        _, bounds = parse_budget(text)
        for metric, (op, bound) in bounds.items():
            field, larger_better = ACCURACY_FIELDS.get(metric, (metric, False))
            limit = f"{op}{bound:.10g}"
            worst: dict[tuple[str, str, str], tuple[float, str]] = {}
            for check in record.checks if record is not None else []:
                for name, value in _measured(check, field):
                    if (output_name not in ("*", name)) or value is None:
                        continue
                    slot = (name, check.runtime, check.device)
                    if slot not in worst or worse(value, worst[slot][0], larger_better):
                        worst[slot] = (value, check.shape)
            if not worst:
                results.append(
                    rm.BudgetResult(
                        artifact=key,
                        kind="accuracy",
                        metric=metric,
                        limit=limit,
                        output="" if output_name == "*" else output_name,
                        status="skipped",
                        reason="not measured: no check of this artifact measured it",
                    )
                )
            for (output, runtime, device), (value, shape) in worst.items():
                ok = value >= bound if op == ">=" else value <= bound
                results.append(
                    rm.BudgetResult(
                        artifact=key,
                        kind="accuracy",
                        metric=metric,
                        limit=limit,
                        value=value,
                        output=output,
                        runtime=runtime,
                        device=device,
                        shape=shape,
                        status="passed" if ok else "failed",
                    )
                )
    return results


def _measured(check: rm.Check, field: str) -> list[tuple[str, float | None]]:
    """(output, value) of an output metric, or of a task metric's drop (``task_top1_drop``) on the labelled data."""
    if field.startswith("task_"):
        name = field.removeprefix("task_").removesuffix("_drop")
        return [(check.task.output, m.drop) for m in check.task.metrics if m.name == name] if check.task else []
    return [(output.name, getattr(output, field)) for output in check.outputs]


def worse(value: float, than: float, larger_better: bool) -> bool:
    """NaN is worse than any number, so that it is what a budget is judged on."""
    if math.isnan(than) or math.isnan(value):
        return not math.isnan(than)
    return value < than if larger_better else value > than


def _timed_results(
    key: str, record: rm.ArtifactRecord | None, runtime: str | None, metric: str, op: str, device: str, limit: float
) -> list[rm.BudgetResult]:
    kind = "throughput" if metric in RATES else "latency"
    benchmarks = [
        b for b in (record.benchmarks if record is not None else []) if device in ("*", b.device) and runtime in (None, b.runtime)
    ]
    if not benchmarks:
        scope = " ".join(p for p in (runtime and f"on {runtime}", device != "*" and f"on {device}") if p)
        return [
            rm.BudgetResult(
                artifact=key,
                kind=kind,
                metric=metric,
                limit=f"{op}{limit:g}",
                runtime=runtime or "",
                device="" if device == "*" else device,
                status="skipped",
                reason=f"not measured: no benchmark of this artifact {scope}".rstrip(),
            )
        ]
    results = []
    for bench in benchmarks:
        value = getattr(bench, metric)
        result = rm.BudgetResult(
            artifact=key,
            kind=kind,
            metric=metric,
            limit=f"{op}{limit:g}",
            value=value,
            runtime=bench.runtime,
            device=bench.device,
            shape=_timed_shape(bench, metric),
            status="skipped",
        )
        if value is None and metric in ("prefill_ms_p50", "decode_tokens_per_s") and bench.status == "ok":
            result.reason = "not measured: prefill and decode are measured for a decoder with its cache (text-generation-with-past)"
        elif value is None:
            result.reason = f"not measured: the benchmark {bench.status}" + (f": {bench.reason}" if bench.reason else "")
        else:
            result.interval = getattr(bench, INTERVALS[metric]) if metric in INTERVALS else None
            result.status, result.reason = _judge_timed(value, result.interval, op, limit)
        results.append(result)
    return results


def _timed_shape(bench: rm.Benchmark, metric: str) -> str:
    if metric == "throughput_per_s":
        return bench.throughput_shape
    if metric == "prefill_ms_p50" and bench.prefill_length:
        return f"B=1, {bench.prefill_length} prompt tokens"
    if metric == "decode_tokens_per_s" and bench.decode_steps:
        return f"B=1, {bench.decode_steps} decode steps"
    return bench.shape


def _judge_timed(value: float, interval: list[float] | None, op: str, limit: float) -> tuple[str, str]:
    """A figure misses its bound only when its whole 95% interval does: one whose interval holds the bound is within
    the noise of it, and passes, saying so."""
    within = value >= limit if op == ">=" else value <= limit
    if within:
        return "passed", ""
    if interval is not None and interval[0] <= limit <= interval[1]:
        return (
            "passed",
            f"{value:.4g} misses {op}{limit:g}, but within the noise: its 95% interval {interval[0]:.4g}–{interval[1]:.4g} holds the bound",
        )
    return "failed", "" if interval is None else f"its whole 95% interval {interval[0]:.4g}–{interval[1]:.4g} misses the bound"
