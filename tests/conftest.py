"""Shared, session-scoped fixtures: the PyTorch fixture files are built once per test session."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Every test checks the work of each stage, so the stage cache is off unless a test turns it on with its own folder
# (tests/convert/test_cache.py); nothing is written to the user's ~/.cache either.
os.environ["CONVERT_NO_CACHE"] = "1"


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_cli(*args: str, cwd: Path | None = None, timeout: int = 600, env: dict[str, str] | None = None) -> CliRun:
    """Run the real command line (python -m convert) in a child process (``env`` adds to or overrides the environment)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "convert", *args], cwd=cwd or REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    return CliRun(done.returncode, done.stdout, done.stderr)


def convert_command(prologue: str, *args: str) -> list[str]:
    """``python -m convert ARGS`` with Python statements run first in that process (not a preexec_fn, which is unsafe
    in a test process that has threads)."""
    return [sys.executable, "-c", f"{prologue}\nimport runpy\nrunpy.run_module('convert', run_name='__main__', alter_sys=True)", *args]


def load_report(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def sizes_checked(artifact: dict, symbol: str) -> set[str]:
    """The sizes a symbolic dim took in an artifact's passed CPU checks."""
    shapes = [c["shape"] for c in artifact["checks"] if c["device"] == "cpu" and c["status"] == "passed"]
    return {part.split("=")[1] for shape in shapes for part in shape.split(",") if part.startswith(symbol + "=")}


@pytest.fixture(scope="session")
def torch_files(tmp_path_factory) -> Path:
    """Every PyTorch fixture written in every form (see fixtures/build_torch.py)."""
    from fixtures.build_torch import write_fixture
    from fixtures.torch_models import FIXTURES

    folder = tmp_path_factory.mktemp("torch_fixtures")
    for name in FIXTURES:
        write_fixture(name, folder)
    return folder


def _build_fixtures(module: str, folder: Path) -> Path:
    """Run a fixture writer in a child process, so that its framework is not loaded into the test process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", module, str(folder)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


@pytest.fixture(scope="session")
def keras_files(tmp_path_factory) -> Path:
    """Every Keras fixture written in every form (see fixtures/build_keras.py)."""
    return _build_fixtures("fixtures.build_keras", tmp_path_factory.mktemp("keras_fixtures"))


@pytest.fixture(scope="session")
def jax_files(tmp_path_factory) -> Path:
    """The params files of the JAX fixtures (see fixtures/build_jax.py)."""
    return _build_fixtures("fixtures.build_jax", tmp_path_factory.mktemp("jax_fixtures"))
