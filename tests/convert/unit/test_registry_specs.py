"""Registry entries are typed specs: a fact that decides what the pipeline does has no default, a malformed or dangling
spec is refused when registered, and implementation classes read what they are from their spec."""

from __future__ import annotations

import dataclasses

import pytest

from convert.artifacts import given_format
from convert.errors import ConvertError
from convert.formats import RUN_ONLY_FACTS
from convert.registry import (
    ANY_FORMAT,
    REGISTRY,
    SPEC_TYPES,
    CheckSpec,
    ExporterSpec,
    FormatSpec,
    FromSpec,
    OptimizerSpec,
    Registry,
    RuntimeSpec,
)

FORMAT_FACTS = dict(title="a test model", suffix=".t", given_suffixes=(".t",), **RUN_ONLY_FACTS)


def _loaded_registry(*specs) -> Registry:
    """A registry of its own (not the tool's), loaded with the given specs only."""
    registry = Registry()
    registry._loaded = True
    for spec in specs:
        registry.add(spec)
    return registry


@pytest.mark.parametrize("kind", [k for k in SPEC_TYPES])
def test_no_spec_has_a_default_for_a_fact(kind):
    """Every field of every spec type must be given: a spec that leaves out cacheable (or any other fact) fails to
    construct, instead of passing silently as the TensorRT entries once did."""
    spec_type = SPEC_TYPES[kind]
    defaulted = [
        f.name
        for f in dataclasses.fields(spec_type)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    ]
    assert defaulted == []
    with pytest.raises(TypeError, match="cacheable"):
        OptimizerSpec(
            name="x",
            target="m:X",
            takes="onnx",
            format="onnx",
            suffix=".x.onnx",
            precision="fp32",
            calibrated=False,
            requires=(),
            packages=(),
            extra="e",
        )


def test_a_spec_is_checked_when_registered():
    with pytest.raises(ValueError, match="must be a tuple"):
        RuntimeSpec(name="r", target="m:R", formats="onnx", packages=(), extra="e")
    with pytest.raises(ValueError, match="package.module:attribute"):
        RuntimeSpec(name="r", target="no-colon", formats=("onnx",), packages=(), extra="e")
    registry = _loaded_registry(FormatSpec(name="t", **FORMAT_FACTS))
    with pytest.raises(ValueError, match="names the format 'nope', which is not registered"):
        registry.add(RuntimeSpec(name="r", target="m:R", formats=("nope",), packages=(), extra="e"))
    registry.add(RuntimeSpec(name="r", target="m:R", formats=("t",), packages=(), extra="e"))
    with pytest.raises(ValueError, match="registered twice"):
        registry.add(RuntimeSpec(name="r", target="m:Other", formats=("t",), packages=(), extra="e"))
    with pytest.raises(ValueError, match="registered as 'r' and again as 'r2'"):
        registry.add(RuntimeSpec(name="r2", target="m:R", formats=("t",), packages=(), extra="e"))
    with pytest.raises(TypeError, match="register a spec"):
        registry.add({"kind": "runtime", "name": "dict"})


def test_a_check_names_its_detail_and_the_formats_it_applies_to():
    facts = dict(target="m:check", phase="validate", packages=(), extra="e")
    with pytest.raises(ValueError, match="only a detail is kept in the cache"):
        CheckSpec(name="c", formats=(ANY_FORMAT,), detail=None, cacheable=True, **facts)
    with pytest.raises(ValueError, match="detail must be 'package.module:attribute'"):
        CheckSpec(name="c", formats=(ANY_FORMAT,), detail="NoModule", cacheable=False, **facts)
    registry = _loaded_registry(FormatSpec(name="t", **FORMAT_FACTS))
    with pytest.raises(ValueError, match="names the format 'nope', which is not registered"):
        registry.add(CheckSpec(name="c", formats=("nope",), detail="m:D", cacheable=True, **facts))
    only = CheckSpec(name="c", formats=("t",), detail="m:D", cacheable=True, **facts)
    registry.add(only)
    assert only.applies_to("t") and not only.applies_to("onnx")
    assert [s.name for s in REGISTRY.entries("check", phase="validate")] == ["comparison", "repair", "attestation", "chain"]


def test_a_format_some_stage_makes_must_have_a_runtime(monkeypatch):
    registry = Registry()
    monkeypatch.setattr("convert.registry._DECLARING_PACKAGES", ())
    registry.add(FormatSpec(name="t", **FORMAT_FACTS))
    registry.add(
        SPEC_TYPES["source"](
            name="s",
            target="m:load",
            extra="e",
            packages=(),
            framework_import=None,
            suffixes=(),
            modules=(),
            folder_markers=(),
            folder_key=None,
            folder_name="",
            takes_callables=False,
            loading_packages=(),
        )
    )
    registry.add(ExporterSpec(name="x", target="m:X", format="t", sources=("s",), packages=(), extra="e"))
    with pytest.raises(ValueError, match="format 't' is made by a stage but no runtime runs it"):
        registry.entries("format")


def test_implementations_read_what_they_are_from_their_spec():
    from convert.exporters.onnx import TorchToOnnx
    from convert.optimizers.onnx_quant import DynamicInt8
    from convert.runtimes.onnxruntime import OnnxRuntimeRunner

    assert (TorchToOnnx.name, TorchToOnnx.format, TorchToOnnx.artifact_suffix()) == ("torch-onnx", "onnx", ".onnx")
    assert (DynamicInt8.name, DynamicInt8.takes, DynamicInt8.precision, DynamicInt8.artifact_suffix()) == (
        "int8-dynamic",
        "onnx",
        "int8",
        ".int8-dynamic.onnx",
    )
    assert OnnxRuntimeRunner.name == "onnxruntime"

    class Unregistered:
        name = FromSpec()

    with pytest.raises(LookupError, match="is not registered"):
        Unregistered.name  # noqa: B018


@pytest.mark.parametrize("spec", REGISTRY.entries("format"), ids=lambda spec: spec.name)
def test_a_given_artifact_is_told_by_its_format_spec(spec, tmp_path):
    """Each format's given suffixes and folder marker tell an artifact someone already has, or refuse it as its spec says."""
    for suffix in spec.given_suffixes:
        path = tmp_path / f"model{suffix}"
        path.write_bytes(b"\0")
        if spec.given_refusal:
            with pytest.raises(ConvertError, match=f"is {spec.title}, which is not taken"):
                given_format(path)
        else:
            assert given_format(path) == spec.name
    if spec.given_folder_marker:
        folder = tmp_path / "folder"
        folder.mkdir()
        (folder / spec.given_folder_marker).write_bytes(b"\0")
        assert given_format(folder) == spec.name


def test_the_formats_whose_loading_runs_code_are_said_so():
    """The facts the trust checks read: TorchScript and SavedModels always run code, a .pt2 depending on what it holds."""
    runs = {spec.name for spec in REGISTRY.entries("format") if not spec.code_free}
    assert runs == {"torchscript", "savedmodel", "torch_export", "tensorrt"}
