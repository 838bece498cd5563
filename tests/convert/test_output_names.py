"""An output named like an input (a diffusers UNet takes ``sample`` and returns ``sample``) is ``out_sample`` in an ONNX
graph, whose inputs and outputs share one namespace, with a note in the report; the input keeps its name, the source
its output's, and validation compares the graph's ``out_sample`` with the source's ``sample``."""

from __future__ import annotations

import numpy as np
import onnx

import convert
from convert.backends.onnx import outputs_apart
from convert.exporters.base import ExportJob
from convert.exporters.onnx import TorchToOnnx
from convert.runtimes.onnxruntime import OnnxRuntimeRunner

UNET_MODULE = """
import torch


class Denoiser(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, sample):
        return {"sample": self.conv(sample) + sample}


def build():
    torch.manual_seed(0)
    return Denoiser().eval()
"""
INPUTS = ["sample:float32[B,4,H,W]"]


def test_outputs_are_kept_apart_from_inputs():
    assert outputs_apart(("sample", "noise"), ("sample", "t")) == {"sample": "out_sample"}
    assert outputs_apart(("sample", "out_sample"), ("sample",)) == {"sample": "out_out_sample"}
    assert outputs_apart(("noise",), ("sample",)) == {}


def test_an_output_named_like_its_input_is_renamed_in_the_onnx_graph_and_every_artifact_passes(tmp_path):
    (tmp_path / "denoiser.py").write_text(UNET_MODULE)
    result = convert.convert(
        f"{tmp_path / 'denoiser.py'}:build", inputs=INPUTS, to=["onnx", "torchscript", "torch_export"], out=tmp_path / "out"
    )
    report = result.report
    assert result.passed, [c.reason for a in report.artifacts for c in a.checks]
    assert report.source.outputs == ["sample"]
    for record in report.artifacts:
        assert {o.name for c in record.checks for o in c.outputs} == {"sample"}
    (onnx_record,) = [a for a in report.artifacts if a.format == "onnx"]
    assert "the output 'sample' is 'out_sample' in the graph, apart from the input 'sample'" in onnx_record.attempts[-1].note
    graph = onnx.load(str(result.artifacts["onnx"].path)).graph
    assert [v.name for v in graph.input] == ["sample"] and [v.name for v in graph.output] == ["out_sample"]


def test_every_onnx_strategy_keeps_the_input_s_name_and_the_specs_dim_names(tmp_path):
    """torch.onnx's dynamo exporter refused a graph whose output is named like its input (not SSA), and the
    TorchScript-based one renamed the input (sample.1). The graph declares the specs' dims by their names (the
    decomposed program's export wrote torch's s53, s30, s91); an output dim the TorchScript-based exporter named
    after itself where no input has it (Addout_sample_dim_2) keeps that name."""
    from convert.validators import generate_feed

    (tmp_path / "denoiser.py").write_text(UNET_MODULE)
    source = convert.load(f"{tmp_path / 'denoiser.py'}:build", inputs=INPUTS)
    feed = generate_feed(source.signature.inputs, {"B": 2, "H": 5, "W": 6}, 0, 0)
    reference = source.run(feed)
    assert list(reference) == ["sample"]
    source.with_outputs(tuple(reference))
    for number, (strategy, run) in enumerate(TorchToOnnx().strategies(ExportJob(source, feed, tmp_path, "denoiser"))):
        artifact = run(tmp_path / f"denoiser{number}.onnx")
        graph = onnx.load(str(artifact.path)).graph
        dims = [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in [*graph.input, *graph.output]]
        assert dims[0] == ["B", 4, "H", "W"] and dims[1][:2] == ["B", 4], (strategy, dims)
        if number < 2:
            assert dims[1] == ["B", 4, "H", "W"], (strategy, dims)
        with OnnxRuntimeRunner(artifact, "cpu") as runner:
            assert list(runner.input_metadata()) == ["sample"], strategy
            assert np.allclose(runner.infer(feed)["out_sample"], reference["sample"], atol=1e-5), strategy
