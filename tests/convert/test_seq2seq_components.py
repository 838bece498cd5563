"""An encoder-decoder's three components, family by family (T5, BART, Marian, Whisper, a ViT+GPT-2 VisionEncoderDecoder;
small configs from transformers' own classes, save_pretrained, a fixed seed): each component's source against the
library's own step on a padded batch, its decoder_with_past fed the library's own cache; Marian and Whisper converted in
one run with their generation check; a decoder_with_past whose cross-attention cache is wired wrong found and blamed;
Optimum's ORTModelForSeq2SeqLM and ORTModelForSpeechSeq2Seq loading the folders, judged by their logits as well as their
tokens (a tiny model's greedy tokens often repeat one token whatever its cache holds).

tests/convert/test_encoder_decoder.py converts BART and the VisionEncoderDecoder; tests/convert/test_transformers.py T5
and Whisper through the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import convert
from convert.assembled.encoder_decoder import check_generation
from convert.sources.request import SourceRequest
from convert.sources.resolve import resolve_source
from tests.conftest import REPO

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

FAMILIES = ("t5", "bart", "marian", "whisper", "vision_encoder_decoder")
COMPONENTS = ("encoder", "decoder", "decoder_with_past")
FILES = {"encoder": "encoder_model.onnx", "decoder": "decoder_model.onnx", "decoder_with_past": "decoder_with_past_model.onnx"}
TOLERANCE = 1e-5  # a source against the library's own eager step, both fp32 on the CPU
OPTIMUM_PYTHON = REPO / ".venv-optimum" / "bin" / "python"


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    from fixtures.transformers_folders import write_folder

    root = tmp_path_factory.mktemp("seq2seq")
    return {name: write_folder(name, root / name) for name in FAMILIES}


# Whisper's task given, as its users give it; Marian's inferred from its config
TASKS = {"whisper": {"task": "automatic-speech-recognition-with-past"}}


@pytest.fixture(scope="module")
def converted(folders, tmp_path_factory):
    """A folder converted to ONNX once (one at a time) when a test first asks for it: its ConversionResult."""
    out = tmp_path_factory.mktemp("seq2seq_runs")
    done: dict[str, convert.ConversionResult] = {}

    def run(name: str) -> convert.ConversionResult:
        if name not in done:
            done[name] = convert.convert(str(folders[name]), to=["onnx"], out=str(out / name), **TASKS.get(name, {}))
        return done[name]

    return run


def _library(folder: Path):
    config = json.loads((folder / "config.json").read_text())
    return getattr(transformers, config["architectures"][0]).from_pretrained(folder).eval()


def _encoder_inputs(model, rng) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Two encoder inputs (token ids with the second row padded at its end, mel features, or pixels), and what the
    decoders take of them (the encoder's mask, for a text encoder)."""
    config = model.config
    if config.model_type == "whisper":
        return {"input_features": rng.standard_normal((2, config.num_mel_bins, 2 * config.max_source_positions)).astype(np.float32)}, {}
    if config.model_type == "vision-encoder-decoder":
        size = config.encoder.image_size
        return {"pixel_values": rng.standard_normal((2, config.encoder.num_channels, size, size)).astype(np.float32)}, {}
    ids = rng.integers(3, config.vocab_size - 1, (2, 6))
    mask = np.ones((2, 6), dtype=np.int64)
    mask[1, 4:] = 0
    ids[1, 4:] = config.pad_token_id
    return {"input_ids": ids, "attention_mask": mask}, {"encoder_attention_mask": mask}


def _cache(cache) -> dict[str, np.ndarray]:
    """The library's EncoderDecoderCache under Optimum's names."""
    named = {}
    for part, own in (("decoder", cache.self_attention_cache), ("encoder", cache.cross_attention_cache)):
        for i, layer in enumerate(own.layers):
            named[f"past_key_values.{i}.{part}.key"], named[f"past_key_values.{i}.{part}.value"] = layer.keys.numpy(), layer.values.numpy()
    return named


def _close(got: np.ndarray, want, what: str) -> None:
    want = want.detach().numpy() if hasattr(want, "detach") else want
    assert got.shape == want.shape, what
    assert np.abs(got - want).max() <= TOLERANCE, f"{what}: off by {np.abs(got - want).max()}"


