"""Plans the stages for a request and runs them, recording a status per stage.

load source ─► reference outputs ─► export (each target) ─► validate (artifact × runtime × device × shape)
            ─► optimize (each --optimize pass, from the validated artifact it takes) ─► validate
            ─► benchmark (source and every artifact that passed) ─► report

Artifacts are exported and validated in a staging folder and renamed into place only when complete. The framework
work of every stage runs in a worker process (convert/worker.py): a crash or a stage timeout fails that stage, and
the run goes on with the others.
``--optimize auto`` builds every pass this machine can run as a candidate, validates and benchmarks them, and
publishes only the fastest one that passed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from convert import __version__, options
from convert.artifacts import Artifact
from convert.benchmark import BenchmarkPlan, BenchmarkSettings, plan_benchmark
from convert.cache import Lookup, RunCache, artifact_data, cached_artifact
from convert.devices import ALL_DEVICES, absent_reason, cuda_gpus, present_devices
from convert.errors import ConvertError, require
from convert.exporters.base import ExportJob
from convert.memory import GIB, check_fits, feed_bytes
from convert.protected_inputs import Read, Write, reads_of, refuse_writes_to_inputs
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import (
    FAILED_FOLDER,
    LOCK_NAME,
    STAGING_PREFIX,
    Staging,
    atomic_write_text,
    no_space_error,
    refuse_existing,
    sha256_files,
    size_of,
)
from convert.sources.request import SourceRequest, is_factory_reference, load_example_inputs
from convert.sources.signature import fixed_shape_note
from convert.specs import parse_dim_sizes, parse_input_specs, parse_shape_ranges
from convert.text import first_line
from convert.validation import ValidationCase
from convert.validators import TolerancePolicy, generate_feed, plan_shape_cases
from convert.worker import DEFAULT_STAGE_TIMEOUT, ChildWorker, Session, SourceSummary, StageCrashed
from convert.worker import start as start_worker


@dataclass
class ConvertRequest:
    model: Any
    to: tuple[str, ...] = ("onnx",)
    out: Path | None = None
    framework: str | None = None
    weights: Path | None = None
    params: Any = None  # a JAX model's params: a file path, or a pytree from Python
    inputs: tuple[str, ...] = ()
    example_inputs: Any = None  # an .npz path, a dict of arrays, or a tuple of tensors
    dims: tuple[str, ...] = ()
    opset: int | None = None
    tolerances: tuple[str, ...] = ()
    optimize: tuple[str, ...] = ()
    calibration_data: Path | None = None
    accuracy: tuple[str, ...] = ()  # accuracy budgets of reduced-precision artifacts
    shape_ranges: tuple[str, ...] = ()  # "B=1..8..32": TensorRT profiles and the validation sizes
    benchmark: bool = False
    threads: int | None = None  # intra-op threads of every benchmarked runtime (default: every core)
    benchmark_batch: int = 8
    samples: int = 3
    allow_fixed_shapes: bool = False  # an artifact that fixes a dim asked dynamic passes, its checks there skipped
    seed: int = 0
    trust_code: bool = False
    force: bool = False
    stage_timeout: float | None = DEFAULT_STAGE_TIMEOUT  # seconds per stage in the worker process; None: no limit
    isolate: bool = True  # False: the framework work runs in this process (for debuggers and profilers)
    cache: bool = True  # reuse the results of unchanged stages (convert/cache.py)
    cache_dir: Path | None = None  # default: $CONVERT_CACHE_DIR, else ~/.cache/convert
    report_json: Path | None = None
    command: str = ""
    reads: tuple[Read, ...] = ()  # what the caller reads besides the model's files (the gate's policy and baseline)
    writes: tuple[Write, ...] = ()  # what the caller writes besides the run's outputs (the gate's renderings)
    judge: Callable[[rm.Report, Path], rm.Verdict] | None = None  # the gate's verdict, written into the report
    # called once the report is written, still under the output lock (the gate's renderings and MLflow run); what it
    # changes in the report is written again
    publish: Callable[[rm.Report, Path], None] | None = None


@dataclass
class ConversionResult:
    report: rm.Report
    artifacts: dict[str, Artifact]
    report_path: Path | None

    @property
    def passed(self) -> bool:
        return self.report.passed

    @property
    def exit_code(self) -> int:
        return self.report.exit_code if self.report.exit_code is not None else 3


class Progress:
    """Receives stage events; the CLI prints them, the Python API stays quiet by default."""

    def started(self, name: str) -> None: ...

    def finished(self, stage: rm.Stage, detail: str = "") -> None: ...


class _Stages:
    def __init__(self, progress: Progress):
        self.records: list[rm.Stage] = []
        self.progress = progress

    @contextlib.contextmanager
    def run(self, name: str) -> Iterator[rm.Stage]:
        record = rm.Stage(name=name, status="ok")
        self.progress.started(name)
        started = time.perf_counter()
        try:
            yield record
        except ConvertError as exc:
            record.status, record.error = "failed", exc.paragraph()
            raise
        except BaseException as exc:
            record.status, record.error = "failed", f"{type(exc).__name__}: {exc}"
            raise
        finally:
            record.seconds = round(time.perf_counter() - started, 3)
            self.records.append(record)
            self.progress.finished(record)


def run(request: ConvertRequest, progress: Progress | None = None) -> ConversionResult:
    progress = progress or Progress()
    targets = _check_targets(request.to)
    optimizations, auto = _check_optimizations(request.optimize, targets)
    out_dir = Path(request.out) if request.out is not None else Path("out")
    specs = parse_input_specs(request.inputs)
    dim_sizes = parse_dim_sizes(request.dims)
    shape_ranges = parse_shape_ranges(request.shape_ranges)
    # a range's opt, min and max are validated, with opt as the export size, unless --dim chooses the sizes
    dim_sizes = {**{s: tuple(dict.fromkeys((opt, low, high))) for s, (low, opt, high) in shape_ranges.items()}, **dim_sizes}
    policy = TolerancePolicy(request.tolerances, request.accuracy)
    if request.samples < 1:
        raise ConvertError("--samples must be at least 1", "Use 3 or more samples per shape.")
    if request.threads is not None and request.threads < 1 or request.benchmark_batch < 1:
        raise ConvertError("--threads and --benchmark-batch must be at least 1", "Leave them out for every core and a batch of 8.")
    if request.stage_timeout is not None and not request.stage_timeout > 0:
        raise ConvertError(
            f"the stage timeout must be a positive number of seconds, not {request.stage_timeout}",
            f"Leave it out for {DEFAULT_STAGE_TIMEOUT:g} s.",
        )
    settings = BenchmarkSettings(**{k: v for k, v in (("threads", request.threads), ("batch", request.benchmark_batch)) if v})
    example = request.example_inputs
    if isinstance(example, (str, os.PathLike)):
        example = load_example_inputs(Path(example))

    stem = _stem(request.model)
    report_path = Path(request.report_json) if request.report_json else out_dir / "report.json"
    finals = {t: out_dir / f"{stem}{REGISTRY.entries('exporter', format=t)[0].load().suffix}" for t in targets}
    finals.update({o: out_dir / f"{stem}{REGISTRY.get('optimizer', o).load().suffix}" for o in optimizations})
    finals.update({f"{key} (failed)": out_dir / FAILED_FOLDER / path.name for key, path in finals.items()})
    refuse_writes_to_inputs([*_writes(out_dir, finals, report_path), *request.writes], [*_reads(request), *request.reads])
    refuse_existing([*finals.values(), report_path], request.force)  # again under the output lock, before writing

    stages = _Stages(progress)
    report = rm.Report(
        tool_version=__version__,
        created_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        command=request.command,
        environment=_environment(),
        options=options.record(request),
    )
    artifacts: dict[str, Artifact] = {}
    staging: Staging | None = None
    source_request = SourceRequest(
        model=request.model,
        framework=request.framework,
        weights=Path(request.weights) if request.weights else None,
        params=request.params,
        inputs=specs,
        example_inputs=example,
        trust_code=request.trust_code,
        dim_ranges={symbol: (low, high) for symbol, (low, _, high) in shape_ranges.items()},
    )
    cache = RunCache.open(Path(request.cache_dir) if request.cache_dir else None, request.cache)
    report.cache = cache.record
    worker = start_worker(source_request, request.stage_timeout, request.isolate)
    report.isolation = worker.isolation
    try:
        with stages.run("load") as stage:
            source = _setup_job(worker, stage, Session.load, source_request)
        report.source = _source_record(source)
        if note := fixed_shape_note(source.signature.inputs, bool(specs), example is not None, source.info.kind):
            report.notes.append(note)
        cache.attach(source, request)
        exporters = {t: _exporter_for(t, source.info.framework) for t in targets}

        with stages.run("reference") as stage:
            cases = _reference(source, worker, stage, dim_sizes, request, policy, cache)
        report.source.outputs = list(source.signature.outputs)
        report.source.inputs = [str(s) for s in source.signature.inputs]
        # checked before anything is written: bad calibration data must not leave exported artifacts behind
        calibration = (
            _calibration_feeds(source, cases, request)
            if any(REGISTRY.get("optimizer", o).meta.get("calibrated") for o in optimizations)
            else []
        )

        ranges = _profile_ranges(source, cases, shape_ranges)
        staging = Staging(out_dir, [*finals.values(), report_path], request.force)
        export_feed = cases[0].feeds[0]
        for target in targets:
            record = rm.ArtifactRecord(format=target, reproduce=options.reproduce_command(request, target, out_dir))
            report.artifacts.append(record)
            with stages.run(f"export:{target}") as stage:
                job = ExportJob(
                    source=None, feed=export_feed, folder=staging.path, stem=stem, opset=request.opset, dim_ranges=source.dim_ranges
                )
                lookup = cache.find(stage.name, cache.source_packages, exporters[target], stem, export_feed, source.dim_ranges)
                artifact = _recorded(
                    _made(worker, stage, cache, lookup, staging.path, Session.export, exporters[target], job), record, stage
                )
            if artifact is not None:
                _validate_and_publish(
                    target, artifact, record, cases, policy, staging, out_dir, artifacts, stages, worker, cache, request.allow_fixed_shapes
                )
        candidates: dict[str, Artifact] = {}
        for name in optimizations:
            _optimize(
                name,
                artifacts,
                source,
                export_feed,
                calibration,
                cases,
                policy,
                staging,
                out_dir,
                stem,
                request,
                report,
                stages,
                ranges,
                candidates if auto else None,
                worker,
                cache,
            )
        if request.benchmark or auto:
            plan = plan_benchmark(source.signature, cases[0].shape.sizes, export_feed, settings, request.seed)
            _benchmark(worker, report, artifacts, candidates, plan, settings, stages)
        if auto:
            _choose(report, candidates, staging, out_dir, artifacts, stages.records)
        _finish(report, stages)
        if request.judge is not None:
            report.gate = request.judge(report, report_path)
        _write_report(report_path, report)  # still under the output folder's lock
        if request.publish is not None:
            request.publish(report, report_path)
            _write_report(report_path, report)
    except KeyboardInterrupt:
        report.interrupted = True
        report.error = "the run was interrupted"
        _finish(report, stages)
        if staging is not None:
            _write_report(report_path, report)
        raise
    except Exception as exc:
        if staging is not None:  # work was done and may be published: the report says how far the run got and why it stopped
            _report_stop(report, stages, report_path, exc)
        raise
    finally:
        worker.close()
        if staging is not None:
            staging.cleanup()
    return ConversionResult(report=report, artifacts=artifacts, report_path=report_path)


def _report_stop(report: rm.Report, stages: _Stages, report_path: Path, exc: Exception) -> None:
    """Write the report of a run an error stopped: exit code 2 for a user error, 3 for an internal one. A report that
    cannot be written (the error may be a full disk) leaves the error to say so."""
    _finish(report, stages)
    user_error = isinstance(exc, ConvertError)
    report.error = exc.paragraph() if user_error else f"internal error: {type(exc).__name__}: {exc}"
    report.passed, report.exit_code = False, 2 if user_error else 3
    try:
        _write_report(report_path, report)
    except ConvertError:
        pass


def _writes(out_dir: Path, finals: dict[str, Path], report_path: Path) -> list[Write]:
    """Every path the run writes, replaces or removes in the output folder."""
    writes = [
        Write("the output folder", out_dir, replaces=False),
        Write("the failed folder", out_dir / FAILED_FOLDER, replaces=False),
        Write("the JSON report", report_path),
        Write("the output lock", out_dir / LOCK_NAME),
    ]
    for key, path in finals.items():
        writes.append(Write(f"the {key} artifact", path))
        if path.suffix == ".onnx":
            writes.append(Write(f"the {key} artifact's external data", path.with_name(f"{path.name}.data")))
    writes += [Write("a stale staging folder, which the run removes,", stale) for stale in out_dir.glob(f"{STAGING_PREFIX}*")]
    return writes


def _reads(request: ConvertRequest) -> list[Read]:
    """Every path the run reads."""
    params = request.params if isinstance(request.params, (str, os.PathLike)) else None
    example = request.example_inputs if isinstance(request.example_inputs, (str, os.PathLike)) else None
    return reads_of(
        request.model, weights=request.weights, params=params, example_inputs=example, calibration_data=request.calibration_data
    )


def _setup_job(worker, stage: rm.Stage, job: Callable, *args):
    """A job the worker must have done before any other (loading the source): a crash here is the model's fault."""
    try:
        return worker.call(job, *args, setup=True)
    except StageCrashed as exc:
        _crashed(stage, exc)
        raise ConvertError(
            f"loading the model did not finish: {exc}",
            "The file may be corrupt or truncated, or need other versions of its framework's native "
            "libraries: load it in a Python shell with the same packages to see the crash.",
        ) from None


