"""What a new user hits in the first hour with a model of their own: a pickled module run from the installed console
script, a training checkpoint given as --weights, a mistyped path, a weights file given as the model, and an --input of
the wrong rank for a .pt2."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from convert.errors import ConvertError
from convert.sources.request import missing_model_error
from tests.conftest import REPO, load_report, run_cli

# The user's own code, in the folder they run from: a model class and its factory
NETS = textwrap.dedent(
    """
    import torch


    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv1d(2, 3, 3, padding=1)
            self.norm = torch.nn.BatchNorm1d(3)
            self.head = torch.nn.Linear(3 * 8, 4)

        def forward(self, x):
            return self.head(torch.relu(self.norm(self.conv(x))).flatten(1))


    def build():
        return TinyNet()
    """
)

# What a user's training script leaves behind, each from the real torch classes that write it that way
SAVE = textwrap.dedent(
    """
    import copy

    import numpy as np
    import torch

    from nets import TinyNet

    torch.manual_seed(0)
    model = TinyNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(5, 2, 8)
    model(x).sum().backward()
    optimizer.step()
    model.eval()
    ema = copy.deepcopy(model.state_dict())
    torch.save(model, "tiny.pt")
    torch.save({"epoch": 3, "model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "lr": 1e-3}, "checkpoint.pt")
    torch.save(torch.nn.DataParallel(model).state_dict(), "ddp.pt")
    torch.save(torch.compile(model).state_dict(), "compiled.pt")
    torch.save({"epoch": 3, "model": model.state_dict(), "ema": ema}, "two_models.pt")
    with torch.no_grad():
        np.savez("expected.npz", x=x.numpy(), y=model(x).numpy())
    """
)

SPEC = ("--input", "x:float32[B,2,8]")


def _without_pythonpath() -> dict[str, str]:
    """The environment of a user's shell: the installed package, nothing put on sys.path by hand."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"COLUMNS": "200"}


@pytest.fixture(scope="module")
def user_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("user")
    (folder / "nets.py").write_text(NETS)
    done = subprocess.run([sys.executable, "-c", SAVE], cwd=folder, env=_without_pythonpath(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return folder


def _assert_the_trained_model_was_exported(out: Path, folder: Path) -> dict:
    """The run passed, and its ONNX artifact computes the trained model's outputs (not a freshly initialised one's)."""
    import onnxruntime

    report = load_report(out / "report.json")
    assert report["passed"] and report["exit_code"] == 0
    (artifact,) = report["artifacts"]
    expected = np.load(folder / "expected.npz")
    session = onnxruntime.InferenceSession(artifact["path"], providers=["CPUExecutionProvider"])
    (y,) = session.run(None, {"x": expected["x"]})
    np.testing.assert_allclose(y, expected["y"], atol=1e-5, rtol=1e-4)
    return report


# 1. a pickled module from the installed console script


def test_the_console_script_unpickles_a_trusted_module_whose_code_is_in_the_working_folder(user_folder):
    script = Path(sys.executable).parent / "model-convert"
    assert script.is_file(), "install the package (pip install -e .) to get its console scripts"
    out = user_folder / "out-pickled"
    done = subprocess.run(
        [str(script), "tiny.pt", "--trust-code", *SPEC, "--to", "onnx", "--out", str(out)],
        cwd=user_folder,
        env=_without_pythonpath(),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = _assert_the_trained_model_was_exported(out, user_folder)
    assert report["source"]["kind"] == "pickled-module" and report["isolation"].startswith("worker process")


# 2. training checkpoints given as --weights


@pytest.mark.parametrize(
    ("weights", "note"),
    [
        ("checkpoint.pt", "the 'model_state_dict' entry of the training checkpoint"),
        ("ddp.pt", "the prefix 'module.'"),
        ("compiled.pt", "the prefix '_orig_mod.'"),
    ],
)
def test_a_training_checkpoint_or_prefixed_state_dict_loads_and_says_how(user_folder, weights, note):
    out = user_folder / f"out-{weights}"
    run = run_cli("nets.py:build", "--weights", weights, *SPEC, "--to", "onnx", "--out", str(out), cwd=user_folder)
    assert run.returncode == 0, run.output[-3000:]
    report = _assert_the_trained_model_was_exported(out, user_folder)
    assert any(note in text for text in report["notes"]), report["notes"]
    assert note in run.output


def test_a_checkpoint_with_two_fitting_state_dicts_names_them_and_weights_key(user_folder):
    out = user_folder / "out-two"
    run = run_cli("nets.py:build", "--weights", "two_models.pt", *SPEC, "--to", "onnx", "--out", str(out), cwd=user_folder)
    assert run.returncode == 2 and "Traceback" not in run.output
    assert "'model', 'ema'" in run.stderr and "--weights-key" in run.stderr


def test_weights_key_picks_the_checkpoints_entry(user_folder):
    out = user_folder / "out-ema"
    run = run_cli(
        "nets.py:build", "--weights", "two_models.pt", "--weights-key", "ema", *SPEC, "--to", "onnx", "--out", str(out), cwd=user_folder
    )
    assert run.returncode == 0, run.output[-3000:]
    report = _assert_the_trained_model_was_exported(out, user_folder)
    assert report["options"]["weights_key"] == "ema"
    assert any("the 'ema' entry" in text for text in report["notes"])


# 3. a missing path is not a Hugging Face Hub id


@pytest.mark.fast
def test_a_missing_path_under_an_existing_folder_says_it_does_not_exist(tmp_path):
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "tokens.pt2").write_bytes(b"")
    run = run_cli("examples/tokens.pt", "--to", "onnx", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.output
    assert "the model examples/tokens.pt does not exist" in run.stderr and str(tmp_path) in run.stderr
    assert "did you mean examples/tokens.pt2?" in run.stderr
    assert "Hugging Face" not in run.stderr and not (tmp_path / "out").exists()


@pytest.mark.fast
@pytest.mark.parametrize("name", ["examples/nosuch.pt2", "models/nosuch", "./org/name", "org/name.onnx", "org/model.safetensors"])
def test_a_name_that_says_it_is_a_path_is_a_missing_path(tmp_path, monkeypatch, name):
    (tmp_path / "examples").mkdir()
    (tmp_path / "models").mkdir()
    monkeypatch.chdir(tmp_path)
    error = missing_model_error(name)
    assert isinstance(error, ConvertError)
    assert error.problem == f"the model {name} does not exist (a relative path is read from the working folder, {tmp_path})"


@pytest.mark.fast
def test_an_org_name_whose_org_is_no_folder_here_keeps_the_hub_advice(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    error = missing_model_error("google-bert/bert-base-uncased")
    assert "looks like a Hugging Face Hub id" in error.problem
    assert "huggingface-cli download google-bert/bert-base-uncased" in error.next_step


# 4. a weights file given as the model


@pytest.mark.fast
def test_a_safetensors_file_alone_says_first_that_weights_need_a_factory(tmp_path):
    from safetensors.numpy import save_file

    save_file({"head.weight": np.zeros((4, 24), np.float32)}, str(tmp_path / "model.safetensors"))
    run = run_cli("model.safetensors", "--to", "onnx", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert run.returncode == 2 and "Traceback" not in run.output
    assert "model.safetensors holds safetensors weights, and weights alone need a model factory" in run.stderr
    assert "def build():" in run.stderr and "convert mymodel.py:build --weights model.safetensors" in run.stderr
    assert "--framework" not in run.stderr


# 5. an --input of the wrong rank for a .pt2


@pytest.fixture(scope="module")
def cnn_pt2(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("pt2")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "fixtures.build_torch", str(folder), "cnn"], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return folder / "cnn.pt2"


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("x:float32[1,3,32]", "--input x has 3 dims but the program's x is float32[d0,3,32,32]"),
        ("x:float16[1,3,32,32]", "--input x is float16 but the program's x is float32[d0,3,32,32]"),
        ("x:float32[B,3,16,32]", "--input x has size 16 at dim 2 but the program's x is float32[d0,3,32,32]"),
    ],
)
def test_an_input_that_does_not_fit_the_pt2_program_is_compared_with_its_signature(cnn_pt2, tmp_path, spec, problem):
    run = run_cli(str(cnn_pt2), "--input", spec, "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "Traceback" not in run.output and "IndexError" not in run.output
    assert problem in run.stderr
