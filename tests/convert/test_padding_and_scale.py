"""Correct exports that an absolute, every-position comparison failed, through the real CLI: a ModernBERT folder whose
padded tokens' local window holds only padding (eager and exported attention give different garbage there, every real
token agrees), and a detector whose box coordinates run to hundreds. Each passes, matches the library's or the
module's own eager model where it counts, and fails once a fault is planted in its weights
(`model-convert validate EDITED.onnx --against ...`)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tests.conftest import load_report, run_cli

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

DETECTOR = '''
import torch
from torch import nn


class Detector(nn.Module):
    """Box coordinates in the hundreds, each the small difference of sums in the thousands (a 1x1 convolution over
    post-ReLU features with a folded batch norm's bias, as in a detector's head), and class scores."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 128, 3, stride=2, padding=1)
        self.head = nn.Conv2d(128, 4, 1)
        self.classes = nn.Conv2d(128, 3, 1)
        with torch.no_grad():
            self.stem.weight.normal_(0, 6.0)
            self.head.weight.normal_(1.0, 0.25)
            self.head.bias.copy_(torch.tensor([0.0, 40.0, 600.0, 600.0]) - 6.6 * self.head.weight.sum((1, 2, 3)))

    def forward(self, images):
        features = torch.relu(self.stem(images))
        return {"boxes": self.head(features).flatten(2), "scores": torch.sigmoid(self.classes(features)).flatten(2)}


def build():
    torch.manual_seed(0)
    return Detector().eval()
'''
IMAGES = "images:float32[B,3,64,64]{0..1}"


def _planted(path, initializer: str, out) -> str:
    """A copy of an ONNX file with one initializer scaled by 1.01."""
    model = onnx.load(str(path))
    weight = next(w for w in model.graph.initializer if w.name == initializer)
    weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.01), initializer))
    onnx.save(model, str(out))
    return str(out)


def _onnx_outputs(path, feed: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, feed), strict=True))


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    folder = tmp_path_factory.mktemp("modernbert") / "model"
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=100,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        local_attention=4,
        global_attn_every_n_layers=2,
        max_position_embeddings=64,
        pad_token_id=0,
        bos_token_id=1,
        cls_token_id=1,
        eos_token_id=2,
        sep_token_id=2,
    )
    transformers.ModernBertForMaskedLM(config).eval().save_pretrained(folder)
    out = folder.parent / "out"
    run = run_cli(str(folder), "--to", "onnx", "--out", str(out))
    return folder, out, run


@pytest.fixture(scope="module")
def detector(tmp_path_factory):
    folder = tmp_path_factory.mktemp("detector")
    (folder / "detector.py").write_text(DETECTOR)
    out = folder / "out"
    run = run_cli(f"{folder / 'detector.py'}:build", "--input", IMAGES, "--to", "onnx", "--out", str(out))
    return folder, out, run


def test_modernbert_padded_past_its_window_passes_with_its_masked_positions_left_out(modernbert):
    folder, out, run = modernbert
    assert run.returncode == 0, run.output
    (artifact,) = load_report(out / "report.json")["artifacts"]
    logits = [o for c in artifact["checks"] if c["outputs"] for o in c["outputs"] if o["name"] == "logits"]
    assert all(o["masked_by"] == "attention_mask" for o in logits)
    assert sum(o["masked_values"] for o in logits) > 0  # the export case's padded rows, past the local window
    # independently: ONNX Runtime at a size the validation did not use, against the library's eager model, at real tokens
    rng = np.random.default_rng(5)
    ids = rng.integers(3, 100, (3, 13))
    mask = np.ones_like(ids)
    mask[1, 4:] = 0
    mask[2, 9:] = 0
    got = _onnx_outputs(out / "model.onnx", {"input_ids": ids, "attention_mask": mask})["logits"]
    eager = transformers.ModernBertForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        want = eager(input_ids=torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits.numpy()
    real = mask.astype(bool)
    np.testing.assert_allclose(got[real], want[real], atol=1e-4, rtol=1e-3)


def test_modernbert_with_a_planted_fault_at_every_real_token_fails(modernbert, tmp_path):
    folder, out, _ = modernbert
    edited = _planted(out / "model.onnx", "model.embeddings.norm.weight", tmp_path / "edited.onnx")
    run = run_cli("validate", edited, "--against", str(folder), "--out", str(tmp_path / "validated"))
    assert run.returncode == 1, run.output
    (artifact,) = load_report(tmp_path / "validated" / "report.json")["artifacts"]
    failed = [c for c in artifact["checks"] if c["status"] == "failed"]
    assert failed and all("output 'logits'" in c["reason"] and "differ beyond" in c["reason"] for c in failed)


def test_a_detector_with_boxes_in_the_hundreds_passes_with_its_atol_scaled(detector):
    folder, out, run = detector
    assert run.returncode == 0, run.output
    (artifact,) = load_report(out / "report.json")["artifacts"]
    checks = [c for c in artifact["checks"] if c["outputs"]]
    boxes = [o for c in checks for o in c["outputs"] if o["name"] == "boxes"]
    scores = [o for c in checks for o in c["outputs"] if o["name"] == "scores"]
    assert all(o["atol_scale"] > 100 and o["atol"] == pytest.approx(1e-4 * o["atol_scale"]) for o in boxes)
    assert all(o["atol"] == 1e-4 for o in scores)  # probabilities keep the absolute atol


def test_a_detector_whose_box_head_is_scaled_by_one_percent_fails(detector, tmp_path):
    folder, out, _ = detector
    edited = _planted(out / "build.onnx", "head.weight", tmp_path / "edited.onnx")
    run = run_cli("validate", edited, "--against", f"{folder / 'detector.py'}:build", "--input", IMAGES, "--out", str(tmp_path / "v"))
    assert run.returncode == 1, run.output
    (artifact,) = load_report(tmp_path / "v" / "report.json")["artifacts"]
    failed = [c for c in artifact["checks"] if c["status"] == "failed"]
    assert failed and all("output 'boxes'" in c["reason"] and "output 'scores'" not in c["reason"] for c in failed)