@pytest.mark.parametrize("name", FAMILIES)
def test_each_component_s_source_is_the_library_s_own_step(folders, name):
    folder = folders[name]
    model = _library(folder)
    sources = {c: resolve_source(SourceRequest(model=folder, component=c)) for c in COMPONENTS}
    layers = model.config.decoder.n_layer if name == "vision_encoder_decoder" else 2
    masked = name in ("t5", "bart", "marian")

    # the names and their order as Optimum's ORTModel classes read them: the past inputs zip with the flattened cache,
    # each layer's self-attention key and value, then its cross-attention key and value
    encoder_inputs = [s.name for s in sources["encoder"].signature.inputs]
    assert encoder_inputs == {"whisper": ["input_features"], "vision_encoder_decoder": ["pixel_values"]}.get(
        name, ["input_ids", "attention_mask"]
    )
    mask = ["encoder_attention_mask"] if masked else []
    assert [s.name for s in sources["decoder"].signature.inputs] == ["input_ids", *mask, "encoder_hidden_states"]
    past = [f"past_key_values.{i}.{part}.{kv}" for i in range(layers) for part in ("decoder", "encoder") for kv in ("key", "value")]
    with_past = sources["decoder_with_past"].signature
    assert [s.name for s in with_past.inputs] == ["input_ids", *mask, *past]
    dims = {s.name: s.dims for s in with_past.inputs}
    fixed = {"whisper": 32, "vision_encoder_decoder": 17}.get(name, "E")  # Whisper's frames, the ViT's patches + 1
    assert dims["input_ids"] == ("B", "S") and dims["past_key_values.0.decoder.key"][::2] == ("B", "P")
    assert dims["past_key_values.0.encoder.value"][::2] == ("B", fixed)
    assert all(s.info.sha256 and s.info.task.endswith("-with-past") for s in sources.values())

    rng = np.random.default_rng(3)
    inputs, context = _encoder_inputs(model, rng)
    tensors = {k: torch.from_numpy(v) for k, v in inputs.items()}
    first_ids, later_ids = rng.integers(3, 900, (2, 3)), rng.integers(3, 900, (2, 2))
    with torch.no_grad():
        states = model.get_encoder()(**tensors).last_hidden_state
        step = dict(encoder_outputs=(states,), use_cache=True, attention_mask=tensors.get("attention_mask"))
        first = model(decoder_input_ids=torch.from_numpy(first_ids), **step)
        library_cache = _cache(first.past_key_values)  # read before the second step grows it
        second = model(decoder_input_ids=torch.from_numpy(later_ids), past_key_values=first.past_key_values, **step)

    encoded = sources["encoder"].run(inputs)
    assert list(encoded) == ["last_hidden_state"]
    _close(encoded["last_hidden_state"], states, "the encoder's last_hidden_state")
    decoded = sources["decoder"].run({"input_ids": first_ids, **context, "encoder_hidden_states": states.numpy()})
    own = [f"present.{i}.decoder.{kv}" for i in range(layers) for kv in ("key", "value")]
    cross = [f"present.{i}.encoder.{kv}" for i in range(layers) for kv in ("key", "value")]
    assert list(decoded) == ["logits", *own, *cross]
    _close(decoded["logits"], first.logits, "the first step's logits")
    for output, value in decoded.items():
        if output != "logits":
            _close(value, library_cache[output.replace("present", "past_key_values")], output)
    # the library's own cache in: the cross-attention read from it (the source takes no encoder states at all)
    later = sources["decoder_with_past"].run({"input_ids": later_ids, **context, **library_cache})
    assert list(later) == ["logits", *own]
    _close(later["logits"], second.logits, "a later step's logits")
    for output, value in _cache(second.past_key_values).items():
        if ".decoder." in output:
            _close(later[output.replace("past_key_values", "present")], value, f"the grown {output}")


