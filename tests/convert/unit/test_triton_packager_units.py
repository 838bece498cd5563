"""The Triton repository's checks read each config.pbtxt back with Triton's own ModelConfig schema and hold it to what
validation ran: a config broken by hand after the build (a dim fixed that validation moved, a wrong data type, batching
that disagrees with the dims, a model file missing, a second version folder) fails the check that says why.

The artifacts here are small stand-ins with reports written as validation writes them; tests/convert/test_triton_packager.py
builds repositories from real conversions and loads them with each platform's own runtime."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from convert.backends.torch import SCRIPT_OUTPUT_NAMES
from convert.packagers.base import PackageJob, PackedArtifact
from convert.packagers.triton import CONFIG, TENSORFLOW_DEPRECATION, TritonRepository, libtorch_name
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.safety import sha256_files
from convert.validators.compare import OutputMetrics

BATCHES = (2, 1, 5)  # as validation moves B: the export size first
# torch.jit.save's data.pkl as pickletools reads it: PROTO 2, GLOBAL '__torch__.tiny Net', EMPTY_TUPLE, NEWOBJ,
# EMPTY_DICT, BUILD, STOP (the root module's class, then its attributes)
ROOT_MODULE_PICKLE = b"\x80\x02c__torch__.tiny\nNet\n)\x81}b."


def _tiny_onnx(path):
    """x[B,4] @ w → y[B,3], its weights in external data named after the file (as torch.onnx writes a large model)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 3])],
        [weights],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, str(path), save_as_external_data=True, location=f"{path.name}.data", size_threshold=0)
    return [path, path.with_name(f"{path.name}.data")]


def torchscript_archive(path, returns: str = "Tensor", parameters: str = "x: Tensor", output_names=None):
    """A stand-in laid out as torch.jit.save lays an archive out: data.pkl names the root module's class, and code/
    holds that class's forward() (the packager reads its signature, never runs it); extra/ the output names this tool
    stores with the flat outputs it traces."""

    code = f"class Net(Module):\n  def forward(self: __torch__.tiny.Net,\n    {parameters}) -> {returns}:\n    return x\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("net/data.pkl", ROOT_MODULE_PICKLE)
        archive.writestr("net/code/__torch__/tiny.py", code)
        archive.writestr("net/version", "8\n")
        if output_names is not None:
            archive.writestr(f"net/extra/{SCRIPT_OUTPUT_NAMES}", json.dumps(output_names))
    return [path]


def _record(key: str, fmt: str, device: str = "cpu", batches=BATCHES, bounds=None) -> rm.ArtifactRecord:
    checks = [
        rm.Check(
            runtime="runtime",
            device=device,
            shape=f"B={b}",
            status="passed",
            input_shapes={"x": [b, 4]},
            outputs=[
                OutputMetrics(name="y", status="passed", shape=[b, 3], dtype="float32", expected_shape=[b, 3], expected_dtype="float32")
            ],
        )
        for b in batches
    ]
    checks.append(rm.Check(runtime="runtime", device="cuda" if device == "cpu" else "cpu", shape="*", status="skipped", reason="absent"))
    optimization = key if ":" in key else ""
    return rm.ArtifactRecord(format=fmt, optimization=optimization, passed=True, checks=checks, dim_bounds=bounds or {})


def _artifact(key, fmt, path, files) -> PackedArtifact:
    return PackedArtifact(key, fmt, "fp32", path, tuple(files), sha256_files(list(files)))


