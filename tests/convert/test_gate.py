"""convert gate: each reason to reject, alone, rejects with exit code 1 and is named in the report; a clean model
is promoted with exit code 0; a bad policy or baseline exits 2 naming the problem (and the line)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from convert.devices import present_devices
from tests.conftest import load_report, run_cli

CNN = {"path": "fixtures.torch_models:build_cnn", "inputs": ["x:float32[B,3,32,32]"]}
# torch.export specializes this module's batch (it branches on it): its program fixes B
FIXED_BATCH_MODEL = {"path": "fixtures.torch_models:branches_on_its_batch", "inputs": ["x:float32[B,6]"]}
NO_CUDA = pytest.mark.skipif("cuda" in present_devices(), reason="needs a machine without CUDA")


def write_policy(folder: Path, **policy) -> Path:
    path = folder / "promotion.yaml"
    path.write_text(yaml.safe_dump({"model": CNN, "require": {"targets": ["onnx"]}, "out": "out", **policy}, sort_keys=False))
    return path


def gate(policy: Path, *args: str):
    """Run `convert gate` and return the run and the verdict written into its report (None when none was written)."""
    run = run_cli("gate", str(policy), *args)
    report = policy.parent / "out" / "report.json"
    return run, load_report(report)["gate"] if report.exists() else None


def codes(verdict: dict) -> list[str]:
    return [reason["code"] for reason in verdict["reasons"]]


@pytest.fixture(scope="module")
def promoted(tmp_path_factory):
    """A clean model with loose budgets, every rendering and a required device the machine may lack."""
    folder = tmp_path_factory.mktemp("promoted")
    policy = write_policy(
        folder,
        require={"targets": ["onnx"], "optimizations": ["fp16"], "devices": ["cpu", "cuda"], "may_skip_devices": ["cuda"]},
        budgets={
            "onnx": {"accuracy": "max_abs<=1e-3,cosine>=0.9999", "latency_ms_p50": {"cpu": 1000}, "size_mb": 10},
            "fp16": {"accuracy": {"output": "cosine>=0.999"}, "throughput_per_s": 1},
        },
    )
    run, verdict = gate(
        policy, "--junit", str(folder / "junit.xml"), "--markdown", str(folder / "summary.md"), "--html", str(folder / "report.html")
    )
    return folder, run, verdict


def test_a_clean_model_is_promoted_with_every_budget_judged(promoted):
    folder, run, verdict = promoted
    assert run.returncode == 0, run.output
    assert verdict["decision"] == "promote" and verdict["promoted"] and verdict["reasons"] == []
    assert "Gate: PROMOTE (exit code 0)" in run.stdout
    judged = {(b["artifact"], b["metric"]) for b in verdict["budgets"]}
    assert judged == {
        ("onnx", "max_abs"),
        ("onnx", "cosine"),
        ("onnx", "latency_ms_p50"),
        ("onnx", "size_mb"),
        ("fp16", "cosine"),
        ("fp16", "throughput_per_s"),
    }
    assert all(b["status"] == "passed" and b["value"] is not None for b in verdict["budgets"])
    for name in ("junit.xml", "summary.md", "report.html"):
        assert (folder / name).stat().st_size > 0


@NO_CUDA
def test_a_required_device_the_policy_may_skip_is_a_note_not_a_reason(promoted):
    _, run, verdict = promoted
    assert any("cuda is absent" in note for note in verdict["notes"]) and "cuda is absent" in run.stdout


@NO_CUDA
def test_an_absent_required_device_rejects(tmp_path):
    run, verdict = gate(write_policy(tmp_path, require={"targets": ["onnx"], "devices": ["cpu", "cuda"]}))
    assert run.returncode == 1, run.output
    assert codes(verdict) == ["missing_device"] and "required device cuda is absent" in verdict["reasons"][0]["message"]


@pytest.mark.fast
def test_a_failed_check_rejects(tmp_path):
    run, verdict = gate(write_policy(tmp_path, model={"path": "fixtures.torch_models:build_off_in_onnx", "inputs": ["x:float32[B,8]"]}))
    assert run.returncode == 1, run.output
    assert set(codes(verdict)) == {"failed_check", "diverged"}  # where it diverged is one more reason
    assert any("output 'scores'" in r["message"] and r["artifact"] == "onnx" for r in verdict["reasons"])
    assert any(r["code"] == "diverged" and "captured already differs" in r["message"] for r in verdict["reasons"])


def test_nan_in_an_output_rejects_with_its_own_reason(tmp_path):
    run, verdict = gate(write_policy(tmp_path, model={"path": "fixtures.torch_models:build_nan_in_onnx", "inputs": ["x:float32[B,8]"]}))
    assert run.returncode == 1, run.output
    nan = [r for r in verdict["reasons"] if r["code"] == "nan_inf"]
    assert nan and all("NaN" in r["message"] and r["artifact"] == "onnx" for r in nan)


@pytest.mark.skipif("cuda" in present_devices(), reason="TensorRT may be buildable on a CUDA machine")
def test_a_required_artifact_that_could_not_be_built_rejects(tmp_path):
    run, verdict = gate(write_policy(tmp_path, require={"targets": ["onnx"], "optimizations": ["trt"]}))
    assert run.returncode == 1, run.output
    assert codes(verdict) == ["missing_artifact"]
    assert verdict["reasons"][0]["artifact"] == "trt" and "TensorRT" in verdict["reasons"][0]["message"]


def test_a_required_check_skipped_rejects(tmp_path):
    """torch.export specializes the batch of a module that branches on it: with fixed shapes allowed, the check at
    batch 4 is skipped, and a skipped required check still rejects (the gate fails closed)."""
    run, verdict = gate(
        write_policy(
            tmp_path,
            model=FIXED_BATCH_MODEL,
            require={"targets": ["torch_export"]},
            validation={"dims": ["B=2,4"], "allow_fixed_shapes": True},
        )
    )
    assert run.returncode == 1, run.output
    assert codes(verdict) == ["skipped_check"]
    assert "at B=4" in verdict["reasons"][0]["message"] and "fixes axis 0" in verdict["reasons"][0]["message"]


def test_an_artifact_that_fixes_a_dim_asked_dynamic_rejects_as_a_failed_check(tmp_path):
    run, verdict = gate(
        write_policy(tmp_path, model=FIXED_BATCH_MODEL, require={"targets": ["torch_export"]}, validation={"dims": ["B=2,4"]})
    )
    assert run.returncode == 1, run.output
    assert codes(verdict) == ["failed_check"]
    assert "at B=4" in verdict["reasons"][0]["message"] and "fixes dim B that was asked dynamic" in verdict["reasons"][0]["message"]


@pytest.mark.parametrize(
    "budget, metric",
    [
        ({"accuracy": "max_abs<=1e-12"}, "max_abs"),
        ({"latency_ms_p50": 1e-6}, "latency_ms_p50"),
        ({"throughput_per_s": 1e12}, "throughput_per_s"),
        ({"size_mb": 1e-6}, "size_mb"),
    ],
)
def test_an_exceeded_budget_rejects(tmp_path, budget, metric):
    run, verdict = gate(write_policy(tmp_path, budgets={"onnx": budget}))
    assert run.returncode == 1, run.output
    assert set(codes(verdict)) == {"budget"}
    assert all(metric in r["message"] and "misses the budget" in r["message"] for r in verdict["reasons"])
    assert {b["status"] for b in verdict["budgets"]} == {"failed"}


def test_a_budget_on_a_measurement_that_was_not_taken_rejects(tmp_path):
    """Fails closed: a latency budget on a runtime that did not run is 'skipped', and rejects."""
    run, verdict = gate(write_policy(tmp_path, budgets={"onnx": {"runtime": "tensorrt", "latency_ms_p50": 1000}}))
    assert run.returncode == 1, run.output
    assert codes(verdict) == ["budget"] and "not measured" in verdict["reasons"][0]["message"]


@pytest.mark.parametrize("kind", ["accuracy", "latency", "size"])
def test_a_regression_against_the_baseline_rejects(tmp_path, promoted, kind):
    """The baseline is the promoted run's own report, edited to stand for a model that was better in one respect."""
    baseline = load_report(promoted[0] / "out" / "report.json")
    onnx = next(a for a in baseline["artifacts"] if a["format"] == "onnx" and not a["optimization"])
    if kind == "accuracy":
        for check in onnx["checks"]:
            for output in check["outputs"]:
                output["max_abs_error"] = output["max_abs_error"] / 1000 if output["max_abs_error"] else output["max_abs_error"]
    elif kind == "latency":
        for bench in onnx["benchmarks"]:
            bench["latency_ms_p50"] /= 100
            bench["latency_ms_interval"] = [t / 100 for t in bench["latency_ms_interval"]]
        # its artifact is no longer on disk: its recorded figures are what the new one is compared with
        onnx["path"] = onnx["files"][0] = str(tmp_path / "gone.onnx")
    else:
        onnx["size_bytes"] = onnx["size_bytes"] // 2
        # written as a 1.8 report (before environment.outside_tested): an older version the gate upgrades and reads
        baseline["schema_version"] = "1.8"
        del baseline["environment"]["outside_tested"]
    (tmp_path / "last-promoted.json").write_text(json.dumps(baseline))
    # latency may be 10x slower (noise must not reject the other two kinds), but not 100x
    policy = write_policy(
        tmp_path,
        baseline={"allowance": {"accuracy": 0.5, "accuracy_abs": 1e-9, "latency": 10.0, "latency_recorded": 10.0, "latency_ms": 0.001}},
    )
    run, verdict = gate(policy, "--baseline", str(tmp_path / "last-promoted.json"))
    assert run.returncode == 1, run.output
    regressed = [d for d in verdict["baseline"]["deltas"] if d["status"] == "regressed"]
    assert regressed and {d["kind"] for d in regressed} == {kind}
    assert {r["code"] for r in verdict["reasons"]} == {"regression"}
    assert all(f"{kind} regressed against the baseline" in r["message"] for r in verdict["reasons"])
    sized = next(d for d in verdict["baseline"]["deltas"] if d["metric"] == "size_bytes")
    assert sized["baseline"] == onnx["size_bytes"] and sized["allowed"] == "+1%"


