"""The console summary, then the verdict. By default compact: one line per artifact (its verdict, worst error, p50), a
device or a reason skipped everywhere said once, --optimize auto's choice in one line. With ``verbose`` (``-v``), the
detail: on a terminal tables, one row per artifact × runtime × device (shapes folded in); anywhere else (CI logs, pipes,
tee) plain lines, one per check, stage, benchmark and candidate. Off a terminal no line is ever wrapped or cut, so that
grep finds each whole."""

from __future__ import annotations

import re
from collections import Counter
from itertools import groupby

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from convert.registry import REGISTRY
from convert.reports import facts
from convert.reports.model import (
    ArtifactRecord,
    AutoCandidate,
    Benchmark,
    Check,
    PrecisionAttestation,
    Report,
    SourceRecord,
    Verdict,
    decode_figure,
)
from convert.text import first_line

STYLE = {"passed": "green", "failed": "bold red", "skipped": "yellow"}
BENCHMARK_TITLE = "Benchmark (after warm-up; same inputs and threads for every runtime)"
# wide enough for any line or table a command prints: rich would otherwise wrap at 80 columns (or $COLUMNS) off a terminal
UNWRAPPED_WIDTH = 100_000


def stdout_console() -> Console:
    """The console a command prints its results to: wrapped to a terminal's width, never wrapped anywhere else."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = UNWRAPPED_WIDTH
    return console


def print_summary(
    report: Report,
    console: Console,
    report_path: str | None = None,
    verdict: bool = True,
    verbose: bool = False,
    log_path: str | None = None,
) -> None:
    """The run's results: compact, or every check, stage, benchmark and candidate with ``verbose``; ``log_path`` is
    where the run kept what the frameworks printed, warned and logged."""
    if report.composite:
        _print_composite(report, console)
    elif not verbose:
        _print_compact(report, console)
    elif console.is_terminal:
        _print_validation_table(report, console)
        _print_benchmarks(report, console)
        _print_auto(report, console)
    else:
        _print_validation_lines(report, console)
        _print_stage_lines(report, console)
        _print_benchmark_lines(report, console)
        _print_auto_lines(report, console)
    for artifact in report.artifacts:
        if artifact.path:
            kept = (
                ""
                if artifact.passed
                else " [red]failed validation: left as it was[/]"
                if artifact.given
                else " [red]failed validation: kept for inspection, not at a final path[/]"
            )
            bounds = "".join(
                f", {symbol} {low}..{'' if high is None else high} only" for symbol, (low, high) in artifact.dim_bounds.items()
            )
            _say(
                console,
                f"  {artifact.format}: {escape(artifact.path)} ({artifact.size_bytes / 1e6:.2f} MB, {artifact.strategy}{bounds}){kept}",
            )
        for detail in artifact.details:  # what explains a failure in red, the rest as its sentence
            for line in detail.diagnosis():
                _say(console, f"  [red]{escape(artifact.key)}[/]: {escape(line)}", soft_wrap=True)
            if not detail.diagnosis() and detail.notable():
                _say(console, f"  {escape(artifact.key)}: {escape(detail.describe())}", soft_wrap=True)
    for package in report.packages:
        if package.path:
            state = "" if package.passed else " [red]failed: kept for inspection, not at a final path[/]"
            _say(console, f"  package {package.packager}: {escape(package.path)} ({escape(package.describe())}){state}", soft_wrap=True)
        elif (stage := report.stage("package", package.packager)) is not None and stage.status == "skipped":
            _say(console, f"  package {package.packager}: [yellow]skipped[/]" + escape(_reason(stage.reason)), soft_wrap=True)
    _print_task_lines(report, console)
    cache = report.cache
    if cache.reused or cache.rebuilt:
        # compact: each reason once, after the stage jobs it rebuilt
        rebuilt = (
            [(r.stage, r.reason) for r in cache.rebuilt]
            if verbose
            else [(", ".join(stages), reason) for reason, stages in _grouped((r.reason, r.stage) for r in cache.rebuilt)]
        )
        _say(
            console,
            f"  cache: {len(cache.reused)} stage jobs reused from {escape(cache.folder or '-')}"
            + "".join(f"; rebuilt {escape(stages)}: {escape(reason)}" for stages, reason in rebuilt),
        )
    for note in report.notes:
        _say(console, f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    if report.environment.outside_tested:
        untested = ", ".join(f"{name} {found}" for name, found in report.environment.outside_tested.items())
        _say(console, f"[yellow]note:[/] installed outside the tested versions: {escape(untested)}", soft_wrap=True)
    if log_path:
        _say(console, f"  log: {escape(log_path)} (what the frameworks printed, warned and logged)", soft_wrap=True)
    if verdict:
        outcome = facts.run_outcome(report)
        _say(
            console,
            f"Verdict: {_word(outcome)}"
            + (f" — {escape(outcome.not_built_names)}" if outcome.unbuilt else "")  # each reason is in the lines above
            + f" (exit code {report.exit_code})"
            + (f"; report: {escape(report_path)}" if report_path else ""),
            soft_wrap=True,
        )


def print_verdict(verdict: Verdict, console: Console, tables: bool = True) -> None:
    """The gate's budgets and baseline deltas (with ``tables``), then the decision and every reason."""
    if tables and verdict.budgets:
        _print_budgets(verdict, console)
    if tables and verdict.baseline is not None:
        _print_baseline(verdict, console)
    for note in verdict.notes:
        _say(console, f"[yellow]note:[/] {escape(note)}", soft_wrap=True)
    _say(
        console,
        f"Gate: {_word(facts.gate_outcome(verdict))} (exit code {verdict.exit_code})"
        + (f"; report: {escape(verdict.report)}" if verdict.report else ""),
    )
    for reason in verdict.reasons:
        _say(
            console,
            f"  [red]✗[/] {escape(f'[{reason.code}]')} "
            + (f"{escape(reason.artifact)}: " if reason.artifact else "")
            + escape(_one_line(reason.message)),
            soft_wrap=True,
        )


