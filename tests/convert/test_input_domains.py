"""The model's own input domain: synthetic inputs are drawn from the range the model declares for them (a Keras model's
leading Rescaling layer, a Hugging Face folder's image processor, a timm model's pretrained_cfg, an ultralytics model's
0..1 images), the report records each input's domain and where it comes from, and a failure names them and advises
real samples and ranges before any looser tolerance (never a tolerance for a signature, shape or dtype that differs)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from convert.reports.console import failed_validation
from convert.reports.model import ArtifactRecord, Check, InputDomain, SourceRecord
from convert.validators.compare import OutputMetrics
from tests.conftest import load_report, run_cli

IMAGE = 64  # the Keras model's image size


# --- the failure advice (no framework) ---


def _artifact(check: Check) -> ArtifactRecord:
    return ArtifactRecord(format="onnx", path="out/failed/model.onnx", checks=[check])


def _values_check(shape: str = "B=2") -> Check:
    output = OutputMetrics(
        name="logits",
        status="failed",
        reason="2 of 6000 values differ",
        expected_shape=[2, 10],
        shape=[2, 10],
        expected_dtype="float32",
        dtype="float32",
        elements=20,
        mismatch_count=2,
    )
    return Check(
        runtime="onnxruntime",
        device="cpu",
        shape=shape,
        status="failed",
        reason="output 'logits': 2 of 6000 values differ",
        outputs=[output],
    )


def _source(*domains: InputDomain) -> SourceRecord:
    return SourceRecord(framework="keras", inputs=["image:float32[B,64,64,3]{0..255}", "mask:int64[B,S]"], input_domains=list(domains))


RESCALED = InputDomain(name="image", drawn="uniform in [0, 255)", low=0, high=255, source="the model's Rescaling layer 'rescaling'")


@pytest.mark.fast
def test_a_values_failure_on_generated_inputs_names_their_domain_and_puts_data_before_tolerance():
    message = failed_validation(_artifact(_values_check()), "out/report.json", _source(RESCALED))
    assert "image: uniform in [0, 255), from the model's Rescaling layer 'rescaling'" in message
    assert message.index("--data") < message.index("--input") < message.index("--tolerance")
    assert '--input "image:float32[B,64,64,3]{LOW..HIGH}"' in message


def test_a_default_domain_says_none_was_given_or_declared():
    default = InputDomain(name="image", drawn="standard normal", source="default")
    message = failed_validation(_artifact(_values_check()), "out/report.json", _source(default))
    assert "image: standard normal (no range given or declared)" in message and message.index("--data") < message.index("--tolerance")


def test_a_values_failure_on_the_users_data_keeps_the_tolerance_advice():
    message = failed_validation(_artifact(_values_check(shape="data")), "out/report.json", _source(RESCALED))
    assert "loosen it with --tolerance" in message and "generated" not in message


@pytest.mark.parametrize(
    ("reason", "takes"),
    [
        ("the artifact does not take these inputs: input 'timestep' has rank 0 but the artifact takes rank 1", "rank 1"),
        ("the artifact does not take these inputs: input 'timestep' is int64 but the artifact takes float32", "dtype float32"),
    ],
)
def test_a_signature_mismatch_gets_no_tolerance_advice_and_names_what_the_artifact_takes(reason, takes):
    check = Check(runtime="onnxruntime", device="cpu", shape="B=2", status="failed", reason=reason)
    message = failed_validation(_artifact(check), "out/report.json", _source(RESCALED))
    assert "--tolerance" not in message and "--data" not in message
    assert f"signature differs from the declared one: its input 'timestep' takes {takes}" in message


def test_an_output_of_another_shape_or_a_missing_one_gets_no_tolerance_advice():
    shaped = OutputMetrics(
        name="logits", status="failed", reason="shape", expected_shape=[2, 10], shape=[2, 1, 10], expected_dtype="float32", dtype="float32"
    )
    missing = OutputMetrics(name="aux", status="failed", reason="missing: the artifact has no output named 'aux'", expected_shape=[2])
    for output in (shaped, missing):
        check = Check(runtime="onnxruntime", device="cpu", shape="B=2", status="failed", reason=output.reason, outputs=[output])
        message = failed_validation(_artifact(check), "out/report.json", _source(RESCALED))
        assert "--tolerance" not in message and f"'{output.name}'" in message and "the conversion is wrong" in message


def test_the_report_records_a_given_a_declared_and_a_default_domain():
    from convert.pipeline.runner import input_domains
    from convert.specs import InputSpec, parse_input_specs

    given = parse_input_specs(["x:float32[B,8]{-1..1}"])
    specs = (
        *given,
        InputSpec("image", "float32", ("B", 3, 8, 8), 0.0, 255.0, domain_source="the model's Rescaling layer 'r'"),
        InputSpec("noise", "float32", ("B", 4)),
        InputSpec("input_ids", "int64", ("B", "S"), 0, 99),
        InputSpec("attention_mask", "int64", ("B", "S")),
    )
    recorded = {d.name: d for d in input_domains(specs, given)}
    assert (recorded["x"].drawn, recorded["x"].source) == ("uniform in [-1, 1)", "given")
    assert (recorded["image"].drawn, recorded["image"].source) == ("uniform in [0, 255)", "the model's Rescaling layer 'r'")
    assert (recorded["noise"].drawn, recorded["noise"].source) == ("standard normal", "default")
    assert (recorded["input_ids"].drawn, recorded["input_ids"].source) == ("integers 0..99", "the source's input specs")
    assert recorded["attention_mask"].drawn.startswith("padding masks")


def test_a_wrong_artifact_on_generated_inputs_is_told_the_domain_then_data_then_tolerance(tmp_path):
    run = run_cli("fixtures.torch_models:build_off_in_onnx", "--input", "x:float32[B,8]", "--to", "onnx", "--out", str(tmp_path / "out"))
    assert run.returncode == 1, run.output
    error = " ".join(run.stderr.split())
    assert "x: standard normal (no range given or declared)" in error, error
    assert error.index("--data") < error.index("--tolerance"), error
    [domain] = load_report(tmp_path / "out" / "report.json")["source"]["input_domains"]
    assert domain == {"name": "x", "drawn": "standard normal", "low": None, "high": None, "source": "default"}


# --- torch modules of known image libraries (no library imported) ---


def _torch_source(module, *specs: str):
    from convert.sources.request import SourceRequest
    from convert.sources.torch import load_torch_source
    from convert.specs import parse_input_specs

    return load_torch_source(SourceRequest(model=module, framework="torch", inputs=parse_input_specs(list(specs))))


def test_a_timm_models_pretrained_cfg_sets_its_images_normalised_range():
    import torch

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.head = torch.nn.Conv2d(3, 2, 3)
            # as timm sets it on every model it creates
            self.pretrained_cfg = {"mean": (0.485, 0.456, 0.406), "std": (0.229, 0.224, 0.225), "input_size": (3, 224, 224)}

        def forward(self, x):
            return self.head(x)

    [image] = _torch_source(Classifier(), "x:float32[B,3,8,8]").signature.inputs
    assert (image.low, image.high) == (pytest.approx((0 - 0.485) / 0.229, abs=1e-6), pytest.approx((1 - 0.406) / 0.225, abs=1e-6))
    assert "pretrained_cfg" in image.domain_source and "0..1 images" in image.domain_source
    [given] = _torch_source(Classifier(), "x:float32[B,3,8,8]{-3..3}").signature.inputs
    assert (given.low, given.high, given.domain_source) == (-3, 3, "")


def test_an_ultralytics_model_takes_0_to_1_images_and_other_modules_keep_no_domain():
    import torch

    class DetectionModel(torch.nn.Module):
        def forward(self, x):
            return x * 2

    DetectionModel.__module__ = "ultralytics.nn.tasks"  # where ultralytics defines its models' classes

    class Plain(torch.nn.Module):
        def forward(self, x):
            return x * 2

    [image] = _torch_source(DetectionModel(), "x:float32[B,3,8,8]").signature.inputs
    assert (image.low, image.high) == (0, 1) and "ultralytics DetectionModel" in image.domain_source
    [plain] = _torch_source(Plain(), "x:float32[B,3,8,8]").signature.inputs
    assert (plain.low, plain.high, plain.domain_source) == (None, None, "")


def test_an_ultralytics_detector_if_it_can_be_built_here():
    try:  # a torchvision build for another torch (CUDA's on a CPU torch) fails on import with a RuntimeError
        import torchvision  # noqa: F401
    except Exception as exc:
        pytest.skip(f"ultralytics needs torchvision, which cannot be imported here ({type(exc).__name__})")
    tasks = pytest.importorskip("ultralytics.nn.tasks", reason="ultralytics is not installed here")
    model = tasks.DetectionModel("yolo11n.yaml", nc=3, verbose=False).eval()
    [image] = _torch_source(model, "x:float32[B,3,64,64]").signature.inputs
    assert (image.low, image.high) == (0, 1)


# --- a Keras application with its preprocessing built in ---


def test_a_keras_models_first_preprocessing_layer_sets_its_domain_inside_a_nested_model_too():
    import keras

    from convert.sources.keras import declared_domains

    image = keras.Input((8, 8, 3), name="image")
    backbone = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Rescaling(1 / 127.5, offset=-1), keras.layers.Conv2D(2, 3)])
    wrapped = keras.Model(image, keras.layers.GlobalAveragePooling2D()(backbone(image)))
    features = keras.Input((3,), name="features")
    normalized = keras.Model(
        features, keras.layers.Dense(2)(keras.layers.Normalization(mean=[1.0, 2.0, 3.0], variance=[4.0, 4.0, 9.0])(features))
    )
    plain = keras.Model(features, keras.layers.Dense(2)(features))
    low, high, source = declared_domains(wrapped)["image"]
    assert (low, high) == (0, 255) and "Rescaling" in source and "0..255 becomes -1..1" in source
    low, high, source = declared_domains(normalized)["features"]
    assert (low, high) == (-3, 9) and "Normalization" in source and "2 standard deviations" in source
    assert declared_domains(plain) == {}


@pytest.fixture(scope="module")
def efficientnet(tmp_path_factory):
    """EfficientNetV2B0 with include_preprocessing (its Rescaling layer takes 0..255 images), saved as a legacy .h5 as
    Keras documents it, and converted to ONNX once."""
    import keras

    folder = tmp_path_factory.mktemp("efficientnet")
    keras.utils.set_random_seed(0)
    model = keras.applications.EfficientNetV2B0(
        weights=None, include_preprocessing=True, input_tensor=keras.Input((IMAGE, IMAGE, 3), name="image"), classes=10
    )
    model.save(folder / "efficientnet.h5")
    run = run_cli(str(folder / "efficientnet.h5"), "--trust-code", "--to", "onnx", "--out", str(folder / "out"))
    return model, run, folder / "out"


def test_a_keras_application_is_fed_0_to_255_images_as_its_rescaling_layer_declares(efficientnet):
    _, run, out = efficientnet
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    [domain] = report["source"]["input_domains"]
    assert (domain["name"], domain["drawn"], domain["low"], domain["high"]) == ("image", "uniform in [0, 255)", 0, 255)
    assert domain["source"].startswith("the model's Rescaling layer") and "0..255 becomes 0..1" in domain["source"]
    assert report["source"]["inputs"] == [f"image:float32[B,{IMAGE},{IMAGE},3]{{0..255}}"]


def test_the_keras_applications_onnx_file_matches_keras_on_images_at_a_batch_not_validated(efficientnet):
    import onnxruntime

    model, run, out = efficientnet
    assert run.returncode == 0, run.output
    [artifact] = load_report(out / "report.json")["artifacts"]
    batches = {c["input_shapes"]["image"][0] for c in artifact["checks"] if c["status"] == "passed"}
    batch = next(size for size in range(3, 10) if size not in batches)
    images = np.random.default_rng(7).integers(0, 256, size=(batch, IMAGE, IMAGE, 3)).astype(np.float32)
    session = onnxruntime.InferenceSession(str(out / artifact["path"].split("/")[-1]), providers=["CPUExecutionProvider"])
    [got] = session.run(None, {"image": images})
    expected = np.asarray(model({"image": images}, training=False))
    np.testing.assert_allclose(got, expected, atol=1e-5, rtol=1e-4)


# --- a Hugging Face image model with its image processor ---


@pytest.fixture(scope="module")
def vit(tmp_path_factory):
    import torch
    import transformers

    folder = tmp_path_factory.mktemp("vit") / "vit"
    torch.manual_seed(0)
    config = transformers.ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=37, image_size=32, patch_size=8, num_labels=3
    )
    model = transformers.ViTForImageClassification(config).eval()
    model.save_pretrained(folder)
    processor = transformers.ViTImageProcessor(
        size={"height": 32, "width": 32}, image_mean=[0.485, 0.456, 0.406], image_std=[0.229, 0.224, 0.225]
    )
    processor.save_pretrained(folder)
    run = run_cli(str(folder), "--to", "onnx", "--out", str(folder.parent / "out"))
    return model, processor, run, folder.parent / "out"


def test_a_hugging_face_folder_feeds_pixel_values_in_its_image_processors_range(vit):
    _, _, run, out = vit
    assert run.returncode == 0, run.output
    domains = {d["name"]: d for d in load_report(out / "report.json")["source"]["input_domains"]}
    pixels = domains["pixel_values"]
    assert pixels["low"] == pytest.approx((0 - 0.485) / 0.229, abs=1e-5) and pixels["high"] == pytest.approx((1 - 0.406) / 0.225, abs=1e-5)
    assert pixels["source"].startswith("the folder's preprocessor_config.json")


def test_the_processors_own_pixel_values_lie_in_that_range_and_the_onnx_file_matches_on_them(vit):
    import onnxruntime
    import torch

    model, processor, run, out = vit
    assert run.returncode == 0, run.output
    report = load_report(out / "report.json")
    pixels = next(d for d in report["source"]["input_domains"] if d["name"] == "pixel_values")
    [artifact] = report["artifacts"]
    images = list(np.random.default_rng(3).integers(0, 256, size=(3, 40, 48, 3), dtype=np.uint8))
    values = processor(images=images, return_tensors="np")["pixel_values"]
    assert pixels["low"] - 1e-6 <= values.min() and values.max() <= pixels["high"] + 1e-6
    session = onnxruntime.InferenceSession(str(out / artifact["path"].split("/")[-1]), providers=["CPUExecutionProvider"])
    [logits] = session.run(None, {"pixel_values": values.astype(np.float32)})
    with torch.no_grad():
        expected = model(pixel_values=torch.from_numpy(values.astype(np.float32))).logits.numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-5, rtol=1e-4)


def test_a_folder_without_an_image_processor_keeps_the_default(tmp_path):
    from convert.backends.huggingface import image_domain

    assert image_domain(tmp_path) == {} and image_domain("not a folder") == {} and image_domain(None) == {}
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"feature_extractor_type": "Wav2Vec2FeatureExtractor", "do_normalize": True})
    )
    assert image_domain(tmp_path) == {}
    (tmp_path / "preprocessor_config.json").write_text(
        json.dumps({"do_rescale": True, "rescale_factor": 1 / 127.5, "rescale_offset": True, "do_normalize": False})
    )
    offset = image_domain(tmp_path)
    assert (offset["low"], offset["high"]) == (-1.0, 1.0) and "rescaled by 0.00784314 minus 1" in offset["domain_source"]
