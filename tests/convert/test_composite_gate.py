"""The gate on a model made of several networks: each component judged by the policy on its own report, and the gate
failing closed on a component the run left out, through the real conversion of a SigLIP folder's text tower."""

from __future__ import annotations

import json

import pytest

import convert

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def siglip(tmp_path_factory):
    from fixtures.transformers_folders import write_folder

    return write_folder("siglip", tmp_path_factory.mktemp("siglip") / "siglip")


def _policy(folder, out, **require) -> dict:
    return {"model": {"path": str(folder), "component": ["text_model"]}, "require": {"targets": ["onnx"], **require}, "out": str(out)}


def test_a_component_the_run_left_out_rejects_and_the_components_the_policy_requires_promote(siglip, tmp_path):
    verdict = convert.gate(_policy(siglip, tmp_path / "all"))
    assert verdict.decision == "reject" and verdict.exit_code == 1
    assert [(r.code, r.artifact) for r in verdict.reasons] == [("missing_component", "vision_model"), ("missing_component", "joint")]
    report = json.loads((tmp_path / "all" / "report.json").read_text())
    assert report["composite"] == "dual-encoder" and [c["name"] for c in report["components"]] == ["text_model"]
    assert report["components"][0]["gate"] == "promote" and report["gate"]["decision"] == "reject"
    own = json.loads((tmp_path / "all" / "text_model" / "report.json").read_text())
    assert own["gate"]["decision"] == "promote"  # the component's own verdict, in its own report
    assert convert.gate(_policy(siglip, tmp_path / "text", components=["text_model"]), force=True).promoted
