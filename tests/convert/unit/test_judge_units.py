"""Unit tests of convert/gate/judge.py judge(): reports built by hand, policies from dicts, and each reason to
reject (or note) checked alone, with the codes and wording the end-to-end gate tests rely on."""

from __future__ import annotations

import pytest

from convert.errors import ConvertError
from convert.gate.judge import judge
from convert.policy import Allowance, Policy
from convert.reports import model as rm


def _output(name: str = "y", **metrics) -> rm.OutputMetrics:
    values = {"cosine_similarity": 0.99999, "max_abs_error": 1e-6, "rel_rms_error": 1e-6, **metrics}
    return rm.OutputMetrics(name=name, status="passed", **values)


def _check(
    status: str = "passed",
    device: str = "cpu",
    shape: str = "B=2",
    runtime: str = "onnxruntime",
    reason: str = "",
    outputs: list[rm.OutputMetrics] | None = None,
    **fields,
) -> rm.Check:
    if outputs is None:
        outputs = [_output()] if status != "skipped" else []
    return rm.Check(runtime=runtime, device=device, shape=shape, status=status, reason=reason, outputs=outputs, **fields)


def _artifact(key: str = "onnx", checks: list[rm.Check] | None = None, published: bool = True, **fields) -> rm.ArtifactRecord:
    checks = [_check()] if checks is None else checks
    passed = any(c.status == "passed" for c in checks) and not any(c.status == "failed" for c in checks)
    optimization = {} if key in ("onnx", "torchscript") else {"optimization": key}
    return rm.ArtifactRecord(
        format="onnx" if key != "torchscript" else key,
        **optimization,
        passed=passed,
        path=f"out/model.{key}" if published else None,
        checks=checks,
        **{"size_bytes": 1_000_000, **fields},
    )


def _report(*artifacts: rm.ArtifactRecord, devices: tuple[str, ...] = ("cpu",), **fields) -> rm.Report:
    return rm.Report(
        tool_version="0",
        created_at="2024-01-01T00:00:00+00:00",
        environment=rm.Environment(python="3", platform="linux", devices=list(devices)),
        source=rm.SourceRecord(outputs=["y"]),
        artifacts=list(artifacts),
        **fields,
    )


def _policy(**fields) -> Policy:
    return Policy.model_validate({"model": {"path": "model.pt2"}, "require": {"targets": ["onnx"]}, **fields})


def codes(verdict: rm.Verdict) -> list[str]:
    return [reason.code for reason in verdict.reasons]


def test_a_report_whose_required_artifact_passed_everything_is_promoted():
    verdict = judge(_report(_artifact()), _policy(), "policy.yaml")
    assert verdict.promoted and verdict.decision == "promote" and verdict.exit_code == 0
    assert verdict.reasons == [] and verdict.notes == [] and verdict.policy == "policy.yaml"
    assert verdict.required_targets == ["onnx"] and verdict.required_devices == ["cpu"]
    assert verdict.summary() == "PROMOTE: every required artifact passed every check and budget"


# a required artifact missing


def test_a_required_artifact_the_run_never_made_is_missing():
    verdict = judge(_report(_artifact()), _policy(require={"targets": ["onnx", "torchscript"]}))
    assert not verdict.promoted and verdict.exit_code == 1 and verdict.decision == "reject"
    assert codes(verdict) == ["missing_artifact"]
    assert verdict.reasons[0].artifact == "torchscript"
    assert verdict.reasons[0].message == "required artifact torchscript was not made (the run stopped before it)"
    assert verdict.summary() == "REJECT: 1 reason"


def test_a_required_artifact_whose_export_failed_is_missing_with_the_first_line_of_the_error():
    report = _report(
        stages=[
            rm.Stage(kind="export", subject="onnx", status="failed", error="every strategy failed: dynamo: unsupported op\nTraceback ...")
        ]
    )
    verdict = judge(report, _policy())
    assert codes(verdict) == ["missing_artifact"]
    assert verdict.reasons[0].message == "required artifact onnx failed to build: every strategy failed: dynamo: unsupported op"