def _export_job(worker, stage: rm.Stage, method: Callable, name: str, job):
    """An export or optimization in the worker; a crash or timeout becomes a failed attempt of a failed stage."""
    from convert.exporters.base import Attempt, ExportOutcome

    started = time.perf_counter()
    try:
        return worker.call(method, name, job)
    except StageCrashed as exc:
        return ExportOutcome(None, [Attempt(name, "failed", time.perf_counter() - started, _crashed(stage, exc))])


def _made(worker, stage: rm.Stage, cache: RunCache, lookup: Lookup, folder: Path, method: Callable, name: str, job):
    """An export or optimization: from the cache when its entry is there and trusted, else made and then cached."""
    from convert.exporters.base import Attempt, ExportOutcome

    if lookup.hit is not None:
        stage.reused = True
        attempts = [Attempt(**attempt) for attempt in lookup.hit.data["attempts"]]
        return ExportOutcome(cached_artifact(lookup.hit, folder), attempts)
    outcome = _export_job(worker, stage, method, name, job)
    if outcome.artifact is not None:
        cache.keep(lookup, {**artifact_data(outcome.artifact), "attempts": [a.__dict__ for a in outcome.attempts]}, outcome.artifact.files)
    return outcome


def _crashed(stage: rm.Stage, exc: StageCrashed) -> str:
    """Mark the stage failed by a worker crash or timeout; the message."""
    stage.status, stage.signal, stage.timed_out = "failed", exc.signal, exc.timed_out
    stage.error = f"the {stage.name} stage did not finish: {exc}"
    return stage.error


