"""A newcomer's first hour: the README's install lines into a fresh virtual environment, then every ``model-convert``
line the README shows, as typed, from a folder of the user's own outside the repository (tools/newcomer.py builds it:
models of each kind under the README's placeholder names, the model's class in the user's own module file): the first
through that environment's console script, the others in process. ``make newcomer`` runs every line through the fresh
environment's console script. Nothing is downloaded but the packages the install lines name."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, run_cli
from tools import newcomer


def test_the_readme_is_short_and_shows_a_line_for_each_kind_of_model():
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) < 12_500
    lines = newcomer.command_lines()
    for shown in (
        "./my-bert",
        "--task text-generation-with-past",
        "model.pt2",
        "model.pt --trust-code",
        "nets.py:build",
        "model.keras",
        "model.h5",
        "saved_model_dir",
        "--params params.msgpack",
        "model.onnx",
        "gate promotion.yaml",
    ):
        assert any(shown in line for line in lines), shown
    assert newcomer.install_lines() and all(line.startswith('pip install -c requirements.lock ".[') for line in newcomer.install_lines())


@pytest.mark.slow(reason="installs every extra the README names into a fresh environment")
def test_a_newcomer_installs_from_the_readme_and_converts_each_kind_of_model(tmp_path):
    """The install lines into a fresh environment, whose console script runs the README's first line; then every line
    in the user's folder: the later ones through the same entry point in this process, in the project's environment
    (installed from the same lock)."""
    python = newcomer.install(tmp_path / "venv")
    folder = tmp_path / "my-project"
    newcomer.build_user_folder(folder, Path(sys.executable))
    first, *later = newcomer.command_lines()
    done = newcomer.run_line(first, folder, python, folder / "out" / "1")
    assert done.returncode == 0, f"{first}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert "Verdict: PASSED" in done.stdout
    for number, line in enumerate(later, 2):
        run = run_cli(*shlex.split(line)[1:], "--out", str(folder / "out" / str(number)), cwd=folder, timeout=1200)
        assert run.returncode == 0, f"{line}\n{run.output[-4000:]}"
