"""Right models that were refused, or failed for the wrong reason, each built from its library's own classes (tiny
configs, fixed seeds): a diffusers UNet whose scalar ``timestep`` the artifact must take at rank 0; an artifact that
takes other inputs than declared, stopped at export with the difference named; an Equinox model with dropout, put in
inference mode; a CLIP folder given both towers' inputs, pointed to ``--component joint``; a T5 folder that names no
decoder start token, refused before any component runs; a mixture-of-experts decoder whose export fails with the
library's own reason on the console (or converts); and the exit code of an artifact no strategy could produce."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest

import convert
from convert.specs import parse_input_spec
from tests.conftest import REPO, load_report, run_cli

UNET_INPUTS = ("sample:float32[B,4,8,8]", "timestep:int64[]{0..999}", "encoder_hidden_states:float32[B,S,8]")
UNET_FACTORY = """
import torch
from diffusers import UNet2DConditionModel


def build():
    torch.manual_seed(0)
    return UNet2DConditionModel(
        sample_size=8,
        in_channels=4,
        out_channels=4,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
        cross_attention_dim=8,
        attention_head_dim=2,
        norm_num_groups=4,
    ).eval()
"""
EQUINOX_FACTORY = """
import equinox as eqx
import jax


class DropoutMlp(eqx.Module):
    hidden: eqx.nn.Linear
    dropout: eqx.nn.Dropout
    head: eqx.nn.Linear

    def __init__(self, key):
        first, second = jax.random.split(key)
        self.hidden = eqx.nn.Linear(8, 16, key=first)
        self.dropout = eqx.nn.Dropout(0.5)
        self.head = eqx.nn.Linear(16, 4, key=second)

    def __call__(self, x, *, key=None):
        hidden = jax.nn.relu(jax.vmap(self.hidden)(x))
        return jax.vmap(self.head)(self.dropout(hidden, key=key))


def build():
    return DropoutMlp(jax.random.PRNGKey(0))
