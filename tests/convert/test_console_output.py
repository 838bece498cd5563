"""What the command line prints with -v (tests/convert/test_console_compact.py has the compact default): tables on a
terminal; anywhere else (CI logs, pipes, tee) plain lines, one per check and stage, never wrapped or cut, with no borders
or colour codes, so that grep finds each whole."""

from __future__ import annotations

import io
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

import convert
from convert.gate.judge import judge
from convert.policy import load_policy
from convert.reports.console import print_summary, print_verdict
from convert.reports.model import Report
from tests.conftest import REPO, run_cli

BORDERS = set("│┃━─┏┓┗┛┡┩└┘╇┳┴")
# branches on its batch, so torch.export fixes B: its checks at other sizes fail with a reason of over 200 characters
FIXED_BATCH = str(REPO / "fixtures" / "torch_models.py") + ":branches_on_its_batch"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Report:
    """A real report: torch_export and onnx artifacts with passed, failed and skipped checks, a skipped TensorRT pass and
    the source model's benchmark (only artifacts that passed are benchmarked)."""
    from fixtures.torch_models import branches_on_its_batch

    result = convert.convert(
        branches_on_its_batch(),
        inputs=["x:float32[B,6]"],
        to=["torch_export", "onnx"],
        optimize=["trt:fp16"],
        benchmark=True,
        benchmark_seconds=0.2,
        threads=1,
        out=tmp_path_factory.mktemp("console"),
    )
    assert not result.passed and result.report.source_benchmark
    return result.report


def plain(render) -> list[str]:
    console = Console(file=io.StringIO())  # not a terminal: rich would wrap at 80 columns
    assert not console.is_terminal
    render(console)
    return console.file.getvalue().splitlines()


def terminal(render) -> str:
    console = Console(file=io.StringIO(), force_terminal=True, width=100)
    render(console)
    return console.file.getvalue()


def joined(text: str) -> str:
    return " ".join(text.split())


def long_reasons(report: Report) -> list[str]:
    reasons = [c.reason for a in report.artifacts for c in a.checks if len(c.reason) > 200]
    assert reasons, "the fixture no longer gives a check a reason of over 200 characters"
    return reasons


def assert_plain(lines: list[str]) -> None:
    for line in lines:
        assert not BORDERS & set(line), line
        assert "\x1b" not in line, line


def test_off_a_terminal_every_check_and_stage_is_one_whole_line(report):
    lines = plain(lambda console: print_summary(report, console, "out/report.json", verbose=True))
    assert_plain(lines)
    assert lines[0] == "Validation against the source model"
    for artifact in report.artifacts:
        key = artifact.optimization or artifact.format
        for check in artifact.checks:
            (line,) = [
                line for line in lines if line.startswith(f"check {key} {check.runtime} {check.device} {check.shape} {check.status} ")
            ]
            if check.reason:
                assert line.endswith(f" reason: {joined(check.reason)}"), line
            else:
                assert " max_abs_err=" in line and " min_cosine=" in line, line
    for reason in long_reasons(report):
        assert any(line.endswith(f"reason: {reason}") for line in lines), reason
    (skipped,) = [stage for stage in report.stages if stage.name == "optimize:trt:fp16"]
    assert f"check trt:fp16 - - - skipped reason: {joined(skipped.reason)}" in lines
    for stage in report.stages:
        assert sum(line.startswith(f"stage {stage.name} {stage.status} ") for line in lines) == 1, stage.name
    for b in report.source_benchmark:
        assert any(line.startswith(f"benchmark source {b.runtime} {b.device} {b.status} threads=1 p50_ms=") for line in lines)
    # the TensorRT pass asked for and not built here is named in the verdict (why is in its skipped line above)
    assert lines[-1] == "Verdict: FAILED — requested but not built: trt:fp16 (exit code 1); report: out/report.json"


def test_on_a_terminal_the_summary_is_a_table(report):
    text = terminal(lambda console: print_summary(report, console, "out/report.json", verbose=True))
    assert "Validation against the source model" in text and "┃" in text and "│ onnx " in text
    assert "check torch_export" not in text and "stage load" not in text
    assert "\x1b[" in text and "Verdict:" in text


def test_the_gate_prints_plain_lines_off_a_terminal_and_tables_on_one(report, tmp_path):
    policy, name = load_policy(
        {
            "model": {"path": "model.pt2"},
            "budgets": {"onnx": {"accuracy": "max_abs<=1e-3", "size_mb": 10}},
            "require": {
                "targets": ["torch_export", "onnx"],
                "optimizations": ["trt:fp16"],
                "devices": ["cpu", "cuda"],
                "may_skip_devices": ["cuda"],
            },
        }
    )
    verdict = judge(report, policy, name, baseline=report, baseline_path=tmp_path / "baseline.json")
    assert verdict.budgets and verdict.baseline.deltas and any(len(r.message) > 200 for r in verdict.reasons)

    lines = plain(lambda console: print_verdict(verdict, console))
    assert_plain(lines)
    assert "Budgets" in lines and any(line.startswith("Against the baseline") for line in lines)
    for b in verdict.budgets:
        assert any(
            line.startswith(f"budget {b.artifact} {b.runtime or '-'} {b.device or '-'} {b.output or '-'} {b.status} {b.metric}=")
            for line in lines
        ), b
    assert sum(line.startswith("baseline ") for line in lines) == len(verdict.baseline.deltas)
    assert "Gate: REJECT (exit code 1)" in lines
    for reason in verdict.reasons:
        assert any(line.endswith(joined(reason.message)) and f"[{reason.code}]" in line for line in lines), reason.message

    text = terminal(lambda console: print_verdict(verdict, console))
    assert "Budgets" in text and "┃" in text and "budget onnx" not in text and "Gate:" in text


