"""Unit tests of a model made of several networks: which folders are composites (convert/composites.py, read before
any framework is imported), --component's refusals, the one verdict over the components (pipeline/composite.py), and
the gate's judgement of a composite report (gate/judge.py), each reason alone."""

from __future__ import annotations

import json
from typing import get_args

import pytest
from pydantic import ValidationError

from convert.composites import COMPONENTS, COMPOSITE_KINDS, composite_of
from convert.errors import ConvertError
from convert.gate.judge import judge
from convert.pipeline.composite import _finish
from convert.policy import Policy
from convert.reports import model as rm

pytestmark = pytest.mark.fast


def _folder(tmp_path, name: str, **files: dict):
    folder = tmp_path / name
    folder.mkdir()
    for file, content in files.items():
        (folder / f"{file}.json").write_text(json.dumps(content))
    return folder


def test_an_encoder_decoder_config_is_a_composite_unless_the_task_names_one_network(tmp_path):
    t5 = _folder(tmp_path, "t5", config={"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "is_encoder_decoder": True})
    assert composite_of(t5, None, None).kind == "encoder-decoder"
    assert composite_of(t5, "text2text-generation-with-past", None).names() == ("encoder", "decoder", "decoder_with_past")
    assert composite_of(t5, "feature-extraction", None) is None  # the encoder alone, as before
    joined = _folder(tmp_path, "ved", config={"architectures": ["VisionEncoderDecoderModel"], "model_type": "vision-encoder-decoder"})
    assert composite_of(joined, None, None).kind == "encoder-decoder"


def test_clip_and_siglip_are_dual_encoders_and_a_bert_is_one_network(tmp_path):
    for architecture in ("CLIPModel", "SiglipModel"):
        folder = _folder(tmp_path, architecture, config={"architectures": [architecture], "model_type": architecture.lower()})
        assert composite_of(folder, None, None).names() == ("text_model", "vision_model", "joint")
        assert composite_of(folder, "zero-shot-image-classification", None) is None  # the joint model alone
    bert = _folder(tmp_path, "bert", config={"architectures": ["BertForMaskedLM"], "model_type": "bert"})
    assert composite_of(bert, None, None) is None
    assert composite_of(tmp_path / "model.pt", None, None) is None
    assert composite_of(object(), None, None) is None


def test_a_pipeline_folder_is_a_composite_and_a_diffusers_model_folder_is_not(tmp_path):
    index = {
        "_class_name": "StableDiffusionPipeline",
        "text_encoder": ["transformers", "CLIPTextModel"],
        "unet": ["diffusers", "UNet2DConditionModel"],
        "vae": ["diffusers", "AutoencoderKL"],
    }
    pipeline = _folder(tmp_path, "sd", model_index=index)
    assert composite_of(pipeline, None, None).names() == ("text_encoder", "unet", "vae_decoder")
    unet = _folder(tmp_path, "unet", config={"_class_name": "UNet2DConditionModel"})
    assert composite_of(unet, None, None) is None
    without_vae = _folder(tmp_path, "partial", model_index={k: v for k, v in index.items() if k != "vae"})
    assert composite_of(without_vae, None, None) is None


def test_a_component_the_model_lacks_is_refused_with_its_components_and_the_nearest_name(tmp_path):
    t5 = _folder(tmp_path, "t5", config={"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "is_encoder_decoder": True})
    composite = composite_of(t5, None, None)
    with pytest.raises(ConvertError) as info:
        composite.chosen(("decodr",))
    assert "Did you mean decoder? Its components are: encoder, decoder, decoder_with_past." in info.value.paragraph()
    assert [c.name for c in composite.chosen(("decoder_with_past", "encoder"))] == ["encoder", "decoder_with_past"]


def _component(name: str, passed: bool = True, exit_code: int = 0, gate: str | None = "promote", report: str | None = "x.json"):
    return rm.ComponentRecord(name=name, passed=passed, exit_code=exit_code, gate=gate, report=report)


def _composite_report(components, assembled) -> rm.Report:
    return rm.Report(
        tool_version="0",
        created_at="2026-11-26T00:00:00+00:00",
        environment=rm.Environment(python="3.11", platform="linux", devices=["cpu"]),
        composite="encoder-decoder",
        components=components,
        assembled=assembled,
    )


EVERY = ("encoder", "decoder", "decoder_with_past")
PASSED_CHECK = rm.AssembledCheck(name="generation", artifact="onnx", status="passed")


def test_one_verdict_passes_only_where_every_component_passed_and_no_assembled_check_failed():
    report = _composite_report([_component(n) for n in EVERY], [PASSED_CHECK])
    _finish(report)
    assert (report.passed, report.exit_code) == (True, 0)
    failed_check = rm.AssembledCheck(name="generation", artifact="onnx", status="failed", reason="token 2 differs")
    report = _composite_report([_component(n) for n in EVERY], [failed_check])
    _finish(report)
    assert (report.passed, report.exit_code) == (False, 1)
    stopped = [_component("encoder"), _component("decoder", passed=False, exit_code=2, report=None)]
    report = _composite_report(stopped, [])
    _finish(report)
    assert (report.passed, report.exit_code) == (False, 2)


def _policy(**require) -> Policy:
    return Policy.model_validate({"model": {"path": "folder"}, "require": {"targets": ["onnx"], **require}})


def test_the_gate_promotes_a_composite_whose_every_component_it_promoted_and_whose_assembly_passed():
    verdict = judge(_composite_report([_component(n) for n in EVERY], [PASSED_CHECK]), _policy())
    assert verdict.promoted and verdict.exit_code == 0


def test_the_gate_fails_closed_on_a_component_the_run_left_out():
    report = _composite_report([_component("encoder")], [rm.AssembledCheck(name="generation", artifact="*", status="skipped")])
    verdict = judge(report, _policy())
    assert not verdict.promoted
    assert {(r.code, r.artifact) for r in verdict.reasons} == {("missing_component", "decoder"), ("missing_component", "decoder_with_past")}
    # require.components names those that must pass: the encoder alone may then be promoted
    assert judge(report, _policy(components=["encoder"])).promoted


def test_the_gate_rejects_a_component_it_rejected_on_its_own_report_and_a_failed_or_missing_assembly():
    components = [_component("encoder"), _component("decoder", gate="reject"), _component("decoder_with_past")]
    verdict = judge(_composite_report(components, [PASSED_CHECK]), _policy())
    assert [(r.code, r.artifact) for r in verdict.reasons] == [("rejected_component", "decoder")]
    failed = rm.AssembledCheck(name="generation", artifact="onnx", status="failed", reason="token 2 differs")
    verdict = judge(_composite_report([_component(n) for n in EVERY], [failed]), _policy())
    assert [r.code for r in verdict.reasons] == ["failed_assembled"] and "token 2 differs" in verdict.reasons[0].message
    skipped = rm.AssembledCheck(name="generation", artifact="*", status="skipped", reason="no ONNX artifacts")
    verdict = judge(_composite_report([_component(n) for n in EVERY], [skipped]), _policy())
    assert [r.code for r in verdict.reasons] == ["failed_assembled"] and "never run together" in verdict.reasons[0].message


def test_a_required_component_the_model_does_not_have_rejects():
    verdict = judge(_composite_report([_component(n) for n in EVERY], [PASSED_CHECK]), _policy(components=["unet"]))
    assert [(r.code, r.artifact) for r in verdict.reasons] == [("missing_component", "unet")]


def test_a_report_names_only_composites_the_gate_knows():
    """The report's composite field is the registry's keys: a report naming another fails to load, never reaching the gate."""
    assert set(get_args(rm.Report.model_fields["composite"].annotation)) - {""} == set(COMPONENTS)
    with pytest.raises(ValidationError):
        rm.Report.model_validate({**_composite_report([], []).model_dump(), "composite": "nan"})


def test_every_rendering_shows_the_components_and_the_check_that_ran_them_together():
    from convert.reports.html import render_html
    from convert.reports.junit import render_junit
    from convert.reports.markdown import render_markdown

    failed = rm.AssembledCheck(
        name="pipeline", artifact="onnx", status="failed", reason="psnr 12 dB below 40", diverged_at="step 1", blamed=["unet"]
    )
    report = _composite_report([_component("encoder"), _component("decoder", passed=False, exit_code=1)], [failed])
    _finish(report)
    markdown = render_markdown(report)
    assert "### Components of the encoder-decoder" in markdown and "| decoder | failed |" in markdown
    assert "| pipeline | onnx | failed |" in markdown and "step 1" in markdown and "| unet |" in markdown
    junit = render_junit(report)
    assert 'classname="component.decoder"' in junit and 'failures="2"' in junit and "alone, unet fail it" in junit
    html = render_html(report)
    assert "Components of the encoder-decoder" in html and "Run together" in html and "psnr 12 dB below 40" in html


FOLDERS = {
    "diffusion-pipeline": {"model_index.json": {"_class_name": "StableDiffusionPipeline", "text_encoder": [], "unet": [], "vae": []}},
    "encoder-decoder": {"config.json": {"architectures": ["T5ForConditionalGeneration"], "is_encoder_decoder": True}},
    "dual-encoder": {"config.json": {"architectures": ["CLIPModel"], "model_type": "clip"}},
    "": {"config.json": {"architectures": ["BertModel"], "model_type": "bert"}},
}


@pytest.mark.parametrize("kind", FOLDERS, ids=lambda kind: kind or "one network")
def test_a_folder_is_the_one_kind_whose_detection_names_it(tmp_path, kind):
    for name, data in FOLDERS[kind].items():
        (tmp_path / name).write_text(json.dumps(data))
    detected = [k.name for k in COMPOSITE_KINDS if k.detect(tmp_path, None, None)]
    assert detected == ([kind] if kind else [])
    composite = composite_of(tmp_path, None, None)
    assert (composite.kind if composite else "") == kind
    if composite:
        assert composite.names() == tuple(c.name for c in COMPONENTS[kind]) and composite.why
    assert composite_of(tmp_path, "feature-extraction", None) is None  # a task names one network
