"""The output folder: existing outputs are kept without --force; an unwritable folder or a full disk fails cleanly."""

from __future__ import annotations

import hashlib
import os
import subprocess

from tests.conftest import REPO, convert_command, load_report, run_cli


def _assert_clean_user_error(run, *fragments):
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.output
    assert "error:" in run.stderr
    for fragment in fragments:
        assert fragment in run.output, run.output


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_existing_output_is_not_overwritten_without_force(torch_files, tmp_path):
    out = tmp_path / "o"
    first = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out))
    assert first.returncode == 0, first.output
    before = _digest(out / "cnn.onnx"), _digest(out / "report.json")
    second = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out))
    _assert_clean_user_error(second, "already exists", "--force")
    assert (_digest(out / "cnn.onnx"), _digest(out / "report.json")) == before
    third = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out), "--force", "--seed", "3")
    assert third.returncode == 0, third.output
    assert load_report(out / "report.json")["options"]["seed"] == 3


def test_unwritable_output_folder(torch_files, tmp_path):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    run = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(blocker / "sub"))
    _assert_clean_user_error(run, "output folder")


def test_a_full_disk_fails_cleanly(torch_files, tmp_path):
    out = tmp_path / "o"
    # writes past 20 kB fail with EFBIG, as they fail with ENOSPC on a full disk (SIGXFSZ ignored); the worker inherits it
    limit = (
        "import resource, signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))"
    )
    done = subprocess.run(
        convert_command(limit, str(torch_files / "cnn.pt2"), "--to", "onnx,torchscript", "--out", str(out)),
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "there is no room to write to" in done.stderr and "choose another folder with --out" in done.stderr
    assert not any(out.iterdir()), "no artifact, staging folder, lock or report is left behind"


def test_a_forced_run_that_fails_replaces_the_earlier_report_so_that_it_claims_no_pass(torch_files, tmp_path):
    """With --force the earlier run's outcome is to be replaced: a run that then fails on bad input (exit 2) writes its
    own failing report where the earlier passing one was, so a pipeline reading the folder sees the failure; the
    earlier artifact stays as it was."""
    out = tmp_path / "o"
    first = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out))
    assert first.returncode == 0, first.output
    artifact = _digest(out / "cnn.onnx")
    failed = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out), "--force", "--input", "x:float32[B,3,32]")
    _assert_clean_user_error(failed, "--input x has 3 dims but the program's x is float32[d0,3,32,32]")
    report = load_report(out / "report.json")
    assert report["passed"] is False and report["exit_code"] == 2 and report["artifacts"] == []
    assert "--input x has 3 dims" in report["error"]
    assert _digest(out / "cnn.onnx") == artifact
    assert sorted(p.name for p in out.iterdir()) == ["cnn.onnx", "report.json"]  # no lock or staging folder left


def test_the_torch_export_artifact_is_the_same_bytes_from_two_clean_runs(torch_files, tmp_path):
    for run in ("a", "b"):
        done = run_cli(str(torch_files / "transformer.pt2"), "--to", "torch_export", "--out", str(tmp_path / run))
        assert done.returncode == 0, done.output
    assert _digest(tmp_path / "a" / "transformer.pt2") == _digest(tmp_path / "b" / "transformer.pt2")
