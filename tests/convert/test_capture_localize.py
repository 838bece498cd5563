"""A model whose one module computes otherwise only while torch.onnx exports it (a branch on
torch.onnx.is_in_onnx_export(), as tracing-time Python state does) fails, and its report names that module and the link
(capture): each module's output in the source model, run eagerly, is compared with its value in the program the
exporter captured, in the order the modules finish, and the first that departs is named. Shown on a stack of blocks
(the model the issue describes), on transformers' own BERT with one layer's output patched, and on a functional Keras
model one of whose layers computes otherwise when tf.function traces it (tf2onnx converts that trace)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import load_report, run_cli

STACK = """
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.nn.functional.gelu(self.linear(x))


class ShiftedWhileExported(Block):
    def forward(self, x):
        y = super().forward(x)
        return y * 1.1 if torch.onnx.is_in_onnx_export() else y


class ScaledWhileExported(Block):
    def forward(self, x):
        y = super().forward(x)
        return y * 1.1 if torch.compiler.is_exporting() else y


class ScaledWhileTraced(Block):
    def forward(self, x):
        y = super().forward(x)
        return y * 1.1 if torch.jit.is_tracing() else y


class Stack(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(16), Block(16), ShiftedWhileExported(16), Block(16))
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.blocks(self.embed(x)))


def build():
    torch.manual_seed(0)
    return Stack().eval()


def build_for_torch_export():
    model = build()
    model.blocks[2] = ScaledWhileExported(16)
    return model.eval()


def build_for_torchscript():
    model = build()
    model.blocks[2] = ScaledWhileTraced(16)
    return model.eval()
"""

BERT = """
import torch
import transformers


def build():
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64, max_position_embeddings=64
    )
    model = transformers.BertModel(config, add_pooling_layer=False).eval()
    output = model.encoder.layer[1].output
    plain = output.forward

    def forward(hidden_states, input_tensor):
        result = plain(hidden_states, input_tensor)
        return result + 0.5 if torch.onnx.is_in_onnx_export() else result

    output.forward = forward
    return model
"""


KERAS = """
import keras
import tensorflow as tf


class ScaledWhileTraced(keras.layers.Layer):
    def call(self, x):
        return x if tf.executing_eagerly() else x * 1.1


def build():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8,), name="x")
    hidden = keras.layers.Dense(16, activation="gelu", name="embed")(inputs)
    hidden = keras.layers.Dense(16, activation="gelu", name="block_0")(hidden)
    hidden = ScaledWhileTraced(name="block_1")(hidden)
    hidden = keras.layers.Dense(16, activation="gelu", name="block_2")(hidden)
    return keras.Model(inputs, keras.layers.Dense(4, name="head")(hidden))
"""

JAX = """
import jax
from flax import nnx


class Block(nnx.Module):
    def __init__(self, width, rngs):
        self.linear = nnx.Linear(width, width, rngs=rngs)

    def __call__(self, x):
        return x + nnx.gelu(self.linear(x))


class SpecialisedOnItsBatch(Block):
    # a path taken only when the batch size is a concrete number, as code specialised on sizes does: the export
    # traces the batch as a symbolic dim and captures the other path
    def __call__(self, x):
        y = super().__call__(x)
        return y * 1.1 if jax.core.is_constant_dim(x.shape[0]) else y


class Stack(nnx.Module):
    def __init__(self, rngs):
        self.embed = nnx.Linear(8, 16, rngs=rngs)
        self.first = Block(16, rngs)
        self.second = SpecialisedOnItsBatch(16, rngs)
        self.head = nnx.Linear(16, 4, rngs=rngs)

    def __call__(self, x):
        x = self.embed(x)
        x = self.first(x)
        x = self.second(x)
        return self.head(x)


def build():
    return Stack(nnx.Rngs(0))