def _print_budgets(verdict: Verdict, console: Console) -> None:
    if not console.is_terminal:
        console.out("Budgets", highlight=False)
        for b in verdict.budgets:
            console.out(
                f"budget {b.artifact} {b.runtime or '-'} {b.device or '-'} {b.output or '-'} {b.status} "
                f"{b.metric}={_num(b.value)} (limit {b.metric}{b.limit})" + _reason(b.reason),
                highlight=False,
            )
        return
    table = Table(title="Budgets")
    for column in ("artifact", "metric", "output", "runtime", "device", "limit", "value", "status"):
        table.add_column(column, overflow="fold")
    for b in verdict.budgets:
        table.add_row(
            escape(b.artifact),
            b.metric,
            escape(b.output) or "-",
            b.runtime or "-",
            b.device or "-",
            b.limit,
            _num(b.value),
            f"[{STYLE[b.status]}]{b.status}[/]",
        )
    console.print(table)


def _print_baseline(verdict: Verdict, console: Console) -> None:
    baseline = verdict.baseline
    title = f"Against the baseline {baseline.path}" + ("" if baseline.same_environment else " (measured in another environment)")
    if not console.is_terminal:
        console.out(title, highlight=False)
        for d in baseline.deltas:
            delta = "-" if d.delta_pct is None else f"{d.delta_pct:+.1f}%"
            console.out(
                f"baseline {d.artifact} {d.runtime or '-'} {d.device or '-'} {d.output or '-'} {d.status} "
                f"{d.metric} {_num(d.baseline)} -> {_num(d.current)} ({delta}, allowed {d.allowed or '-'})" + _reason(d.reason),
                highlight=False,
            )
        return
    table = Table(title=escape(title))
    for column in ("artifact", "metric", "output", "runtime", "device", "baseline", "now", "delta", "allowed", "status"):
        table.add_column(column, overflow="fold")
    styles = {"ok": "green", "improved": "green", "regressed": "bold red", "not_compared": "yellow"}
    for d in baseline.deltas:
        table.add_row(
            escape(d.artifact),
            d.metric,
            escape(d.output) or "-",
            d.runtime or "-",
            d.device or "-",
            _num(d.baseline),
            _num(d.current),
            "-" if d.delta_pct is None else f"{d.delta_pct:+.1f}%",
            d.allowed,
            f"[{styles[d.status]}]{d.status}[/]",
        )
    console.print(table)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _word(outcome: facts.Outcome) -> str:
    """The verdict's word in bold, green when good and red when not."""
    return f"[bold {'green' if outcome.good else 'red'}]{outcome.word}[/]"


