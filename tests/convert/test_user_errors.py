"""Bad input: one paragraph with a next step, exit 2, no traceback, nothing written, the user's files untouched."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from tests.conftest import load_report, run_cli


def _assert_clean_user_error(run, *fragments):
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.output
    assert "error:" in run.stderr
    for fragment in fragments:
        assert fragment in run.output, run.output


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pickled_module_without_trust_code_is_refused_with_the_reason(torch_files, tmp_path):
    before = _digest(torch_files / "cnn.pt")
    run = run_cli(str(torch_files / "cnn.pt"), "--input", "x:float32[B,3,32,32]", "--to", "onnx", "--out", str(tmp_path / "o"))
    _assert_clean_user_error(run, "pickled Python object", "--trust-code", "SmallCNN")
    assert not (tmp_path / "o").exists()
    assert _digest(torch_files / "cnn.pt") == before


def test_torchscript_without_trust_code_is_refused(torch_files, tmp_path):
    run = run_cli(str(torch_files / "cnn.torchscript.pt"), "--input", "x:float32[B,3,32,32]", "--to", "onnx", "--out", str(tmp_path))
    _assert_clean_user_error(run, "TorchScript", "--trust-code")


class _Payload:
    def __reduce__(self):
        import os

        return (os.system, (f"touch {MARKER}",))


MARKER = "/nonexistent"


def test_malicious_pickle_payload_never_runs(tmp_path):
    global MARKER
    marker = tmp_path / "payload-ran"
    MARKER = str(marker)
    import torch

    evil = tmp_path / "evil.pt"
    torch.save({"model": _Payload()}, str(evil))
    run = run_cli(str(evil), "--input", "x:float32[B,4]", "--to", "onnx", "--out", str(tmp_path / "o"))
    _assert_clean_user_error(run, "--trust-code")
    assert not marker.exists()


def test_state_dict_given_as_model_points_at_the_factory_route(torch_files, tmp_path):
    run = run_cli(str(torch_files / "cnn.state.pt"), "--to", "onnx", "--out", str(tmp_path))
    _assert_clean_user_error(run, "state dict", "--weights")


def test_safetensors_given_as_model(torch_files, tmp_path):
    run = run_cli(str(torch_files / "cnn.safetensors"), "--framework", "torch", "--to", "onnx", "--out", str(tmp_path))
    _assert_clean_user_error(run, "safetensors", "factory")


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04garbage-truncated"])
def test_empty_and_truncated_files(tmp_path, content):
    bad = tmp_path / "model.pt2"
    bad.write_bytes(content)
    run = run_cli(str(bad), "--to", "onnx", "--out", str(tmp_path / "o"))
    _assert_clean_user_error(run)
    assert not (tmp_path / "o").exists()


def test_truncated_pt2(torch_files, tmp_path):
    data = (torch_files / "cnn.pt2").read_bytes()
    bad = tmp_path / "cut.pt2"
    bad.write_bytes(data[: len(data) // 2])
    run = run_cli(str(bad), "--to", "onnx", "--out", str(tmp_path / "o"))
    _assert_clean_user_error(run)


def test_missing_model_and_unknown_factory(tmp_path):
    _assert_clean_user_error(run_cli(str(tmp_path / "nope.pt2"), "--to", "onnx"), "does not exist")
    _assert_clean_user_error(run_cli("fixtures.torch_models:no_such_builder", "--to", "onnx"), "no attribute")
    _assert_clean_user_error(run_cli("no_such_pkg.models:build", "--to", "onnx"), "cannot import")


def test_weights_that_do_not_fit_the_model(torch_files, tmp_path):
    run = run_cli("fixtures.torch_models:build_cnn", "--weights", str(torch_files / "lstm.safetensors"),
                  "--input", "x:float32[B,3,32,32]", "--to", "onnx", "--out", str(tmp_path))
    _assert_clean_user_error(run, "do not fit the model")


def test_spec_naming_an_input_the_model_does_not_have(tmp_path):
    run = run_cli("fixtures.torch_models:build_cnn", "--input", "pixels:float32[B,3,32,32]", "--to", "onnx", "--out", str(tmp_path))
    _assert_clean_user_error(run, "'pixels' is not an input", "(x)")


def test_spec_with_wrong_shape_fails_in_the_source_with_a_hint(tmp_path):
    run = run_cli("fixtures.torch_models:build_cnn", "--input", "x:float32[B,5,32,32]", "--to", "onnx", "--out", str(tmp_path))
    _assert_clean_user_error(run, "the source model fails on inputs generated from its specs", "--input")
    assert not tmp_path.exists() or not any(tmp_path.iterdir())


def test_no_specs_for_a_module(tmp_path):
    _assert_clean_user_error(run_cli("fixtures.torch_models:build_cnn", "--to", "onnx", "--out", str(tmp_path)), "--input")


@pytest.mark.parametrize("args, fragment", [
    (["--to", "tflite2"], "unknown target format"),
    (["--to", "onnx", "--input", "x:float32[B,3,32"], "cannot read the input spec"),
    (["--to", "onnx", "--input", "x:float32[B,3,32,32]", "--tolerance", "atol=abc"], "cannot read the tolerance"),
    (["--to", "onnx", "--input", "x:float32[B,3,32,32]", "--tolerance", "logitz:atol=1"], "'logitz'"),
    (["--to", "onnx", "--input", "x:float32[B,3,32,32]", "--dim", "Q=2"], "symbol Q"),
])
def test_bad_options(args, fragment, tmp_path):
    run = run_cli("fixtures.torch_models:build_cnn", *args, "--out", str(tmp_path / "o"))
    _assert_clean_user_error(run, fragment)
    assert not (tmp_path / "o" / "report.json").exists()


def test_existing_output_is_not_overwritten_without_force(torch_files, tmp_path):
    out = tmp_path / "o"
    first = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out))
    assert first.returncode == 0, first.output
    before = _digest(out / "cnn.onnx"), _digest(out / "report.json")
    second = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out))
    _assert_clean_user_error(second, "already exists", "--force")
    assert (_digest(out / "cnn.onnx"), _digest(out / "report.json")) == before
    third = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(out), "--force", "--seed", "3")
    assert third.returncode == 0, third.output
    assert load_report(out / "report.json")["options"]["seed"] == 3


def test_unwritable_output_folder(torch_files, tmp_path):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("x")
    run = run_cli(str(torch_files / "cnn.pt2"), "--to", "onnx", "--out", str(blocker / "sub"))
    _assert_clean_user_error(run, "output folder")


def test_failed_export_leaves_nothing_at_the_final_path_and_exits_2(torch_files, tmp_path):
    shutil.copy(torch_files / "cnn.torchscript.pt", tmp_path / "scripted.pt")
    run = run_cli(str(tmp_path / "scripted.pt"), "--trust-code", "--input", "x:float32[B,3,32,32]",
                  "--to", "torch_export", "--out", str(tmp_path / "o"))
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.output and "export failed with every strategy" in run.stderr
    assert not (tmp_path / "o" / "scripted.pt2").exists()
    report = load_report(tmp_path / "o" / "report.json")
    assert report["passed"] is False
    attempts = report["artifacts"][0]["attempts"]
    assert attempts and attempts[0]["status"] == "failed" and "ScriptModule" in attempts[0]["error"]
