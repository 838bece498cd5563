"""Dual encoders (CLIP, SigLIP) as their users write them (save_pretrained of the library's own classes, small configs, a
fixed seed), converted as a text tower, a vision tower and the joint model: each component's source against the
library's own get_text_features / get_image_features / forward, the whole conversion with its similarity check, the text
tower's ONNX checked again at sizes the validation did not use, and a deliberately wrong artifact found and blamed."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

import convert
from convert.assembled.dual_encoder import check_similarity
from convert.errors import ConvertError
from convert.sources.request import SourceRequest
from convert.sources.resolve import resolve_source

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

CLASSES = {"clip": "CLIPModel", "siglip": "SiglipModel"}
TRUTH_TOLERANCE = 1e-4  # max abs error of an fp32 ONNX artifact (or a source) against the library's eager model


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    from fixtures.transformers_folders import write_folder

    root = tmp_path_factory.mktemp("dual_encoders")
    return {name: write_folder(name, root / name) for name in CLASSES}


@pytest.fixture(scope="module")
def converted(folders, tmp_path_factory):
    """Each folder converted to ONNX once (one at a time) when a test first asks for it: its ConversionResult and out."""
    out = tmp_path_factory.mktemp("dual_encoder_runs")
    done: dict[str, tuple] = {}

    def run(name: str):
        if name not in done:
            done[name] = (convert.convert(str(folders[name]), to=["onnx"], out=str(out / name)), out / name)
        return done[name]

    return run


def _library(folder: Path, name: str):
    return getattr(transformers, CLASSES[name]).from_pretrained(folder).eval()


def _texts(batch: int, length: int, seed: int, padded: bool) -> dict[str, np.ndarray]:
    """Token ids below the fixtures' vocabulary, and (``padded``) a mask whose later rows are shorter."""
    rng = np.random.default_rng(seed)
    feed = {"input_ids": rng.integers(3, 1000, size=(batch, length))}
    if padded:
        mask = np.ones((batch, length), dtype=np.int64)
        for row in range(1, batch):
            mask[row, max(1, length - 3 * row) :] = 0
        feed["attention_mask"] = mask
    return feed


def _close(got: np.ndarray, want, what: str) -> None:
    want = want.detach().numpy() if hasattr(want, "detach") else np.asarray(want)
    assert got.shape == want.shape, what
    assert np.abs(got - want).max() <= TRUTH_TOLERANCE, f"{what}: off by {np.abs(got - want).max()}"


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_component_is_the_library_s_own_tower_or_model(folders, name):
    folder = folders[name]
    library = _library(folder, name)
    sources = {c: resolve_source(SourceRequest(model=str(folder), component=c)) for c in ("text_model", "vision_model", "joint")}
    masked = name == "clip"  # SigLIP takes no mask, as Optimum exports it: trained on unmasked padded texts
    text_inputs = ["input_ids", "attention_mask"] if masked else ["input_ids"]
    assert [s.name for s in sources["text_model"].signature.inputs] == text_inputs
    assert [str(s) for s in sources["vision_model"].signature.inputs] == ["pixel_values:float32[B,3,32,32]"]
    joint = sources["joint"].signature.inputs
    assert [s.name for s in joint] == ["input_ids", "pixel_values", *text_inputs[1:]]  # the forward's order, as Optimum's
    assert joint[0].dims == ("T", "S") and joint[1].dims[0] == "B"  # texts and images counted apart
    assert sources["text_model"].dim_ranges == {"S": (1, 32)}
    assert all(s.info.task == "zero-shot-image-classification" and s.info.sha256 for s in sources.values())

    texts = _texts(4, 9, seed=1, padded=masked)
    images = np.random.default_rng(2).standard_normal((3, 3, 32, 32)).astype(np.float32)
    tensors = {k: torch.from_numpy(v) for k, v in texts.items()}
    with torch.no_grad():
        text_features = library.get_text_features(**tensors)
        image_features = library.get_image_features(pixel_values=torch.from_numpy(images))
        together = library(**tensors, pixel_values=torch.from_numpy(images))
    got = sources["text_model"].run(texts)
    assert list(got) == ["text_embeds", "last_hidden_state"]
    _close(got["text_embeds"], text_features.pooler_output, "text_embeds (unnormalised, as get_text_features)")
    _close(got["last_hidden_state"], text_features.last_hidden_state, "the text tower's last_hidden_state")
    got = sources["vision_model"].run({"pixel_values": images})
    assert list(got) == ["image_embeds", "last_hidden_state"]
    _close(got["image_embeds"], image_features.pooler_output, "image_embeds (unnormalised, as get_image_features)")
    got = sources["joint"].run({**texts, "pixel_values": images})
    assert list(got) == ["logits_per_image", "logits_per_text", "text_embeds", "image_embeds"]
    assert got["logits_per_image"].shape == (3, 4)
    for output in got:
        _close(got[output], together[output], f"the joint model's {output}")


def test_an_input_may_pin_a_component_s_shape_and_no_other_input_is_taken(folders):
    from convert.specs import InputSpec

    pinned = InputSpec("input_ids", "int64", ("B", 32), 0, 999)
    source = resolve_source(SourceRequest(model=str(folders["siglip"]), component="text_model", inputs=(pinned,)))
    assert source.signature.inputs == (pinned,) and source.dim_ranges == {}
    with pytest.raises(ConvertError, match="'pixels', which the dual encoder's vision_model does not take"):
        given = (InputSpec("pixels", "float32", ("B", 3, 32, 32)),)
        resolve_source(SourceRequest(model=str(folders["clip"]), component="vision_model", inputs=given))


