"""convert gate --mlflow logs one run to a real local MLflow file store: verdict, metrics, report and artifacts."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import REPO, load_report


def test_gate_logs_the_verdict_metrics_and_files_as_one_run(tmp_path, torch_files, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3.7+ refuses a file store unless asked, here too
    store = tmp_path / "mlruns"
    policy = tmp_path / "promotion.yaml"
    policy.write_text(f"""
model: {{path: "{torch_files / "cnn.pt2"}"}}
require: {{targets: [onnx], optimizations: [int8]}}
budgets: {{int8: {{size_mb: 1.0e-6}}}}
out: out
""")
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "MLFLOW_TRACKING_URI": store.as_uri(),
        "MLFLOW_ALLOW_FILE_STORE": "true",
        "MLFLOW_EXPERIMENT_NAME": "model-gate",
    }
    done = subprocess.run(
        [sys.executable, "-m", "convert", "gate", str(policy), "--mlflow", "--html", str(tmp_path / "report.html"), "-q"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 1, done.stdout + done.stderr  # the size budget rejects: a rejected model is logged too
    verdict = load_report(tmp_path / "out" / "report.json")["gate"]
    assert verdict["mlflow_run_id"]

    client = MlflowClient(tracking_uri=store.as_uri())
    run = client.get_run(verdict["mlflow_run_id"])
    assert client.get_experiment(run.info.experiment_id).name == "model-gate"
    assert run.data.tags["convert.decision"] == "reject" and run.data.tags["convert.exit_code"] == "1"
    assert "[budget] int8" in run.data.tags["convert.reasons"]
    assert run.data.metrics["gate.promoted"] == 0.0 and run.data.metrics["gate.reasons"] == len(verdict["reasons"])
    assert run.data.metrics["onnx.size_mb"] > 0 and run.data.metrics["int8.output.cosine_min"] > 0.9
    assert run.data.params["to"] == "onnx" and run.data.params["optimize"] == "int8"
    logged = {f.path for f in client.list_artifacts(run.info.run_id)}
    assert {"report.json", "reports", "artifacts"} <= logged
    assert {f.path for f in client.list_artifacts(run.info.run_id, "reports")} == {"reports/report.html"}
    assert {f.path for f in client.list_artifacts(run.info.run_id, "artifacts")} == {"artifacts/onnx", "artifacts/int8"}
    assert [f.path for f in client.list_artifacts(run.info.run_id, "artifacts/onnx")] == ["artifacts/onnx/cnn.onnx"]


def test_an_mlflow_store_that_refuses_the_run_is_a_clear_error_after_the_report_is_written(tmp_path, torch_files):
    policy = tmp_path / "promotion.yaml"
    policy.write_text(f'model: {{path: "{torch_files / "cnn.pt2"}"}}\nrequire: {{targets: [onnx]}}\nout: out\n')
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_ALLOW_FILE_STORE"}
    env.update({"PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": (tmp_path / "mlruns").as_uri()})
    done = subprocess.run(
        [sys.executable, "-m", "convert", "gate", str(policy), "--mlflow", "-q"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    message = " ".join(done.stderr.split())
    assert "MLflow refused the run" in message and "MLFLOW_ALLOW_FILE_STORE=true" in message and "Traceback" not in done.stderr
    assert load_report(tmp_path / "out" / "report.json")["gate"]["decision"] == "promote"