def test_the_same_model_against_its_own_report_shows_the_deltas(tmp_path, promoted):
    """With the default 10% latency allowance: the baseline's artifacts are timed beside the new ones, interleaved, so
    the same model is the same speed within the noise, however loaded the machine."""
    policy = write_policy(tmp_path, require={"targets": ["onnx"], "optimizations": ["fp16"]})
    run, verdict = gate(policy, "--baseline", str(promoted[0] / "out" / "report.json"))
    assert run.returncode == 0, run.output
    comparison = verdict["baseline"]
    assert comparison["same_environment"] and not comparison["same_source"]  # a factory has no file to hash
    kinds = {(d["artifact"], d["kind"]) for d in comparison["deltas"]}
    assert {("onnx", "accuracy"), ("onnx", "latency"), ("onnx", "size"), ("fp16", "accuracy"), ("fp16", "size")} <= kinds
    latency = [d for d in comparison["deltas"] if d["kind"] == "latency"]
    assert latency and all(d["side_by_side"] and d["status"] != "regressed" and d["interval"][0] <= 1.1 for d in latency)
    accuracy = [d for d in comparison["deltas"] if d["kind"] == "accuracy"]
    assert all(d["delta"] == 0 and d["status"] == "ok" for d in accuracy)  # same model, same seeds: the same errors
    assert "Against the baseline" in run.stdout


