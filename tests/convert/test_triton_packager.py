"""`--package triton` end to end, through the command line, on the suite's CNN, BERT folder and GPT-2 decoder (ONNX,
TorchScript and OpenVINO artifacts): the repository parses with Triton's ModelConfig schema and passes its checks, and,
independently of the packager, each model file loads in its platform's own runtime (ONNX Runtime, OpenVINO, LibTorch)
with the inputs and outputs its config.pbtxt declares, and runs at a batch size validation did not use.

No Triton server runs here (no container engine; the tritonserver wheel needs the NGC image's libraries): the runtimes
Triton's backends are built on stand in for it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from convert.packagers.base import PackageJob, PackedArtifact
from convert.packagers.triton import CONFIG, TritonRepository
from convert.reports import model as rm
from tests.conftest import load_report, run_cli

UNVALIDATED_BATCH = 3  # validation moves B through 2, 1 and 5
NUMPY_TYPES = {"TYPE_FP32": "float32", "TYPE_FP16": "float16", "TYPE_INT64": "int64", "TYPE_INT32": "int32", "TYPE_BOOL": "bool"}
ORT_TYPES = {
    "tensor(float)": "float32",
    "tensor(float16)": "float16",
    "tensor(int64)": "int64",
    "tensor(int32)": "int32",
    "tensor(bool)": "bool",
}


@dataclass
class Converted:
    name: str
    returncode: int
    output: str
    out: Path
    report: dict

    def package(self) -> dict:
        return next(p for p in self.report["packages"] if p["packager"] == "triton")

    def repository(self) -> Path:
        return Path(self.package()["path"])


@pytest.fixture(scope="module", params=["cnn", "bert", "gpt2"])
def converted(request, tmp_path_factory) -> Converted:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "cnn":
        source = ("fixtures.torch_models:build_cnn", "--trust-code", "--input", "x:float32[B,3,32,32]")
    else:
        from fixtures.transformers_folders import write_folder

        source = (str(write_folder(request.param, root / request.param)),)
    out = root / "out"
    done = run_cli(*source, "--to", "onnx,torchscript", "--optimize", "openvino", "--package", "triton", "--out", str(out))
    return Converted(request.param, done.returncode, done.output, out, load_report(out / "report.json"))


def _config(path: Path):
    from google.protobuf import text_format

    from convert.packagers.triton_model_config_pb2 import ModelConfig

    return text_format.Parse(path.read_text(), ModelConfig())


def _type(tensor) -> str:
    from convert.packagers.triton_model_config_pb2 import DataType

    return NUMPY_TYPES[DataType.Name(tensor.data_type)]


def _index(tensor) -> int:
    return int(tensor.name.rpartition("__")[2])


def test_the_repository_parses_with_triton_s_schema_and_passes_its_checks(converted):
    package = converted.package()
    failed = {c["name"]: c["reason"] for c in package["checks"] if c["status"] != "passed"}
    stem = "build_cnn" if converted.name == "cnn" else converted.name
    assert failed == {} and converted.returncode == 0, converted.output
    assert converted.repository() == converted.out / f"{stem}.triton"
    assert {a["key"] for a in package["artifacts"]} == {"onnx", "torchscript", "openvino"}
    for key in ("onnx", "torchscript", "openvino"):
        config = _config(converted.repository() / key / CONFIG)
        assert config.name == key and len(config.input) == len(converted.report["source"]["inputs"])
        assert config.max_batch_size == 5 and config.HasField("dynamic_batching")  # B ran at 2, 1, 5 and is unbounded


def test_the_torchscript_returns_a_tensor_or_a_flat_tuple_as_triton_s_libtorch_backend_takes(converted):
    """Triton's LibTorch backend refuses a forward() returning a dict ("It should not be a List / Dictionary of
    Tensors"), which is what a transformers model returns (a ModelOutput): the archive returns its outputs flat."""
    import torch

    module = torch.jit.load(str(converted.repository() / "torchscript" / "1" / "model.pt"))
    returns = str(module.forward.schema.returns[0].type)
    assert returns == "Tensor" or returns.startswith("Tuple[Tensor"), returns
    assert "Dict" not in returns and "List" not in returns, returns


def _feed(config, check: dict, names: list[str], batched: bool) -> dict[str, np.ndarray]:
    """A validated case's shapes (``check``'s, by the source's input names, in ``names`` order of the config's inputs)
    with the batch dim moved to a size validation did not use, filled with values every input's domain takes."""
    rng = np.random.default_rng(0)
    feed = {}
    for tensor, name in zip(config.input, names):
        shape = list(check["input_shapes"][name])
        if batched:
            shape[0] = UNVALIDATED_BATCH
        dtype = _type(tensor)
        feed[tensor.name] = rng.standard_normal(shape).astype(dtype) if dtype.startswith("float") else np.ones(shape, dtype)
    return feed