def _print_task_lines(report: Report, console: Console) -> None:
    """The datasets used, then ``task ARTIFACT RUNTIME DEVICE STATUS METRIC …`` per check on labelled data."""
    for data in report.data:
        source = ", ".join(f"{name} {value:.4f}" for name, value in data.source_task.items())
        _say(
            console,
            f"  {data.role} data: {escape(data.path)} ({data.kind}, {len(data.used)} of {data.size} samples, sha256 "
            f"{data.sha256[:12]})" + (f"; the source's task metrics on output {escape(data.task_output)}: {source}" if source else ""),
            soft_wrap=True,
        )
    for artifact in report.artifacts:
        for check in artifact.task_checks():
            failed = any(m.status == "failed" for m in check.task.metrics)
            status = "failed" if failed else "passed" if check.task.metrics else "skipped"
            _say(
                console,
                f"  task {escape(artifact.key)} {check.runtime} {check.device} [{STYLE[status]}]{status}[/] {escape(check.task.describe())}",
                soft_wrap=True,
            )


def _print_validation_table(report: Report, console: Console) -> None:
    table = Table(title="Validation against the source model")
    for column in ("artifact", "runtime", "device", "shapes", "status", "max abs err", "min cosine", "detail"):
        table.add_column(column, overflow="fold")
    for artifact in report.artifacts:
        name = f"{artifact.format} ({artifact.optimization})" if artifact.optimization else artifact.format
        if not artifact.checks:
            unchecked = facts.unchecked(report, artifact)
            style = STYLE["skipped" if unchecked.status == "skipped" else "failed"]
            table.add_row(name, "-", "-", "-", f"[{style}]{unchecked.status}[/]", "-", "-", cell(unchecked.reason, 100))
        for (runtime, device), group in groupby(artifact.checks, key=lambda c: (c.runtime, c.device)):
            checks = list(group)
            statuses = [c.status for c in checks]
            status = "failed" if "failed" in statuses else "passed" if "passed" in statuses else "skipped"
            error, cosine = facts.check_errors(checks)
            detail = next((c.reason for c in checks if c.status == "failed"), "") or next((c.reason for c in checks if c.reason), "")
            shapes = " ".join(c.shape for c in checks if c.shape != "*") or "-"
            table.add_row(
                name,
                runtime,
                device,
                shapes,
                f"[{STYLE[status]}]{status}[/]",
                "-" if error is None else f"{error:.1e}",
                "-" if cosine is None else f"{cosine:.6f}",
                cell(detail, 100),
            )
    console.print(table)


def _print_validation_lines(report: Report, console: Console) -> None:
    """``check ARTIFACT RUNTIME DEVICE SHAPE STATUS max_abs_err=… min_cosine=… reason: …`` per check; an artifact
    without checks has one line with ``-`` for its runtime, device and shape."""
    console.out("Validation against the source model", highlight=False)
    for artifact in report.artifacts:
        key = artifact.key
        if not artifact.checks:
            unchecked = facts.unchecked(report, artifact)
            # an exporter's message goes on with graph dumps: its first line here, all of it in the report
            reason = unchecked.reason if unchecked.status == "skipped" else first_line(unchecked.reason, None)
            console.out(f"check {key} - - - {unchecked.status.replace(' ', '_')}" + _reason(reason), highlight=False)
        for check in artifact.checks:
            error, cosine = facts.check_errors([check])
            generated = check.generation
            console.out(
                f"check {key} {check.runtime} {check.device} {check.shape} {check.status} "
                f"max_abs_err={'-' if error is None else f'{error:.1e}'} min_cosine={'-' if cosine is None else f'{cosine:.6f}'}"
                + (f" token_agreement={generated.token_agreement:.1%}" if generated is not None else "")
                + _reason(check.reason),
                highlight=False,
            )


def _print_stage_lines(report: Report, console: Console) -> None:
    """``stage NAME STATUS SECONDS`` per stage, with why it was skipped or the first line of why it failed."""
    for stage in report.stages:
        marks = " reused" * stage.reused + " timed_out" * stage.timed_out + (f" signal={stage.signal}" if stage.signal else "")
        error = f" error: {first_line(stage.error, None)}" if stage.error else ""
        console.out(f"stage {stage.name} {stage.status} {stage.seconds:.1f}s{marks}" + _reason(stage.reason) + error, highlight=False)


