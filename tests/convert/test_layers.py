"""The layers' import rule, read from the source (every import statement, those inside functions included).

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

# What each layer may not import.
FORBIDDEN = {
    "sources": ("convert.exporters", "convert.optimizers", "convert.runtimes"),
    "exporters": ("convert.optimizers", "convert.runtimes"),
    "optimizers": ("convert.exporters", "convert.runtimes"),
    "runtimes": ("convert.exporters", "convert.optimizers"),
    "backends": ("convert.sources", "convert.exporters", "convert.optimizers", "convert.runtimes", "convert.reports"),
    # the checks of a composite's artifacts run together load the library's model through the resolver, and run ONNX files
    "assembled": ("convert.exporters", "convert.optimizers"),
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


def imports(path: Path, top_level_only: bool = False, name: str | None = None) -> set[str]:
    """Every module an import statement of the file names: ``from a.b import c`` gives ``a.b`` and ``a.b.c`` (c may
    be a module); relative imports are resolved against the file's package (that of module ``name`` when given)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = tree.body if top_level_only else ast.walk(tree)
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