def _write_report(path: Path, report: rm.Report) -> None:
    try:
        atomic_write_text(path, report.to_json())
    except OSError as exc:
        full = no_space_error(exc, path.parent)
        if full is not None:
            raise full from exc
        raise ConvertError(
            f"cannot write the report {path}: {exc.strerror or exc}", "Choose a writable path with --report-json or --out."
        ) from exc


def _optimize(
    name: str,
    artifacts: dict[str, Artifact],
    source: SourceSummary,
    export_feed,
    calibration,
    cases,
    policy: TolerancePolicy,
    staging: Staging,
    out_dir: Path,
    stem: str,
    request: ConvertRequest,
    report: rm.Report,
    stages: _Stages,
    ranges: dict[str, tuple[int, int, int]],
    candidates: dict[str, Artifact] | None,
    worker,
    cache: RunCache,
) -> None:
    """One --optimize pass from the validated artifact it takes; the result is validated like any artifact.

    With ``candidates`` (--optimize auto) the validated artifact stays staged there until one is chosen."""
    from convert.optimizers.base import OptimizeJob

    entry = REGISTRY.get("optimizer", name)
    optimizer = entry.load()
    base = artifacts.get(entry.meta["takes"])
    record = rm.ArtifactRecord(
        format=entry.meta["format"],
        optimization=name,
        candidate=candidates is not None,
        precision=optimizer.precision,
        reproduce=options.reproduce_command(request, entry.meta["takes"], out_dir, name),
    )
    report.artifacts.append(record)
    with stages.run(f"{'auto' if candidates is not None else 'optimize'}:{name}") as stage:
        missing = [p for p in entry.meta.get("requires", ()) if not _importable(p)]
        reason = (
            f"{', '.join(missing)} is not installed: pip install 'model-convert[{entry.meta['extra']}]'"
            if missing
            else None
            if base is None
            else optimizer.unavailable_reason()
        )
        if base is None:
            stage.status, stage.reason = "skipped", f"the {entry.meta['takes']} artifact it starts from was not exported"
            return
        if reason:
            stage.status, stage.reason = "skipped", reason
            return
        record.derived_from = str(base.path)
        job = OptimizeJob(
            source=None,
            feed=export_feed,
            folder=staging.path,
            stem=stem,
            opset=request.opset,
            base=base,
            calibration=calibration,
            shape_ranges=ranges,
        )
        # a TensorRT engine is made for one GPU model and driver, and its runner checks only engines built in this run
        lookup = (
            Lookup(None)
            if entry.meta["format"] == "tensorrt"
            else cache.find(stage.name, entry.packages, name, stem, base.sha256, export_feed, calibration, ranges)
        )
        artifact = _recorded(_made(worker, stage, cache, lookup, staging.path, Session.optimize, name, job), record, stage)
    if artifact is None:
        return
    if candidates is None:
        _validate_and_publish(
            name, artifact, record, cases, policy, staging, out_dir, artifacts, stages, worker, cache, request.allow_fixed_shapes
        )
    else:
        _validate(name, artifact, record, cases, policy, stages, worker, cache, request.allow_fixed_shapes)
        candidates[name] = artifact
    if calibration and entry.meta.get("calibrated"):
        report.calibration = getattr(calibration, "origin", "")