"""


def _assert_the_capture_link_made_it(out: Path, console: str) -> None:
    """The chain's figures, measured apart from the localisation, say the same: the captured program departs from the
    source, and the graph computes what that program does."""
    (onnx,) = [a for a in load_report(out / "report.json")["artifacts"] if a["format"] == "onnx"]
    capture, conversion = next(d for d in onnx["details"] if d["kind"] == "chain")["links"]
    assert (capture["link"], capture["status"], capture["within_tolerance"]) == ("capture", "measured", False), capture
    assert capture["max_abs_error"] > 1e-2
    assert (conversion["link"], conversion["status"], conversion["within_tolerance"]) == ("conversion", "measured", True), conversion
    assert conversion["max_abs_error"] < 1e-4
    assert "(out of tolerance), conversion" in console


def _divergence(out: Path) -> dict:
    report = load_report(out / "report.json")
    (onnx,) = [a for a in report["artifacts"] if a["format"] == "onnx"]
    assert not onnx["passed"]
    return next(d for d in onnx["details"] if d["kind"] == "divergence")


def test_the_module_that_differs_only_while_exported_is_named_with_the_capture_link(tmp_path):
    (tmp_path / "nets.py").write_text(STACK)
    run = run_cli(f"{tmp_path / 'nets.py'}:build", "--input", "x:float32[B,8]", "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 1, run.output
    divergence = _divergence(tmp_path / "out")
    assert (divergence["status"], divergence["stage"], divergence["layer"]) == ("found", "capture", "blocks.2 (ShiftedWhileExported)")
    # every module that finished before it agrees, its own child included; the one after it is not compared
    compared = [(p["value"], p["status"]) for p in divergence["probes"]]
    assert compared == [
        ("embed (Linear)", "passed"),
        ("blocks.0.linear (Linear)", "passed"),
        ("blocks.0 (Block)", "passed"),
        ("blocks.1.linear (Linear)", "passed"),
        ("blocks.1 (Block)", "passed"),
        ("blocks.2.linear (Linear)", "passed"),
        ("blocks.2 (ShiftedWhileExported)", "failed"),
    ]
    assert "first in blocks.2 (ShiftedWhileExported)" in run.stdout
    _assert_the_capture_link_made_it(tmp_path / "out", run.stdout)


def test_a_transformers_layer_that_differs_only_while_exported_is_named(tmp_path):
    (tmp_path / "bert.py").write_text(BERT)
    args = ("--input", "input_ids:int64[B,S]", "--input", "attention_mask:int64[B,S]", "--to", "onnx", "--out", str(tmp_path / "out"))
    run = run_cli(f"{tmp_path / 'bert.py'}:build", *args)
    assert run.returncode == 1, run.output
    divergence = _divergence(tmp_path / "out")
    assert (divergence["stage"], divergence["layer"]) == ("capture", "encoder.layer.1.output (BertOutput)"), divergence["probes"]
    passed = [p["value"] for p in divergence["probes"] if p["status"] == "passed"]
    assert "encoder.layer.0 (BertLayer)" in passed and "encoder.layer.1.output.LayerNorm (LayerNorm)" in passed


def test_a_keras_layer_that_differs_only_when_traced_is_named(tmp_path):
    """tf2onnx's grappler pass folds block_1's constant into block_0's GELU, so no tensor of the frozen graph is
    block_0's output: that layer is not compared (not blamed), and block_1, whose one output leaves it, is named."""
    (tmp_path / "nets.py").write_text(KERAS)
    args = ("--framework", "keras", "--input", "x:float32[B,8]", "--to", "onnx,tflite", "--out", str(tmp_path / "out"))
    run = run_cli(f"{tmp_path / 'nets.py'}:build", *args)
    assert run.returncode == 1, run.output
    # the TFLite converter traces the same tf.function: that model fails too, and its values are not traced
    (tflite,) = [a for a in load_report(tmp_path / "out" / "report.json")["artifacts"] if a["format"] == "tflite"]
    skipped = next(d for d in tflite["details"] if d["kind"] == "divergence")
    assert not tflite["passed"] and skipped["status"] == "skipped" and "not tflite artifacts" in skipped["reason"]
    divergence = _divergence(tmp_path / "out")
    assert (divergence["stage"], divergence["layer"]) == ("capture", "block_1 (ScaledWhileTraced)"), divergence["probes"]
    assert [(p["value"], p["status"]) for p in divergence["probes"]] == [
        ("embed (Dense)", "passed"),
        ("block_1 (ScaledWhileTraced)", "failed"),
    ]
    assert "first in block_1 (ScaledWhileTraced)" in run.stdout
    _assert_the_capture_link_made_it(tmp_path / "out", run.stdout)


