"""A Stable Diffusion pipeline folder as its users write it (StableDiffusionPipeline.save_pretrained of the libraries' own
classes, small configs, a fixed seed), converted as its text encoder, UNet and VAE decoder: each component's source
against the library's own networks, the whole conversion with its pipeline check (the artifacts' denoising loop against
diffusers' own pipeline), the VAE decoder's ONNX at latent sizes its validation did not use, a deliberately perturbed
UNet artifact found and blamed, and folders this tool must refuse."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from convert.assembled.diffusion import BUDGETS, check_pipeline
from convert.errors import ConvertError
from convert.reports.model import Report
from convert.sources.request import SourceRequest
from convert.sources.resolve import resolve_source

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
ort = pytest.importorskip("onnxruntime")
onnx = pytest.importorskip("onnx")

COMPONENTS = ("text_encoder", "unet", "vae_decoder")
TRUTH_TOLERANCE = 1e-5  # max abs error of an fp32 ONNX artifact against the library's eager network


PAGE = "how-to/composites.md"  # its lines write the pipeline folder (fixtures/diffusers_folders.py) and convert it


@pytest.fixture(scope="module")
def folder(page_run) -> Path:
    """The pipeline folder the guide's line writes, in its run's folder: read-only."""
    return page_run(PAGE).folder(PAGE) / "out" / "diffusers" / "pipeline"


@pytest.fixture(scope="module")
def converted(page_run):
    """The guide's line that converts the folder to ONNX, as run by tests/test_docs.py (once a session): its report
    and out folder."""

    def run():
        ran = page_run(PAGE)
        (line,) = [line for line in ran.lines if line.line.startswith("model-convert out/diffusers/pipeline ")]
        out = ran.folder(PAGE) / "out" / "pipeline"
        assert line.returncode == 0, line.output
        return Report.from_json((out / "report.json").read_text()), out

    return run


@pytest.fixture(scope="module")
def library(folder):
    """diffusers' own pipeline from the folder."""
    pipeline = diffusers.DiffusionPipeline.from_pretrained(str(folder), local_files_only=True)
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def _copy(folder: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(folder, tmp_path / "copy"))


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_each_component_is_the_library_s_own_network(folder, library):
    sources = {c: resolve_source(SourceRequest(model=str(folder), component=c)) for c in COMPONENTS}
    assert [str(s) for s in sources["text_encoder"].signature.inputs] == ["input_ids:int64[B,S]{0..53}"]
    assert sources["text_encoder"].dim_ranges == {"S": (1, 16)}
    assert [str(s) for s in sources["unet"].signature.inputs] == [
        "sample:float32[B,4,8,8]",
        "timestep:int64[B]{0..999}",  # below the scheduler's num_train_timesteps
        "encoder_hidden_states:float32[B,S,16]",
    ]
    assert [str(s) for s in sources["vae_decoder"].signature.inputs] == ["latent_sample:float32[B,4,H,W]"]
    assert all(s.info.sha256 and s.info.path == str(folder) for s in sources.values())
    assert "UNet2DConditionModel from unet/" in sources["unet"].info.description

    rng = np.random.default_rng(3)
    ids = rng.integers(2, 54, size=(3, 11))
    got = sources["text_encoder"].run({"input_ids": ids})
    assert list(got) == ["last_hidden_state", "pooler_output"]
    latents = rng.standard_normal((3, 4, 8, 8)).astype(np.float32)
    states = rng.standard_normal((3, 5, 16)).astype(np.float32)
    timesteps = np.array([999, 500, 1])
    noise = sources["unet"].run({"sample": latents, "timestep": timesteps, "encoder_hidden_states": states})
    latent_image = rng.standard_normal((2, 4, 6, 10)).astype(np.float32)  # a size no block fixes
    image = sources["vae_decoder"].run({"latent_sample": latent_image})
    with torch.no_grad():
        text = library.text_encoder(torch.from_numpy(ids))
        want_noise = library.unet(torch.from_numpy(latents), torch.from_numpy(timesteps), torch.from_numpy(states)).sample
        want_image = library.vae.decode(torch.from_numpy(latent_image)).sample
    np.testing.assert_array_equal(got["last_hidden_state"], text.last_hidden_state.numpy())
    np.testing.assert_array_equal(got["pooler_output"], text.pooler_output.numpy())
    np.testing.assert_array_equal(noise["out_sample"], want_noise.numpy())
    assert image["sample"].shape == (2, 3, 12, 20)
    np.testing.assert_array_equal(image["sample"], want_image.numpy())


