"""A newcomer's first hour: the README's install lines into a fresh virtual environment, then every ``model-convert``
line the README shows, as typed, through that environment's console script, from a folder of the user's own outside
the repository (tools/newcomer.py builds it: models of each kind under the README's placeholder names, the model's
class in the user's own module file). Nothing is downloaded but the packages the install lines name."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
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


@pytest.mark.slow(reason="installs every extra the README names into a fresh environment, then runs each of its 11 lines")
def test_a_newcomer_installs_from_the_readme_and_converts_each_kind_of_model(tmp_path, capsys):
    code = newcomer.main(["--venv", str(tmp_path / "venv"), "--folder", str(tmp_path / "my-project")])
    printed = capsys.readouterr().out
    assert code == 0, printed[-8000:]
    assert printed.count("[ok]") == len(newcomer.command_lines())
