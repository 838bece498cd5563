"""An artifact that fixes a dim the user asked dynamic is not a pass unless fixed shapes are allowed; exporters try
to keep every dim first (flax linen pooling called by position goes through jax2onnx with its batch kept)."""

from __future__ import annotations

import numpy as np

import convert
from convert.specs import parse_input_specs
from tests.conftest import REPO, load_report, run_cli


def test_a_linen_cnn_with_max_pool_by_position_keeps_its_batch_through_jax2onnx(tmp_path):
    """jax2onnx 0.17's flax.linen max_pool patch took window_shape by keyword only: nn.max_pool(x, (2, 2), ...) failed
    there, and only a route fixed at the export shape was left."""
    import flax.linen as nn
    import jax

    class Cnn(nn.Module):
        @nn.compact
        def __call__(self, x):
            x = nn.relu(nn.Conv(4, (3, 3))(x))
            x = nn.max_pool(x, (2, 2), strides=(2, 2))
            x = nn.avg_pool(x, (2, 2), (2, 2), "SAME")
            return nn.Dense(3)(x.reshape((x.shape[0], -1)))

    variables = Cnn().init(jax.random.PRNGKey(0), np.zeros((1, 8, 8, 1), np.float32))
    result = convert.convert(Cnn(), params=variables, inputs=["x:float32[B,8,8,1]"], to=["onnx"], out=tmp_path)
    record = result.report.artifacts[0]
    assert result.passed, [(c.shape, c.reason) for c in record.checks]
    assert record.strategy == "jax2onnx.to_onnx" and record.fixed_dims == []
    assert {c.shape for c in record.checks if c.status == "passed"} == {"B=2", "B=1", "B=5"}


# A module that branches on its batch: torch.export specializes B to the export size, so its program fixes B.
FIXED_BATCH = (str(REPO / "fixtures" / "torch_models.py") + ":branches_on_its_batch", "--input", "x:float32[B,6]")


def test_an_artifact_that_fixes_a_dim_asked_dynamic_fails_by_default(tmp_path):
    run = run_cli(*FIXED_BATCH, "--to", "torch_export", "--out", str(tmp_path))
    assert run.returncode == 1, run.output
    assert "fixes dim" in run.stderr and "--allow-fixed-shapes" in run.stderr and "Traceback" not in run.output
    report = load_report(tmp_path / "report.json")
    (symbol,) = parse_input_specs(report["source"]["inputs"])[0].symbols
    record = report["artifacts"][0]
    assert record["passed"] is False and record["fixed_dims"] == [symbol]
    cpu = [c for c in record["checks"] if c["device"] == "cpu"]
    assert cpu[0]["status"] == "passed"  # the export shape itself runs
    failed = [c for c in cpu if c["status"] == "failed"]
    assert len(failed) == len(cpu) - 1
    assert all(f"fixes dim {symbol} that was asked dynamic" in c["reason"] for c in failed)
    assert "/failed/" in record["path"] or "\\failed\\" in record["path"]


def test_fixed_shapes_are_accepted_when_asked_and_their_checks_are_skipped(tmp_path):
    run = run_cli(*FIXED_BATCH, "--to", "torch_export", "--allow-fixed-shapes", "--out", str(tmp_path))
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "report.json")
    record = report["artifacts"][0]
    assert report["options"]["allow_fixed_shapes"] is True and "--allow-fixed-shapes" in record["reproduce"]
    cpu = [c for c in record["checks"] if c["device"] == "cpu"]
    assert cpu[0]["status"] == "passed" and len(cpu) > 1
    assert all(c["status"] == "skipped" and "fixes axis 0" in c["reason"] for c in cpu[1:])


def test_a_program_that_computes_with_its_batch_scripts_to_torchscript_that_takes_every_size(tmp_path_factory, tmp_path):
    """A view to the batch size: torch.jit.trace of the program's module froze it (its sym_size reads hand the tracer
    plain ints); the program's own graph, scripted, keeps B, and is validated at every size."""
    import torch

    class SplitHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(6, 4)

        def forward(self, x):
            return torch.tanh(self.linear(x)).view(x.size(0), 2, 2)

    torch.manual_seed(0)
    module = SplitHeads().eval()
    path = tmp_path_factory.mktemp("pt2") / "heads.pt2"
    torch.export.save(
        torch.export.export(module, (torch.randn(3, 6),), dynamic_shapes=({0: torch.export.Dim("B")},), strict=False), str(path)
    )
    run = run_cli(str(path), "--to", "torchscript", "--out", str(tmp_path))
    assert run.returncode == 0, run.output
    record = load_report(tmp_path / "report.json")["artifacts"][0]
    cpu = [c for c in record["checks"] if c["device"] == "cpu"]
    assert record["strategy"] == "torch.jit.script (program graph)"
    assert record["fixed_dims"] == [] and len(cpu) >= 3 and all(c["status"] == "passed" for c in cpu)