def test_a_really_slower_model_is_rejected_against_its_baseline_timed_beside_it(tmp_path):
    """The released MLP, then the same MLP 4x deeper: the baseline's ONNX file is timed interleaved with the new one in
    the same run, and the paired interval says the slowdown is real."""
    mlp = {"path": "fixtures.torch_models:build_feature_mlp", "inputs": ["input:float32[B,512]"]}
    released, changed = tmp_path / "released", tmp_path / "changed"
    released.mkdir(), changed.mkdir()
    timed = {"budgets": {"onnx": {"latency_ms_p50": 1000}}, "benchmark": {"seconds": 0.2}}
    run, verdict = gate(write_policy(released, model=mlp, **timed))
    assert run.returncode == 0, run.output
    deeper = {**mlp, "path": "fixtures.torch_models:build_deeper_feature_mlp"}
    run, verdict = gate(
        write_policy(changed, model=deeper, benchmark={"seconds": 0.2}), "--baseline", str(released / "out" / "report.json")
    )
    assert run.returncode == 1, run.output
    (latency,) = [d for d in verdict["baseline"]["deltas"] if d["kind"] == "latency"]
    assert latency["side_by_side"] and latency["status"] == "regressed" and latency["interval"][0] > 1.1
    messages = [r["message"] for r in verdict["reasons"]]
    assert set(codes(verdict)) == {"regression"} and any("latency regressed" in m and "timed beside the baseline's" in m for m in messages)


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "model: {path: m.pt2, weigths: w.safetensors}\nrequire: {targets: [onnx]}\n",
            "line 1: model.weigths: unknown key (allowed: path, framework, task, component, dtype, weights",
        ),
        (
            "model: {path: m.pt2}\nrequire:\n  targets: [onnx]\nvalidation:\n  samples: three\n",
            "line 5: validation.samples: input should be a valid integer",
        ),
        ("model: {path: m.pt2}\nrequire:\n  targets: [onnx, tflitee]\n", "line 3: require.targets.1: unknown format 'tflitee'"),
        (
            "model: {path: m.pt2}\nrequire:\n  targets: [onnx]\n  packages: [archive, zipp]\n",
            "line 4: require.packages.1: unknown packager 'zipp' (known: archive, triton)",
        ),
        (
            "model: {path: m.pt2}\nrequire: {targets: [onnx]}\nbudgets:\n  onnx: {size_mb: 1}\n  onnx: {latency_ms_p50: 5}\n",
            "line 5: the key 'onnx' is given twice in one mapping (first on line 4)",
        ),
        (
            "model: {path: m.pt2, trust_code: 'yes'}\nrequire: {targets: [onnx]}\n",
            "line 1: model.trust_code: input should be a valid boolean",
        ),
        (
            "model: {path: m.pt2}\nrequire: {targets: [onnx]}\nbudgets:\n  onnx:\n    accuracy: 'cosine>=1e'\n",
            "line 5: budgets.onnx.accuracy: cannot read the accuracy budget 'cosine>=1e'",
        ),
        (
            "model: {path: m.pt2}\nrequire: {targets: [onnx]}\nbudgets:\n  onnx: {size_mb: .nan}\n",
            "line 4: budgets.onnx.size_mb: input should be a finite number",
        ),
        (
            "model: {path: m.pt2}\nrequire: {targets: [torchscript], optimizations: [fp16]}\n",
            "line 2: require.optimizations.0: the pass 'fp16' starts from the onnx artifact",
        ),
        ("model: &a [*a]\nrequire: {targets: [onnx]}\n", "line 1: the YAML anchor '&a' is refused"),
        (
            "model: {path: m.pt2}\nrequire: {targets: [onnx]}\nbudgets:\n  onnx:\n    latency_ms_p50: -1\n",
            "line 5: budgets.onnx.latency_ms_p50: input should be greater than 0",
        ),
        (
            "model: {path: m.pt2}\nrequire: {targets: [onnx]}\nbudgets:\n  int8: {size_mb: 1}\n",
            "line 4: budgets.int8: 'int8' is not a required target or optimization",
        ),
        ("model: {path: m.pt2\nrequire: [\n", "line 2: not valid YAML"),
        ("- just\n- a list\n", "a policy is a mapping of keys"),
        ("require: {targets: [onnx]}\n", "line 1: model: missing, and it is required"),
    ],
)
def test_a_bad_policy_exits_2_naming_the_line(tmp_path, text, expected):
    policy = tmp_path / "promotion.yaml"
    policy.write_text(text)
    run = run_cli("gate", str(policy))
    assert run.returncode == 2, run.output
    assert expected in " ".join(run.stderr.split()) and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "content, expected",
    [
        (None, "does not exist"),
        ("{not json", "is not JSON"),
        ('{"schema_version": "0.9"}', "is a convert report of schema 0.9, and this convert"),
        # 1.x minors changed meaning: only those an upgrade states exactly are read (convert/reports/versions.py)
        ('{"schema_version": "1.7", "tool_version": "0.1.0"}', "is a convert report of schema 1.7, and this convert"),
        ('{"schema_version": "99.0"}', "is a convert report of schema 99.0, and this convert"),
        ('{"schema_version": "latest"}', "is not a convert report of a schema version this tool knows"),
    ],
)
def test_a_bad_baseline_exits_2_before_any_work(tmp_path, content, expected):
    baseline = tmp_path / "last-promoted.json"
    if content is not None:
        baseline.write_text(content)
    run = run_cli("gate", str(write_policy(tmp_path)), "--baseline", str(baseline))
    assert run.returncode == 2, run.output
    assert expected in " ".join(run.stderr.split()) and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()


