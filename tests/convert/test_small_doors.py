"""Small doors: a factory given as path/to/file.py:callable, a bool input held to one value by its domain, and the
note a run gets when nothing in its input specs is dynamic."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml

import convert
from convert.pipeline.plan import stem
from convert.specs import parse_input_specs
from convert.validators import generate_feed
from tests.conftest import load_report, run_cli

BLOCK = """
    import torch


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.linear = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.relu(self.linear(x))


    class Masked(torch.nn.Module):
        def forward(self, x, mask):
            return x.masked_fill(mask, 0.0) * 2


    def build_block():
        return Block()


    def build_masked():
        return Masked()
"""


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    """Model code as a user keeps it: a factory file in a folder (whose name has a ':') that imports its neighbour,
    a module importable from the folder a run starts in, a JAX function with its params, example inputs."""
    root = tmp_path_factory.mktemp("small_doors")
    folder = root / "my:models"
    folder.mkdir()
    (folder / "blocks.py").write_text(textwrap.dedent(BLOCK))
    (folder / "nets.py").write_text("from blocks import Block\n\n\ndef build_model():\n    return Block()\n")
    (folder / "plain.py").write_text("def helper():\n    return 1\n")
    (root / "here.py").write_text(textwrap.dedent(BLOCK))
    jax_folder = root / "jax_model"
    jax_folder.mkdir()
    (jax_folder / "model.py").write_text(
        textwrap.dedent("""
        import jax.numpy as jnp


        def apply(params, x):
            return jnp.tanh(x @ params["w"] + params["b"])
    """)
    )
    rng = np.random.default_rng(0)
    np.savez(jax_folder / "params.npz", w=rng.standard_normal((8, 4)).astype(np.float32), b=np.zeros(4, np.float32))
    np.savez(root / "x.npz", x=np.ones((2, 8), np.float32))
    return root


def test_a_torch_factory_in_a_py_file_is_imported_with_its_folder_on_the_path(models):
    run = run_cli("my:models/nets.py:build_model", "--input", "x:float32[B,8]", "--to", "torchscript", "--out", "out_file", cwd=models)
    assert run.returncode == 0, run.output
    report = load_report(models / "out_file" / "report.json")
    assert report["source"]["kind"] == "factory" and report["source"]["description"] == "Block"
    assert Path(report["artifacts"][0]["path"]).name == "build_model.torchscript.pt"


def test_a_jax_function_in_a_py_file_runs_with_its_params(models):
    run = run_cli(
        "jax_model/model.py:apply",
        "--framework",
        "jax",
        "--params",
        "jax_model/params.npz",
        "--input",
        "x:float32[B,8]",
        "--to",
        "onnx",
        "--out",
        "out_jax",
        cwd=models,
    )
    assert run.returncode == 0, run.output
    report = load_report(models / "out_jax" / "report.json")
    assert report["passed"] and report["source"]["framework"] == "jax"
    assert {c["shape"] for c in report["artifacts"][0]["checks"] if c["status"] == "passed"} == {"B=2", "B=1", "B=5"}


@pytest.mark.parametrize(
    "model, fragments",
    [
        ("my:models/missing.py:build_model", ["the model file my:models/missing.py", "does not exist"]),
        ("x.npz:build_model", ["x.npz", "is not a Python file (.py)"]),
        ("my:models/plain.py:build_model", ["my:models/plain.py has no attribute 'build_model'", "it defines helper"]),
        ("my:models/nets.py", ["my:models/nets.py is Python code", "my:models/nets.py:build_model"]),
    ],
)
def test_a_bad_file_reference_is_refused_naming_what_is_wrong(models, model, fragments):
    run = run_cli(model, "--input", "x:float32[B,8]", "--to", "torchscript", "--out", "out_bad", cwd=models)
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.stderr
    for fragment in fragments:
        assert fragment in run.stderr, run.stderr


def test_a_reference_splits_on_its_last_colon():
    from convert.sources.request import split_reference

    assert split_reference(r"C:\models\nets.py:build") == (r"C:\models\nets.py", "build")
    assert split_reference("runs:2024/nets.py:Factory.build") == ("runs:2024/nets.py", "Factory.build")
    assert split_reference("fixtures.torch_models:build_cnn") == ("fixtures.torch_models", "build_cnn")
    for not_a_reference in (r"C:\models\cnn.pt2", "C:/models/nets.py", "nets.py", "nets.py:", "a b:build"):
        assert split_reference(not_a_reference) is None, not_a_reference
    assert stem("runs:2024/nets.py:Factory.build") == "build"


def test_a_policy_names_a_factory_file_relative_to_itself(models, tmp_path):
    policy = models / "promotion.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "model": {"path": "my:models/nets.py:build_model", "inputs": ["x:float32[B,8]"]},
                "require": {"targets": ["torchscript"]},
                "out": "out_gate",
            }
        )
    )
    run = run_cli("gate", str(policy), cwd=tmp_path)  # started elsewhere: the path is the policy's, not the folder's
    assert run.returncode == 0, run.output
    assert load_report(models / "out_gate" / "report.json")["gate"]["promoted"]


def test_a_bool_input_may_be_held_to_one_value(models):
    run = run_cli(
        "here:build_masked",
        "--input",
        "x:float32[B,S]",
        "--input",
        "mask:bool[B,S]{1..1}",
        "--to",
        "torchscript",
        "--out",
        "out_mask",
        cwd=models,
    )
    assert run.returncode == 0, run.output
    assert load_report(models / "out_mask" / "report.json")["source"]["inputs"][1] == "mask:bool[B,S]{1..1}"


def test_a_bool_domain_sets_the_generated_values():
    specs = parse_input_specs(["none:bool[B,S]{0..0}", "all:bool[B,S]{1..1}", "any:bool[B,S]"])
    feed = generate_feed(specs, {"B": 4, "S": 16}, sample=0)
    assert not feed["none"].any() and feed["all"].all()
    assert feed["any"].any() and not feed["any"].all()


def test_example_inputs_alone_get_a_note_on_their_one_shape(models):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    fixed = convert.convert(model, example_inputs={"input": np.ones((2, 8), np.float32)}, to=["torchscript"], out=models / "out_api_fixed")
    assert fixed.passed
    [note] = fixed.report.notes
    assert "input:float32[2,8]" in note and "validated at this one shape only" in note
    assert 'inputs=["input:float32[B,8]"]' in note and '--input "input:float32[B,8]"' in note
    dynamic = convert.convert(
        model,
        example_inputs={"input": np.ones((2, 8), np.float32)},
        inputs=["input:float32[B,8]"],
        to=["torchscript"],
        out=models / "out_api_dynamic",
    )
    assert dynamic.passed and dynamic.report.notes == []


def test_the_command_line_prints_the_note_on_a_fixed_shape(models):
    run = run_cli("here:build_block", "--example-inputs", "x.npz", "--to", "torchscript", "--out", "out_cli_fixed", cwd=models)
    assert run.returncode == 0, run.output
    assert "note: every input shape is fixed (x:float32[2,8]" in run.stdout
    assert '--input "x:float32[B,8]"' in run.stdout
    assert load_report(models / "out_cli_fixed" / "report.json")["notes"] == [run.stdout.split("note: ")[1].split("\nVerdict")[0]]


def test_the_note_fits_where_the_fixed_shapes_came_from():
    from convert.sources.signature import fixed_shape_note

    fixed = parse_input_specs(["x:float32[1,3,8,8]", "scale:float32[]"])
    assert "export the program with dynamic_shapes" in fixed_shape_note(fixed, False, False, "pt2")
    assert "the model declares each dim" in fixed_shape_note(fixed, False, False, "keras")
    assert '--input "x:float32[B,3,8,8]"' in fixed_shape_note(fixed, False, True, "factory")
    assert fixed_shape_note(fixed, True, True, "factory") == ""  # the user wrote the fixed dims
    assert fixed_shape_note(parse_input_specs(["x:float32[B,3]"]), False, True, "factory") == ""
    assert fixed_shape_note(parse_input_specs(["scale:float32[]"]), False, True, "factory") == ""  # no dim to free
