"""Hugging Face model folders as their users write them (save_pretrained of the library's own classes, small configs,
fixed seeds): the task inferred or given, specs from the config, decoders exported with their cache under Optimum's
names and checked over greedy generation, encoders of encoder-decoder models, the gate and the API on a folder, and
folders this tool must refuse to load."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
import yaml

import convert
from convert import compat
from convert.errors import ConvertError
from tests.conftest import CliRun, LazyRuns, load_report, run_cli
from tests.pages import user_environment


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    """The folders the guide's first line writes, at the path it writes them (out/hf/NAME) under a scratch root."""
    from fixtures.transformers_folders import FOLDERS, write_folder

    root = tmp_path_factory.mktemp("hf_root")
    return {name: write_folder(name, root / "out" / "hf" / name) for name in FOLDERS}


RUNS = {
    "bert": ("bert", "--to", "onnx"),  # task inferred: fill-mask
    "gpt2": ("gpt2", "--to", "onnx", "--optimize", "int8"),  # task inferred: text-generation-with-past
    "llama": ("llama", "--task", "text-generation-with-past", "--to", "onnx,torch_export"),
    "t5": ("t5", "--task", "feature-extraction", "--to", "onnx"),
    "t5 components": ("t5", "--to", "onnx"),  # an encoder-decoder: its encoder, decoder and decoder_with_past
}


@pytest.fixture(scope="module")
def runs(folders, tmp_path_factory) -> LazyRuns:
    """Every command line run once, when a test first asks for it, as the guide shows it, from the root the folders
    were written under (tests/test_docs.py leaves the guide's page to these runs): the first through the installed
    model-convert with no PYTHONPATH, the others through the same entry point in process (tests/pages.py). Each gives
    (the run, its report or None)."""
    out = tmp_path_factory.mktemp("hf_runs")
    root = next(iter(folders.values())).parents[2]
    first = next(iter(RUNS))

    def attempt(name: str) -> tuple:
        model, *args = RUNS[name]
        argv = [f"out/hf/{model}", *args, "--out", str(out / name.replace(" ", "_"))]
        if name == first:
            done = subprocess.run(["model-convert", *argv], cwd=root, env=user_environment(), capture_output=True, text=True, timeout=900)
            run = CliRun(done.returncode, done.stdout, done.stderr)
        else:
            run = run_cli(*argv, cwd=root, timeout=900)
        report = out / name.replace(" ", "_") / "report.json"
        return run, load_report(report) if report.exists() else None

    return LazyRuns(RUNS, attempt)


HF_PAGE = "how-to/hugging-face.md"


def test_the_guide_shows_the_commands_these_tests_run():
    from tests.conftest import REPO

    section = (REPO / "docs" / HF_PAGE).read_text()
    lines = section.split("```bash\n", 1)[1].split("```", 1)[0].strip().splitlines()
    assert lines[0] == "python -m fixtures.transformers_folders out/hf"
    shown = [tuple(line.split(" --out ")[0].split()[1:]) for line in lines[1:]]  # each line's own --out: tests/test_docs.py
    assert all(line.startswith("model-convert ") for line in lines[1:])
    run = [(f"out/hf/{model}", *args) for model, *args in RUNS.values()]
    assert shown == run


def _artifact(report: dict, key: str) -> dict:
    return next(a for a in report["artifacts"] if (a["optimization"] or a["format"]) == key)


def _generation(record: dict) -> dict:
    (check,) = [c for c in record["checks"] if c["kind"] == "generation" and c["device"] == "cpu"]
    return check


def _shape_checks(record: dict) -> list[dict]:
    return [c for c in record["checks"] if c["kind"] == "shape" and c["device"] == "cpu"]


def test_an_encoder_folder_infers_its_task_and_takes_its_specs_from_the_config(runs):
    run, report = runs["bert"]
    assert run.returncode == 0, run.output
    source = report["source"]
    assert (
        source["kind"] == "transformers" and "task fill-mask: inferred from config.architectures (BertForMaskedLM)" in source["description"]
    )
    assert source["inputs"] == ["input_ids:int64[B,S]{0..999}", "attention_mask:int64[B,S]", "token_type_ids:int64[B,S]{0..1}"]
    assert source["outputs"] == ["logits"]
    record = _artifact(report, "onnx")
    assert record["passed"] and len({c["shape"] for c in _shape_checks(record) if c["status"] == "passed"}) >= 3
    assert record["dim_bounds"] == {"S": [1, 128]}  # bounded by max_position_embeddings