def _print_benchmarks(report: Report, console: Console) -> None:
    rows = facts.benchmark_rows(report)
    if not rows:
        return
    table = Table(title=BENCHMARK_TITLE)
    generates = facts.generates(report)  # a decoder's prefill and decode, in two more columns
    for column in (
        "artifact",
        "runtime",
        "device",
        "threads",
        "p50 ms",
        "95% interval",
        "p90 ms",
        "p99 ms",
        "vs source",
        "throughput/s",
        "peak MB",
        *(("prefill ms (95%)", "decode tok/s (95%)") if generates else ()),
    ):
        table.add_column(column, overflow="fold")
    for name, b in rows:
        if b.status != "ok":
            table.add_row(
                name,
                b.runtime,
                b.device,
                "-",
                f"[{STYLE['failed']}]{b.status}[/]",
                "",
                "",
                "",
                "",
                "",
                cell(b.reason, 60),
                *("", "") * generates,
            )
            continue
        speedup = facts.times(facts.speedup(report, b)) or "-"
        table.add_row(
            name,
            b.runtime,
            b.device,
            str(b.threads or "default"),
            f"{b.latency_ms_p50:.3f}",
            b.spread() or "-",
            f"{b.latency_ms_p90:.3f}",
            f"{b.latency_ms_p99:.3f}",
            speedup,
            f"{b.throughput_per_s:g} ({b.throughput_shape})",
            f"{b.peak_memory_mb:g}",
            *((b.prefill() or "-", b.decode() or "-") if generates else ()),
        )
    console.print(table)


def _print_benchmark_lines(report: Report, console: Console) -> None:
    """``benchmark ARTIFACT RUNTIME DEVICE STATUS`` and its measurements, or why it has none."""
    rows = facts.benchmark_rows(report)
    if not rows:
        return
    console.out(BENCHMARK_TITLE, highlight=False)
    for name, b in rows:
        line = f"benchmark {name} {b.runtime} {b.device} {b.status}"
        if b.status == "ok":
            speedup = facts.times(facts.speedup(report, b)) or "-"
            line += (
                f" threads={b.threads or 'default'} p50_ms={_figure(b.latency_ms_p50, '.3f')}"
                + (f" p50_interval_ms={b.latency_ms_interval[0]:.4g}-{b.latency_ms_interval[1]:.4g}" if b.latency_ms_interval else "")
                + (" unstable" if b.unstable else "")
                + f" p90_ms={_figure(b.latency_ms_p90, '.3f')} "
                f"p99_ms={_figure(b.latency_ms_p99, '.3f')} vs_source={speedup} throughput_per_s={_figure(b.throughput_per_s, 'g')} "
                f"throughput_shape={b.throughput_shape or '-'} peak_mb={_figure(b.peak_memory_mb, 'g')}"
            )
        console.out(line + _generation_figures(b) + _reason(b.reason), highlight=False)


def _generation_figures(b: Benchmark) -> str:
    """A decoder's prefill and decode figures as ``key=value`` words ("" where they were not measured)."""
    words = ""
    if b.prefill_ms_p50 is not None:
        words += f" prefill_ms={b.prefill_ms_p50:.4g}" + (
            f" prefill_interval_ms={b.prefill_ms_interval[0]:.4g}-{b.prefill_ms_interval[1]:.4g}" if b.prefill_ms_interval else ""
        )
        words += f" prefill_tokens={b.prefill_length}"
    if b.decode_tokens_per_s is not None:
        interval = b.decode_tokens_per_s_interval
        words += f" decode_tokens_per_s={b.decode_tokens_per_s:.4g}" + (
            f" decode_interval_tokens_per_s={interval[0]:.4g}-{interval[1]:.4g}" if interval else ""
        )
        words += f" decode_steps={b.decode_steps}"
    return words


def _figure(value: float | None, spec: str) -> str:
    """A measured figure, or "-" where it was not measured (a failed throughput run leaves none)."""
    return "-" if value is None else format(value, spec)


def _auto_title(report: Report) -> str:
    return "--optimize auto: " + _auto_choice(report)


def _auto_choice(report: Report) -> str:
    """What --optimize auto did, in words: the exported artifact itself (the candidate "none") is "the plain" one."""
    chosen = report.auto.chosen
    if chosen is None:
        return "no candidate passed"
    if chosen != "none":
        return f"chose {chosen}"
    plain = next(c for c in report.auto.candidates if c.name == "none")
    kind = REGISTRY.format(plain.format).title.split(" ", 1)[1]  # "an ONNX model": "ONNX model"
    return f"kept the plain {kind} (no optimization was faster within the budget)"