def test_a_required_optimization_that_was_skipped_is_missing_with_the_reason():
    report = _report(
        _artifact(),
        stages=[
            rm.Stage(kind="export", subject="onnx", status="ok"),
            rm.Stage(kind="optimize", subject="trt", status="skipped", reason="TensorRT needs a CUDA GPU"),
        ],
    )
    verdict = judge(report, _policy(require={"targets": ["onnx"], "optimizations": ["trt"]}))
    assert codes(verdict) == ["missing_artifact"]
    assert verdict.reasons[0].artifact == "trt"
    assert verdict.reasons[0].message == "required artifact trt was not built: TensorRT needs a CUDA GPU"


def test_an_unpublished_artifact_with_failed_checks_is_rejected_for_the_checks_not_as_missing():
    record = _artifact(checks=[_check("failed", reason="output 'y': max_abs_error 0.5 > atol")], published=False)
    verdict = judge(_report(record, stages=[rm.Stage(kind="export", subject="onnx", status="ok")]), _policy())
    assert codes(verdict) == ["failed_check"]


def test_an_auto_candidate_that_was_not_chosen_is_not_judged():
    loser = _artifact("fp16", checks=[_check("failed", reason="cosine 0.5")], published=False, candidate=True)
    verdict = judge(_report(_artifact(), loser), _policy())
    assert verdict.promoted, verdict.reasons


# checks


def test_a_failed_check_rejects_with_where_it_ran_and_why():
    record = _artifact(checks=[_check(), _check("failed", shape="B=5", reason="output 'y': max_abs_error 0.3 > atol 1e-05")])
    verdict = judge(_report(record), _policy())
    assert codes(verdict) == ["failed_check"]
    reason = verdict.reasons[0]
    assert reason.artifact == "onnx"
    assert reason.message == "check failed: onnxruntime on cpu at B=5: output 'y': max_abs_error 0.3 > atol 1e-05"


def test_nan_or_inf_in_an_output_rejects_with_its_own_reason():
    record = _artifact(checks=[_check(outputs=[_output(nan_count=3, inf_count=1)])])
    verdict = judge(_report(record), _policy())
    assert codes(verdict) == ["nan_inf"]
    assert verdict.reasons[0].message == "output 'y' has 3 NaN and 1 Inf values (onnxruntime on cpu at B=2)"


def test_a_skipped_check_on_a_required_device_rejects_even_when_others_passed():
    """Fails closed: a check that could have run and did not is no pass."""
    record = _artifact(checks=[_check(), _check("skipped", shape="B=4", reason="the artifact fixes axis 0 to 2")])
    verdict = judge(_report(record), _policy())
    assert codes(verdict) == ["skipped_check"]
    assert verdict.reasons[0].message == "required check skipped: onnxruntime on cpu at B=4: the artifact fixes axis 0 to 2"


def test_a_required_device_where_no_check_ran_rejects():
    record = _artifact(checks=[_check(), _check("skipped", device="cuda", shape="*", reason="CUDAExecutionProvider failed")])
    verdict = judge(_report(record, devices=("cpu", "cuda")), _policy(require={"targets": ["onnx"], "devices": ["cpu", "cuda"]}))
    assert codes(verdict) == ["skipped_check", "skipped_check"]
    assert verdict.reasons[1].message == "no check ran on required device cuda"


def test_an_artifact_none_of_whose_checks_ran_is_rejected():
    record = _artifact(checks=[_check("skipped", reason="onnxruntime is not installed")])
    verdict = judge(_report(record), _policy())
    assert not verdict.promoted
    assert verdict.reasons[-1].message == "no check of this artifact ran on any device"