def test_a_decoder_is_exported_with_its_cache_under_optimums_names_and_checked_over_generation(runs):
    run, report = runs["gpt2"]
    assert run.returncode == 0, run.output
    assert "text-generation-with-past: inferred from config.architectures (GPT2LMHeadModel)" in report["source"]["description"]
    record = _artifact(report, "onnx")
    graph = onnx.load(record["path"], load_external_data=False).graph
    past = [f"past_key_values.{i}.{part}" for i in range(2) for part in ("key", "value")]
    assert [i.name for i in graph.input] == ["input_ids", "attention_mask", "position_ids", *past]
    assert [o.name for o in graph.output] == ["logits", *(name.replace("past_key_values", "present") for name in past)]
    checks = _shape_checks(record)
    assert all(c["status"] == "passed" for c in checks)
    empty = [c for c in checks if "P=0" in c["shape"]]
    assert empty and all(c["input_shapes"]["past_key_values.0.key"][2] == 0 for c in empty)  # the first step's empty cache
    assert {c["shape"].split("P=")[1] for c in checks} >= {"0", "1"} and len({c["shape"] for c in checks}) >= 4
    generation = _generation(record)
    assert generation["status"] == "passed" and generation["generation"]["steps"] >= 16
    assert generation["generation"]["token_agreement"] == 1.0 and generation["generation"]["first_divergent_step"] is None
    assert generation["generation"]["judged_by"].startswith("tolerance")
    int8 = _generation(_artifact(report, "int8"))
    assert int8["status"] == "passed" and int8["generation"]["judged_by"].startswith("token_agreement>=0.75,cosine>=")
    assert "token_agreement=100.0%" in run.stdout


def test_the_renderings_show_generation(runs, tmp_path):
    from convert.reports.model import Report
    from convert.reports.render import render_files

    _, report = runs["gpt2"]
    render_files(Report.model_validate(report), html=tmp_path / "r.html", markdown=tmp_path / "r.md", junit=tmp_path / "r.xml")
    html, markdown, junit = ((tmp_path / name).read_text() for name in ("r.html", "r.md", "r.xml"))
    assert "| generation of 16 tokens from 2 prompts | ✅ passed | logits over generation |" in markdown
    for text in (html, junit):
        assert "16 greedy steps x 2 prompts: token agreement 100.0%, first divergent step none" in text


def test_a_grouped_query_decoder_to_onnx_and_torch_export(runs):
    run, report = runs["llama"]
    assert run.returncode == 0, run.output
    assert "past_key_values.1.value:float32[B,2,P,8]" in report["source"]["inputs"]  # 2 key/value heads for 4 query heads
    onnx_record = _artifact(report, "onnx")
    assert onnx_record["passed"] and _generation(onnx_record)["status"] == "passed"
    program = _artifact(report, "torch_export")
    # torch.export bounds the attention mask's length (P+S) from below: the checks below it are skipped with the reason,
    # and generation (a prompt of 5, then one token at a time) runs within it
    assert program["passed"] and program["dim_bounds"]["P+S"][0] >= 2
    skipped = [c for c in _shape_checks(program) if c["status"] == "skipped"]
    assert all("takes P+S from" in c["reason"] for c in skipped)
    assert _generation(program)["status"] == "passed"


def test_an_encoder_decoders_features_are_its_encoders(runs, folders):
    run, report = runs["t5"]
    assert run.returncode == 0, run.output
    assert report["source"]["inputs"] == ["input_ids:int64[B,S]{0..999}", "attention_mask:int64[B,S]"]
    assert report["source"]["outputs"] == ["last_hidden_state"] and _artifact(report, "onnx")["passed"]
    audio = convert.load(folders["whisper"], task="feature-extraction")  # an audio encoder: features at its fixed length
    assert [str(s) for s in audio.signature.inputs] == ["input_features:float32[B,16,64]"]


