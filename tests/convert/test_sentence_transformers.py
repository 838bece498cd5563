"""sentence-transformers folders as their users write them (the library's own modules over a small BERT, written with
SentenceTransformer.save): exported as the sentence embedding ``encode`` gives, checked by onnxruntime at a batch and
length the validation did not use against the library's own model; the transformer's token states with --task
feature-extraction; and folders this tool must refuse to load."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

import convert
from convert.errors import ConvertError
from tests.conftest import run_cli

pytest.importorskip("sentence_transformers")

UNSEEN = {"B": 3, "S": 11}  # a batch and length the validation does not draw (asserted below)
TOLERANCE = 1e-4


PAGE = "how-to/sentence-transformers.md"
# the guide's line that makes each run, by its --out
RUNS = {"mean": "out/st-mean", "cls-dense": "out/st-cls-dense", "features": "out/st-mean-tokens"}


@pytest.fixture(scope="module")
def folders(page_run) -> dict[str, Path]:
    """The folders the guide's first line writes (fixtures/sentence_transformers_folders.py), in its run's folder:
    read-only."""
    from fixtures.sentence_transformers_folders import FOLDERS

    return {name: page_run(PAGE).folder(PAGE) / "out" / "st" / name for name in FOLDERS}


@pytest.fixture(scope="module")
def runs(page_run):
    """The guide's lines, as run by tests/test_docs.py (once a session): (the run, its report or None)."""

    def get(name: str) -> tuple:
        ran = page_run(PAGE)
        (line,) = [line for line in ran.lines if line.line.endswith(f" --out {RUNS[name]}")]
        return line, line.report(ran.folder(PAGE))

    return get


def _library(folder: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu", local_files_only=True).eval()


def _padded_ids(seed: int = 11) -> dict[str, np.ndarray]:
    """B=3 sequences of 11, 7 and 3 tokens ([CLS] first, word ids after), padded to S=11 with the mask saying so."""
    rng = np.random.default_rng(seed)
    batch, length = UNSEEN["B"], UNSEEN["S"]
    ids = np.zeros((batch, length), dtype=np.int64)
    mask = np.zeros((batch, length), dtype=np.int64)
    for row, used in enumerate((length, 7, 3)):
        ids[row, :used] = rng.integers(5, 100, size=used)
        ids[row, 0] = 2
        mask[row, :used] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}


def _onnx_outputs(path: str, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, {i.name: feed[i.name] for i in session.get_inputs()})))


def _library_outputs(folder: Path, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import torch

    with torch.no_grad():
        out = _library(folder)({name: torch.from_numpy(array) for name, array in feed.items()})
    return {name: value.numpy() for name, value in out.items() if isinstance(value, torch.Tensor)}


def _artifact(report: dict) -> dict:
    (record,) = [a for a in report["artifacts"] if a["format"] == "onnx"]
    return record


def _exported(runs, name: str) -> tuple[dict, str]:
    """The run's report and ONNX path, once the run passed at sizes other than the unseen ones."""
    run, report = runs(name)
    assert run.returncode == 0, run.output
    record = _artifact(report)
    assert record["passed"]
    assert "B={B},S={S}".format(**UNSEEN) not in {c["shape"] for c in record["checks"]}
    return report, record["path"]


@pytest.mark.parametrize(
    ("name", "modules", "width"),
    [("mean", "BertModel → Pooling(mean) → Normalize", 32), ("cls-dense", "BertModel → Pooling(cls) → Dense(32→16, Tanh) → Normalize", 16)],
)
def test_a_folder_exports_the_sentence_embedding_the_library_computes(runs, folders, name, modules, width):
    report, path = _exported(runs, name)
    source = report["source"]
    assert source["kind"] == "sentence-transformers"
    assert source["description"] == f"SentenceTransformer: {modules}; output sentence_embedding"
    assert source["inputs"] == ["input_ids:int64[B,S]{0..99}", "attention_mask:int64[B,S]", "token_type_ids:int64[B,S]{0..1}"]
    assert source["outputs"] == ["sentence_embedding"]
    assert [o.name for o in onnx.load(path, load_external_data=False).graph.output] == ["sentence_embedding"]
    assert _artifact(report)["dim_bounds"] == {"S": [1, 64]}  # max_seq_length, capped by the position table

    feed = _padded_ids()
    got = _onnx_outputs(path, feed)["sentence_embedding"]
    want = _library_outputs(folders[name], feed)["sentence_embedding"]
    assert got.shape == want.shape == (UNSEEN["B"], width)
    assert np.abs(got - want).max() < TOLERANCE
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)  # Normalize ran inside the graph


