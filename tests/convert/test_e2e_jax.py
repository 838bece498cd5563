"""End to end through the real CLI: every JAX fixture, every target, validated against JAX on CPU at several shapes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from convert.specs import parse_input_specs
from fixtures.jax_models import FIXTURES
from tests.conftest import LazyRuns, load_report, run_cli, sizes_checked

TARGETS = ("onnx", "savedmodel", "tflite")
OUTPUTS = {
    "nnx_cnn": {"output"},
    "linen_mlp": {"output"},
    "transformer": {"hidden", "pooled"},
    "equinox_mlp": {"output"},
    "scan_rnn": {"output_0", "output_1"},
    "nnx_upsample": {"output"},
}
FALLBACK_ATTEMPTS = [
    ("jax2onnx.to_onnx", "failed"),
    ("jax2tf → TFLite → tf2onnx", "failed"),
    ("jax2tf → TFLite → tf2onnx (fixed at the export shape)", "ok"),
]


def _source_args(name: str, folder) -> list[str]:
    fixture = FIXTURES[name]
    args = [f"fixtures.jax_models:{fixture.model}", "--framework", "jax"]
    if fixture.params:
        args += ["--params", str(folder / f"{name}.params{fixture.params}")]
    return args + [arg for text in fixture.inputs for arg in ("--input", text)]


@pytest.fixture(scope="module")
def jax_runs(jax_files, converted):
    """One CLI run per fixture (every target), shared by the assertions below; each when a test first reads it, one at
    a time (the other xdist worker has the other core), once per session (tests/conftest.py's ``converted``)."""
    return LazyRuns(FIXTURES, lambda name: converted(*_source_args(name, jax_files), "--to", ",".join(TARGETS)))


@pytest.mark.parametrize("name", list(FIXTURES))
def test_jax_fixture_exports_and_validates_every_target(jax_runs, name):
    """Every target passes, except the upsampling decoder's ONNX: only a route fixed at the export shape exports it,
    and an artifact that fixes a dim asked dynamic fails (test_onnx_strategies_are_tried_in_order...)."""
    run, out = jax_runs[name]
    fixed_onnx = name == "nnx_upsample"
    assert run.returncode == (1 if fixed_onnx else 0), run.output
    report = load_report(out / "report.json")
    assert report["passed"] is not fixed_onnx and report["source"]["framework"] == "jax"
    assert set(report["source"]["outputs"]) == OUTPUTS[name]
    formats = {a["format"]: a for a in report["artifacts"]}
    assert set(formats) == set(TARGETS)
    symbols = {s for text in FIXTURES[name].inputs for s in parse_input_specs([text])[0].symbols}
    for artifact in (a for a in formats.values() if not (fixed_onnx and a["format"] == "onnx")):
        assert artifact["passed"] is True, artifact["checks"]
        assert len(artifact["sha256"]) == 64 and artifact["size_bytes"] > 0
        ran = [c for c in artifact["checks"] if c["device"] == "cpu" and c["status"] == "passed"]
        assert ran and all(c["status"] != "failed" for c in artifact["checks"])
        for check in ran:
            assert check["samples"] >= 3
            assert {o["name"] for o in check["outputs"]} == OUTPUTS[name]
            assert all(o["status"] == "passed" and o["max_abs_error"] < 1e-4 for o in check["outputs"])
        assert all(c["status"] == "skipped" and c["reason"] for c in artifact["checks"] if c["device"] == "cuda")
        for symbol in symbols:  # every artifact that passes is checked at two sizes of every symbol at least
            assert len(sizes_checked(artifact, symbol)) >= 2, (artifact["format"], symbol)
    assert formats["savedmodel"]["strategy"] == "jax2tf.convert + tf.saved_model.save"
    assert (out / formats["savedmodel"]["path"].split("/")[-1] / "saved_model.pb").is_file()
    assert not list(out.glob(".convert-staging-*")) and not list(out.glob(".*tflite*"))


def test_onnx_strategies_are_tried_in_order_and_the_winner_is_recorded(jax_runs):
    """jax2onnx cannot export the upsampling decoder; the TFLite route on dynamic axes builds a model that
    cannot run (a reshape baked at the wrong size); the same route at the export shape wins, and it fails at other
    sizes with the reason: it fixes the batch that was asked dynamic."""
    run, out = jax_runs["nnx_upsample"]
    onnx = next(a for a in load_report(out / "report.json")["artifacts"] if a["format"] == "onnx")
    assert [(a["strategy"], a["status"]) for a in onnx["attempts"]] == FALLBACK_ATTEMPTS
    assert all(a["error"] for a in onnx["attempts"][:2])
    assert onnx["strategy"] == FALLBACK_ATTEMPTS[-1][0]
    assert onnx["passed"] is False and onnx["fixed_dims"] == ["B"]
    failed = [c for c in onnx["checks"] if c["device"] == "cpu" and c["status"] == "failed"]
    assert failed and all("fixes dim B that was asked dynamic (axis 0 of 'image' is fixed at 2" in c["reason"] for c in failed)
    assert "/failed/" in onnx["path"]
    for name in set(FIXTURES) - {"nnx_upsample"}:
        report = load_report(jax_runs[name][1] / "report.json")
        assert next(a for a in report["artifacts"] if a["format"] == "onnx")["strategy"] == "jax2onnx.to_onnx"


def test_params_of_another_model_are_refused_naming_the_leaf(jax_files, tmp_path):
    narrow = str(jax_files / "linen_mlp.narrow.params.msgpack")
    as_function = run_cli(
        "fixtures.jax_models:apply_mlp",
        "--params",
        narrow,
        "--input",
        "x:float32[B,28,28,1]",
        "--to",
        "onnx",
        "--out",
        str(tmp_path / "function"),
    )
    assert as_function.returncode == 2, as_function.output
    assert "Dense_0" in as_function.stderr and "kernel" in as_function.stderr and "Traceback" not in as_function.output
    as_module = run_cli(
        "fixtures.jax_models:Mlp", "--params", narrow, "--input", "x:float32[B,28,28,1]", "--to", "onnx", "--out", str(tmp_path / "module")
    )
    assert as_module.returncode == 2, as_module.output
    assert "the leaf 'params/Dense_0/bias' is float32[32] in the file and float32[64] in the model" in as_module.stderr
    assert not (tmp_path / "function").exists() and not (tmp_path / "module").exists()


def test_a_params_file_is_never_unpickled(tmp_path):
    marker = tmp_path / "unpickled"
    bad = tmp_path / "params.npz"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    np.savez(bad, w_in=np.array([Payload()], dtype=object))
    assert pickle.dumps(Payload())  # the file really holds a pickle that would create the marker
    run = run_cli(
        "fixtures.jax_models:scan_rnn", "--params", str(bad), "--input", "x:float32[B,T,8]", "--to", "onnx", "--out", str(tmp_path / "out")
    )
    said = " ".join(run.stderr.split())
    assert run.returncode == 2 and "params.npz has an array, 'w_in', of Python objects: a pickle, which is never loaded" in said
    assert "Traceback" not in run.output
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_a_function_that_takes_params_needs_them(tmp_path):
    run = run_cli(
        "fixtures.jax_models:apply_mlp",
        "--framework",
        "jax",
        "--input",
        "x:float32[B,28,28,1]",
        "--to",
        "onnx",
        "--out",
        str(tmp_path / "out"),
    )
    assert run.returncode == 2 and "--params" in run.stderr and "Traceback" not in run.output
    without_framework = run_cli(
        "fixtures.jax_models:apply_mlp", "--input", "x:float32[B,28,28,1]", "--to", "onnx", "--out", str(tmp_path / "out")
    )
    assert without_framework.returncode == 2 and "--framework jax" in without_framework.stderr


def test_params_go_with_jax_models_only(torch_files, tmp_path):
    run = run_cli(
        str(torch_files / "cnn.pt2"), "--params", str(torch_files / "cnn.safetensors"), "--to", "onnx", "--out", str(tmp_path / "out")
    )
    assert run.returncode == 2 and "--weights" in run.stderr and "Traceback" not in run.output