def test_the_pipeline_converts_and_its_artifacts_make_diffusers_image(converted):
    report, out = converted()
    assert report.composite == "diffusion-pipeline"
    assert [c.name for c in report.components] == list(COMPONENTS)
    assert all(c.passed for c in report.components), [c.error for c in report.components]
    assert all((out / name / "model.onnx").is_file() for name in COMPONENTS)  # Optimum's layout
    (check,) = report.assembled
    assert check.name == "pipeline" and check.status == "passed", check.reason
    assert check.precision == "fp32" and check.budget.startswith("fp32")
    fp32 = BUDGETS["fp32"]
    assert check.metrics["psnr_db"] >= fp32.psnr_db and check.metrics["cosine"] >= fp32.cosine
    assert check.metrics["max_step_error"] <= fp32.step and check.metrics["max_abs_error"] < 1e-4
    assert "gives the pipeline's image exactly" in check.detail and "the UNet at batch 4" in check.detail
    assert set(check.artifacts) == set(COMPONENTS)
    assert report.passed and report.exit_code == 0


def test_the_vae_decoder_s_onnx_holds_at_latent_sizes_its_validation_did_not_use(converted, library):
    _, out = converted()
    session = ort.InferenceSession(str(out / "vae_decoder" / "model.onnx"), providers=["CPUExecutionProvider"])
    latents = np.random.default_rng(9).standard_normal((3, 4, 9, 4)).astype(np.float32)
    (got,) = session.run(["sample"], {"latent_sample": latents})
    with torch.no_grad():
        want = library.vae.decode(torch.from_numpy(latents)).sample.numpy()
    assert got.shape == (3, 3, 18, 8) and np.abs(got - want).max() <= TRUTH_TOLERANCE


def test_a_deliberately_perturbed_unet_artifact_fails_the_pipeline_and_is_blamed(converted, folder, tmp_path):
    from onnx import numpy_helper

    _, out = converted()
    artifacts = {name: out / name / "model.onnx" for name in COMPONENTS}
    # the deliberate fault: one weight of the UNet's second down block 10% too large in a copy of its artifact
    model = onnx.load(str(artifacts["unet"]))
    weight = next(i for i in model.graph.initializer if i.name == "model.down_blocks.1.resnets.0.conv2.weight")
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.1), weight.name))
    onnx.save(model, str(tmp_path / "perturbed_unet.onnx"))

    check = check_pipeline(folder, {**artifacts, "unet": tmp_path / "perturbed_unet.onnx"}, precision="fp32", seed=0, trust_code=False)
    assert check.status == "failed" and check.blamed == ["unet"]
    assert check.metrics["psnr_db"] < BUDGETS["fp32"].psnr_db
    assert check.diverged_at.startswith("step 1 of 4")  # the UNet is wrong from its first call
    assert "not diffusers'" in check.reason


def test_an_artifact_that_does_not_run_is_blamed_as_such(converted, folder, tmp_path):
    _, out = converted()
    artifacts = {name: out / name / "model.onnx" for name in COMPONENTS}
    (tmp_path / "broken.onnx").write_bytes(b"not an onnx file")  # a deliberately broken artifact
    check = check_pipeline(folder, {**artifacts, "vae_decoder": tmp_path / "broken.onnx"}, precision="fp32", seed=0, trust_code=False)
    assert check.status == "failed" and check.blamed == ["vae_decoder"] and "cannot load" in check.reason