@pytest.mark.parametrize("name", ["marian", "whisper"])
def test_the_components_convert_in_one_run_and_generate_as_transformers(converted, name):
    result = converted(name)
    report = result.report
    assert result.passed and report.exit_code == 0 and report.composite == "encoder-decoder"
    assert [(c.name, c.passed) for c in report.components] == [(c, True) for c in COMPONENTS]
    (check,) = report.assembled
    assert check.status == "passed" and check.name == "generation", check.reason
    assert check.metrics["token_match"] == 1.0 and check.metrics["max_abs_logit_error"] <= 1e-4
    assert check.budget.startswith("greedy tokens equal to transformers' generate")
    assert sorted(check.artifacts.values()) == ["decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx"]
    if name == "whisper":  # the encoder's states at its fixed frame count, and no attention mask
        assert report.components[1].inputs == ["input_ids:int64[B,S]{0..999}", "encoder_hidden_states:float32[B,32,32]"]
    out = result.report_path.parent
    assert (out / "config.json").is_file() and (out / "generation_config.json").is_file()
    # the ONNX files keep the sources' order, which Optimum's ORTDecoderForSeq2Seq zips the flattened cache with
    for component in COMPONENTS:
        graph = onnx.load(str(out / FILES[component]), load_external_data=False).graph
        record = next(c for c in report.components if c.name == component)
        assert [i.name for i in graph.input] == [spec.split(":")[0] for spec in record.inputs]
        assert [o.name for o in graph.output] == record.outputs


def _cross_cache_swapped(path: Path, to: Path) -> Path:
    """A deliberate fault, to test that the check finds it: the decoder_with_past file with its first layer's
    cross-attention key read where its value belongs and the value where the key does (the graph's inputs keep their
    names and order, so a feed by name and Optimum's feed by position both meet the fault)."""
    model = onnx.load(str(path))
    names = {"past_key_values.0.encoder.key": "past_key_values.0.encoder.value"}
    names.update({value: key for key, value in names.items()})
    for node in model.graph.node:
        node.input[:] = [names.get(n, n) for n in node.input]
    onnx.save(model, str(to))
    return to


def test_a_decoder_with_past_reading_its_cross_cache_wrong_fails_and_is_blamed(converted, folders, tmp_path):
    out = converted("marian").report_path.parent
    artifacts = {c: out / FILES[c] for c in COMPONENTS}
    wrong = {**artifacts, "decoder_with_past": _cross_cache_swapped(artifacts["decoder_with_past"], tmp_path / FILES["decoder_with_past"])}
    check = check_generation(folders["marian"], wrong, precision="fp32", seed=0, trust_code=False)
    assert check.status == "failed" and check.blamed == ["decoder_with_past"]  # the encoder and decoder files alone pass
    assert check.metrics["max_abs_logit_error"] > 1e-3 and check.diverged_at.startswith("token 2 of 8")
    assert check.reason.startswith(f"the artifacts part from transformers at {check.diverged_at}")
    healthy = check_generation(folders["marian"], artifacts, precision="fp32", seed=0, trust_code=False)
    assert healthy.status == "passed" and healthy.metrics["max_abs_logit_error"] <= 1e-4


def _optimum_loads(folder: Path, onnx_folder: Path, tmp_path: Path) -> tuple[dict, str]:
    done = subprocess.run(
        [str(OPTIMUM_PYTHON), str(REPO / "benchmarks" / "optimum_side.py"), "--load-seq2seq", str(folder), str(onnx_folder)]
        + ["--out", str(tmp_path / "optimum.json")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "optimum.json").read_text()), done.stderr[-3000:]


@pytest.mark.skipif(not OPTIMUM_PYTHON.exists(), reason="no Optimum environment (make .venv-optimum/.installed builds it)")
@pytest.mark.parametrize(("name", "model_class"), [("marian", "ORTModelForSeq2SeqLM"), ("whisper", "ORTModelForSpeechSeq2Seq")])
def test_optimum_loads_the_folder_and_generates_transformers_tokens_and_logits(converted, folders, name, model_class, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(converted(name).report_path.parent, copy)
    entry, log = _optimum_loads(folders[name], copy, tmp_path)
    assert entry["class"] == model_class and entry["loads"], (entry, log)
    assert entry["tokens_equal"] and entry["max_abs_logit_error"] <= 1e-4, (entry, log)


@pytest.mark.skipif(not OPTIMUM_PYTHON.exists(), reason="no Optimum environment (make .venv-optimum/.installed builds it)")
def test_optimum_s_logits_find_a_wrong_decoder_with_past(converted, folders, tmp_path):
    """Optimum runs the deliberately wrong file without complaint; its logits, not only its tokens, show it."""
    copy = tmp_path / "out"
    shutil.copytree(converted("marian").report_path.parent, copy)
    _cross_cache_swapped(copy / FILES["decoder_with_past"], copy / FILES["decoder_with_past"])
    entry, log = _optimum_loads(folders["marian"], copy, tmp_path)
    assert entry["loads"] and entry["max_abs_logit_error"] > 1e-3, (entry, log)