def _job(tmp_path, inputs=("x:float32[B,4]",)) -> PackageJob:
    made = tmp_path / "made"
    made.mkdir()
    onnx_files = _tiny_onnx(made / "tiny.onnx")
    ir = made / "tiny_openvino"
    ir.mkdir()
    (ir / "model.xml").write_text("<net/>")
    (ir / "model.bin").write_bytes(b"\0" * 8)
    torchscript = torchscript_archive(made / "tiny.torchscript.pt")
    (made / "tiny.engine").write_bytes(b"engine")
    saved = made / "tiny_savedmodel"
    (saved / "variables").mkdir(parents=True)
    (saved / "saved_model.pb").write_bytes(b"graph")
    (saved / "variables" / "variables.index").write_bytes(b"index")
    artifacts = (
        _artifact("onnx", "onnx", onnx_files[0], onnx_files),
        _artifact("openvino:int8", "openvino", ir, [ir]),
        _artifact("torchscript", "torchscript", torchscript[0], torchscript),
        _artifact("trt:fp16", "tensorrt", made / "tiny.engine", [made / "tiny.engine"]),
        _artifact("savedmodel", "savedmodel", saved, [saved]),
    )
    records = [
        _record("onnx", "onnx"),
        _record("openvino:int8", "openvino"),
        _record("torchscript", "torchscript"),
        _record("trt:fp16", "tensorrt", device="cuda", bounds={"B": [1, 8]}),
        _record("savedmodel", "savedmodel"),
    ]
    report = rm.Report(
        tool_version="0",
        created_at="now",
        environment=rm.Environment(python="3", platform="linux", device_names=["NVIDIA H100 80GB HBM3"]),
        source=rm.SourceRecord(inputs=list(inputs), outputs=["y"]),
        artifacts=records,
    )
    staging = tmp_path / "staging"
    staging.mkdir()
    return PackageJob(folder=staging, stem="tiny", artifacts=artifacts, report=report)


def _built(tmp_path, **job_options):
    job = _job(tmp_path, **job_options)
    packager = TritonRepository()
    return packager, job, packager.build(job)


def _checks(packager, path, job) -> dict[str, rm.PackageCheck]:
    return {c.name: c for c in packager.check(path, job)}


def test_the_packager_takes_every_format_it_has_a_platform_for():
    from convert.packagers.triton import PLATFORMS

    assert set(REGISTRY.get("packager", "triton").takes) == set(PLATFORMS)


def test_a_repository_of_validated_artifacts_passes_every_check(tmp_path):
    packager, job, path = _built(tmp_path)
    checks = packager.check(path, job)
    assert [c.name for c in checks if c.status != "passed"] == [], checks
    assert path.name == "tiny.triton"
    files = sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())
    assert files == [
        "onnx/1/model.onnx",
        "onnx/1/tiny.onnx.data",  # named as the graph names it
        "onnx/config.pbtxt",
        "openvino_int8/1/model.bin",
        "openvino_int8/1/model.xml",
        "openvino_int8/config.pbtxt",
        "savedmodel/1/model.savedmodel/saved_model.pb",
        "savedmodel/1/model.savedmodel/variables/variables.index",
        "savedmodel/config.pbtxt",
        "torchscript/1/model.pt",
        "torchscript/config.pbtxt",
        "trt_fp16/1/model.plan",
        "trt_fp16/config.pbtxt",
    ]
    by_name = {c.name: c for c in checks}
    assert {c.split(":")[0] for c in by_name} == {"config", "io", "batch", "dims", "files", "digest", "profiles"}
    assert "max_batch_size 5: validation ran B up to 5 (the artifact sets no bound on it)" in by_name["batch:onnx"].reason
    assert "max_batch_size 8: the artifact takes B up to 8" in by_name["batch:trt_fp16"].reason
    assert "x → x__0; y → y__0" in by_name["io:torchscript"].reason
    assert TENSORFLOW_DEPRECATION in by_name["config:savedmodel"].reason
    assert "KIND_GPU" in by_name["config:trt_fp16"].reason and "NVIDIA H100" in by_name["config:trt_fp16"].reason