def test_the_artifact_gives_what_encode_gives_on_the_tokenizers_ids(runs, folders):
    _, path = _exported(runs, "mean")
    model = _library(folders["mean"])
    texts = ["w1 w2 w3", " ".join(f"w{i}" for i in range(4, 13)), "w13"]  # 5, 11 and 3 tokens: padded to 11
    features = {name: value.numpy() for name, value in model.preprocess(texts).items() if name != "modality"}
    assert features["input_ids"].shape == (3, 11) and features["attention_mask"].sum() == 19
    assert (features["input_ids"][1] == [2, *range(9, 18), 3]).all()  # every word its own id: no [UNK]
    got = _onnx_outputs(path, features)["sentence_embedding"]
    assert np.abs(got - model.encode(texts, convert_to_numpy=True)).max() < TOLERANCE


def test_the_token_states_with_the_task_feature_extraction(runs, folders):
    report, path = _exported(runs, "features")
    assert report["source"]["kind"] == "transformers" and "task feature-extraction: given with --task" in report["source"]["description"]
    assert "last_hidden_state" in report["source"]["outputs"]
    feed = _padded_ids()
    got = _onnx_outputs(path, feed)["last_hidden_state"]
    want = _library_outputs(folders["mean"], feed)["token_embeddings"]
    assert got.shape == want.shape == (UNSEEN["B"], UNSEEN["S"], 32)
    assert np.abs(got - want).max() < TOLERANCE


def test_an_input_spec_overrides_the_configs_and_an_unknown_one_is_refused(folders):
    source = convert.load(folders["mean"], inputs=["input_ids:int64[B,S]{5..49}"])
    assert [str(s) for s in source.signature.inputs][:2] == ["input_ids:int64[B,S]{5..49}", "attention_mask:int64[B,S]"]
    with pytest.raises(ConvertError) as info:
        convert.load(folders["mean"], inputs=["pixel_values:float32[B,3,8,8]"])
    assert "--input names 'pixel_values', which the sentence-transformers model does not take" in info.value.problem


