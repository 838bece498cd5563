import numpy as np
import pytest

from convert.validators import TolerancePolicy, compare_outputs, merge_results
from convert.validators.compare import compare_output
from convert.validators.tolerances import Tolerance

FP32 = Tolerance(1e-4, 1e-3, "test")


def test_identical_outputs_pass_with_zero_error():
    a = np.linspace(-3, 3, 50, dtype=np.float32)
    r = compare_output("y", a, a.copy(), FP32)
    assert r.status == "passed" and r.max_abs_error == 0.0 and r.mismatch_count == 0
    assert r.cosine_similarity == pytest.approx(1.0)


def test_error_beyond_tolerance_fails_with_metrics():
    expected = np.ones((4, 3), dtype=np.float32)
    actual = expected.copy()
    actual[1, 2] += 0.01
    r = compare_output("y", expected, actual, FP32)
    assert r.status == "failed"
    assert r.mismatch_count == 1
    assert r.max_abs_error == pytest.approx(0.01, rel=1e-3)
    assert "1 of 12 values differ" in r.reason


def test_nan_never_equals_nan():
    expected = np.array([1.0, np.nan], dtype=np.float32)
    r = compare_output("y", expected, expected.copy(), FP32)
    assert r.status == "failed"
    assert r.nan_count == 1
    assert "NaN" in r.reason


def test_inf_in_artifact_output_fails():
    r = compare_output("y", np.ones(3, np.float32), np.array([1, np.inf, 1], np.float32), FP32)
    assert r.status == "failed" and r.inf_count == 1


def test_no_broadcasting_shape_mismatch_fails():
    r = compare_output("y", np.ones((2, 3), np.float32), np.ones((1, 3), np.float32), FP32)
    assert r.status == "failed" and "shape [1, 3]" in r.reason


def test_dtype_mismatch_fails():
    r = compare_output("y", np.ones(3, np.float32), np.ones(3, np.float64), FP32)
    assert r.status == "failed" and "dtype float64" in r.reason


def test_empty_output_never_passes_vacuously():
    r = compare_output("y", np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32), FP32)
    assert r.status == "failed" and "empty" in r.reason


def test_integer_outputs_must_match_exactly():
    r = compare_output("ids", np.array([1, 2, 3]), np.array([1, 2, 4]), Tolerance(10.0, 1.0, "loose"))
    assert r.status == "failed" and r.mismatch_count == 1


def test_relative_error_is_sound_near_zero():
    expected = np.array([0.0, 1e-9, 100.0], dtype=np.float32)
    actual = expected + np.float32(5e-5)
    r = compare_output("y", expected, actual, FP32)
    assert r.status == "passed"
    assert r.max_rel_error < 1e-3  # 5e-5 / max(|e|, atol/rtol = 0.1), not 5e-5 / 1e-9


def test_missing_extra_and_renamed_outputs_fail():
    policy = TolerancePolicy()
    expected = {"logits": np.ones(2, np.float32), "embedding": np.ones(2, np.float32)}
    actual = {"logits": np.ones(2, np.float32), "embeddings": np.ones(2, np.float32)}
    results = {r.name: r for r in compare_outputs(expected, actual, policy)}
    assert results["logits"].status == "passed"
    assert results["embedding"].status == "failed" and "missing" in results["embedding"].reason
    assert results["embeddings"].status == "failed" and "extra" in results["embeddings"].reason


def test_per_output_tolerance_override_is_recorded():
    policy = TolerancePolicy(["logits:atol=0.1,rtol=0"])
    expected = {"logits": np.zeros(3, np.float32), "other": np.zeros(3, np.float32)}
    actual = {"logits": np.full(3, 0.05, np.float32), "other": np.full(3, 0.05, np.float32)}
    results = {r.name: r for r in compare_outputs(expected, actual, policy)}
    assert results["logits"].status == "passed"
    assert results["logits"].tolerance_source == "--tolerance logits:atol=0.1,rtol=0"
    assert results["other"].status == "failed" and results["other"].tolerance_source == "default fp32"


def test_merge_takes_the_worst_case_over_samples():
    policy = TolerancePolicy()
    good = compare_outputs({"y": np.ones(4, np.float32)}, {"y": np.ones(4, np.float32)}, policy)
    bad = compare_outputs({"y": np.ones(4, np.float32)}, {"y": np.full(4, 1.5, np.float32)}, policy)
    merged = merge_results([good, bad, good])
    assert len(merged) == 1
    assert merged[0].status == "failed"
    assert merged[0].samples == 3
    assert merged[0].max_abs_error == pytest.approx(0.5)
    assert merged[0].mismatch_count == 4 and "4 of 12 values" in merged[0].reason


def test_top5_agreement_counts_the_reference_class_among_the_artifacts_top_five():
    expected = np.zeros((4, 10), np.float32)
    expected[np.arange(4), [0, 1, 2, 3]] = 1.0
    actual = np.tile(np.linspace(1, 0, 10, dtype=np.float32), (4, 1))  # ranks classes 0..4 first, in every row
    actual[3] = np.linspace(0, 1, 10)  # row 3 ranks class 3 seventh: outside the top 5
    policy = TolerancePolicy(accuracy=["top5>=0.8"])
    result = compare_outputs({"logits": expected}, {"logits": actual}, policy, "int8")[0]
    assert result.top5_agreement == pytest.approx(0.75) and result.top1_agreement == pytest.approx(0.25)
    assert result.status == "failed" and "top5 0.75 misses the budget top5>=0.8" in result.reason


def test_a_task_budget_replaces_the_default_budget_of_the_scored_output_only():
    policy = TolerancePolicy((), ["cosine>=0.99", "task_top1_drop<=1%,task_top5_drop<=0.5%"])
    assert policy.task_budget == {"task_top1_drop": 0.01, "task_top5_drop": 0.005}
    policy.task_output = "logits"
    scored, other = policy.for_output("logits", "int8"), policy.for_output("pooled", "int8")
    assert scored.budget == (("cosine", ">=", 0.99),) and other.budget == (("cosine", ">=", 0.99), ("rel_rms", "<=", 0.2))
    assert scored.budget_source == other.budget_source == "--accuracy cosine>=0.99"  # not the text of task terms
    # the scored output off by far: its rel_rms is not judged, the other output's is
    expected, actual = np.ones((2, 4), np.float32), np.full((2, 4), 1.3, np.float32)
    results = {
        r.name: r for r in compare_outputs({"logits": expected, "pooled": expected}, {"logits": actual, "pooled": actual}, policy, "int8")
    }
    assert results["logits"].status == "passed" and results["pooled"].status == "failed" and "rel_rms" in results["pooled"].reason
