"""The promotion gate (``convert gate``, ``convert.gate``): run the pipeline a policy describes and judge the report against it.

The verdict fails closed: it promotes only when no reason to reject was found, and every reason is listed.
Rejected: a required artifact missing, a failed check, a required check skipped, NaN/Inf in an output, a
budget exceeded or not measured, a required device absent (unless the policy may skip it), or a regression
against the baseline report beyond its noise allowance.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from pathlib import Path

from pydantic import ValidationError

from convert import options
from convert.errors import ConvertError, require
from convert.pipeline import ConvertRequest, Progress, run
from convert.policy import Allowance, ArtifactBudget, Policy, load_policy
from convert.protected_inputs import Write, reads_of, refuse_writes_to_inputs
from convert.readers import loads_json, shown
from convert.reports import model as rm
from convert.reports.render import check_writable, render_files
from convert.timing import describe_ratio, paired_ratio
from convert.validators.tolerances import parse_budget

EXIT_PROMOTE, EXIT_REJECT = 0, 1
# report field per budget metric, and whether a larger value is better
ACCURACY_FIELDS = {
    "cosine": ("cosine_similarity", True),
    "rel_rms": ("rel_rms_error", False),
    "top1": ("top1_agreement", True),
    "top5": ("top5_agreement", True),
    "max_abs": ("max_abs_error", False),
}
TIMED_METRICS = ("latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "throughput_per_s")


def gate(
    policy: str | os.PathLike | dict,
    *,
    baseline: str | os.PathLike | None = None,
    out: str | os.PathLike | None = None,
    force: bool = False,
    html: str | os.PathLike | None = None,
    markdown: str | os.PathLike | None = None,
    junit: str | os.PathLike | None = None,
    mlflow: bool = False,
    progress: Progress | None = None,
    command: str = "",
    cache: bool = True,
    cache_dir: str | os.PathLike | None = None,
) -> rm.Verdict:
    """Run the conversion a policy describes and return the verdict, written into the report as ``gate``.

    ``baseline`` (a report JSON) overrides the policy's ``baseline.report``; ``out`` its ``out`` folder. ``html``,
    ``markdown`` and ``junit`` are paths to render the report to; ``mlflow`` logs it as a run; ``cache`` and
    ``cache_dir`` as for ``convert.convert``. Raises
    ``ConvertError`` for a bad policy, baseline or model (exit code 2 on the command line)."""
    policy_model, name = load_policy(policy)
    configured = policy_model.baseline.report if policy_model.baseline else None
    baseline_path = Path(baseline) if baseline is not None else Path(configured) if configured else None
    allowance = policy_model.baseline.allowance if policy_model.baseline else Allowance()
    check_writable(_path(html), _path(markdown), _path(junit))
    if mlflow:
        require("mlflow", "mlflow", "--mlflow")
    reads = reads_of(policy=policy if isinstance(policy, (str, os.PathLike)) else None, baseline_report=baseline_path)
    writes = [
        Write(f"the {what} rendering", Path(path))
        for what, path in (("HTML", html), ("Markdown", markdown), ("JUnit", junit))
        if path is not None
    ]
    if mlflow:
        from convert.mlflow_log import local_store

        writes += [Write("MLflow's local store", store) for store in local_store()]
    # before the baseline is read; the run checks its own outputs against all of these again
    refuse_writes_to_inputs(writes, [*reads, *reads_of(policy_model.model.path, weights=policy_model.model.weights)])
    # read before the run: a bad baseline must not cost a conversion
    baseline_report = load_report(baseline_path) if baseline_path is not None else None
    request = _request(
        policy_model,
        Path(out) if out is not None else Path(policy_model.out),
        force,
        command,
        benchmark=policy_model.timed() or _has_benchmarks(baseline_report),
    )
    request.reads, request.writes = tuple(reads), tuple(writes)
    request.baseline = (baseline_report, baseline_path) if baseline_report is not None else None

    def verdict_of(report: rm.Report, report_path: Path) -> rm.Verdict:
        verdict = judge(report, policy_model, name, baseline_report, baseline_path, allowance)
        verdict.report = str(report_path)
        return verdict

    def publish(report: rm.Report, report_path: Path) -> None:
        """The renderings and the MLflow run, under the output lock: the report they name is the one left behind."""
        renderings = render_files(report, html=_path(html), markdown=_path(markdown), junit=_path(junit))
        if mlflow:
            from convert.mlflow_log import log_run

            report.gate.mlflow_run_id = log_run(report, report_path, renderings)

    request.judge, request.publish, request.cache, request.cache_dir = verdict_of, publish, cache, _path(cache_dir)
    return run(request, progress).report.gate


def _path(value: str | os.PathLike | None) -> Path | None:
    return Path(value) if value is not None else None


def load_report(path: Path, what: str = "baseline report") -> rm.Report:
    """A report.json written by convert (this schema's major version), or a ConvertError naming what is wrong."""
    if not path.is_file():
        raise ConvertError(
            f"the {what} {path} does not exist" if not path.exists() else f"the {what} {path} is not a file",
            "Pass the report.json of the last promoted model, or leave the baseline out for a first promotion."
            if what == "baseline report"
            else "Pass the report.json that convert wrote.",
        )
    hint = "Pass a report.json written by convert."
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConvertError(f"the {what} {path} is not JSON ({exc})", hint) from None
    except OSError as exc:
        raise ConvertError(f"cannot read the {what} {path}: {exc.strerror or exc}", "Check that the file is readable.") from None
    data = loads_json(text, f"the {what} {path}", hint)  # nested past any report's depth: refused before it is parsed
    version = data.get("schema_version") if isinstance(data, dict) else None
    major = rm.SCHEMA_VERSION.split(".")[0]
    if str(version).split(".")[0] != major:
        raise ConvertError(
            f"the {what} {path} is not a convert report of schema {major}.x (its schema_version is {shown(version, 60)})",
            "Pass a report.json written by convert, or re-run that model with this version.",
        )
    try:
        return rm.Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConvertError(
            f"the {what} {path} does not match the report schema: {first['msg']} at {'.'.join(map(str, first['loc']))}",
            hint,
        ) from None


def _has_benchmarks(report: rm.Report | None) -> bool:
    return report is not None and any(b.status == "ok" for a in report.artifacts for b in a.benchmarks)


def _request(policy: Policy, out: Path, force: bool, command: str, benchmark: bool) -> ConvertRequest:
    return ConvertRequest(
        model=policy.model.path,
        **{**options.from_policy(policy), "out": out},
        given={name: Path(path) for name, path in policy.require.artifacts.items()},
        benchmark=benchmark,
        force=force,
        command=command,
    )


def artifact_key(record: rm.ArtifactRecord) -> str:
    return record.key


def judge(
    report: rm.Report,
    policy: Policy,
    policy_name: str = "<dict>",
    baseline: rm.Report | None = None,
    baseline_path: Path | None = None,
    allowance: Allowance | None = None,
) -> rm.Verdict:
    """The verdict of ``policy`` on ``report``: every reason to reject, the budgets, the baseline deltas."""
    _check_output_names(policy, report)
    reasons: list[rm.GateReason] = []
    notes: list[str] = []
    records = {artifact_key(r): r for r in report.artifacts if not r.candidate or r.path}
    present = set(report.environment.devices)
    skippable = {d for d in policy.require.may_skip_devices if d not in present}
    devices = []
    for device in policy.require.devices:
        if device in present:
            devices.append(device)
        elif device in policy.require.may_skip_devices:
            notes.append(f"required device {device} is absent from this machine; the policy may skip it, so nothing was checked on it")
        else:
            reasons.append(
                rm.GateReason(
                    code="missing_device",
                    message=f"required device {device} is absent from this machine "
                    f"(present: {', '.join(sorted(present))}); add it to require.may_skip_devices to allow that",
                )
            )
    if report.interrupted or report.error:
        reasons.append(rm.GateReason(code="run_failed", message=report.error or "the run was interrupted"))
    for key in policy.required_keys():
        record = records.get(key)
        if record is None or record.path is None:
            if record is None or not any(c.status == "failed" for c in record.checks):  # else its failed checks say why
                reasons.append(rm.GateReason(code="missing_artifact", artifact=key, message=_missing(report, key)))
            continue
        reasons += _device_reasons(key, record, devices, notes)
    for key, record in records.items():
        reasons += _check_reasons(key, record)
    budgets = [
        result for key, budget in policy.budgets.items() for result in _budget_results(key, records.get(key), budget, skippable, notes)
    ]
    for result in budgets:
        if result.status != "passed":
            where = " ".join(
                p
                for p in (
                    result.output and f"output '{result.output}'",
                    result.runtime and f"on {result.runtime}",
                    result.device and f"({result.device})",
                )
                if p
            )
            reasons.append(
                rm.GateReason(
                    code="budget",
                    artifact=result.artifact,
                    message=(
                        f"{result.metric} {_number(result.value)} {where} misses the budget {result.metric}{result.limit}"
                        if result.status == "failed"
                        else f"{result.metric}{result.limit} {where}".rstrip() + f": {result.reason}"
                    ).replace("  ", " "),
                )
            )
    comparison = None
    if baseline is not None:
        comparison = compare_with_baseline(report, baseline, baseline_path, policy.required_keys(), allowance or Allowance())
        for delta in comparison.deltas:
            if delta.status == "regressed":
                where = ", ".join(p for p in (delta.output and f"output '{delta.output}'", delta.runtime, delta.device) if p)
                values = f"{delta.metric} {_number(delta.baseline)} → {_number(delta.current)}"
                if _not_comparable(delta.baseline, delta.current):  # fails closed: never 'ok' for want of a number
                    message = (
                        f"{delta.kind} cannot be compared with the baseline: {values}"
                        + (f" [{where}]" if where else "")
                        + f": {delta.reason.removeprefix('not comparable: ')}"
                    )
                else:
                    message = (
                        f"{delta.kind} regressed against the baseline: {values}"
                        + (f" ({delta.delta_pct:+.1f}%)" if delta.delta_pct is not None else "")
                        + (f" [{where}]" if where else "")
                        + f", beyond the allowance {delta.allowed}"
                        + (f" ({delta.reason})" if delta.reason else "")
                    )
                reasons.append(rm.GateReason(code="regression", artifact=delta.artifact, message=message))
    promoted = not reasons
    return rm.Verdict(
        decision="promote" if promoted else "reject",
        promoted=promoted,
        exit_code=EXIT_PROMOTE if promoted else EXIT_REJECT,
        policy=policy_name,
        reasons=reasons,
        notes=notes,
        required_targets=list(policy.require.targets),
        required_optimizations=list(policy.require.optimizations),
        required_artifacts=list(policy.require.artifacts),
        required_devices=list(policy.require.devices),
        budgets=budgets,
        baseline=comparison,
    )


def _check_output_names(policy: Policy, report: rm.Report) -> None:
    """Budgets by output name can only be checked against the model once it has run."""
    outputs = report.source.outputs
    for key, budget in policy.budgets.items():
        for name in budget.accuracy if isinstance(budget.accuracy, dict) else ():
            if name != "*" and outputs and name not in outputs:
                raise ConvertError(
                    f"the policy's budgets.{key}.accuracy names the output '{name}', which the model does not have",
                    f"The model's outputs are: {', '.join(outputs)} ('*' is every output).",
                )


def _missing(report: rm.Report, key: str) -> str:
    """Why a required artifact is not there, from the stage that should have made it."""
    stage = next((s for s in report.stages if s.subject == key and s.makes_artifact), None)
    if stage is None:
        return f"required artifact {key} was not made (the run stopped before it)"
    if stage.status == "skipped":
        return f"required artifact {key} was not built: {stage.reason}"
    if stage.status == "failed":
        return f"required artifact {key} failed to build: {stage.error.splitlines()[0] if stage.error else 'no error recorded'}"
    return f"required artifact {key} failed validation and was not published"


def _device_reasons(key: str, record: rm.ArtifactRecord, devices: list[str], notes: list[str]) -> list[rm.GateReason]:
    """On each required device present: at least one check passed, and none skipped that could have run."""
    reasons = []
    for device in devices:
        on_device = [c for c in record.checks if c.device == device]
        runnable = [c for c in on_device if not c.device_unsupported]
        if on_device and not runnable:
            notes.append(f"{key}: no runtime of its format runs on {device} ({on_device[0].reason}), so it was checked on the others")
            continue
        for check in runnable:
            if check.status == "skipped":
                reasons.append(
                    rm.GateReason(
                        code="skipped_check",
                        artifact=key,
                        message=(f"required check skipped: {check.runtime} on {device} at {check.shape}: {check.reason}"),
                    )
                )
        if not any(c.status in ("passed", "failed") for c in runnable):  # a failed check is a reason of its own
            reasons.append(rm.GateReason(code="skipped_check", artifact=key, message=f"no check ran on required device {device}"))
    if not any(c.status in ("passed", "failed") for c in record.checks):  # whatever devices the policy names
        reasons.append(rm.GateReason(code="skipped_check", artifact=key, message="no check of this artifact ran on any device"))
    return reasons


def _check_reasons(key: str, record: rm.ArtifactRecord) -> list[rm.GateReason]:
    reasons = []
    for check in record.checks:
        where = f"{check.runtime} on {check.device} at {check.shape}"
        bad = [o for o in check.outputs if o.nan_count or o.inf_count]
        for output in bad:
            reasons.append(
                rm.GateReason(
                    code="nan_inf",
                    artifact=key,
                    message=(f"output '{output.name}' has {output.nan_count} NaN and {output.inf_count} Inf values ({where})"),
                )
            )
        if check.status == "failed":
            reasons.append(rm.GateReason(code="failed_check", artifact=key, message=f"check failed: {where}: {check.reason}"))
    if any(found is not None and found.status == "found" for found in (record.divergence, record.sensitivity)):
        reasons.append(rm.GateReason(code="diverged", artifact=key, message="; ".join(record.diagnosis())))
    return reasons


def _budget_results(
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
        op = ">=" if metric == "throughput_per_s" else "<="
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
                    if slot not in worst or _worse(value, worst[slot][0], larger_better):
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


def _worse(value: float, than: float, larger_better: bool) -> bool:
    """NaN is worse than any number, so that it is what a budget is judged on."""
    if math.isnan(than) or math.isnan(value):
        return not math.isnan(than)
    return value < than if larger_better else value > than


def _timed_results(
    key: str, record: rm.ArtifactRecord | None, runtime: str | None, metric: str, op: str, device: str, limit: float
) -> list[rm.BudgetResult]:
    kind = "throughput" if metric == "throughput_per_s" else "latency"
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
            shape=bench.throughput_shape if kind == "throughput" else bench.shape,
            status="skipped",
        )
        if value is None:
            result.reason = f"not measured: the benchmark {bench.status}" + (f": {bench.reason}" if bench.reason else "")
        else:
            result.interval = {"latency_ms_p50": bench.latency_ms_interval, "throughput_per_s": bench.throughput_interval}.get(metric)
            result.status, result.reason = _judge_timed(value, result.interval, op, limit)
        results.append(result)
    return results


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


def compare_with_baseline(
    report: rm.Report, baseline: rm.Report, path: Path | None, keys: list[str], allowance: Allowance
) -> rm.BaselineComparison:
    """Per required artifact: accuracy errors, p50 latency and size against the baseline, beyond the noise allowance."""
    current = {artifact_key(r): r for r in report.artifacts if r.path}
    previous = {artifact_key(r): r for r in baseline.artifacts if r.path}
    deltas: list[rm.BaselineDelta] = []
    for key in keys:
        if key not in current:
            continue
        if key not in previous:
            deltas.append(
                rm.BaselineDelta(
                    artifact=key,
                    kind="size",
                    metric="size_bytes",
                    status="not_compared",
                    current=current[key].size_bytes,
                    reason="the baseline has no such artifact",
                )
            )
            continue
        now, before = current[key], previous[key]
        deltas += _accuracy_deltas(key, now, before, allowance)
        deltas += _latency_deltas(key, now, before, allowance)
        deltas.append(_delta(key, "size", "size_bytes", "", "", "", float(before.size_bytes), float(now.size_bytes), allowance.size, 0.0))
    same_environment = (
        report.environment.platform == baseline.environment.platform and report.environment.packages == baseline.environment.packages
    )
    return rm.BaselineComparison(
        path=str(path) if path else "",
        tool_version=baseline.tool_version,
        created_at=baseline.created_at,
        source_sha256=baseline.source.sha256,
        same_source=bool(baseline.source.sha256) and baseline.source.sha256 == report.source.sha256,
        same_environment=same_environment,
        allowance=allowance.model_dump(),
        deltas=deltas,
    )


def _errors(record: rm.ArtifactRecord) -> dict[tuple[str, str, str, str], list[float | None]]:
    """(metric, output, runtime, device) → the error at each of the checks' shapes (None where it was not measured);
    cosine as a distance 1 - cosine. A slot is there when that output was compared on that runtime and device."""
    errors: dict[tuple[str, str, str, str], list[float | None]] = {}
    for check in record.checks:
        for output in check.outputs:
            for metric, value in (
                ("max_abs_error", output.max_abs_error),
                ("rel_rms_error", output.rel_rms_error),
                ("cosine_distance", None if output.cosine_similarity is None else 1.0 - output.cosine_similarity),
            ):
                errors.setdefault((metric, output.name, check.runtime, check.device), []).append(value)
        for task in check.task.metrics if check.task else []:
            errors.setdefault((f"task_{task.name}_drop", check.task.output, check.runtime, check.device), []).append(task.drop)
    return errors


def _worst_error(values: list[float | None]) -> float | None:
    """The worst error over the shapes: NaN and Inf are worse than any number, and a shape where it was not measured
    makes it unknown (None), never the worst of the others."""
    if any(value is None for value in values):
        return None
    worst = values[0]
    for value in values[1:]:
        if _worse(value, worst, larger_better=False):
            worst = value
    return worst


def _accuracy_deltas(key: str, now: rm.ArtifactRecord, before: rm.ArtifactRecord, allowance: Allowance) -> Iterator[rm.BaselineDelta]:
    """Each error measured on an output, runtime and device both reports compared it on; one that either side did not
    measure, or that the baseline has as NaN or Inf, cannot be compared and rejects (fails closed). A metric neither
    side measured (an integer output has no relative RMS error) is none of this output's."""
    previous = _errors(before)
    for slot, values in _errors(now).items():
        metric, output, runtime, device = slot
        if slot not in previous or all(value is None for value in [*previous[slot], *values]):
            continue
        relative, absolute = (0.0, allowance.task_drop) if metric.startswith("task_") else (allowance.accuracy, allowance.accuracy_abs)
        yield _delta(
            key, "accuracy", metric, output, runtime, device, _worst_error(previous[slot]), _worst_error(values), relative, absolute
        )


def _latency_deltas(key: str, now: rm.ArtifactRecord, before: rm.ArtifactRecord, allowance: Allowance) -> Iterator[rm.BaselineDelta]:
    """p50 against p50 on the same runtime and device, regressed only when the whole 95% interval is beyond the
    allowance. Where the baseline's artifact was timed beside this one in this run (``baseline_benchmarks``), the
    interval is that of their paired ratio, against ``latency``; else the recorded p50 is all there is of the baseline,
    from another run whose machine load no interval of this one measures: hence the wider ``latency_recorded``."""
    previous = {(b.runtime, b.device): b.latency_ms_p50 for b in before.benchmarks if b.latency_ms_p50 is not None}
    beside = {(b.runtime, b.device): b for b in now.baseline_benchmarks if b.status == "ok"}
    for bench in now.benchmarks:
        slot = (bench.runtime, bench.device)
        base = previous.get(slot)
        if base is None:
            continue
        if bench.latency_ms_p50 is None:
            yield rm.BaselineDelta(
                artifact=key,
                kind="latency",
                metric="latency_ms_p50",
                runtime=bench.runtime,
                device=bench.device,
                baseline=base,
                status="not_compared",
                reason=f"not measured now: {bench.reason or bench.status}",
            )
            continue
        ratio = paired_ratio(beside[slot], bench) if slot in beside else None
        if ratio is not None and ratio.paired:
            side = beside[slot].latency_ms_p50
            delta = _delta(key, "latency", "latency_ms_p50", "", *slot, side, bench.latency_ms_p50, allowance.latency, allowance.latency_ms)
            delta.interval, delta.side_by_side = ratio.interval, True
            limit = 1 + allowance.latency + allowance.latency_ms / side
            delta.status = "regressed" if ratio.interval[0] > limit else "improved" if ratio.interval[1] < 1 else "ok"
            delta.reason = f"timed beside the baseline's artifact in this run: {describe_ratio(ratio)} its p50"
            yield delta
            continue
        delta = _delta(
            key, "latency", "latency_ms_p50", "", *slot, base, bench.latency_ms_p50, allowance.latency_recorded, allowance.latency_ms
        )
        if delta.reason:  # not comparable: a recorded p50 of NaN or Inf
            yield delta
            continue
        delta.reason = "against its recorded p50: the baseline's artifact was not timed beside this one"
        if bench.latency_ms_interval is not None:
            delta.interval = bench.latency_ms_interval
            if (
                delta.status == "regressed"
                and bench.latency_ms_interval[0] <= base * (1 + allowance.latency_recorded) + allowance.latency_ms
            ):
                delta.status = "ok"
                delta.reason = "beyond the allowance at p50, but its 95% interval reaches within it: noise, not a regression"
        yield delta


def _not_comparable(before: float | None, now: float | None) -> str:
    """Why a baseline value and the value now cannot be compared ('' when they can). NaN compares false with every
    number, so a NaN baseline would pass anything as 'ok': it, an Inf, or a value one side did not measure cannot be
    compared, and the gate fails closed on it. NaN or Inf now is compared: it is a regression."""
    if before is None:
        return "the baseline did not measure it" + (" (at every shape)" if now is not None else "")
    if not math.isfinite(before):
        return f"the baseline's value is {before}"
    if now is None:
        return "it was not measured now (at every shape), where the baseline measured it"
    return ""


def _delta(
    key: str,
    kind: str,
    metric: str,
    output: str,
    runtime: str,
    device: str,
    before: float | None,
    now: float | None,
    relative: float,
    absolute: float,
) -> rm.BaselineDelta:
    """Larger is worse for every metric compared; ``now`` regressed when above before * (1 + relative) + absolute, or
    not finite; a pair that cannot be compared (see _not_comparable) is 'regressed' too, with the reason why."""
    allowed = f"+{relative * 100:g}%" + (f" +{absolute:.3g}" if absolute else "")
    pair = dict(artifact=key, kind=kind, metric=metric, output=output, runtime=runtime, device=device, baseline=before, current=now)
    problem = _not_comparable(before, now)
    if problem:
        reason = f"not comparable: {problem}; a regression check that cannot be made fails the gate"
        return rm.BaselineDelta(**pair, allowed=allowed, status="regressed", reason=reason)
    delta = now - before
    regressed = not math.isfinite(now) or now > before * (1 + relative) + absolute
    status = "regressed" if regressed else "improved" if now < before else "ok"
    return rm.BaselineDelta(**pair, delta=delta, delta_pct=100.0 * delta / before if before else None, allowed=allowed, status=status)


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
