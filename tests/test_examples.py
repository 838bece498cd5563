"""The gate's documentation runs as shown: the README's gate commands and Python snippet, and the commands of the
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

README = (REPO / "README.md").read_text()
WORKFLOW = yaml.safe_load((REPO / "examples" / "gate" / "model-gate.yml").read_text())
GATE_SECTION = README.split("## Promotion gate", 1)[1].split("\n## ", 1)[0]


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_the_readme_gate_commands_and_python_snippet_run_as_shown(tmp_path):
    folder = _copy_example(tmp_path)
    env = _environment(tmp_path)
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
