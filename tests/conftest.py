"""Shared, session-scoped fixtures: the PyTorch fixture files are built once per test session."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
# Every test checks the work of each stage, so the stage cache is off unless a test turns it on with its own folder
# (tests/convert/test_cache.py); nothing is written to the user's ~/.cache either.
os.environ["CONVERT_NO_CACHE"] = "1"
# `make test` runs two xdist workers on the two cores it is sized for: each computes with one OpenMP/BLAS thread (its
# children too), so that neither keeps threads spinning on the core the other computes on. Measured while the other
# worker ran: a 2-layer BERT's forward took 17 ms at two torch threads and 1.6 ms at one. The benchmarks pin their own
# thread counts; a value set in the environment is kept.
for _pool in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")


# `make test-fast` (pytest -m fast) runs every test in these folders and files (unit and layer tests, no conversion of a
# whole model but test_compat's one), marked `fast` below, and the few end-to-end tests marked @pytest.mark.fast in
# their modules (one torch -> ONNX CLI run, a gate run, a real report rendered as Markdown and JUnit XML). Under -m fast, a
# test module with neither is not even imported (the imports of its frameworks would cost more than the fast tests).
FAST = (
    "tests/convert/unit",
    "tests/convert/validators",
    "tests/convert/test_options.py",
    "tests/convert/test_compat.py",
    "tests/convert/test_layers.py",
)


def _in_repo(path: Path) -> str:
    """The path relative to the repository, in POSIX form ("" outside it)."""
    resolved = Path(path).resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else ""


def _in_fast(path: Path) -> bool:
    return _in_repo(path).startswith(FAST)


def pytest_ignore_collect(collection_path: Path, config) -> bool | None:
    if config.getoption("markexpr", "") != "fast" or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    return None if _in_fast(collection_path) or "mark.fast" in collection_path.read_text() else True


# The modules that take longest (setup included; measured with --durations=0 on 2 cores, 2026-11-28), longest first. `make test` spreads
# whole modules over two xdist workers (--dist loadfile) in the order they are collected (pyproject.toml's addopts turn
# off xdist's reordering by test count): started first, they do not leave one worker running a long module alone at the
# end while the other has finished. Every other module keeps its place, after these.
LONGEST_FIRST = (
    "tests/test_readme.py",
    "tests/test_docs.py",  # before the guides' modules that read its page runs (tests/pages.py)
    # not beside the newcomer's installs at the start: each waits on the disk (weights paged in past the memory limit)
    "tests/convert/test_memory_limit.py",
    "tests/test_examples.py",
    "tests/convert/test_weight_only.py",
    "tests/convert/test_transformers.py",
    "tests/test_zoo.py",
    "tests/convert/test_onnx_source.py",
    "tests/convert/test_optimize.py",
    "tests/convert/exporters/test_executorch.py",
    "tests/convert/test_data_validation.py",
    "tests/convert/test_e2e_jax.py",
    "tests/convert/test_gate.py",
    "tests/convert/test_seq2seq_components.py",
    "tests/convert/test_encoder_decoder.py",
    "tests/convert/test_dual_encoder.py",
    "tests/convert/test_transformers_heads.py",
    "tests/convert/test_e2e_keras.py",
)


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        if _in_fast(item.path):
            item.add_marker(pytest.mark.fast)
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(_in_repo(item.path), len(rank)))  # a stable sort: the others keep their order


# A test's setup or call may take this long; past it the test fails, unless it is marked
# @pytest.mark.slow(reason="why it needs longer"). Every such test is listed by `pytest -m slow --collect-only`.
TEST_TIME_LIMIT_S = 120


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when not in ("setup", "call") or not report.passed or report.duration <= TEST_TIME_LIMIT_S:
        return
    marker = item.get_closest_marker("slow")
    if marker is not None and marker.kwargs.get("reason"):
        return
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid}: its {report.when} took {report.duration:.0f} s, past the {TEST_TIME_LIMIT_S} s a test may take "
        "(tests/conftest.py): share its conversions, make its model smaller, or mark it "
        '@pytest.mark.slow(reason="...") saying why it needs longer.'
    )


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


# What only a process of its own shows: the environment a plugin or a path is read from at import, and what the
# frameworks print from C++ to the process's own stderr.
READ_AT_IMPORT = ("CONVERT_PLUGINS", "PYTHONPATH")


def run_cli(*args: str, cwd: Path | None = None, timeout: int = 600, env: dict[str, str] | None = None, process: bool = False) -> CliRun:
    """Run the real command line (``convert ARGS``): in this test process with the framework work in process too
    (CONVERT_NO_ISOLATION: the frameworks are imported once per test process, not twice per run), or, with ``process``
    (or an ``env`` naming what is read at import), as ``python -m convert`` in a child process with the worker process
    of its own that users get. ``env`` adds to or overrides the environment."""
    if process or any(name in (env or {}) for name in READ_AT_IMPORT):
        full = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "200", **(env or {})}
        done = subprocess.run(
            [sys.executable, "-m", "convert", *args], cwd=cwd or REPO, env=full, capture_output=True, text=True, timeout=timeout
        )
        return CliRun(done.returncode, done.stdout, done.stderr)
    return _run_in_this_process(args, cwd or REPO, {"COLUMNS": "200", "CONVERT_NO_ISOLATION": "1", **(env or {})})


def _run_in_this_process(args: tuple[str, ...], cwd: Path, env: dict[str, str]) -> CliRun:
    """``convert ARGS`` through click's test runner, from ``cwd``; what a run may change in this process (the folder,
    the environment, sys.argv and sys.path, the modules it imported from the user's files) is put back afterwards."""
    from click.testing import CliRunner

    from convert.cli import main

    before = (Path.cwd(), dict(os.environ), list(sys.argv), list(sys.path), set(sys.modules))
    sys.argv = ["convert", *args]
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(main, list(args), env=env, prog_name="convert")
    finally:
        os.chdir(before[0])
        os.environ.clear()
        os.environ.update(before[1])
        sys.argv[:] = before[2]
        # a user's folder and model modules go (the next run's file of that name is another); what a library put on
        # the path or imported for itself stays (onnxruntime's quantizer imports its fusion_utils from its own folder)
        sys.path[:] = [entry for entry in sys.path if entry in before[3] or entry.startswith(sys.prefix)]
        for name in set(sys.modules) - before[4]:
            path = getattr(sys.modules[name], "__file__", None) or ""
            if path and not path.startswith((sys.prefix, str(REPO))):
                del sys.modules[name]
    stderr = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        stderr += "".join(traceback.format_exception(result.exception))
    return CliRun(result.exit_code, result.stdout, stderr)


