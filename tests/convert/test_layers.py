"""The layers' import rule, read from the source (every import statement, those inside functions included).

Every package of convert/ (each folder with an ``__init__.py``, found by scanning, so a new one is covered the day it
appears) declares what it may not import, and no two packages or top-level modules import each other, directly or
round a circle. The circle rule counts every import statement, those inside functions and under ``TYPE_CHECKING``
included: deferring an import hides a circle from the interpreter, not from the reader, and a package that needs the
one above it is no longer below it. Among single modules, where a deferred import is how a package's parts may
refer to each other, the rule counts the imports that run when the module is imported (module level, outside
``TYPE_CHECKING``): those may form no circle at all.

Sources, exporters, optimizers and runtimes share what one technology needs through ``convert/backends/``, and never
import each other: a runtime imports no optimizer or exporter, an optimizer no runtime or exporter, an exporter no
runtime or optimizer, a source none of the three. Only the code that loads a source imports a framework's source
module; what several sources share (the PyTorch source model) only the sources import. The backends sit below the
layers: they import nothing of them (not even the SourceModel protocol), and their framework inside functions:
``import convert`` imports none. Plain-text helpers live in ``convert/text.py``: the rich console renderer is imported by the reports and the
CLI only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

CONVERT = REPO / "convert"
MODULES = sorted(CONVERT.rglob("*.py"))

# The ways in: nothing below them imports one.
ENTRY_POINTS = ("convert.cli", "convert.api", "convert.batch", "convert.engines", "convert.gate")
# What each package may not import (every package of convert/ has an entry: test_every_package_declares_its_layer).
FORBIDDEN = {
    "sources": ("convert.exporters", "convert.optimizers", "convert.runtimes"),
    "exporters": ("convert.optimizers", "convert.runtimes"),
    "optimizers": ("convert.exporters", "convert.runtimes"),
    "runtimes": ("convert.exporters", "convert.optimizers"),
    "backends": ("convert.sources", "convert.exporters", "convert.optimizers", "convert.runtimes", "convert.reports"),
    # the checks of a composite's artifacts run together load the library's model through the resolver, and run ONNX files
    "assembled": ("convert.exporters", "convert.optimizers", "convert.pipeline", *ENTRY_POINTS),
    # the numerics: arrays in, metrics out; they know nothing of the tool around them but its errors
    "validators": (
        "convert.sources",
        "convert.exporters",
        "convert.optimizers",
        "convert.runtimes",
        "convert.backends",
        "convert.reports",
        "convert.pipeline",
        "convert.worker",
        "convert.checks",
        "convert.packagers",
        *ENTRY_POINTS,
    ),
    # the report's schema and its renderings read a report, never the run that makes one, nor the policy that judges it
    "reports": (
        "convert.policy",
        "convert.batch",
        "convert.pipeline",
        "convert.worker",
        "convert.checks",
        "convert.sources",
        "convert.exporters",
        "convert.optimizers",
        "convert.runtimes",
        "convert.packagers",
        "convert.cli",
        "convert.api",
        "convert.engines",
        "convert.gate",
    ),
    "packagers": (
        "convert.sources",
        "convert.exporters",
        "convert.optimizers",
        "convert.runtimes",
        "convert.pipeline",
        "convert.worker",
        "convert.checks",
        *ENTRY_POINTS,
    ),
    "worker": ("convert.pipeline", *ENTRY_POINTS),
    "checks": ("convert.pipeline", *ENTRY_POINTS),
    "pipeline": ENTRY_POINTS,
    "gate": ("convert.cli", "convert.api", "convert.batch", "convert.engines"),
    "engines": ("convert.batch", "convert.pipeline", "convert.gate", "convert.cli", "convert.api"),
}
# The exporters' protocol (strategies tried in order, each a recorded attempt), which every optimizer is built on:
# an Optimizer is an Exporter of an artifact, its OptimizeJob an ExportJob.
ALLOWED = {"optimizers": ("convert.exporters.base",)}
# What the layers above the backends may import from convert/sources: the SourceModel protocol, the request, the
# signature helpers. The backends may not: they sit below the sources.
SOURCE_TYPES = ("convert.sources.base", "convert.sources.request", "convert.sources.signature")
# What the sources share among themselves (the TorchSource every PyTorch-based source gives): imported by sources only.
SOURCES_SHARED = ("convert.sources.torch_model",)
# The code that truly loads a source: the resolver, and the worker's Session (through the resolver).
SOURCE_LOADERS = ("convert.sources.resolve", "convert.worker")
# A composite's component loaders (convert/composites.py) load each network with the framework source it is made of.
COMPONENT_LOADERS = {
    "convert.sources.encoder_decoder": ("convert.sources.transformers",),
    "convert.sources.dual_encoder": ("convert.sources.transformers",),
    "convert.sources.diffusion_pipeline": ("convert.sources.diffusers", "convert.sources.transformers"),
    # an encoder-decoder's generation check loads the library's model as its component loader does, and reads its specs
    "convert.assembled.encoder_decoder": ("convert.sources.encoder_decoder",),
}
# convert.sources.torch, .keras, .jax: every source module but the package, the resolver and the shared types
FRAMEWORK_SOURCES = tuple(
    f"convert.sources.{path.stem}"
    for path in sorted((CONVERT / "sources").glob("*.py"))
    if path.stem not in ("__init__", "resolve") and f"convert.sources.{path.stem}" not in SOURCE_TYPES + SOURCES_SHARED
)
# Imported at module level by no backend: each imports its framework inside the functions that need it.
FRAMEWORKS = ("torch", "tensorflow", "keras", "jax", "flax", "onnx", "onnxruntime", "openvino", "nncf", "tensorrt", "cuda", "tf2onnx")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _run_on_import(body: list[ast.stmt]) -> list[ast.stmt]:
    """The statements of a module body that run when it is imported: into ``if``/``try`` blocks, but not ``if
    TYPE_CHECKING:`` (nor into functions and classes' methods)."""
    found: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            found.extend(_run_on_import(node.orelse))
        elif isinstance(node, (ast.If, ast.Try)):
            handlers = [statement for handler in getattr(node, "handlers", []) for statement in handler.body]
            found.extend(_run_on_import([*node.body, *node.orelse, *handlers, *getattr(node, "finalbody", [])]))
        else:
            found.append(node)
    return found


def imports(path: Path, top_level_only: bool = False, name: str | None = None) -> set[str]:
    """Every module an import statement of the file names: ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (c may
    be a module); relative imports are resolved against the file's package (that of module ``name`` when given).
    ``top_level_only``: only the imports that run when the module is imported."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = _run_on_import(tree.body) if top_level_only else ast.walk(tree)
    name = name or module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def layer_of(path: Path) -> str | None:
    parts = path.relative_to(CONVERT).parts
    return parts[0] if len(parts) > 1 and parts[0] in FORBIDDEN else None


def allowed(layer: str) -> tuple[str, ...]:
    """What of the layers FORBIDDEN names this layer may import all the same."""
    return ALLOWED.get(layer, ()) + (() if layer == "backends" else SOURCE_TYPES)


def test_the_rule_reads_imports_inside_functions_and_relative_ones(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from . import base\n\n\ndef f():\n    from convert.optimizers.openvino import IR_NAME\n    from ..sources import torch\n"
    )
    found = imports(probe, name="convert.runtimes.probe")
    assert {"convert.runtimes.base", "convert.optimizers.openvino", "convert.sources.torch"} <= found
    assert "convert.optimizers.openvino" not in imports(probe, top_level_only=True, name="convert.runtimes.probe")


def test_a_backend_may_not_import_even_the_source_types():
    for name in (*SOURCE_TYPES, *SOURCES_SHARED, "convert.sources.torch"):
        assert within(name, FORBIDDEN["backends"]) and not within(name, allowed("backends")), name
    assert all(within(name, allowed("exporters")) for name in SOURCE_TYPES)


LAYER_MODULES = [path for path in MODULES if layer_of(path)]


@pytest.mark.parametrize("path", LAYER_MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_a_layer_imports_no_other_layer(path):
    layer = layer_of(path)
    wrong = sorted(name for name in imports(path) if within(name, FORBIDDEN[layer]) and not within(name, allowed(layer)))
    assert not wrong, f"{path.relative_to(REPO)} ({layer}) imports {wrong}: what layers share belongs in convert/backends/"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_only_the_source_loaders_import_a_framework_source(path):
    name = module_name(path)
    if within(name, SOURCE_LOADERS):
        return
    allowed = (name, *COMPONENT_LOADERS.get(name, ()))
    wrong = sorted(n for n in imports(path) if within(n, FRAMEWORK_SOURCES) and not within(n, allowed))
    assert not wrong, f"{path.relative_to(REPO)} imports {wrong}: a framework's shared helpers belong in convert/backends/"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_only_the_sources_import_what_the_sources_share(path):
    if within(module_name(path), ("convert.sources",)):
        return
    wrong = sorted(n for n in imports(path) if within(n, SOURCES_SHARED))
    assert not wrong, f"{path.relative_to(REPO)} imports {wrong}: what other layers need of a framework belongs in convert/backends/"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(REPO)))
def test_only_the_reports_and_the_cli_import_the_console_renderer(path):
    relative = path.relative_to(CONVERT)
    if relative.parts[0] == "reports" or relative == Path("cli.py"):
        return
    wrong = sorted(n for n in imports(path) if within(n, ("convert.reports.console",)))
    assert not wrong, f"{path.relative_to(REPO)} imports {wrong}: plain-text helpers are in convert/text.py"


def test_there_is_one_backend_per_technology():
    assert {p.stem for p in (CONVERT / "backends").glob("*.py")} >= {"__init__", "torch", "tf", "onnx", "openvino", "tensorrt"}


@pytest.mark.parametrize("path", sorted((CONVERT / "backends").glob("*.py")), ids=lambda p: p.name)
def test_a_backend_imports_its_framework_inside_functions(path):
    wrong = sorted(n for n in imports(path, top_level_only=True) if n.split(".")[0] in FRAMEWORKS)
    assert not wrong, f"{path.relative_to(REPO)} imports {wrong} at module level"


# -------------------------------------------------------------------------------------------------------------------
# Every package declares its layer, and no circles

PACKAGES = sorted(path.parent.name for path in CONVERT.glob("*/__init__.py"))
NAMES = {module_name(path) for path in MODULES}


def unit(name: str) -> str | None:
    """The package (convert.reports) or top-level module (convert.options) a module belongs to; None for the root
    package, whose lazy attributes are the public facade over the entry points."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 and parts[0] == "convert" else None


def unit_imports() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) → where: every import statement between two units, function-level included."""
    found: dict[tuple[str, str], list[str]] = {}
    for path in MODULES:
        source = unit(module_name(path))
        for name in imports(path):
            target = unit(name)
            if source and target and target != source and any(within(n, (target,)) for n in NAMES):
                found.setdefault((source, target), []).append(str(path.relative_to(REPO)))
    return found


def circles(edges: set[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm), each sorted."""
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_circle_finder_finds_a_circle_and_only_one():
    assert circles({("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")}) == [["a", "b", "c"]]
    assert circles({("a", "b"), ("b", "c")}) == []


def test_every_package_declares_its_layer():
    undeclared = [name for name in PACKAGES if name not in FORBIDDEN]
    assert not undeclared, f"convert/{undeclared[0]}/ declares no layer: add what it may not import to FORBIDDEN"
    assert "reports" in PACKAGES and "gate" in PACKAGES and "pipeline" in PACKAGES


def test_no_circle_between_packages_and_top_level_modules():
    edges = unit_imports()
    found = circles(set(edges))
    described = [
        " → ".join(component) + ":\n" + "\n".join(f"  {s} → {t} ({edges[(s, t)][0]})" for s, t in edges if {s, t} <= set(component))
        for component in found
    ]
    assert not found, "import circles (a deferred import counts):\n" + "\n".join(described)


def test_no_circle_among_the_imports_that_run_on_import():
    edges = set()
    for path in MODULES:
        name = module_name(path)
        for imported in imports(path, top_level_only=True):
            if imported in NAMES and imported != name:
                edges.add((name, imported))
                # importing a.b.c runs a.b's __init__ first (the root's is a lazy facade)
                parent = imported.rpartition(".")[0]
                if parent in NAMES and parent != "convert" and not within(name, (parent,)):
                    edges.add((name, parent))
    assert circles(edges) == []
