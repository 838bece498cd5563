"""The gate's documentation runs as shown: the gate guide's commands and Python snippet (docs/how-to/gate.md), and the commands of the
GitHub Actions workflow example (not the CI service), each in a copy of examples/gate."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.pages import repository_root, user_environment

WORKFLOW = yaml.safe_load((REPO / "examples" / "gate" / "model-gate.yml").read_text())
GATE_PAGE = "how-to/gate.md"
GATE_SECTION = (REPO / "docs" / GATE_PAGE).read_text()


def _environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What the workflow's runner would have after its install step: `convert` and `python` on PATH, the project importable."""
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir(exist_ok=True)
    # launchers, not symlinks: a virtual environment is found from the path its interpreter is started by
    for name, command in (("convert", f'"{sys.executable}" -m convert'), ("python", f'"{sys.executable}"')):
        launcher = bin_folder / name
        launcher.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        launcher.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_folder}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO), **extra}


def _copy_example(tmp_path: Path) -> Path:
    folder = tmp_path / "examples" / "gate"
    shutil.copytree(REPO / "examples" / "gate", folder, ignore=shutil.ignore_patterns("out", "models", "reports", "promoted"))
    return folder


def _bash(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=900)


def test_the_github_actions_workflow_commands_gate_then_compare_with_the_promoted_baseline(tmp_path):
    job = WORKFLOW["jobs"]["gate"]
    steps = [s for s in job["steps"] if "run" in s]
    install = next(s for s in steps if s["name"] == "Install")
    assert "requirements.lock" in install["run"]  # installs the versions `make install` does, which the test run already did
    workdir = tmp_path / job["defaults"]["run"]["working-directory"]
    _copy_example(tmp_path)
    summary = tmp_path / "step_summary.md"
    env = _environment(tmp_path, GITHUB_STEP_SUMMARY=str(summary), GITHUB_REF="refs/heads/main")
    for attempt in ("first promotion", "against the last promoted"):
        for step in steps:
            if step is install:
                continue
            done = _bash(step["run"], workdir, env)
            assert done.returncode == 0, f"{attempt}: step {step['name']!r} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        report = json.loads((workdir / "out" / "report.json").read_text())
        assert report["gate"]["decision"] == "promote"
        assert (report["gate"]["baseline"] is None) == (attempt == "first promotion")
        if attempt != "first promotion":
            # the promoted artifacts were kept beside their report: timed beside the new ones (the TorchScript file
            # too: the policy trusts its code), not compared with a figure from another run
            latency = {d["artifact"]: d["side_by_side"] for d in report["gate"]["baseline"]["deltas"] if d["kind"] == "latency"}
            assert latency == {"onnx": True, "fp16": True, "torchscript": True}, report["notes"]
        assert (workdir / "out" / "junit.xml").stat().st_size and (workdir / "out" / "report.html").stat().st_size
        shutil.rmtree(workdir / "out")  # a fresh runner
    assert (workdir / "promoted" / "report.json").exists()
    assert summary.read_text().count("✅ PROMOTE") == 2  # each run appended its summary


@pytest.mark.slow(reason="the gate guide end to end through the console script: a promotion, a rejection and a baseline")
def test_the_docs_gate_commands_and_python_snippet_run_as_shown(tmp_path):
    """Through the installed model-convert, from examples/gate/ of a scratch repository root, no PYTHONPATH."""
    folder = repository_root(tmp_path) / "examples" / "gate"
    env = user_environment()
    lines = [line for line in re.search(r"```bash\n(.*?)```", GATE_SECTION, re.S).group(1).splitlines() if line.strip()]
    for line in lines:
        done = _bash(line, folder, env)
        assert done.returncode == 0, f"{line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert json.loads((folder / "out" / "next" / "report.json").read_text())["gate"]["baseline"]["deltas"]
    assert (folder / "out" / "report.html").exists() and (folder / "out" / "summary.md").exists()

    snippet = re.search(r"```python\n(.*?)```", GATE_SECTION, re.S).group(1)
    done = subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("promote") and (tmp_path / "reports" / "last-promoted.json").exists()


GITLAB = yaml.safe_load((REPO / "examples" / "gate" / "gitlab-ci.yml").read_text())


def test_the_gate_guide_shows_both_ci_files_as_they_are():
    for name in ("model-gate.yml", "gitlab-ci.yml"):
        assert (REPO / "examples" / "gate" / name).read_text().rstrip() in GATE_SECTION, name


@pytest.mark.slow(reason="the GitLab job's script as CI runs it: a gate, then a second gate against the promoted baseline")
def test_the_gitlab_job_gates_then_compares_with_the_promoted_baseline(tmp_path):
    """The job's script after its install line, as GitLab runs it (one shell, from the repository root), on the default
    branch twice: a first promotion, then a gate against the run the first one kept."""
    script = GITLAB["model-gate"]["script"]
    assert script[0].startswith("pip install -c requirements.lock")  # the versions `make install` did, already here
    root = repository_root(tmp_path)
    env = {**user_environment(), "CI_COMMIT_BRANCH": "main", "CI_DEFAULT_BRANCH": "main"}
    gate = root / "examples" / "gate"
    for attempt in ("first promotion", "against the last promoted"):
        done = _bash("\n".join(script[1:]), root, env)
        assert done.returncode == 0, f"{attempt}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        report = json.loads((gate / "out" / "report.json").read_text())
        assert report["gate"]["decision"] == "promote"
        assert (report["gate"]["baseline"] is None) == (attempt == "first promotion")
        assert (gate / "out" / "junit.xml").stat().st_size and (gate / "promoted" / "report.json").exists()
        shutil.rmtree(gate / "out")  # a fresh runner; the cache keeps promoted/
