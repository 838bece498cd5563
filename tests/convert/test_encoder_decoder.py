"""Encoder-decoders as their users save them (BART, and a VisionEncoderDecoderModel of a ViT and a GPT-2 with
cross-attention; small configs from transformers' own classes, save_pretrained, a fixed seed), converted in one command
as their encoder, decoder and decoder_with_past: each component's source against the library's own step, the whole run
with its generation check, the ONNX files decoded again at sizes the run did not use against transformers' generate,
a deliberately wrong decoder_with_past found and blamed, and Optimum's ORTModel classes loading the folder."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import convert
from convert.assembled.encoder_decoder import check_generation
from tests.conftest import REPO

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

OPTIMUM_PYTHON = REPO / ".venv-optimum" / "bin" / "python"
FILES = ("encoder_model.onnx", "decoder_model.onnx", "decoder_with_past_model.onnx")


@pytest.fixture(scope="module")
def converted(tmp_path_factory) -> dict[str, tuple[Path, convert.ConversionResult]]:
    from fixtures.transformers_folders import write_folder

    root = tmp_path_factory.mktemp("encoder_decoders")
    done = {}
    for name in ("bart", "vision_encoder_decoder"):
        folder = write_folder(name, root / name)
        done[name] = folder, convert.convert(folder, to=["onnx"], out=root / f"{name}-out")
    return done


def test_each_component_is_the_librarys_own_step(converted):
    folder, _ = converted["bart"]
    model = transformers.BartForConditionalGeneration.from_pretrained(folder).eval()
    ids = torch.tensor([[5, 17, 9, 300, 2]])
    with torch.no_grad():
        states = model.get_encoder()(input_ids=ids).last_hidden_state
        first = model(decoder_input_ids=torch.tensor([[2]]), encoder_outputs=(states,), use_cache=True)
        second = model(
            decoder_input_ids=torch.tensor([[42]]), encoder_outputs=(states,), past_key_values=first.past_key_values, use_cache=True
        )
    encoder = convert.load(folder, component="encoder")
    np.testing.assert_allclose(
        encoder.run({"input_ids": ids.numpy(), "attention_mask": np.ones((1, 5), np.int64)})["last_hidden_state"], states.numpy(), atol=1e-5
    )
    mask = np.ones((1, 5), np.int64)
    decoder = convert.load(folder, component="decoder").run(
        {"input_ids": np.array([[2]]), "encoder_attention_mask": mask, "encoder_hidden_states": states.numpy()}
    )
    np.testing.assert_allclose(decoder["logits"], first.logits.numpy(), atol=1e-5)
    past = {name.replace("present", "past_key_values"): value for name, value in decoder.items() if name != "logits"}
    later = convert.load(folder, component="decoder_with_past").run({"input_ids": np.array([[42]]), "encoder_attention_mask": mask, **past})
    np.testing.assert_allclose(later["logits"], second.logits.numpy(), atol=1e-5)
    assert sorted(later) == sorted(["logits", *(f"present.{i}.decoder.{p}" for i in range(2) for p in ("key", "value"))])


@pytest.mark.parametrize("name", ["bart", "vision_encoder_decoder"])
def test_an_encoder_decoder_converts_in_one_command_and_its_artifacts_generate_as_transformers(converted, name):
    folder, result = converted[name]
    report = result.report
    assert result.passed and report.exit_code == 0 and report.composite == "encoder-decoder"
    assert [(c.name, c.passed) for c in report.components] == [("encoder", True), ("decoder", True), ("decoder_with_past", True)]
    (check,) = report.assembled
    assert check.status == "passed" and check.metrics["token_match"] == 1.0 and check.metrics["max_abs_logit_error"] < 1e-3
    out = result.report_path.parent
    assert all((out / file).is_file() for file in FILES) and (out / "config.json").is_file()
    for component in report.components:  # each component's own report, every dim dynamic and checked at several sizes
        own = json.loads((out / component.report).read_text())
        assert own["passed"] and len({c["shape"] for c in own["artifacts"][0]["checks"]}) >= 2


def test_the_bart_files_decode_at_sizes_the_run_did_not_use_as_transformers_generates(converted):
    """An independent check: 3 inputs of 11 tokens (the run's check used 2 of 7), 6 greedy steps with ONNX Runtime, each
    step fed back as Optimum's ORTModelForSeq2SeqLM feeds it, against transformers' generate."""
    folder, result = converted["bart"]
    out = result.report_path.parent
    sessions = {file: ort.InferenceSession(str(out / file), providers=["CPUExecutionProvider"]) for file in FILES}
    rng = np.random.default_rng(123)
    ids = rng.integers(3, 1000, (3, 11)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[2, 8:] = 0
    ids[2, 8:] = 1
    model = transformers.BartForConditionalGeneration.from_pretrained(folder).eval()
    model.generation_config = transformers.GenerationConfig(decoder_start_token_id=2, pad_token_id=1, eos_token_id=-1)
    with torch.no_grad():
        expected = model.generate(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask), max_new_tokens=6, do_sample=False)
    (states,) = sessions["encoder_model.onnx"].run(None, {"input_ids": ids, "attention_mask": mask})
    decoder = sessions["decoder_model.onnx"]
    values = decoder.run(None, {"input_ids": np.full((3, 1), 2, np.int64), "encoder_attention_mask": mask, "encoder_hidden_states": states})
    outputs = dict(zip([o.name for o in decoder.get_outputs()], values, strict=True))
    cross = {n.replace("present", "past_key_values"): v for n, v in outputs.items() if ".encoder." in n}
    tokens = []
    with_past = sessions["decoder_with_past_model.onnx"]
    for _ in range(6):
        token = outputs["logits"][:, -1].argmax(-1)[:, None].astype(np.int64)
        tokens.append(token)
        own = {n.replace("present", "past_key_values"): v for n, v in outputs.items() if ".decoder." in n}
        values = with_past.run(None, {"input_ids": token, "encoder_attention_mask": mask, **own, **cross})
        outputs = dict(zip([o.name for o in with_past.get_outputs()], values, strict=True))
    np.testing.assert_array_equal(np.concatenate(tokens, axis=1), expected[:, 1:].numpy())


def test_a_wrong_decoder_with_past_fails_the_generation_check_and_is_blamed(converted, tmp_path):
    """A deliberate fault: the decoder_with_past file with its output projection scaled, the other two files as made."""
    folder, result = converted["bart"]
    out = result.report_path.parent
    model = onnx.load(str(out / "decoder_with_past_model.onnx"))
    weights = max(model.graph.initializer, key=lambda t: int(np.prod(t.dims)))  # the largest: an embedding or projection
    array = onnx.numpy_helper.to_array(weights) * 1.5 + 0.05
    weights.CopyFrom(onnx.numpy_helper.from_array(array.astype(np.float32), weights.name))
    onnx.save(model, str(tmp_path / "decoder_with_past_model.onnx"))
    artifacts = {"encoder": out / FILES[0], "decoder": out / FILES[1], "decoder_with_past": tmp_path / "decoder_with_past_model.onnx"}
    check = check_generation(folder, artifacts, precision="fp32", seed=0, trust_code=False)
    assert check.status == "failed" and check.blamed == ["decoder_with_past"]
    assert check.diverged_at.startswith("token 2 of 8") and "part from transformers" in check.reason
    healthy = check_generation(folder, {**artifacts, "decoder_with_past": out / FILES[2]}, precision="fp32", seed=0, trust_code=False)
    assert healthy.status == "passed"


@pytest.mark.skipif(not OPTIMUM_PYTHON.exists(), reason="no Optimum environment (make bench builds .venv-optimum)")
@pytest.mark.parametrize("name", ["bart", "vision_encoder_decoder"])
def test_optimums_ortmodel_loads_the_folder_and_generates_transformers_tokens(converted, name, tmp_path):
    folder, result = converted[name]
    copy = tmp_path / "out"
    shutil.copytree(result.report_path.parent, copy)
    done = subprocess.run(
        [
            str(OPTIMUM_PYTHON),
            str(REPO / "benchmarks" / "optimum_side.py"),
            "--load-seq2seq",
            str(folder),
            str(copy),
            "--out",
            str(tmp_path / "r.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    entry = json.loads((tmp_path / "r.json").read_text())
    # a tiny random model's greedy tokens may repeat one token whatever its cache holds: its logits tell more
    assert entry["loads"] and entry["tokens_equal"] and entry["max_abs_logit_error"] <= 1e-4, (entry, done.stderr[-2000:])
