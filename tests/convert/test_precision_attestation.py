"""What each artifact computes in, measured from the artifact and its runtime, on a BERT folder made by transformers'
own classes: the multiply-accumulates counted from the graph equal those derived from the model's config, each pass's
shares follow from which products it quantizes, and an INT8 artifact that leaves most of them in FP32 fails its claim
(in the report, the terminal, JUnit and the gate)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from convert.gate.judge import judge
from convert.policy import Policy
from convert.reports.junit import render_junit
from convert.reports.model import Report
from fixtures.transformers_folders import write_folder
from tests.conftest import detail, load_report, run_cli


def _config_macs(config: dict, batch: int, length: int) -> dict[str, int]:
    """A BertForMaskedLM's multiply-accumulates by kind, from its config: the projections and feed-forward of each layer
    and the head's transform (weights), the vocabulary projection (the head's decoder, tied to the embeddings), and
    attention's scores and context (both operands computed)."""
    hidden, inner, layers, vocab = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"], config["vocab_size"]
    tokens = batch * length
    return {
        "layers": tokens * (layers * (4 * hidden * hidden + 2 * hidden * inner) + hidden * hidden),
        "decoder": tokens * hidden * vocab,
        "attention": batch * layers * 2 * length * length * hidden,
    }


def test_a_bert_folders_artifacts_compute_in_what_their_passes_quantized(tmp_path):
    folder = write_folder("bert", tmp_path / "bert")
    config = json.loads((folder / "config.json").read_text())
    out = tmp_path / "out"
    run = run_cli(str(folder), "--to", "onnx", "--optimize", "int8,int8-dynamic,openvino:int8,fp16", "--out", str(out))
    assert run.returncode == 1, run.output  # int8-dynamic fails its claim, below
    report = load_report(out / "report.json")
    attested = {a["optimization"] or a["format"]: detail(a, "precision") for a in report["artifacts"]}
    shape = dict(part.split("=") for part in attested["onnx"]["shape"].split(","))
    macs = _config_macs(config, int(shape["B"]), int(shape["S"]))
    total = sum(macs.values())
    for name, found in attested.items():
        assert found["macs"] == total and found["products"] == 6 * 2 + 2 * 2 + 2 and found["unsized"] == 0, (name, found)

    assert attested["onnx"]["status"] == "measured" and attested["onnx"]["compute"] == {"fp32": 1.0}
    # static QDQ quantizes every product, attention's included; OpenVINO's compiled model runs them in INT8 too
    for name in ("int8", "openvino:int8"):
        assert attested[name]["status"] == "passed" and attested[name]["compute"] == {"int8": 1.0}, attested[name]
        assert attested[name]["runtime_compute"] == {"int8": 1.0}
    # ONNX Runtime's dynamic quantizer computes in INT8 a MatMul whose weight is an initializer: not the vocabulary
    # projection, which reads the embeddings' tied weight (stored in INT8 for the Gather) dequantized through a
    # Transpose and multiplies in FP32, nor attention, which has no weight
    dynamic = attested["int8-dynamic"]
    assert dynamic["status"] == "failed" and dynamic["threshold"] == 0.5
    assert dynamic["compute"]["int8"] == pytest.approx(macs["layers"] / total)
    assert dynamic["compute"]["fp32"] == pytest.approx((macs["decoder"] + macs["attention"]) / total)
    assert dynamic["weights"] == {"int8": 1.0}
    int8_dynamic = next(a for a in report["artifacts"] if a["optimization"] == "int8-dynamic")
    assert int8_dynamic["passed"] is False and "/failed/" in int8_dynamic["path"]
    assert all(c["status"] == "passed" for c in int8_dynamic["checks"] if c["device"] == "cpu")  # its values are right
    assert "error: the int8-dynamic artifact computes " in run.output and "below the 50% its int8 claim needs" in run.output
    # an FP16 graph, which ONNX Runtime's CPU provider computes in FP32 (it has no FP16 MatMul)
    fp16 = attested["fp16"]
    assert fp16["status"] == "passed" and fp16["compute"] == {"fp16": 1.0} and fp16["runtime_compute"] == {"fp32": 1.0}
    assert "no MatMul kernel of this type" in fp16["runtime_note"]

    xml = ET.fromstring(render_junit(Report.from_json((out / "report.json").read_text())))
    cases = {case.get("classname"): case for case in xml.iter("testcase") if case.get("classname").endswith(".precision")}
    assert set(cases) == {f"convert.{name}.precision" for name in ("int8", "int8-dynamic", "openvino:int8", "fp16")}
    assert cases["convert.int8-dynamic.precision"].find("failure").get("type") == "PrecisionNotAttested"
    assert cases["convert.int8.precision"].find("failure") is None
    policy = Policy.model_validate({"model": {"path": str(folder)}, "require": {"targets": ["onnx"], "optimizations": ["int8-dynamic"]}})
    reasons = judge(Report.from_json((out / "report.json").read_text()), policy).reasons
    assert [r.artifact for r in reasons if r.code == "precision"] == ["int8-dynamic"]


