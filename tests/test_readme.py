"""The README's commands run as shown (in a scratch folder with the repository importable)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _block(heading: str, language: str) -> str:
    section = README.split(heading, 1)[1]
    return re.search(rf"```{language}\n(.*?)```", section, re.S).group(1)


USAGE = [line for line in _block("## Usage", "bash").splitlines() if line.strip()]


def _run(argv: list[str], cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _argv(line: str) -> list[str]:
    argv = shlex.split(line)
    if argv[0] == "convert":
        return [sys.executable, "-m", "convert", *argv[1:]]
    return [sys.executable, *argv[1:]] if argv[0] == "python" else argv


@pytest.mark.slow
def test_usage_commands_run_as_shown(tmp_path):
    """In order; the lines between two fixture-building lines each write their own --out, so they run three at a time."""
    groups: list[list[str]] = []
    for line in USAGE:
        if line.startswith("python -m fixtures") or not groups:
            groups += [[line], []]
        else:
            groups[-1].append(line)
    with ThreadPoolExecutor(3) as pool:
        for group in groups:
            for line, done in zip(group, pool.map(lambda line: _run(_argv(line), tmp_path), group)):
                assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"


@pytest.mark.parametrize("heading", ["From Python:", "A Keras model object works the same way", "A JAX model is a flax NNX"])
def test_python_snippet_runs(tmp_path, heading):
    code = _block(heading, "python") + "\nassert result.passed\n"
    done = _run([sys.executable, "-c", code], tmp_path)
    assert done.returncode == 0, done.stderr


def test_make_targets_named_in_the_readme_exist():
    makefile = (REPO / "Makefile").read_text()
    for target in ("demo", "test"):
        assert f"make {target}" in README and re.search(rf"^{target}:", makefile, re.M)
    assert "make test" in (REPO / ".ci" / "run").read_text()
