"""Interruptions and concurrency: a signal mid-run or a second run on the same folder leave no partial artifact at a
final path, and the report says the run was interrupted when the process lives to write it."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from convert.errors import ConvertError
from convert.safety import LOCK_NAME, STAGING_PREFIX, Staging, sha256_files
from tests.conftest import REPO, convert_command, run_cli

SLOW_RUN = ("--to", "onnx,torchscript,torch_export", "--benchmark", "--dim", "d0=2,1,4")


def _start(model: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # SIGINT as a terminal gives it: a test runner started in the background (a shell's `&`) passes it on ignored,
    # and Python keeps an inherited SIG_IGN
    command = convert_command(
        "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)", str(model), *SLOW_RUN, "--out", str(out)
    )
    return subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_staging(out: Path, process: subprocess.Popen) -> None:
    """Until the run holds the output folder (its staging folder exists), then a moment into its exports."""
    deadline = time.monotonic() + 120
    while not any(out.glob(f"{STAGING_PREFIX}*")):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "the run never started writing"
        time.sleep(0.05)
    time.sleep(1.0)


def _assert_only_complete_artifacts(out: Path, report: dict | None) -> None:
    """Every file at a final path is an artifact the report lists with its sha256, or the report itself."""
    published = {Path(a["path"]).name: a["sha256"] for a in (report or {}).get("artifacts", []) if a["path"]}
    for path in out.iterdir():
        if path.name.startswith(STAGING_PREFIX) or path.name == LOCK_NAME:
            continue  # private: hidden, never a final path
        assert path.name == "report.json" or path.name in published, f"{path.name} is at a final path but not in the report"
        if path.name in published:
            assert sha256_files([path]) == published[path.name], f"{path.name} is not the complete artifact"
        assert not path.name.endswith(".part")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_leaves_a_report_that_says_so_and_no_partial_artifact(torch_files, tmp_path, signum):
    out = tmp_path / "out"
    process = _start(torch_files / "cnn.pt2", out)
    _wait_for_staging(out, process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["interrupted"] and report["exit_code"] == 130 and not report["passed"]
    assert not list(out.glob(f"{STAGING_PREFIX}*")) and not (out / LOCK_NAME).exists()
    _assert_only_complete_artifacts(out, report)


def test_sigkill_mid_run_leaves_no_partial_artifact_and_the_next_run_cleans_up(torch_files, tmp_path):
    out = tmp_path / "out"
    process = _start(torch_files / "cnn.pt2", out)
    _wait_for_staging(out, process)
    workers = psutil.Process(process.pid).children()
    assert workers, "the framework work runs in a worker process"
    process.kill()
    process.communicate(timeout=60)
    assert process.returncode == -signal.SIGKILL
    _, alive = psutil.wait_procs(workers, timeout=30)
    assert not alive, "the worker process dies with the run (PR_SET_PDEATHSIG)"
    _assert_only_complete_artifacts(out, None if not (out / "report.json").exists() else json.loads((out / "report.json").read_text()))
    assert not (out / "report.json").exists()  # the process did not live to write it
    done = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out), "--force", "-q")
    assert done.returncode == 0, done.output
    assert not list(out.glob(f"{STAGING_PREFIX}*")), "the killed run's staging folder is removed by the next run"


def test_a_second_run_on_a_folder_another_run_is_writing_to_is_refused(torch_files, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    with open(out / LOCK_NAME, "a+") as held:  # the lock another live run would hold
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        done = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out))
    assert done.returncode == 2, done.output
    assert "another convert run is writing to" in " ".join(done.stderr.split()) and "Traceback" not in done.output
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]


def test_staging_holds_the_folder_until_cleanup_and_rechecks_existing_outputs(tmp_path):
    first = Staging(tmp_path)
    with pytest.raises(ConvertError, match="another convert run is writing"):
        Staging(tmp_path)
    (tmp_path / "model.onnx").write_bytes(b"published meanwhile")
    first.cleanup()
    with pytest.raises(ConvertError, match="the output already exists"):
        Staging(tmp_path, [tmp_path / "model.onnx"])
    Staging(tmp_path, [tmp_path / "model.onnx"], force=True).cleanup()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