def test_an_encoder_decoder_converts_as_its_encoder_and_decoders_under_optimums_names_and_generates_as_transformers(runs):
    t5_run, t5 = runs["t5 components"]
    assert t5_run.returncode == 0, t5_run.output
    assert t5["composite"] == "encoder-decoder" and [c["name"] for c in t5["components"]] == ["encoder", "decoder", "decoder_with_past"]
    decoder, with_past = t5["components"][1], t5["components"][2]
    own = [f"past_key_values.{i}.decoder.{part}:float32[B,4,P,8]" for i in range(2) for part in ("key", "value")]
    assert decoder["inputs"] == [
        "input_ids:int64[B,S]{0..999}",
        "encoder_attention_mask:int64[B,E]",
        "encoder_hidden_states:float32[B,E,32]",
    ]
    assert decoder["outputs"][0] == "logits" and "present.1.encoder.value" in decoder["outputs"]
    # Optimum's order: each layer's self-attention key and value, then its cross-attention key and value
    assert with_past["inputs"][2:6] == [
        *own[:2],
        "past_key_values.0.encoder.key:float32[B,4,E,8]",
        "past_key_values.0.encoder.value:float32[B,4,E,8]",
    ]
    assert with_past["outputs"] == ["logits", *(name.split(":")[0].replace("past_key_values", "present") for name in own)]
    # Whisper's components: tests/convert/test_seq2seq_components.py
    assert all(c["passed"] and [a["key"] for a in c["artifacts"]] == ["onnx"] for c in t5["components"])
    (check,) = t5["assembled"]
    assert check["status"] == "passed" and check["metrics"]["token_match"] == 1.0 and check["name"] == "generation"
    assert sorted(check["artifacts"].values()) == ["decoder_model.onnx", "decoder_with_past_model.onnx", "encoder_model.onnx"]


def test_an_encoder_decoders_task_without_its_cache_is_a_clear_error(folders):
    with pytest.raises(ConvertError) as info:
        convert.load(folders["t5"], task="text2text-generation")
    assert "exports an encoder-decoder model's decoder without its cache" in info.value.problem
    assert "--task text2text-generation-with-past" in info.value.next_step


def test_a_broken_cache_wiring_fails_generation_at_the_first_step_that_reads_the_cache(runs, folders, tmp_path):
    """The exported decoder with two layers' key outputs swapped: the first step (an empty cache) still agrees, the
    second, which reads the cache fed back, diverges; the unbroken file passes the same check."""
    from convert.artifacts import Artifact
    from convert.validation import ValidationCase, checks_on
    from convert.validators import ShapeCase, TolerancePolicy
    from convert.validators.generation import decode, make_prompts

    _, report = runs["gpt2"]
    good = Path(_artifact(report, "onnx")["path"])
    model = onnx.load(str(good))
    inner = {"present.0.key": "key_0", "present.1.key": "key_1"}
    for node in model.graph.node:
        node.input[:] = [inner.get(name, name) for name in node.input]
        node.output[:] = [inner.get(name, name) for name in node.output]
    model.graph.node.extend(
        [onnx.helper.make_node("Identity", ["key_1"], ["present.0.key"]), onnx.helper.make_node("Identity", ["key_0"], ["present.1.key"])]
    )
    broken = tmp_path / "swapped.onnx"
    onnx.save(model, str(broken))
    source = convert.load(folders["gpt2"])
    reference = decode(source.run, source.generation, make_prompts(source.generation), 16)
    case = ValidationCase(ShapeCase("generation", {}), generation=reference)
    inputs = source.signature.inputs
    verdicts = {}
    for path in (good, broken):
        (check,) = checks_on(Artifact("onnx", path, files=[path], inputs=inputs), "onnxruntime", "cpu", [case], TolerancePolicy())
        verdicts[path.name] = check
    assert verdicts[good.name].status == "passed"
    failed = verdicts["swapped.onnx"]
    assert failed.status == "failed" and failed.generation.first_divergent_step == 1
    assert failed.reason.startswith("generation diverges at step 1 of 16")


