"""One run, stage by stage, over one RunContext; a report on every exit once anything was written."""

from __future__ import annotations

import contextlib
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

from convert import __version__, options
from convert.benchmark import plan_benchmark
from convert.cache import RunCache
from convert.composites import composite_of
from convert.devices import cuda_gpus, present_devices
from convert.errors import ConvertError
from convert.hardware import cpu_info
from convert.memory import available_bytes, memory_limit_bytes, peak_rss_bytes
from convert.pipeline.auto import choose
from convert.pipeline.benchmark import benchmark
from convert.pipeline.composite import run_composite
from convert.pipeline.context import (
    ConversionResult,
    ConvertRequest,
    Progress,
    RunContext,
    RunHooks,
    Stages,
    finish,
    report_stop,
    write_report,
)
from convert.pipeline.export import export_target, setup_job
from convert.pipeline.optimize import optimize
from convert.pipeline.package import package
from convert.pipeline.plan import exporter_for, plan, run_log_path
from convert.pipeline.reference import calibration_feeds, profile_ranges, reference
from convert.pipeline.validate import validate_given
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import Staging
from convert.sources.request import SourceRequest
from convert.sources.signature import fixed_shape_note
from convert.specs import InputSpec
from convert.validators.inputs import DEFAULT_INT_DOMAIN, is_padding_mask
from convert.worker import LoadSource, SourceSummary, log_bytes
from convert.worker import start as start_worker


def run(request: ConvertRequest, progress: Progress | None = None, hooks: RunHooks | None = None) -> ConversionResult:
    """Run the stages the request asks for; ``hooks`` are the caller's (the gate's) additions to the run. A model made
    of several networks (convert/composites.py) is converted component by component, each by a run of its own."""
    hooks = hooks or RunHooks()
    composite = composite_of(request.model, request.task, request.framework)
    if composite is not None:
        return run_composite(request, composite, progress, hooks, _run_one)
    if request.component:
        raise ConvertError(
            f"--component {','.join(request.component)} names networks of a model made of several (an encoder-decoder, a "
            "CLIP or SigLIP model, a diffusion pipeline folder), and this model is one network",
            "Drop --component.",
        )
    return _run_one(request, progress, hooks)


