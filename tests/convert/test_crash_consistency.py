"""Crash consistency: a forced run over an earlier run's folder, killed (SIGKILL: no handler runs) at seeded random
moments, never leaves a file at a final path that is not a complete artifact of one of the two runs, nor a report that
names artifacts other than those at its paths (a stale passing report); the next run cleans up after it."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from convert.safety import LOCK_NAME, STAGING_PREFIX, sha256_files
from tests.conftest import REPO, load_report, run_cli

TARGETS = ("--to", "onnx,torchscript", "--no-cache")
KILLS = 4


def _changed_weights(source: Path, target: Path) -> None:
    import torch

    program = torch.export.load(str(source))
    with torch.no_grad():
        next(iter(program.state_dict.values())).add_(0.5)
    target.parent.mkdir()
    torch.export.save(program, str(target))


def _published(report: dict) -> dict[str, str]:
    return {Path(a["path"]).name: a["sha256"] for a in report["artifacts"] if a["path"]}


def _state(out: Path) -> tuple[dict[str, str], dict | None]:
    """The files at final paths (name → sha256) and the report there, if any."""
    files = {
        p.name: sha256_files([p])
        for p in out.iterdir()
        if p.name != "report.json" and not p.name.startswith(STAGING_PREFIX) and p.name != LOCK_NAME
    }
    return files, load_report(out / "report.json") if (out / "report.json").exists() else None


def test_a_forced_run_killed_at_random_moments_leaves_only_complete_artifacts_and_no_stale_report(torch_files, tmp_path):
    earlier_model, later_model = torch_files / "cnn.pt2", tmp_path / "later" / "cnn.pt2"
    _changed_weights(earlier_model, later_model)
    reference = tmp_path / "later-uninterrupted"
    started = time.monotonic()
    # every run a process of its own, as the killed ones are: TorchScript numbers the classes it compiles in a process,
    # so an artifact's bytes depend on what the process compiled before
    later = run_cli(str(later_model), *TARGETS, "--out", str(reference), process=True)
    duration = time.monotonic() - started
    assert later.returncode == 0, later.output
    later_files = _published(load_report(reference / "report.json"))
    out = tmp_path / "out"
    earlier = run_cli(str(earlier_model), *TARGETS, "--out", str(out), process=True)
    assert earlier.returncode == 0, earlier.output
    earlier_files = _published(load_report(out / "report.json"))
    assert set(earlier_files) == set(later_files) and not set(earlier_files.values()) & set(later_files.values())

    moments = sorted(random.Random(20261126).uniform(0.05, 1.0) * duration for _ in range(KILLS))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for moment in moments:
        command = [sys.executable, "-m", "convert", str(later_model), *TARGETS, "--out", str(out), "--force"]
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(moment)
        workers = psutil.Process(process.pid).children(recursive=True) if process.poll() is None else []
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        psutil.wait_procs(workers, timeout=30)
        files, report = _state(out)
        for name, digest in files.items():
            assert digest in (earlier_files.get(name), later_files.get(name)), f"killed at {moment:.1f} s: {name} is no complete artifact"
        if report is not None:
            assert _published(report) == {name: files.get(name) for name in _published(report)}, (
                f"killed at {moment:.1f} s: the report names artifacts that are not at its paths"
            )
    done = run_cli(str(later_model), *TARGETS, "--out", str(out), "--force", "-q", process=True)
    assert done.returncode == 0, done.output
    files, report = _state(out)
    assert files == later_files and _published(report) == later_files and report["passed"]
    assert not list(out.glob(f"{STAGING_PREFIX}*")) and not (out / LOCK_NAME).exists()
