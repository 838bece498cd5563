"""When the torch.export-based ONNX exporters fail, the TorchScript-based one is tried and every attempt is recorded."""

import torch

import convert


class DataDependentBranch(torch.nn.Module):
    """torch.export cannot trace a branch on tensor values; the TorchScript-based exporter traces it."""

    def forward(self, x):
        if (x.abs() >= 0).all():  # always true, but data-dependent for torch.export
            return x * 2 + 1
        return x


def test_fallback_is_recorded_in_order(tmp_path):
    result = convert.convert(DataDependentBranch(), inputs=["x:float32[B,4]"], to=["onnx"], out=tmp_path)
    record = result.report.artifacts[0]
    assert [a.strategy for a in record.attempts] == [
        "torch.onnx.export(dynamo=True)",
        "torch.export.export, its default decompositions, then torch.onnx.export",
        "torch.onnx.export(dynamo=False)",
    ]
    assert [a.status for a in record.attempts] == ["failed", "failed", "ok"]
    assert record.attempts[0].error and record.attempts[1].error  # every error is kept
    assert record.strategy == "torch.onnx.export(dynamo=False)"
    assert result.passed