def test_a_runtime_that_never_runs_on_a_required_device_is_a_note_not_a_reason():
    tflite_on_cuda = _check("skipped", device="cuda", shape="*", reason="TFLite runs on CPU only", device_unsupported=True)
    record = _artifact(checks=[_check(), tflite_on_cuda])
    verdict = judge(_report(record, devices=("cpu", "cuda")), _policy(require={"targets": ["onnx"], "devices": ["cpu", "cuda"]}))
    assert verdict.promoted, verdict.reasons
    assert verdict.notes == ["onnx: no runtime of its format runs on cuda (TFLite runs on CPU only), so it was checked on the others"]


# devices


def test_an_absent_required_device_rejects():
    verdict = judge(_report(_artifact()), _policy(require={"targets": ["onnx"], "devices": ["cpu", "cuda"]}))
    assert codes(verdict) == ["missing_device"]
    assert verdict.reasons[0].message == (
        "required device cuda is absent from this machine (present: cpu); add it to require.may_skip_devices to allow that"
    )


def test_an_absent_device_the_policy_may_skip_is_a_note_not_a_reason():
    policy = _policy(require={"targets": ["onnx"], "devices": ["cpu", "cuda"], "may_skip_devices": ["cuda"]})
    verdict = judge(_report(_artifact()), policy)
    assert verdict.promoted, verdict.reasons
    assert verdict.notes == ["required device cuda is absent from this machine; the policy may skip it, so nothing was checked on it"]


def test_a_present_device_the_policy_may_skip_is_still_required():
    record = _artifact(checks=[_check(), _check("skipped", device="cuda", shape="*", reason="no GPU memory")])
    policy = _policy(require={"targets": ["onnx"], "devices": ["cpu", "cuda"], "may_skip_devices": ["cuda"]})
    verdict = judge(_report(record, devices=("cpu", "cuda")), policy)
    assert "skipped_check" in codes(verdict) and verdict.notes == []


# the run itself


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"error": "there is no room to write to out"}, "there is no room to write to out"),
        ({"interrupted": True}, "the run was interrupted"),
    ],
)
def test_a_run_that_stopped_rejects_with_run_failed(fields, message):
    verdict = judge(_report(_artifact(), **fields), _policy())
    assert codes(verdict) == ["run_failed"] and verdict.reasons[0].message == message


# budgets


def test_an_accuracy_budget_missed_rejects_with_the_value_and_the_bound():
    record = _artifact(checks=[_check(outputs=[_output(cosine_similarity=0.97)])])
    verdict = judge(_report(record), _policy(budgets={"onnx": {"accuracy": "cosine>=0.999"}}))
    assert codes(verdict) == ["budget"]
    assert verdict.reasons[0].message == "cosine 0.97 output 'y' on onnxruntime (cpu) misses the budget cosine>=0.999"
    [result] = verdict.budgets
    assert (result.status, result.value, result.kind, result.shape) == ("failed", 0.97, "accuracy", "B=2")


def test_an_accuracy_budget_is_judged_on_the_worst_shape():
    checks = [_check(outputs=[_output(max_abs_error=1e-6)]), _check(shape="B=9", outputs=[_output(max_abs_error=2e-3)])]
    verdict = judge(_report(_artifact(checks=checks)), _policy(budgets={"onnx": {"accuracy": "max_abs<=1e-3"}}))
    assert codes(verdict) == ["budget"]
    assert (verdict.budgets[0].value, verdict.budgets[0].shape) == (2e-3, "B=9")


def test_an_accuracy_budget_met_promotes_and_records_the_result():
    verdict = judge(_report(_artifact()), _policy(budgets={"onnx": {"accuracy": "cosine>=0.999,max_abs<=1e-4"}}))
    assert verdict.promoted, verdict.reasons
    assert sorted((b.metric, b.status) for b in verdict.budgets) == [("cosine", "passed"), ("max_abs", "passed")]


