"""The benchmark stage: the source's own run, then every artifact that passed, on every device where it passed."""

from __future__ import annotations

from collections.abc import Callable

from convert.benchmark import BenchmarkPlan, BenchmarkSettings
from convert.pipeline.context import RunContext, crashed
from convert.reports import model as rm
from convert.worker import Session, StageCrashed


def benchmark(ctx: RunContext, plan: BenchmarkPlan, settings: BenchmarkSettings) -> None:
    report = ctx.report
    with ctx.stages.run("benchmark:source") as stage:
        report.source_benchmark = [_job(ctx, stage, f"{report.source.framework} (source)", "cpu", Session.benchmark_source, plan, settings)]
    by_key = {**ctx.artifacts, **ctx.candidates}
    for record in report.artifacts:
        artifact = by_key.get(record.key)
        if artifact is None or not record.passed:
            continue
        with ctx.stages.run(f"benchmark:{record.key}") as stage:
            for runtime, device in dict.fromkeys((c.runtime, c.device) for c in record.checks if c.status == "passed"):
                record.benchmarks.append(
                    _job(ctx, stage, runtime, device, Session.benchmark_artifact, runtime, artifact, device, plan, settings)
                )


def _job(ctx: RunContext, stage: rm.Stage, runtime: str, device: str, method: Callable, *args) -> rm.Benchmark:
    try:
        return ctx.worker.call(method, *args)
    except StageCrashed as exc:
        return rm.Benchmark(runtime=runtime, device=device, status="failed", reason=crashed(stage, exc))
