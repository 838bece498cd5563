"""The baseline report: loaded (and upgraded from an older minor schema version) before the run, and compared with
the report of the run per required artifact (accuracy errors, p50 latency and size), beyond the policy's noise allowance.

Only ``load_report`` reads a file; the comparison is pure.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import ValidationError

from convert.errors import ConvertError
from convert.gate.budgets import worse
from convert.policy import Allowance
from convert.readers import loads_json
from convert.reports import model as rm
from convert.reports.ratios import describe_ratio, paired_ratio
from convert.reports.versions import upgrade


def load_report(path: Path, what: str = "baseline report") -> rm.Report:
    """A report.json written by convert: of this schema version, or of an older one ``upgrade`` brings up to it; a
    ConvertError naming what is wrong otherwise (convert/reports/versions.py says which versions it reads)."""
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
    data = upgrade(data, f"{what} {path}")  # a version this tool cannot read faithfully: refused with the next step
    try:
        return rm.Report.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise ConvertError(
            f"the {what} {path} does not match the report schema: {first['msg']} at {'.'.join(map(str, first['loc']))}",
            hint,
        ) from None


def has_benchmarks(report: rm.Report | None) -> bool:
    return report is not None and any(b.status == "ok" for a in report.artifacts for b in a.benchmarks)


@dataclass(frozen=True)
class Slot:
    """What one delta compares: a metric of an artifact, on an output, runtime and device where it has them."""

    artifact: str
    kind: str
    metric: str
    output: str = ""
    runtime: str = ""
    device: str = ""


def compare_with_baseline(
    report: rm.Report, baseline: rm.Report, path: Path | None, keys: list[str], allowance: Allowance
) -> rm.BaselineComparison:
    """Per required artifact: accuracy errors, p50 latency and size against the baseline, beyond the noise allowance."""
    current = {r.key: r for r in report.artifacts if r.path}
    previous = {r.key: r for r in baseline.artifacts if r.path}
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
        deltas.append(_delta(Slot(key, "size", "size_bytes"), float(before.size_bytes), float(now.size_bytes), allowance.size, 0.0))
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
        if worse(value, worst, larger_better=False):
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
            Slot(key, "accuracy", metric, output, runtime, device), _worst_error(previous[slot]), _worst_error(values), relative, absolute
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
            delta = _delta(
                Slot(key, "latency", "latency_ms_p50", "", *slot), side, bench.latency_ms_p50, allowance.latency, allowance.latency_ms
            )
            delta.interval, delta.side_by_side = ratio.interval, True
            limit = 1 + allowance.latency + allowance.latency_ms / side
            delta.status = "regressed" if ratio.interval[0] > limit else "improved" if ratio.interval[1] < 1 else "ok"
            delta.reason = f"timed beside the baseline's artifact in this run: {describe_ratio(ratio)} its p50"
            yield delta
            continue
        delta = _delta(
            Slot(key, "latency", "latency_ms_p50", "", *slot), base, bench.latency_ms_p50, allowance.latency_recorded, allowance.latency_ms
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


def not_comparable(before: float | None, now: float | None) -> str:
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


def _delta(slot: Slot, before: float | None, now: float | None, relative: float, absolute: float) -> rm.BaselineDelta:
    """Larger is worse for every metric compared; ``now`` regressed when above before * (1 + relative) + absolute, or
    not finite; a pair that cannot be compared (see not_comparable) is 'regressed' too, with the reason why."""
    allowed = f"+{relative * 100:g}%" + (f" +{absolute:.3g}" if absolute else "")
    pair = dict(**asdict(slot), baseline=before, current=now)
    problem = not_comparable(before, now)
    if problem:
        reason = f"not comparable: {problem}; a regression check that cannot be made fails the gate"
        return rm.BaselineDelta(**pair, allowed=allowed, status="regressed", reason=reason)
    delta = now - before
    regressed = not math.isfinite(now) or now > before * (1 + relative) + absolute
    status = "regressed" if regressed else "improved" if now < before else "ok"
    return rm.BaselineDelta(**pair, delta=delta, delta_pct=100.0 * delta / before if before else None, allowed=allowed, status=status)