def test_a_jax_module_that_differs_only_while_exported_is_named_with_the_capture_link(tmp_path):
    """jax2onnx traces the model at symbolic shapes; the module call whose result departs there from the program
    traced at the concrete shapes (the reference's) is named, by the line that called it."""
    (tmp_path / "nets.py").write_text(JAX)
    args = ("--framework", "jax", "--input", "x:float32[B,8]", "--to", "onnx", "--out", str(tmp_path / "out"))
    run = run_cli(f"{tmp_path / 'nets.py'}:build", *args)
    assert run.returncode == 1, run.output
    line = next(i for i, text in enumerate(JAX.splitlines(), 1) if "self.second(x)" in text)
    named = f"SpecialisedOnItsBatch.__call__ (called at Stack.__call__, line {line})"
    divergence = _divergence(tmp_path / "out")
    assert (divergence["status"], divergence["stage"], divergence["layer"]) == ("found", "capture", named), divergence["probes"]
    assert [p["status"] for p in divergence["probes"]][-1] == "failed"
    assert all(p["status"] == "passed" for p in divergence["probes"][:-1]) and len(divergence["probes"]) > 3
    assert f"first in {named}" in run.stdout
    _assert_the_capture_link_made_it(tmp_path / "out", run.stdout)


def test_a_torch_export_program_is_localised_module_by_module(tmp_path):
    """A .pt2 is the captured program itself: its modules, run node by node, beside the source's run eagerly."""
    (tmp_path / "nets.py").write_text(STACK)
    args = ("--input", "x:float32[B,8]", "--to", "torch_export,executorch", "--out", str(tmp_path / "out"))
    run = run_cli(f"{tmp_path / 'nets.py'}:build_for_torch_export", *args)
    assert run.returncode == 1, run.output
    report = load_report(tmp_path / "out" / "report.json")
    program, edge = report["artifacts"]
    divergence = next(d for d in program["details"] if d["kind"] == "divergence")
    assert (divergence["stage"], divergence["layer"]) == ("capture", "blocks.2 (ScaledWhileExported)"), divergence
    assert [p["status"] for p in divergence["probes"]] == ["passed"] * 6 + ["failed"]
    assert "first in blocks.2 (ScaledWhileExported)" in run.stdout
    # the .pte, lowered from the same program, fails as well; its values are not traced, and the report says so
    assert edge["format"] == "executorch" and not edge["passed"]
    skipped = next(d for d in edge["details"] if d["kind"] == "divergence")
    assert skipped["status"] == "skipped" and "not executorch artifacts" in skipped["reason"]


def test_a_torchscript_archive_is_localised_module_by_module(tmp_path):
    """A TorchScript archive is the program torch.jit.trace captured: each of its submodules runs on the inputs its
    eager twin received, beside that twin's output, and the first that departs is named."""
    (tmp_path / "nets.py").write_text(STACK)
    args = ("--input", "x:float32[B,8]", "--to", "torchscript", "--out", str(tmp_path / "out"))
    run = run_cli(f"{tmp_path / 'nets.py'}:build_for_torchscript", *args)
    assert run.returncode == 1, run.output
    (archive,) = load_report(tmp_path / "out" / "report.json")["artifacts"]
    divergence = next(d for d in archive["details"] if d["kind"] == "divergence")
    assert (divergence["status"], divergence["stage"], divergence["layer"]) == ("found", "capture", "blocks.2 (ScaledWhileTraced)")
    assert [p["status"] for p in divergence["probes"]] == ["passed"] * 6 + ["failed"], divergence["probes"]
    assert divergence["method"].startswith("the TorchScript archive")
    assert "first in blocks.2 (ScaledWhileTraced)" in run.stdout