def test_a_gate_policy_names_a_folder_and_its_task_and_the_cache_keys_the_folder(folders, tmp_path, monkeypatch):
    """The gate on a folder with model.task fills the stage cache; the same folder from the API reuses it; a file added
    to the folder changes its key."""
    shutil.copytree(folders["vit"], tmp_path / "vit")
    policy = tmp_path / "promotion.yaml"
    policy.write_text(
        yaml.safe_dump({"model": {"path": "vit", "task": "image-classification"}, "require": {"targets": ["onnx"]}, "out": "out"})
    )
    run = run_cli("gate", str(policy), env={"CONVERT_NO_CACHE": "", "CONVERT_CACHE_DIR": str(tmp_path / "cache")})
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "out" / "report.json")
    assert report["source"]["inputs"] == ["pixel_values:float32[B,3,32,32]"] and report["source"]["outputs"] == ["logits"]
    assert "task image-classification: given with --task" in report["source"]["description"]
    assert report["gate"]["exit_code"] == 0 and report["cache"]["used"] and not report["cache"]["reused"]
    monkeypatch.delenv("CONVERT_NO_CACHE", raising=False)
    again = convert.convert(
        tmp_path / "vit", task="image-classification", to=["onnx"], out=tmp_path / "again", cache_dir=tmp_path / "cache"
    )
    assert again.passed and {"export:onnx", "validate:onnx onnxruntime cpu"} <= set(again.report.cache.reused)
    # a library that changes what from_pretrained loads (PEFT loads a folder's adapter) is part of every stage's key,
    # installed or not: another version of it rebuilds the stages made before
    from convert import compat

    installed = compat.package_version("peft")
    monkeypatch.setattr(compat, "package_version", lambda name, real=compat.package_version: "0.17.1" if name == "peft" else real(name))
    upgraded = convert.convert(
        tmp_path / "vit", task="image-classification", to=["onnx"], out=tmp_path / "upgraded", cache_dir=tmp_path / "cache"
    )
    rebuilt = {r.stage: r.reason for r in upgraded.report.cache.rebuilt}
    assert upgraded.passed and "export:onnx" in rebuilt and any(stage.startswith("reference") for stage in rebuilt)
    assert set(rebuilt.values()) == {f"made with other library versions (peft {installed} → 0.17.1)"}
    # what is made from the source (references, export) is rebuilt; a check of the same artifact file on the same
    # references and runtime may be reused
    assert not [stage for stage in upgraded.report.cache.reused if stage.startswith(("reference", "export"))]
    monkeypatch.undo()
    before = convert.load(tmp_path / "vit").info.sha256
    (tmp_path / "vit" / "preprocessor_config.json").write_text("{}")
    assert convert.load(tmp_path / "vit").info.sha256 != before


def test_the_cache_argument_is_the_one_the_installed_library_declares():
    """On the transformers installed, the forward parameter typed as the cache, of a decoder and of an encoder-decoder
    (whose encoder_outputs are typed as tensors per layer too): ``cache`` since 5.24, ``past_key_values`` before,
    annotated Cache, or tensors per layer in transformers 4's GPT-2 and VisionEncoderDecoderModel (the tests of the
    decoders and encoder-decoders run the whole path on it)."""
    import transformers
    from packaging.version import Version

    from convert.backends.huggingface import DECODER_ARGUMENTS, SEQ2SEQ_ARGUMENTS, cache_parameter

    expected = "cache" if Version(transformers.__version__) >= Version("5.24.0") else "past_key_values"
    decoders = [getattr(transformers, name).forward for name in ("GPT2LMHeadModel", "LlamaForCausalLM")]
    seq2seq = [
        getattr(transformers, name).forward
        for name in ("BartForConditionalGeneration", "T5ForConditionalGeneration", "VisionEncoderDecoderModel")
    ]
    assert [cache_parameter(forward, DECODER_ARGUMENTS) for forward in decoders] == [expected] * 2
    assert [cache_parameter(forward, SEQ2SEQ_ARGUMENTS) for forward in seq2seq] == [expected] * 3


def test_a_decoder_whose_forward_declares_no_cache_argument_is_a_library_mismatch_not_a_fault_of_the_model():
    """A fake of a transformers API this tool does not know (a generating model whose forward takes the cache under no
    name it declares), to test our own error: it names the library, its version and the tested range."""
    import transformers

    from fixtures.transformers_folders import llama

    model = llama()

    class UnknownCacheApi(type(model)):
        def forward(self, input_ids=None, attention_mask=None, position_ids=None, use_cache=None, **kwargs):
            return super().forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache)

    model.__class__ = UnknownCacheApi
    with pytest.raises(ConvertError) as info:
        convert.load(model, task="text-generation-with-past")
    assert info.value.exit_code == 2
    assert info.value.problem.startswith(f"transformers {transformers.__version__} does not have the API this tool expects")
    assert "tested range of transformers" in info.value.problem and "takes no cache" not in info.value.problem
    assert f"pip install 'transformers=={compat.tested_ranges()['transformers'].high}'" in info.value.next_step


