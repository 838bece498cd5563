"""A model made of several networks (convert/composites.py), in one run: each component converted and validated by
a run of its own, with its own report; then the components' artifacts run together against the library's assembled
model; one report over them all (``components``, ``assembled``), one verdict, one exit code."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

from convert import __version__, options
from convert.composites import Component, Composite
from convert.errors import ConvertError
from convert.pipeline.context import ConversionResult, ConvertRequest, Progress, RunHooks, Stages, write_report
from convert.pipeline.plan import plan
from convert.reports import model as rm
from convert.safety import sha256_files
from convert.sources.request import SourceRequest
from convert.validators.tolerances import loosest
from convert.worker import AssembledCheck, StageCrashed
from convert.worker import start as start_worker

# The files of a Hugging Face folder a runtime's loader reads beside the ONNX files (Optimum's ORTModel classes read the
# config and generation config; a pipeline its tokenizer and preprocessor), copied into a flat composite's folder.
BESIDE_FILES = (
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "spiece.model",
    "source.spm",
    "target.spm",
    "sentencepiece.bpe.model",
    "normalizer.json",
)


def run_composite(
    request: ConvertRequest, composite: Composite, progress: Progress | None, hooks: RunHooks, run_component
) -> ConversionResult:
    """Convert the components ``request.component`` names (every one by default) with ``run_component`` (the runner's
    one-network run), then the assembled checks; the composite's report is written last, beside theirs."""
    from convert.pipeline.runner import environment

    progress = progress or Progress()
    chosen = composite.chosen(request.component)
    out = Path(request.out)
    report_path = Path(request.report_json) if request.report_json else out / "report.json"
    requests = {c.name: _component_request(request, composite, c, out) for c in chosen}
    # every component's run planned before any runs: one that would write over an input or an earlier run's files
    # refuses the whole run before anything is written
    for component in chosen:
        plan(requests[component.name], _component_hooks(hooks, composite, component))
    if composite.ready is not None and len(chosen) == len(composite.components):
        composite.ready(Path(request.model))  # what the assembled check needs, before any component runs
    if report_path.exists() and not request.force:
        raise ConvertError(
            f"{report_path} already exists (an earlier run's report)", "Pass --force to replace it, or choose another --out."
        )
    report = rm.Report(
        tool_version=__version__,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=request.command,
        environment=environment(),
        options=options.record(request),
        out=str(out.resolve()),
        composite=composite.kind,
        source=rm.SourceRecord(
            framework="torch",
            kind=composite.kind,
            path=str(request.model),
            sha256=sha256_files(sorted(p for p in Path(request.model).rglob("*") if p.is_file())),
            description=f"{Path(request.model).name}: {composite.why}; converted as {', '.join(c.name for c in chosen)}",
        ),
    )
    results: dict[str, ConversionResult] = {}
    for component in chosen:
        record = rm.ComponentRecord(name=component.name, description=component.description)
        report.components.append(record)
        try:
            result = run_component(requests[component.name], progress, _component_hooks(hooks, composite, component))
        except ConvertError as exc:
            if not results:
                raise  # nothing of this run is written yet: a refusal, as for a model of one network
            record.error, record.exit_code = exc.paragraph(), 2
            continue
        results[component.name] = result
        _fill(record, result, report_path.parent)
    if composite.flat and results:
        _copy_beside(Path(request.model), out)
    stages = Stages(progress)
    if len(results) == len(composite.components):
        report.assembled = _assembled(request, composite, results, stages, report_path.parent)
    else:
        missing = [c.name for c in composite.components if c.name not in results]
        report.assembled = [
            rm.AssembledCheck(
                name=_check_name(composite),
                artifact="*",
                status="skipped",
                reason=f"the run did not convert every component ({', '.join(missing)} missing), so they cannot run together",
            )
        ]
    report.stages = stages.records
    _finish(report)
    if hooks.judge is not None:
        report.gate = hooks.judge(report, report_path)
    write_report(report_path, report)
    if hooks.publish is not None:
        hooks.publish(report, report_path)
        write_report(report_path, report)
    return ConversionResult(report=report, artifacts={}, report_path=report_path)


def _component_request(request: ConvertRequest, composite: Composite, component: Component, out: Path) -> ConvertRequest:
    """A component's run: the composite's options, its own output folder (the composite's own where its artifacts lie
    side by side) and report."""
    if composite.flat:
        return replace(request, component=(component.name,), out=out, report_json=out / f"{component.name}.json")
    return replace(request, component=(component.name,), out=out / component.name, report_json=None)


def _component_hooks(hooks: RunHooks, composite: Composite, component: Component) -> RunHooks:
    """The caller's hooks for one component's run: its artifacts' stem; the gate's judgement of its own report (its
    renderings and MLflow run are the composite's)."""
    return replace(hooks, stem=component.stem, publish=None)