def _print_auto(report: Report, console: Console) -> None:
    if report.auto is None:
        return
    table = Table(title=_auto_title(report))
    decoding = any(c.decode_tokens_per_s for c in report.auto.candidates)  # ranked by decode speed
    for column in (
        "rank",
        "candidate",
        "precision",
        "computes",
        "status",
        "p50 ms",
        *(("decode tok/s",) if decoding else ()),
        "vs source",
        "why",
    ):
        table.add_column(column, overflow="fold")
    for c in report.auto.candidates:
        style = "green" if c.status == "chosen" else "yellow" if c.status in ("lost", "skipped") else "bold red"
        table.add_row(
            str(c.rank or "-"),
            c.name,
            c.precision,
            c.computes or "-",
            f"[{style}]{c.status}[/]",
            f"{c.latency_ms_p50:.3f}" if c.latency_ms_p50 else "-",
            *((_candidate_decode(c) or "-",) if decoding else ()),
            facts.times(c.decode_speedup_vs_source if decoding else c.speedup_vs_source) or "-",
            cell(c.reason, 110),
        )
    console.print(table)


def _print_auto_lines(report: Report, console: Console) -> None:
    """``candidate RANK NAME PRECISION STATUS p50_ms=… vs_source=… reason: …`` per --optimize auto candidate."""
    if report.auto is None:
        return
    console.out(_auto_title(report), highlight=False)
    for c in report.auto.candidates:
        decode = f"decode_tokens_per_s={c.decode_tokens_per_s:.4g} " if c.decode_tokens_per_s else ""
        if c.decode_speedup_vs_source:
            decode += f"decode_vs_source={facts.times(c.decode_speedup_vs_source)} "
        console.out(
            f"candidate {c.rank or '-'} {c.name} {c.precision} {c.status} "
            f"p50_ms={f'{c.latency_ms_p50:.3f}' if c.latency_ms_p50 else '-'} {decode}"
            f"vs_source={facts.times(c.speedup_vs_source) or '-'}"
            + (f" computes={c.computes.replace(', ', ',').replace(' ', ':')}" if c.computes else "")
            + _reason(c.reason),
            highlight=False,
        )


def _candidate_decode(c: AutoCandidate) -> str:
    """A candidate's decode speed with its interval, as the auto table shows it ("" where not measured)."""
    return decode_figure(c.decode_tokens_per_s, c.decode_tokens_per_s_interval, None)


def _print_composite(report: Report, console: Console) -> None:
    """A model of several networks: one line per component (its verdict, each artifact's, its own report), then each
    assembled check (the components' artifacts run together against the library's assembled model)."""
    _say(console, f"Components of the {escape(report.composite)}, each validated against the source model")
    width = max((len(c.name) for c in report.components), default=0)
    for component in report.components:
        status = "passed" if component.passed else "failed"
        artifacts = " ".join(f"{a.key}:{'passed' if a.passed else 'failed'}" for a in component.artifacts)
        line = f"{component.name:<{width}} [{STYLE[status]}]{status}[/] {escape(artifacts)}"
        line += f" — report: {escape(component.report)}" if component.report else escape(_reason(component.error))
        _say(console, line, soft_wrap=True)
    for check in report.assembled:
        metrics = " ".join(f"{name}={value:.4g}" for name, value in check.metrics.items())
        line = f"assembled {escape(check.name)} {escape(f'[{check.artifact}]')} [{STYLE[check.status]}]{check.status}[/] {escape(metrics)}"
        if check.budget:
            line += escape(f" (budget: {check.budget})")
        if check.status != "passed":
            line += escape(_reason(check.reason))
        if check.diverged_at:
            line += escape(f"; diverged at {check.diverged_at}")
        if check.blamed:
            line += escape(f"; alone, {', '.join(check.blamed)} fail{'s' * (len(check.blamed) == 1)} it")
        _say(console, line, soft_wrap=True)


