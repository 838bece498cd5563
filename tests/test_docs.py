"""The documentation site tells the truth: it builds strictly, and every command a page shows runs as shown, through
the installed ``model-convert``, from the folder the page names, with no extra environment (the environment's bin folder
first on PATH, as activating it does, and no PYTHONPATH).

A page's ``bash`` blocks are commands to run; ``console`` blocks are set-up lines (``pip install``, ``make``) that the
newcomer replay (tests/test_readme.py) and CI run; ``python`` blocks of the Python API guide run as scripts.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tools.newcomer import activated_environment

DOCS = REPO / "docs"
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
# pages whose commands a test of its own runs with closer checks of what they make, through the console script too
DEDICATED = {
    "how-to/hugging-face.md": "tests/convert/test_transformers.py",
    "how-to/gate.md": "tests/test_examples.py",
    "how-to/batch.md": "tests/convert/test_batch.py",
}
# the folder a page's commands run from, relative to the repository root, and the words by which the page says so
FOLDERS = {"how-to/gate.md": "examples/gate"}
SAYS = {".": "from the repository root", "examples/gate": "from `examples/gate/`"}  # in lower case
FENCES = ("bash", "console", "python", "yaml", "text", "")


def page_text(page: str) -> str:
    return (DOCS / page).read_text()


def blocks(page: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page_text(page), re.S)


def command_lines(page: str) -> list[str]:
    return [line for block in blocks(page, "bash") for line in block.splitlines() if line.strip()]


def expected_exit_code(line: str) -> int:
    """0, or what the line's own comment says it exits with on this machine (``# exit code 1 without TensorRT``)."""
    said = re.search(r"# exit code (\d+) without (\w+)", line)
    if said is None:
        return 0
    assert said[2] == "TensorRT" and importlib.util.find_spec("tensorrt") is None, f"{line}: this machine has {said[2]}"
    return int(said[1])


def user_environment() -> dict[str, str]:
    """A shell with the project's environment activated: its bin folder first on PATH, nothing on PYTHONPATH."""
    return activated_environment(Path(sys.executable))


def repository_root(tmp_path: Path) -> Path:
    """A scratch copy of what the commands read at the repository root: fixtures/ and examples/ (nothing is written
    into the repository itself)."""
    (tmp_path / "fixtures").symlink_to(REPO / "fixtures")
    shutil.copytree(REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("out", "models", "reports", "promoted"))
    return tmp_path


RUN_HERE = [page for page in PAGES if command_lines(page) and page not in DEDICATED]


def test_the_site_builds_strictly(tmp_path):
    """Every link and anchor resolves and every generated reference renders (mkdocs.yml sets strict)."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert "--trust-code" in cli and "Every run option on every surface" in cli and "<!-- generated" not in cli


def test_every_page_is_in_the_navigation_and_every_fence_is_a_known_kind():
    nav = (REPO / "mkdocs.yml").read_text()
    for page in PAGES:
        assert f": {page}" in nav, f"{page} is not in mkdocs.yml's nav"
        for fence in re.findall(r"^```(\w*)$", page_text(page), re.M):
            assert fence in FENCES, f"{page}: a ```{fence} block is neither run nor declared as set-up"


def test_each_page_that_shows_commands_says_where_they_run():
    for page in {*RUN_HERE, *DEDICATED}:
        assert SAYS[FOLDERS.get(page, ".")] in page_text(page).lower(), f"{page} does not say where its commands run"


def test_the_pages_with_a_test_of_their_own_are_read_by_it():
    for page, test in DEDICATED.items():
        assert command_lines(page) and f'"{page}"' in (REPO / test).read_text(), f"{test} does not run {page}"


def test_console_blocks_hold_only_set_up_lines():
    """A console block is shown, not run here: only the install and make lines, which CI and the newcomer replay run."""
    for page in PAGES:
        for block in blocks(page, "console"):
            for line in filter(str.strip, block.splitlines()):
                assert line.startswith(("pip install ", "make ")), f"{page}: {line!r} in a console block is run by no test"


def test_no_two_lines_of_a_page_write_the_same_output_folder():
    """Lines run in order in one folder: a second run into the same --out (out/ when none is given) stops with "the
    output already exists". The guides run by their own tests (with outputs of their own) are held to it here."""
    for page in PAGES:
        folders = [
            line.split(" --out ")[1].split()[0] if " --out " in line else "out"
            for line in command_lines(page)
            if line.startswith("model-convert ")
            and line.split()[1] not in ("gate", "batch", "report", "doctor")
            and not line.startswith("model-convert --")
        ]
        repeated = {folder for folder in folders if folders.count(folder) > 1}
        assert not repeated, f"{page}: more than one line writes {repeated}"


# pages whose commands take near or past the time one test may take (tests/conftest.py), and why
LONG_PAGES = {
    "getting-started.md": "the tour converts a model of each kind through the console script",
    "how-to/composites.md": "an encoder-decoder, a dual encoder and a diffusion pipeline, each converted as its components",
    "how-to/optimize.md": "every optimization pass on one model, then --optimize auto measuring each candidate",
}


@pytest.mark.parametrize(
    "page", [pytest.param(page, marks=pytest.mark.slow(reason=LONG_PAGES[page])) if page in LONG_PAGES else page for page in RUN_HERE]
)
def test_the_commands_of_a_page_run_as_shown(page, tmp_path):
    """In order, in one scratch repository root per page: a page's first lines build what its later lines use."""
    folder = repository_root(tmp_path) / FOLDERS.get(page, ".")
    for line in command_lines(page):
        done = subprocess.run(["bash", "-e", "-c", line], cwd=folder, env=user_environment(), capture_output=True, text=True, timeout=900)
        assert done.returncode == expected_exit_code(line), f"{page}: {line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        assert "Traceback" not in done.stderr, f"{page}: {line}\n{done.stderr[-3000:]}"


@pytest.mark.parametrize("number", range(len(blocks("how-to/python-api.md", "python"))))
def test_the_python_api_snippets_run_as_shown(number, tmp_path):
    code = blocks("how-to/python-api.md", "python")[number] + "\nassert result.passed\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=repository_root(tmp_path), env=user_environment(), capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]


def test_make_targets_named_in_the_docs_exist():
    makefile = (REPO / "Makefile").read_text()
    shown = {target for page in PAGES for block in blocks(page, "console") for target in re.findall(r"^make ([\w-]+)", block, re.M)}
    shown |= set(re.findall(r"^make ([\w-]+)", (REPO / "README.md").read_text(), re.M))
    assert shown >= {"demo", "test"}
    for target in shown:
        assert re.search(rf"^{target}:", makefile, re.M), f"make {target} is shown but the Makefile has no such target"
    assert "make test" in (REPO / ".ci" / "run").read_text()


def test_the_docs_name_the_report_schema_version_there_is():
    from convert.reports.model import SCHEMA_VERSION
    from convert.reports.versions import SCHEMA_CHANGES

    for page in PAGES:
        for named in re.findall(r"schema version `(\d+\.\d+)`", page_text(page)):
            assert named == SCHEMA_VERSION, f"{page} says the report schema is {named}; it is {SCHEMA_VERSION}"
    assert next(iter(SCHEMA_CHANGES)) == SCHEMA_VERSION, "convert/reports/versions.py: say what this version changed"
    major, minor = map(int, SCHEMA_VERSION.split("."))
    expected = {f"1.{m}" for m in range(10)} | {f"{major}.{m}" for m in range(minor + 1)}  # 1.x ended at 1.9
    assert set(SCHEMA_CHANGES) == expected, "the changelog skips or invents a version"
