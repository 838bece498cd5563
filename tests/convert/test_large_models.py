"""Models past the 2 GB protobuf limit: an ONNX export whose weights go to external data, validated against the source,
published with every file it needs and nothing else left behind; and every ONNX pass from a base with external data
(the code paths of a large model, on a small one)."""

from __future__ import annotations

import shutil
import stat
import types
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import load_report, run_cli

WIDTH, LAYERS = 8192, 8  # with the 64-wide ends: 537,919,488 fp32 parameters, 2.15 GB, just past 2**31 bytes


def test_a_model_past_2_gb_is_exported_with_external_data_and_validated(tmp_path, monkeypatch):
    from fixtures.large_torch import write_mlp

    model, out, scratch, cache = tmp_path / "big.pt2", tmp_path / "out", tmp_path / "tmp", tmp_path / "cache"
    scratch.mkdir()
    try:
        assert write_mlp(model, WIDTH, LAYERS) * 4 > 2**31
        monkeypatch.setenv("TMPDIR", str(scratch))  # the run's temporary files go where this test can see them
        run = run_cli(str(model), "--to", "onnx", "--out", str(out), "--cache-dir", str(cache), env={"CONVERT_NO_CACHE": ""})
        assert run.returncode == 0, run.output
        artifact = next(a for a in load_report(out / "report.json")["artifacts"] if a["format"] == "onnx")
        files = [Path(f) for f in artifact["files"]]
        assert [f.name for f in files] == ["big.onnx", "big.onnx.data"]
        assert artifact["size_bytes"] == sum(f.stat().st_size for f in files) > 2**31
        cpu = [c for c in artifact["checks"] if c["runtime"] == "onnxruntime" and c["device"] == "cpu"]
        assert cpu and all(c["status"] == "passed" for c in cpu), cpu
        # real numbers were compared: outputs of zeros (or of weights never filled) would match exactly
        assert all(0 < o["max_abs_error"] < 1e-3 for c in cpu for o in c["outputs"])
        assert sorted(p.name for p in out.iterdir()) == ["big.onnx", "big.onnx.data", "report.json"]
        # onnxruntime 1.31's telemetry writes (and keeps) a session file, $TMPDIR/.ses, when it is imported
        assert [p.name for p in scratch.iterdir() if p.name != ".ses"] == []
        # the cached copy is a copy: onnx refuses to load external data with a second hard link
        cached = list(cache.glob("v1/*/*/files/big.onnx.data"))
        assert len(cached) == 1 and cached[0].stat().st_nlink == 1 and files[1].stat().st_nlink == 1
        import onnx

        onnx.load_external_data_for_model(onnx.load(str(files[0]), load_external_data=False), str(out))
    finally:  # pytest keeps the folders of its last runs: 6 GB each here
        model.unlink(missing_ok=True)
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def _mlp_with_external_data(folder: Path):
    """x[B,64] -> MatMul -> Relu -> MatMul -> y[B,64], its weights in model.onnx.data; the artifact and its weights."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from convert.backends.onnx import onnx_artifact
    from convert.specs import parse_input_spec

    rng = np.random.default_rng(0)
    weights = [rng.standard_normal((64, 64), dtype=np.float32) / 8 for _ in range(2)]
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w0"], ["h"]),
            helper.make_node("Relu", ["h"], ["r"]),
            helper.make_node("MatMul", ["r", "w1"], ["y"]),
        ],
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 64])],
        [numpy_helper.from_array(w, f"w{i}") for i, w in enumerate(weights)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)  # newest onnx defaults past what ORT reads
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    artifact = onnx_artifact(path)
    artifact.inputs = (parse_input_spec("x:float32[B,64]"),)
    return artifact, weights


@pytest.mark.parametrize("name", ["simplify", "fp16", "int8", "int8-dynamic", "int4", "int8-weights"])
def test_every_onnx_pass_takes_a_base_with_external_data(tmp_path, name):
    from convert.optimizers.base import OptimizeJob
    from convert.registry import REGISTRY
    from convert.runtimes.onnxruntime import OnnxRuntimeRunner
    from convert.specs import SourceSignature

    base, weights = _mlp_with_external_data(tmp_path)
    staging = tmp_path / "staging"
    staging.mkdir()
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((2, 64), dtype=np.float32)} for _ in range(4)]
    source = types.SimpleNamespace(signature=SourceSignature(inputs=base.inputs, outputs=("y",)), precision="fp32")
    job = OptimizeJob(source=source, feed=feeds[0], folder=staging, stem="model", base=base, calibration=feeds)
    outcome = REGISTRY.get("optimizer", name).load()().export(job)
    assert outcome.artifact is not None, outcome.primary_error
    artifact = outcome.artifact
    assert outcome.attempts[0].status == "ok", outcome.primary_error  # the first strategy, not a fallback
    # INT8 of a base with external data keeps its weights there too; the others are small enough for one file
    data = [f.name for f in artifact.files[1:]]
    assert data == ([f"{artifact.path.name}.data"] if name in ("int8", "int8-dynamic") else [])
    assert sorted(p.name for p in staging.iterdir()) == sorted(f.name for f in artifact.files)  # no temporary left
    for file in artifact.files:  # onnx writes external data 0600; the artifact's files are readable alike
        assert stat.S_IMODE(file.stat().st_mode) == stat.S_IMODE(artifact.path.stat().st_mode)
    with OnnxRuntimeRunner(artifact, "cpu") as runner:
        actual = runner.infer(feeds[1])["y"]
    expected = np.maximum(feeds[1]["x"] @ weights[0], 0) @ weights[1]
    cosine = float(np.dot(actual.ravel(), expected.ravel()) / np.linalg.norm(actual) / np.linalg.norm(expected))
    assert cosine > (0.999999 if name == "simplify" else 0.99), cosine


def _decoder_block_with_external_data(folder: Path):
    """x[B,256] -> MatMul w1 -> + shift -> MatMul w3 -> Gemm(w2ᵀ, b2, alpha 0.5) -> Gemm(w4) -> y[B,64], every tensor
    in model.onnx.data: two MatMul weights read from the file, a Gemm whose weight is rewritten (transposed, scaled), one
    whose weight serves as it is (GPT-2's Conv1D), and a tensor no pass touches. w1 is also a graph input (a weight the
    caller may replace), as older exporters declared every initializer."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from convert.backends.onnx import onnx_artifact
    from convert.specs import parse_input_spec

    rng = np.random.default_rng(0)
    tensors = {
        "w1": rng.standard_normal((256, 512), dtype=np.float32) / 16,
        "shift": rng.standard_normal(512, dtype=np.float32),
        "w3": rng.standard_normal((512, 512), dtype=np.float32) / 22,
        "w2": rng.standard_normal((128, 512), dtype=np.float32) / 22,
        "b2": rng.standard_normal(128, dtype=np.float32),
        "w4": rng.standard_normal((128, 64), dtype=np.float32) / 11,
    }
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w1"], ["h"], name="up"),
            helper.make_node("Add", ["h", "shift"], ["shifted"], name="shift"),
            helper.make_node("MatMul", ["shifted", "w3"], ["mixed"], name="mix"),
            helper.make_node("Gemm", ["mixed", "w2", "b2"], ["down"], name="down", transB=1, alpha=0.5),
            helper.make_node("Gemm", ["down", "w4"], ["y"], name="out"),
        ],
        "block",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 256]),
            helper.make_tensor_value_info("w1", TensorProto.FLOAT, [256, 512]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 64])],
        [numpy_helper.from_array(values, name) for name, values in tensors.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    path = folder / "model.onnx"
    onnx.save(model, str(path), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    artifact = onnx_artifact(path)
    artifact.inputs = (parse_input_spec("x:float32[B,256]"),)
    return artifact


def test_int4_reads_one_weight_at_a_time_and_makes_what_onnx_runtimes_whole_model_quantizer_makes(tmp_path, monkeypatch):
    """The weight-only passes do not load a model's weights together: each MatMul's weight is read from the base's
    external data as ONNX Runtime quantizes it (all but a Gemm's transposed weight, rewritten in memory), and the
    artifact is written tensor by tensor. What comes out runs exactly as ONNX Runtime's own quantizer's artifact of the
    fully loaded model, and declares the same inputs."""
    import hashlib

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantizer, MatMulNBitsQuantizer

    from convert.backends.onnx import MAPPED_ALIGNMENT, MAPPED_TENSOR_BYTES, save_onnx
    from convert.optimizers import onnx_quant
    from convert.optimizers.base import OptimizeJob
    from convert.registry import REGISTRY
    from convert.runtimes.onnxruntime import OnnxRuntimeRunner
    from convert.specs import SourceSignature

    base_folder, staging = tmp_path / "base", tmp_path / "staging"
    base_folder.mkdir(), staging.mkdir()
    base = _decoder_block_with_external_data(base_folder)
    before = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in base.files}
    loaded_at_each_quantization = []
    quantize_matmul = DefaultWeightOnlyQuantizer.quantize_matmul

    def counting(self, node, graph_stack):
        in_memory = {t.name for graph in graph_stack for t in graph.initializer if t.name in ("w1", "w3", "w4") and t.raw_data}
        loaded_at_each_quantization.append(in_memory)
        return quantize_matmul(self, node, graph_stack)

    monkeypatch.setattr(DefaultWeightOnlyQuantizer, "quantize_matmul", counting)
    feed = {"x": np.random.default_rng(1).standard_normal((3, 256), dtype=np.float32)}
    source = types.SimpleNamespace(signature=SourceSignature(inputs=base.inputs, outputs=("y",)), precision="fp32")
    job = OptimizeJob(source=source, feed=feed, folder=staging, stem="model", base=base, weight_group_size=32)
    outcome = REGISTRY.get("optimizer", "int4").load()().export(job)
    assert outcome.artifact is not None, outcome.primary_error
    # the rewritten Gemm weight was made in memory; the others were each read alone
    assert loaded_at_each_quantization == [{"w1"}, {"w3"}, set(), {"w4"}]
    assert {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in base.files} == before
    artifact = outcome.artifact
    assert [f.name for f in artifact.files] == ["model.int4.onnx", "model.int4.onnx.data"]
    written = onnx.load(str(artifact.path), load_external_data=False)
    placed = {t.name: {e.key: int(e.value) for e in t.external_data if e.key != "location"} for t in written.graph.initializer}
    inline = {t.name: len(t.raw_data) for t in written.graph.initializer if not placed[t.name]}
    assert all(size < 1024 for size in inline.values()), inline  # a tensor of a kilobyte or more is in the data file
    assert [i.name for i in written.graph.input] == ["x"]  # ONNX Runtime drops a quantized weight from the inputs
    assert all(p["offset"] % MAPPED_ALIGNMENT == 0 for p in placed.values() if p and p["length"] >= MAPPED_TENSOR_BYTES)

    monkeypatch.setattr(DefaultWeightOnlyQuantizer, "quantize_matmul", quantize_matmul)
    whole = onnx.load(str(base.path))
    onnx_quant._gemms_as_matmuls(whole.graph, base_folder)
    reference = MatMulNBitsQuantizer(whole, bits=4, block_size=32, is_symmetric=False, accuracy_level=4)
    reference.process()
    save_onnx(reference.model.model, tmp_path / "reference.onnx")
    assert [i.name for i in reference.model.model.graph.input] == ["x"]
    with OnnxRuntimeRunner(artifact, "cpu") as runner:
        streamed = runner.infer(feed)["y"]
    with OnnxRuntimeRunner(onnx_quant.onnx_artifact(tmp_path / "reference.onnx"), "cpu") as runner:
        expected = runner.infer(feed)["y"]
    assert np.array_equal(streamed, expected)


def test_save_onnx_puts_weights_past_the_threshold_in_one_fresh_data_file(tmp_path, monkeypatch):
    import onnx

    from convert.backends import onnx as onnx_backend

    base, weights = _mlp_with_external_data(tmp_path)
    model = onnx.load(str(base.path))  # the weights loaded into memory, as an optimizer has them
    monkeypatch.setattr(onnx_backend, "EXTERNAL_DATA_THRESHOLD", sum(w.nbytes for w in weights) - 1)
    path = tmp_path / "saved.onnx"
    (tmp_path / "saved.onnx.data").write_bytes(b"left by an earlier attempt")  # onnx would append to it
    onnx_backend.save_onnx(model, path)
    artifact = onnx_backend.onnx_artifact(path)
    assert [f.name for f in artifact.files] == ["saved.onnx", "saved.onnx.data"]
    assert artifact.files[1].stat().st_size == sum(w.nbytes for w in weights)
    reloaded = onnx.load(str(path))
    assert all(np.array_equal(onnx.numpy_helper.to_array(t), w) for t, w in zip(reloaded.graph.initializer, weights))


def test_save_onnx_streamed_copies_external_tensors_and_places_large_ones_where_they_can_be_mapped(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from convert.backends.onnx import MAPPED_ALIGNMENT, save_onnx_streamed

    rng = np.random.default_rng(0)
    values = {"small": rng.standard_normal(300, dtype=np.float32), "large": rng.standard_normal(300_000, dtype=np.float32)}
    graph = helper.make_graph(
        [helper.make_node("Add", ["small", "small"], ["y"]), helper.make_node("Identity", ["large"], ["z"])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [300]), helper.make_tensor_value_info("z", TensorProto.FLOAT, [300_000])],
        [numpy_helper.from_array(v, name) for name, v in values.items()],
    )
    base = tmp_path / "base"
    base.mkdir()
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    onnx.save(model, str(base / "model.onnx"), save_as_external_data=True, location="model.onnx.data", size_threshold=0)
    before = (base / "model.onnx.data").read_bytes()
    held = onnx.load(str(base / "model.onnx"), load_external_data=False)
    held.graph.initializer.append(numpy_helper.from_array(np.arange(1000, dtype=np.float32), "made"))  # made in memory
    save_onnx_streamed(held, tmp_path / "out.onnx", base)
    written = onnx.load(str(tmp_path / "out.onnx"), load_external_data=False)
    placed = {t.name: {e.key: e.value for e in t.external_data} for t in written.graph.initializer}
    assert {p["location"] for p in placed.values()} == {"out.onnx.data"} and int(placed["large"]["offset"]) % MAPPED_ALIGNMENT == 0
    reloaded = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(tmp_path / "out.onnx")).graph.initializer}
    assert all(np.array_equal(reloaded[name], v) for name, v in values.items())
    assert np.array_equal(reloaded["made"], np.arange(1000, dtype=np.float32))
    assert (base / "model.onnx.data").read_bytes() == before
    # written over the file its weights are read from, the model would lose them: refused before anything is opened
    with pytest.raises(ValueError, match="write the model to another name"):
        save_onnx_streamed(onnx.load(str(base / "model.onnx"), load_external_data=False), base / "model.onnx", base)
    assert (base / "model.onnx.data").read_bytes() == before


def test_openvino_reads_weights_from_their_file_only_where_they_take_more_than_half_the_memory(tmp_path, monkeypatch):
    """read_model maps the ONNX weights (a model larger than memory converts); convert_model copies them, transposed
    into the layout the CPU's matrix products read fastest. Which one ran is in the strategy and the cache key."""
    from convert import memory
    from convert.optimizers.base import OptimizeJob
    from convert.optimizers.openvino import OpenVinoInt4Weights

    base, _ = _mlp_with_external_data(tmp_path)
    job = OptimizeJob(source=None, feed={}, folder=tmp_path, stem="model", base=base)
    weights = sum(f.stat().st_size for f in base.files)
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * weights + 2)
    assert OpenVinoInt4Weights.variant(job) == "" and OpenVinoInt4Weights().strategies(job)[0][0].startswith("openvino.convert_model")
    monkeypatch.setattr(memory, "available_bytes", lambda: 2 * weights - 2)
    assert OpenVinoInt4Weights.variant(job) == "read_model"
    assert OpenVinoInt4Weights().strategies(job)[0][0].startswith("openvino.Core().read_model")
