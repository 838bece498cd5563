"""The documentation site tells the truth: it builds strictly, and every command a page shows runs as shown, from the
folder the page names, with no extra environment (the environment's bin folder first on PATH, as activating it does, and
no PYTHONPATH): a page's first ``model-convert`` line and its other commands through the installed console script, its
later ``model-convert`` lines in process (tests/pages.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.pages import FOLDERS, PAGES, blocks, command_lines, expected_exit_code, page_text, repository_root, user_environment

# pages whose commands a test of its own runs with closer checks of what they make, through the console script too
DEDICATED = {
    "how-to/hugging-face.md": "tests/convert/test_transformers.py",
    "how-to/gate.md": "tests/test_examples.py",
    "how-to/batch.md": "tests/convert/test_batch.py",
}
# the words by which a page says which folder its commands run from (in lower case)
SAYS = {".": "from the repository root", "examples/gate": "from `examples/gate/`"}
FENCES = ("bash", "console", "python", "yaml", "text", "")


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
def test_the_commands_of_a_page_run_as_shown(page, page_run):
    """In order, in one scratch repository root per page: a page's first lines build what its later lines use."""
    ran = page_run(page).lines
    assert [run.line for run in ran] == command_lines(page), (
        f"{page}: stopped at {ran[-1].line}\n{ran[-1].stdout[-3000:]}\n{ran[-1].stderr[-3000:]}"
    )
    for run in ran:
        assert run.returncode == expected_exit_code(run.line), f"{page}: {run.line}\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
        assert "Traceback" not in run.stderr, f"{page}: {run.line}\n{run.stderr[-3000:]}"
    assert any(run.console_script and run.line.startswith("model-convert ") for run in ran), (
        f"{page}: no line ran through the console script"
    )


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