def test_a_size_budget_exceeded_rejects():
    verdict = judge(_report(_artifact()), _policy(budgets={"onnx": {"size_mb": 0.5}}))  # the artifact is 1 MB
    assert codes(verdict) == ["budget"]
    assert verdict.reasons[0].message == "size_mb 1 misses the budget size_mb<=0.5"


def test_a_latency_budget_exceeded_rejects_and_one_met_passes():
    bench = rm.Benchmark(runtime="onnxruntime", device="cpu", shape="B=2", latency_ms_p50=12.5)
    record = _artifact(benchmarks=[bench])
    verdict = judge(_report(record), _policy(budgets={"onnx": {"latency_ms_p50": 10}}))
    assert codes(verdict) == ["budget"]
    assert verdict.reasons[0].message == "latency_ms_p50 12.5 on onnxruntime (cpu) misses the budget latency_ms_p50<=10"
    assert judge(_report(record), _policy(budgets={"onnx": {"latency_ms_p50": 20}})).promoted


def test_a_budget_not_measured_rejects():
    """Fails closed: a latency budget with no benchmark to judge it on is no pass."""
    verdict = judge(_report(_artifact()), _policy(budgets={"onnx": {"latency_ms_p50": {"cpu": 10}}}))
    assert codes(verdict) == ["budget"]
    assert verdict.reasons[0].message == "latency_ms_p50<=10 (cpu): not measured: no benchmark of this artifact on cpu"
    assert verdict.budgets[0].status == "skipped"
    anywhere = judge(_report(_artifact()), _policy(budgets={"onnx": {"latency_ms_p50": 10}}))
    assert anywhere.reasons[0].message == "latency_ms_p50<=10: not measured: no benchmark of this artifact"


def test_an_accuracy_budget_no_check_measured_rejects():
    record = _artifact(checks=[_check(outputs=[_output(cosine_similarity=None)])])
    verdict = judge(_report(record), _policy(budgets={"onnx": {"accuracy": "cosine>=0.9"}}))
    assert codes(verdict) == ["budget"]
    assert "not measured: no check of this artifact measured it" in verdict.reasons[0].message


def test_a_budget_on_an_absent_device_the_policy_may_skip_is_a_note():
    bench = rm.Benchmark(runtime="onnxruntime", device="cpu", shape="B=2", latency_ms_p50=5.0)
    policy = _policy(
        require={"targets": ["onnx"], "devices": ["cpu", "cuda"], "may_skip_devices": ["cuda"]},
        budgets={"onnx": {"latency_ms_p50": {"cpu": 10, "cuda": 1}}},
    )
    verdict = judge(_report(_artifact(benchmarks=[bench])), policy)
    assert verdict.promoted, verdict.reasons
    assert "onnx: latency_ms_p50<=1 on cuda not judged: cuda is absent and the policy may skip it" in verdict.notes


def test_a_budget_naming_an_output_the_model_lacks_is_an_error():
    with pytest.raises(ConvertError) as info:
        judge(_report(_artifact()), _policy(budgets={"onnx": {"accuracy": {"logits": "cosine>=0.9"}}}))
    assert info.value.problem == "the policy's budgets.onnx.accuracy names the output 'logits', which the model does not have"
    assert info.value.next_step == "The model's outputs are: y ('*' is every output)."


# the baseline


def test_a_size_regression_beyond_the_allowance_rejects():
    baseline = _report(_artifact())
    current = _report(_artifact(size_bytes=1_200_000))
    verdict = judge(current, _policy(), baseline=baseline)
    assert codes(verdict) == ["regression"]
    assert verdict.reasons[0].message == (
        "size regressed against the baseline: size_bytes 1e+06 → 1.2e+06 (+20.0%), beyond the allowance +1%"
    )


def test_a_change_within_the_allowance_is_no_regression():
    baseline = _report(_artifact())
    verdict = judge(_report(_artifact(size_bytes=1_005_000)), _policy(), baseline=baseline)
    assert verdict.promoted, verdict.reasons
    [delta] = [d for d in verdict.baseline.deltas if d.metric == "size_bytes"]
    assert delta.status == "ok" and delta.allowed == "+1%"