def test_a_budget_naming_an_output_the_model_lacks_exits_2(tmp_path):
    run, _ = gate(write_policy(tmp_path, budgets={"onnx": {"accuracy": {"logits": "cosine>=0.9"}}}))
    assert run.returncode == 2, run.output
    assert "names the output 'logits', which the model does not have" in " ".join(run.stderr.split())


def test_convert_gate_from_python_returns_the_verdict_the_report_holds(tmp_path):
    import convert

    policy = {
        "model": {"path": "fixtures.torch_models:build_off_in_onnx", "inputs": ["x:float32[B,8]"]},
        "require": {"targets": ["onnx"]},
        "budgets": {"onnx": {"size_mb": 10}},
    }
    verdict = convert.gate(policy, out=tmp_path / "out")
    assert isinstance(verdict, convert.Verdict)
    assert not verdict.promoted and verdict.exit_code == 1 and verdict.policy == "<dict>"
    assert {r.code for r in verdict.reasons} == {"failed_check", "diverged"}
    written = convert.Report.from_json(Path(verdict.report).read_text()).gate
    assert written == verdict


def _judged(report: dict, **policy):
    """judge() on a real report edited by the test, under a policy given as a dict."""
    from convert.gate.judge import judge
    from convert.policy import load_policy
    from convert.reports.model import Report

    return judge(Report.model_validate(report), load_policy({"model": CNN, "require": {"targets": ["onnx"]}, **policy})[0])