def test_the_api_takes_a_model_object_with_its_task(tmp_path):
    from fixtures.transformers_folders import llama

    result = convert.convert(llama(), task="text-generation", to=["onnx"], out=tmp_path / "out")
    assert result.passed
    assert result.report.source.inputs == ["input_ids:int64[B,S]{0..999}", "attention_mask:int64[B,S]"]
    assert result.report.source.outputs == ["logits"]


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / folder.name
    shutil.copytree(folder, copy)
    return copy


def test_folders_that_would_run_code_or_hold_no_weights_are_refused(folders, tmp_path):
    remote = _copy(folders["bert"], tmp_path / "remote")
    config = json.loads((remote / "config.json").read_text())
    (remote / "config.json").write_text(json.dumps({**config, "auto_map": {"AutoModel": "modeling_evil.EvilModel"}}))
    pickled = _copy(folders["bert"], tmp_path / "pickled")
    (pickled / "model.safetensors").rename(pickled / "pytorch_model.bin")
    empty = _copy(folders["bert"], tmp_path / "empty")
    (empty / "model.safetensors").unlink()
    expected = {
        remote: "names code in the folder (auto_map: modeling_evil.py); loading it runs that code",
        pickled: "holds its weights only as pytorch_model.bin, a pickle",
        empty: "holds no PyTorch weights (model.safetensors)",
    }
    for folder, problem in expected.items():
        with pytest.raises(ConvertError) as info:
            convert.load(folder)
        assert problem in info.value.problem


def test_a_hub_id_is_not_downloaded(tmp_path):
    run = run_cli("meta-llama/Llama-3.2-1B", "--to", "onnx", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 2 and not (tmp_path / "out").exists()
    assert "looks like a Hugging Face Hub id, and this tool never downloads models" in run.stderr
    assert "huggingface-cli download meta-llama/Llama-3.2-1B --local-dir Llama-3.2-1B" in run.stderr


def test_a_task_the_model_has_no_head_for_names_the_one_it_fits(folders):
    with pytest.raises(ConvertError) as info:
        convert.load(folders["vit"], task="fill-mask")
    assert "has no AutoModelForMaskedLM head" in info.value.problem and "--task image-classification" in info.value.next_step
    with pytest.raises(ConvertError) as info:
        convert.load(folders["bert"], task="translation")
    assert info.value.problem == "unknown task 'translation'"


def test_the_source_decodes_as_transformers_generate_does(folders):
    """The reference decoding (cache fed back through the exported signature) gives generate()'s greedy tokens."""
    import torch
    import transformers

    source = convert.load(folders["llama"])
    prompts = np.array([[5, 9, 200, 3, 17]], dtype=np.int64)
    from convert.validators.generation import decode

    ours = decode(source.run, source.generation, prompts, 16).tokens
    model = transformers.AutoModelForCausalLM.from_pretrained(folders["llama"]).eval()
    with torch.no_grad():
        theirs = model.generate(torch.from_numpy(prompts), max_new_tokens=16, do_sample=False, min_new_tokens=16)
    assert ours.tolist() == theirs[:, 5:].numpy().tolist()


def test_sharded_weights_load_and_an_input_spec_overrides_the_configs(tmp_path):
    """save_pretrained's shards with their index, as large models are written; --input replaces one spec by name."""
    import torch

    from fixtures.transformers_folders import SEED, bert

    torch.manual_seed(SEED)
    bert().save_pretrained(tmp_path / "sharded", max_shard_size="100KB")
    assert len(list((tmp_path / "sharded").glob("*.safetensors"))) > 1 and (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    source = convert.load(tmp_path / "sharded", inputs=["input_ids:int64[B,S]{0..9}"])
    assert [str(s) for s in source.signature.inputs] == [
        "input_ids:int64[B,S]{0..9}",
        "attention_mask:int64[B,S]",
        "token_type_ids:int64[B,S]{0..1}",
    ]
    feed = {"input_ids": np.array([[1, 2, 3]]), "attention_mask": np.ones((1, 3), np.int64), "token_type_ids": np.zeros((1, 3), np.int64)}
    assert source.run(feed)["logits"].shape == (1, 3, 1000)
