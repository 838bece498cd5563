"""What the wheel installs: the one top-level package convert, with the numerics as convert.validators.

A top-level ``validators`` would replace the PyPI package of that name in the user's environment, and fixtures/ (the
test models) is not part of the product. The wheel is built from a copy of the sources, with the build backend already
installed (no network, no build/ folder left in the repository).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO

# Every top-level folder that is a Python package, so that the wheel has the chance to take one it should not.
SOURCES = ["pyproject.toml", "README.md", *sorted(p.parent.name for p in REPO.glob("*/__init__.py"))]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    assert importlib.util.find_spec("setuptools"), "building the wheel needs setuptools (the dev extra installs it)"
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in SOURCES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(REPO / name, source / name)
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet", "-w", str(out), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    [built] = out.glob("*.whl")
    with zipfile.ZipFile(built) as archive:
        yield archive


def _packages(names: list[str]) -> list[str]:
    return [name for name in names if not name.split("/")[0].endswith(".dist-info")]


def test_the_only_top_level_package_is_convert(wheel):
    names = _packages(wheel.namelist())
    assert {name.split("/")[0] for name in names} == {"convert"}
    assert not [name for name in names if name.startswith(("validators/", "fixtures/"))]
    assert not [name for name in names if "/fixtures/" in name or name.startswith("convert/tests/")]
    [top_level] = [name for name in wheel.namelist() if name.endswith(".dist-info/top_level.txt")]
    assert wheel.read(top_level).decode().split() == ["convert"]


def test_every_module_is_in_the_wheel(wheel):
    expected = {f"convert/{path.relative_to(REPO / 'convert').as_posix()}" for path in (REPO / "convert").rglob("*.py")}
    assert expected - set(wheel.namelist()) == set()


def test_the_installed_numerics_are_convert_validators(wheel, tmp_path):
    """Unpacked (a pure wheel installs by unpacking), ``import convert.validators`` takes the wheel's copy."""
    site = tmp_path / "site"
    wheel.extractall(site)
    code = (
        "import convert, convert.validators as v; from convert.validators.tolerances import TolerancePolicy; "
        "print(convert.__file__); print(v.__file__)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(site)}
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == [str(site / "convert" / "__init__.py"), str(site / "convert" / "validators" / "__init__.py")]


def test_a_checkout_imports_its_own_numerics(tmp_path):
    """Run from the repository (PYTHONPATH, as the tests and benchmarks do), convert.validators is this checkout's,
    whatever install of the project the environment holds."""
    code = "import convert.validators as v; print(v.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert Path(done.stdout.strip()) == REPO / "convert" / "validators" / "__init__.py"
