"""End to end through the real CLI: every Keras fixture, every target, validated on CPU at several shapes."""

from __future__ import annotations

import json
import zipfile

import pytest

from convert.specs import parse_input_specs
from fixtures.keras_models import FIXTURES
from tests.conftest import LazyRuns, load_report, run_cli, sizes_checked

TARGETS = ("savedmodel", "onnx", "tflite")
OUTPUTS = {"mobilenet": {"predictions"}, "two_io": {"score", "embedding"}, "subclassed": {"output"}, "bn_dropout": {"output"}}


def _source_args(name: str, folder) -> list[str]:
    if (folder / f"{name}.keras").exists():
        return [str(folder / f"{name}.keras")]
    specs = [arg for text in FIXTURES[name].inputs for arg in ("--input", text)]
    return [
        f"fixtures.keras_models:{FIXTURES[name].builder}",
        "--framework",
        "keras",
        "--weights",
        str(folder / f"{name}.weights.h5"),
        *specs,
    ]


@pytest.fixture(scope="module")
def keras_runs(keras_files, converted):
    """One CLI run per fixture (every target), shared by the assertions below; each when a test first reads it, one at
    a time (the other xdist worker has the other core), once per session (tests/conftest.py's ``converted``)."""
    return LazyRuns(FIXTURES, lambda name: converted(*_source_args(name, keras_files), "--to", ",".join(TARGETS)))


def _assert_every_symbol_at_two_sizes(artifact: dict, inputs: list[str]) -> None:
    for symbol in {s for text in inputs for s in parse_input_specs([text])[0].symbols}:
        assert len(sizes_checked(artifact, symbol)) >= 2, (artifact["format"], symbol, artifact["checks"])


@pytest.mark.parametrize("name", list(FIXTURES))
def test_keras_fixture_exports_and_validates_every_target(keras_runs, name):
    run, out = keras_runs[name]
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    assert report["passed"] is True and report["source"]["framework"] == "keras"
    assert set(report["source"]["outputs"]) == OUTPUTS[name]
    formats = {a["format"]: a for a in report["artifacts"]}
    assert set(formats) == set(TARGETS)
    for artifact in formats.values():
        assert artifact["passed"] is True, artifact["checks"]
        assert len(artifact["sha256"]) == 64 and artifact["size_bytes"] > 0
        cpu = [c for c in artifact["checks"] if c["device"] == "cpu"]
        assert cpu and all(c["status"] == "passed" for c in cpu), cpu
        for check in cpu:
            assert check["samples"] >= 3
            assert {o["name"] for o in check["outputs"]} == OUTPUTS[name]
            assert all(o["status"] == "passed" and o["max_abs_error"] < 1e-4 for o in check["outputs"])
        assert all(c["status"] == "skipped" and c["reason"] for c in artifact["checks"] if c["device"] == "cuda")
        _assert_every_symbol_at_two_sizes(artifact, report["source"]["inputs"])
    assert (out / f"{formats['savedmodel']['path'].split('/')[-1]}" / "saved_model.pb").is_file()
    assert (out / formats["tflite"]["path"].split("/")[-1]).is_file()
    assert not list(out.glob(".convert-staging-*"))


def test_savedmodel_folder_needs_trust_and_then_converts(keras_files, tmp_path):
    folder = keras_files / "two_io_savedmodel"
    refused = run_cli(str(folder), "--to", "onnx", "--out", str(tmp_path / "refused"))
    assert refused.returncode == 2 and "--trust-code" in refused.output and "Traceback" not in refused.output
    assert not (tmp_path / "refused").exists()
    run = run_cli(str(folder), "--trust-code", "--to", "onnx,tflite", "--out", str(tmp_path / "ok"))
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "ok" / "report.json")
    assert report["source"]["kind"] == "savedmodel" and report["passed"] is True
    for artifact in report["artifacts"]:
        _assert_every_symbol_at_two_sizes(artifact, report["source"]["inputs"])


def test_legacy_h5_is_refused_without_trust_code(keras_files, tmp_path):
    run = run_cli(str(keras_files / "bn_dropout.h5"), "--to", "onnx", "--out", str(tmp_path))
    assert run.returncode == 2 and "Traceback" not in run.output
    assert "safe mode" in run.output and "--trust-code" in run.output
    assert not list(tmp_path.iterdir())


def test_legacy_h5_with_trust_code_converts(keras_files, tmp_path):
    run = run_cli(str(keras_files / "bn_dropout.h5"), "--trust-code", "--to", "onnx", "--out", str(tmp_path))
    assert run.returncode == 0, run.output
    assert load_report(tmp_path / "report.json")["source"]["kind"] == "h5"