def _importable(package: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(package) is not None


def _profile_ranges(
    source: SourceSummary, cases: list[ValidationCase], given: dict[str, tuple[int, int, int]]
) -> dict[str, tuple[int, int, int]]:
    """(min, opt, max) per symbolic dim, for passes that fix them in advance (TensorRT profiles): --shape-range,
    else the smallest and largest validated sizes with the export size as opt."""
    ranges = {}
    for symbol in source.signature.symbols:
        sizes = [case.shape.sizes[symbol] for case in cases if symbol in case.shape.sizes]
        ranges[symbol] = given.get(symbol) or (min(sizes), cases[0].shape.sizes[symbol], max(sizes))
    return ranges


def _benchmark(
    worker,
    report: rm.Report,
    artifacts: dict[str, Artifact],
    candidates: dict[str, Artifact],
    plan: BenchmarkPlan,
    settings: BenchmarkSettings,
    stages: _Stages,
) -> None:
    """The source's own run, then every artifact that passed, on every device where it passed."""
    with stages.run("benchmark:source") as stage:
        report.source_benchmark = [
            _benchmark_job(worker, stage, f"{report.source.framework} (source)", "cpu", Session.benchmark_source, plan, settings)
        ]
    by_key = {**artifacts, **candidates}
    for record in report.artifacts:
        key = record.key
        artifact = by_key.get(key)
        if artifact is None or not record.passed:
            continue
        with stages.run(f"benchmark:{key}") as stage:
            for runtime, device in dict.fromkeys((c.runtime, c.device) for c in record.checks if c.status == "passed"):
                record.benchmarks.append(
                    _benchmark_job(worker, stage, runtime, device, Session.benchmark_artifact, runtime, artifact, device, plan, settings)
                )


def _benchmark_job(worker, stage: rm.Stage, runtime: str, device: str, method: Callable, *args) -> rm.Benchmark:
    try:
        return worker.call(method, *args)
    except StageCrashed as exc:
        return rm.Benchmark(runtime=runtime, device=device, status="failed", reason=_crashed(stage, exc))


def _choose(
    report: rm.Report,
    candidates: dict[str, Artifact],
    staging: Staging,
    out_dir: Path,
    artifacts: dict[str, Artifact],
    stage_records: list[rm.Stage],
) -> None:
    """Rank the candidates (the exported ONNX artifact included) by p50 latency; publish the fastest that passed."""
    source_p50 = next((b.latency_ms_p50 for b in report.source_benchmark if b.status == "ok"), None)
    stage_of = {s.subject: s for s in stage_records if s.kind == "auto"}
    ranked, others = [], []
    for record in report.artifacts:
        if not (record.candidate or (record.format == "onnx" and not record.optimization)):
            continue
        name = record.optimization or "none"
        entry = rm.AutoCandidate(name=name, format=record.format, precision=record.precision, status="lost")
        timed = [b for b in record.benchmarks if b.status == "ok"]
        best = min(timed, key=lambda b: b.latency_ms_p50) if timed else None
        stage = stage_of.get(name)
        if best is not None:
            entry.device, entry.latency_ms_p50, entry.throughput_per_s = best.device, best.latency_ms_p50, best.throughput_per_s
            entry.speedup_vs_source = round(source_p50 / best.latency_ms_p50, 3) if source_p50 and best.latency_ms_p50 else None
            ranked.append(entry)
        elif stage is not None and stage.status == "skipped":
            entry.status, entry.reason = "skipped", f"not built: {stage.reason}"
            others.append(entry)
        elif stage is not None and stage.status == "failed":
            entry.status, entry.reason = "failed", f"not built: {first_line(stage.error)}"
            others.append(entry)
        else:
            failing = next((c for c in record.checks if c.status == "failed"), None)
            entry.status = "failed"
            entry.reason = (
                f"failed validation ({failing.runtime}, {failing.device}, {failing.shape}): {failing.reason}"
                if failing
                else "no check passed"
                if not record.passed
                else "its benchmark failed: " + "; ".join(b.reason for b in record.benchmarks)
            )
            others.append(entry)
    ranked.sort(key=lambda c: c.latency_ms_p50)
    for rank, entry in enumerate(ranked, 1):
        entry.rank = rank
        if rank > 1:
            entry.reason = (
                f"slower: p50 {entry.latency_ms_p50:.4g} ms on {entry.device}, "
                f"{entry.latency_ms_p50 / ranked[0].latency_ms_p50:.2f}x the chosen's {ranked[0].latency_ms_p50:.4g} ms"
            )
    report.auto = rm.AutoSelection(candidates=ranked + others)
    if not ranked:
        return
    ranked[0].status, ranked[0].reason = "chosen", "the fastest candidate that passed validation"
    report.auto.chosen = ranked[0].name
    chosen = candidates.get(ranked[0].name)
    if chosen is not None:
        record = next(r for r in report.artifacts if r.optimization == ranked[0].name)
        _publish(ranked[0].name, chosen, record, staging, out_dir, artifacts)


def _recorded(outcome, record: rm.ArtifactRecord, stage: rm.Stage) -> Artifact | None:
    """Record an export's (or optimization's) attempts; the artifact, or None when every strategy failed."""
    record.attempts = [
        rm.Attempt(strategy=a.strategy, status=a.status, seconds=round(a.seconds, 3), error=a.error, note=a.note) for a in outcome.attempts
    ]
    if outcome.artifact is None:
        stage.status, stage.error = "failed", outcome.primary_error
        return None
    artifact = outcome.artifact
    record.exporter, record.strategy, record.precision = artifact.exporter, artifact.strategy, artifact.precision
    record.dim_bounds = {symbol: list(bounds) for symbol, bounds in artifact.dim_bounds.items()}
    return artifact


def _validate_and_publish(
    key: str,
    artifact: Artifact,
    record: rm.ArtifactRecord,
    cases,
    policy: TolerancePolicy,
    staging: Staging,
    out_dir: Path,
    artifacts: dict[str, Artifact],
    stages: _Stages,
    worker,
    cache: RunCache,
    allow_fixed_shapes: bool,
) -> None:
    """Validate a staged artifact, then move it into place and record where it went."""
    _validate(key, artifact, record, cases, policy, stages, worker, cache, allow_fixed_shapes)
    _publish(key, artifact, record, staging, out_dir, artifacts)


def _validate(
    key: str,
    artifact: Artifact,
    record: rm.ArtifactRecord,
    cases,
    policy: TolerancePolicy,
    stages: _Stages,
    worker,
    cache: RunCache,
    allow_fixed_shapes: bool,
) -> None:
    """Validate a staged artifact; an ONNX artifact whose declared output shapes did not hold has those dims made
    dynamic in its graph, and is validated again (the report records the repair)."""
    from convert.validation import declared_repairs, fixed_dims

    with stages.run(f"validate:{key}") as stage:
        record.checks = _checks(worker, stage, artifact, record, cases, policy, cache, allow_fixed_shapes)
        repairs = declared_repairs(record.checks, cases) if artifact.format == "onnx" else {}
        if repairs:
            worker.call(Session.name_onnx_output_dims, artifact.path, {where: name for where, (name, _) in repairs.items()})
            record.repairs = [why for _, why in repairs.values()]
            record.checks = _checks(worker, stage, artifact, record, cases, policy, cache, allow_fixed_shapes)
    record.fixed_dims = list(fixed_dims(artifact, cases))
    record.passed = _artifact_passed(record)


def _checks(
    worker,
    stage: rm.Stage,
    artifact: Artifact,
    record: rm.ArtifactRecord,
    cases,
    policy: TolerancePolicy,
    cache: RunCache,
    allow_fixed_shapes: bool,
) -> list[rm.Check]:
    artifact.sha256 = sha256_files(artifact.files)  # before validation: the cache keys its results on it
    artifact.size_bytes = size_of(artifact.files)
    record.sha256, record.size_bytes = artifact.sha256, artifact.size_bytes
    return validate_artifact(worker, stage, artifact, cases, policy, cache, allow_fixed_shapes)


def _publish(
    key: str, artifact: Artifact, record: rm.ArtifactRecord, staging: Staging, out_dir: Path, artifacts: dict[str, Artifact]
) -> None:
    """Move a validated artifact to its final path; one that failed validation goes to the failed folder instead."""
    failed = out_dir / FAILED_FOLDER
    folder, other = (out_dir, failed) if record.passed else (failed, out_dir)
    staging.publish(artifact.files, folder, other)
    artifact = artifact.relocated(folder)
    artifacts[key] = artifact
    record.path, record.files = str(artifact.path), [str(f) for f in artifact.files]


class CalibrationFeeds(list):
    """Calibration feeds, with where they came from (the report says so)."""

    origin = ""


CALIBRATION_SAMPLES = 16


def _calibration_feeds(source: SourceSummary, cases, request: ConvertRequest) -> CalibrationFeeds:
    """Feeds for calibrated quantization: the user's --calibration-data, or generated from the specs at the export shape."""
    from convert.sources.request import load_calibration_data

    feeds = CalibrationFeeds()
    if request.calibration_data is not None:
        feeds.extend(load_calibration_data(Path(request.calibration_data), source.signature.inputs))
        feeds.origin = f"{request.calibration_data} ({len(feeds)} feeds)"
        return feeds
    sizes = cases[0].shape.sizes
    feeds.extend(generate_feed(source.signature.inputs, sizes, sample, request.seed + 1000) for sample in range(CALIBRATION_SAMPLES))
    feeds.origin = (
        f"generated from the input specs ({CALIBRATION_SAMPLES} feeds at the export shape, seed {request.seed + 1000}): "
        "pass --calibration-data with real inputs for a representative calibration"
    )
    return feeds


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
                f"{stage.name} {entry.name} {device}",
                entry.packages,
                artifact.sha256,
                artifact_data(artifact),
                entry.name,
                device,
                cuda_gpus() if device != "cpu" else [],
                cache.cases_digest(cases),
            )
            if lookup.hit is not None:
                checks += [rm.Check.model_validate(check) for check in lookup.hit.data["checks"]]
                reused += 1
                continue
            try:
                found = worker.call(Session.validate, artifact, entry.name, device, cases, policy, allow_fixed_shapes)
            except StageCrashed as exc:
                checks.append(rm.Check(runtime=entry.name, device=device, shape="*", status="failed", reason=_crashed(stage, exc)))
                continue
            checks += found
            cache.keep(lookup, {"checks": [check.model_dump() for check in found]})
    stage.reused = jobs > 0 and reused == jobs
    if not checks:
        checks.append(
            rm.Check(runtime="-", device="-", shape="*", status="skipped", reason=f"no runtime is registered for {artifact.format}")
        )
    return checks