def _print_compact(report: Report, console: Console) -> None:
    """One line per checked artifact (verdict, worst error, lowest cosine, p50 where benchmarked); the artifacts that
    have no checks grouped by why; each device skipped, with its reason, once; then --optimize auto's choice."""
    _say(console, "Validation against the source model")
    if (p50 := facts.source_p50(report)) is not None:
        decode = next((b for b in report.source_benchmark if b.status == "ok" and b.decode_tokens_per_s), None)
        _say(console, f"source p50_ms={p50:.3f}" + (_compact_generation(decode) if decode else ""))
    checked = [a for a in report.artifacts if a.checks]
    width = max((len(a.key) for a in report.artifacts), default=0)
    for artifact in checked:
        _say(console, f"{artifact.key:<{width}} {_artifact_line(report, artifact)}", soft_wrap=True)
    unchecked = [(facts.unchecked(report, a), a.key) for a in report.artifacts if not a.checks]
    for (status, reason), keys in _grouped(((u.status, first_line(u.reason, None)), key) for u, key in unchecked):
        style = STYLE["skipped" if status == "skipped" else "failed"]
        _say(console, f"{escape(', '.join(keys))} [{style}]{status}[/]" + escape(_reason(reason)), soft_wrap=True)
    for device, reason, keys in _skipped_devices(report, checked):
        where = "every artifact" if len(keys) == len(checked) else ", ".join(keys)
        _say(console, f"{device}: [yellow]skipped[/] on {escape(where)} ({escape(_one_line(reason))})", soft_wrap=True)
    if report.auto is not None:
        chosen = next((c for c in report.auto.candidates if c.status == "chosen" and c.name != "none"), None)
        why = f": {_one_line(chosen.reason)}" if chosen is not None and chosen.reason else ""
        _say(console, f"auto: {escape(_auto_choice(report) + why)}", soft_wrap=True)


def _artifact_line(report: Report, artifact: ArtifactRecord) -> str:
    """An artifact's verdict over its checks that ran, its worst error and lowest cosine, and its p50 where measured."""
    ran = [c for c in artifact.checks if c.status != "skipped"]
    failed = facts.failed_checks(artifact)
    status = "failed" if failed or (ran and not artifact.passed) else "passed" if ran else "skipped"
    error, cosine = facts.check_errors(ran)
    agreements = [c.generation.token_agreement for c in ran if c.generation is not None]
    line = (
        f"[{STYLE[status]}]{status}[/] max_abs_err={'-' if error is None else f'{error:.1e}'} "
        f"min_cosine={'-' if cosine is None else f'{cosine:.6f}'}" + (f" token_agreement={min(agreements):.1%}" if agreements else "")
    )
    measured = [b for b in artifact.benchmarks if b.status == "ok" and b.latency_ms_p50]
    for b in measured:
        at = f"[{b.runtime} {b.device}]" if len(measured) > 1 else ""
        line += f" p50_ms{escape(at)}={b.latency_ms_p50:.3f}" + (
            f" vs_source={times}" if (times := facts.times(facts.speedup(report, b))) else ""
        )
        line += _compact_generation(b, escape(at), facts.times(facts.decode_speedup(report, b)))
    for b in artifact.benchmarks:
        if b.status != "ok":
            line += f" benchmark_{b.status}: {escape(first_line(b.reason))}"
    if failed:
        line += escape(f" reason: {facts.place(failed[0])}: {first_line(failed[0].reason, None)}")
    return line


def _compact_generation(b: Benchmark, at: str = "", vs_source: str | None = None) -> str:
    """A decoder's prefill p50 and decode speed in the compact line ("" where not measured)."""
    words = f" prefill_ms{at}={b.prefill_ms_p50:.4g}" if b.prefill_ms_p50 is not None else ""
    if b.decode_tokens_per_s is not None:
        words += f" decode_tokens_per_s{at}={b.decode_tokens_per_s:.4g}" + (f" decode_vs_source={vs_source}" if vs_source else "")
    return words


def _skipped_devices(report: Report, checked: list[ArtifactRecord]) -> list[tuple[str, str, list[str]]]:
    """(device, reason, artifact keys) for each device a check was skipped on: a device absent from this machine that
    every artifact skipped is one entry with its most given reason; otherwise one entry per reason."""
    skipped: dict[str, list[tuple[str, str]]] = {}
    for artifact in checked:
        for check in artifact.checks:
            if check.status == "skipped" and not _ran_on(artifact, check.device):
                skipped.setdefault(check.device, []).append((check.reason, artifact.key))
    entries = []
    for device, found in skipped.items():
        keys = list(dict.fromkeys(key for _, key in found))
        if device not in report.environment.devices and len(keys) == len(checked):
            entries.append((device, Counter(reason for reason, _ in found).most_common(1)[0][0], keys))
            continue
        entries += [(device, reason, list(dict.fromkeys(keys))) for reason, keys in _grouped(found)]
    return entries


def _ran_on(artifact: ArtifactRecord, device: str) -> bool:
    return any(c.device == device and c.status != "skipped" for c in artifact.checks)


