"""A run that an error stops after it has written something leaves a report saying how far it got and why it stopped;
the gate's renderings and MLflow run are made under the output lock, before the report is final."""

from __future__ import annotations

import pytest
import torch

import convert
from convert.errors import ConvertError
from convert.pipeline import runner as pipeline_run
from convert.safety import LOCK_NAME
from tests.conftest import load_report


def _linear() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh()).eval()


@pytest.mark.parametrize(
    "raised, exit_code, said",
    [
        (ConvertError("the benchmark device went away", "Run it again."), 2, "the benchmark device went away"),
        (RuntimeError("a bug in the benchmark"), 3, "internal error: RuntimeError: a bug in the benchmark"),
    ],
)
def test_an_error_after_an_artifact_is_published_leaves_a_report(tmp_path, monkeypatch, raised, exit_code, said):
    """A stand-in for a stage that fails after the ONNX artifact is published (a TensorRT pass, a benchmark): it raises
    where the benchmark would run."""

    def benchmark_that_raises(*args, **kwargs):
        raise raised

    monkeypatch.setattr(pipeline_run, "benchmark", benchmark_that_raises)
    with pytest.raises(type(raised)):
        convert.convert(_linear(), inputs=["input:float32[B,8]"], to=["onnx"], benchmark=True, out=tmp_path, cache=False)
    report = load_report(tmp_path / "report.json")
    assert report["passed"] is False and report["exit_code"] == exit_code and said in report["error"]
    assert [s["name"] for s in report["stages"]][:3] == ["load", "reference", "export:onnx"]
    assert report["artifacts"][0]["passed"] is True and (tmp_path / "model.onnx").is_file()  # what was published stays
    assert not list(tmp_path.glob(".convert-staging*"))


def test_a_bad_input_found_before_any_work_leaves_nothing(tmp_path):
    with pytest.raises(ConvertError):
        convert.convert(_linear(), inputs=["x:float32[B,8]"], to=["onnx"], samples=0, out=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_the_gate_renders_and_logs_under_the_lock_before_its_report_is_final(tmp_path, monkeypatch):
    """The renderings are made by the run, while it holds the output folder; the report is written after them."""
    import yaml

    from convert.gate.run import gate

    order: list[str] = []
    write_report = pipeline_run.write_report

    def recording_write(path, report):
        order.append(f"report locked={(path.parent / LOCK_NAME).exists()}")
        write_report(path, report)

    def recording_render(report, **paths):
        order.append(f"render locked={(tmp_path / 'out' / LOCK_NAME).exists()}")
        return []

    monkeypatch.setattr(pipeline_run, "write_report", recording_write)
    monkeypatch.setattr("convert.gate.run.render_files", recording_render)
    policy = tmp_path / "promotion.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "model": {"path": "fixtures.torch_models:build_cnn", "inputs": ["x:float32[B,3,32,32]"]},
                "require": {"targets": ["onnx"]},
                "out": str(tmp_path / "out"),
            }
        )
    )
    verdict = gate(policy, cache=False)
    assert verdict.decision == "promote"
    assert order == ["report locked=True", "render locked=True", "report locked=True"]
