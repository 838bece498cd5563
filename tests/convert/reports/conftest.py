"""Reports rendered from real JSON reports: one from ``convert`` (no gate section) and gated ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.fixture(scope="session")
def exported_report(torch_files, tmp_path_factory) -> Path:
    """report.json of the cnn fixture to onnx and torchscript, an fp16 pass, three batch sizes, with benchmarks."""
    out = tmp_path_factory.mktemp("rendered")
    done = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx,torchscript", "--optimize", "fp16", "--benchmark",
                   "--dim", "d0=2,1,4", "--out", str(out), "-q")
    assert done.returncode == 0, done.output
    return out / "report.json"


@pytest.fixture(scope="session")
def failed_report(tmp_path_factory) -> Path:
    """report.json of the off_in_onnx negative fixture: its ONNX checks fail on 'scores', its torch.export ones pass.

    Built from the factory, not from off_in_onnx.pt2: a saved torch.export program was traced outside an ONNX export,
    so its ONNX export comes out right."""
    out = tmp_path_factory.mktemp("failed")
    done = run_cli("fixtures.torch_models:build_off_in_onnx", "--input", "x:float32[B,8]", "--to", "onnx,torch_export",
                   "--out", str(out), "-q")
    assert done.returncode == 1, done.output
    return out / "report.json"


@pytest.fixture(scope="session")
def rejected_gate_report(torch_files, exported_report, tmp_path_factory) -> Path:
    """report.json of a real `convert gate` that rejects the cnn fixture for several reasons: a required check
    skipped (the traced TorchScript fixes its batch), TensorRT not built, an fp16 throughput budget missed, with
    budgets that pass, an absent device the policy may skip, and deltas against ``exported_report`` as baseline."""
    folder = tmp_path_factory.mktemp("gated")
    policy = folder / "promotion.yaml"
    policy.write_text(f"""
model: {{path: "{torch_files / 'cnn.pt2'}"}}
require:
  targets: [onnx, torchscript]
  optimizations: [fp16, trt]
  devices: [cpu, cuda]
  may_skip_devices: [cuda]
validation: {{dims: ["d0=2,1,4"]}}
budgets:
  onnx: {{accuracy: "max_abs<=1e-3", latency_ms_p50: 1000, size_mb: 10}}
  fp16: {{throughput_per_s: 1.0e+12}}
baseline: {{allowance: {{latency: 100}}}}
out: out
""")
    done = run_cli("gate", str(policy), "--baseline", str(exported_report), "-q")
    assert done.returncode == 1, done.output
    return folder / "out" / "report.json"