def _rewrite_config(source, target, edit) -> None:
    with zipfile.ZipFile(source) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    config = json.loads(members["config.json"])
    edit(config)
    members["config.json"] = json.dumps(config).encode()
    with zipfile.ZipFile(target, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_keras_archive_naming_an_arbitrary_callable_is_refused(keras_files, tmp_path):
    marker = tmp_path / "pwned"
    evil = tmp_path / "evil.keras"

    def edit(config):
        layer = config["config"]["layers"][1]
        layer.update({"module": "os", "class_name": "system", "registered_name": "system", "config": {"command": f"touch {marker}"}})

    _rewrite_config(keras_files / "bn_dropout.keras", evil, edit)
    run = run_cli(str(evil), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "Traceback" not in run.output
    assert "'os.system'" in run.output and "--trust-code" in run.output
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_keras_archive_with_a_lambda_is_refused(keras_files, tmp_path):
    lam = tmp_path / "lambda.keras"

    def edit(config):
        layer = config["config"]["layers"][1]
        layer["config"]["activation"] = {"class_name": "__lambda__", "config": {"code": "AAAA", "defaults": None, "closure": None}}

    _rewrite_config(keras_files / "bn_dropout.keras", lam, edit)
    run = run_cli(str(lam), "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "Lambda layer holding serialized Python bytecode" in run.output


def test_weights_only_h5_given_as_the_model_says_so(keras_files, tmp_path):
    run = run_cli(str(keras_files / "two_io.weights.h5"), "--to", "onnx", "--out", str(tmp_path))
    assert run.returncode == 2 and "holds only weights" in run.output and "--weights" in run.output


def test_weights_that_do_not_fit_the_factory_are_refused(keras_files, tmp_path):
    run = run_cli(
        "fixtures.keras_models:build_subclassed",
        "--framework",
        "keras",
        "--input",
        "x:float32[B,16]",
        "--weights",
        str(keras_files / "bn_dropout.weights.h5"),
        "--to",
        "onnx",
        "--out",
        str(tmp_path),
    )
    assert run.returncode == 2 and "do not fit the model" in run.output and "Traceback" not in run.output


def test_subclassed_model_without_specs_asks_for_them(tmp_path):
    run = run_cli("fixtures.keras_models:build_subclassed", "--framework", "keras", "--to", "onnx", "--out", str(tmp_path))
    assert run.returncode == 2 and "--input" in run.output and "Traceback" not in run.output


def test_python_api_takes_a_keras_model_object(tmp_path):
    import convert
    from fixtures.keras_models import build_two_io

    result = convert.convert(build_two_io(), to=["onnx", "tflite"], out=tmp_path)
    assert result.passed and result.exit_code == 0
    assert result.report.source.framework == "keras" and result.report.source.kind == "object"
    assert set(result.artifacts) == {"onnx", "tflite"} and result.artifacts["tflite"].path.is_file()


def test_tflite_with_a_fixed_axis_records_it_for_the_checks_at_other_sizes(tmp_path):
    """A TFLite model whose signature fixes the batch axis: the exporter records it, so checks at other sizes
    fail with the reason (are skipped with it where fixed shapes are allowed); the interpreter itself refuses to
    resize that axis."""
    import numpy as np
    import tensorflow as tf

    from convert.artifacts import Artifact
    from convert.exporters.base import ExportJob
    from convert.exporters.tflite import _with_fixed_axes
    from convert.runtimes.tensorflow import TfliteRunner
    from convert.sources.base import SourceInfo
    from convert.sources.keras import KerasSource

    module = tf.Module()
    module.scale = tf.Variable(np.arange(8, dtype=np.float32))
    serve = tf.function(lambda x: {"y": x * module.scale}, input_signature=[tf.TensorSpec((2, 8), tf.float32, name="x")])
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": serve})
    path = tmp_path / "fixed.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(tmp_path / "sm")).convert())

    spec = parse_input_specs(["x:float32[B,8]"])
    source = KerasSource(None, SourceInfo("keras", "object"), spec, {})
    artifact = _with_fixed_axes(Artifact(format="tflite", path=path, files=[path]), ExportJob(source, {}, tmp_path, "fixed"))
    assert artifact.inputs[0].dims == (2, 8) and "fixed x axis 0" in artifact.fixed_shape_reason
    assert "fixes axis 0 of 'x' at 2" in artifact.fixed_dims_mismatch({"x": (3, 8)})

    with TfliteRunner(artifact, "cpu") as runner:
        out = runner.infer({"x": np.ones((2, 8), np.float32)})
        assert np.array_equal(out["y"], np.tile(np.arange(8, dtype=np.float32), (2, 1)))
        with pytest.raises(RuntimeError, match="only allows mutating unknown dimensions"):
            runner._infer({"x": np.ones((3, 8), np.float32)})


def test_tensorflow_is_imported_only_when_keras_work_is_touched(torch_files):
    import os
    import subprocess
    import sys

    from tests.conftest import REPO

    code = (
        "import sys, convert; result = convert.convert(sys.argv[1], to=['onnx'], isolate=False); assert result.passed; "
        "print(sorted(m for m in ('tensorflow', 'keras', 'tf2onnx') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(torch_files / "cnn.pt2")],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_savedmodel_folder_is_replaced_only_with_force(keras_files, tmp_path):
    args = [
        "fixtures.keras_models:build_subclassed",
        "--framework",
        "keras",
        "--input",
        "x:float32[B,16]",
        "--weights",
        str(keras_files / "subclassed.weights.h5"),
        "--to",
        "savedmodel",
        "--out",
        str(tmp_path),
    ]
    assert run_cli(*args).returncode == 0
    folder = tmp_path / "build_subclassed_savedmodel"
    stale = folder / "stale.txt"
    stale.write_text("from an older run")
    again = run_cli(*args)
    assert again.returncode == 2 and "--force" in again.output and stale.exists()
    forced = run_cli(*args, "--force")
    assert forced.returncode == 0, forced.output
    assert (folder / "saved_model.pb").is_file() and not stale.exists()
    assert not list(tmp_path.glob(".convert-staging-*"))


def test_tflite_falls_back_to_select_tf_ops_and_says_why_it_cannot_be_checked(tmp_path):
    """MatrixDeterminant has no TFLite builtin: the SELECT_TF_OPS strategy wins, recorded after the failed
    builtin one. The interpreter shipped with TensorFlow 2.21 has no Flex delegate, so the artifact cannot
    run there: its checks are skipped with that reason and the verdict is not a pass."""
    import keras
    import tensorflow as tf

    import convert

    class Determinant(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(4)

        def call(self, x):
            return tf.linalg.det(tf.reshape(self.dense(x), (-1, 2, 2)))

    result = convert.convert(Determinant(), inputs=["x:float32[B,6]"], to=["tflite"], out=tmp_path)
    artifact = result.report.artifacts[0]
    assert [(a.strategy, a.status) for a in artifact.attempts] == [
        ("TFLiteConverter(TFLITE_BUILTINS)", "failed"),
        ("TFLiteConverter(TFLITE_BUILTINS+SELECT_TF_OPS)", "ok"),
    ]
    assert "MatrixDeterminant" in artifact.attempts[0].error
    cpu = [c for c in artifact.checks if c.device == "cpu"]
    if all(c.status == "passed" for c in cpu):  # an interpreter with the Flex delegate linked in
        assert result.passed
    else:
        assert cpu and all(c.status == "skipped" and "Flex delegate" in c.reason for c in cpu)
        assert not result.passed and result.exit_code == 1


def test_functional_model_with_a_dict_of_inputs_keyed_unlike_its_input_names(tmp_path):
    import keras
    import numpy as np

    import convert

    zeta, alpha = keras.Input((3,), name="zeta_in"), keras.Input((None, 2), name="alpha_in")
    pooled = keras.layers.GlobalAveragePooling1D()(alpha)
    model = keras.Model({"zeta": zeta, "alpha": alpha}, keras.layers.Dense(2)(keras.layers.Concatenate()([zeta, pooled])))
    example = {"zeta_in": np.ones((2, 3), np.float32), "alpha_in": np.ones((2, 4, 2), np.float32)}
    result = convert.convert(model, example_inputs=example, to=["savedmodel", "onnx"], out=tmp_path)
    assert result.passed, [c.reason for a in result.report.artifacts for c in a.checks]
    assert set(result.report.source.inputs) == {"zeta_in:float32[B,3]", "alpha_in:float32[B,alpha_in_d1,2]"}


def test_keras_onnx_fallback_keeps_the_source_names(keras_files, tmp_path):
    """Keras's own ONNX export names its output after a graph tensor (Identity:0); the fallback renames it."""
    import numpy as np

    import convert
    from convert.exporters.base import ExportJob
    from convert.exporters.keras_onnx import KerasToOnnx
    from convert.runtimes.onnxruntime import OnnxRuntimeRunner
    from convert.validators import generate_feed

    source = convert.load(str(keras_files / "bn_dropout.keras"))
    feed = generate_feed(source.signature.inputs, {"B": 3}, 0, 0)
    source.with_outputs(tuple(source.run(feed)))
    strategies = dict(KerasToOnnx().strategies(ExportJob(source, feed, tmp_path, "fallback")))
    artifact = strategies["keras.Model.export(format='onnx')"](tmp_path / "fallback.onnx")
    assert artifact.output_names == ("output",)
    with OnnxRuntimeRunner(artifact, "cpu") as runner:
        assert np.allclose(runner.infer(feed)["output"], source.run(feed)["output"], atol=1e-5)


def test_truncated_h5_is_a_clear_error(keras_files, tmp_path):
    truncated = tmp_path / "truncated.h5"
    truncated.write_bytes((keras_files / "bn_dropout.h5").read_bytes()[:3000])
    run = run_cli(str(truncated), "--trust-code", "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "truncated or corrupt" in run.output and "Traceback" not in run.output
