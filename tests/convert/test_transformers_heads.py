"""The model the user trained, not one the library can load: a folder's task head is loaded as the class its config
names (its fields the artifact's outputs), a weight that loading drops or initialises afresh is a refusal, a PEFT
adapter is merged into its base, a model taking text and images takes both, and raw audio is generated long enough for
the feature encoder. Every ONNX artifact is checked again here, with ONNX Runtime at sizes the tool did not validate,
against the library's own eager model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from tests.conftest import load_report, run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _onnx_outputs(path, feed: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {i.name: feed[i.name] for i in session.get_inputs()}), strict=True))


def _convert(folder, out, *args, to="onnx"):
    run = run_cli(str(folder), "--to", to, "--out", str(out), *args)
    report = load_report(out / "report.json") if (out / "report.json").exists() else None
    return run, report


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    from fixtures.transformers_heads import HEADS, write_head

    root = tmp_path_factory.mktemp("heads")
    return {name: write_head(name, root / name) for name in HEADS}


def test_a_question_answering_folder_exports_its_head_and_matches_the_library_at_other_sizes(heads, tmp_path):
    run, report = _convert(heads["question-answering"], tmp_path / "out")
    assert run.returncode == 0, run.output
    assert "task question-answering:" in report["source"]["description"]
    graph = onnx.load(tmp_path / "out" / "question-answering.onnx").graph
    assert [o.name for o in graph.output] == ["start_logits", "end_logits"]
    rng = np.random.default_rng(3)
    ids = rng.integers(0, 100, (3, 19))
    mask = np.ones_like(ids)
    mask[1, 12:] = 0
    got = _onnx_outputs(tmp_path / "out" / "question-answering.onnx", {"input_ids": ids, "attention_mask": mask, "token_type_ids": 0 * ids})
    eager = transformers.BertForQuestionAnswering.from_pretrained(heads["question-answering"]).eval()
    with torch.no_grad():
        want = eager(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(got[name], getattr(want, name).numpy(), atol=1e-4)


def test_weights_loading_drops_or_initialises_are_a_refusal_naming_them(heads, tmp_path):
    # a sequence classifier on a question-answering folder would drop its head and initialise a classifier afresh
    run, _ = _convert(heads["question-answering"], tmp_path / "classifier", "--task", "text-classification")
    assert run.returncode == 2, run.output
    assert "qa_outputs.weight" in run.stderr and "classifier.weight" in run.stderr and "freshly initialised" in run.stderr
    assert "Traceback" not in run.stderr and not (tmp_path / "classifier" / "question-answering.onnx").exists()
    # an architecture no task loads is refused, not loaded as the base model
    run, _ = _convert(heads["pretraining"], tmp_path / "pretraining")
    assert run.returncode == 2 and "BertForPreTraining" in run.stderr and "no task of this tool loads" in run.stderr


def test_the_features_of_a_head_folder_are_its_own_encoders_with_no_pooler_made_up(heads, tmp_path):
    run, report = _convert(heads["question-answering"], tmp_path / "out", "--task", "feature-extraction")
    assert run.returncode == 0, run.output
    graph = onnx.load(tmp_path / "out" / "question-answering.onnx").graph
    assert [o.name for o in graph.output] == ["last_hidden_state"]
    ids = np.random.default_rng(9).integers(0, 100, (3, 19))
    got = _onnx_outputs(
        tmp_path / "out" / "question-answering.onnx", {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    )
    eager = transformers.BertForQuestionAnswering.from_pretrained(heads["question-answering"]).eval()
    with torch.no_grad():
        want = eager.bert(input_ids=torch.from_numpy(ids)).last_hidden_state.numpy()
    np.testing.assert_allclose(got["last_hidden_state"], want, atol=1e-4)


def test_a_ctc_folder_exports_its_logits_at_audio_lengths_its_encoder_takes(heads, tmp_path):
    run, report = _convert(heads["ctc"], tmp_path / "out")
    assert run.returncode == 0, run.output
    assert "task automatic-speech-recognition:" in report["source"]["description"]
    # the feature encoder's kernels (10, 3) and strides (5, 2) make two frames of 30 samples: nothing shorter is generated
    lengths = {int(c["shape"].split("T=")[1].split(",")[0]) for c in report["artifacts"][0]["checks"] if "T=" in c["shape"]}
    assert lengths and min(lengths) >= 30 and all(c["status"] == "passed" for c in report["artifacts"][0]["checks"] if "T=" in c["shape"])
    wave = np.random.default_rng(4).uniform(-1, 1, (3, 333)).astype(np.float32)
    got = _onnx_outputs(tmp_path / "out" / "ctc.onnx", {"input_values": wave})
    eager = transformers.Wav2Vec2ForCTC.from_pretrained(heads["ctc"]).eval()
    with torch.no_grad():
        np.testing.assert_allclose(got["logits"], eager(torch.from_numpy(wave)).logits.numpy(), atol=1e-4)


def test_a_segmentation_folder_exports_its_logits(heads, tmp_path):
    run, report = _convert(heads["segmentation"], tmp_path / "out")
    assert run.returncode == 0, run.output
    assert "task semantic-segmentation:" in report["source"]["description"]
    pixels = np.random.default_rng(5).standard_normal((3, 3, 32, 32)).astype(np.float32)
    got = _onnx_outputs(tmp_path / "out" / "segmentation.onnx", {"pixel_values": pixels})
    eager = transformers.SegformerForSemanticSegmentation.from_pretrained(heads["segmentation"]).eval()
    with torch.no_grad():
        np.testing.assert_allclose(got["logits"], eager(torch.from_numpy(pixels)).logits.numpy(), atol=1e-4)


def test_clip_takes_text_and_images_and_an_input_may_be_added_that_its_forward_takes(heads, tmp_path):
    # the task names the joint model alone (without it, a CLIP folder converts as its towers and the joint model)
    zero_shot = ("--task", "zero-shot-image-classification")
    run, report = _convert(heads["clip"], tmp_path / "out", *zero_shot, "--input", "position_ids:int64[B,S]{0..31}")
    assert run.returncode == 0, run.output
    assert "task zero-shot-image-classification: given with --task" in report["source"]["description"]
    graph = onnx.load(tmp_path / "out" / "clip.onnx").graph
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "pixel_values", "position_ids"]
    assert {"logits_per_image", "text_embeds", "image_embeds"} <= {o.name for o in graph.output}
    rng = np.random.default_rng(6)
    ids, pixels = rng.integers(0, 100, (3, 11)), rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    positions = np.tile(np.arange(11), (3, 1))
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "pixel_values": pixels, "position_ids": positions}
    got = _onnx_outputs(tmp_path / "out" / "clip.onnx", feed)
    eager = transformers.CLIPModel.from_pretrained(heads["clip"]).eval()
    with torch.no_grad():
        want = eager(**{k: torch.from_numpy(v) for k, v in feed.items()})
    np.testing.assert_allclose(got["logits_per_image"], want.logits_per_image.numpy(), atol=1e-4)
    run, _ = _convert(heads["clip"], tmp_path / "unknown", *zero_shot, "--input", "pixels:float32[B,3,32,32]")
    assert run.returncode == 2 and "its forward also takes" in run.stderr and "Traceback" not in run.stderr


@pytest.fixture(scope="module")
def adapters(heads, tmp_path_factory):
    pytest.importorskip("peft")
    from fixtures.transformers_heads import write_adapter

    root = tmp_path_factory.mktemp("adapters")
    return {"alone": write_adapter(heads["llama"], root / "alone"), "beside": write_adapter(heads["llama"], root / "beside", beside=True)}


@pytest.mark.parametrize("form", ["alone", "beside"])
def test_a_peft_adapter_is_merged_and_the_artifact_is_the_adapted_model(heads, adapters, form, tmp_path):
    from peft import PeftModel

    run, report = _convert(adapters[form], tmp_path / "out")
    assert run.returncode == 0, run.output
    assert "PEFT adapter (LORA, r=4)" in report["source"]["description"]
    rng = np.random.default_rng(7)
    ids = rng.integers(0, 100, (3, 13))
    feed = {"input_ids": ids, "attention_mask": np.ones_like(ids), "position_ids": np.tile(np.arange(13), (3, 1))}
    feed |= {f"past_key_values.{i}.{part}": np.zeros((3, 1, 0, 16), np.float32) for i in range(2) for part in ("key", "value")}
    got = _onnx_outputs(tmp_path / "out" / f"{form}.onnx", feed)["logits"]
    base = transformers.LlamaForCausalLM.from_pretrained(heads["llama"]).eval()
    with torch.no_grad():
        before = base(input_ids=torch.from_numpy(ids)).logits.numpy()
        adapted = PeftModel.from_pretrained(base, adapters[form]).eval()(input_ids=torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(got, adapted, atol=1e-4)
    assert np.abs(got - before).max() > 1e-2  # the adapter changes the model, so a base-model artifact would fail above


def test_an_adapter_whose_base_is_not_a_local_folder_or_without_peft_is_a_clear_refusal(adapters, tmp_path):
    import json
    import shutil

    lost = shutil.copytree(adapters["alone"], tmp_path / "lost")
    config = json.loads((lost / "adapter_config.json").read_text())
    (lost / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "meta-llama/Llama-3.2-1B"}))
    run, _ = _convert(lost, tmp_path / "out")
    assert run.returncode == 2 and "holds a PEFT adapter without its base model" in run.stderr and "meta-llama/Llama-3.2-1B" in run.stderr
    # a fake environment without peft (a sitecustomize that hides it from every process of the run): the error names the extra
    hidden = tmp_path / "no_peft"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text("import sys\nsys.modules['peft'] = None\n")
    from tests.conftest import REPO

    run = run_cli(str(adapters["alone"]), "--to", "onnx", "--out", str(tmp_path / "nopeft"), env={"PYTHONPATH": f"{hidden}:{REPO}"})
    assert run.returncode == 2 and "peft" in run.stderr and "model-convert[peft]" in run.stderr, run.output
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    "name, stored, model_class", [("llama", "bfloat16", "LlamaForCausalLM"), ("classifier", "float16", "BertForSequenceClassification")]
)
def test_a_reduced_precision_checkpoint_converts_by_default_computed_in_float32(name, stored, model_class, tmp_path):
    from fixtures.transformers_heads import write_reduced_precision

    folder = write_reduced_precision(name, tmp_path / name)
    run, report = _convert(folder, tmp_path / "out")
    assert run.returncode == 0, run.output
    assert f"weights stored as {stored}, computed in float32 (--dtype float32)" in report["source"]["description"]
    assert report["options"]["dtype"] == "float32"
    rng = np.random.default_rng(8)
    ids = rng.integers(0, 100, (3, 17))
    feed = {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "token_type_ids": 0 * ids,
        "position_ids": np.tile(np.arange(17), (3, 1)),
    }
    feed |= {f"past_key_values.{i}.{part}": np.zeros((3, 1, 0, 16), np.float32) for i in range(2) for part in ("key", "value")}
    got = _onnx_outputs(tmp_path / "out" / f"{name}.onnx", feed)["logits"]
    # the artifact is the checkpoint's weights exactly, computed in float32
    eager = getattr(transformers, model_class).from_pretrained(folder, dtype=torch.float32).eval()
    with torch.no_grad():
        np.testing.assert_allclose(got, eager(input_ids=torch.from_numpy(ids)).logits.numpy(), atol=1e-4)


def test_dtype_source_keeps_a_bfloat16_checkpoint_in_bfloat16(tmp_path):
    from fixtures.transformers_heads import write_reduced_precision

    folder = write_reduced_precision("llama", tmp_path / "llama")
    run, report = _convert(folder, tmp_path / "out", "--dtype", "source", to="torch_export")
    assert run.returncode == 0, run.output
    assert any("past_key_values.0.key:bfloat16" in spec for spec in report["source"]["inputs"])
    program = torch.export.load(str(tmp_path / "out" / "llama.pt2"))
    assert {p.dtype for p in program.state_dict.values() if p.is_floating_point()} == {torch.bfloat16}
