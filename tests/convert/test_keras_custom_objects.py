"""A .keras archive whose custom layer is registered in the user's own module: with --trust-code that module is
imported (from the working folder or PYTHONPATH) before Keras loads the archive; without it, or when the module
cannot be imported, one paragraph says what to do (exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, CliRun, convert_command, load_report, run_cli

MODULE = """
import keras


@keras.saving.register_keras_serializable(package="my_layers")
class Scale(keras.layers.Layer):
    def __init__(self, factor=2.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}
"""

# m.keras takes Scale from my_layers; main.keras a class defined in the saving script itself, for which Keras saves no module
BUILD = """
import keras
from my_layers import Scale


@keras.saving.register_keras_serializable(package="script")
class Shift(keras.layers.Layer):
    def call(self, x):
        return x + 1.0


inputs = keras.Input((4,), name="x")
keras.Model(inputs, Scale(3.0)(keras.layers.Dense(3)(inputs))).save("m.keras")
keras.Model(inputs, Shift()(inputs)).save("main.keras")
"""


@pytest.fixture(scope="module")
def code(tmp_path_factory) -> Path:
    """A folder holding my_layers.py and the archives saved from it (written in a child process: no TensorFlow here)."""
    folder = tmp_path_factory.mktemp("custom_keras")
    (folder / "my_layers.py").write_text(MODULE)
    (folder / "build.py").write_text(BUILD)
    done = subprocess.run([sys.executable, "build.py"], cwd=folder, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


def _error(run: CliRun) -> str:
    """The one paragraph a user error prints."""
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.output
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    return errors[0]


def _assert_onnx_passed(out: Path) -> None:
    report = load_report(out / "report.json")
    assert report["passed"] is True and report["source"]["kind"] == "keras"
    (artifact,) = report["artifacts"]
    assert artifact["format"] == "onnx" and artifact["passed"] is True
    cpu = [c for c in artifact["checks"] if c["device"] == "cpu"]
    assert cpu and all(c["status"] == "passed" for c in cpu), cpu


def test_trusted_archive_imports_its_module_from_the_working_folder(code, tmp_path):
    out = tmp_path / "out"
    # as the installed console script starts: neither '' nor the working folder on sys.path (python -m would add it)
    prologue = "import os, sys\nsys.path[:] = [p for p in sys.path if p not in ('', os.getcwd())]"
    done = subprocess.run(
        convert_command(prologue, "m.keras", "--to", "onnx", "--trust-code", "--out", str(out)),
        cwd=code,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    _assert_onnx_passed(out)


def test_trusted_archive_imports_its_module_from_pythonpath(code, tmp_path):
    out = tmp_path / "out"
    run = run_cli(
        str(code / "m.keras"),
        "--to",
        "onnx",
        "--trust-code",
        "--out",
        str(out),
        cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(REPO), str(code)])},
    )
    assert run.returncode == 0, run.output
    _assert_onnx_passed(out)


def test_without_trust_code_the_archive_is_refused_naming_its_module(code, tmp_path):
    error = _error(run_cli("m.keras", "--to", "onnx", "--out", str(tmp_path / "out"), cwd=code))
    assert "'my_layers.Scale', from outside Keras" in error and "--trust-code" in error


def test_a_module_that_cannot_be_found_is_named_with_the_next_step(code, tmp_path):
    error = _error(run_cli(str(code / "m.keras"), "--to", "onnx", "--trust-code", "--out", str(tmp_path / "out"), cwd=tmp_path))
    assert "the module 'my_layers', which cannot be imported here" in error
    assert "PYTHONPATH" in error and "run convert from that folder" in error


def test_a_module_that_fails_to_import_is_reported_with_its_error(code, tmp_path):
    (tmp_path / "my_layers.py").write_text("raise RuntimeError('no GPU driver')\n")
    error = _error(run_cli(str(code / "m.keras"), "--to", "onnx", "--trust-code", "--out", str(tmp_path / "out"), cwd=tmp_path))
    assert "importing the module 'my_layers'" in error and "RuntimeError: no GPU driver" in error


def test_a_module_that_does_not_register_the_class_is_named(code, tmp_path):
    (tmp_path / "my_layers.py").write_text("Scale = None\n")
    error = _error(run_cli(str(code / "m.keras"), "--to", "onnx", "--trust-code", "--out", str(tmp_path / "out"), cwd=tmp_path))
    assert "Keras cannot load" in error and "registered in its module (my_layers)" in error


def test_custom_objects_saved_from_a_script_fail_with_the_fix(code, tmp_path):
    error = _error(run_cli("main.keras", "--to", "onnx", "--trust-code", "--out", str(tmp_path / "out"), cwd=code))
    assert "Its config names script>Shift with no module to import from" in error and "move it into a module file" in error
