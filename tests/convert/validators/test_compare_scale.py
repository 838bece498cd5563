"""The comparison fits the output: its atol scales with the output's RMS, a low-spread output is judged by its
deviations, and positions a padding mask excludes are not compared. Each case also shows what the plain elementwise
rule (an absolute atol, every position) decided on it."""

import numpy as np
import pytest

from convert.validators import TolerancePolicy, compare_outputs, merge_results
from convert.validators.compare import DEVIATION_COSINE, compare_output, reference_stats
from convert.validators.tolerances import Tolerance

ABSOLUTE = Tolerance(1e-4, 1e-3, "default fp32", scales=False)  # the rule before the atol scaled


def _boxes(head_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """A detector head's box coordinates [batch, anchors, 4], in the hundreds: a 1x1 convolution over post-ReLU features
    with a folded bias, the source in float64 rounded once, the artifact in float32 (each value the small difference
    of sums in the thousands, as in a real head). The artifact's first head (x0) can be scaled."""
    rng = np.random.default_rng(0)
    features = rng.uniform(0, 16, size=(2, 1600, 256)).astype(np.float32)
    weights = rng.normal(1.0, 0.25, size=(256, 4)).astype(np.float32)
    bias = (np.array([40, 40, 600, 600]) - 8 * weights.astype(np.float64).sum(0)).astype(np.float32)
    expected = (features.astype(np.float64) @ weights.astype(np.float64) + bias).astype(np.float32)
    scaled = weights.copy()
    scaled[:, 0] *= np.float32(head_scale)
    return expected, features @ scaled + bias


@pytest.mark.fast
def test_box_coordinates_with_float32_reordering_noise_pass_and_an_absolute_atol_failed_them():
    expected, actual = _boxes()
    assert np.abs(expected).max() > 600
    before = compare_output("boxes", expected, actual, ABSOLUTE)
    assert before.status == "failed"  # values near zero inside an output of hundreds erred beyond 1e-4
    result = compare_output("boxes", expected, actual, TolerancePolicy().for_output("boxes"))
    assert result.status == "passed", result.reason
    assert result.atol_scale == pytest.approx(float(np.sqrt(np.mean(expected.astype(np.float64) ** 2))))
    assert result.atol == pytest.approx(1e-4 * result.atol_scale)


def test_box_coordinates_with_one_head_scaled_by_one_percent_fail():
    expected, actual = _boxes(head_scale=1.01)
    result = compare_output("boxes", expected, actual, TolerancePolicy().for_output("boxes"))
    assert result.status == "failed" and "scaled by the output's RMS" in result.reason
    assert result.mismatch_count >= expected[..., 0].size  # the x0 head, not noise here and there


def test_an_atol_the_user_gives_stays_absolute():
    expected, actual = _boxes()
    tolerance = TolerancePolicy(["atol=1e-4"]).for_output("boxes")
    result = compare_output("boxes", expected, actual, tolerance)
    assert result.status == "failed" and result.atol == 1e-4 and result.atol_scale is None
    assert result.tolerance_source == "--tolerance atol=1e-4"
    # an rtol alone leaves the atol the default's, which scales
    assert compare_output("boxes", expected, actual, TolerancePolicy(["rtol=1e-3"]).for_output("boxes")).atol_scale is not None


def test_an_output_of_unit_scale_keeps_the_absolute_atol():
    values = np.linspace(-1, 1, 64, dtype=np.float32)
    result = compare_output("y", values, values + np.float32(2e-4), TolerancePolicy().for_output("y"))
    assert result.atol == 1e-4 and result.atol_scale < 1 and result.status == "failed"


def _softmax(logits: np.ndarray, dtype) -> np.ndarray:
    shifted = logits.astype(dtype) - logits.astype(dtype).max(-1, keepdims=True)
    exp = np.exp(shifted)
    return (exp / exp.sum(-1, keepdims=True)).astype(np.float32)


def test_a_near_uniform_softmax_is_judged_by_its_deviations():
    # a random-weight classifier's logits over 1000 classes for 3 samples: its probabilities all within 1e-4
    logits = np.random.default_rng(1).normal(0, 0.012, size=(3, 1, 1000))
    expected = [_softmax(sample, np.float64) for sample in logits]
    correct = [_softmax(sample, np.float32) for sample in logits]
    permuted = [sample[..., np.random.default_rng(2).permutation(1000)] for sample in expected]
    stats = {"probs": reference_stats(expected)}
    assert stats["probs"].spread < 1e-4  # below the atol: no elementwise check can tell
    policy = TolerancePolicy()

    def judged(actual, scaled=True):
        per_sample = [
            compare_outputs({"probs": e}, {"probs": a}, policy, stats=stats if scaled else None) for e, a in zip(expected, actual)
        ]
        return merge_results(per_sample)[0]

    good = judged(correct)
    assert good.status == "passed", good.reason
    assert good.deviation_cosine > DEVIATION_COSINE and "deviations" in good.note
    wrong = judged(permuted)
    assert wrong.status == "failed" and "cosine" in wrong.reason and wrong.mismatch_count == 0
    # the elementwise rule alone passed the permuted classes
    assert all(compare_output("probs", e, a, ABSOLUTE).mismatch_count == 0 for e, a in zip(expected, permuted))


def test_a_constant_output_is_noted_and_still_judged_elementwise():
    expected = [np.full((2, 8), 0.125, np.float32)] * 3
    stats = {"y": reference_stats(expected)}
    policy = TolerancePolicy()
    same = merge_results([compare_outputs({"y": e}, {"y": e.copy()}, policy, stats=stats) for e in expected])[0]
    assert same.status == "passed" and "constant" in same.note and "does not depend on the generated inputs" in same.note
    off = merge_results([compare_outputs({"y": e}, {"y": e + np.float32(0.01)}, policy, stats=stats) for e in expected])[0]
    assert off.status == "failed"


def _token_outputs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Logits [batch, tokens, vocab] with the second row's last three tokens padded."""
    rng = np.random.default_rng(3)
    expected = rng.normal(size=(2, 6, 10)).astype(np.float32)
    mask = np.ones((2, 6), np.int64)
    mask[1, 3:] = 0
    return expected, expected.copy(), mask


def _compared_at_real_tokens(expected, actual, mask):
    shown = {"logits": ("attention_mask", mask != 0)}
    return compare_outputs({"logits": expected}, {"logits": actual}, TolerancePolicy(), shown=shown)[0]


def test_a_masked_position_that_differs_is_not_compared():
    expected, actual, mask = _token_outputs()
    actual[1, 4] += 1.6e-3  # eager and SDPA attention's garbage at a padded token
    assert compare_output("logits", expected, actual, ABSOLUTE).status == "failed"  # compared everywhere, it failed
    result = _compared_at_real_tokens(expected, actual, mask)
    assert result.status == "passed", result.reason
    assert result.masked_values == 3 * 10 and result.elements == 9 * 10 and result.masked_by == "attention_mask"


def test_a_real_position_that_differs_fails():
    expected, actual, mask = _token_outputs()
    actual[1, 2] += 1.6e-3  # the last real token of the padded row
    result = _compared_at_real_tokens(expected, actual, mask)
    assert result.status == "failed" and result.mismatch_count >= 1