def test_a_wider_allowance_accepts_what_the_default_rejects():
    baseline, current = _report(_artifact()), _report(_artifact(size_bytes=1_200_000))
    assert not judge(current, _policy(), baseline=baseline).promoted
    assert judge(current, _policy(), baseline=baseline, allowance=Allowance(size=0.25)).promoted


def test_a_latency_regression_counts_the_relative_and_absolute_allowance():
    def with_p50(p50: float) -> rm.Report:
        return _report(_artifact(benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=p50)]))

    # the baseline's artifact is not timed beside (a recorded p50 only): the recorded-figure allowance, 100% by default
    baseline = with_p50(10.0)
    assert judge(with_p50(20.0), _policy(), baseline=baseline).promoted  # within 10.0 * 2.0 + 0.02
    verdict = judge(with_p50(20.1), _policy(), baseline=baseline)
    assert codes(verdict) == ["regression"]
    assert verdict.reasons[0].message == (
        "latency regressed against the baseline: latency_ms_p50 10 → 20.1 (+101.0%) [onnxruntime, cpu], beyond the allowance +100% +0.02 "
        "(against its recorded p50: the baseline's artifact was not timed beside this one)"
    )


def test_an_accuracy_regression_names_the_output_runtime_and_device():
    baseline = _report(_artifact())
    current = _report(_artifact(checks=[_check(outputs=[_output(max_abs_error=1e-5)])]))
    verdict = judge(current, _policy(), baseline=baseline)
    assert codes(verdict) == ["regression"]
    message = verdict.reasons[0].message
    assert message.startswith("accuracy regressed against the baseline: max_abs_error 1e-06 → 1e-05")
    assert "[output 'y', onnxruntime, cpu]" in message and message.endswith("beyond the allowance +25% +1e-06")


def test_an_improvement_is_recorded_and_promotes():
    baseline = _report(_artifact())
    verdict = judge(_report(_artifact(size_bytes=500_000)), _policy(), baseline=baseline)
    assert verdict.promoted
    assert [d.status for d in verdict.baseline.deltas if d.metric == "size_bytes"] == ["improved"]


def test_an_artifact_the_baseline_lacks_is_not_compared():
    baseline = _report()
    verdict = judge(_report(_artifact()), _policy(), baseline=baseline)
    assert verdict.promoted
    [delta] = verdict.baseline.deltas
    assert delta.status == "not_compared" and delta.reason == "the baseline has no such artifact"


def _task_check(drop: float) -> rm.Check:
    """A check on labelled --data whose top-1 accuracy fell by ``drop`` from the source's 0.95."""
    metric = rm.TaskMetric(name="top1", source=0.95, artifact=0.95 - drop, drop=drop)
    return _check(shape="data", task=rm.TaskResult(output="y", samples=200, metrics=[metric]))


def test_a_task_drop_budget_in_the_policy_judges_the_worst_drop():
    record = _artifact(checks=[_check(), _task_check(0.02)])
    verdict = judge(_report(record), _policy(budgets={"onnx": {"accuracy": "task_top1_drop<=1%"}}))
    assert codes(verdict) == ["budget"]
    [result] = verdict.budgets
    assert (result.metric, result.value, result.limit, result.shape, result.status) == ("task_top1_drop", 0.02, "<=0.01", "data", "failed")
    assert judge(_report(_artifact(checks=[_task_check(0.005)])), _policy(budgets={"onnx": {"accuracy": "task_top1_drop<=1%"}})).promoted


def test_a_task_drop_grown_beyond_the_allowance_is_a_regression():
    baseline = _report(_artifact(checks=[_task_check(0.0)]))
    assert judge(_report(_artifact(checks=[_task_check(0.004)])), _policy(), baseline=baseline).promoted  # within half a point
    verdict = judge(_report(_artifact(checks=[_task_check(0.02)])), _policy(), baseline=baseline)
    assert codes(verdict) == ["regression"] and "task_top1_drop 0 → 0.02" in verdict.reasons[0].message


