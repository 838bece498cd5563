"""The default console is compact: one line per artifact, a device or a reason skipped everywhere said once, one line per
finished stage off a terminal, --optimize auto's choice in words; ``-v`` keeps the detail. What the frameworks print,
warn and log during a run goes to the run's log beside its report, never to the terminal."""

from __future__ import annotations

import io
import textwrap
from types import SimpleNamespace

import pytest
from rich.console import Console

from convert.reports.console import print_summary
from convert.reports.model import Report
from tests.conftest import run_cli

TWO_INPUTS = ("fixtures.torch_models:build_two_input_dict", "--input", "image:float32[B,3,16,16]", "--input", "features:float32[B,12]")
TENSORRT_HINT = "pip install 'model-convert[tensorrt]'"
# a model whose forward warns, logs and writes to file descriptor 2 as third-party libraries do on import and export
CHATTY = """
import logging
import os
import warnings

import torch


class Chatty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x):
        warnings.warn("chatty-python-warning")
        logging.getLogger("chattylib").warning("chatty-log-record")
        os.write(2, b"chatty-native-stderr\\n")
        return self.linear(x)


def build():
    torch.manual_seed(0)
    return Chatty().eval()
"""


@pytest.fixture(scope="module")
def auto_run(tmp_path_factory):
    """A two-input toy model through --optimize auto, off a terminal (as in CI or ``> out.txt``)."""
    out = tmp_path_factory.mktemp("compact") / "out"
    run = run_cli(*TWO_INPUTS, "--to", "onnx", "--optimize", "auto", "--benchmark-seconds", "0.2", "--out", str(out))
    assert run.returncode == 0, run.output
    return run, Report.from_json((out / "report.json").read_text())


def test_auto_on_a_two_input_model_prints_a_line_per_artifact_and_each_reason_once(auto_run):
    # before: 126 lines (82 on stdout, 44 on stderr), the TensorRT hint nine times and a cuda row per artifact
    run, report = auto_run
    stages, lines = run.stderr.splitlines(), run.stdout.splitlines()
    assert len(lines) <= 30 and len(stages) == len(report.stages), run.output
    assert run.output.count(TENSORRT_HINT) == 1
    assert lines.count("cuda: skipped on every artifact (no CUDA device on this machine)") == 1
    assert not [line for line in lines if "cuda" in line and not line.startswith("cuda: ")]
    for artifact in report.artifacts:
        named = [line for line in lines if line.split()[0] == artifact.key or line.startswith(f"{artifact.key},")]
        assert len(named) == 1 if artifact.checks else len(named) <= 1, (artifact.key, named)
    (onnx,) = [line for line in lines if line.startswith("onnx ")]
    assert " passed max_abs_err=" in onnx and " min_cosine=" in onnx and " p50_ms=" in onnx
    (auto,) = [line for line in lines if line.startswith("auto: ")]
    if report.auto.chosen == "none":
        assert auto == "auto: kept the plain ONNX model (no optimization was faster within the budget)"
    else:
        assert auto.startswith(f"auto: chose {report.auto.chosen}")
    assert "chose none" not in run.output


def test_off_a_terminal_each_finished_stage_is_one_line_and_the_summary_repeats_none(auto_run):
    run, report = auto_run
    assert not [line for line in run.stderr.splitlines() if line.startswith("… ")]
    for stage in report.stages:
        assert sum(f" {stage.name} (" in line for line in run.stderr.splitlines()) == 1, stage.name
    assert not [line for line in run.stdout.splitlines() if line.startswith("stage ")]


def test_verbose_keeps_every_check_stage_and_candidate(auto_run):
    _, report = auto_run
    compact, verbose = (_plain(lambda console, v=v: print_summary(report, console, "out/report.json", verbose=v)) for v in (False, True))
    assert len(verbose) > len(compact)
    cuda = [line for line in verbose if line.startswith("check ") and " cuda * skipped " in line]
    assert len(cuda) == len([a for a in report.artifacts if a.checks])
    assert sum(line.startswith("stage ") for line in verbose) == len(report.stages)
    assert sum(line.startswith("candidate ") for line in verbose) == len(report.auto.candidates)
    assert any(line.startswith("benchmark onnx onnxruntime cpu ok") for line in verbose)
    table = Console(file=io.StringIO(), force_terminal=True, width=200)
    print_summary(report, table, "out/report.json", verbose=True)
    assert "┃" in table.file.getvalue() and "no CUDA device on this machine" in table.file.getvalue()


def test_the_cli_takes_verbose(tmp_path):
    run = run_cli(*TWO_INPUTS, "--to", "onnx", "-v", "--out", str(tmp_path))
    assert run.returncode == 0, run.output
    assert any(line.startswith("check onnx onnxruntime cpu ") for line in run.stdout.splitlines())


def test_what_a_library_warns_logs_and_writes_during_a_stage_goes_to_the_run_log(tmp_path):
    (tmp_path / "chatty.py").write_text(textwrap.dedent(CHATTY))
    out = tmp_path / "out"
    # the worker process's own capture of what the libraries print (its file descriptors included)
    run = run_cli(f"{tmp_path / 'chatty.py'}:build", "--input", "x:float32[B,4]", "--to", "onnx", "--out", str(out), process=True)
    assert run.returncode == 0, run.output
    log = (out / "report.log").read_text()
    for said in ("chatty-python-warning", "chatty-log-record", "chatty-native-stderr"):
        assert said in log and said not in run.output, said
    assert f"log: {out / 'report.log'}" in run.stdout


def test_our_own_errors_still_reach_the_terminal(tmp_path):
    run = run_cli(*TWO_INPUTS[:1], "--input", "image:float32[B,3,16,16]", "--to", "onnx", "--out", str(tmp_path))
    assert run.returncode == 2 and "error:" in run.stderr and "Traceback" not in run.output, run.output


def test_a_run_whose_libraries_say_nothing_leaves_no_log(tmp_path):
    run = run_cli(*TWO_INPUTS, "--to", "onnx", "--out", str(tmp_path))
    assert run.returncode == 0, run.output
    assert not (tmp_path / "report.log").exists() and "log: " not in run.stdout


def test_progress_off_a_terminal_prints_each_finished_stage_once_without_its_skip_reason(monkeypatch):
    from convert import cli

    console = Console(file=io.StringIO(), highlight=False)
    monkeypatch.setattr(cli, "stderr", console)
    progress = cli._ConsoleProgress()
    for name, status in (("export:onnx", "ok"), ("optimize:trt", "skipped"), ("optimize:trt:fp16", "skipped")):
        progress.started(name)
        progress.finished(SimpleNamespace(name=name, status=status, seconds=1.0, reason=TENSORRT_HINT, reused=False))
    assert console.file.getvalue().splitlines() == [
        "✓ export:onnx (1.0 s)",
        "- optimize:trt (1.0 s) skipped",
        "- optimize:trt:fp16 (1.0 s) skipped",
    ]


def _plain(render) -> list[str]:
    console = Console(file=io.StringIO(), width=100_000)
    render(console)
    return console.file.getvalue().splitlines()
