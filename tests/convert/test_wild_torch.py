"""PyTorch models as users of other libraries hold them: programs exported with keyword inputs, Hugging Face
transformers models (their ModelOutput types, their bounded sequence length) as module objects, .pt2 programs and
pickled modules. Every symbol is dynamic, and every run is checked at several sizes."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import onnx
import pytest

import convert
from convert.errors import ConvertError
from tests.conftest import load_report, run_cli

BERT_OUTPUTS = ["last_hidden_state", "pooler_output"]


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """A plain module and a BERT exported with keyword inputs (.pt2), and pickled BERT models (torch.save)."""
    import torch

    from fixtures.build_torch import save_keyword_program
    from fixtures.torch_models import build_masked_projection, build_transformers

    folder = tmp_path_factory.mktemp("wild_torch")
    bert, bert_inputs = build_transformers("bert")
    classifier, _ = build_transformers("bert_classifier")
    masked = save_keyword_program(
        build_masked_projection(), ["x:float32[B,S,8]", "mask:float32[B,S]"], folder / "masked.pt2", {"B": 2, "S": 9}
    )
    torch.save(classifier, str(folder / "classifier.pt"))
    example = {"input_ids": torch.randint(0, 99, (2, 9)), "attention_mask": torch.ones(2, 9, dtype=torch.int64)}
    torch.jit.save(torch.jit.trace(bert, example_kwarg_inputs=example, strict=False), str(folder / "bert.torchscript.pt"))
    return {
        "masked.pt2": masked,
        "bert.pt2": save_keyword_program(bert, list(bert_inputs), folder / "bert.pt2", {"B": 2, "S": 9}),
        "classifier.pt": folder / "classifier.pt",
        "bert.torchscript.pt": folder / "bert.torchscript.pt",
    }


SPECS = ("--input", "input_ids:int64[B,S]{0..99}", "--input", "attention_mask:int64[B,S]{0..1}")  # padded as a tokenizer pads
RUNS = {
    "masked.pt2": ("masked.pt2", "--to", "onnx,torchscript,torch_export"),
    "bert.pt2": ("bert.pt2", *SPECS, "--to", "onnx,torch_export"),
    "classifier.pt": ("classifier.pt", "--trust-code", *SPECS, "--to", "torch_export,onnx,torchscript"),
    "bert.torchscript.pt": ("bert.torchscript.pt", "--trust-code", *SPECS, "--to", "onnx"),
}


@pytest.fixture(scope="module")
def runs(files, tmp_path_factory) -> dict[str, tuple]:
    """Every command line run once, one at a time (the other xdist worker has the other core): (the run, its report)."""
    out = tmp_path_factory.mktemp("wild_runs")

    def attempt(item):
        name, (model, *args) = item
        run = run_cli(str(files[model]), *args, "--out", str(out / name))
        report = out / name / "report.json"
        return name, (run, load_report(report) if report.exists() else None)

    return dict(map(attempt, RUNS.items()))


def _artifact(report: dict, target: str) -> dict:
    return next(a for a in report["artifacts"] if a["format"] == target)


def _sizes(record: dict) -> set[tuple[str, str]]:
    """(symbol, size) pairs the artifact's CPU checks passed at."""
    return {
        tuple(part.split("="))
        for c in record["checks"]
        if c["device"] == "cpu" and c["status"] == "passed"
        for part in c["shape"].split(",")
    }


def _onnx_outputs(record: dict) -> list[str]:
    return [o.name for o in onnx.load(record["path"], load_external_data=False).graph.output]


def test_a_program_exported_with_keyword_inputs_runs_by_name(runs):
    """Was: the reference run called it positionally ("Ran into a kwarg keyword mismatch: Got the following keywords
    [] but expected ['x', 'mask']")."""
    run, report = runs["masked.pt2"]
    assert run.returncode == 0, run.output
    assert [spec.split(":")[0] for spec in report["source"]["inputs"]] == ["x", "mask"]  # the keywords' names
    assert report["source"]["outputs"] == ["hidden", "pooled"]
    symbols = [d for d in report["source"]["inputs"][1].split("[")[1].rstrip("]").split(",")]
    for target in ("onnx", "torch_export", "torchscript"):
        record = _artifact(report, target)
        assert record["passed"] and {size for symbol, size in _sizes(record) if symbol == symbols[1]} >= {"1", "9"}
        assert {size for symbol, size in _sizes(record) if symbol == symbols[0]} >= {"1", "2"}
    assert _onnx_outputs(_artifact(report, "onnx")) == ["hidden", "pooled"]
    assert _artifact(report, "torchscript")["strategy"] == "torch.jit.script (program graph)"


def test_a_transformers_program_loads_and_keeps_its_output_names(runs):
    """Was: torch.export.load failed on the output tree's transformers type, and the message sent the user to re-save."""
    run, report = runs["bert.pt2"]
    assert run.returncode == 0, run.output
    assert report["source"]["outputs"] == BERT_OUTPUTS
    for target in ("onnx", "torch_export"):
        record = _artifact(report, target)
        sizes = _sizes(record)
        assert record["passed"] and all(len({n for s, n in sizes if s == symbol}) >= 2 for symbol in ("B", "S"))
        assert record["dim_bounds"] == {"S": [1, 128]}  # the program's own bound on the sequence, kept
    assert _onnx_outputs(_artifact(report, "onnx")) == BERT_OUTPUTS