"""


def _factory(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(textwrap.dedent(text))
    return folder


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


# a scalar input: the artifact takes it as declared


@pytest.fixture(scope="module")
def unet_folder(tmp_path_factory) -> Path:
    pytest.importorskip("diffusers")
    return _factory(tmp_path_factory.mktemp("unet"), "unet_factory", UNET_FACTORY)


def test_a_unet_from_a_factory_takes_its_scalar_timestep_at_rank_0(unet_folder):
    from convert.backends.onnx import graph_inputs

    run = run_cli(
        "unet_factory.py:build", *(a for spec in UNET_INPUTS for a in ("--input", spec)), "--to", "onnx", "--out", "out", cwd=unet_folder
    )
    assert run.returncode == 0, run.output
    assert graph_inputs(unet_folder / "out" / "build.onnx") == {
        "sample": ("float32", 4),
        "timestep": ("int64", 0),
        "encoder_hidden_states": ("float32", 3),
    }


def test_the_same_unet_through_the_python_api_exports_a_program_taking_rank_0(unet_folder, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(unet_folder))
    from unet_factory import build

    result = convert.convert(build(), inputs=list(UNET_INPUTS), to=["torch_export"], out=unet_folder / "api")
    assert result.passed, result.report.to_json()
    program = torch.export.load(str(result.artifacts["torch_export"].path))
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder" and n.name == "timestep"]
    assert [tuple(n.meta["val"].shape) for n in placeholders] == [()]


def _onnx_taking(path: Path, rank: int) -> None:
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Cast", ["timestep"], ["out"], to=TensorProto.FLOAT)],
        "g",
        [helper.make_tensor_value_info("timestep", TensorProto.INT64, [1] * rank)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1] * rank)],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


@pytest.mark.fast
def test_a_strategy_whose_artifact_takes_another_rank_fails_at_export_with_the_difference_named(tmp_path):
    pytest.importorskip("onnx")
    from convert.backends.onnx import onnx_artifact
    from convert.exporters.base import Exporter, ExportJob

    class TwoStrategies(Exporter):
        name, format = "two-strategies", "onnx"

        def strategies(self, job):
            return [(f"rank {rank}", lambda path, rank=rank: (_onnx_taking(path, rank), onnx_artifact(path))[1]) for rank in (1, 0)]

    source = SimpleNamespace(signature=SimpleNamespace(inputs=(parse_input_spec("timestep:int64[]"),), outputs=("out",)), precision="fp32")
    outcome = TwoStrategies().export(ExportJob(source=source, feed={}, folder=tmp_path, stem="model"))
    first, second = outcome.attempts
    assert first.status == "failed" and first.error.startswith("SignatureMismatch: the artifact does not take the inputs as declared")
    assert "it takes 'timestep' with rank 1 where its spec (timestep:int64[]) declares rank 0" in first.error
    assert second.status == "ok" and outcome.artifact is not None and outcome.artifact.strategy == "rank 0"


# Equinox: inference mode


def test_an_equinox_model_with_dropout_converts_in_inference_mode(tmp_path):
    pytest.importorskip("equinox")
    folder = _factory(tmp_path, "eqx_dropout", EQUINOX_FACTORY)
    run = run_cli("eqx_dropout.py:build", "--framework", "jax", "--input", "x:float32[B,8]", "--to", "onnx", "--out", "out", cwd=folder)
    assert run.returncode == 0, run.output
    report = load_report(folder / "out" / "report.json")
    assert report["passed"] and "in inference mode: dropout off" in report["source"]["description"]


# CLIP: both towers' inputs


def test_a_clip_folder_given_both_towers_inputs_is_pointed_to_the_joint_component(tmp_path):
    pytest.importorskip("transformers")
    from fixtures.transformers_folders import write_folder

    folder = write_folder("clip", tmp_path / "clip")
    run = run_cli(
        str(folder),
        "--input",
        "input_ids:int64[T,S]{0..99}",
        "--input",
        "pixel_values:float32[B,3,32,32]",
        "--to",
        "onnx",
        "--out",
        str(tmp_path / "out"),
    )
    assert run.returncode == 2, run.output
    (error,) = _errors(run.stderr)
    assert "which the dual encoder's text_model does not take: inputs of both towers are its joint model's" in error
    assert "Convert the joint model alone with --component joint (it takes input_ids, pixel_values, attention_mask)" in error
    assert "Traceback" not in run.stderr


# T5: the decoder start token, read as transformers reads it, and checked before any component runs


def _tiny_t5(**tokens):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch").manual_seed(0)
    config = transformers.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_decoder_layers=1, num_heads=2, **tokens)
    return transformers.T5ForConditionalGeneration(config).eval()


def test_the_decoder_start_token_is_the_one_transformers_generate_starts_from():
    from convert.backends.huggingface import decoder_start

    assert decoder_start(_tiny_t5(decoder_start_token_id=5)) == 5
    model = _tiny_t5()
    assert decoder_start(model) is None  # transformers 5 writes none for a T5Config(), and generate refuses it
    with pytest.raises(ValueError, match="decoder_start_token_id"):
        model.generate(pytest.importorskip("torch").tensor([[5, 6, 7]]), max_new_tokens=1)
    model.generation_config.bos_token_id = 3  # generate's own fallback
    assert decoder_start(model) == 3


def test_a_t5_folder_with_no_start_token_is_refused_before_any_component_runs(tmp_path):
    _tiny_t5().save_pretrained(tmp_path / "t5")
    run = run_cli(str(tmp_path / "t5"), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 2, run.output
    (error,) = _errors(run.stderr)
    assert "names no token to start decoding from (decoder_start_token_id or bos_token_id" in error
    assert "decoder_start_token_id = model.config.pad_token_id" in error
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.onnx"))  # no component ran
    assert "Traceback" not in run.stderr


# a mixture of experts: the library's own reason, and the exit code of an artifact no strategy could produce


def test_a_mixture_of_experts_decoder_converts_or_says_the_librarys_reason(tmp_path):
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("torch").manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        num_local_experts=4,
        num_experts_per_tok=2,
    )
    transformers.MixtralForCausalLM(config).eval().save_pretrained(tmp_path / "mixtral")
    run = run_cli(str(tmp_path / "mixtral"), "--to", "onnx", "--out", str(tmp_path / "out"))
    if run.returncode == 0:  # the experts' routing exported
        return
    # an artifact no strategy could produce from this model: exit code 2, the first strategy's own reason shown
    assert run.returncode == 2, run.output
    (error,) = [line for line in _errors(run.stderr) if "export failed with every strategy" in line]
    said = error.split("the first said: ", 1)[1]
    assert re.search(r"OpOverload|operator|histc|grouped_mm", said), error
    assert "Next steps:." not in said


@pytest.mark.fast
def test_the_readme_and_the_exit_code_reference_give_the_code_s_rule_for_an_artifact_not_built():
    """The code's rule (convert/pipeline/context.py finish, its unit tests): a requested artifact this machine cannot
    build is exit code 1; one no strategy could produce from the model, exit code 2."""
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "`1` a check failed or a requested artifact could not be built on this machine" in readme
    assert "`2` bad input, or an artifact no export strategy could produce from this model" in readme
    reference = (REPO / "docs" / "reference" / "exit-codes.md").read_text()
    assert "could not be built on this machine" in reference and "no strategy could produce from this model" in reference
