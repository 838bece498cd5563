"""``convert batch``: many models, each converted and gated in its own process (or Ray task), and one summary.

A manifest is YAML made of the promotion policy's pieces::

    version: 1
    out: zoo-out                # OUT/NAME/ holds each model's artifacts, report.json, policy.yaml and convert.log
    defaults:                   # merged under every model (mappings key by key; a model's own value wins)
      require: {targets: [onnx]}
    models:
      - name: cnn
        model: {path: models/cnn.pt2}
      - name: tokens
        model: {path: models/tokens.pt, trust_code: true, inputs: ["input_ids:int64[B,S]{0..999}"]}
        require: {targets: [onnx], optimizations: [int8]}
        resources: {cpus: 2}    # what this model's Ray task asks the cluster for

Each model runs as ``convert gate OUT/NAME/policy.yaml`` in a process of its own: a model that crashes, hangs past its
stage timeout or is rejected does not stop the others. The manifest is checked whole before anything runs.
"""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from convert import __version__
from convert.errors import ConvertError
from convert.policy import Policy, _resolved, _Strict, _validated, read_yaml, validated
from convert.protected_inputs import Read, Write, reads_of, refuse_writes_to_inputs
from convert.readers import shown
from convert.safety import atomic_write_text

SUMMARY_SCHEMA_VERSION = "1.0"
MANIFEST_HINT = "Fix those keys; docs/reference/policy.md lists every key."
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class Resources(_Strict):
    cpus: float = Field(1, gt=0, le=1024, description="CPU cores the model's Ray task reserves")
    gpus: float = Field(0, ge=0, le=64, description="GPUs the model's Ray task reserves")
    memory_gb: float | None = Field(None, gt=0, le=65536, description="memory the model's Ray task reserves, in GiB")


class Manifest(_Strict):
    version: Literal[1] = 1
    out: str = Field("batch-out", description="the batch's folder: OUT/NAME/ per model and OUT/summary.json")
    defaults: dict[str, Any] = Field({}, description="policy keys merged under every model")
    models: list[dict[str, Any]] = Field(min_length=1, description="one entry per model: name, the policy's keys, resources")


@dataclass
class BatchJob:
    name: str
    policy: Policy
    resources: Resources
    folder: Path  # OUT/NAME

    @property
    def policy_file(self) -> Path:
        return self.folder / "policy.yaml"

    @property
    def log(self) -> Path:
        return self.folder / "convert.log"


class ModelOutcome(BaseModel):
    name: str
    status: Literal["promoted", "rejected", "error", "crashed", "interrupted", "not_run"]
    exit_code: int | None = None
    seconds: float = 0.0
    where: str = Field("", description="the machine it ran on (a Ray node's address), or 'local'")
    report: str | None = Field(None, description="its report.json, with the gate's verdict")
    policy: str = ""
    log: str = Field("", description="everything its convert process printed")
    reasons: list[str] = Field([], description="why it was rejected, or the error that stopped it")
    reused: int = Field(0, description="stage jobs served from the cache")

    @property
    def passed(self) -> bool:
        return self.status == "promoted"


class BatchSummary(BaseModel):
    schema_version: str = SUMMARY_SCHEMA_VERSION
    tool_version: str = __version__
    created_at: str
    command: str = ""
    manifest: str
    engine: str = Field(description="'local (N workers)' or 'ray (ADDRESS)'")
    passed: bool = False
    exit_code: int = Field(description="0 every model promoted; 1 one was rejected, failed or crashed; 130 interrupted")
    seconds: float = 0.0
    models: list[ModelOutcome] = []

    def to_json(self) -> str:
        return self.model_dump_json(indent=2)


def load_manifest(path: Path, out: Path | None = None) -> tuple[list[BatchJob], Path]:
    """Every model's job and the batch's folder; a ConvertError naming every problem (and its line) when the manifest,
    or any model in it, is not valid: nothing runs then."""
    name = str(path)
    data, lines = read_yaml(path, "manifest", "batch manifest YAML file (see docs/how-to/batch.md)")
    if not isinstance(data, dict):
        raise ConvertError(
            f"{name}: a manifest is a mapping with a 'models' list; this one is {'empty' if data is None else f'a {type(data).__name__}'}",
            "Start from the example manifest examples/batch/zoo.yaml (docs/how-to/batch.md).",
        )
    manifest = validated(data, lines, name, Manifest, "manifest", MANIFEST_HINT)
    folder = path.resolve().parent
    batch_out = (Path(out) if out is not None else folder / manifest.out).resolve()  # --out is relative to this folder
    jobs, seen = [], {}
    defaults_lines = {key[1:]: line for key, line in lines.items() if key[:1] == ("defaults",)}
    for index, entry in enumerate(manifest.models):
        where = f"{name} models[{index}]"
        entry_lines = {**defaults_lines, **{key[2:]: line for key, line in lines.items() if key[:2] == ("models", index)}}
        at = f"line {entry_lines[()]}: " if () in entry_lines else ""
        model_name = entry.get("name")
        if not isinstance(model_name, str) or not NAME.match(model_name):
            raise ConvertError(
                f"{where}: {at}each model needs a name of letters, digits, '.', '_' or '-' (got {shown(model_name)})",
                "It names the model's folder under the batch's out folder.",
            )
        if model_name in seen:
            raise ConvertError(
                f"{where}: {at}the name '{model_name}' is also the name of models[{seen[model_name]}]",
                "Give every model its own name: it names the model's folder.",
            )
        seen[model_name] = index
        for key in ("out", "version"):
            if key in entry or key in manifest.defaults:
                raise ConvertError(
                    f"{where} ({model_name}): '{key}' is set for the whole batch, not per model",
                    "Move it to the top of the manifest: each model's output folder is OUT/NAME.",
                )
        resources = validated(entry.get("resources", {}), {}, f"{where} ({model_name}) resources", Resources, "manifest", MANIFEST_HINT)
        policy_data = _merged(manifest.defaults, {k: v for k, v in entry.items() if k not in ("name", "resources")})
        policy = _validated(policy_data, entry_lines, f"{where} ({model_name})", "manifest entry", MANIFEST_HINT)
        job_folder = batch_out / model_name
        policy = _resolved(policy, folder).model_copy(update={"out": str(job_folder)})
        jobs.append(BatchJob(model_name, policy, resources, job_folder))
    return jobs, batch_out