def _reference(
    source: SourceSummary, worker, stage: rm.Stage, dim_sizes, request: ConvertRequest, policy: TolerancePolicy, cache: RunCache
) -> list[ValidationCase]:
    """Inputs for every shape case and the source's own outputs for them, computed once."""
    signature = source.signature
    unknown = [s for s in dim_sizes if s not in signature.symbols]
    if unknown:
        raise ConvertError(
            f"--dim or --shape-range names the symbol {unknown[0]}, which no input uses",
            f"The inputs' symbols are: {', '.join(signature.symbols) or 'none'}.",
        )
    shapes = plan_shape_cases(signature.symbols, dim_sizes, source.export_sizes or None, source.dim_ranges or None)
    sample_bytes = [feed_bytes(signature.inputs, shape.sizes) for shape in shapes]
    largest = max(range(len(shapes)), key=sample_bytes.__getitem__)
    fits = functools.partial(
        check_fits,
        request.samples * sum(sample_bytes),
        copies=2 if isinstance(worker, ChildWorker) else 1,
        largest=f"{', '.join(f'{s.name}:{s.dtype}{list(s.shape(shapes[largest].sizes))}' for s in signature.inputs)} at "
        f"{sample_bytes[largest] / GIB:.2f} GiB a sample",
        samples=request.samples,
        cases=len(shapes),
    )
    fits(None)  # before any input is generated
    cases = []
    for index, shape in enumerate(shapes):
        case = ValidationCase(shape)
        feeds = [
            source.example_feed
            if index == 0 and sample == 0 and source.example_feed is not None
            else generate_feed(signature.inputs, shape.sizes, sample, request.seed)
            for sample in range(request.samples)
        ]
        lookup = cache.find(f"reference {shape.describe()}", cache.source_packages, feeds)
        if lookup.hit is not None:
            case.references, error, case.reused = _cached_references(lookup), lookup.hit.data["error"], True
        else:
            try:
                case.references, error = worker.call(Session.reference, feeds)
            except StageCrashed as exc:
                raise ConvertError(
                    f"{_crashed(stage, exc)} (the source model ran on inputs of shape {shape.describe()})",
                    "Run the model on such inputs in a Python shell to see the crash; check the --input specs.",
                ) from None
            cache.keep(
                lookup,
                {"error": error, "outputs": [list(outputs) for outputs in case.references]},
                arrays={f"{sample}/{name}": value for sample, outputs in enumerate(case.references) for name, value in outputs.items()},
            )
        case.feeds = feeds[: len(case.references)]
        if error and index == 0:
            raise ConvertError(
                f"the source model fails on inputs generated from its specs ({', '.join(map(str, signature.inputs))}): {error}",
                "Check the --input shapes, dtypes and value domains (e.g. {0..VOCAB-1} for token ids).",
            )
        case.source_error = error
        cases.append(case)
        if index == 0:  # outputs at the other shapes estimated in proportion to their inputs
            per_input_byte = sum(v.nbytes for outputs in case.references for v in outputs.values()) / max(
                1, len(case.references) * sample_bytes[0]
            )
            fits(round(per_input_byte * request.samples * sum(sample_bytes)))
    stage.reused = all(case.reused for case in cases)
    outputs = tuple(cases[0].references[0])
    if not outputs:
        raise ConvertError("the model returns no tensors", "Return at least one tensor from the model.")
    worker.call(Session.set_outputs, outputs, setup=True)
    source.with_outputs(outputs)
    unknown_outputs = policy.unknown_outputs(outputs)
    if unknown_outputs:
        raise ConvertError(
            f"--tolerance names the output '{unknown_outputs[0]}', which the model does not have",
            f"The model's outputs are: {', '.join(outputs)}.",
        )
    return cases