def _run_one(request: ConvertRequest, progress: Progress | None, hooks: RunHooks) -> ConversionResult:
    """One network's run, stage by stage; a component's where ``request.component`` names one."""
    the_plan = plan(request, hooks)
    stages = Stages(progress or Progress())
    report = rm.Report(
        tool_version=__version__,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=request.command,
        environment=environment(),
        options=options.record(request),
        out=str(the_plan.out_dir.resolve()),
    )
    source_request = SourceRequest(
        model=request.model,
        framework=request.framework,
        task=request.task,
        component=request.component[0] if request.component else None,
        dtype=request.dtype,
        weights=Path(request.weights) if request.weights else None,
        weights_key=request.weights_key,
        params=request.params,
        inputs=the_plan.specs,
        example_inputs=the_plan.example,
        trust_code=request.trust_code,
        dim_ranges={symbol: (low, high) for symbol, (low, _, high) in the_plan.shape_ranges.items()},
    )
    cache = RunCache.open(Path(request.cache_dir) if request.cache_dir else None, request.cache)
    report.cache = cache.record
    worker = start_worker(source_request, request.stage_timeout, request.isolate)
    report.isolation = worker.isolation
    stages.processes = worker.processes
    peak_rss_bytes(worker.processes())  # each stage's peak is its own: the planning's is left out
    ctx = RunContext(
        request, report, stages, worker, cache, the_plan.policy, the_plan.out_dir, the_plan.stem, the_plan.report_path, hooks=hooks
    )
    earlier_report_moved = False
    log_path = None
    earlier_report = _identity(ctx.report_path)  # to tell it from a report another run writes while this one works
    try:
        with stages.run("load") as stage:
            ctx.source = setup_job(worker, stage, LoadSource(source_request))
        report.source = _source_record(ctx.source, the_plan.specs)
        report.notes.extend(ctx.source.info.notes)
        inputs = ctx.source.signature.inputs
        if note := fixed_shape_note(inputs, bool(the_plan.specs), the_plan.example is not None, ctx.source.info.kind):
            report.notes.append(note)
        cache.attach(ctx.source, request)
        exporters = {t: exporter_for(t, ctx.source.info.framework) for t in the_plan.targets}

        with stages.run("reference") as stage:
            ctx.cases = reference(ctx, stage, the_plan.dim_sizes)
        report.source.outputs = list(ctx.source.signature.outputs)
        report.source.inputs = [str(s) for s in ctx.source.signature.inputs]
        report.source.input_domains = input_domains(ctx.source.signature.inputs, the_plan.specs)
        # checked before anything is written: bad calibration data must not leave exported artifacts behind
        if any(REGISTRY.get("optimizer", o).calibrated for o in the_plan.optimizations) or (
            the_plan.optimizations and request.calibration_data is not None  # the weight-only passes' data-aware methods
        ):
            ctx.calibration = calibration_feeds(ctx)
        ctx.profile_ranges = profile_ranges(ctx, the_plan.shape_ranges)
        ctx.staging = Staging(ctx.out_dir, [*the_plan.finals.values(), ctx.report_path], request.force)
        if request.force and ctx.report_path.is_file():
            # the earlier run's report goes before anything of this run is published: a crash from here on leaves no
            # report that names artifacts this run may already have replaced
            os.replace(ctx.report_path, ctx.staging.path / "earlier-report.json")
            earlier_report_moved = True
        ctx.export_feed = ctx.cases[0].feeds[0]
        for target in the_plan.targets:
            export_target(ctx, target, exporters[target])
        for name in the_plan.optimizations:
            optimize(ctx, name, candidate=the_plan.auto)
        for name, (path, fmt) in the_plan.given.items():
            validate_given(ctx, name, path, fmt)
        if request.benchmark or the_plan.auto:
            benchmark_plan = plan_benchmark(
                ctx.source.signature, ctx.cases[0].shape.sizes, ctx.export_feed, the_plan.settings, request.seed
            )
            benchmark(ctx, benchmark_plan, the_plan.settings)
        if the_plan.auto:
            choose(ctx)
        for name in the_plan.packages:
            package(ctx, name)
        finish(report, stages, request.unbuilt)
        if hooks.judge is not None:
            report.gate = hooks.judge(report, ctx.report_path)
        write_report(ctx.report_path, report)  # still under the output folder's lock
        if hooks.publish is not None:
            hooks.publish(report, ctx.report_path)
            write_report(ctx.report_path, report)
    except KeyboardInterrupt:
        report.interrupted = True
        report.error = "the run was interrupted"
        finish(report, stages, request.unbuilt)
        if ctx.staging is not None:
            write_report(ctx.report_path, report)
        raise
    except Exception as exc:
        # once an artifact is published the report says how far the run got and why it stopped; before that the run
        # leaves nothing behind (a full disk, bad input found late), as a refused one does
        if ctx.artifacts:
            report_stop(report, stages, ctx.report_path, exc, request.unbuilt)
        elif request.force and (earlier_report_moved or ctx.report_path.is_file()):
            _replace_earlier_report(ctx, exc, None if earlier_report_moved else earlier_report)
        raise
    finally:
        worker.close()
        if ctx.staging is not None:
            log_path = _keep_log(ctx)
            ctx.staging.cleanup()
    return ConversionResult(report=report, artifacts=ctx.artifacts, report_path=ctx.report_path, log_path=log_path)