def test_the_check_is_skipped_where_it_cannot_run_as_the_pipeline_runs(folder, tmp_path):
    artifacts = {name: tmp_path / f"{name}.onnx" for name in COMPONENTS}
    check = check_pipeline(folder, {"unet": artifacts["unet"]}, precision="fp32", seed=0, trust_code=False)
    assert check.status == "skipped" and "text_encoder, vae_decoder has no artifact" in check.reason
    assert check_pipeline(folder, artifacts, precision="fp8", seed=0, trust_code=False).status == "skipped"
    other = _copy(folder, tmp_path)
    _edit_json(other / "model_index.json", _class_name="StableDiffusionImg2ImgPipeline")
    check = check_pipeline(other, artifacts, precision="fp32", seed=0, trust_code=False)
    assert check.status == "skipped" and "StableDiffusionImg2ImgPipeline" in check.reason


def test_an_index_naming_code_outside_the_libraries_is_refused_without_trust(folder, tmp_path):
    custom = _copy(folder, tmp_path)
    # Stable Diffusion's own index names its safety checker by diffusers' pipeline module: diffusers' code, taken
    _edit_json(custom / "model_index.json", safety_checker=["stable_diffusion", "StableDiffusionSafetyChecker"])
    assert resolve_source(SourceRequest(model=str(custom), component="text_encoder")).signature.inputs[0].name == "input_ids"
    _edit_json(custom / "model_index.json", scheduler=["my_schedulers", "MyScheduler"])
    with pytest.raises(ConvertError, match=r"my_schedulers\.MyScheduler for its scheduler.*runs code") as raised:
        resolve_source(SourceRequest(model=str(custom), component="unet"))
    assert "--trust-code" in raised.value.next_step
    source = resolve_source(SourceRequest(model=str(custom), component="unet", trust_code=True))
    assert source.signature.inputs[0].name == "sample"
    _edit_json(custom / "model_index.json", _class_name="MyPipeline")
    with pytest.raises(ConvertError, match="'MyPipeline', which is not one of diffusers' own pipelines"):
        resolve_source(SourceRequest(model=str(custom), component="text_encoder"))


def test_a_component_whose_class_or_weights_are_not_what_the_folder_says_is_refused(folder, tmp_path):
    from safetensors.torch import load_file, save_file

    odd = _copy(folder, tmp_path)
    _edit_json(odd / "unet" / "config.json", _class_name="UNet2DModel")
    with pytest.raises(ConvertError, match="model_index.json names UNet2DConditionModel for unet/.*names UNet2DModel"):
        resolve_source(SourceRequest(model=str(odd), component="unet"))
    _edit_json(odd / "model_index.json", vae=["diffusers", "AutoencoderTiny"])
    with pytest.raises(ConvertError, match="diffusers.AutoencoderTiny for its vae, whose inputs this tool does not know"):
        resolve_source(SourceRequest(model=str(odd), component="vae_decoder"))

    dropped = Path(shutil.copytree(folder, tmp_path / "dropped"))
    weights = dropped / "text_encoder" / "model.safetensors"
    tensors = load_file(str(weights))
    del tensors[next(k for k in tensors if k.endswith("final_layer_norm.weight"))]
    save_file(tensors, str(weights), metadata={"format": "pt"})
    with pytest.raises(ConvertError, match="freshly initialised: final_layer_norm.weight"):
        resolve_source(SourceRequest(model=str(dropped), component="text_encoder"))

    pickled = Path(shutil.copytree(folder, tmp_path / "pickled"))
    unet = pickled / "unet"
    torch.save(load_file(str(unet / "diffusion_pytorch_model.safetensors")), unet / "diffusion_pytorch_model.bin")
    (unet / "diffusion_pytorch_model.safetensors").unlink()
    with pytest.raises(ConvertError, match="only as diffusion_pytorch_model.bin, a pickle"):
        resolve_source(SourceRequest(model=str(pickled), component="unet"))


def test_another_dtype_is_refused_with_the_pass_that_makes_one(folder):
    with pytest.raises(ConvertError, match="converted in float32") as raised:
        resolve_source(SourceRequest(model=str(folder), component="unet", dtype="float16"))
    assert "--optimize fp16" in raised.value.next_step