def test_a_siglip2_folder_is_refused_with_why(tmp_path):
    torch.manual_seed(0)
    text = dict(vocab_size=100, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32)
    vision = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32, num_patches=16, patch_size=4)
    config = transformers.Siglip2Config(text_config=text, vision_config=vision)
    transformers.Siglip2Model(config).save_pretrained(tmp_path / "siglip2")
    with pytest.raises(ConvertError, match="SigLIP 2.*spatial_shapes"):
        resolve_source(SourceRequest(model=str(tmp_path / "siglip2"), component="text_model"))


@pytest.mark.parametrize("name", list(CLASSES))
def test_the_conversion_passes_with_the_similarity_check(converted, name):
    result, out = converted(name)
    report = result.report
    assert report.composite == "dual-encoder"
    assert [c.name for c in report.components] == ["text_model", "vision_model", "joint"]
    assert all(c.passed for c in report.components), [c.error for c in report.components]
    assert (out / "text_model" / "text_model.onnx").is_file() and (out / "joint" / "model.onnx").is_file()
    (check,) = report.assembled
    assert check.name == "similarity" and check.status == "passed", check.reason
    assert check.metrics["max_abs_error"] <= 1e-4 * check.metrics["logit_scale_exp"]
    assert check.metrics["joint_max_abs_error"] <= 1e-4 * check.metrics["logit_scale_exp"]
    assert check.metrics["rank_match"] == check.metrics["joint_rank_match"] == 1.0
    assert check.budget.startswith("fp32")
    assert report.passed and report.exit_code == 0


@pytest.mark.parametrize("name", list(CLASSES))
def test_the_text_tower_s_onnx_holds_at_sizes_its_validation_did_not_use(converted, folders, name):
    result, out = converted(name)
    session = ort.InferenceSession(str(out / "text_model" / "text_model.onnx"), providers=["CPUExecutionProvider"])
    library = _library(folders[name], name)
    # the validation used batches 1, 2, 5 and sequences 1, 7, 15: here 3 texts at 11 tokens and at the longest, 32
    for length in (11, 32):
        texts = _texts(3, length, seed=length, padded=name == "clip")
        embeds, hidden = session.run(["text_embeds", "last_hidden_state"], texts)
        with torch.no_grad():
            want = library.get_text_features(**{k: torch.from_numpy(v) for k, v in texts.items()})
        _close(embeds, want.pooler_output, f"text_embeds at B=3, S={length}")
        _close(hidden, want.last_hidden_state, f"last_hidden_state at B=3, S={length}")


def _deliberately_wrong(path: Path, to: Path, initializer: str) -> Path:
    """A copy of an ONNX artifact with one weight perturbed: a fault made on purpose, to test that the check finds it."""
    from onnx import numpy_helper

    model = onnx.load(str(path))
    weight = next(i for i in model.graph.initializer if i.name == initializer)
    values = numpy_helper.to_array(weight)
    noise = np.random.default_rng(0).standard_normal(values.shape).astype(values.dtype) * values.std()
    weight.CopyFrom(numpy_helper.from_array(values + noise, weight.name))
    onnx.save(model, str(to))
    return to


def _artifacts(out: Path) -> dict[str, Path]:
    return {
        "text_model": out / "text_model" / "text_model.onnx",
        "vision_model": out / "vision_model" / "vision_model.onnx",
        "joint": out / "joint" / "model.onnx",
    }


def test_a_deliberately_wrong_vision_tower_fails_the_check_and_is_blamed(converted, folders, tmp_path):
    _, out = converted("clip")
    artifacts = _artifacts(out)
    artifacts["vision_model"] = _deliberately_wrong(
        artifacts["vision_model"], tmp_path / "vision_model.onnx", "model.visual_projection.weight"
    )
    check = check_similarity(folders["clip"], artifacts, precision="fp32", seed=0, trust_code=False)
    assert check.status == "failed"
    assert check.blamed == ["vision_model"]  # the text tower and the joint model alone still pass
    assert check.reason.startswith("the towers' (text_model and vision_model together) scores of texts against images")
    assert check.metrics["max_abs_error"] > 1e-4 * check.metrics["logit_scale_exp"]
    assert check.metrics["joint_max_abs_error"] <= 1e-4 * check.metrics["logit_scale_exp"]
    assert check.diverged_at.startswith("image ")


def test_a_joint_model_that_lacks_an_output_fails_and_is_blamed(converted, folders, tmp_path):
    _, out = converted("siglip")
    artifacts = _artifacts(out)
    model = onnx.load(str(artifacts["joint"]))
    kept = [o for o in model.graph.output if o.name != "logits_per_text"]  # a fault made on purpose
    del model.graph.output[:]
    model.graph.output.extend(kept)
    onnx.save(model, str(tmp_path / "model.onnx"))
    artifacts["joint"] = tmp_path / "model.onnx"
    check = check_similarity(folders["siglip"], artifacts, precision="fp32", seed=0, trust_code=False)
    assert check.status == "failed" and check.blamed == ["joint"]
    assert "logits_per_text" in check.reason


def test_the_check_is_skipped_where_it_cannot_run(converted, folders, tmp_path):
    _, out = converted("clip")
    artifacts = _artifacts(out)
    check = check_similarity(folders["clip"], artifacts, precision="fp8", seed=0, trust_code=False)
    assert check.status == "skipped" and "fp8" in check.reason
    partial = {k: v for k, v in artifacts.items() if k != "joint"}
    check = check_similarity(folders["clip"], partial, precision="fp32", seed=0, trust_code=False)
    assert check.status == "skipped" and "joint" in check.reason
    shutil.copytree(folders["clip"], tmp_path / "clip")
    (tmp_path / "clip" / "model.safetensors").unlink()
    with pytest.raises(ConvertError, match="no PyTorch weights"):
        check_similarity(tmp_path / "clip", artifacts, precision="fp32", seed=0, trust_code=False)
