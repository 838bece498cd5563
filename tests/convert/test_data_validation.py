"""Real data through the pipeline: classifiers trained here on learnable synthetic data are validated on their held-out
samples in every dataset form, judged by the drop of their task metrics, and quantized with accuracy control."""

from __future__ import annotations

from pathlib import Path

import pytest

from convert.reports.junit import render_junit
from convert.reports.model import Report
from fixtures.data_models import (
    IMAGE_MEAN,
    IMAGE_STD,
    write_image_classifier,
    write_image_datasets,
    write_text_classifier,
    write_text_dataset,
)
from tests.conftest import detail, load_report, run_cli

PREPROCESS = f"mean={','.join(map(str, IMAGE_MEAN))};std={','.join(map(str, IMAGE_STD))}"


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("data_models")
    return {
        "classifier": write_image_classifier(folder),
        "sensitive": write_image_classifier(folder, sensitive=True),
        **write_image_datasets(folder / "images_data"),
        "text_model": write_text_classifier(folder / "text_model"),
        "text": write_text_dataset(folder / "text_data"),
    }


def _task(artifact: dict) -> dict[str, dict]:
    """The task metrics of an artifact's CPU check on the data, by name."""
    check = next(c for c in artifact["checks"] if c["shape"] == "data" and c["device"] == "cpu")
    return {m["name"]: m for m in check["task"]["metrics"]}


def test_accuracy_control_meets_a_drop_budget_that_plain_int8_misses(made, tmp_path):
    """Accuracy control meets the budget by putting layers back in FP32; on this small sensitive CNN it puts back most
    of its multiply-accumulates, so each INT8 artifact fails its precision claim by default, and passes where
    --min-precision-share accepts any share."""
    out, working = tmp_path / "out", tmp_path / "working"
    working.mkdir()
    metric = tmp_path / "metric.py"
    metric.write_text(
        "import numpy as np\n"
        "def balanced_accuracy(outputs, labels):\n"
        "    predicted = np.concatenate([o['output'].argmax(-1) for o in outputs])\n"
        "    truth = np.concatenate(labels)\n"
        "    return float(np.mean([(predicted[truth == c] == c).mean() for c in np.unique(truth)]))\n"
    )
    args = [
        str(made["sensitive"]),
        "--to",
        "onnx",
        "--optimize",
        "int8,openvino:int8",
        "--data",
        str(made["images"]),
        "--preprocess",
        PREPROCESS,
        "--calibration-data",
        str(made["npz_folder"]),
        "--data-samples",
        "128",
        "--metric",
        f"{metric}:balanced_accuracy",
        "--trust-code",
        "--accuracy",
        "task_top1_drop<=2%",
    ]
    strict = run_cli(*args, "--out", str(tmp_path / "strict"), cwd=working)
    assert strict.returncode == 1, strict.output
    judged = {a["optimization"]: detail(a, "precision") for a in load_report(tmp_path / "strict" / "report.json")["artifacts"]}
    for name, fp32_at_least in (("int8", 0.99), ("openvino:int8", 0.5)):
        assert judged[name]["status"] == "failed" and judged[name]["compute"]["fp32"] > fp32_at_least, judged[name]
        assert f"error: the {name} artifact computes " in strict.output and "below the 50% its int8 claim needs" in strict.output
    run = run_cli(*args, "--min-precision-share", "0", "--out", str(out), cwd=working)
    assert run.returncode == 0, run.output
    assert not any(working.iterdir())  # ONNX Runtime's shape inference leaves nothing in the working folder
    report = load_report(out / "report.json")
    validation, calibration = report["data"]
    assert (validation["role"], validation["kind"], validation["size"], len(validation["used"])) == ("validation", "image-folder", 256, 128)
    assert "4 classes" in validation["detail"] and (calibration["role"], calibration["kind"]) == ("calibration", "npz-folder")
    assert validation["source_task"]["top1"] > 0.9  # the model learnt its task: accuracy means something
    artifacts = {a["optimization"] or a["format"]: a for a in report["artifacts"]}
    onnx_task = _task(artifacts["onnx"])
    assert set(onnx_task) == {"top1", "metric"} and abs(onnx_task["top1"]["drop"]) < 1e-9  # fp32 loses nothing
    assert 0.9 < onnx_task["metric"]["source"] <= 1 and onnx_task["metric"]["status"] == "not-budgeted"
    for name, method in (("int8", "ONNX Runtime"), ("openvino:int8", "NNCF")):
        control = detail(artifacts[name], "accuracy_control")
        assert control["method"].startswith(method) and control["status"] == "met", control
        assert control["plain_drop"] > 0.05 and control["drop"] <= 0.02 and control["kept_fp32"]
        top1 = _task(artifacts[name])["top1"]
        assert top1["drop"] <= 0.02 and top1["status"] == "passed" and top1["budget"] == 0.02
        assert f"{name}: {control['method']}: kept" in run.stdout
    assert "task int8 onnxruntime cpu passed top1" in run.stdout
    control = detail(artifacts["int8"], "accuracy_control")
    assert control["kept_fp32"][0] in control["reason"]
    xml = render_junit(Report.from_json((out / "report.json").read_text()))  # a test case per task metric
    assert 'classname="convert.int8.task" name="top1 on onnxruntime on cpu"' in xml


def test_a_text_classifier_validates_on_a_datasets_folder_of_varying_lengths(made, tmp_path):
    out = tmp_path / "out"
    run = run_cli(
        str(made["text_model"]),
        "--to",
        "onnx",
        "--optimize",
        "int8-dynamic",
        "--data",
        str(made["text"]),
        "--columns",
        "input_ids=tokens,attention_mask=mask",
        "--columns",
        "label=target",
        "--accuracy",
        "task_top1_drop<=2%",
        "--out",
        str(out),
    )
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    data = report["data"][0]
    assert data["kind"] == "hf-datasets" and data["size"] == 128 and "input_ids←tokens" in data["detail"]
    artifacts = {a["optimization"] or a["format"]: a for a in report["artifacts"]}
    task = _task(artifacts["int8-dynamic"])["top1"]
    assert task["source"] > 0.9 and task["drop"] <= 0.02 and task["status"] == "passed"
    check = next(c for c in artifacts["onnx"]["checks"] if c["shape"] == "data" and c["device"] == "cpu")
    assert check["status"] == "passed" and check["samples"] == 128


@pytest.mark.parametrize(
    "args, message",
    [
        (["--accuracy", "task_top1_drop<=1%"], "no --data gives labelled samples"),
        (["--data", "samples.npz", "--metric", "metric.py:f"], "needs --trust-code"),
        (["--data", "samples.npz", "--data-samples", "0"], "--data-samples must be at least 1"),
    ],
)
def test_data_options_that_cannot_work_are_refused_before_any_work(made, tmp_path, args, message):
    run = run_cli(str(made["classifier"]), "--to", "onnx", *args, "--out", str(tmp_path / "out"), cwd=made["npz"].parent)
    assert run.returncode == 2 and message in run.stderr and "Traceback" not in run.output
    assert not (tmp_path / "out").exists()