def _merged(defaults: dict, entry: dict) -> dict:
    """``entry`` over ``defaults``, mappings merged key by key (lists are replaced, not concatenated)."""
    merged = dict(defaults)
    for key, value in entry.items():
        merged[key] = _merged(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def command_of(job: BatchJob, force: bool, cache: bool, cache_dir: Path | None) -> list[str]:
    """The command line one model runs: the gate on the model's own policy file."""
    command = [sys.executable, "-m", "convert", "gate", str(job.policy_file), "--quiet"]
    if force:
        command.append("--force")
    if not cache:
        command.append("--no-cache")
    if cache_dir is not None:
        command += ["--cache-dir", str(Path(cache_dir).resolve())]
    return command


def _writes(jobs: list[BatchJob], batch_out: Path) -> list[Write]:
    """The batch's folder and summary, and each model's folder (its artifacts, report, policy and log)."""
    return [
        Write("the batch folder", batch_out, replaces=False),
        Write("the batch summary", batch_out / "summary.json"),
        *(Write(f"the folder of the model '{job.name}'", job.folder) for job in jobs),
    ]


def _reads(job: BatchJob) -> list[Read]:
    """What one model's gate reads, named after the model."""
    model, validation = job.policy.model, job.policy.validation
    baseline = job.policy.baseline.report if job.policy.baseline else None
    return [
        Read(f"{read.what} of '{job.name}'", read.path)
        for read in reads_of(
            model.path,
            weights=model.weights,
            params=model.params,
            example_inputs=model.example_inputs,
            calibration_data=validation.calibration_data,
            data=validation.data,
            baseline_report=baseline,
        )
    ]


def prepare(jobs: list[BatchJob], batch_out: Path, force: bool) -> None:
    """Write every model's policy file; refuse a batch folder with an earlier summary unless ``force``."""
    existing = [str(p) for p in [batch_out / "summary.json", *(job.folder / "report.json" for job in jobs)] if p.exists()]
    if existing and not force:
        raise ConvertError(
            f"the output already exists: {', '.join(existing)}", "Pass --force to replace it, or choose another folder with --out."
        )
    try:
        for job in jobs:
            job.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_text(job.policy_file, policy_yaml(job.policy.model_dump(mode="json")))
    except OSError as exc:
        raise ConvertError(
            f"cannot write to the batch folder {batch_out}: {exc.strerror or exc}", "Choose a writable folder with --out."
        ) from exc


class _PlainDumper(yaml.SafeDumper):
    """Writes a value shared by two places in full at each: the policy reader refuses anchors and aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def policy_yaml(data: dict) -> str:
    """A model's policy as the YAML file its ``convert gate`` reads: no anchors or aliases, keys in schema order."""
    return yaml.dump(data, Dumper=_PlainDumper, sort_keys=False)


# The convert processes running on this machine, so that an interruption reaches each of them.
def outcome_of(job: BatchJob, code: int | None, seconds: float, where: str, failure: str = "") -> ModelOutcome:
    """What one model's run came to, from its exit code, its report and its log (``failure``: why it never finished)."""
    from convert.reports.model import Report

    outcome = ModelOutcome(
        name=job.name, status="not_run", exit_code=code, seconds=seconds, where=where, policy=str(job.policy_file), log=str(job.log)
    )
    report_path = job.folder / "report.json"
    report = None
    if report_path.is_file() and code is not None:
        with contextlib.suppress(ConvertError, ValueError, OSError):
            report = Report.from_json(report_path.read_text(encoding="utf-8"))
    if report is not None and report.created_at and (report.gate is not None or report.interrupted):
        outcome.report, outcome.reused = str(report_path), len(report.cache.reused)
    if failure:
        outcome.status, outcome.reasons = "crashed", [failure]
    elif code is None:
        outcome.reasons = ["not started: the batch was interrupted"]
    elif code == 0:
        outcome.status = "promoted"
    elif code == 130:
        outcome.status, outcome.reasons = "interrupted", ["interrupted"]
    elif code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        outcome.status, outcome.reasons = "crashed", [f"its convert process was killed by {name}; its log: {job.log}"]
    elif code == 1 and report is not None and report.gate is not None:
        outcome.status, outcome.reasons = "rejected", [reason.message for reason in report.gate.reasons]
    else:
        outcome.status, outcome.reasons = "error", [_error_paragraph(job.log) or f"exit code {code}; its log: {job.log}"]
    return outcome


def _error_paragraph(log: Path) -> str:
    """The 'error:' paragraph (or the internal error's last line) that a convert process printed."""
    with contextlib.suppress(OSError):
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
        errors = [line.removeprefix("error:").strip() for line in lines if line.startswith("error:")]
        if errors:
            return errors[0]
        return next((line for line in reversed(lines) if line.strip()), "")
    return ""


def summarize(outcomes: list[ModelOutcome], manifest: Path, engine: str, command: str, seconds: float, interrupted: bool) -> BatchSummary:
    passed = bool(outcomes) and all(o.passed for o in outcomes) and not interrupted
    return BatchSummary(
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        command=command,
        manifest=str(manifest),
        engine=engine,
        passed=passed,
        exit_code=130 if interrupted else 0 if passed else 1,
        seconds=round(seconds, 3),
        models=outcomes,
    )


def run_batch(
    manifest: Path,
    *,
    out: Path | None = None,
    workers: int = 1,
    engine: str = "local",
    address: str | None = None,
    force: bool = False,
    cache: bool = True,
    cache_dir: Path | None = None,
    command: str = "",
    finished: Callable[[ModelOutcome], None] = lambda outcome: None,
) -> tuple[BatchSummary, Path]:
    """Run every model of the manifest; the summary (also written to OUT/summary.json) and its path."""
    if address is not None and engine != "ray":
        raise ConvertError("--address goes with --engine ray", "Add --engine ray, or leave --address out.")
    if workers < 1:
        raise ConvertError(f"--workers must be at least 1, not {workers}", "Use about one worker per 4 cores and 8 GB of memory.")
    jobs, batch_out = load_manifest(manifest, out)
    if engine == "ray":
        from convert.engines.ray import RayEngine

        runner = RayEngine(address)
    else:
        from convert.engines.local import LocalEngine

        runner = LocalEngine(workers)
    refuse_writes_to_inputs(_writes(jobs, batch_out), [*reads_of(manifest=manifest), *(read for job in jobs for read in _reads(job))])
    prepare(jobs, batch_out, force)
    commands = {job.name: command_of(job, force, cache, cache_dir) for job in jobs}
    outcomes: dict[str, ModelOutcome] = {}
    started = time.perf_counter()
    interrupted = False

    def done(job: BatchJob, code: int | None, seconds: float, where: str, failure: str = "") -> None:
        outcomes[job.name] = outcome_of(job, code, seconds, where, failure)
        finished(outcomes[job.name])

    try:
        runner.run(jobs, commands, done)
    except KeyboardInterrupt:
        interrupted = True
    ordered = [outcomes.get(job.name) or outcome_of(job, None, 0.0, "") for job in jobs]
    summary = summarize(ordered, manifest, runner.description, command, time.perf_counter() - started, interrupted)
    path = batch_out / "summary.json"
    atomic_write_text(path, summary.to_json())
    if interrupted:
        raise KeyboardInterrupt
    return summary, path


def print_batch_progress(outcome: ModelOutcome, console: Console) -> None:
    """One line as each model of a batch finishes (the CLI prints them on stderr)."""
    mark = "[green]✓[/]" if outcome.passed else "[red]✗[/]"
    reason = f" [dim]{escape(outcome.reasons[0])}[/]" if outcome.reasons else ""
    console.print(f"{mark} {escape(outcome.name)} {outcome.status} ({outcome.seconds:.1f} s){reason}", soft_wrap=True)


def print_batch(summary: BatchSummary, console: Console, summary_path: str, table: bool = True) -> None:
    """A batch's table, one row per model (left out with ``table=False``), then its verdict line."""
    if table:
        rows = Table(title=f"Batch: {len(summary.models)} models on {summary.engine}")
        for column in ("model", "status", "seconds", "reused", "reason", "report"):
            rows.add_column(column, overflow="fold")
        for outcome in summary.models:
            color = "green" if outcome.passed else "red"
            rows.add_row(
                escape(outcome.name),
                f"[{color}]{outcome.status}[/]",
                f"{outcome.seconds:.1f}",
                str(outcome.reused),
                escape(outcome.reasons[0] if outcome.reasons else ""),
                escape(outcome.report or outcome.log),
            )
        console.print(rows)
    promoted = sum(o.passed for o in summary.models)
    console.print(
        f"{'PASSED' if summary.passed else 'FAILED'}: {promoted} of {len(summary.models)} models promoted "
        f"(exit code {summary.exit_code}); summary: {escape(summary_path)}"
    )
