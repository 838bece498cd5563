"""Every registered exporter and runtime has an end-to-end fixture test."""

from __future__ import annotations

from convert.registry import REGISTRY
from tests.convert import test_e2e_jax, test_e2e_keras, test_e2e_torch, test_onnx_source, test_optimize
from tests.convert.exporters import test_executorch, test_litert

COVERED = (
    {("torch", t) for t in test_e2e_torch.TARGETS}
    | {("keras", t) for t in test_e2e_keras.TARGETS}
    | {("jax", t) for t in test_e2e_jax.TARGETS}
    | {("torch", t) for t in test_executorch.TARGETS}  # with its INT8 pass, executorch:int8
    | {("torch", t) for t in test_litert.TARGETS}
    | {("onnx", t) for t in test_onnx_source.TARGETS}
)


def test_every_registered_exporter_and_runtime_is_covered_by_a_fixture_test():
    """A registered exporter or runtime without an end-to-end fixture test fails here."""
    registered = {(source, e.format) for e in REGISTRY.entries("exporter") for source in e.sources}
    assert registered <= COVERED, f"exporters without a fixture test: {registered - COVERED}"
    runtime_formats = {f for e in REGISTRY.entries("runtime") for f in e.formats}
    # test_optimize runs every registered optimizer on a fixture; their artifacts' formats are covered there
    optimized_formats = {REGISTRY.get("optimizer", name).format for name in test_optimize.EVERY_OPTIMIZER}
    tested_formats = {fmt for _, fmt in COVERED} | optimized_formats
    assert runtime_formats <= tested_formats, f"runtimes without a fixture test: {runtime_formats - tested_formats}"
