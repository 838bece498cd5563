"""The benchmark stage: per device, one interleaved session of the source's own run (CPU), every artifact that passed
on every runtime where it passed, and the gate baseline's artifacts beside their successors; a decoder's prefill and
decode are planned here, at sizes the source and every one of those artifacts take."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from convert.artifacts import Artifact
from convert.benchmark import BenchmarkPlan, BenchmarkSettings, plan_decode
from convert.checks.base import crashed
from convert.hardware import compute_limit
from convert.pipeline.context import RunContext
from convert.precision import figure
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import sha256_files
from convert.worker import BenchmarkSession, StageCrashed


def benchmark(ctx: RunContext, plan: BenchmarkPlan, settings: BenchmarkSettings) -> None:
    report = ctx.report
    by_key = {**ctx.artifacts, **ctx.candidates}
    ctx.baseline_artifacts = _baseline_artifacts(ctx, by_key)
    # (where its record goes, runtime or None for the source, artifact, device), grouped by device
    slots: dict[str, list[tuple[list[rm.Benchmark], str | None, object, str]]] = {"cpu": [(report.source_benchmark, None, None, "cpu")]}
    for record in report.artifacts:
        artifact = by_key.get(record.key)
        if artifact is None or not record.passed:
            continue
        for runtime, device in dict.fromkeys((c.runtime, c.device) for c in record.checks if c.status == "passed"):
            slots.setdefault(device, []).append((record.benchmarks, runtime, artifact, device))
            baseline = ctx.baseline_artifacts.get(record.key)
            if baseline is not None:
                slots[device].append((record.baseline_benchmarks, runtime, baseline, device))
    report.environment.benchmark_threads = settings.threads
    if ctx.source.generation is not None:
        plan = _with_decode(ctx, plan, settings, [artifact for entries in slots.values() for _, _, artifact, _ in entries])
    for device, entries in slots.items():
        with ctx.stages.run("benchmark", device) as stage:
            for (records, *_), measured in zip(entries, _session(ctx, stage, device, entries, plan, settings)):
                records.append(measured)
    for record in report.artifacts:
        attested = record.detail(rm.PrecisionAttestation)
        for measured in record.benchmarks:
            measured.compute_limit = compute_limit(record.precision, measured.device, report.environment.cpu)
            if attested is not None and measured.device == "cpu":
                measured.computes = figure(attested.runtime_compute or attested.compute) if attested.compute else ""


def _with_decode(ctx: RunContext, plan: BenchmarkPlan, settings: BenchmarkSettings, artifacts: list) -> BenchmarkPlan:
    """The plan with a decoder's prefill and decode, within the sizes the source and each artifact timed take (a
    torch.export bound, a TensorRT profile); the report notes why a decoder has none."""
    ids = next((s for s in ctx.source.signature.inputs if s.name == "input_ids"), None)
    sequence = ids.dims[1] if ids is not None and len(ids.dims) > 1 and isinstance(ids.dims[1], str) else None
    if sequence is None:
        ctx.report.notes.append("no prefill and decode benchmark: the decoder's input_ids have no symbolic sequence axis")
        return plan
    bounds = [ctx.source.dim_ranges, *(a.dim_bounds for a in artifacts if a is not None)]
    decode, why = plan_decode(settings, ctx.request.seed, sequence, bounds)
    if why:
        ctx.report.notes.append(why)
    return dataclasses.replace(plan, decode=decode)


def _session(
    ctx: RunContext, stage: rm.Stage, device: str, entries: list, plan: BenchmarkPlan, settings: BenchmarkSettings
) -> list[rm.Benchmark]:
    """All of a device's entries timed together; if that session crashes, each alone, so that one crash costs only its own."""
    jobs = [(runtime, artifact, entry_device) for _, runtime, artifact, entry_device in entries]
    try:
        return ctx.worker.call(BenchmarkSession(jobs, plan, settings, f"{device}-{uuid.uuid4().hex[:8]}"))
    except StageCrashed as exc:
        ctx.report.notes.append(f"the interleaved benchmark session on {device} did not finish ({exc}); each was then timed alone")
    results = []
    for runtime, artifact, entry_device in jobs:
        try:
            results += ctx.worker.call(BenchmarkSession([(runtime, artifact, entry_device)], plan, settings, uuid.uuid4().hex[:8]))
        except StageCrashed as exc:
            name = runtime or f"{ctx.report.source.framework} (source)"
            results.append(rm.Benchmark(runtime=name, device=entry_device, status="failed", reason=crashed(stage, exc)))
    return results


def _baseline_artifacts(ctx: RunContext, by_key: dict[str, Artifact]) -> dict[str, Artifact]:
    """The gate baseline's artifacts that are still where its report says, unchanged (same sha256), for the keys this
    run benchmarks; the report notes why any other is compared with its recorded figures instead."""
    if ctx.hooks.baseline is None:
        return {}
    baseline, baseline_path = ctx.hooks.baseline
    found = {}
    for record in baseline.artifacts:
        current = by_key.get(record.key)
        if current is None or not record.path or not record.benchmarks:
            continue
        path = _now_at(record.path, baseline, baseline_path)
        files = [_now_at(f, baseline, baseline_path) for f in record.files] or [path]
        why = ""
        if record.format != current.format:
            why = f"it is {record.format}, this run's is {current.format}"
        elif not all(f.exists() for f in files):
            why = f"{path} is not there any more"
        elif not REGISTRY.format(record.format).code_free and not ctx.request.trust_code:
            why = f"loading a {record.format} artifact runs code, which needs --trust-code (model.trust_code)"
        elif sha256_files(files) != record.sha256:
            why = f"{path} changed since the baseline was made (its sha256 differs)"
        if why:
            ctx.report.notes.append(
                f"{record.key}: the baseline's artifact is not timed beside this one ({why}); its recorded figures are used"
            )
            continue
        found[record.key] = dataclasses.replace(current, path=path, files=files, sha256=record.sha256, size_bytes=record.size_bytes)
    return found


def _now_at(recorded: str, baseline: rm.Report, baseline_path: Path | None) -> Path:
    """Where a file the baseline report names is now: where it says (a relative path from the report's folder), or,
    the report having been moved or copied with the output folder it was written to, at the same place under the
    report's folder (the sha256 still decides whether it is the same file)."""
    path = Path(recorded)
    if baseline_path is None:
        return path
    if not path.is_absolute():
        return baseline_path.parent / path
    if not path.exists() and baseline.out and path.is_relative_to(baseline.out):
        return baseline_path.parent / path.relative_to(baseline.out)
    return path
