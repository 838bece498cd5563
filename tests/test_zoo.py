"""A slice of the zoo (benchmarks/zoo.py) in the suite: one real architecture per family in its shortest form, through
the same code path as `make zoo`, every requested dim dynamic and validated at more than one size."""

from __future__ import annotations

import pytest

from benchmarks.zoo import Cell, classify, render, run_conversion
from fixtures.zoo import ENTRIES
from tests.conftest import LazyRuns

# (entry, form, target): transformers models exported with keyword inputs (BERT scripted from its program's graph, T5's
# encoder through torch's default decompositions), transformers ResNet (its guard bounds H and W below), a plain torch
# module with keyword inputs and a dict output, keras.applications from a .keras file, flax linen and NNX CNNs with max
# pooling and BatchNorm.
SLICE = (
    ("bert", "pt2", "torchscript"),
    ("t5_encoder", "pt2", "onnx"),
    ("resnet", "object", "torch_export"),
    ("keyword_dict", "pt2", "onnx"),
    ("mobilenet_v3_small", "keras", "onnx"),
    ("linen_cnn", "module", "onnx"),
    ("nnx_cnn", "file", "onnx"),
)


@pytest.fixture(scope="module")
def slice_cells(tmp_path_factory) -> LazyRuns:
    """Each conversion of the slice when its test first asks for it, one at a time (the other xdist worker has the
    other core)."""
    folder = tmp_path_factory.mktemp("zoo")
    cases = {case[0]: case for case in SLICE}

    def one(name: str) -> Cell:
        _, form, target = cases[name]
        return run_conversion(ENTRIES[name], form, folder / f"{name}-{form}", timeout=600, targets=(target,))[0]

    return LazyRuns(cases, one)


@pytest.mark.parametrize("name", [case[0] for case in SLICE])
def test_zoo_slice_passes_with_every_dim_dynamic(slice_cells, name):
    cell = slice_cells[name]
    assert cell.status == "passed", f"{cell.form} -> {cell.target}: {cell.status}: {cell.reason}"
    sizes = dict(part.split("=") for part in cell.sizes.split())
    symbols = {d for spec in ENTRIES[name].inputs for d in spec.split("[")[1].split("]")[0].split(",") if not d.isdigit()}
    assert set(sizes) == symbols and all(len(v.split(",")) >= 2 for v in sizes.values()), cell.sizes


def _report(checks: list[dict], passed: bool = True) -> dict:
    artifact = {"format": "onnx", "path": "model.onnx", "passed": passed, "checks": checks}
    return {"passed": passed, "stages": [{"name": "export:onnx", "status": "ok", "seconds": 1.5}], "artifacts": [artifact]}


def _check(shape: str, status: str = "passed", reason: str = "", error: float = 1e-6) -> dict:
    return {
        "runtime": "onnxruntime",
        "device": "cpu",
        "shape": shape,
        "status": status,
        "reason": reason,
        "outputs": [{"name": "y", "status": status if status != "skipped" else "passed", "max_abs_error": error}],
    }


def test_a_pass_needs_every_symbol_at_two_sizes():
    entry = ENTRIES["bert"]
    both = classify(_report([_check("B=2,S=7"), _check("B=1,S=1", error=3e-6), _check("B=5,S=15")]), entry, "pt2", "onnx")
    assert (both.status, both.max_abs_error, both.sizes, both.export_s) == ("passed", 3e-6, "B=1,2,5 S=1,7,15", 1.5)
    one_sequence = classify(_report([_check("B=2,S=7"), _check("B=1,S=7")]), entry, "pt2", "onnx")
    assert one_sequence.status == "fixed-shape" and "S" in one_sequence.reason


def test_a_skipped_size_is_a_fixed_shape_and_a_missing_artifact_an_error():
    entry = ENTRIES["linen_cnn"]
    skipped = classify(
        _report([_check("B=2,H=16,W=16"), _check("B=1,H=8,W=12", "skipped", "not run at this shape: B is 2 in the model")]),
        entry,
        "module",
        "onnx",
    )
    assert skipped.status == "fixed-shape" and "B is 2" in skipped.reason
    refused = classify(
        _report(
            [_check("B=2,H=16,W=16"), _check("B=1,H=8,W=12", "failed", "the artifact fixes dim B that was asked dynamic")], passed=False
        ),
        entry,
        "module",
        "onnx",
    )
    assert refused.status == "fixed-shape" and refused.reason.startswith("onnxruntime B=1,H=8,W=12: the artifact fixes dim B")
    wrong = classify(
        _report([_check("B=2,H=16,W=16", "failed", "output 'y': 3 of 20 elements differ")], passed=False), entry, "module", "onnx"
    )
    assert wrong.status == "failed" and "3 of 20" in wrong.reason
    report = {
        "stages": [{"name": "export:tflite", "status": "failed", "seconds": 2.0, "error": "ConverterError: op X\nmore"}],
        "artifacts": [{"format": "tflite", "path": None, "attempts": []}],
    }
    missing = classify(report, entry, "module", "tflite")
    assert (missing.status, missing.reason) == ("error", "ConverterError: op X more")
    report["stages"][0]["error"] = (
        'ValueError: in user code:\n  File "serve.py", line 38, in serve\n'
        "    ValueError: Incompatible shapes for broadcasting: (B, S), (min(128, S),)"
    )
    wrapped = classify(report, entry, "module", "tflite")
    assert wrapped.reason == "ValueError: Incompatible shapes for broadcasting: (B, S), (min(128, S),)"


def test_a_cell_that_does_not_pass_is_put_down_to_its_library_with_the_version():
    vhlo = "ConverterError: Could not translate MLIR to FlatBuffer. error: 'vhlo.dynamic_gather_v1' op is not part of the vhlo support yet."
    cells = [
        Cell("linen_transformer", "module", "tflite", "error", vhlo),
        Cell("linen_cnn", "module", "onnx", "failed", "onnxruntime B=1: output 'y': 3 of 20 values differ"),
        Cell("linen_cnn", "module", "savedmodel", "passed"),
    ]
    text = render(cells, jobs=1, seconds=60, command="python -m benchmarks.zoo")
    section = text.split("## Why the other cells do not pass", 1)[1].split("## Entries", 1)[0]
    assert "| tensorflow-cpu 2." in section and "1: linen_transformer module → tflite" in section
    assert "| (not known) | 1: linen_cnn module → onnx |" in section