def _grouped(pairs) -> list[tuple[object, list[str]]]:
    """(key, names) pairs gathered by key, in the order each key first came: a reason said once, after all it explains."""
    groups: dict[object, list[str]] = {}
    for key, name in pairs:
        groups.setdefault(key, []).append(name)
    return list(groups.items())


def _say(console: Console, markup: str, soft_wrap: bool = False) -> None:
    """One line of markup: styled on a terminal; anywhere else its plain text, which rich never wraps or cuts."""
    if console.is_terminal:
        console.print(markup, soft_wrap=soft_wrap)
    else:
        console.out(Text.from_markup(markup).plain, highlight=False)


def _reason(text: str) -> str:
    return f" reason: {_one_line(text)}" if text and text.strip() else ""


def _one_line(text: str) -> str:
    """Every line of a message joined into one, whole: a plain line keeps its reason next to what it explains."""
    return " ".join((text or "").split())


def cell(text: str, limit: int) -> str:
    """The first line of a message, escaped: messages hold brackets (pip extras) that rich would read as markup."""
    return escape(first_line(text, limit))


def print_failures(report: Report, console: Console, report_path: str) -> None:
    """Every artifact that failed validation, every one asked for that cannot be built here (unless accepted), then every
    export and pass that failed, crashed or timed out: one paragraph each, with what to do next (the CLI prints them on
    stderr)."""
    for component in report.components:
        if not component.passed:
            where = f"its report says why: {component.report}" if component.report else _one_line(component.error)
            console.print(f"[bold red]error:[/] component {escape(component.name)} failed; {escape(where)}", soft_wrap=True)
    for check in report.assembled:
        if check.status == "failed":
            console.print(
                f"[bold red]error:[/] the components' {escape(check.artifact)} artifacts run together fail the {escape(check.name)} "
                f"check: {escape(_one_line(check.reason))}"
                + (f"; alone, {escape(', '.join(check.blamed))} fail it" if check.blamed else ""),
                soft_wrap=True,
            )
    for artifact in report.artifacts:
        if artifact.checks and not artifact.passed and not facts.not_chosen(report, artifact):
            console.print(f"[bold red]error:[/] {escape(failed_validation(artifact, report_path, report.source))}", soft_wrap=True)
    for missing in report.unbuilt:
        if missing.status == "skipped" and not missing.accepted:
            console.print(
                f"[bold red]error:[/] {escape(missing.artifact)} was asked for and cannot be built here: "
                f"{escape(_one_line(missing.reason).rstrip('.'))}. Build it where it can be, leave it out of the request, "
                "or pass --unbuilt warn to accept the gap (the verdict is then PASSED WITH GAPS, exit code 0).",
                soft_wrap=True,
            )
    for stage in report.stages:
        if not (stage.makes_artifact and stage.status == "failed"):
            continue
        # an --optimize pass is no export: "the int8 pass", "the onnx export"
        what = f"the {stage.subject} {'export' if stage.kind == 'export' else 'pass'}"
        if stage.signal or stage.timed_out:
            console.print(
                f"[bold red]error:[/] {what} {'timed out' if stage.timed_out else 'crashed'}: "
                f"{escape(first_line(stage.error).rstrip('.'))}; the run went on with the other targets. "
                f"{'Raise --stage-timeout if it needs longer' if stage.timed_out else 'Try another --opset, or run it with --no-isolation in a debugger'}"
                f"; the report has the details: {escape(report_path)}",
                soft_wrap=True,
            )
            continue
        console.print(
            f"[bold red]error:[/] {what} failed with every strategy; the first said: "
            f"{escape(first_line(stage.error).rstrip('.'))}. The report lists every attempt: {escape(report_path)}",
            soft_wrap=True,
        )


def failed_validation(artifact: ArtifactRecord, report_path: str, source: SourceRecord | None = None) -> str:
    """One paragraph for an artifact that failed validation: the first failing check, where the artifact is, what next
    (``source``: the report's, whose input domains a failure on generated inputs names)."""
    key = artifact.key
    check = next(iter(facts.failed_checks(artifact)), None)
    attested = artifact.detail(PrecisionAttestation)
    where = (
        f"It is left as it was at {artifact.path}."
        if artifact.given
        else f"It is kept at {artifact.path} for inspection, not at a final path."
    )
    if check is None and attested is not None and attested.status == "failed":
        return (
            f"the {key} artifact {attested.diagnosis()[0]}. {where} Its values passed their checks; a pass that leaves more of the model in "
            f"wider types than that did not do what it says. Every figure is in {report_path}"
        )
    problem = (
        f"the {key} artifact failed validation on {check.runtime} ({check.device}, {check.shape}): {first_line(check.reason, 400).rstrip('.')}"
        if check
        else f"no check of the {key} artifact could run: {first_line(artifact.checks[0].reason).rstrip('.')}"
    )
    return f"{problem}. {where} {_next_step(artifact, check, source)} Every check is in {report_path}"