def test_the_configs_say_what_validation_ran(tmp_path):
    from google.protobuf import text_format

    from convert.packagers.triton_model_config_pb2 import ModelConfig

    _, _, path = _built(tmp_path)
    onnx = text_format.Parse((path / "onnx" / CONFIG).read_text(), ModelConfig())
    assert (onnx.platform, onnx.max_batch_size, onnx.HasField("dynamic_batching")) == ("onnxruntime_onnx", 5, True)
    assert [(t.name, list(t.dims)) for t in (*onnx.input, *onnx.output)] == [("x", [4]), ("y", [3])]
    assert [g.kind for g in onnx.instance_group] == [2]  # KIND_CPU
    openvino = text_format.Parse((path / "openvino_int8" / CONFIG).read_text(), ModelConfig())
    assert (openvino.name, openvino.backend, openvino.platform) == ("openvino_int8", "openvino", "")
    engine = text_format.Parse((path / "trt_fp16" / CONFIG).read_text(), ModelConfig())
    assert [(g.kind, list(g.profile)) for g in engine.instance_group] == [(1, ["0"])]  # KIND_GPU, profile 0
    torchscript = text_format.Parse((path / "torchscript" / CONFIG).read_text(), ModelConfig())
    assert [t.name for t in (*torchscript.input, *torchscript.output)] == ["x__0", "y__0"]


def test_one_size_validated_is_a_fixed_dim_and_no_batch(tmp_path):
    job = _job(tmp_path)
    job.report.artifacts[0] = _record("onnx", "onnx", batches=(2,))
    packager = TritonRepository()
    path = packager.build(job)
    text = (path / "onnx" / CONFIG).read_text()
    assert "max_batch_size: 0" in text and "dims: [ 2, 4 ]" in text and "dynamic_batching" not in text
    checks = _checks(packager, path, job)
    assert all(c.status == "passed" for c in checks.values()), checks
    assert "validation ran B at 2 only" in checks["batch:onnx"].reason


