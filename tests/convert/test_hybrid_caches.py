"""Decoders whose layers attend over different spans, as their users write them (the library's own classes from small
configs, fixed seeds, save_pretrained): Gemma 2, 3 and 4 alternate sliding-window and full-attention layers, Mistral
slides in every layer, Gemma 4's full-attention layers have wider heads than its sliding ones. Each is converted to
ONNX through the command line and must be validated past its window; then checked independently of the tool: the
file's next step after a prompt of twice the window, from the model's real cache, against the eager model's own step
with its own cache (``DynamicCache(config=...)``, whose sliding layers keep only the window's last tokens)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from tests.conftest import load_report, run_cli, sizes_checked

SEED = 0
VOCAB = 100
TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    max_position_embeddings=256,
    bos_token_id=0,
    eos_token_id=1,
    pad_token_id=0,
)


def gemma2(transformers):
    """Sliding and full layers in turn, the window (32) past the tool's default validation sizes."""
    layers = ["sliding_attention", "full_attention"] * 2
    return transformers.Gemma2ForCausalLM(transformers.Gemma2Config(**TEXT, num_hidden_layers=4, sliding_window=32, layer_types=layers))


def gemma3(transformers):
    """Text-only Gemma 3: three sliding layers to one full one."""
    layers = ["sliding_attention"] * 3 + ["full_attention"]
    return transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(**TEXT, num_hidden_layers=4, sliding_window=8, layer_types=layers))


def mistral(transformers):
    """Every layer slides (no layer_types: the window alone makes them sliding)."""
    return transformers.MistralForCausalLM(transformers.MistralConfig(**TEXT, num_hidden_layers=2, sliding_window=8))


def gemma4(transformers):
    """Full-attention layers with one key/value head of 16 where the sliding layers have two of 8."""
    config = transformers.Gemma4TextConfig(
        **TEXT,
        num_hidden_layers=4,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"] * 2,
        global_head_dim=16,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        vocab_size_per_layer_input=VOCAB,
        hidden_size_per_layer_input=0,
    )
    return transformers.Gemma4ForCausalLM(config)


MODELS = {"gemma2": (gemma2, 32), "gemma3": (gemma3, 8), "mistral": (mistral, 8), "gemma4": (gemma4, 8)}


@pytest.mark.parametrize("name", MODELS)
def test_a_sliding_window_decoder_is_validated_past_its_window_and_steps_there_as_its_eager_model(name, tmp_path):
    import torch
    import transformers

    build, window = MODELS[name]
    if name == "gemma4" and not hasattr(transformers, "Gemma4ForCausalLM"):
        pytest.skip(f"transformers {transformers.__version__} has no Gemma 4")
    torch.manual_seed(SEED)
    model = build(transformers).eval()
    folder = tmp_path / name
    model.save_pretrained(folder)
    run = run_cli(str(folder), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "out" / "report.json")
    if name == "gemma4":  # each layer's cache with its own heads and head size
        assert {"past_key_values.0.key:float32[B,2,P,8]", "past_key_values.1.value:float32[B,1,P,16]"} <= set(report["source"]["inputs"])
    (record,) = [a for a in report["artifacts"] if a["format"] == "onnx"]
    assert record["passed"]
    assert max(map(int, sizes_checked(record, "P"))) > window  # a step over a cache longer than the window
    (generation,) = [c for c in record["checks"] if c["kind"] == "generation" and c["device"] == "cpu"]
    assert generation["status"] == "passed" and f"attention window {window})" in generation["shape"]
    first, last = map(int, generation["shape"].split("(past ")[1].split(",")[0].split(".."))
    assert first < window < last  # decoding crossed the window
    _steps_as_the_eager_model(model, record["path"], window)