def test_an_artifact_none_of_whose_checks_ran_is_rejected_whatever_devices_the_policy_names(promoted):
    report = load_report(promoted[0] / "out" / "report.json")
    for check in report["artifacts"][0]["checks"]:
        check["status"], check["outputs"] = "skipped", []
    verdict = _judged(report, require={"targets": ["onnx"], "devices": ["cuda"], "may_skip_devices": ["cuda"]})
    assert not verdict.promoted
    assert [r.message for r in verdict.reasons] == ["no check of this artifact ran on any device"]


def test_a_nan_metric_is_judged_as_the_worst_value(promoted):
    report = load_report(promoted[0] / "out" / "report.json")
    report["artifacts"][0]["checks"][-2]["outputs"][0]["cosine_similarity"] = float("nan")  # after finite ones
    verdict = _judged(report, budgets={"onnx": {"accuracy": "cosine>=0.9"}})
    assert not verdict.promoted and "cosine nan" in verdict.reasons[0].message


def test_a_budget_on_a_device_the_policy_may_skip_is_a_note_where_it_is_absent(promoted):
    report = load_report(promoted[0] / "out" / "report.json")
    report["environment"]["devices"] = ["cpu"]
    verdict = _judged(
        report,
        require={"targets": ["onnx"], "devices": ["cpu", "cuda"], "may_skip_devices": ["cuda"]},
        budgets={"onnx": {"latency_ms_p50": {"cpu": 1000, "cuda": 1}}},
    )
    assert verdict.promoted, verdict.reasons
    assert any("on cuda not judged" in note for note in verdict.notes)
