"""What the project declares it needs: protobuf at the version the vendored Triton schema checks on import, the test
suite's own imports in the dev extra, and the license pyproject.toml names, in full, in LICENSE."""

from __future__ import annotations

import ast
import re
import tomllib

import pytest

from tests.conftest import REPO

PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
GENCODE = REPO / "convert" / "packagers" / "triton_model_config_pb2.py"


def gencode_runtime_minimum() -> str:
    """The protobuf runtime version the generated schema refuses to load below (its ValidateProtobufRuntimeVersion call)."""
    for node in ast.walk(ast.parse(GENCODE.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "ValidateProtobufRuntimeVersion":
            major, minor, patch = (argument.value for argument in node.args[1:4])
            return f"{major}.{minor}.{patch}"
    raise AssertionError(f"{GENCODE.name} checks no protobuf runtime version")


@pytest.mark.fast
def test_protobuf_s_lower_bound_is_the_version_the_vendored_schema_checks():
    [requirement] = [r for r in PROJECT["dependencies"] if re.match(r"^protobuf\b", r)]
    assert requirement == f"protobuf>={gencode_runtime_minimum()}", "a lower protobuf fails on importing the Triton schema"
    assert gencode_runtime_minimum() == "6.33.5"


def test_the_suite_s_imports_are_in_the_dev_extra():
    dev = {re.match(r"^[A-Za-z0-9_.-]+", r)[0].lower() for r in PROJECT["optional-dependencies"]["dev"]}
    assert {"pytest", "filelock", "hypothesis", "pytest-xdist"} <= dev


def test_the_license_file_is_the_license_pyproject_names():
    assert PROJECT["license"] == "Apache-2.0"
    text = (REPO / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text.split()) > 1500  # the full text, not a notice
