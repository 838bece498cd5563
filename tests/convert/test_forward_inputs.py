"""Every forward input a Hugging Face model uses is an input of the artifact, or the report says why not: LayoutLM's word
boxes and LayoutLMv3's boxes and image are inputs (boxes drawn as boxes, within the config's coordinate table), every
other forward tensor parameter of the zoo's models is an input or named in the notes with the line that adds it, and a
model saved without its pooler is loaded as it was saved. The LayoutLM artifact is checked again here with ONNX Runtime,
at sizes the tool did not validate and on a page's boxes, against the library's own eager model."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from convert.errors import ConvertError
from convert.sources.request import SourceRequest
from tests.conftest import load_report, run_cli

TINY = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)


def _seeded():
    import torch
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    torch.manual_seed(0)
    return transformers


def _load(folder: Path, *inputs):
    from convert.sources.transformers import load_transformers_source
    from convert.specs import parse_input_specs

    return load_transformers_source(SourceRequest(model=folder, inputs=parse_input_specs(list(inputs))))


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    transformers = _seeded()
    root = tmp_path_factory.mktemp("forward_inputs")
    layoutlm = transformers.LayoutLMConfig(**TINY, num_labels=5)
    transformers.LayoutLMForTokenClassification(layoutlm).save_pretrained(root / "layoutlm")
    # the spatial embedding concatenates 4 coordinates and 2 sizes: 4 * 4 + 2 * 8 = hidden 32
    v3 = transformers.LayoutLMv3Config(**TINY, coordinate_size=4, shape_size=8, input_size=32, patch_size=8, num_labels=3)
    transformers.LayoutLMv3ForTokenClassification(v3).save_pretrained(root / "layoutlmv3")
    transformers.BertModel(transformers.BertConfig(**TINY), add_pooling_layer=False).save_pretrained(root / "bert_no_pooler")
    return {name: root / name for name in ("layoutlm", "layoutlmv3", "bert_no_pooler")}


@pytest.fixture(scope="module")
def converted(folders, tmp_path_factory) -> dict[str, tuple]:
    """Each folder converted to ONNX once by the command line: (the run, its report, the ONNX file)."""
    out = tmp_path_factory.mktemp("forward_inputs_out")
    runs = {}
    for name, folder in folders.items():
        run = run_cli(str(folder), "--to", "onnx", "--out", str(out / name))
        report = out / name / "report.json"
        runs[name] = (run, load_report(report) if report.exists() else None, out / name / f"{name}.onnx")
    return runs


def _onnx_outputs(path: Path, feed: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {i.name: feed[i.name] for i in session.get_inputs()}), strict=True))


def _validated_sizes(report: dict, symbol: str) -> set[int]:
    shapes = [c["shape"] for a in report["artifacts"] for c in a["checks"]]
    return {int(part.split("=")[1]) for shape in shapes for part in shape.split(",") if part.startswith(symbol + "=")}


def _page_boxes(rng, batch: int, length: int) -> np.ndarray:
    """Words laid out as on a page, 0..1000 as LayoutLM's processors normalise them: lines of words left to right."""
    boxes = np.zeros((batch, length, 4), np.int64)
    for row in range(batch):
        x, line = 40, 0
        for word in range(length):
            width = int(rng.integers(30, 160))
            if x + width > 960:
                x, line = 40, line + 1
            top = 60 + 45 * line
            boxes[row, word] = (x, top, x + width, top + int(rng.integers(18, 30)))
            x += width + int(rng.integers(8, 20))
    return boxes


def _eager(model_class, folder: Path):
    model, info = model_class.from_pretrained(folder, output_loading_info=True)
    assert not any(info.values()), info  # the library's own load report: nothing dropped or initialised afresh
    return model.eval()


