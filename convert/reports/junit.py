"""The JSON report as JUnit XML, so that a CI test view lists every check and, for a gated report, why it was rejected.

``<testsuites name="convert">`` holds ``<testsuite name="validation">``: one testcase per check of every artifact
(classname ``convert.<artifact key>``, name ``<runtime> on <device> at <shape>``), plus one per artifact that was not
built or not validated, so that none is silently absent, and one ``<error>`` per other failed stage or an interrupted run.
With a gate verdict, ``<testsuite name="gate">`` follows: one testcase per budget, per baseline delta and per rejection
reason that those do not already show.

A candidate of ``--optimize auto`` that was not chosen is listed, its testcase names end in "(auto candidate, not
chosen)", and its failures are written as ``<skipped>``: they do not fail the run, so the failure count agrees with it.
For the same reason an artifact asked for that cannot be built here is a ``<failure>`` (``NotBuilt``), or ``<skipped>``
where --unbuilt warn accepted it.

The output validates against the Jenkins xunit-plugin junit-10.xsd (vendored as tests/data/junit-10.xsd), which gives
``<testsuites>`` no ``skipped`` attribute: the skipped counts are on each ``<testsuite>``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from convert.reports import facts
from convert.reports.model import (
    ArtifactRecord,
    BaselineDelta,
    BudgetResult,
    Check,
    GateReason,
    PackageCheck,
    PackageRecord,
    PrecisionAttestation,
    Report,
    TaskMetric,
    Verdict,
)
from convert.safety import atomic_write_text
from convert.text import first_line
from convert.validators.task_metrics import describe_drop, drop_unit

MESSAGE_LIMIT = 300
# XML 1.0 cannot hold these characters even escaped, and tool messages can carry them (ANSI colour codes)
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def render_junit(report: Report) -> str:
    suites = [_composite_suite(report) if report.composite else _validation_suite(report)]
    if report.gate is not None:
        suites.append(_gate_suite(report.gate, report.created_at))
    root = ET.Element("testsuites", name="convert")
    for count in ("tests", "failures", "errors"):
        root.set(count, str(sum(int(suite.get(count)) for suite in suites)))
    root.set("time", _seconds(sum(float(suite.get("time")) for suite in suites)))
    root.extend(suites)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: Report, path: str | Path) -> None:
    atomic_write_text(Path(path), render_junit(report))


def _composite_suite(report: Report) -> ET.Element:
    """A composite: a testcase per component (its own report holds its checks) and per assembled check."""
    cases = []
    for component in report.components:
        case = _testcase(f"component.{component.name}", "converted and validated")
        if not component.passed:
            _outcome(case, "failure", component.error or f"failed: see {component.report}", "component")
        cases.append(case)
    for check in report.assembled:
        case = _testcase(f"assembled.{check.name}", check.artifact, check.seconds)
        if check.status != "passed":
            why = check.reason + (f"; alone, {', '.join(check.blamed)} fail it" if check.blamed else "")
            _outcome(case, "failure" if check.status == "failed" else "skipped", why, "assembled")
        cases.append(case)
    return _suite("validation", cases, {"composite": report.composite}, report.created_at)


def _validation_suite(report: Report) -> ET.Element:
    shown: set[tuple[str, str, str]] = set()  # (kind, subject, detail) of the stages an artifact's testcase already shows
    cases = []
    for artifact in report.artifacts:
        key = artifact.key
        not_chosen = facts.not_chosen(report, artifact)
        build_kind = artifact.build_kind or "export"
        shown.update(((build_kind, key, ""), ("validate", key, "")))
        if artifact.checks:
            cases += [_check_case(f"convert.{key}", check, not_chosen, _details_of(artifact, check)) for check in artifact.checks]
            cases += [
                _task_case(f"convert.{key}.task", check, m, not_chosen) for check in artifact.task_checks() for m in check.task.metrics
            ]
            attested = artifact.detail(PrecisionAttestation)
            # a judged claim is a test case, passed or failed; a reduced precision not measured, a skipped one
            if attested is not None and (attested.status in ("passed", "failed") or (attested.status == "skipped" and attested.notable())):
                cases.append(_precision_case(f"convert.{key}.precision", attested, not_chosen))
        else:
            unchecked, missing = facts.unchecked(report, artifact), facts.unbuilt(report, artifact)
            cases.append(_unvalidated_case(f"convert.{key}", artifact, unchecked, not_chosen, missing is not None and not missing.accepted))
    for package in report.packages:
        shown.add(("package", package.packager, ""))
        cases += [_package_case(package, check) for check in package.checks] or [
            _unvalidated_package_case(package, report.stage("package", package.packager))
        ]
    for stage in report.stages:
        if stage.status == "failed" and (stage.kind, stage.subject, stage.detail) not in shown:
            cases.append(
                _outcome(_testcase("convert.run", stage.name, stage.seconds), "error", stage.error or "failed", "StageFailed", stage.error)
            )
    if report.interrupted:
        cases.append(_outcome(_testcase("convert.run", "run"), "error", report.error or "the run was interrupted", "Interrupted"))
    properties = {
        "tool_version": report.tool_version,
        "schema_version": report.schema_version,
        "verdict": facts.outcome(report).status,
        "exit_code": "" if report.exit_code is None else str(report.exit_code),
        "command": report.command,
        "source_path": report.source.path or "",
        "source_sha256": report.source.sha256 or "",
        "source_framework": report.source.framework or "",
    }
    return _suite("validation", cases, properties, report.created_at)


def _details_of(artifact: ArtifactRecord, check: Check) -> str:
    """The artifact's details whose testcase is this check's (where it diverged: the check it traced), one line each."""
    return "\n".join(f"{d.title}: {d.describe()}" for d in artifact.details if d.notable() and d.testcase(artifact.checks) is check)


def _task_case(classname: str, check: Check, metric: TaskMetric, not_chosen: bool) -> ET.Element:
    """One task metric on the labelled data: a failure when its drop is over its budget."""
    case = _testcase(classname, f"{metric.name} on {check.runtime} on {check.device}" + facts.NOT_CHOSEN * not_chosen)
    unit = drop_unit(metric.name)
    text = f"source {metric.source:.6f}, artifact {metric.artifact:.6f}, drop {metric.drop * 100:+.3f}{unit}" + (
        f", budget {metric.budget * 100:.3f}{unit}" if metric.budget is not None else ", not budgeted"
    )
    if metric.status == "failed":
        what = describe_drop(metric.name, metric.drop)
        return _failed(case, not_chosen, f"{metric.name} {what}, over the budget", "TaskMetricDrop", text)
    ET.SubElement(case, "system-out").text = _xml(text)
    return case


def _precision_case(classname: str, attested: PrecisionAttestation, not_chosen: bool) -> ET.Element:
    """The precision claim judged: a failure when the artifact computes (or stores) less than the share asked in it."""
    claim = f"stores its weights in {attested.claimed}" if attested.claim == "weights" else f"computes in {attested.claimed}"
    case = _testcase(classname, claim + facts.NOT_CHOSEN * not_chosen, attested.seconds)
    if attested.status == "skipped":
        return _outcome(case, "skipped", attested.reason)
    if attested.status == "failed":
        return _failed(case, not_chosen, f"the artifact {attested.diagnosis()[0]}", "PrecisionNotAttested", attested.describe())
    ET.SubElement(case, "system-out").text = _xml(attested.describe())
    return case


def _check_case(classname: str, check: Check, not_chosen: bool, notes: str = "") -> ET.Element:
    case = _testcase(classname, facts.place(check) + facts.NOT_CHOSEN * not_chosen, check.seconds)
    if check.status == "skipped":
        return _outcome(case, "skipped", check.reason or "skipped")
    details = "\n".join(filter(None, (_check_details(check), notes)))
    if check.status == "failed":
        return _failed(case, not_chosen, check.reason or "failed", "ValidationFailed", details)
    ET.SubElement(case, "system-out").text = _xml(details)
    return case


def _unvalidated_case(
    classname: str, artifact: ArtifactRecord, unchecked: facts.Unchecked, not_chosen: bool, fails_run: bool
) -> ET.Element:
    """The one testcase of an artifact without checks: why it was not built, or why it was not validated. One asked for
    that cannot be built here is a failure where it ``fails_run`` (not accepted by --unbuilt warn), else skipped."""
    suffix, stage = facts.NOT_CHOSEN * not_chosen, unchecked.stage
    if unchecked.status == "skipped":
        case = _testcase(classname, stage.name + suffix, stage.seconds)
        if fails_run:
            return _outcome(case, "failure", f"requested but not built: {unchecked.reason}", "NotBuilt", unchecked.reason)
        return _outcome(case, "skipped", unchecked.reason or "skipped")
    if unchecked.status == "not built":
        attempts = "\n".join(
            f"- {a.strategy}: {a.status} in {a.seconds:.3f}s" + (f": {a.error}" if a.error else "") for a in artifact.attempts
        )
        text = stage.error + (f"\n\nattempts:\n{attempts}" if attempts else "")
        kind = "ExportFailed" if stage.kind == "export" else "OptimizeFailed"
        return _failed(_testcase(classname, stage.name + suffix, stage.seconds), not_chosen, stage.error or "failed", kind, text)
    if stage is not None:  # its validate stage failed
        case = _testcase(classname, stage.name + suffix, stage.seconds)
        return _outcome(case, "error", stage.error or "failed", "StageFailed", stage.error)
    return _failed(_testcase(classname, f"validate:{artifact.key}{suffix}"), not_chosen, unchecked.reason, "NotValidated")


def _check_details(check: Check) -> str:
    """The check's inputs and every output's metrics, one block per output."""
    shapes = "; ".join(f"{name}={shape}" for name, shape in check.input_shapes.items()) or "-"
    lines = [f"input shapes: {shapes}; samples: {check.samples}"]
    if check.status == "failed" and not any(output.status == "failed" for output in check.outputs):
        lines.append(f"reason: {check.reason}")  # it failed before or beside its outputs (loading, missing outputs)
    if check.generation is not None:
        lines.append(f"generation: {check.generation.describe()}")
    for output in check.outputs:
        lines.append(f"output {output.name!r}: {output.status}" + (f": {output.reason}" if output.reason else ""))
        lines.append(
            f"  max_abs_error {_number(output.max_abs_error)}, max_rel_error {_number(output.max_rel_error)}, "
            f"cosine {_cosine(output.cosine_similarity)}, rel_rms {_number(output.rel_rms_error)}, "
            f"top1 {_number(output.top1_agreement)}, top5 {_number(output.top5_agreement)}"
        )
        lines.append(
            f"  nan {output.nan_count}, inf {output.inf_count}, mismatches {output.mismatch_count} of "
            f"{output.elements}, shape {output.shape} (expected {output.expected_shape}), "
            f"dtype {output.dtype} (expected {output.expected_dtype})"
        )
        if output.atol is not None or output.rtol is not None:
            lines.append(f"  tolerance atol={_number(output.atol)} rtol={_number(output.rtol)} ({output.tolerance_source or '-'})")
        if output.budget:
            lines.append(f"  budget {output.budget} ({output.budget_source or '-'})")
    return "\n".join(lines)


def _gate_suite(verdict: Verdict, timestamp: str) -> ET.Element:
    deltas = verdict.baseline.deltas if verdict.baseline else []
    cases = [_budget_case(budget) for budget in verdict.budgets] + [_delta_case(delta) for delta in deltas]
    # a budget reason is already shown when every budget of its artifact that missed is a failed testcase (a skipped
    # budget rejects too, but shows as skipped); a regression reason when its artifact has a regressed delta
    over_budget = {budget.artifact for budget in verdict.budgets if budget.status == "failed"}
    over_budget -= {budget.artifact for budget in verdict.budgets if budget.status == "skipped"}
    regressed = {delta.artifact for delta in deltas if delta.status == "regressed"}
    cases += [
        _reason_case(reason)
        for reason in verdict.reasons
        if not (reason.code == "budget" and reason.artifact in over_budget)
        and not (reason.code == "regression" and reason.artifact in regressed)
    ]
    properties = {
        "decision": verdict.decision,
        "policy": verdict.policy,
        "report": verdict.report or "",
        "required_targets": ",".join(verdict.required_targets),
        "required_optimizations": ",".join(verdict.required_optimizations),
        "required_devices": ",".join(verdict.required_devices),
        "baseline": verdict.baseline.path if verdict.baseline else "",
    }
    suite = _suite("gate", cases, properties, timestamp)
    if verdict.notes:
        ET.SubElement(suite, "system-out").text = _xml("\n".join(f"note: {note}" for note in verdict.notes))
    return suite


def _budget_case(budget: BudgetResult) -> ET.Element:
    case = _testcase("gate.budget", f"{budget.artifact} {budget.metric}{budget.limit}{_where(budget)}")
    measured = f"{budget.metric} = {_number(budget.value)}, allowed {budget.limit}" + (f": {budget.reason}" if budget.reason else "")
    if budget.status == "failed":
        return _outcome(case, "failure", measured, "BudgetExceeded", measured)
    if budget.status == "skipped":
        return _outcome(case, "skipped", budget.reason or "not measured")
    ET.SubElement(case, "system-out").text = _xml(measured)
    return case


def _delta_case(delta: BaselineDelta) -> ET.Element:
    case = _testcase("gate.baseline", f"{delta.artifact} {delta.metric}{_where(delta)}")
    if delta.status == "not_compared":
        return _outcome(case, "skipped", delta.reason or "not compared")
    percent = f", {delta.delta_pct:+.1f}%" if delta.delta_pct is not None else ""
    change = (
        f"{delta.metric} {_number(delta.baseline)} -> {_number(delta.current)} ({_signed(delta.delta)}{percent}), "
        f"allowed {delta.allowed or '-'}: {delta.status}" + (f": {delta.reason}" if delta.reason else "")
    )
    if delta.status == "regressed":
        return _outcome(case, "failure", change, "Regression", change)
    ET.SubElement(case, "system-out").text = _xml(change)
    return case


def _reason_case(reason: GateReason) -> ET.Element:
    case = _testcase(f"gate.{reason.code}", first_line(reason.message, MESSAGE_LIMIT) or reason.code)
    return _outcome(case, "failure", reason.message, reason.code, reason.message)


def _where(measured: BudgetResult | BaselineDelta) -> str:
    """Which output, runtime, device and shape a gate measurement is of, e.g. " (output 'y', onnxruntime on cpu at B=1)"."""
    where = facts.where(measured)
    return f" ({where})" if where else ""


def _package_case(package: PackageRecord, check: PackageCheck) -> ET.Element:
    case = _testcase(f"convert.package.{package.packager}", check.name)
    if check.status == "failed":
        return _outcome(case, "failure", check.reason or "failed", "PackageCheckFailed", check.reason)
    if check.status == "skipped":
        return _outcome(case, "skipped", check.reason or "skipped")
    return case


def _unvalidated_package_case(package: PackageRecord, stage) -> ET.Element:
    case = _testcase(f"convert.package.{package.packager}", "build", stage.seconds if stage else 0.0)
    if stage is not None and stage.status == "failed":
        return _outcome(case, "error", stage.error or "failed", "StageFailed", stage.error)
    return _outcome(case, "skipped", (stage.reason if stage else "") or "the package was not built")


def _suite(name: str, cases: list[ET.Element], properties: dict[str, str], timestamp: str) -> ET.Element:
    suite = ET.Element(
        "testsuite",
        {
            "name": name,
            "tests": str(len(cases)),
            "failures": str(sum(case.find("failure") is not None for case in cases)),
            "errors": str(sum(case.find("error") is not None for case in cases)),
            "skipped": str(sum(case.find("skipped") is not None for case in cases)),
            "time": _seconds(sum(float(case.get("time")) for case in cases)),
            "timestamp": timestamp,
        },
    )
    listed = ET.SubElement(suite, "properties")
    for key, value in properties.items():
        ET.SubElement(listed, "property", name=key, value=_xml(value))
    suite.extend(cases)
    return suite


def _testcase(classname: str, name: str, seconds: float = 0.0) -> ET.Element:
    return ET.Element("testcase", classname=_xml(classname), name=_xml(name), time=_seconds(seconds))


def _failed(case: ET.Element, not_chosen: bool, message: str, kind: str, text: str = "") -> ET.Element:
    """A failure, or for an auto candidate that was not chosen (which does not fail the run) a skip that says why."""
    if not_chosen:
        return _outcome(case, "skipped", f"auto candidate, not chosen: {first_line(message, MESSAGE_LIMIT)}", kind, text)
    return _outcome(case, "failure", message, kind, text)


def _outcome(case: ET.Element, tag: str, message: str, kind: str = "", text: str = "") -> ET.Element:
    outcome = ET.SubElement(case, tag, message=_xml(first_line(message, MESSAGE_LIMIT)))
    if kind:
        outcome.set("type", kind)
    if text:
        outcome.text = _xml(text)
    return case


def _xml(text: str) -> str:
    return NOT_XML.sub("\ufffd", text)


def _seconds(seconds: float) -> str:
    return f"{max(seconds, 0.0):.3f}"


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _signed(value: float | None) -> str:
    return "-" if value is None else f"{value:+.6g}"


def _cosine(value: float | None) -> str:
    return "-" if value is None else f"{value:.8f}"  # 6 significant digits would print 0.99999996 as 1
