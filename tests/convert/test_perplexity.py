"""A decoder validated on the user's text (--data of input_ids and an attention_mask, no cache inputs, no labels): its
task metrics are next-token accuracy and perplexity, the source's perplexity is transformers' own causal-LM loss on
that text, and a task_perplexity_drop budget fails a weight-only artifact that lost the model's outlier channels while
an INT8 one that kept them holds it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tests.conftest import load_report, run_cli

PAD = 3  # left padding of the first two rows, as a tokenizer with padding_side="left" writes a batch


@pytest.fixture(scope="module")
def decoder_and_text(tmp_path_factory):
    """A confident Llama (fixtures/transformers_folders.py) and text it wrote itself by greedy decoding, two rows left
    padded; rows of one sample each, as a tokenized dataset is saved."""
    import transformers

    from fixtures.transformers_folders import SEED, confident_llama_with_outlier_channels

    transformers.utils.logging.disable_progress_bar()
    folder = tmp_path_factory.mktemp("perplexity") / "llama"
    torch.manual_seed(SEED)
    model = confident_llama_with_outlier_channels().eval()
    model.save_pretrained(folder)
    prompts = torch.randint(0, model.config.vocab_size, (6, 4), generator=torch.Generator().manual_seed(1))
    config = transformers.GenerationConfig(do_sample=False, max_new_tokens=20, min_new_tokens=20, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        text = model.generate(prompts, attention_mask=torch.ones_like(prompts), generation_config=config).numpy()
    mask = np.ones_like(text)
    mask[:2, :PAD] = 0
    text[:2, :PAD] = 0
    data = folder.parent / "text.npz"
    np.savez(data, input_ids=text[:, None, :], attention_mask=mask[:, None, :])
    return folder, data, text, mask


@pytest.fixture(scope="module")
def validated(decoder_and_text, tmp_path_factory):
    folder, data, _, _ = decoder_and_text
    out = tmp_path_factory.mktemp("perplexity_out")
    args = ("--to", "onnx", "--optimize", "int4,int8-weights", "--weight-group-size", "-1", "--data", str(data))
    run = run_cli(str(folder), "--task", "text-generation-with-past", *args, "--accuracy", "task_perplexity_drop<=5%", "--out", str(out))
    return run, load_report(out / "report.json")


def _perplexity(check: dict) -> dict:
    return next(m for m in check["task"]["metrics"] if m["name"] == "perplexity")


def _data_check(report: dict, optimization: str) -> dict:
    record = next(r for r in report["artifacts"] if r["optimization"] == optimization)
    return next(c for c in record["checks"] if c["shape"] == "data")


def test_the_source_perplexity_is_transformers_own_loss_on_the_text(decoder_and_text, validated):
    import transformers

    folder, _, text, mask = decoder_and_text
    run, report = validated
    model = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids, attention = torch.from_numpy(text), torch.from_numpy(mask)
    labels = ids.masked_fill(attention == 0, -100)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)  # as generate places left-padded rows
    labels[:2, PAD] = -100  # predicted from a padding position, which sees no text
    with torch.no_grad():
        loss = model(input_ids=ids, attention_mask=attention, position_ids=positions, labels=labels).loss
    record = report["data"][0]
    assert record["source_task"]["perplexity"] == pytest.approx(math.exp(float(loss)), rel=1e-4), run.output
    assert "next token" in record["detail"]
    assert record["source_task"]["perplexity"] < 40  # the model is confident on its own text (1000 tokens to choose from)
    fp32 = _data_check(report, "")
    assert fp32["status"] == "passed" and abs(_perplexity(fp32)["drop"]) < 1e-4


def test_a_perplexity_budget_fails_the_int4_artifact_that_lost_the_outlier_channels(validated):
    run, report = validated
    assert run.returncode == 1, run.output
    int4 = _data_check(report, "int4")
    perplexity = _perplexity(int4)
    assert int4["status"] == "failed" and perplexity["status"] == "failed"
    assert perplexity["drop"] == pytest.approx(perplexity["artifact"] / perplexity["source"] - 1) and perplexity["drop"] > 0.5
    assert "task perplexity rises" in int4["reason"] and "over the budget task_perplexity_drop<=5%" in int4["reason"]
    int8 = _perplexity(_data_check(report, "int8-weights"))
    assert int8["status"] == "passed" and 0 <= int8["drop"] <= 0.05 and int8["budget"] == 0.05


def test_next_token_labels_follow_the_causal_lm_convention():
    from convert.validators.generation import next_token_labels

    ids = np.array([[0, 0, 5, 6, 7]])
    mask = np.array([[0, 0, 1, 1, 1]])
    assert next_token_labels({"input_ids": ids, "attention_mask": mask}).tolist() == [[-100, -100, 6, 7, -100]]
    given = np.array([[-100, -100, -100, -100, 7]])  # the user's labels: the prompt not scored
    assert next_token_labels({"input_ids": ids}, given).tolist() == [[-100, -100, -100, 7, -100]]
    with pytest.raises(ValueError, match="labels of shape"):
        next_token_labels({"input_ids": ids}, np.array([1, 2]))


def test_perplexity_is_the_exponent_of_torch_cross_entropy_and_its_drop_a_relative_rise():
    from convert.validators.task_metrics import metric_drop, task_scores

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 6, 11)).astype(np.float32)
    labels = rng.integers(0, 11, size=(2, 6))
    labels[0, :2] = -100
    _, scores = task_scores([{"logits": logits}], [labels])
    expected = torch.nn.functional.cross_entropy(torch.from_numpy(logits).reshape(-1, 11), torch.from_numpy(labels).reshape(-1))
    assert scores["perplexity"] == pytest.approx(math.exp(float(expected)), rel=1e-6)
    assert metric_drop("perplexity", 10.0, 11.0) == pytest.approx(0.1) and metric_drop("top1", 0.9, 0.8) == pytest.approx(0.1)


def test_a_position_before_right_padding_is_not_scored():
    from convert.validators.generation import next_token_labels

    ids = np.array([[5, 6, 7, 0]])
    assert next_token_labels({"input_ids": ids, "attention_mask": np.array([[1, 1, 1, 0]])}).tolist() == [[6, 7, -100, -100]]


def test_hidden_positions_are_zeroed_on_the_token_axis_of_logits_and_of_the_cache_even_when_heads_equal_tokens():
    from convert.validators.generation import hide_padding

    mask = np.array([[0, 1]])
    outputs = {"logits": np.ones((1, 2, 3), np.float32), "present.0.key": np.ones((1, 2, 2, 4), np.float32)}  # 2 heads, 2 tokens
    shown = hide_padding(outputs, mask)
    assert shown["logits"][0, :, 0].tolist() == [0, 1]
    assert shown["present.0.key"][0, :, :, 0].tolist() == [[0, 1], [0, 1]]  # the token axis, every head kept


def test_nncf_accuracy_control_holds_a_perplexity_budget_as_a_relative_rise(decoder_and_text, tmp_path):
    """NNCF counts a metric that rose as no drop: perplexity goes to it negated, with its budget as a relative drop."""
    folder, data, _, _ = decoder_and_text
    args = ("--task", "text-generation-with-past", "--to", "onnx", "--optimize", "openvino:int8", "--data", str(data))
    run = run_cli(str(folder), *args, "--accuracy", "task_perplexity_drop<=1%", "--out", str(tmp_path / "out"))
    report = load_report(tmp_path / "out" / "report.json")
    record = next(r for r in report["artifacts"] if r["optimization"] == "openvino:int8")
    control = next(d for d in record["details"] if d["kind"] == "accuracy_control")
    assert control["metric"] == "perplexity" and control["plain_drop"] > 0.01, run.output  # plain INT8 misses the budget
    assert control["status"] == "met" and control["kept_fp32"] and control["drop"] <= 0.01
    assert _perplexity(_data_check(report, "openvino:int8"))["drop"] == pytest.approx(control["drop"], abs=1e-6)
