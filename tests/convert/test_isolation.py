"""Crash isolation: a segfault, a hang or an out-of-memory kill during one stage fails that stage with the signal in
the report, and the run goes on with the other targets. The crashing models are negative fixtures that crash for
real (a read of address 0, an endless sleep); the out-of-memory kill is the SIGKILL the kernel would send."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from tests.conftest import REPO, load_report, run_cli

CRASHES = "fixtures.torch_models:build_crashes_in_onnx_export"
HANGS = "fixtures.torch_models:build_hangs_in_onnx_export"


def _stage(report: dict, name: str) -> dict:
    return next(s for s in report["stages"] if s["name"] == name)


def _record(report: dict, key: str) -> dict:
    return next(a for a in report["artifacts"] if (a["optimization"] or a["format"]) == key)


def test_a_segfault_in_one_export_fails_that_stage_and_the_run_goes_on(tmp_path):
    out = tmp_path / "out"
    done = run_cli(CRASHES, "--input", "x:float32[B,8]", "--to", "onnx,torchscript", "--out", str(out), process=True)
    assert done.returncode == 2, done.output
    assert "Traceback" not in done.output
    assert "the onnx export crashed" in done.stderr and "SIGSEGV" in done.stderr and "--no-isolation" in done.stderr
    report = load_report(out / "report.json")
    assert report["isolation"].startswith("worker process")
    crashed = _stage(report, "export:onnx")
    assert crashed["status"] == "failed" and crashed["signal"] == "SIGSEGV" and "SIGSEGV" in crashed["error"]
    assert _record(report, "onnx")["attempts"][0]["status"] == "failed" and _record(report, "onnx")["path"] is None
    torchscript = _record(report, "torchscript")
    assert torchscript["passed"] and (out / "build_crashes_in_onnx_export.torchscript.pt").is_file()
    assert sorted(p.name for p in out.iterdir()) == ["build_crashes_in_onnx_export.torchscript.pt", "report.json"]


def test_a_stage_past_its_timeout_is_stopped_and_the_run_goes_on(tmp_path):
    out = tmp_path / "out"
    done = run_cli(HANGS, "--input", "x:float32[B,8]", "--to", "onnx,torchscript", "--out", str(out), "--stage-timeout", "8", process=True)
    assert done.returncode == 2, done.output
    assert "the onnx export timed out" in done.stderr and "--stage-timeout" in done.stderr and "Traceback" not in done.output
    report = load_report(out / "report.json")
    stage = _stage(report, "export:onnx")
    assert stage["status"] == "failed" and stage["timed_out"] and stage["signal"] is None
    assert 8 <= stage["seconds"] < 30, stage
    assert "stage timeout of 8 s" in stage["error"]
    assert _record(report, "torchscript")["passed"], "the worker was restarted, with the model loaded again, for the next target"
    assert report["options"]["stage_timeout"] == 8


def test_a_worker_killed_during_validation_fails_those_checks_and_the_run_goes_on(torch_files, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "convert", str(torch_files / "cnn.pt2"), "--to", "onnx,torchscript", "--samples", "30", "--out", str(out)],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in process.stderr:  # one progress line as each stage finishes: validate:onnx's job goes to the worker next
        if line.startswith("✓ export:onnx ("):
            break
    workers = psutil.Process(process.pid).children()
    assert len(workers) == 1, workers
    os.kill(workers[0].pid, signal.SIGKILL)  # what the kernel's out-of-memory killer does
    _, rest = process.communicate(timeout=300)
    assert process.returncode == 1, rest
    assert "Traceback" not in rest
    report = load_report(out / "report.json")
    onnx = _record(report, "onnx")
    killed = next(c for c in onnx["checks"] if c["device"] == "cpu")
    assert killed["status"] == "failed" and "SIGKILL" in killed["reason"] and "out-of-memory" in killed["reason"]
    assert not onnx["passed"]
    assert _stage(report, "validate:onnx")["signal"] == "SIGKILL"
    assert _record(report, "torchscript")["passed"]


def test_a_model_that_crashes_while_loading_is_a_clear_error(tmp_path):
    out = tmp_path / "out"
    done = run_cli(
        "fixtures.torch_models:build_crashes_on_load", "--input", "x:float32[B,8]", "--to", "onnx", "--out", str(out), process=True
    )
    assert done.returncode == 2, done.output
    assert "loading the model did not finish" in done.stderr and "SIGSEGV" in done.stderr
    assert "Traceback" not in done.output and "libbroken.so" not in done.output  # the crash's words: in its log
    log = Path(re.search(r"what they printed before the crash is in (\S+\.log)", done.stderr.replace("\n", "")).group(1))
    assert "libbroken.so: weights mapped at an unaligned address" in log.read_text()
    assert not out.exists()


def test_in_process_runs_say_so_and_a_bad_timeout_is_refused(torch_files, tmp_path):
    done = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(tmp_path / "a"), "--no-isolation", "-q")
    assert done.returncode == 0, done.output
    assert load_report(tmp_path / "a" / "report.json")["isolation"].startswith("in-process: isolation was turned off")
    bad = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(tmp_path / "b"), "--stage-timeout", "0")
    assert bad.returncode == 2 and "--stage-timeout must be positive, not 0" in bad.stderr
    assert not (tmp_path / "b").exists()