def _assert_outputs_as_configured(config, results: dict[str, np.ndarray], batched: bool) -> None:
    assert set(results) == {t.name for t in config.output}
    for tensor in config.output:
        shape = results[tensor.name].shape
        if batched:
            assert shape[0] == UNVALIDATED_BATCH, (tensor.name, shape)
            shape = shape[1:]
        assert len(shape) == len(tensor.dims) and all(d in (-1, s) for d, s in zip(tensor.dims, shape)), (tensor.name, shape, tensor.dims)
        assert str(results[tensor.name].dtype) == _type(tensor)


def _case(converted: Converted, key: str) -> dict:
    artifact = next(a for a in converted.report["artifacts"] if a["format"] == key)
    check = next(c for c in artifact["checks"] if c["status"] == "passed" and c["kind"] == "shape")
    assert UNVALIDATED_BATCH not in {c["input_shapes"][next(iter(c["input_shapes"]))][0] for c in artifact["checks"] if c["input_shapes"]}
    return check


def test_onnx_runtime_loads_the_onnx_model_as_configured_and_runs_it_at_another_batch(converted):
    import onnxruntime

    config = _config(converted.repository() / "onnx" / CONFIG)
    batched = config.max_batch_size > 0
    session = onnxruntime.InferenceSession(str(converted.repository() / "onnx" / "1" / "model.onnx"))
    for declared, configured in ((session.get_inputs(), config.input), (session.get_outputs(), config.output)):
        by_name = {d.name: d for d in declared}
        assert set(by_name) == {t.name for t in configured}
        for tensor in configured:
            assert ORT_TYPES[by_name[tensor.name].type] == _type(tensor)
            assert len(by_name[tensor.name].shape) == len(tensor.dims) + batched
    feed = _feed(config, _case(converted, "onnx"), [t.name for t in config.input], batched)
    results = dict(zip([o.name for o in session.get_outputs()], session.run(None, feed)))
    _assert_outputs_as_configured(config, results, batched)


def test_openvino_loads_the_ir_as_configured_and_runs_it_at_another_batch(converted):
    """Triton's OpenVINO backend matches a config's names to each port's get_any_name()."""
    import openvino

    config = _config(converted.repository() / "openvino" / CONFIG)
    batched = config.max_batch_size > 0
    core = openvino.Core()
    model = core.read_model(str(converted.repository() / "openvino" / "1" / "model.xml"))
    for ports, configured in ((model.inputs, config.input), (model.outputs, config.output)):
        by_name = {p.get_any_name(): p for p in ports}
        assert set(by_name) == {t.name for t in configured}
        for tensor in configured:
            assert str(np.dtype(by_name[tensor.name].get_element_type().to_dtype())) == _type(tensor)
            assert by_name[tensor.name].get_partial_shape().rank.get_length() == len(tensor.dims) + batched
    feed = _feed(config, _case(converted, "openvino"), [t.name for t in config.input], batched)
    compiled = core.compile_model(model, "CPU")
    results = {port.get_any_name(): value for port, value in compiled(feed).items()}
    _assert_outputs_as_configured(config, results, batched)


def test_libtorch_s_names_call_the_torchscript_as_configured_at_another_batch(converted):
    """LibTorch's <name>__<index>: the inputs passed in index order, the outputs taken from the returned tensor or tuple
    by index."""
    import torch

    config = _config(converted.repository() / "torchscript" / CONFIG)
    batched = config.max_batch_size > 0
    module = torch.jit.load(str(converted.repository() / "torchscript" / "1" / "model.pt"))
    assert len(module.forward.schema.arguments) - 1 == len(config.input)
    inputs = sorted(config.input, key=_index)
    assert [_index(t) for t in inputs] == list(range(len(inputs)))
    source_names = [spec.split(":")[0] for spec in converted.report["source"]["inputs"]]
    feed = _feed(config, _case(converted, "torchscript"), [source_names[_index(t)] for t in config.input], batched)
    with torch.inference_mode():
        returned = module(*(torch.from_numpy(feed[t.name]) for t in inputs))
    returned = returned if isinstance(returned, tuple) else (returned,)
    assert sorted(_index(t) for t in config.output) == list(range(len(returned)))
    results = {t.name: returned[_index(t)].numpy() for t in config.output}
    _assert_outputs_as_configured(config, results, batched)


def test_its_onnx_and_openvino_artifacts_make_a_repository_that_passes_every_check(converted, tmp_path):
    """The repository of the artifacts Triton can serve as they are: the ONNX and OpenVINO ones, as validated."""
    report = rm.Report.model_validate(converted.report)
    artifacts = tuple(
        PackedArtifact(r.key, r.format, r.precision, Path(r.path), tuple(map(Path, r.files)), r.sha256)
        for r in report.artifacts
        if r.format in ("onnx", "openvino")
    )
    job = PackageJob(folder=tmp_path, stem="served", artifacts=artifacts, report=report)
    packager = TritonRepository()
    checks = packager.check(packager.build(job), job)
    assert [c.name for c in checks if c.status != "passed"] == [], checks
    assert len(checks) == 2 * 6  # config, io, batch, dims, files, digest of each


