"""The documentation's pages as the tests read and run them: their fenced blocks, the folder their commands run from,
and a page's commands run in order in a scratch repository root.

A page's ``bash`` blocks are commands to run; ``console`` blocks are set-up lines (``pip install``, ``make``) that the
newcomer replay (tests/test_readme.py) and CI run; ``python`` blocks of the Python API guide run as scripts.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import REPO, run_cli
from tools.newcomer import activated_environment

DOCS = REPO / "docs"
PAGES = sorted(path.relative_to(DOCS).as_posix() for path in DOCS.rglob("*.md"))
# the folder a page's commands run from, relative to the repository root (the repository root itself when not named)
FOLDERS = {"how-to/gate.md": "examples/gate"}


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


@dataclass
class LineRun:
    line: str
    returncode: int
    stdout: str
    stderr: str
    console_script: bool  # run through the installed model-convert in a shell, not in this process

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def report(self, folder: Path) -> dict | None:
        """The report the line wrote under its --out, read from ``folder`` (the folder the page ran from), with its
        artifacts' paths, which the line gave relative to that folder, made absolute."""
        path = folder / self.line.split(" --out ")[1].split()[0] / "report.json"
        if not path.exists():
            return None
        report = json.loads(path.read_text())
        for artifact in report["artifacts"]:
            artifact["path"] = str(folder / artifact["path"])
        return report


def run_page(page: str, root: Path) -> list[LineRun]:
    """A page's command lines in order, from its folder in ``root`` (a scratch repository root), until one exits other
    than the page says. Each runs as shown: the page's first ``model-convert`` line and every other command through a
    shell with the project's environment activated (the installed console script); the later ``model-convert`` lines,
    the same command line through the same entry point, in this process (the frameworks are imported once, not once a
    line)."""
    folder = root / FOLDERS.get(page, ".")
    ran: list[LineRun] = []
    for line in command_lines(page):
        in_process = line.startswith("model-convert ") and any(r.console_script and r.line.startswith("model-convert ") for r in ran)
        if in_process:
            done = run_cli(*shlex.split(line, comments=True)[1:], cwd=folder, timeout=900)
            ran.append(LineRun(line, done.returncode, done.stdout, done.stderr, console_script=False))
        else:
            done = subprocess.run(
                ["bash", "-e", "-c", line], cwd=folder, env=user_environment(), capture_output=True, text=True, timeout=900
            )
            ran.append(LineRun(line, done.returncode, done.stdout, done.stderr, console_script=True))
        if ran[-1].returncode != expected_exit_code(line):
            break
    return ran
