"""Reports rendered from real JSON reports: one from ``convert`` (no gate section) and gated ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from convert.reports.model import (
    BaselineComparison,
    BaselineDelta,
    BudgetResult,
    GateReason,
    Report,
    Verdict,
)
from tests.conftest import run_cli, shared_folder

TRICKY = "p50 | 7.1 ms < 9 ms & rising"  # a message with what XML and Markdown must escape


@pytest.fixture(scope="session")
def exported_report(torch_files, converted) -> Path:
    """report.json of the lstm fixture to onnx and torchscript, an fp16 pass, three batch sizes, with benchmarks (the
    checks on CUDA are skipped on a machine without it); run once per session for every xdist worker."""
    done, out = converted(
        str(torch_files / "lstm.pt2"),
        "--to",
        "onnx,torchscript",
        "--optimize",
        "fp16",
        "--benchmark",
        "--benchmark-seconds",
        "0.2",
        "--dim",
        "d0=2,1,4",
        "-q",
    )
    assert done.returncode == 0, done.output
    return out / "report.json"


@pytest.fixture(scope="session")
def failed_report(converted) -> Path:
    """report.json of the off_in_onnx negative fixture: its ONNX checks fail on 'scores', its torch.export ones pass.

    Built from the factory, not from off_in_onnx.pt2: a saved torch.export program was traced outside an ONNX export,
    so its ONNX export comes out right. Run once per session for every xdist worker."""
    done, out = converted("fixtures.torch_models:build_off_in_onnx", "--input", "x:float32[B,8]", "--to", "onnx,torch_export", "-q")
    assert done.returncode == 1, done.output
    return out / "report.json"


@pytest.fixture(scope="session")
def rejected_gate_report(torch_files, exported_report, tmp_path_factory) -> Path:
    """report.json of a real `convert gate` that rejects the lstm fixture for several reasons: TensorRT not built, an
    fp16 throughput budget missed, with
    budgets that pass, an absent device the policy may skip, and deltas against ``exported_report`` as baseline. Run
    once per session for every xdist worker."""
    return (
        shared_folder(tmp_path_factory, "rejected_gate", lambda folder: _gate(folder, torch_files, exported_report)) / "out" / "report.json"
    )


def _gate(folder: Path, torch_files: Path, exported_report: Path) -> None:
    policy = folder / "promotion.yaml"
    policy.write_text(f"""
model: {{path: "{torch_files / "lstm.pt2"}"}}
require:
  targets: [onnx, torchscript]
  optimizations: [fp16, trt]
  devices: [cpu, cuda]
  may_skip_devices: [cuda]
validation: {{dims: ["d0=2,1,4"]}}
budgets:
  onnx: {{accuracy: "max_abs<=1e-3", latency_ms_p50: 1000, size_mb: 10}}
  fp16: {{throughput_per_s: 1.0e+12}}
baseline: {{allowance: {{latency: 100, latency_recorded: 100}}}}
out: out
""")
    done = run_cli("gate", str(policy), "--baseline", str(exported_report), "-q")
    assert done.returncode == 1, done.output


def load(path: Path) -> Report:
    return Report.from_json(path.read_text())


def with_hand_made_verdict(report: Report) -> Report:
    """A copy with a rejecting verdict written by hand, for what a real gate run does not produce here: messages with
    what XML and Markdown must escape, a skipped budget, a not-compared delta (the real runs are in ``rejected_gate_report``)."""
    verdict = Verdict(
        decision="reject",
        promoted=False,
        exit_code=1,
        policy="gate.yaml",
        reasons=[
            GateReason(code="budget", artifact="fp16", message="fp16: cosine 0.97 on 'output' is below 0.999"),
            GateReason(code="regression", artifact="onnx", message=f"onnx: latency_ms_p50 regressed: {TRICKY}"),
            GateReason(code="missing_device", artifact="onnx", message=f"onnx was not checked on cuda: {TRICKY}"),
            GateReason(code="missing_artifact", artifact="int8", message="int8 is required but was not built"),
            GateReason(code="budget", artifact="onnx", message="latency_ms_p50<=5 on onnxruntime (cuda): not measured"),
        ],
        notes=["openvino may be absent: the policy allows it"],
        required_targets=["onnx", "torchscript"],
        required_devices=["cpu", "cuda"],
        budgets=[
            BudgetResult(
                artifact="onnx",
                kind="accuracy",
                metric="cosine",
                limit=">=0.999",
                value=0.99999,
                output="output",
                runtime="onnxruntime",
                device="cpu",
                shape="d0=2",
                status="passed",
            ),
            BudgetResult(
                artifact="fp16",
                kind="accuracy",
                metric="cosine",
                limit=">=0.999",
                value=0.97,
                output="output",
                runtime="onnxruntime",
                device="cpu",
                shape="d0=2",
                status="failed",
                reason=TRICKY,
            ),
            BudgetResult(
                artifact="onnx",
                kind="latency",
                metric="latency_ms_p50",
                limit="<=5",
                runtime="onnxruntime",
                device="cuda",
                status="skipped",
                reason="not measured: no CUDA device",
            ),
        ],
        baseline=BaselineComparison(
            path="baseline/report.json",
            same_source=True,
            deltas=[
                BaselineDelta(
                    artifact="onnx",
                    kind="latency",
                    metric="latency_ms_p50",
                    runtime="onnxruntime",
                    device="cpu",
                    baseline=0.05,
                    current=0.07,
                    delta=0.02,
                    delta_pct=40.0,
                    allowed="+10% +0.005",
                    status="regressed",
                    reason=TRICKY,
                ),
                BaselineDelta(
                    artifact="onnx",
                    kind="size",
                    metric="size_bytes",
                    baseline=1000,
                    current=1000,
                    delta=0,
                    delta_pct=0,
                    allowed="+1%",
                    status="ok",
                ),
                BaselineDelta(
                    artifact="fp16",
                    kind="accuracy",
                    metric="max_abs_error",
                    output="output",
                    status="not_compared",
                    reason="the baseline has no fp16 artifact",
                ),
            ],
        ),
    )
    return report.model_copy(update={"gate": verdict})
