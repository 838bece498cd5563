"""Mixture-of-experts decoders (Mixtral, Qwen2-MoE with its shared expert, Qwen3-MoE) computed densely: the library's own
numbers, with shapes that torch.export and the ONNX exporter capture, and a decoder with its cache that converts, passes
the generation check and matches the library's own sparse model at sizes the validation did not use."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import convert
from convert.backends import moe
from tests.conftest import load_report, run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

COMMON = {
    "vocab_size": 100,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "max_position_embeddings": 128,
    "num_experts_per_tok": 2,
}
FAMILIES = {
    "mixtral": ("MixtralForCausalLM", "MixtralConfig", {"intermediate_size": 64, "num_local_experts": 4}),
    "qwen2_moe": (
        "Qwen2MoeForCausalLM",
        "Qwen2MoeConfig",
        {"intermediate_size": 64, "moe_intermediate_size": 48, "shared_expert_intermediate_size": 64, "num_experts": 4},
    ),
    "qwen3_moe": (
        "Qwen3MoeForCausalLM",
        "Qwen3MoeConfig",
        {"intermediate_size": 64, "moe_intermediate_size": 48, "num_experts": 4, "head_dim": 16},
    ),
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("moe")
    for name, (model_class, config_class, own) in FAMILIES.items():
        torch.manual_seed(0)
        getattr(transformers, model_class)(getattr(transformers, config_class)(**COMMON, **own)).eval().save_pretrained(root / name)
    return {name: root / name for name in FAMILIES}


def _load(folder: Path):
    """The model as transformers loads it, with its default (sparse) experts implementation."""
    config = transformers.AutoConfig.from_pretrained(folder)
    return getattr(transformers, config.architectures[0]).from_pretrained(folder, dtype=torch.float32).eval()


def _tokens(batch: int, length: int, seed: int) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, COMMON["vocab_size"], (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.int64)
    mask[0, : length // 3] = 0  # one left-padded row
    return ids, mask


def _logits(model, ids, mask):
    with torch.inference_mode():
        return model(input_ids=ids, attention_mask=mask, use_cache=False).logits


@pytest.mark.fast
@pytest.mark.parametrize("family", list(FAMILIES))
def test_dense_experts_compute_the_librarys_numbers_with_the_same_weights(folders, family):
    model = _load(folders[family])
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    ids, mask = _tokens(3, 11, seed=1)
    sparse = {}
    for implementation in ("eager", "grouped_mm"):
        model.set_experts_implementation(implementation)
        sparse[implementation] = _logits(model, ids, mask)
    with moe.dense_experts(model) as note:
        assert note.startswith("its 2 mixture-of-experts layers computed densely")
        assert {m.config._experts_implementation for m in moe.experts_modules(model)} == {moe.DENSE}
        dense = _logits(model, ids, mask)
    assert model.config._experts_implementation == "grouped_mm"  # restored after the block
    for logits in sparse.values():
        torch.testing.assert_close(dense, logits, atol=1e-5, rtol=1e-5)
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())


def test_a_dense_formulation_that_routes_wrongly_is_seen(folders, monkeypatch):
    """The comparison above can fail: routing each token to the next experts along changes the logits well past 1e-5."""
    model = _load(folders["qwen2_moe"])
    ids, mask = _tokens(3, 11, seed=1)
    sparse = _logits(model, ids, mask)
    forward = moe.dense_experts_forward
    monkeypatch.setattr(moe, "dense_experts_forward", lambda e, h, index, w: forward(e, h, (index + 1) % e.num_experts, w))
    with moe.dense_experts(model):
        wrong = _logits(model, ids, mask)
    assert (wrong - sparse).abs().max() > 1e-3


def test_a_model_without_experts_is_left_alone():
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**{k: v for k, v in COMMON.items() if k != "num_experts_per_tok"}, intermediate_size=64)
    model = transformers.LlamaForCausalLM(config).eval()
    assert moe.use_dense_experts(model) is None


def test_torch_export_captures_dense_experts_with_dynamic_batch_and_sequence(folders):
    model = _load(folders["qwen2_moe"])

    class Logits(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits

    batch, sequence = torch.export.Dim("B"), torch.export.Dim("S")
    with moe.dense_experts(model):
        program = torch.export.export(
            Logits().eval(), _tokens(2, 7, seed=2), dynamic_shapes=({0: batch, 1: sequence}, {0: batch, 1: sequence})
        )
    ids, mask = _tokens(4, 13, seed=3)
    with torch.inference_mode():
        torch.testing.assert_close(program.module()(ids, mask), _logits(model, ids, mask), atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def conversions(folders, tmp_path_factory) -> dict[str, tuple[dict, Path]]:
    """Each family's decoder with its cache converted to ONNX: (report, artifact path). Mixtral's folder through the
    command line; Qwen2-MoE as a model object, its experts made dense by the caller, through the Python API."""
    out = tmp_path_factory.mktemp("mixtral") / "out"
    run = run_cli(str(folders["mixtral"]), "--task", "text-generation-with-past", "--to", "onnx", "--out", str(out), "--no-cache")
    report = load_report(out / "report.json")
    assert report["exit_code"] == run.returncode
    built = report["artifacts"][0]["path"]
    runs = {"mixtral": (report, Path(built) if built else None)}
    model = _load(folders["qwen2_moe"])
    moe.use_dense_experts(model)
    out = tmp_path_factory.mktemp("qwen2_moe")
    result = convert.convert(model, task="text-generation-with-past", to=["onnx"], out=out, cache=False, benchmark=False)
    runs["qwen2_moe"] = json.loads(result.report.to_json()), result.artifacts["onnx"].path
    return runs


def test_a_moe_folder_says_its_experts_are_computed_densely(conversions):
    report, _ = conversions["mixtral"]
    assert "its 2 mixture-of-experts layers computed densely" in report["source"]["description"]


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_a_moe_decoder_with_its_cache_converts_and_generates(conversions, family):
    report, _ = conversions[family]
    assert report["passed"], report["error"] or report["unbuilt"]
    (artifact,) = report["artifacts"]
    kinds = {(c["kind"], c["status"]) for c in artifact["checks"]}
    assert ("generation", "passed") in kinds and ("shape", "passed") in kinds


@pytest.mark.parametrize("family", ["mixtral", "qwen2_moe"])
def test_the_onnx_matches_the_librarys_sparse_model_at_unvalidated_sizes(conversions, folders, family):
    """Independent of the pipeline: ONNX Runtime at a batch, prompt and step the validation did not use, against the
    library's model with its default experts implementation, prefill then a step with the cache."""
    import onnxruntime as ort

    _, path = conversions[family]
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    model = _load(folders[family])
    batch, prompt, step = 3, 9, 4
    ids = torch.randint(0, COMMON["vocab_size"], (batch, prompt + step), generator=torch.Generator().manual_seed(4))
    layers, heads, head_dim = COMMON["num_hidden_layers"], COMMON["num_key_value_heads"], COMMON["hidden_size"] // 2
    empty = np.zeros((batch, heads, 0, head_dim), np.float32)
    past = {f"past_key_values.{i}.{part}": empty for i in range(layers) for part in ("key", "value")}
    cache = None
    for start, end in ((0, prompt), (prompt, prompt + step)):
        positions = torch.arange(start, end).expand(batch, -1)
        mask = torch.ones(batch, end, dtype=torch.int64)
        with torch.inference_mode():
            expected = model(
                input_ids=ids[:, start:end], attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True
            )
        feed = {"input_ids": ids[:, start:end].numpy(), "attention_mask": mask.numpy(), "position_ids": positions.numpy(), **past}
        logits, *present = session.run(None, feed)
        np.testing.assert_allclose(logits, expected.logits.numpy(), atol=1e-5, rtol=1e-4)
        cache = expected.past_key_values
        for i, layer in enumerate(cache.layers):
            np.testing.assert_allclose(present[2 * i], layer.keys.numpy(), atol=1e-5, rtol=1e-4)
        past = {
            name.replace("present", "past_key_values"): value
            for name, value in zip([o.name for o in session.get_outputs()][1:], present, strict=True)
        }