def _rewrite(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, text
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(
    "model, old, new, failed, says",
    [
        ("onnx", "dims: [ 4 ]", "dims: [ 5 ]", "dims:onnx", "'x' is 5 on axis 1, which validation ran at 4"),
        ("onnx", "data_type: TYPE_FP32", "data_type: TYPE_FP16", "io:onnx", "input 'x' is TYPE_FP16, and validation ran it as float32"),
        ("onnx", 'name: "x"', 'name: "input"', "io:onnx", "its inputs are ['input'], and the artifact's are ['x']"),
        (
            "onnx",
            "max_batch_size: 5",
            "max_batch_size: 9",
            "batch:onnx",
            "max_batch_size is 9, and validation ran B up to 5 (the artifact sets no bound on it)",
        ),
        ("trt_fp16", "max_batch_size: 8", "max_batch_size: 9", "batch:trt_fp16", "max_batch_size is 9, and the artifact takes B up to 8"),
        ("onnx", "max_batch_size: 5", "max_batch_size: 0", "batch:onnx", "leave one out: the batch dim"),
        ("onnx", "platform: ", "backend: ", "config:onnx", "its platform is '', and onnx needs 'onnxruntime_onnx'"),
        ("onnx", 'name: "onnx"', 'name: "other"', "config:onnx", "Triton requires its folder's name, 'onnx'"),
        ("onnx", "kind: KIND_CPU", "kind: KIND_GPU", "config:onnx", "one of KIND_CPU runs where it was validated"),
        ("onnx", "dims: [ 4 ]", "dims [ 4 ]", "config:onnx", "does not parse with Triton's ModelConfig schema"),
        ("onnx", "input [", "inputs [", "config:onnx", 'has no field named "inputs"'),
        ("trt_fp16", 'profile: [ "0" ]', 'profile: [ "1" ]', "profiles:trt_fp16", "the engine has one, profile 0"),
    ],
)
def test_a_hand_broken_config_fails_the_check_that_says_why(tmp_path, model, old, new, failed, says):
    packager, job, path = _built(tmp_path)
    _rewrite(path / model / CONFIG, old, new)
    checks = _checks(packager, path, job)
    assert checks[failed].status == "failed" and says in checks[failed].reason, checks[failed]
    assert all(c.status == "passed" for c in checks.values() if not c.name.endswith(f":{model}")), checks


def test_a_dim_fixed_that_validation_moved_fails(tmp_path):
    """Unbatched, B is a dim of the config: fixed at one of its sizes, it would refuse the others validation passed."""
    packager, job, path = _built(tmp_path)
    config = path / "onnx" / CONFIG
    _rewrite(config, "max_batch_size: 5", "max_batch_size: 0")
    _rewrite(config, "dynamic_batching { }\n", "")
    _rewrite(config, "dims: [ 4 ]", "dims: [ 2, 4 ]")
    _rewrite(config, "dims: [ 3 ]", "dims: [ -1, 3 ]")
    checks = _checks(packager, path, job)
    assert checks["dims:onnx"].status == "failed"
    assert "'x' is fixed at 2 on axis 0, which validation ran at 1, 2, 5" in checks["dims:onnx"].reason
    assert checks["io:onnx"].status == "passed"  # the rank is right: the batch dim is a dim of its own


def test_a_dim_left_free_that_validation_ran_at_one_size_fails(tmp_path):
    packager, job, path = _built(tmp_path)
    _rewrite(path / "onnx" / CONFIG, "dims: [ 4 ]", "dims: [ -1 ]")
    checks = _checks(packager, path, job)
    assert (
        checks["dims:onnx"].status == "failed" and "takes any size on axis 1, which validation ran at 4 only" in checks["dims:onnx"].reason
    )


def _transposed(shape: list[int]) -> list[int]:
    return shape[::-1]


@pytest.mark.parametrize(
    "inputs, moved, says",
    [
        # x:float32[4,B]: dim 0 of the input is fixed
        (("x:float32[4,B]",), ("input_shapes",), "dim 0 of the inputs is not one symbolic dim"),
        # x:float32[B,4], but the output is y[3,B]: its dim 0 is no batch
        (("x:float32[B,4]",), ("outputs",), "dim 0 of some input or output is not B in the check at B=2"),
    ],
)
def test_batching_over_a_leading_dim_that_is_no_batch_fails(tmp_path, inputs, moved, says):
    job = _job(tmp_path, inputs=inputs)
    for record in job.report.artifacts:
        for check in record.checks:
            if "input_shapes" in moved and check.input_shapes:
                check.input_shapes = {"x": _transposed(check.input_shapes["x"])}
            for output in check.outputs if "outputs" in moved else ():
                output.shape = _transposed(output.shape)
    packager = TritonRepository()
    path = packager.build(job)
    config = path / "onnx" / CONFIG
    assert "max_batch_size: 0" in config.read_text()
    _rewrite(config, "max_batch_size: 0", "max_batch_size: 5")
    checks = _checks(packager, path, job)
    assert checks["batch:onnx"].status == "failed"
    assert f"max_batch_size is 5, but {says}" in checks["batch:onnx"].reason, checks["batch:onnx"]


@pytest.mark.parametrize(
    "remove, failed, says",
    [
        ("onnx/1/model.onnx", "files:onnx", "1/model.onnx is missing, where onnxruntime_onnx looks for it"),
        ("onnx/1/tiny.onnx.data", "files:onnx", "names the external data file 'tiny.onnx.data', which is not in"),
        ("openvino_int8/1/model.bin", "files:openvino_int8", "1/model.bin is missing, where openvino looks for it"),
        ("savedmodel/1/model.savedmodel/saved_model.pb", "files:savedmodel", "1/model.savedmodel/saved_model.pb is missing"),
        ("torchscript/config.pbtxt", "config:torchscript", "torchscript/config.pbtxt is missing"),
    ],
)
def test_a_missing_file_fails_the_files_check(tmp_path, remove, failed, says):
    packager, job, path = _built(tmp_path)
    (path / remove).unlink()
    checks = _checks(packager, path, job)
    assert checks[failed].status == "failed" and says in checks[failed].reason, checks[failed]


def test_a_second_version_folder_or_a_stray_file_fails_the_files_check(tmp_path):
    """Triton serves the highest version folder: a 2/ beside 1/ would be served in place of what was validated."""
    packager, job, path = _built(tmp_path)
    (path / "onnx" / "2").mkdir()
    (path / "onnx" / "2" / "model.onnx").write_bytes(b"other")
    checks = _checks(packager, path, job)
    assert checks["files:onnx"].status == "failed" and "['2/model.onnx']" in checks["files:onnx"].reason


def test_other_bytes_under_the_model_file_s_name_fail_the_digest(tmp_path):
    """The model file is renamed (tiny.onnx is 1/model.onnx): it is digested under the name the validated digest gave it."""
    packager, job, path = _built(tmp_path)
    assert _checks(packager, path, job)["digest:onnx"].status == "passed"
    (path / "onnx" / "1" / "tiny.onnx.data").write_bytes((path / "onnx" / "1" / "tiny.onnx.data").read_bytes()[::-1])
    checks = _checks(packager, path, job)
    assert checks["digest:onnx"].status == "failed" and "not the validated" in checks["digest:onnx"].reason


@pytest.mark.parametrize(
    "bounds, says",
    [
        ({"B": [2, 8]}, "the profile takes B from 2 to 8, and validation ran it at [1, 2, 5]"),
        ({}, "the report gives no profile range for B, which validation ran at [1, 2, 5]"),
    ],
)
def test_a_profile_that_does_not_cover_the_validated_sizes_fails(tmp_path, bounds, says):
    packager, job, path = _built(tmp_path)
    job.report.artifacts[3].dim_bounds = bounds  # the engine's profile, as the report records it
    checks = _checks(packager, path, job)
    assert checks["profiles:trt_fp16"].status == "failed" and says in checks["profiles:trt_fp16"].reason


def test_a_torchscript_returning_a_dict_is_refused_as_triton_s_libtorch_backend_refuses_it(tmp_path):
    """Triton's LibTorch backend takes a Tensor or a tuple of Tensors from forward() (pytorch_backend
    src/pt/model_instance_state.cc: 'It should not be a List / Dictionary of Tensors')."""
    job = _job(tmp_path)
    torchscript = job.artifacts[2]
    torchscript_archive(torchscript.path, returns="Dict[str, Tensor]")
    artifacts = (*job.artifacts[:2], _artifact("torchscript", "torchscript", torchscript.path, [torchscript.path]), *job.artifacts[3:])
    job = PackageJob(folder=job.folder, stem=job.stem, artifacts=artifacts, report=job.report)
    packager = TritonRepository()
    checks = _checks(packager, packager.build(job), job)
    assert checks["io:torchscript"].status == "failed"
    assert "its forward() returns Dict[str, Tensor]" in checks["io:torchscript"].reason


@pytest.mark.parametrize("output_names, passes", [(["y"], True), (["logits"], False)])
def test_the_output_names_a_torchscript_archive_stores_must_be_the_validated_ones(tmp_path, output_names, passes):
    """LibTorch's output index is the position in the returned tuple; the archive says which output each holds."""
    job = _job(tmp_path)
    torchscript = job.artifacts[2]
    torchscript_archive(torchscript.path, output_names=output_names)
    artifacts = (*job.artifacts[:2], _artifact("torchscript", "torchscript", torchscript.path, [torchscript.path]), *job.artifacts[3:])
    job = PackageJob(folder=job.folder, stem=job.stem, artifacts=artifacts, report=job.report)
    packager = TritonRepository()
    checks = _checks(packager, packager.build(job), job)
    assert (checks["io:torchscript"].status == "passed") == passes, checks["io:torchscript"].reason
    if not passes:
        assert "its forward() returns (logits) and was validated with (y)" in checks["io:torchscript"].reason


def test_libtorch_s_output_index_is_the_position_the_archive_names_not_the_report_s_order(tmp_path):
    job = _job(tmp_path)
    job.report.source.outputs = ["y", "z"]
    for check in job.report.artifacts[2].checks:
        if check.outputs:
            check.outputs.append(check.outputs[0].model_copy(update={"name": "z"}))
    torchscript = job.artifacts[2]
    torchscript_archive(torchscript.path, returns="Tuple[Tensor, Tensor]", output_names=["z", "y"])
    artifacts = (*job.artifacts[:2], _artifact("torchscript", "torchscript", torchscript.path, [torchscript.path]), *job.artifacts[3:])
    job = PackageJob(folder=job.folder, stem=job.stem, artifacts=artifacts, report=job.report)
    packager = TritonRepository()
    path = packager.build(job)
    assert _checks(packager, path, job)["io:torchscript"].status == "passed"
    config = (path / "torchscript" / CONFIG).read_text()
    assert config.index('name: "z__0"') < config.index('name: "y__1"')


def test_stored_output_names_that_are_not_a_list_of_names_fail_the_io_check(tmp_path):
    job = _job(tmp_path)
    torchscript = job.artifacts[2]
    torchscript_archive(torchscript.path, output_names={"y": 0})
    artifacts = (*job.artifacts[:2], _artifact("torchscript", "torchscript", torchscript.path, [torchscript.path]), *job.artifacts[3:])
    job = PackageJob(folder=job.folder, stem=job.stem, artifacts=artifacts, report=job.report)
    packager = TritonRepository()
    checks = _checks(packager, packager.build(job), job)
    assert checks["io:torchscript"].status == "failed" and "not a list of output names" in checks["io:torchscript"].reason


def test_a_torchscript_called_by_keyword_past_skipped_parameters_is_refused(tmp_path):
    """Triton's LibTorch backend passes inputs by position: a forward() whose validated inputs skip a parameter
    (traced by keyword) cannot be called so."""
    job = _job(tmp_path)
    torchscript_archive(job.artifacts[2].path, parameters="mask: Tensor,\n    x: Tensor")
    artifacts = (
        *job.artifacts[:2],
        _artifact("torchscript", "torchscript", job.artifacts[2].path, [job.artifacts[2].path]),
        *job.artifacts[3:],
    )
    job = PackageJob(folder=job.folder, stem=job.stem, artifacts=artifacts, report=job.report)
    packager = TritonRepository()
    checks = _checks(packager, packager.build(job), job)
    assert "its forward() takes (mask, x) and was validated with (x)" in checks["io:torchscript"].reason


@pytest.mark.parametrize(
    "name, index, named",
    [
        ("x", 0, "x__0"),
        ("past_key_values.0.key", 3, "past_key_values.0.key__3"),
        ("a__b", 1, "a_b__1"),
        ("_x_", 2, "x__2"),
        ("__", 0, "tensor__0"),
    ],
)
def test_libtorch_names_put_the_index_after_the_first_double_underscore(name, index, named):
    assert libtorch_name(name, index) == named


def test_model_names_are_the_keys_in_the_characters_triton_takes_each_once():
    from convert.packagers.triton import _model_names

    artifacts = [PackedArtifact(key, "onnx", "fp32", None, (), "") for key in ("onnx", "openvino:int8", "openvino_int8", "::")]
    assert list(_model_names(tuple(artifacts))) == ["onnx", "openvino_int8", "openvino_int8_2", "model"]


def test_an_onnx_output_declared_bfloat16_is_typed_so_though_the_report_says_float32(tmp_path):
    """The runners hand a bfloat16 output over widened to float32 (NumPy has no bfloat16): the graph says what it is
    (only its declared types are read; the shapes are the report's)."""
    import onnx
    from onnx import TensorProto, helper

    job = _job(tmp_path)
    graph = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["y"], to=TensorProto.BFLOAT16)],
        "bf16",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.BFLOAT16, ["B", 4])],
    )
    path = tmp_path / "bf16.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    job = PackageJob(folder=job.folder, stem=job.stem, artifacts=(_artifact("onnx", "onnx", path, [path]),), report=job.report)
    packager = TritonRepository()
    repository = packager.build(job)
    assert "data_type: TYPE_BF16" in (repository / "onnx" / CONFIG).read_text()
    assert all(c.status == "passed" for c in packager.check(repository, job))