def convert_command(prologue: str, *args: str) -> list[str]:
    """``python -m convert ARGS`` with Python statements run first in that process (not a preexec_fn, which is unsafe
    in a test process that has threads)."""
    return [sys.executable, "-c", f"{prologue}\nimport runpy\nrunpy.run_module('convert', run_name='__main__', alter_sys=True)", *args]


def load_report(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def detail(artifact: dict, kind: str) -> dict | None:
    """An artifact's detail of a kind in a report's JSON (``details``, told apart by ``kind``), or None."""
    return next((d for d in artifact["details"] if d["kind"] == kind), None)


def sizes_checked(artifact: dict, symbol: str) -> set[str]:
    """The sizes a symbolic dim took in an artifact's passed CPU checks."""
    shapes = [c["shape"] for c in artifact["checks"] if c["device"] == "cpu" and c["status"] == "passed"]
    return {part.split("=")[1] for shape in shapes for part in shape.split(",") if part.startswith(symbol + "=")}


def shared_folder(tmp_path_factory, name: str, build: Callable[[Path], object]) -> Path:
    """A folder built once per test session and shared by every pytest-xdist worker (xdist's documented pattern: the
    workers' base folders have one parent; a file lock lets one worker build while the others wait). ``build(folder)``
    fills the empty folder; a build that raises leaves nothing behind, and the next caller builds again.

    What is shared is read by many tests at once: a test that changes the files works on a copy (``shutil.copytree``)."""
    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
    root.mkdir(exist_ok=True)
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            try:
                build(folder)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
            done.touch()
    return folder


class LazyRuns(Mapping):
    """A mapping of names to runs, each run when it is first read: a test of one name (``-k``, ``make test-fast``) runs
    that conversion alone; a test that reads every value runs them all, one at a time."""

    def __init__(self, names: Iterable[str], run: Callable[[str], object]):
        self._names, self._run, self._done = list(names), run, {}

    def __getitem__(self, name: str):
        if name not in self._names:
            raise KeyError(name)
        if name not in self._done:
            self._done[name] = self._run(name)
        return self._done[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


@pytest.fixture(scope="session")
def converted(tmp_path_factory) -> Callable[..., tuple[CliRun, Path]]:
    """``converted(*ARGS, env=None)`` -> (the run, its --out folder): ``python -m convert ARGS --out FOLDER`` run once per
    test session, whichever module or xdist worker asks first; identical command lines (same model, same options) share
    the run and its outputs. The outputs are read-only to the tests: copy them to change them."""

    def convert_once(*args: str, env: dict[str, str] | None = None) -> tuple[CliRun, Path]:
        key = hashlib.sha256(json.dumps([args, sorted((env or {}).items())]).encode()).hexdigest()[:20]

        def build(folder: Path) -> None:
            run = run_cli(*args, "--out", str(folder / "out"), env=env)
            (folder / "run.json").write_text(json.dumps(asdict(run)))

        folder = shared_folder(tmp_path_factory, f"convert-{key}", build)
        return CliRun(**json.loads((folder / "run.json").read_text())), folder / "out"

    return convert_once


@dataclass
class PageRun:
    root: Path  # the scratch repository root the page ran in
    lines: list  # tests.pages.LineRun, one a line run, in order

    def folder(self, page: str) -> Path:
        """The folder the page's commands ran from."""
        from tests.pages import FOLDERS

        return self.root / FOLDERS.get(page, ".")


@pytest.fixture(scope="session")
def page_run(tmp_path_factory) -> Callable[[str], PageRun]:
    """``page_run(PAGE)``: a documentation page's commands run in order in a scratch repository root (tests/pages.py),
    once per test session, whichever module or xdist worker asks first: the docs test checks each line's exit code, and
    the guide's own module checks what its lines made. The outputs are read-only to the tests: copy them to change them."""
    from tests.pages import LineRun, repository_root, run_page

    def run(page: str) -> PageRun:
        def build(folder: Path) -> None:
            (folder / "root").mkdir()
            ran = run_page(page, repository_root(folder / "root"))
            (folder / "lines.json").write_text(json.dumps([asdict(line) for line in ran]))

        folder = shared_folder(tmp_path_factory, "page-" + page.replace("/", "-").removesuffix(".md"), build)
        return PageRun(folder / "root", [LineRun(**line) for line in json.loads((folder / "lines.json").read_text())])

    return run


@pytest.fixture(scope="session")
def torch_files(tmp_path_factory) -> Path:
    """Every PyTorch fixture written in every form (see fixtures/build_torch.py), once per session for every worker."""

    def build(folder: Path) -> None:
        from fixtures.build_torch import write_fixture
        from fixtures.torch_models import FIXTURES

        for name in FIXTURES:
            write_fixture(name, folder)

    return shared_folder(tmp_path_factory, "torch_fixtures", build)


def _build_fixtures(module: str, folder: Path) -> Path:
    """Run a fixture writer in a child process, so that its framework is not loaded into the test process."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", module, str(folder)], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


@pytest.fixture(scope="session")
def keras_files(tmp_path_factory) -> Path:
    """Every Keras fixture written in every form (see fixtures/build_keras.py), once per session for every worker."""
    return shared_folder(tmp_path_factory, "keras_fixtures", lambda folder: _build_fixtures("fixtures.build_keras", folder))


@pytest.fixture(scope="session")
def jax_files(tmp_path_factory) -> Path:
    """The params files of the JAX fixtures (see fixtures/build_jax.py), once per session for every worker."""
    return shared_folder(tmp_path_factory, "jax_fixtures", lambda folder: _build_fixtures("fixtures.build_jax", folder))