def _keep_log(ctx: RunContext) -> Path | None:
    """Publish the run's log (what the frameworks printed, warned and logged, kept off the terminal) in the output
    folder; its path, or None where they said nothing. An empty log replaces an earlier run's, which would mislead."""
    text = log_bytes(ctx.worker.log) if ctx.worker.log is not None else b""
    final = run_log_path(ctx.out_dir, ctx.report_path)
    if not text and not final.exists():
        return None
    with contextlib.suppress(OSError):  # the log is a convenience: a full disk here must not turn the run's outcome
        staged = ctx.staging.path / final.name
        staged.write_bytes(text)
        ctx.staging.publish([staged])
        return final if text else None
    return None


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except OSError:
        return None
    return found.st_ino, found.st_mtime_ns


def _replace_earlier_report(ctx: RunContext, exc: Exception, earlier: tuple[int, int] | None) -> None:
    """--force asked to replace the earlier run's outcome in the folder: its report, left as it was, would claim a pass
    this run did not make. This run's report takes its place (the earlier artifacts stay, and it names none of them).
    ``earlier`` identifies the report seen when this run started, where it is still in place: a report another run has
    written since, or a folder another run holds, is that run's to keep."""
    staging = ctx.staging
    try:
        if staging is None:
            staging = Staging(ctx.out_dir)
        if earlier is not None and _identity(ctx.report_path) != earlier:
            return
        report_stop(ctx.report, ctx.stages, ctx.report_path, exc, ctx.request.unbuilt)
    except ConvertError:
        return
    finally:
        if staging is not None and staging is not ctx.staging:
            staging.cleanup()


def environment() -> rm.Environment:
    from convert.compat import outside_tested, package_version

    names = (*REGISTRY.packages(), *REGISTRY.loading_packages())
    packages = {name: version for name in names if (version := package_version(name)) != "-"}
    return rm.Environment(
        python=sys.version.split()[0],
        platform=platform.platform(),
        packages=packages,
        outside_tested=outside_tested(packages),
        cpu=cpu_info(),
        devices=list(present_devices()),
        device_names=list(cuda_gpus()),
        memory_available_mb=round(available_bytes() / 2**20, 1),
        memory_limit_mb=round(limit / 2**20, 1) if (limit := memory_limit_bytes()) is not None else None,
    )


def _source_record(source: SourceSummary, given: tuple[InputSpec, ...]) -> rm.SourceRecord:
    info = source.info
    return rm.SourceRecord(
        framework=info.framework,
        kind=info.kind,
        path=info.path,
        sha256=info.sha256,
        description=info.description,
        inputs=[str(s) for s in source.signature.inputs],
        input_domains=input_domains(source.signature.inputs, given),
    )


def input_domains(specs: tuple[InputSpec, ...], given: tuple[InputSpec, ...]) -> list[rm.InputDomain]:
    """What each input's generated values are drawn from (as convert.validators.inputs.generate_feed draws them), and
    why: the domain --input gave, the one the model declares, the source's, or the default where there is none."""
    given_domains = {s.name: (s.low, s.high) for s in given if s.low is not None}
    domains = []
    for spec in specs:
        if is_padding_mask(spec):
            drawn = "padding masks (each row ones, then zeros)"
        elif spec.dtype == "bool":
            drawn = f"booleans {_number(spec.low)}..{_number(spec.high)}" if spec.low is not None else "booleans"
        elif spec.is_integer:
            low, high = (spec.low, spec.high) if spec.low is not None else DEFAULT_INT_DOMAIN
            drawn = f"integers {_number(low)}..{_number(high)}"
        else:
            drawn = f"uniform in [{_number(spec.low)}, {_number(spec.high)})" if spec.low is not None else "standard normal"
        if spec.structure == "boxes":
            drawn += ", as boxes (x0 <= x1, y0 <= y1)"
        if spec.low is not None and given_domains.get(spec.name) == (spec.low, spec.high):
            source = "given"
        elif spec.domain_source:
            source = spec.domain_source
        else:
            source = "the source's input specs" if spec.low is not None else "default"
        domains.append(rm.InputDomain(name=spec.name, drawn=drawn, low=spec.low, high=spec.high, source=source))
    return domains


def _number(value: float | None) -> str:
    return f"{value:.6g}"