def test_a_piped_command_prints_the_plain_summary_and_unwrapped_errors(tmp_path):
    run = run_cli(FIXED_BATCH, "--input", "x:float32[B,6]", "--to", "torch_export", "-v", "--out", str(tmp_path), env={"COLUMNS": "80"})
    assert run.returncode == 1, run.output
    report = Report.from_json((tmp_path / "report.json").read_text())
    lines = run.stdout.splitlines()
    assert_plain(lines)
    checks = report.artifacts[0].checks
    assert sum(line.startswith("check torch_export ") for line in lines) == len(checks)
    for check in checks:
        assert any(line.startswith(f"check torch_export {check.runtime} {check.device} {check.shape} {check.status} ") for line in lines)
    for reason in long_reasons(report):
        assert any(line.endswith(f"reason: {reason}") for line in lines), reason
    assert sum(line.startswith("stage ") for line in lines) == len(report.stages)
    assert lines[-1] == f"Verdict: FAILED (exit code 1); report: {tmp_path / 'report.json'}"
    # the error paragraph is one line, far past 80 columns
    (error,) = [line for line in run.stderr.splitlines() if line.startswith("error: the torch_export artifact failed validation")]
    assert error.endswith(f"Every check is in {tmp_path / 'report.json'}") and len(error) > 200
    assert sum(line.startswith("✓ export:torch_export (") for line in run.stderr.splitlines()) == 1


def stage(name: str) -> SimpleNamespace:
    return SimpleNamespace(name=name, status="ok", seconds=61.0, reason="", reused=False)


def test_progress_on_a_terminal_shows_a_spinner_while_a_stage_runs(monkeypatch):
    from convert import cli

    console = Console(file=io.StringIO(), force_terminal=True, width=100, highlight=False)
    monkeypatch.setattr(cli, "stderr", console)
    progress = cli._ConsoleProgress()
    progress.started("export:onnx")
    deadline = time.monotonic() + 5
    while "export:onnx" not in console.file.getvalue() and time.monotonic() < deadline:  # drawn by rich's refresh thread
        time.sleep(0.05)
    running = console.file.getvalue()
    progress.finished(stage("export:onnx"))
    assert "export:onnx" in running and "… export:onnx" not in running
    assert "✓\x1b[0m export:onnx (61.0 s)" in console.file.getvalue()


def test_progress_off_a_terminal_is_a_line_per_finished_stage(monkeypatch):
    from convert import cli

    console = Console(file=io.StringIO(), highlight=False)
    monkeypatch.setattr(cli, "stderr", console)
    progress = cli._ConsoleProgress()
    progress.started("export:onnx")
    progress.finished(stage("export:onnx"))
    assert console.file.getvalue().splitlines() == ["✓ export:onnx (61.0 s)"]


def test_a_failed_pass_is_named_a_pass_and_a_failed_export_an_export():
    from convert.reports.console import print_failures
    from convert.reports.model import Environment, Stage

    failed = Report(
        tool_version="0",
        created_at="now",
        environment=Environment(python="3", platform="p"),
        stages=[
            Stage(kind="export", subject="onnx", status="failed", error="no strategy worked\nmore"),
            Stage(kind="optimize", subject="int8", status="failed", error="quantize_dynamic failed"),
            Stage(kind="optimize", subject="openvino:int8", status="failed", error="killed", signal="SIGKILL"),
        ],
    )
    lines = plain(lambda console: print_failures(failed, console, "out/report.json"))
    assert lines[0].startswith("error: the onnx export failed with every strategy; the first said: no strategy worked.")
    assert lines[1].startswith("error: the int8 pass failed with every strategy; the first said: quantize_dynamic failed.")
    assert lines[2].startswith("error: the openvino:int8 pass crashed: killed; the run went on with the other targets.")
    assert all(line.endswith("out/report.json") for line in lines)


def test_a_benchmark_whose_throughput_run_failed_prints_a_dash_for_each_figure_it_lacks():
    """A failed throughput run leaves no throughput figure: the plain line says '-' for it instead of crashing."""
    from convert.reports import model as rm

    report = Report(
        tool_version="0",
        created_at="now",
        environment=rm.Environment(python="3", platform="linux"),
        artifacts=[
            rm.ArtifactRecord(
                format="onnx",
                benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=1.0, latency_ms_p90=1.2, latency_ms_p99=1.5)],
            )
        ],
    )
    stream = io.StringIO()
    print_summary(report, Console(file=stream, force_terminal=False, width=200), verdict=False, verbose=True)
    line = next(line for line in stream.getvalue().splitlines() if line.startswith("benchmark onnx"))
    assert "p50_ms=1.000" in line and "throughput_per_s=- throughput_shape=- peak_mb=-" in line