TOLERANCE_ADVICE = "loosen it with --tolerance (--accuracy for fp16, int8 and int4)"
DATA_CHECK = "data"  # the shape a check on the user's --data samples is labelled with
# how a runner says the feed does not fit the artifact's inputs (convert/runtimes/base.py's FeedMismatch)
_SIGNATURE = re.compile(
    r"input '(?P<name>[^']+)' (?:has rank \d+ but the artifact takes rank (?P<rank>\d+)|is \S+ but the artifact takes (?P<dtype>\w+))"
)
_DOMAINS_SHOWN = 4


def _next_step(artifact: ArtifactRecord, check: Check | None, source: SourceRecord | None) -> str:
    """What to do about a failed check: for a signature, shape or dtype that differs, the fix (no tolerance changes it);
    for values that differ on generated inputs, the domains they were drawn from, then real samples (--data) or each
    input's {low..high}, and --tolerance last."""
    if check is None:
        return "No tolerance changes that: the checks must run first."
    failed = [o for o in check.outputs if o.status == "failed"]
    structural = [o for o in failed if o.shape != o.expected_shape or o.dtype != o.expected_dtype or not o.elements]
    values_failed = len(structural) < len(failed) or check.generation is not None  # a decoder's tokens or logits differ
    if check.declared_mismatches and not values_failed:
        return (
            "Its values are right but its declared shapes are not, and tools that read them (TensorRT profiles, serving "
            "configs) would be wrong too."
        )
    if artifact.fixed_dims and not check.outputs:
        return "Export it with those dims dynamic, or accept fixed shapes with --allow-fixed-shapes."
    if not check.outputs and check.generation is None:
        signature = _SIGNATURE.search(check.reason)
        if signature:
            takes = f"rank {signature['rank']}" if signature["rank"] else f"dtype {signature['dtype']}"
            return (
                f"The artifact's signature differs from the declared one: its input '{signature['name']}' takes {takes}, which no "
                f"tolerance changes. Declare the input with {takes} in --input, or export the model so that it takes the declared one."
            )
        if "does not take these inputs" in check.reason:
            return "The artifact's inputs differ from the declared ones, which no tolerance changes: declare them as it takes them."
        return "No tolerance changes that: the runtime's error says what stops the artifact."
    if structural:
        named = ", ".join(f"'{o.name}'" for o in structural)
        return (
            f"The artifact's outputs {named} are missing, extra, empty, or of another shape or dtype than the source's, which no "
            "tolerance changes: the conversion is wrong."
        )
    if check.shape == DATA_CHECK or not values_failed:
        return f"If the difference is expected, {TOLERANCE_ADVICE}; otherwise the conversion is wrong."
    return _generated_inputs_advice(source)


def _generated_inputs_advice(source: SourceRecord | None) -> str:
    """The advice for values that differ on generated inputs: what they were drawn from, and the next steps in order."""
    domains = source.input_domains if source is not None else []
    drawn = "; ".join(d.describe() for d in domains[:_DOMAINS_SHOWN])
    if len(domains) > _DOMAINS_SHOWN:
        drawn += f"; and {len(domains) - _DOMAINS_SHOWN} more (the report has each)"
    floats = [d for d in domains if d.drawn.startswith(("uniform", "standard normal"))]
    chosen = (floats or domains or [None])[0]
    spec = next((text for text in (source.inputs if source else []) if chosen and text.startswith(chosen.name + ":")), "")
    example = f' (e.g. --input "{spec.split("{")[0]}{{LOW..HIGH}}")' if spec else ""
    return (
        f"These inputs were generated, not real ({drawn or 'each from its spec'}), and a model can be right on its inputs and "
        f"not on others. Check it on real samples with --data, or give each input the range of real inputs with --input"
        f"{example}; only if the difference is still expected, {TOLERANCE_ADVICE}; otherwise the conversion is wrong."
    )