def _cached_references(lookup: Lookup) -> list[dict[str, np.ndarray]]:
    arrays = lookup.hit.arrays()
    return [{name: arrays[f"{sample}/{name}"] for name in names} for sample, names in enumerate(lookup.hit.data["outputs"])]


def _check_targets(targets) -> list[str]:
    formats = REGISTRY.target_formats()
    chosen = list(dict.fromkeys(t.strip() for t in targets if t.strip()))
    if not chosen:
        raise ConvertError("no target format was given", f"Pass --to with one or more of: {', '.join(formats)}.")
    unknown = [t for t in chosen if t not in formats]
    if unknown:
        raise ConvertError(f"unknown target format '{unknown[0]}'", f"Choose from: {', '.join(formats)}.")
    return chosen


def _check_optimizations(names, targets: list[str]) -> tuple[list[str], bool]:
    """The passes to run, and whether they are --optimize auto's candidates."""
    available = [e.name for e in REGISTRY.entries("optimizer")]
    chosen = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if "auto" in chosen:
        if len(chosen) > 1:
            raise ConvertError(
                "--optimize auto is given with other passes",
                "Give auto alone (it tries every pass this machine can run), or list the passes you want.",
            )
        if "onnx" not in targets:
            raise ConvertError("--optimize auto starts from the onnx artifact, which --to does not ask for", "Add onnx to --to.")
        return [e.name for e in REGISTRY.entries("optimizer") if e.meta["takes"] in targets], True
    unknown = [n for n in chosen if n not in available]
    if unknown:
        raise ConvertError(f"unknown optimization '{unknown[0]}'", f"Choose from: auto, {', '.join(available)}.")
    for name in chosen:
        entry = REGISTRY.get("optimizer", name)
        if entry.meta["takes"] not in targets:
            raise ConvertError(
                f"--optimize {name} works on the {entry.meta['takes']} artifact, which --to does not ask for",
                f"Add {entry.meta['takes']} to --to.",
            )
        for package in entry.meta.get("requires", ()):
            require(package, entry.meta["extra"], f"--optimize {name}")
    return chosen, False


