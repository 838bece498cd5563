"""The extra that installs a package is the registry's, written once: every ``require(package, purpose)`` and
``MissingDependency(package, purpose)`` in convert/ names a package the registry knows, and its extra is one of
pyproject.toml's that installs that package."""

from __future__ import annotations

import ast
import re
import sys
import tomllib

import pytest

from convert.errors import MissingDependency, require
from convert.registry import CORE_EXTRA, FEATURE_EXTRAS, REGISTRY
from tests.conftest import REPO

# a package whose distribution is not its import name with dashes
DISTRIBUTIONS = {"tensorflow": "tensorflow-cpu", "mlflow": "mlflow-skinny"}
# the calls whose package is a variable: the libraries a diffusion pipeline's components come from, and the packages an
# optimizer requires (convert/pipeline/plan.py)
VARIABLE_PACKAGES = ("transformers", "diffusers")


def call_site_packages() -> dict[str, list[str]]:
    """package → where: the first argument of every require() and MissingDependency() call in convert/."""
    found: dict[str, list[str]] = {}
    for path in sorted((REPO / "convert").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("require", "MissingDependency") and node.args:
                first = node.args[0]
                packages = [first.value] if isinstance(first, ast.Constant) else list(VARIABLE_PACKAGES)
                for package in packages:
                    found.setdefault(package, []).append(f"{path.relative_to(REPO)}:{node.lineno}")
    for entry in REGISTRY.entries("optimizer"):
        for package in entry.requires:
            found.setdefault(package, []).append(f"optimizer {entry.name}")
    return found


def installs(extras: dict[str, list[str]], extra: str) -> set[str]:
    """The distributions an extra installs, through the extras it names (model-convert[torch])."""
    found: set[str] = set()
    for requirement in extras[extra]:
        name = re.match(r"^([A-Za-z0-9_.-]+)(\[([^\]]+)\])?", requirement)
        if name[1] == "model-convert":
            for nested in name[3].split(","):
                found |= installs(extras, nested.strip())
        else:
            found.add(name[1].lower())
    return found


@pytest.mark.fast
def test_every_required_package_is_the_registry_s_with_an_extra_that_installs_it():
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    sites = call_site_packages()
    assert {"torch", "transformers", "mlflow", "ray", "ai_edge_litert"} <= set(sites), sites
    for package, where in sites.items():
        extra = REGISTRY.extra_of(package)
        assert extra != CORE_EXTRA, f"{package} ({where[0]}) is a core dependency: import it, it is always there"
        assert extra in extras, f"{package} ({where[0]}): the registry's extra '{extra}' is not in pyproject.toml"
        distribution = DISTRIBUTIONS.get(package, package.replace("_", "-"))
        assert distribution in installs(extras, extra), f"{package} ({where[0]}): pyproject's extra '{extra}' does not install it"


def test_the_most_specific_entry_names_a_shared_package_s_extra():
    """transformers is declared by the sentence-transformers source too; its own extra is transformers."""
    assert REGISTRY.extra_of("transformers") == "transformers" and REGISTRY.extra_of("torch") == "torch"
    assert REGISTRY.extra_of("peft") == FEATURE_EXTRAS["peft"] == "peft"
    with pytest.raises(LookupError, match="no registered entry declares"):
        REGISTRY.extra_of("not_a_package_anyone_declares")


def test_a_missing_package_names_the_registry_s_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxslim", None)  # imported as missing
    with pytest.raises(MissingDependency) as info:
        require("onnxslim", "--optimize simplify")
    assert info.value.problem.startswith("--optimize simplify needs the Python package 'onnxslim'")
    assert info.value.next_step == "Install it with: pip install 'model-convert[optimize]'"
