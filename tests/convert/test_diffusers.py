"""diffusers model folders as their users write them (save_pretrained of the library's own classes, small configs, a
fixed seed): specs from the config, the torch and ONNX artifacts validated, the ONNX ones checked again at sizes the
validation did not use against the model diffusers loads from the folder, and folders this tool must refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import convert
from convert.errors import ConvertError
from tests.conftest import run_cli, sizes_checked

diffusers = pytest.importorskip("diffusers")
torch = pytest.importorskip("torch")
ort = pytest.importorskip("onnxruntime")

TRUTH_TOLERANCE = 1e-4  # max abs error of the ONNX artifact against diffusers' eager model, fp32
PAGE = "how-to/diffusers.md"  # its lines convert each folder: the unet, vae and unet2d below


@pytest.fixture(scope="module")
def folders(page_run) -> dict[str, Path]:
    """The folders the guide's first line writes (fixtures/diffusers_folders.py), in its run's folder: read-only."""
    from fixtures.diffusers_folders import FOLDERS

    return {name: page_run(PAGE).folder(PAGE) / "out" / "diffusers" / name for name in FOLDERS}


@pytest.fixture(scope="module")
def converted(page_run):
    """The guide's line that converts a folder, as run by tests/test_docs.py (once a session): (the run, its report)."""

    def run(name: str):
        ran = page_run(PAGE)
        (line,) = [line for line in ran.lines if line.line.startswith(f"model-convert out/diffusers/{name} ")]
        return line, line.report(ran.folder(PAGE))

    return run


def _artifact(report: dict, fmt: str) -> dict:
    return next(a for a in report["artifacts"] if a["format"] == fmt)


def _passed_shapes(record: dict) -> set[str]:
    return {c["shape"] for c in record["checks"] if c["kind"] == "shape" and c["device"] == "cpu" and c["status"] == "passed"}