def _steps_as_the_eager_model(model, path: str, window: int) -> None:
    """The file's first step over a prompt of 2*window+3 tokens gives the model's logits and its whole cache, and its
    next step of 1 and of 4 tokens from that cache (batch 3) gives the logits and cache of the eager model's own step
    with its own cache: a sliding layer's there is the last window-1 tokens of the file's."""
    import onnxruntime as ort
    import torch
    from transformers import DynamicCache

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    takes = {i.name: i.shape for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    cache_argument = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    rng = np.random.default_rng(SEED)
    batch, past = 3, 2 * window + 3

    def step(ids: np.ndarray, cache: dict[str, np.ndarray], cached: int) -> dict[str, np.ndarray]:
        feed = {"input_ids": ids, "attention_mask": np.ones((batch, cached + ids.shape[1]), dtype=np.int64), **cache}
        if "position_ids" in takes:
            feed["position_ids"] = np.broadcast_to(np.arange(cached, cached + ids.shape[1]), ids.shape).astype(np.int64)
        return dict(zip(outputs, session.run(None, feed), strict=True))

    prompt = rng.integers(0, VOCAB, size=(batch, past))
    empty = {name: np.zeros((batch, shape[1], 0, shape[3]), dtype=np.float32) for name, shape in takes.items() if name.startswith("past_")}
    with torch.no_grad():
        full = DynamicCache()  # every layer's whole past: the model's real cache, as the file takes it
        prefill = model(input_ids=torch.from_numpy(prompt), use_cache=True, **{cache_argument: full})
    mine = step(prompt, empty, 0)
    np.testing.assert_allclose(mine["logits"], prefill.logits.numpy(), rtol=1e-4, atol=1e-4)
    real = {}
    for i, layer in enumerate(full.layers):
        for part, theirs in (("key", layer.keys), ("value", layer.values)):
            np.testing.assert_allclose(mine[f"present.{i}.{part}"], theirs.numpy(), rtol=1e-4, atol=1e-4)
            real[f"past_key_values.{i}.{part}"] = theirs.numpy()
    for new in (1, 4):
        ids = rng.integers(0, VOCAB, size=(batch, new))
        with torch.no_grad():
            own = DynamicCache(config=model.config)
            model(input_ids=torch.from_numpy(prompt), use_cache=True, **{cache_argument: own})
            mask = torch.ones((batch, past + new), dtype=torch.int64)
            theirs = model(input_ids=torch.from_numpy(ids), attention_mask=mask, use_cache=True, **{cache_argument: own})
        mine = step(ids, real, past)
        np.testing.assert_allclose(mine["logits"], theirs.logits.numpy(), rtol=1e-4, atol=1e-4)
        kept = []
        for i, layer in enumerate(own.layers):
            for part, expected in (("key", layer.keys), ("value", layer.values)):
                present = mine[f"present.{i}.{part}"]
                assert present.shape[2] == past + new  # every layer as long as its past and the new tokens
                kept.append(expected.shape[2])
                np.testing.assert_allclose(present[:, :, -expected.shape[2] :], expected.numpy(), rtol=1e-4, atol=1e-4)
        assert min(kept) == window - 1  # the eager cache did slide: the check compared a sliding layer's window


def test_the_window_is_the_longest_local_span_a_config_declares_below_its_positions():
    import transformers

    from convert.sources.transformers import _attention_window

    assert _attention_window(transformers.Gemma2Config(**TEXT, sliding_window=32)) == 32
    assert _attention_window(transformers.GPTNeoConfig(window_size=16, max_position_embeddings=64)) == 16  # its local layers
    assert _attention_window(transformers.LlamaConfig(**TEXT)) == 0
    assert _attention_window(transformers.MistralConfig(**TEXT, sliding_window=256)) == 0  # no past reaches beyond it


def test_a_layout_gives_each_layers_shape_and_takes_the_checks_past_its_window():
    from convert.validators import plan_shape_cases
    from convert.validators.generation import GENERATION_STEPS, CacheLayout, make_prompts

    wide = ((2, 8), (2, 8), (1, 16), (1, 16))
    layout = CacheLayout(layers=2, kv_heads=2, head_dim=8, dtype="float32", vocab_size=11, position_ids=True, shapes=wide, window=40)
    assert layout.past_shapes()["past_key_values.1.key"] == (1, 16) and layout.past_sizes() == {"P": (41,)}
    prompts = make_prompts(layout)
    assert prompts.shape == (2, 40 - GENERATION_STEPS // 2)  # decoding crosses the window
    cases = plan_shape_cases(("B", "S", "P"), ranges={"P": (0, None)}, extra=layout.past_sizes())
    assert {"B": 1, "S": 1, "P": 41} in [case.sizes for case in cases]  # one step over a cache past the window