def test_the_threshold_accepts_what_it_is_told_to(tmp_path):
    folder = write_folder("bert", tmp_path / "bert")
    out = tmp_path / "out"
    run = run_cli(str(folder), "--to", "onnx", "--optimize", "int8-dynamic", "--min-precision-share", "0.3", "--out", str(out))
    assert run.returncode == 0, run.output
    (artifact,) = [a for a in load_report(out / "report.json")["artifacts"] if a["optimization"]]
    attested = detail(artifact, "precision")
    assert attested["status"] == "passed" and attested["threshold"] == 0.3 and 0.3 < attested["attested_share"] < 0.5
    assert "--min-precision-share 0.3" in artifact["reproduce"]


def test_a_tflite_model_is_sized_as_its_onnx_twin_and_a_dynamic_range_one_computes_in_int8(tmp_path):
    """The same Keras model through the TFLite converter and tf2onnx: two readers of two formats count the same
    multiply-accumulates; TensorFlow's dynamic-range quantization (INT8 weights, hybrid kernels) reads as INT8."""
    import tensorflow as tf

    from convert.backends.tf import tflite_precision
    from convert.precision import shares
    from fixtures.keras_models import build_bn_dropout

    out = tmp_path / "out"
    run = run_cli("fixtures.keras_models:build_bn_dropout", "--framework", "keras", "--to", "tflite,onnx", "--out", str(out))
    assert run.returncode == 0, run.output
    attested = {a["format"]: detail(a, "precision") for a in load_report(out / "report.json")["artifacts"]}
    assert attested["tflite"]["macs"] == attested["onnx"]["macs"] > 0 and attested["tflite"]["shape"] == attested["onnx"]["shape"]
    assert attested["tflite"]["status"] == "measured" and attested["tflite"]["compute"] == {"fp32": 1.0}

    converter = tf.lite.TFLiteConverter.from_keras_model(build_bn_dropout())
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    (tmp_path / "dynamic.tflite").write_bytes(converter.convert())
    batch = int(attested["onnx"]["shape"].split("=")[1])
    measured = tflite_precision(tmp_path / "dynamic.tflite", {"image": [batch, 16, 16, 3]})
    # the converter quantizes a weight of 1024 elements or more: the second convolution's (16x3x3x8), not the first's
    # (8x3x3x3) nor the head's (4x16); its hybrid kernel quantizes its float input as it runs
    assert [(p.op, p.compute, p.weights) for p in measured.products] == [
        ("CONV_2D", "fp32", "fp32"),
        ("CONV_2D", "int8", "int8"),
        ("FULLY_CONNECTED", "fp32", "fp32"),
    ]
    assert sum(p.macs for p in measured.products) == attested["onnx"]["macs"]
    assert shares(measured.products, "compute") == shares(measured.products, "weights")


def test_an_executorch_program_is_read_from_its_xnnpack_graphs_at_the_bounds_it_planned(tmp_path):
    """A .pte's XNNPACK payload, decoded with XNNPACK's schema, counts BERT's products as its config gives them, at the
    dims the program stores (each dynamic one at its bound); the PT2E INT8 pass's CNN computes every product in INT8."""
    folder = write_folder("bert", tmp_path / "bert")
    config = json.loads((folder / "config.json").read_text())
    run = run_cli(str(folder), "--to", "executorch", "--out", str(tmp_path / "bert-out"))
    assert run.returncode == 0, run.output
    (program,) = load_report(tmp_path / "bert-out" / "report.json")["artifacts"]
    attested = detail(program, "precision")
    (_, batch), (_, length) = program["dim_bounds"]["B"], program["dim_bounds"]["S"]
    assert attested["macs"] == sum(_config_macs(config, batch, length).values()) and attested["products"] == 6 * 2 + 2 * 2 + 2
    assert attested["status"] == "measured" and attested["compute"] == attested["weights"] == {"fp32": 1.0}
    assert attested["shape"].startswith("the dims the program's graphs store")

    out = tmp_path / "cnn-out"
    run = run_cli(
        "fixtures.torch_models:build_cnn", "--trust-code", "--input", "x:float32[B,3,32,32]", "--to", "executorch", "--optimize",
        "executorch:int8", "--out", str(out),
    )  # fmt: skip
    assert run.returncode == 0, run.output
    attested = {a["optimization"] or a["format"]: detail(a, "precision") for a in load_report(out / "report.json")["artifacts"]}
    quantized = attested["executorch:int8"]
    assert quantized["status"] == "passed" and quantized["compute"] == quantized["weights"] == {"int8": 1.0}
    assert quantized["macs"] == attested["executorch"]["macs"] and quantized["products"] == 3
    per_image = 32 * 32 * 16 * 3 * 3 * 3 + 16 * 16 * 32 * 3 * 3 * 16 + 32 * 10  # two convolutions and the head
    assert quantized["macs"] % per_image == 0 and 1 <= quantized["macs"] // per_image <= 64
