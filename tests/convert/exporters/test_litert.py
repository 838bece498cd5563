"""PyTorch → TFLite through litert-torch, end to end through the real CLI; and every .tflite, Keras' and JAX's too, run
on the LiteRT interpreter (TensorFlow's tf.lite.Interpreter only where LiteRT is not installed).

litert-torch 0.10 (with torch 2.13) converts neither the CNN nor the transformer with a dynamic dim (a view of a symbolic
size fails in its lowering): the exporter records that attempt and converts them at the export shape, and the artifact
says it is fixed there. Convolutions alone keep their batch dynamic, and are validated at several sizes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from convert.backends.tf import signature_details, tflite_interpreter
from convert.specs import parse_input_specs
from tests.conftest import REPO, load_report, run_cli, sizes_checked

TARGETS = ("tflite",)
TOKEN_SPECS = ("--input", "input_ids:int64[B,S]{0..999}", "--input", "attention_mask:int64[B,S]{0..1}")


@pytest.fixture(scope="module")
def files(torch_files, tmp_path_factory) -> dict[str, Path]:
    """The CNN fixture's .pt2; the token classifier (an embedding and a transformer encoder layer) exported with keyword
    inputs, as transformers users export; two convolutions returning a dict, with a dynamic batch."""
    import torch

    from fixtures.build_torch import save_keyword_program
    from fixtures.torch_models import FIXTURES, build

    class TwoHeads(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.edges = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.smooth = torch.nn.Conv2d(3, 4, 5, padding=2)

        def forward(self, x):
            return {"edges": torch.relu(self.edges(x)), "smooth": torch.sigmoid(self.smooth(x))}

    folder = tmp_path_factory.mktemp("litert_sources")
    torch.manual_seed(0)
    heads = torch.export.export(TwoHeads().eval(), (torch.randn(2, 3, 16, 16),), dynamic_shapes=({0: torch.export.Dim("B")},))
    torch.export.save(heads, str(folder / "heads.pt2"))
    return {
        "cnn": torch_files / "cnn.pt2",
        "tokens": save_keyword_program(build("tokens"), list(FIXTURES["tokens"].inputs), folder / "tokens.pt2", {"B": 2, "S": 9}),
        "heads": folder / "heads.pt2",
    }


# fixed shapes are allowed where litert-torch cannot keep a dim dynamic; the convolutions are held to every size
RUNS = {"cnn": ("--allow-fixed-shapes",), "tokens": (*TOKEN_SPECS, "--allow-fixed-shapes"), "heads": ()}


@pytest.fixture(scope="module")
def runs(files, tmp_path_factory) -> dict[str, tuple]:
    """One CLI run per model (--to tflite), one at a time (the other xdist worker has the other core): (the run, its
    report, its tflite artifact's record)."""
    out = tmp_path_factory.mktemp("litert_runs")

    def run(name: str):
        done = run_cli(str(files[name]), *RUNS[name], "--to", "tflite", "--out", str(out / name))
        report = load_report(out / name / "report.json")
        return name, (done, report, next(a for a in report["artifacts"] if a["format"] == "tflite"))

    return dict(map(run, RUNS))


def _symbols(report: dict) -> set[str]:
    return {s for spec in parse_input_specs(report["source"]["inputs"]) for s in spec.symbols}


@pytest.mark.parametrize("name", list(RUNS))
def test_the_tflite_artifact_passes_and_keeps_the_sources_names_and_dtypes(runs, name):
    done, report, artifact = runs[name]
    assert done.returncode == 0, done.output
    assert report["passed"] and artifact["passed"] and artifact["exporter"] == "litert-torch"
    assert Path(artifact["path"]).suffix == ".tflite" and Path(artifact["path"]).is_file()
    inputs, outputs = signature_details(tflite_interpreter(Path(artifact["path"]), allocate=False))
    specs = parse_input_specs(report["source"]["inputs"])
    assert {input_name: np.dtype(d["dtype"]).name for input_name, d in inputs.items()} == {s.name: s.dtype for s in specs}
    assert set(outputs) == set(report["source"]["outputs"])
    passed = [c for c in artifact["checks"] if c["status"] == "passed"]
    assert passed and all(c["runtime"] == "tflite" and c["device"] == "cpu" for c in passed)
    assert {o["name"] for c in passed for o in c["outputs"]} == set(report["source"]["outputs"])
    assert max(o["max_abs_error"] for c in passed for o in c["outputs"]) < 1e-4
    assert "ai_edge_litert" in report["environment"]["packages"]  # the interpreter the tflite checks ran on


def test_keyword_inputs_and_a_dict_of_outputs_keep_their_names(runs):
    tokens, heads = (signature_details(tflite_interpreter(Path(runs[n][2]["path"]), allocate=False)) for n in ("tokens", "heads"))
    assert set(tokens[0]) == {"input_ids", "attention_mask"} and set(tokens[1]) == {"output"}
    assert set(heads[0]) == {"x"} and set(heads[1]) == {"edges", "smooth"}


def test_a_batch_litert_torch_keeps_dynamic_is_validated_at_several_sizes(runs):
    _, report, artifact = runs["heads"]
    assert artifact["strategy"] == "litert_torch.convert" and not artifact["fixed_dims"]
    for symbol in _symbols(report):
        assert len(sizes_checked(artifact, symbol)) >= 2, artifact["checks"]
    # litert-torch declared the outputs' batch at its export size; the file declares it dynamic, and the note says so
    assert "declared dynamic (-1) in the file" in artifact["attempts"][0]["note"]
    _, outputs = signature_details(tflite_interpreter(Path(artifact["path"]), allocate=False))
    assert {name: [int(n) for n in d["shape_signature"]] for name, d in outputs.items()} == {
        "edges": [-1, 8, 16, 16],
        "smooth": [-1, 4, 16, 16],
    }


@pytest.mark.parametrize("name", ["cnn", "tokens"])
def test_a_dim_litert_torch_cannot_keep_dynamic_is_recorded_and_the_artifact_fixed_there(runs, name):
    _, report, artifact = runs[name]
    symbols = _symbols(report)
    first = artifact["attempts"][0]
    if first["status"] == "ok":  # a litert-torch that converts the model with its dims dynamic
        assert all(len(sizes_checked(artifact, symbol)) >= 2 for symbol in symbols), artifact["checks"]
        return
    assert [(a["strategy"], a["status"]) for a in artifact["attempts"]] == [
        ("litert_torch.convert", "failed"),
        ("litert_torch.convert at the export shape", "ok"),
    ]
    assert first["error"].startswith(
        ("RuntimeError: litert-torch could not convert the model with", "RuntimeError: the .tflite litert-torch wrote with dynamic dims")
    )
    assert set(artifact["fixed_dims"]) == symbols
    others = [c for c in artifact["checks"] if c["device"] == "cpu" and c["status"] == "skipped"]
    assert others and all("converted at the export shape" in c["reason"] for c in others)


RUN = """
import sys
from pathlib import Path
import numpy as np
from convert.artifacts import Artifact
from convert.runtimes.tensorflow import TfliteRunner
from convert.specs import parse_input_specs
artifact = Artifact(format="tflite", path=Path(sys.argv[1]), inputs=tuple(parse_input_specs(["x:float32[B,8]"])))
with TfliteRunner(artifact, "cpu") as runner:
    for batch in (2, 5):
        out = runner.infer({"x": np.ones((batch, 8), np.float32)})
        assert np.array_equal(out["y"], np.tile(np.arange(8, dtype=np.float32), (batch, 1)))
    print(type(runner.interpreter).__module__, "tensorflow" in sys.modules)
"""

# made as the Keras and JAX exporters make theirs (a SavedModel, then the TFLite converter), then run by the runner with
# LiteRT's import failing, as where ai-edge-litert is not installed: TensorFlow is imported once for both
MAKE_AND_RUN_WITHOUT_LITERT = (
    """
import sys
from pathlib import Path
import numpy as np
import tensorflow as tf
module = tf.Module()
module.scale = tf.Variable(np.arange(8, dtype=np.float32))
serve = tf.function(lambda x: {"y": x * module.scale}, input_signature=[tf.TensorSpec((None, 8), tf.float32, name="x")])
folder = Path(sys.argv[1])
tf.saved_model.save(module, str(folder / "sm"), signatures={"serving_default": serve})
(folder / "scale.tflite").write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(folder / "sm")).convert())
sys.modules["ai_edge_litert.interpreter"] = None
sys.argv[1] = str(folder / "scale.tflite")
"""
    + RUN
)


def _python(*args: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", *args], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=300
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.split()


@pytest.fixture(scope="module")
def converter_tflite(tmp_path_factory) -> tuple[Path, list[str]]:
    """A .tflite the TFLite converter made (dynamic batch), and what running it without LiteRT printed."""
    folder = tmp_path_factory.mktemp("tf_tflite")
    printed = _python(MAKE_AND_RUN_WITHOUT_LITERT, str(folder))
    return folder / "scale.tflite", printed


def test_a_tflite_converter_file_runs_on_the_litert_interpreter_without_tensorflow(converter_tflite):
    assert _python(RUN, str(converter_tflite[0])) == ["ai_edge_litert.interpreter", "False"]


def test_tensorflows_interpreter_runs_it_where_litert_is_not_installed(converter_tflite):
    assert converter_tflite[1] == ["tensorflow.lite.python.interpreter", "True"]


def test_neither_interpreter_installed_is_a_skip_with_the_reason(monkeypatch):
    import importlib.util

    from convert.runtimes.tensorflow import TfliteRunner

    assert TfliteRunner.unavailable_reason("cpu") is None
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("ai_edge_litert", "tensorflow") else real(name, *a))
    assert TfliteRunner.unavailable_reason("cpu") == (
        "neither the LiteRT interpreter (ai-edge-litert) nor TensorFlow is installed: pip install 'model-convert[litert]'"
    )


def test_a_litert_export_leaves_jax_in_the_mode_the_process_had():
    """litert-torch's JAX bridge turns JAX's 64-bit mode on for the whole process when imported: a JAX model converted
    later in the same process (the Python API, --no-isolation) would compute in float64 where its source does not."""
    import jax

    from convert.backends.jax import x64_mode_within

    before = jax.config.jax_enable_x64
    with x64_mode_within():
        import litert_torch  # noqa: F401

        assert jax.config.jax_enable_x64
    assert jax.config.jax_enable_x64 == before