def test_a_bfloat16_folder_computes_in_float32_unless_its_own_dtype_is_asked_for(tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer

    from fixtures.sentence_transformers_folders import write_folder

    folder = write_folder("mean", tmp_path / "bf16", dtype=torch.bfloat16)
    feed = _padded_ids()
    for dtype, note in (("float32", "; weights stored as bfloat16, computed in float32 (--dtype float32)"), ("source", "")):
        source = convert.load(folder, dtype=dtype)
        assert source.info.description == f"SentenceTransformer: BertModel → Pooling(mean) → Normalize; output sentence_embedding{note}"
        library = SentenceTransformer(
            str(folder), device="cpu", local_files_only=True, model_kwargs={"dtype": "auto" if dtype == "source" else torch.float32}
        )
        with torch.no_grad():
            want = library.eval()({name: torch.from_numpy(array) for name, array in feed.items()})["sentence_embedding"].float().numpy()
        assert library.dtype == (torch.bfloat16 if dtype == "source" else torch.float32)
        assert np.abs(source.run(feed)["sentence_embedding"] - want).max() < 1e-6


def _copy(folder: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_pickled_weights_are_refused_without_trust_and_load_with_it(folders, tmp_path):
    from fixtures.sentence_transformers_folders import pickle_weights

    pickled = pickle_weights(_copy(folders["mean"], tmp_path, "pickled"))
    run = run_cli(str(pickled), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.output
    assert "holds its weights only as pytorch_model.bin, a pickle" in run.stderr and "--trust-code" in run.stderr

    feed = _padded_ids()
    source = convert.load(pickled, trust_code=True)
    got = source.run(feed)["sentence_embedding"]
    assert np.abs(got - _library_outputs(folders["mean"], feed)["sentence_embedding"]).max() < TOLERANCE


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"num_hidden_layers": 3}, "missing: encoder.layer.2."),  # a layer with no weights: initialised afresh
        ({"num_hidden_layers": 1}, "unexpected: encoder.layer.1."),  # a layer's weights dropped
        ({"intermediate_size": 48}, "mismatch: encoder.layer.{0, 1}."),  # weights of another shape: initialised afresh
    ],
    ids=["missing", "unexpected", "mismatched"],
)
def test_weights_the_load_report_names_as_dropped_or_freshly_initialised_refuse_the_folder(folders, tmp_path, change, named):
    edited = _copy(folders["mean"], tmp_path, "edited")
    _edit_json(edited / "config.json", lambda config: config.update(change))
    with pytest.raises(ConvertError) as info:
        convert.load(edited)
    assert f"weights dropped or freshly initialised ({named}" in info.value.problem
    assert "SentenceTransformer.save" in info.value.next_step


def _module_type(index: int, kind: str):
    def change(entries: list) -> None:
        entries[index]["type"] = kind

    return change


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            lambda folder: _edit_json(folder / "modules.json", _module_type(1, "my_package.MyPooling")),
            "names a module class that is not sentence-transformers' own (my_package.MyPooling); loading it runs its code",
        ),
        (
            lambda folder: _edit_json(folder / "config.json", lambda c: c.update(auto_map={"AutoModel": "modeling_evil.EvilModel"})),
            "names code in the folder (auto_map: modeling_evil.py)",
        ),
        (
            lambda folder: _edit_json(folder / "config_sentence_transformers.json", lambda c: c.update(model_type="SparseEncoder")),
            "is a SparseEncoder folder, and this tool exports SentenceTransformer folders",
        ),
        (lambda folder: (folder / "model.safetensors").unlink(), "holds no PyTorch weights (model.safetensors) for its transformer"),
        (
            # without trust the library would load Tanh in its place: another model than the folder's
            lambda folder: _edit_json(folder / "2_Dense" / "config.json", lambda c: c.update(activation_function="my_package.Swish")),
            "2_Dense names an activation function outside torch (my_package.Swish); loading it runs its code",
        ),
    ],
    ids=["custom-module", "auto-map", "sparse-encoder", "no-weights", "dense-activation"],
)
def test_folders_that_would_run_code_or_describe_another_model_are_refused(folders, tmp_path, edit, problem):
    folder = _copy(folders["cls-dense"], tmp_path, "edited")
    edit(folder)
    with pytest.raises(ConvertError) as info:
        convert.load(folder)
    assert problem in info.value.problem


def test_a_first_module_with_its_own_tokenizer_is_refused_naming_it(tmp_path):
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import StaticEmbedding
    from transformers import AutoTokenizer

    from fixtures.sentence_transformers_folders import transformer_folder

    tokenizer = AutoTokenizer.from_pretrained(transformer_folder(tmp_path / "bert"))
    SentenceTransformer(modules=[StaticEmbedding(tokenizer, embedding_dim=16)], device="cpu").save(str(tmp_path / "static"))
    with pytest.raises(ConvertError) as info:
        convert.load(tmp_path / "static")
    assert "the first module 0 (StaticEmbedding) is not a Transformer" in info.value.problem
