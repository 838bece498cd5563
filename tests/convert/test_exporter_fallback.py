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


class DataDependentAndOffWhileExported(DataDependentBranch):
    """Taken by the TorchScript-based exporter only, and computing otherwise while it exports."""

    def forward(self, x):
        y = super().forward(x)
        return y * 1.1 if torch.onnx.is_in_onnx_export() else y


def test_a_failing_graph_of_the_torchscript_based_exporter_says_why_it_is_not_traced(tmp_path):
    result = convert.convert(DataDependentAndOffWhileExported(), inputs=["x:float32[B,4]"], to=["onnx"], out=tmp_path)
    (record,) = result.report.artifacts
    assert record.strategy == "torch.onnx.export(dynamo=False)" and not record.passed
    divergence = record.detail("divergence")
    assert divergence.status == "skipped"
    assert divergence.reason == "the graph torch.onnx.export(dynamo=False) wrote keeps no names of the source's values"
