"""A model whose ONNX export is numerically wrong must fail: exit 1, and the report names the output."""

from tests.conftest import load_report, run_cli


def test_wrong_onnx_export_exits_1_and_names_the_failing_output(tmp_path):
    run = run_cli(
        "fixtures.torch_models:build_off_in_onnx", "--input", "x:float32[B,8]", "--to", "onnx,torch_export", "--out", str(tmp_path)
    )
    assert run.returncode == 1, run.output
    assert "FAILED" in run.stdout and "scores" in run.stdout
    report = load_report(tmp_path / "report.json")
    assert report["passed"] is False and report["exit_code"] == 1
    onnx = next(a for a in report["artifacts"] if a["format"] == "onnx")
    exported = next(a for a in report["artifacts"] if a["format"] == "torch_export")
    assert onnx["passed"] is False and exported["passed"] is True
    cpu = [c for c in onnx["checks"] if c["device"] == "cpu"]
    assert cpu and all(c["status"] == "failed" for c in cpu)
    outputs = {o["name"]: o for o in cpu[0]["outputs"]}
    assert outputs["scores"]["status"] == "failed"
    assert abs(outputs["scores"]["max_abs_error"] - 0.05) < 1e-3
    assert outputs["scores"]["mismatch_count"] > 0 and "scores" in cpu[0]["reason"]
    assert outputs["probabilities"]["status"] == "passed"


def test_a_loosened_tolerance_lets_it_pass_and_the_report_says_so(tmp_path):
    run = run_cli(
        "fixtures.torch_models:build_off_in_onnx",
        "--input",
        "x:float32[B,8]",
        "--to",
        "onnx",
        "--tolerance",
        "scores:atol=0.06,rtol=0",
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 0, run.output
    check = next(c for c in load_report(tmp_path / "report.json")["artifacts"][0]["checks"] if c["status"] == "passed")
    scores = next(o for o in check["outputs"] if o["name"] == "scores")
    assert scores["tolerance_source"] == "--tolerance scores:atol=0.06,rtol=0" and scores["atol"] == 0.06