# the baseline fails closed: a value it cannot compare (NaN, Inf, or measured on one side only) rejects, never "ok"

NAN, INF = float("nan"), float("inf")


def _with_output(**metrics) -> rm.Report:
    return _report(_artifact(checks=[_check(outputs=[_output(**metrics)])]))


@pytest.mark.parametrize(
    "baseline, current, metric, shown",
    [
        ({"max_abs_error": NAN}, {}, "max_abs_error", "nan → 1e-06"),
        ({"max_abs_error": INF}, {}, "max_abs_error", "inf → 1e-06"),
        ({"rel_rms_error": -INF}, {}, "rel_rms_error", "-inf → 1e-06"),
        ({"cosine_similarity": NAN}, {}, "cosine_distance", "nan → 1e-05"),
        ({"max_abs_error": None}, {}, "max_abs_error", "— → 1e-06"),  # not measured in the baseline, measured now
        ({}, {"rel_rms_error": None}, "rel_rms_error", "1e-06 → —"),  # measured in the baseline, not now
        ({}, {"cosine_similarity": None}, "cosine_distance", "1e-05 → —"),
    ],
)
def test_a_baseline_metric_that_cannot_be_compared_rejects(baseline, current, metric, shown):
    verdict = judge(_with_output(**current), _policy(), baseline=_with_output(**baseline))
    assert not verdict.promoted and codes(verdict) == ["regression"], verdict.reasons
    message = verdict.reasons[0].message
    assert message.startswith(f"accuracy cannot be compared with the baseline: {metric} {shown}"), message
    assert "[output 'y', onnxruntime, cpu]" in message and "a regression check that cannot be made fails the gate" in message
    [delta] = [d for d in verdict.baseline.deltas if d.metric == metric]
    assert delta.status == "regressed" and delta.reason.startswith("not comparable:") and delta.delta is None


def test_nan_now_where_the_baseline_measured_a_value_is_a_regression():
    verdict = judge(_with_output(max_abs_error=NAN), _policy(), baseline=_with_output())
    assert codes(verdict) == ["regression"]
    assert verdict.reasons[0].message.startswith("accuracy regressed against the baseline: max_abs_error 1e-06 → nan")


def test_nan_at_one_shape_of_the_baseline_is_not_hidden_by_a_value_at_another():
    checks = [_check(outputs=[_output()]), _check(shape="B=9", outputs=[_output(max_abs_error=NAN)])]
    verdict = judge(_with_output(), _policy(), baseline=_report(_artifact(checks=checks)))
    assert codes(verdict) == ["regression"] and "max_abs_error nan → 1e-06" in verdict.reasons[0].message


def test_a_metric_missing_at_one_shape_of_the_baseline_makes_it_not_comparable():
    checks = [_check(outputs=[_output()]), _check(shape="B=9", outputs=[_output(rel_rms_error=None)])]
    verdict = judge(_with_output(), _policy(), baseline=_report(_artifact(checks=checks)))
    assert codes(verdict) == ["regression"] and "rel_rms_error — → 1e-06" in verdict.reasons[0].message


def test_a_metric_measured_on_neither_side_is_no_reason():
    """An integer output has no rel RMS error, in the baseline or now: nothing to compare, and nothing hidden."""
    verdict = judge(_with_output(rel_rms_error=None), _policy(), baseline=_with_output(rel_rms_error=None))
    assert verdict.promoted, verdict.reasons
    assert "rel_rms_error" not in {d.metric for d in verdict.baseline.deltas}


def test_a_nan_task_drop_in_the_baseline_rejects():
    baseline = _report(_artifact(checks=[_task_check(NAN)]))
    verdict = judge(_report(_artifact(checks=[_task_check(0.0)])), _policy(), baseline=baseline)
    assert codes(verdict) == ["regression"]
    assert verdict.reasons[0].message.startswith("accuracy cannot be compared with the baseline: task_top1_drop nan → 0")


