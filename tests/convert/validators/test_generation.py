"""Generation agreement on a decoder written here in NumPy (a fake for this module's own logic only: the real
decoders are in tests/convert/test_transformers.py): its cache is a running sum of the tokens' embeddings, so a wrong
cache changes every step after the first."""

from __future__ import annotations

import numpy as np

from convert.validators.generation import CacheLayout, compare_generation, decode, make_prompts
from convert.validators.tolerances import TolerancePolicy

LAYOUT = CacheLayout(layers=1, kv_heads=1, head_dim=4, dtype="float32", vocab_size=11, position_ids=True)
EMBED = np.random.default_rng(0).standard_normal((11, 4)).astype(np.float32)
UNEMBED = np.random.default_rng(1).standard_normal((4, 11)).astype(np.float32)


def numpy_decoder(cache_scale: float = 1.0, noise: float = 0.0):
    def step(feed):
        past = feed["past_key_values.0.key"]
        assert feed["attention_mask"].shape[1] == past.shape[2] + feed["input_ids"].shape[1]
        new = EMBED[feed["input_ids"]][:, None]  # [B, 1, S, D]
        keys = np.concatenate([past, new], axis=2)
        state = np.cumsum(keys, axis=2)[:, 0, -feed["input_ids"].shape[1] :] * cache_scale
        logits = state @ UNEMBED + noise * np.random.default_rng(int(keys.size)).standard_normal((*state.shape[:2], 11))
        return {"logits": logits.astype(np.float32), "present.0.key": keys, "present.0.value": keys}

    return step


def test_the_same_decoder_agrees_at_every_step():
    prompts = make_prompts(LAYOUT)
    reference = decode(numpy_decoder(), LAYOUT, prompts, 16)
    actual = decode(numpy_decoder(), LAYOUT, prompts, 16, reference.tokens)
    metrics, reason = compare_generation(reference, actual, TolerancePolicy().for_output("logits"), "fp32")
    assert reason == "" and metrics.token_agreement == 1.0 and metrics.first_divergent_step is None and metrics.max_abs_logits == 0


def test_a_decoder_that_misreads_its_cache_diverges_after_the_first_step():
    prompts = make_prompts(LAYOUT)
    reference = decode(numpy_decoder(), LAYOUT, prompts, 16)
    wrong = decode(numpy_decoder(cache_scale=1.5), LAYOUT, prompts, 16, reference.tokens)
    metrics, reason = compare_generation(reference, wrong, TolerancePolicy().for_output("logits"), "fp32")
    assert metrics.first_divergent_step == 0 and reason.startswith("generation diverges at step 0 of 16")


def test_a_reduced_precision_decoder_is_judged_by_its_budget():
    prompts = make_prompts(LAYOUT)
    reference = decode(numpy_decoder(), LAYOUT, prompts, 16)
    noisy = decode(numpy_decoder(noise=1e-3), LAYOUT, prompts, 16, reference.tokens)
    tolerance = TolerancePolicy().for_output("logits", "int8")
    metrics, reason = compare_generation(reference, noisy, tolerance, "int8")
    assert reason == "" and metrics.judged_by.startswith("token_agreement>=0.75")
    very_noisy = decode(numpy_decoder(noise=10.0), LAYOUT, prompts, 16, reference.tokens)
    metrics, reason = compare_generation(reference, very_noisy, tolerance, "int8")
    assert "below" in reason and metrics.min_cosine < 0.98


def test_a_token_agreement_budget_replaces_the_precisions_floor_and_shape_checks_leave_it_alone():
    prompts = make_prompts(LAYOUT)
    reference = decode(numpy_decoder(), LAYOUT, prompts, 16)
    noisy = decode(numpy_decoder(noise=10.0), LAYOUT, prompts, 16, reference.tokens)
    rate = compare_generation(reference, noisy, TolerancePolicy().for_output("logits", "int4"), "int4")[0].token_agreement
    assert 0.5 < rate < 1
    above = TolerancePolicy(accuracy=[f"token_agreement>={rate + 0.05:.4f},cosine>=-1"]).for_output("logits", "int4")
    metrics, reason = compare_generation(reference, noisy, above, "int4")
    assert metrics.judged_by == f"token_agreement>={rate + 0.05:.4f},cosine>=-1" and f"below {rate + 0.05:.0%}" in reason
    below = TolerancePolicy(accuracy=[f"token_agreement>={rate - 0.05:.4f},cosine>=-1"]).for_output("logits", "int4")
    assert compare_generation(reference, noisy, below, "int4")[1] == ""
    # one output's comparison has no token agreement to judge: the term bounds nothing there
    from convert.validators.compare import compare_outputs

    logits = {"logits": reference.logits[0].astype(np.float32)}
    (result,) = compare_outputs(logits, logits, TolerancePolicy(accuracy=["token_agreement>=1"]), "int4")
    assert result.status == "passed" and "token_agreement>=1" in result.budget


def test_a_tie_the_source_itself_cannot_break_is_no_divergence():
    prompts = make_prompts(LAYOUT)
    reference = decode(numpy_decoder(), LAYOUT, prompts, 4)
    actual = decode(numpy_decoder(), LAYOUT, prompts, 4, reference.tokens)
    reference.logits[1, 0, :] = 0.0  # the source scores every token alike at step 1
    reference.tokens[0, 1] = 0
    actual.logits[1, 0, :] = 0.0
    actual.logits[1, 0, 3] = 1e-6
    actual.tokens[0, 1] = 3
    metrics, reason = compare_generation(reference, actual, TolerancePolicy().for_output("logits"), "fp32")
    assert reason == "" and metrics.token_agreement == 1.0


def test_nan_logits_are_a_divergence():
    prompts = make_prompts(LAYOUT)
    reference = decode(numpy_decoder(), LAYOUT, prompts, 4)
    actual = decode(numpy_decoder(), LAYOUT, prompts, 4, reference.tokens)
    actual.logits[2, 1, 5] = np.nan
    metrics, reason = compare_generation(reference, actual, TolerancePolicy().for_output("logits"), "fp32")
    assert metrics.first_divergent_step == 2 and "diverges at step 2" in reason
