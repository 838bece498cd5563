"""keras-hub models take their input specs from their config: a backbone's (or a task model's backbone's) token ids,
padding mask and segment ids share one length symbol S, bounded by max_sequence_length; token ids lie below
vocabulary_size, segment ids below num_segments, and the padding mask is drawn as one. A .keras archive of a BERT or
Gemma backbone converts with --trust-code alone, its ONNX file agrees with Keras at sizes the validation did not use, and a
model that fails on its inputs shows the library's own reason, not Keras's banner."""

from __future__ import annotations

import os

import numpy as np
import pytest

keras_hub = pytest.importorskip("keras_hub", reason="keras-hub is installed by `make install` (pip install --no-deps)")
import keras  # noqa: E402  (after the skip: keras-hub needs it)

from tests.conftest import REPO, load_report, run_cli  # noqa: E402

VOCABULARY = 100
MAX_SEQUENCE = 64
TINY_BERT = dict(
    vocabulary_size=VOCABULARY, num_layers=2, num_heads=2, hidden_dim=32, intermediate_dim=64, max_sequence_length=MAX_SEQUENCE
)
TINY_GEMMA = dict(
    vocabulary_size=VOCABULARY, num_layers=2, num_query_heads=2, num_key_value_heads=1, hidden_dim=32, intermediate_dim=64, head_dim=16
)
# the child process finds keras_hub where this one does (PYTHONPATH may hold it beside the repository)
ENV = {"PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}


def _bert():
    keras.utils.set_random_seed(0)
    return keras_hub.models.BertBackbone(**TINY_BERT)


def _gemma():
    keras.utils.set_random_seed(0)
    return keras_hub.models.GemmaBackbone(**TINY_GEMMA)


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Each backbone saved as its docs show (model.save), and converted once: name -> (model, CLI run, out folder)."""
    folder = tmp_path_factory.mktemp("keras_hub")
    runs = {}
    for name, build in (("bert", _bert), ("gemma", _gemma)):
        model = build()
        model.save(folder / f"{name}.keras")
        out = folder / f"{name}_out"
        runs[name] = model, run_cli(str(folder / f"{name}.keras"), "--trust-code", "--to", "onnx", "--out", str(out), env=ENV), out
    return runs


EXPECTED_INPUTS = {
    "bert": ["padding_mask:int32[B,S]{0..1}", "segment_ids:int32[B,S]{0..1}", f"token_ids:int32[B,S]{{0..{VOCABULARY - 1}}}"],
    "gemma": ["padding_mask:int32[B,S]{0..1}", f"token_ids:int32[B,S]{{0..{VOCABULARY - 1}}}"],
}


@pytest.mark.parametrize("name", ["bert", "gemma"])
def test_a_keras_hub_backbone_converts_with_trust_code_alone_on_inputs_from_its_config(converted, name):
    _, run, out = converted[name]
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    assert report["passed"] is True
    assert report["source"]["inputs"] == EXPECTED_INPUTS[name]
    domains = {d["name"]: d for d in report["source"]["input_domains"]}
    assert domains["token_ids"]["source"] == f"the keras-hub config's vocabulary_size ({VOCABULARY})"
    assert domains["padding_mask"]["drawn"].startswith("padding masks")
    if name == "bert":
        assert domains["segment_ids"]["source"] == "the keras-hub config's num_segments (2)"
    [artifact] = report["artifacts"]
    checks = [c for c in artifact["checks"] if c["input_shapes"]]
    assert len({c["input_shapes"]["token_ids"][1] for c in checks}) > 1  # the length moved...
    for check in checks:  # ...and every input of a check had the same one
        assert check["status"] == "passed", check
        assert len({shape[1] for shape in check["input_shapes"].values()}) == 1, check["input_shapes"]


def test_the_length_is_bounded_by_max_sequence_length_and_a_task_model_reads_its_backbones_config():
    from convert.sources.keras import _specs_from_model, keras_hub_specs

    bert = _bert()
    specs, ranges = keras_hub_specs(bert, _specs_from_model(bert))
    assert ranges == {"S": (1, MAX_SEQUENCE)}
    assert {s.name: s.dims for s in specs} == {n: ("B", "S") for n in ("padding_mask", "segment_ids", "token_ids")}
    _, gemma_ranges = keras_hub_specs(_gemma(), _specs_from_model(_gemma()))
    assert gemma_ranges == {"S": (1, None)}  # rotary positions: no config bound
    classifier = keras_hub.models.BertTextClassifier(backbone=bert, num_classes=3, preprocessor=None)
    specs, _ = keras_hub_specs(classifier, _specs_from_model(classifier))
    assert [str(s) for s in specs] == EXPECTED_INPUTS["bert"]
    tokens = keras.Input((None,), dtype="int32", name="token_ids")
    plain = keras.Model(tokens, keras.layers.Embedding(10, 2)(tokens))
    assert keras_hub_specs(plain, _specs_from_model(plain))[0] == _specs_from_model(plain)  # not keras-hub: as declared


@pytest.mark.parametrize("name", ["bert", "gemma"])
def test_the_onnx_file_matches_keras_at_a_batch_and_length_the_validation_did_not_use(converted, name):
    import onnxruntime

    model, run, out = converted[name]
    assert run.returncode == 0, run.output
    [artifact] = load_report(out / "report.json")["artifacts"]
    validated = {tuple(c["input_shapes"]["token_ids"]) for c in artifact["checks"] if c["input_shapes"]}
    batch, length = 3, 11
    assert all(b != batch and s != length for b, s in validated), validated
    rng = np.random.default_rng(11)
    feed = {
        "token_ids": rng.integers(0, VOCABULARY, size=(batch, length)).astype(np.int32),
        "padding_mask": (np.arange(length)[None, :] < np.array([[length], [6], [9]])).astype(np.int32),
        "segment_ids": (np.arange(length)[None, :] >= 5).repeat(batch, 0).astype(np.int32),
    }
    feed = {i.name: feed[i.name] for i in model.inputs}
    session = onnxruntime.InferenceSession(artifact["path"], providers=["CPUExecutionProvider"])
    got = dict(zip((o.name for o in session.get_outputs()), session.run(None, feed)))
    expected = model(feed, training=False)
    expected = expected if isinstance(expected, dict) else {model.output_names[0]: expected}
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        np.testing.assert_allclose(got[key], np.asarray(value), atol=1e-4, rtol=1e-4, err_msg=key)


def test_a_token_outside_the_vocabulary_shows_the_librarys_reason_not_keras_banner(converted, tmp_path):
    _, run, out = converted["bert"]
    given = ["padding_mask:int32[B,S]", "segment_ids:int32[B,S]{0..1}", f"token_ids:int32[B,S]{{0..{5 * VOCABULARY}}}"]
    inputs = [argument for spec in given for argument in ("--input", spec)]
    bad = run_cli(str(out.parent / "bert.keras"), "--trust-code", "--to", "onnx", "--out", str(tmp_path / "out"), *inputs, env=ENV)
    assert bad.returncode == 2, bad.output
    [error] = [line for line in bad.stderr.splitlines() if line.startswith("error:")]
    assert f"is not in [0, {VOCABULARY})" in error, error
    assert "Exception encountered" not in error and "function_node" not in error, error
