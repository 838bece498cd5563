"""Where a failing artifact first diverges: a fault injected into one node of a real export (an op replaced, a wrong
constant, swapped operands) is named, with its source layer, and its reproducer shows the mismatch on its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import convert
from convert.checks import localize
from convert.reports import model as rm
from convert.reports.html import render_html
from convert.reports.junit import render_junit


def _inject(monkeypatch, exporter_class, method: str, fault) -> dict:
    """Wrap one export strategy so that its ONNX file gets ``fault(model) -> injected node name`` before validation."""
    injected: dict = {}
    real = getattr(exporter_class, method)

    def faulty(self, job, path):
        artifact = real(self, job, path)
        model = onnx.load(str(path))
        injected["node"] = fault(model)
        onnx.save(model, str(path))
        return artifact

    monkeypatch.setattr(exporter_class, method, faulty)
    return injected


def _node(model, predicate):
    return next(node for node in model.graph.node if predicate(node))


def _run(tmp_path: Path, model, **options):
    result = convert.convert(model, to=["onnx"], out=tmp_path / "out", isolate=False, cache=False, **options)
    (record,) = result.report.artifacts
    assert result.exit_code == 1 and not record.passed
    return result, record


def test_an_op_replaced_in_a_torch_export_is_named_with_its_module_and_reproduced(tmp_path, monkeypatch):
    from convert.exporters.onnx import TorchToOnnx

    def relu_becomes_sigmoid(model):
        node = _node(model, lambda n: n.op_type == "Relu")
        node.op_type = "Sigmoid"
        return node.name

    injected = _inject(monkeypatch, TorchToOnnx, "_dynamo", relu_becomes_sigmoid)
    result, record = _run(tmp_path, "fixtures.torch_models:build_cnn", inputs=["x:float32[B,3,32,32]"])
    found = record.detail(rm.Divergence)
    assert found.status == "found", found.reason
    assert (found.node, found.op_type, found.region) == (injected["node"], "Sigmoid", [injected["node"]])
    assert found.layer == "features.2 (ReLU)"
    assert found.inputs_within == ["getitem"]  # the convolution (with its BatchNorm folded in) before it matched
    assert [p.status for p in found.probes][:2] == ["passed", "failed"]
    assert found.metrics.status == "failed" and found.metrics.max_abs_error > 0.1
    assert f"first diverged at node {injected['node']} (Sigmoid) in layer features.2 (ReLU)" in render_junit(result.report)
    # the chain puts the fault at the link it was put in: the captured program agrees with the source, the graph does not
    capture, conversion = record.detail(rm.ChainLinks).links
    assert (capture.link, capture.within_tolerance, capture.max_abs_error) == ("capture", True, 0.0)
    assert (conversion.link, conversion.within_tolerance) == ("conversion", False) and conversion.max_abs_error > 0.01
    page = render_html(result.report)  # the error along the graph: a point per compared value, the divergent one red
    chart = page[page.index('data-chart="divergence"') :]
    assert chart[: chart.index("</svg>")].count("<circle") == len(found.probes)

    script = Path(found.reproducer) / localize.REPRODUCER_SCRIPT
    shown = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1 and "out of tolerance" in shown.stdout
    # the same subgraph with the op the source has is within tolerance: the reproducer isolates the fault
    subgraph = onnx.load(str(script.parent / "subgraph.onnx"))
    subgraph.graph.node[0].op_type = "Relu"
    onnx.save(subgraph, str(script.parent / "subgraph.onnx"))
    fixed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert fixed.returncode == 0 and "within tolerance" in fixed.stdout


def test_a_wrong_constant_in_a_transformer_is_found_in_bounded_chunks(tmp_path, monkeypatch):
    from convert.exporters.onnx import TorchToOnnx

    def scaled_weight(model):
        node = _node(model, lambda n: n.op_type in ("MatMul", "Gemm") and "layers.1.linear1" in str(n.metadata_props))
        weight = next(t for t in model.graph.initializer if t.name == node.input[1])
        weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.5), weight.name))
        return node.name

    injected = _inject(monkeypatch, TorchToOnnx, "_dynamo", scaled_weight)
    monkeypatch.setattr(localize, "CHUNK_BYTES", 4096)  # a few values a run: the search goes on chunk by chunk
    _, record = _run(tmp_path, "fixtures.torch_models:build_transformer", inputs=["x:float32[B,S,32]"])
    found = record.detail(rm.Divergence)
    assert found.status == "found", found.reason
    # torch.onnx writes a Linear as MatMul + Add under one program node: both are the region, the MatMul first
    assert found.region == [injected["node"], found.node] and found.op_type == "Add"
    assert found.layer == "encoder.layers.1.linear1 (Linear)"
    assert found.chunks > 3 and all(p.status == "passed" for p in found.probes[:-1][: found.compared - 1])
    assert found.probes[-1].value == found.value  # the search stopped at the chunk where it diverged


def test_swapped_operands_in_a_keras_export_are_named_with_their_layer(tmp_path, monkeypatch):
    from convert.exporters.keras_onnx import KerasToOnnx

    def swapped_concat(model):
        node = _node(model, lambda n: n.op_type == "Concat" and "concatenate" in n.name)
        node.input[0], node.input[1] = node.input[1], node.input[0]
        return node.name

    injected = _inject(monkeypatch, KerasToOnnx, "_tf2onnx", swapped_concat)
    _, record = _run(tmp_path, "fixtures.keras_models:build_two_io", framework="keras")
    found = record.detail(rm.Divergence)
    assert found.status == "found", found.reason
    # Keras numbers a layer name already taken in the process (concatenate_2): the layer is the model's own, unambiguous
    assert (found.node, found.op_type) == (injected["node"], "Concat") and found.layer.startswith("concatenate")
    # a scope TensorFlow suffixed (the layer 'dense' runs under 'dense_1') is told by the weights it reads
    assert found.probes and all(" or " not in p.layer for p in found.probes)
    assert len(found.inputs_within) == 2 and "TensorFlow" in found.method


def test_a_wrong_constant_in_a_jax_export_is_named_by_its_source_line(tmp_path, monkeypatch):
    import inspect

    from convert.exporters.jax_onnx import JaxToOnnx
    from fixtures.jax_models import NnxCnn

    def scaled_second_conv(model):
        node = [n for n in model.graph.node if n.op_type == "Conv"][1]
        weight = next(t for t in model.graph.initializer if t.name == node.input[1])
        weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.5), weight.name))
        return node.name

    injected = _inject(monkeypatch, JaxToOnnx, "_jax2onnx", scaled_second_conv)
    _, record = _run(tmp_path, "fixtures.jax_models:make_nnx_cnn", framework="jax", inputs=["x:float32[B,28,28,1]"])
    found = record.detail(rm.Divergence)
    lines, first = inspect.getsourcelines(NnxCnn.__call__)
    line = first + next(i for i, text in enumerate(lines) if "self.conv2(x)" in text)
    assert found.status == "found", found.reason
    assert found.layer == f"NnxCnn.__call__, line {line}" and injected["node"] in found.region
    # the results of the lines before it (channels-first in the graph, channels-last in JAX) matched
    assert [p.status for p in found.probes[:3]] == ["passed", "passed", "failed"]
    script = Path(found.reproducer) / localize.REPRODUCER_SCRIPT  # its input given in the graph's layout
    shown = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1 and "out of tolerance" in shown.stdout, shown.stdout + shown.stderr


def test_the_layer_with_an_outlier_channel_is_the_most_sensitive_and_keeping_it_in_fp32_meets_the_budget(tmp_path):
    plain = convert.convert(
        "fixtures.torch_models:build_outlier_mlp",
        inputs=["x:float32[B,16]"],
        optimize=["int8-dynamic"],
        out=tmp_path / "plain",
        isolate=False,
        cache=False,
    )
    int8 = next(a for a in plain.report.artifacts if a.optimization == "int8-dynamic")
    assert plain.exit_code == 1 and not int8.passed, "plain INT8 misses the default budget"
    # the exported graph's links hold; the pass's link makes the difference (its budget is judged over every sample and
    # shape: on the chain's one sample it may still be within)
    links = int8.detail(rm.ChainLinks).links
    assert [(link.link, link.step) for link in links] == [
        ("capture", "torch.onnx.export(dynamo=True)"),
        ("conversion", "torch.onnx.export(dynamo=True)"),
        ("optimization", "int8-dynamic"),
    ]
    assert links[0].within_tolerance and links[1].within_tolerance
    assert links[2].max_abs_error > 1000 * links[1].max_abs_error
    ranked = int8.detail(rm.Sensitivity)
    assert ranked.status == "found" and [row.layer for row in ranked.rows][0] == "middle"
    assert ranked.rows[0].rel_rms_error > 2 * ranked.rows[1].rel_rms_error
    assert ranked.keep == [ranked.rows[0].node] and ranked.suggestion == f"--optimize int8-dynamic --keep-fp32 {ranked.rows[0].node}"
    assert all(o.status == "passed" for o in ranked.outputs)

    kept = convert.convert(
        "fixtures.torch_models:build_outlier_mlp",
        inputs=["x:float32[B,16]"],
        optimize=["int8-dynamic"],
        keep_fp32=["middle"],  # by module path
        # the middle layer is 4096 of the 5632 multiply-accumulates a row: kept in FP32, 27% are left in INT8, which
        # the default share (50%) would fail as no INT8 model
        min_precision_share=0.25,
        out=tmp_path / "kept",
        isolate=False,
        cache=False,
    )
    int8 = next(a for a in kept.report.artifacts if a.optimization == "int8-dynamic")
    assert kept.exit_code == 0 and int8.passed and [d.kind for d in int8.details] == ["precision", "chain"]
    assert all(link.within_tolerance for link in int8.detail(rm.ChainLinks).links)
    attested = int8.detail(rm.PrecisionAttestation)
    assert attested.status == "passed" and attested.attested_share == pytest.approx((1024 + 512) / (1024 + 4096 + 512))


def test_an_openvino_int8_ir_is_traced_along_the_onnx_graph_it_came_from(tmp_path):
    result = convert.convert(
        "fixtures.torch_models:build_outlier_mlp",
        inputs=["x:float32[B,16]"],
        optimize=["openvino:int8"],
        accuracy=["cosine>=0.99999"],  # stricter than NNCF's INT8 can be: the first quantized layer already misses it
        out=tmp_path / "out",
        isolate=False,
        cache=False,
    )
    record = next(a for a in result.report.artifacts if a.optimization == "openvino:int8")
    found = record.detail(rm.Divergence)
    assert result.exit_code == 1 and found.status == "found", found.reason
    assert (found.op_type, found.layer, found.runtime) == ("Gemm", "first (Linear)", "openvino")
    assert found.reproducer == "" and record.detail(rm.Sensitivity).status == "skipped"


def test_a_localisation_that_fails_is_reported_and_the_run_goes_on(tmp_path, monkeypatch):
    from convert.backends.torch import TracedProgram

    def fake_outputs_that_raise(self, feed):  # a fake, for this tool's own error handling
        raise RuntimeError("capture broke\nline two of its traceback")

    monkeypatch.setattr(TracedProgram, "outputs", fake_outputs_that_raise)
    result, record = _run(tmp_path, "fixtures.torch_models:build_off_in_onnx", inputs=["x:float32[B,8]"])
    capture, conversion = record.detail(rm.ChainLinks).links  # the chain says so too, and measures nothing it cannot
    assert capture.status == conversion.status == "skipped"
    assert capture.reason == "running the captured program failed: RuntimeError: capture broke"
    assert record.detail(rm.Divergence).status == "skipped"
    assert record.detail(rm.Divergence).reason == "localisation failed: RuntimeError: capture broke"
    stage = next(s for s in result.report.stages if s.name == "localize:onnx")
    assert stage.status == "skipped" and "line two of its traceback" in stage.reason


def test_values_tf2onnx_made_channels_first_in_a_keras_applications_model_are_compared_in_that_layout(tmp_path):
    # a tolerance below float32 noise fails the model: the values named must show that noise, not a layout mismatch
    # (MobileNetV2 at 32x32 has [B,16,16,16] values, the same shape channels-last and channels-first)
    _, record = _run(tmp_path, "fixtures.keras_models:build_mobilenet", framework="keras", tolerance=["atol=1e-7,rtol=0"])
    found = record.detail(rm.Divergence)
    assert found.status == "found", found.reason
    assert found.metrics.max_abs_error < 1e-5  # read the other way, that value was off by 6 (cosine 0.38)
    assert found.compared > 1 and all(p.cosine_similarity > 0.9999 for p in found.probes)
    script = Path(found.reproducer) / localize.REPRODUCER_SCRIPT
    shown = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 1 and "max abs error" in shown.stdout