def _fill(record: rm.ComponentRecord, result: ConversionResult, folder: Path) -> None:
    report = result.report
    record.report = _relative(result.report_path, folder)
    record.passed, record.exit_code, record.error = report.passed, report.exit_code, report.error
    record.inputs, record.outputs = list(report.source.inputs), list(report.source.outputs)
    record.artifacts = [
        rm.ComponentArtifact(key=a.key, format=a.format, path=_relative(a.path, folder), precision=a.precision, passed=a.passed)
        for a in report.artifacts
        if not a.candidate or a.path
    ]
    if report.gate is not None:
        record.gate = report.gate.decision


def _relative(path: str | os.PathLike | None, folder: Path) -> str | None:
    if path is None:
        return None
    return os.path.relpath(Path(path).resolve(), folder.resolve())


def _copy_beside(folder: Path, out: Path) -> None:
    """The source folder's config, generation config and tokenizer files beside the artifacts, as Optimum's loaders
    read them from the folder they load."""
    for name in BESIDE_FILES:
        if (folder / name).is_file():
            shutil.copyfile(folder / name, out / name)


def _check_name(composite: Composite) -> str:
    return {"encoder-decoder": "generation", "dual-encoder": "similarity", "diffusion-pipeline": "pipeline"}[composite.kind]


def _assembled(
    request: ConvertRequest, composite: Composite, results: dict[str, ConversionResult], stages: Stages, folder: Path
) -> list[rm.AssembledCheck]:
    """One assembled check per artifact key every component has as an ONNX file (the exported ``onnx``, an ``fp16`` or
    ``int8`` pass's), run in a worker process."""
    by_component = {name: _onnx_artifacts(result.report) for name, result in results.items()}
    keys = [k for k in next(iter(by_component.values())) if all(k in artifacts for artifacts in by_component.values())]
    if not keys:
        return [
            rm.AssembledCheck(
                name=_check_name(composite),
                artifact="*",
                status="skipped",
                reason="the components run together as ONNX files, and the run made none of every component (--to onnx makes them)",
            )
        ]
    checks = []
    worker = start_worker(SourceRequest(model=str(request.model)), request.stage_timeout, request.isolate)
    try:
        for key in keys:
            records = {name: artifacts[key] for name, artifacts in by_component.items()}
            paths = {name: Path(r.path) for name, r in records.items()}
            relative = {name: _relative(path, folder) for name, path in paths.items()}
            # --optimize auto may choose another precision for each component: the check's budget is the loosest one's
            precision = loosest(r.precision for r in records.values())
            failed = sorted(name for name, r in records.items() if not r.passed)
            with stages.run("assembled", key) as stage:
                started = time.perf_counter()
                if failed:
                    check = rm.AssembledCheck(
                        name=_check_name(composite),
                        artifact=key,
                        status="skipped",
                        reason=f"the {key} artifact of {', '.join(failed)} failed its own validation (its report says where)",
                    )
                else:
                    check = _run_check(worker, composite, request, paths, precision, key)
                check.artifact, check.artifacts, check.precision = key, relative, precision
                check.seconds = round(time.perf_counter() - started, 3)
                stage.status = {"passed": "ok", "failed": "failed", "skipped": "skipped"}[check.status]
                stage.reason = check.reason if check.status != "passed" else ""
            checks.append(check)
    finally:
        worker.close()
    return checks


def _onnx_artifacts(report: rm.Report) -> dict[str, rm.ArtifactRecord]:
    """A component's ONNX artifacts by key, and as ``auto`` the one --optimize auto chose (the exported one for 'none')."""
    found = {a.key: a for a in report.artifacts if a.format == "onnx" and a.path and not a.candidate}
    chosen = report.auto.chosen if report.auto is not None else None
    if chosen:
        pick = found.get("onnx") if chosen == "none" else next((a for a in report.artifacts if a.optimization == chosen), None)
        if pick is not None and pick.format == "onnx" and pick.path:
            found["auto"] = pick
    return found


def _run_check(
    worker, composite: Composite, request: ConvertRequest, paths: dict[str, Path], precision: str, key: str
) -> rm.AssembledCheck:
    try:
        return worker.call(AssembledCheck(composite.assembled, Path(request.model), paths, precision, request.seed, request.trust_code))
    except StageCrashed as exc:
        return rm.AssembledCheck(name=_check_name(composite), artifact=key, status="failed", reason=f"the check's worker crashed: {exc}")
    except ConvertError as exc:
        return rm.AssembledCheck(name=_check_name(composite), artifact=key, status="failed", reason=exc.paragraph())


def _finish(report: rm.Report) -> None:
    """One verdict: passed where every component converted passed and no assembled check failed; the exit code the
    worst of theirs (2 where a component's run stopped)."""
    codes = [c.exit_code if c.exit_code is not None else 3 for c in report.components]
    assembled_failed = any(check.status == "failed" for check in report.assembled)
    report.passed = bool(report.components) and all(c.passed for c in report.components) and not assembled_failed
    worst = max((code for code in codes if code != 0), default=0, key=lambda code: {1: 1, 2: 2, 3: 3, 130: 4}.get(code, 3))
    report.exit_code = 0 if report.passed else worst or 1