def _exporter_for(target: str, framework: str) -> str:
    """The name of the exporter from this framework to the target."""
    entries = REGISTRY.entries("exporter", format=target, source=framework)
    if not entries:
        able = sorted(
            {
                name
                for e in REGISTRY.entries("exporter", format=target)
                for name in (e.meta["source"] if isinstance(e.meta["source"], tuple) else (e.meta["source"],))
            }
        )
        raise ConvertError(f"there is no exporter from {framework} to {target}", f"{target} can be made from: {', '.join(able)}.")
    return entries[0].name


def _artifact_passed(record: rm.ArtifactRecord) -> bool:
    statuses = [c.status for c in record.checks]
    return "passed" in statuses and "failed" not in statuses


def _finish(report: rm.Report, stages: _Stages) -> None:
    report.stages = stages.records
    export_failed = any(s.status == "failed" and s.makes_artifact for s in report.stages)
    check_failed = any(not a.passed for a in report.artifacts if a.checks and not a.candidate)
    report.passed = bool(report.artifacts) and not export_failed and not check_failed and not report.interrupted
    report.exit_code = 0 if report.passed else 1 if check_failed else 2 if export_failed else 1
    if report.interrupted:
        report.exit_code = 130


def _stem(model: Any) -> str:
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if not Path(text).exists() and is_factory_reference(text):
            return text.rpartition(":")[2].split(".")[-1]
        return Path(text).name.split(".")[0] or "model"
    return "model"


def _environment() -> rm.Environment:
    from convert.doctor import package_version

    packages = {name: version for name in REGISTRY.packages() if (version := package_version(name)) != "-"}
    return rm.Environment(
        python=sys.version.split()[0],
        platform=platform.platform(),
        packages=packages,
        devices=list(present_devices()),
        device_names=list(cuda_gpus()),
    )


def _source_record(source: SourceSummary) -> rm.SourceRecord:
    info = source.info
    return rm.SourceRecord(
        framework=info.framework,
        kind=info.kind,
        path=info.path,
        sha256=info.sha256,
        description=info.description,
        inputs=[str(s) for s in source.signature.inputs],
    )
