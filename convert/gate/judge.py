"""The gate's verdict: a pure function of the report, the policy and the baseline report (no file is read, no clock).

The verdict fails closed: it promotes only when no reason to reject was found, and every reason is listed.
Rejected: a required artifact missing, a failed check, a required check skipped, NaN/Inf in an output, a
budget exceeded or not measured, a required device absent (unless the policy may skip it), a required package
missing or failed, or a regression against the baseline report beyond its noise allowance.
"""

from __future__ import annotations

from pathlib import Path

from convert.errors import ConvertError
from convert.gate.baseline import compare_with_baseline, not_comparable
from convert.gate.budgets import budget_results
from convert.policy import Allowance, Policy
from convert.reports import model as rm

EXIT_PROMOTE, EXIT_REJECT = 0, 1


def judge(
    report: rm.Report,
    policy: Policy,
    policy_name: str = "<dict>",
    baseline: rm.Report | None = None,
    baseline_path: Path | None = None,
    allowance: Allowance | None = None,
) -> rm.Verdict:
    """The verdict of ``policy`` on ``report``: every reason to reject, the budgets, the baseline deltas. ``baseline_path``
    is only named in the verdict (the baseline report is given, already loaded)."""
    if report.composite:
        return _judge_composite(report, policy, policy_name)
    _check_output_names(policy, report)
    notes: list[str] = []
    records = {r.key: r for r in report.artifacts if not r.candidate or r.path}
    devices, reasons = _devices(policy, set(report.environment.devices), notes)
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
    reasons += _package_reasons(policy, report)
    skippable = {d for d in policy.require.may_skip_devices if d not in report.environment.devices}
    budgets = [
        result for key, budget in policy.budgets.items() for result in budget_results(key, records.get(key), budget, skippable, notes)
    ]
    reasons += [_budget_reason(result) for result in budgets if result.status != "passed"]
    comparison = None
    if baseline is not None:
        comparison = compare_with_baseline(report, baseline, baseline_path, policy.required_keys(), allowance or Allowance())
        reasons += [_regression_reason(delta) for delta in comparison.deltas if delta.status == "regressed"]
    return _verdict(reasons, policy, policy_name, notes=notes, budgets=budgets, baseline=comparison)


def _verdict(reasons: list[rm.GateReason], policy: Policy, policy_name: str, **found) -> rm.Verdict:
    """Promote where no reason to reject was found; the policy's requirements named beside the verdict."""
    promoted = not reasons
    return rm.Verdict(
        decision="promote" if promoted else "reject",
        promoted=promoted,
        exit_code=EXIT_PROMOTE if promoted else EXIT_REJECT,
        policy=policy_name,
        reasons=reasons,
        required_targets=list(policy.require.targets),
        required_optimizations=list(policy.require.optimizations),
        required_artifacts=list(policy.require.artifacts),
        required_packages=list(policy.require.packages),
        required_devices=list(policy.require.devices),
        **found,
    )


def _judge_composite(report: rm.Report, policy: Policy, policy_name: str) -> rm.Verdict:
    """A model of several networks: each required component converted and promoted by the policy on its own report
    (its verdict is in that report), and its components' artifacts run together: an assembled check passed, none failed.
    Fails closed: a required component the run did not convert, or an assembled check that could not run, rejects."""
    from convert.composites import COMPONENTS

    reasons: list[rm.GateReason] = []
    if report.interrupted or report.error:
        reasons.append(rm.GateReason(code="run_failed", message=report.error or "the run was interrupted"))
    every = [c.name for c in COMPONENTS[report.composite]]
    records = {c.name: c for c in report.components}
    for name in policy.require.components or every:
        record = records.get(name)
        if name not in every:
            reasons.append(
                rm.GateReason(
                    code="missing_component", artifact=name, message=f"a {report.composite} has no component {name} ({', '.join(every)})"
                )
            )
        elif record is None or record.report is None:
            why = record.error if record is not None else "the run did not convert it (model.component leaves it out)"
            reasons.append(rm.GateReason(code="missing_component", artifact=name, message=f"component {name} is missing: {why}"))
        elif record.gate != "promote":
            reasons.append(
                rm.GateReason(
                    code="rejected_component",
                    artifact=name,
                    message=f"component {name} was rejected by this policy on its own report ({record.report}), which lists why",
                )
            )
    if all(name in records and records[name].report for name in every):
        failed = [check for check in report.assembled if check.status == "failed"]
        for check in failed:
            reasons.append(
                rm.GateReason(
                    code="failed_assembled",
                    artifact=check.artifact,
                    message=f"the {check.artifact} artifacts run together failed the {check.name} check: {check.reason}",
                )
            )
        if not failed and not any(check.status == "passed" for check in report.assembled):
            why = "; ".join(check.reason for check in report.assembled) or "none ran"
            reasons.append(
                rm.GateReason(code="failed_assembled", message=f"no assembled check ran, so the components were never run together: {why}")
            )
    return _verdict(reasons, policy, policy_name)


def _devices(policy: Policy, present: set[str], notes: list[str]) -> tuple[list[str], list[rm.GateReason]]:
    """The required devices present here, and a reason for each absent one the policy may not skip (a note for one it may)."""
    devices, reasons = [], []
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
    return devices, reasons


def _budget_reason(result: rm.BudgetResult) -> rm.GateReason:
    where = " ".join(
        p
        for p in (
            result.output and f"output '{result.output}'",
            result.runtime and f"on {result.runtime}",
            result.device and f"({result.device})",
        )
        if p
    )
    return rm.GateReason(
        code="budget",
        artifact=result.artifact,
        message=(
            f"{result.metric} {_number(result.value)} {where} misses the budget {result.metric}{result.limit}"
            if result.status == "failed"
            else f"{result.metric}{result.limit} {where}".rstrip() + f": {result.reason}"
        ).replace("  ", " "),
    )


def _regression_reason(delta: rm.BaselineDelta) -> rm.GateReason:
    where = ", ".join(p for p in (delta.output and f"output '{delta.output}'", delta.runtime, delta.device) if p)
    values = f"{delta.metric} {_number(delta.baseline)} → {_number(delta.current)}"
    if not_comparable(delta.baseline, delta.current):  # fails closed: never 'ok' for want of a number
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
    return rm.GateReason(code="regression", artifact=delta.artifact, message=message)


def _package_reasons(policy: Policy, report: rm.Report) -> list[rm.GateReason]:
    """A required package that was not built, and any package that did not pass (what the run built, it must pass)."""
    built = {p.packager: p for p in report.packages}
    reasons = [
        rm.GateReason(code="missing_package", artifact=name, message=f"the required package {name} was not built")
        for name in policy.require.packages
        if name not in built or built[name].path is None
    ]
    for name, package in built.items():
        if package.path is not None and not package.passed:
            reasons.append(rm.GateReason(code="failed_package", artifact=name, message=f"package {name} failed: {package.describe()}"))
    return reasons


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
    attested = record.detail(rm.PrecisionAttestation)
    if attested is not None and attested.status == "failed":
        reasons.append(rm.GateReason(code="precision", artifact=key, message=attested.diagnosis()[0]))
    if any(detail.located() for detail in record.details):  # where it diverged, which nodes to keep in FP32
        located = [line for detail in record.details if detail.located() for line in detail.diagnosis()]
        reasons.append(rm.GateReason(code="diverged", artifact=key, message="; ".join(located)))
    return reasons


def _number(value: float | None) -> str:
    return "—" if value is None else f"{value:.4g}"