def test_the_gate_publishes_a_repository_of_what_it_promotes(tmp_path):
    """A policy that requires a Triton repository: `convert gate` builds it from the artifacts it promotes, publishes
    it beside them, and promotes only where every check of it passed."""
    import yaml

    policy = tmp_path / "promotion.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "model": {"path": "fixtures.torch_models:build_cnn", "inputs": ["x:float32[B,3,32,32]"]},
                "require": {"targets": ["onnx"], "optimizations": ["openvino"], "packages": ["triton"]},
                "out": "out",
            },
            sort_keys=False,
        )
    )
    run = run_cli("gate", str(policy))
    assert run.returncode == 0, run.output
    report = load_report(tmp_path / "out" / "report.json")
    assert report["gate"]["promoted"] is True
    (package,) = report["packages"]
    assert package["packager"] == "triton" and package["passed"] and package["path"] == str(tmp_path / "out" / "build_cnn.triton")
    assert {a["key"] for a in package["artifacts"]} == {"onnx", "openvino"}
    assert all(c["status"] == "passed" for c in package["checks"])
    assert sorted(p.name for p in (tmp_path / "out" / "build_cnn.triton").iterdir()) == ["onnx", "openvino"]


def _eager_case(converted: Converted) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """A case at sizes validation did not use (batch 3; BERT's sequence 9 with a padded row; GPT-2's 4 new tokens after
    a 13-token past from its own prefill), by the source's input names, and the library's own eager outputs for it."""
    import torch
    import transformers

    from fixtures.transformers_folders import SEED, VOCAB

    rng = np.random.default_rng(SEED)
    if converted.name == "cnn":
        from fixtures.torch_models import build_cnn

        feed = {"x": rng.standard_normal((UNVALIDATED_BATCH, 3, 32, 32)).astype(np.float32)}
        with torch.inference_mode():
            return feed, {"output": build_cnn().eval()(torch.from_numpy(feed["x"])).numpy()}
    folder = Path(converted.report["source"]["path"])
    kind = transformers.BertForMaskedLM if converted.name == "bert" else transformers.GPT2LMHeadModel
    model, loading = kind.from_pretrained(folder, output_loading_info=True)
    assert not any(loading.values()), loading  # every weight is the folder's: none dropped, none freshly initialised
    model.eval()
    if converted.name == "bert":
        mask = np.ones((UNVALIDATED_BATCH, 9), dtype=np.int64)
        mask[1, 6:] = 0
        feed = {
            "input_ids": rng.integers(0, VOCAB, (UNVALIDATED_BATCH, 9)),
            "attention_mask": mask,
            "token_type_ids": rng.integers(0, 2, (UNVALIDATED_BATCH, 9)),
        }
        with torch.inference_mode():
            return feed, {"logits": model(**{n: torch.from_numpy(v) for n, v in feed.items()}).logits.numpy()}
    past, new = 13, 4
    prompt, ids = rng.integers(0, VOCAB, (UNVALIDATED_BATCH, past)), rng.integers(0, VOCAB, (UNVALIDATED_BATCH, new))
    mask = np.ones((UNVALIDATED_BATCH, past + new), dtype=np.int64)
    positions = np.broadcast_to(np.arange(past, past + new), ids.shape).astype(np.int64)
    with torch.inference_mode():
        cache = model(input_ids=torch.from_numpy(prompt), use_cache=True).past_key_values
        feed = {"input_ids": ids, "attention_mask": mask, "position_ids": positions}
        for i, layer in enumerate(cache.layers):
            feed[f"past_key_values.{i}.key"], feed[f"past_key_values.{i}.value"] = layer.keys.numpy().copy(), layer.values.numpy().copy()
        step = model(
            **{n: torch.from_numpy(feed[n]) for n in ("input_ids", "attention_mask", "position_ids")}, past_key_values=cache, use_cache=True
        )
    expected = {"logits": step.logits.numpy()}
    for i, layer in enumerate(step.past_key_values.layers):
        expected[f"present.{i}.key"], expected[f"present.{i}.value"] = layer.keys.numpy(), layer.values.numpy()
    return feed, expected


def test_the_served_torchscript_gives_the_library_s_own_eager_outputs_at_sizes_validation_did_not_use(converted):
    """Called as Triton's LibTorch backend calls it (the inputs by their index, the outputs taken by theirs), the
    repository's model.pt gives what the library's own eager model gives on a case validation never ran."""
    import torch

    config = _config(converted.repository() / "torchscript" / CONFIG)
    module = torch.jit.load(str(converted.repository() / "torchscript" / "1" / "model.pt"))
    feed, expected = _eager_case(converted)
    source_names = [spec.split(":")[0] for spec in converted.report["source"]["inputs"]]
    inputs = sorted(config.input, key=_index)
    with torch.inference_mode():
        returned = module(*(torch.from_numpy(np.ascontiguousarray(feed[source_names[_index(t)]])) for t in inputs))
    returned = returned if isinstance(returned, tuple) else (returned,)
    served = {t.name.rpartition("__")[0]: returned[_index(t)].numpy() for t in config.output}
    assert set(served) == set(expected)
    for name, value in expected.items():
        np.testing.assert_allclose(served[name], value, rtol=1e-4, atol=1e-4, err_msg=name)