def test_a_layoutlm_artifact_takes_the_word_boxes_and_matches_the_library_on_a_page(converted, folders):
    torch = pytest.importorskip("torch")
    transformers = _seeded()
    run, report, path = converted["layoutlm"]
    assert run.returncode == 0, run.output
    assert [i.name for i in onnx.load(path).graph.input] == ["input_ids", "attention_mask", "token_type_ids", "bbox"]
    assert "bbox:int64[B,S,4]{0..1023}" in report["source"]["inputs"]  # within the config's max_2d_position_embeddings
    assert 'add it with --input "position_ids:int64[B,S]{0..63}"' in run.stdout  # what was left at its default, said
    batch, length = 3, 23
    assert batch not in _validated_sizes(report, "B") and length not in _validated_sizes(report, "S")
    rng = np.random.default_rng(11)
    ids = rng.integers(0, 100, (batch, length))
    mask = np.ones_like(ids)
    mask[2, 15:] = 0
    feed = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids), "bbox": _page_boxes(rng, batch, length)}
    got = _onnx_outputs(path, feed)["logits"]
    eager = _eager(transformers.LayoutLMForTokenClassification, folders["layoutlm"])
    with torch.no_grad():
        want = eager(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
        blind = eager(**{k: torch.from_numpy(v) for k, v in feed.items() if k != "bbox"}).logits.numpy()
    np.testing.assert_allclose(got, want, atol=1e-4)
    assert np.abs(want - blind).max() > 1e-2  # the boxes change the outputs: an artifact without them would not match


def test_a_layoutlmv3_artifact_takes_the_boxes_and_the_page_image(converted, folders):
    torch = pytest.importorskip("torch")
    transformers = _seeded()
    run, report, path = converted["layoutlmv3"]
    assert run.returncode == 0, run.output
    assert {"bbox", "pixel_values"} <= {i.name for i in onnx.load(path).graph.input}
    assert "pixel_values:float32[B,3,32,32]" in " ".join(report["source"]["inputs"])  # the config's input_size
    rng = np.random.default_rng(12)
    ids = rng.integers(3, 100, (3, 9))
    feed = {
        "input_ids": ids,
        "attention_mask": np.ones_like(ids),
        "token_type_ids": np.zeros_like(ids),
        "bbox": _page_boxes(rng, 3, 9),
        "pixel_values": rng.uniform(-1, 1, (3, 3, 32, 32)).astype(np.float32),  # the processor's (x - 0.5) / 0.5
    }
    got = _onnx_outputs(path, feed)["logits"]
    eager = _eager(transformers.LayoutLMv3ForTokenClassification, folders["layoutlmv3"])
    with torch.no_grad():
        want = eager(**{k: torch.from_numpy(v) for k, v in feed.items()}).logits.numpy()
    np.testing.assert_allclose(got, want, atol=1e-4)


def test_boxes_given_with_input_replace_the_tools_and_are_still_drawn_as_boxes(folders):
    from convert.validators.inputs import generate_feed

    source = _load(folders["layoutlm"], "bbox:int64[B,S,4]{0..1000}")
    (spec,) = [s for s in source.signature.inputs if s.name == "bbox"]
    assert (spec.low, spec.high, spec.structure) == (0, 1000, "boxes")
    boxes = generate_feed([spec], {"B": 4, "S": 50}, sample=0)["bbox"]
    assert boxes.max() <= 1000 and (boxes[..., 0] <= boxes[..., 2]).all() and (boxes[..., 1] <= boxes[..., 3]).all()
    assert "bbox" not in " ".join(source.info.notes)


def test_a_model_saved_without_its_pooler_converts_as_saved(converted):
    run, report, path = converted["bert_no_pooler"]
    assert run.returncode == 0, run.output
    assert [o.name for o in onnx.load(path).graph.output] == ["last_hidden_state"]
    assert any("no pooler weights" in note and "add_pooling_layer=False" in note for note in report["notes"])
    assert "no pooler weights" in run.stdout


def test_a_checkpoint_lacking_another_weight_is_still_refused(folders, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    folder = shutil.copytree(folders["bert_no_pooler"], tmp_path / "bert_missing")
    weights = load_file(folder / "model.safetensors")
    del weights["encoder.layer.1.output.dense.bias"]
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConvertError, match=r"freshly initialised: encoder\.layer\.1\.output\.dense\.bias"):
        _load(folder)


# ---- every forward tensor parameter of the zoo's transformers models: an input, or named in the notes --------------

# This test's own reading of which parameters take tensors (not the tool's): those annotated with a tensor or a cache,
# or not annotated; logits_to_keep (an int or a tensor of the positions to keep) is an option of the call.
_TENSOR = re.compile(r"Tensor|Cache|ndarray")
_OPTIONS = {"logits_to_keep"}
# artifact inputs that feed a forward parameter of another name: a decoder's cache, an encoder-decoder's decoder (its
# tokens named input_ids, as Optimum names them, and the encoder's outputs)
_FED_AS = {
    "cache": "past_key_values.0.",
    "past_key_values": "past_key_values.0.",
    "decoder_input_ids": "input_ids",
    "encoder_outputs": "encoder_hidden_states",
}


def _tensor_parameters(forward) -> list[str]:
    return [
        name
        for name, p in inspect.signature(forward).parameters.items()
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and name not in _OPTIONS
        and (p.annotation is p.empty or _TENSOR.search(str(p.annotation)))
    ]


def _zoo_transformers_entries() -> list[str]:
    from fixtures.zoo_hf import ENTRIES

    return [e.name for e in ENTRIES.values() if e.family in ("transformers", "peft") and e.check != "sentence"]


def test_no_forward_tensor_parameter_of_the_zoos_models_is_dropped_silently(tmp_path):
    transformers = _seeded()
    from convert.sources.transformers import load_transformers_source
    from fixtures.zoo_hf import ENTRIES, write

    names = _zoo_transformers_entries()
    assert len(names) >= 12
    silent = {}
    for name in names:
        written, flags = write(name, tmp_path / name), ENTRIES[name].flags
        task = flags[flags.index("--task") + 1] if "--task" in flags else None
        source = load_transformers_source(SourceRequest(model=Path(written["model"]), task=task))
        # the model the artifact computes: the module exported, or the one a decoder's cache wrapper calls
        module = source.native
        model = module if isinstance(module, transformers.PreTrainedModel) else module.model
        inputs, notes = [s.name for s in source.signature.inputs], " ".join(source.info.notes)
        dropped = [
            p
            for p in _tensor_parameters(model.forward)
            if p not in inputs and f"{p} (" not in notes and not any(i.startswith(_FED_AS.get(p, "\0")) for i in inputs)
        ]
        if dropped:
            silent[name] = dropped
    assert not silent, f"forward tensor parameters neither inputs nor named in the notes: {silent}"


@pytest.mark.fast
def test_the_rule_of_tensor_parameters_reads_annotations_and_names_each_one_left_out():
    from convert.sources.transformers import forward_tensor_parameters, left_at_default
    from convert.specs import InputSpec

    class torch:  # the library's name in the annotations below, which are read as text (never evaluated)
        Tensor = LongTensor = None

    def forward(  # a bound forward, as a model's is
        input_ids: torch.LongTensor | None = None,
        bbox: torch.LongTensor | None = None,
        position_ids: torch.LongTensor | None = None,
        labels: torch.LongTensor | None = None,
        visual_embeds=None,
        return_dict: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ): ...

    assert list(forward_tensor_parameters(forward)) == ["input_ids", "bbox", "position_ids", "labels", "visual_embeds"]
    config = SimpleNamespace(max_position_embeddings=64, max_2d_position_embeddings=1024)
    specs = (InputSpec("input_ids", "int64", ("B", "S"), 0, 99),)
    (note,) = left_at_default(forward, {"input_ids"}, config, specs, addable=True)
    assert '--input "bbox:int64[B,S,4]{0..1000}"' in note and '--input "position_ids:int64[B,S]{0..63}"' in note
    assert "labels (training targets" in note and '--input "labels' not in note
    assert 'visual_embeds (not an input this tool generates; add it with --input "visual_embeds:float32[DIMS]")' in note
    assert "return_dict" not in note and "logits_to_keep" not in note and "kwargs" not in note
    (fixed,) = left_at_default(forward, {"input_ids"}, config, specs, addable=False)
    assert "--input" not in fixed
    assert left_at_default(forward, {"input_ids", "bbox", "position_ids", "labels", "visual_embeds"}, config, specs, True) == []