def _truth_check(record: dict, model, feed: dict[str, np.ndarray]) -> float:
    """The ONNX artifact on onnxruntime against the diffusers model's own forward, on one feed: the max abs error."""
    session = ort.InferenceSession(record["path"], providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(feed)
    assert [o.name for o in session.get_outputs()] == ["out_sample"]  # the output named as the input is, renamed
    (got,) = session.run(["out_sample"], feed)
    with torch.no_grad():
        want = model(**{name: torch.from_numpy(value) for name, value in feed.items()}).sample.numpy()
    assert got.shape == want.shape
    return float(np.abs(got - want).max())


def test_a_unet_folder_takes_its_specs_from_the_config_and_its_torch_artifacts_pass(converted):
    run, report = converted("unet")
    assert report is not None, run.output
    source = report["source"]
    assert source["framework"] == "torch" and source["kind"] == "diffusers" and source["sha256"]
    assert source["description"].startswith("UNet2DConditionModel, a diffusers model folder")
    assert "fixed at the config's sample_size 8x8" in source["description"]
    assert source["inputs"] == ["sample:float32[B,4,8,8]", "timestep:int64[B]{0..999}", "encoder_hidden_states:float32[B,S,16]"]
    assert source["outputs"] == ["sample"]
    for fmt in ("torch_export", "torchscript"):
        record = _artifact(report, fmt)
        assert record["passed"], record
        assert len(sizes_checked(record, "B")) >= 2 and len(sizes_checked(record, "S")) >= 2  # both dims moved


def test_the_unets_onnx_artifact_passes_and_agrees_with_diffusers_at_sizes_the_validation_did_not_use(converted, folders):
    run, report = converted("unet")
    assert run.returncode == 0, run.output
    record = _artifact(report, "onnx")
    assert record["passed"] and len(_passed_shapes(record)) >= 3
    batch, sequence = 3, 4
    assert str(batch) not in sizes_checked(record, "B") and str(sequence) not in sizes_checked(record, "S")
    rng = np.random.default_rng(1)
    feed = {
        "sample": rng.standard_normal((batch, 4, 8, 8)).astype(np.float32),
        "timestep": rng.integers(0, 1000, (batch,)).astype(np.int64),
        "encoder_hidden_states": rng.standard_normal((batch, sequence, 16)).astype(np.float32),
    }
    model = diffusers.UNet2DConditionModel.from_pretrained(folders["unet"]).eval()
    assert _truth_check(record, model, feed) <= TRUTH_TOLERANCE


def test_an_autoencoder_folder_round_trips_an_image_through_the_posteriors_mode(converted, folders):
    run, report = converted("vae")
    assert run.returncode == 0, run.output
    assert report["source"]["inputs"] == ["sample:float32[B,3,16,16]{-1..1}"] and report["source"]["outputs"] == ["sample"]
    assert "decoded from the posterior's mode" in report["source"]["description"]
    assert all(a["passed"] for a in report["artifacts"])
    record = _artifact(report, "onnx")
    batch = 3
    assert str(batch) not in sizes_checked(record, "B")
    image = np.random.default_rng(2).uniform(-1, 1, (batch, 3, 16, 16)).astype(np.float32)
    model = diffusers.AutoencoderKL.from_pretrained(folders["vae"]).eval()
    assert _truth_check(record, model, {"sample": image}) <= TRUTH_TOLERANCE


def test_an_unconditional_unet_folder(converted):
    run, report = converted("unet2d")
    assert run.returncode == 0, run.output
    assert report["source"]["description"].startswith("UNet2DModel, a diffusers model folder")
    assert report["source"]["inputs"] == ["sample:float32[B,3,8,8]", "timestep:int64[B]{0..999}"]
    assert _artifact(report, "torch_export")["passed"]


def test_a_model_object_with_the_diffusers_framework_runs_as_diffusers_does():
    from fixtures.diffusers_folders import SEED, unet

    torch.manual_seed(SEED)
    model = unet().eval()
    source = convert.load(model, framework="diffusers")
    assert [str(s) for s in source.signature.inputs] == [
        "sample:float32[B,4,8,8]",
        "timestep:int64[B]{0..999}",
        "encoder_hidden_states:float32[B,S,16]",
    ]
    rng = np.random.default_rng(3)
    feed = {
        "sample": rng.standard_normal((2, 4, 8, 8)).astype(np.float32),
        "timestep": np.array([0, 999]),
        "encoder_hidden_states": rng.standard_normal((2, 5, 16)).astype(np.float32),
    }
    with torch.no_grad():
        want = model(**{name: torch.from_numpy(value) for name, value in feed.items()}).sample.numpy()
    assert list(source.run(feed)) == ["sample"] and np.array_equal(source.run(feed)["sample"], want)
    with pytest.raises(ConvertError, match="this model is a Linear"):
        convert.load(torch.nn.Linear(2, 2), framework="diffusers")


def test_an_input_spec_replaces_the_configs_and_a_unet_needing_inputs_the_config_does_not_size_is_refused():
    """--input gives what the config cannot (a Fourier UNet's noise levels, a size other than sample_size); a UNet
    conditioned on class labels, or one whose config gives no sample size, says what to do."""
    base = dict(
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(8, 16),
        down_block_types=("DownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "UpBlock2D"),
        norm_num_groups=4,
    )
    fourier = diffusers.UNet2DModel(sample_size=8, time_embedding_type="fourier", **base)
    source = convert.load(fourier, framework="diffusers", inputs=["timestep:float32[B]{0.01..50}", "sample:float32[B,3,16,16]"])
    assert [str(s) for s in source.signature.inputs] == ["sample:float32[B,3,16,16]", "timestep:float32[B]{0.01..50}"]
    feed = {"sample": np.ones((2, 3, 16, 16), np.float32), "timestep": np.array([0.5, 3.0], np.float32)}
    assert source.run(feed)["sample"].shape == (2, 3, 16, 16)
    refusals = {
        (fourier, ()): "embeds its timestep as a noise level (time_embedding_type fourier), whose range the config does not say",
        (fourier, ("noise:float32[B]",)): "--input names 'noise', which UNet2DModel does not take",
        (diffusers.UNet2DModel(sample_size=8, num_class_embeds=10, **base), ()): "this UNet also takes class_labels",
        (diffusers.UNet2DModel(**base), ()): "the model's config names no sample_size",
    }
    for (model, inputs), problem in refusals.items():
        with pytest.raises(ConvertError) as info:
            convert.load(model, framework="diffusers", inputs=inputs)
        assert problem in info.value.problem and info.value.next_step


def _copy(folder: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(folder, tmp_path / name))


def test_a_folder_whose_weights_do_not_match_its_config_is_refused_naming_the_weights(folders, tmp_path):
    from safetensors.torch import load_file, save_file

    edited = _copy(folders["unet"], tmp_path, "edited")
    weights = edited / "diffusion_pytorch_model.safetensors"
    state = load_file(weights)
    del state["conv_in.bias"]
    state["extra.weight"] = torch.zeros(2)
    save_file(state, weights, metadata={"format": "pt"})
    run = run_cli(str(edited), "--to", "torchscript", "--out", str(tmp_path / "out"))
    assert run.returncode == 2 and "Traceback" not in run.output
    assert "does not hold the weights its config describes" in run.stderr
    assert "the folder lacks (diffusers would initialise them at random): conv_in.bias" in run.stderr
    assert "the model does not use: extra.weight" in run.stderr and "Save the model again with save_pretrained" in run.stderr

    reshaped = _copy(folders["unet"], tmp_path, "reshaped")
    config = json.loads((reshaped / "config.json").read_text())
    (reshaped / "config.json").write_text(json.dumps({**config, "cross_attention_dim": 8}))
    with pytest.raises(ConvertError) as info:
        convert.load(reshaped)
    assert "weights of another shape than the model's: down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight" in (
        info.value.problem
    )
    assert "(the folder's [8, 16], the model's [8, 8])" in info.value.problem


def test_a_class_that_is_no_diffusers_model_or_one_not_exported_and_pickled_weights_are_refused(folders, tmp_path):
    expected = {
        "DDPMScheduler": "names the class 'DDPMScheduler' in config.json's _class_name, which is not a diffusers model class",
        "os": "names the class 'os' in config.json's _class_name, which is not a diffusers model class",
        "UNet1DModel": "holds a diffusers UNet1DModel, which this tool does not export yet",
    }
    for name, problem in expected.items():
        folder = _copy(folders["unet"], tmp_path, name)
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, "_class_name": name}))
        with pytest.raises(ConvertError) as info:
            convert.load(folder)
        assert problem in info.value.problem
        assert "UNet2DConditionModel, UNet2DModel, AutoencoderKL" in info.value.next_step
    pickled = _copy(folders["unet"], tmp_path, "pickled")
    (pickled / "diffusion_pytorch_model.safetensors").rename(pickled / "diffusion_pytorch_model.bin")
    with pytest.raises(ConvertError) as info:
        convert.load(pickled)
    assert "holds its weights only as diffusion_pytorch_model.bin, a pickle" in info.value.problem
    assert "--trust-code" in info.value.next_step