def test_a_pickled_transformers_model_takes_the_suggested_bound_and_keeps_its_output_name(runs):
    """Was: torch_export failed with "Constraints violated (S) ... Suggested fixes: S = Dim('S', max=128)" and exit 2.
    The bound is applied, recorded, and the checks stay within it; every artifact's output is named 'logits'."""
    run, report = runs["classifier.pt"]
    assert run.returncode == 0, run.output
    assert report["source"]["outputs"] == ["logits"]
    record = _artifact(report, "torch_export")
    assert record["passed"] and record["dim_bounds"] == {"S": [1, 128]}
    (attempt,) = record["attempts"]
    assert attempt["status"] == "ok" and "S = Dim('S', max=128)" in attempt["note"] and "S takes 1 to 128" in attempt["note"]
    assert all(int(size) <= 128 for symbol, size in _sizes(record) if symbol == "S")
    assert len({size for symbol, size in _sizes(record) if symbol == "S"}) >= 2
    assert [a["format"] for a in report["artifacts"] if a["passed"]] == ["torch_export", "onnx", "torchscript"]
    assert _onnx_outputs(_artifact(report, "onnx")) == ["logits"]
    names = {o["name"] for a in report["artifacts"] for c in a["checks"] for o in c["outputs"]}
    assert names == {"logits"}  # matched by exact name in every runtime


def test_a_module_object_whose_inputs_skip_a_parameter_is_called_by_keyword(tmp_path):
    """GPT-2's forward takes past_key_values before attention_mask: positional calls put the mask in its place."""
    from fixtures.torch_models import build_transformers

    model, inputs = build_transformers("gpt2")
    result = convert.convert(model, inputs=inputs, to=["onnx", "torchscript", "torch_export"], out=tmp_path)
    assert result.passed, [(a.format, c.shape, c.reason) for a in result.report.artifacts for c in a.checks if c.status != "passed"]
    assert result.report.source.outputs == ["last_hidden_state"]
    for record in result.report.artifacts:
        assert {c.shape for c in record.checks if c.status == "passed"} >= {"B=2,S=7", "B=1,S=1"}
    assert _onnx_outputs({"path": str(result.artifacts["onnx"].path)}) == ["last_hidden_state"]


def test_a_forward_input_with_no_default_and_no_spec_is_refused_by_name(tmp_path):
    from fixtures.torch_models import build_masked_projection

    with pytest.raises(ConvertError, match="no spec is given for the input 'x'.*which it requires"):
        convert.convert(build_masked_projection(), inputs=["mask:float32[B,S]"], to=["onnx"], out=tmp_path)


def _renamed_output_type(source: Path, target: Path, type_name: str) -> Path:
    """A copy of a .pt2 whose output tree names another type (only the JSON graph changes)."""
    with zipfile.ZipFile(source) as original, zipfile.ZipFile(target, "w") as copy:
        for info in original.infolist():
            data = original.read(info)
            if info.filename.split("/", 1)[-1].startswith("models/") and info.filename.endswith(".json"):
                data = data.replace(b"transformers.modeling_outputs.BaseModelOutputWithPoolingAndCrossAttentions", type_name.encode())
            copy.writestr(info, data)
    return target


def test_a_program_naming_a_type_outside_the_allowlist_imports_nothing(files, tmp_path, monkeypatch):
    from convert.backends.torch import register_pytree_types

    (tmp_path / "planted_outputs.py").write_text(f"open({str(tmp_path / 'imported')!r}, 'w').close()\nclass Output: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    program = _renamed_output_type(files["bert.pt2"], tmp_path / "planted.pt2", "planted_outputs.Output")
    problem, next_step = register_pytree_types(program)
    assert "planted_outputs.Output" in problem and "does not import" in problem
    assert not (tmp_path / "imported").exists() and "planted_outputs" not in sys.modules


def test_a_program_naming_a_library_that_is_not_installed_says_what_to_install(files, tmp_path, monkeypatch):
    import importlib.util

    from convert.backends.torch import load_program

    program = _renamed_output_type(files["bert.pt2"], tmp_path / "missing.pt2", "transformers.models.absent.modeling_absent.AbsentOutput")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *rest: None if name == "transformers" else real(name, *rest))
    with pytest.raises(ConvertError) as raised:
        load_program(program)
    assert "transformers library, which is not installed" in raised.value.problem
    assert "pip install transformers" in raised.value.next_step and "Re-save" not in str(raised.value)


def test_the_specs_of_a_keyword_program_take_the_keywords_names(files):
    from convert.sources.request import SourceRequest
    from convert.sources.torch import load_torch_source

    source = load_torch_source(SourceRequest(model=files["masked.pt2"], kind="path"))
    assert [s.name for s in source.signature.inputs] == ["x", "mask"]
    assert set(source.example_feed) == {"x", "mask"}  # the program's own example inputs, by keyword
    outputs = source.run(source.example_feed)
    assert list(outputs) == ["hidden", "pooled"] and outputs["hidden"].shape == (2, 9, 4)


def test_a_torchscript_model_with_dict_outputs_exports_to_onnx_through_a_program(runs):
    """Was: torch's TorchScript-based ONNX exporter refused the traced dict ("Exporting the operator 'prim::DictConstruct'
    to ONNX opset version 20 is not supported"); torch.export's converter turns the ScriptModule into a program first."""
    run, report = runs["bert.torchscript.pt"]
    assert run.returncode == 0, run.output
    record = _artifact(report, "onnx")
    assert record["strategy"] == "TS2EPConverter, then torch.onnx.export(dynamo=True)"
    assert _onnx_outputs(record) == BERT_OUTPUTS
    assert {"B", "S"} <= {symbol for symbol, _ in _sizes(record)} and len({size for symbol, size in _sizes(record) if symbol == "S"}) >= 2