@pytest.mark.parametrize("p50", [NAN, INF])
def test_a_baseline_latency_that_is_not_a_number_rejects(p50):
    def with_p50(value: float) -> rm.Report:
        return _report(_artifact(benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=value)]))

    verdict = judge(with_p50(10.0), _policy(), baseline=with_p50(p50))
    assert codes(verdict) == ["regression"]
    assert verdict.reasons[0].message.startswith(f"latency cannot be compared with the baseline: latency_ms_p50 {p50} → 10")


def test_a_baseline_with_finite_metrics_still_promotes():
    verdict = judge(_with_output(), _policy(), baseline=_with_output())
    assert verdict.promoted, verdict.reasons
    assert {d.status for d in verdict.baseline.deltas} == {"ok"}


# purity


def test_the_judge_reads_no_file_and_no_clock(monkeypatch):
    """The verdict is a function of the report, the policy and the baseline report alone: the same inputs give the same
    verdict anywhere, at any time, without the files they came from."""
    import builtins
    import datetime as dt
    import os
    import time
    from pathlib import Path

    def refused(*args, **kwargs):
        raise AssertionError("the judge read a file or the clock")

    baseline = _report(_artifact(benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=10.0)]))
    current = _report(
        _artifact(size_bytes=1_200_000, benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=9.0)]),
        devices=("cpu",),
    )
    policy = _policy(budgets={"onnx": {"accuracy": "cosine>=0.999", "latency_ms_p50": 50, "size_mb": 5}})
    expected = judge(current, policy, "policy.yaml", baseline, Path("nowhere/report.json"))
    for target, name in (
        (builtins, "open"),
        (os, "stat"),
        (os, "listdir"),
        (Path, "read_text"),
        (Path, "read_bytes"),
        (Path, "exists"),
        (Path, "is_file"),
        (Path, "stat"),
        (time, "time"),
        (time, "perf_counter"),
        (time, "monotonic"),
    ):
        monkeypatch.setattr(target, name, refused)
    monkeypatch.setattr(dt, "datetime", type("NoClock", (), {"now": refused, "utcnow": refused, "today": refused}))
    verdict = judge(current, policy, "policy.yaml", baseline, Path("nowhere/report.json"))
    monkeypatch.undo()
    assert verdict == expected and codes(verdict) == ["regression"] and verdict.baseline.path == "nowhere/report.json"


def _package(passed: bool = True, path: str | None = "out/model.model.zip") -> rm.PackageRecord:
    check = rm.PackageCheck(name="digest:onnx", status="passed" if passed else "failed", reason="" if passed else "other bytes")
    held = rm.PackedArtifactRecord(key="onnx", format="onnx", sha256="0" * 64, passed=True)
    return rm.PackageRecord(packager="archive", path=path, artifacts=[held], checks=[check], passed=passed)


def test_a_required_package_that_was_not_built_rejects_and_a_passing_one_promotes():
    policy = _policy(require={"targets": ["onnx"], "packages": ["archive"]})
    missing = judge(_report(_artifact()), policy)
    assert not missing.promoted and [(r.code, r.artifact) for r in missing.reasons] == [("missing_package", "archive")]
    assert missing.required_packages == ["archive"]
    assert judge(_report(_artifact(), packages=[_package()]), policy).promoted
    unpublished = judge(_report(_artifact(), packages=[_package(path=None)]), policy)
    assert [r.code for r in unpublished.reasons] == ["missing_package"]


def test_a_package_that_failed_its_checks_rejects_even_when_not_required():
    verdict = judge(_report(_artifact(), packages=[_package(passed=False)]), _policy())
    assert [r.code for r in verdict.reasons] == ["failed_package"] and "digest:onnx failed: other bytes" in verdict.reasons[0].message
