"""The stage cache: a second run of an unchanged model reuses every stage after loading; a changed weight, option or
library version re-runs exactly the stages that depend on it; an entry that cannot be trusted (partial, a file changed
since, other library versions) is rebuilt and the report says why. One cold run fills a cache; every other case runs on
a copy of it, three command lines at a time."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import load_report, run_cli

CACHE_ON = {"CONVERT_NO_CACHE": ""}
TARGETS = ("--to", "onnx,torchscript", "--optimize", "int8-dynamic")
EVERY_JOB = {
    "export:onnx",
    "validate:onnx onnxruntime cpu",
    "export:torchscript",
    "validate:torchscript torch.jit cpu",
    "optimize:int8-dynamic",
    "validate:int8-dynamic onnxruntime cpu",
}


def _entry_of(cache: Path, stage_label: str, report: dict) -> Path:
    """The cache entry folder that served ``stage_label`` in an earlier run: found by the file or checks it holds."""
    for entry in (cache / "v1").glob("*/*/entry.json"):
        data = json.loads(entry.read_text())["data"]
        if stage_label == "export:onnx" and data.get("path") == "cnn.onnx":
            return entry.parent
        if (
            stage_label == "validate:onnx onnxruntime cpu"
            and data.get("checks")
            and data["checks"][0]["runtime"] == "onnxruntime"
            and _checks_of(report, "onnx") == data["checks"]
        ):
            return entry.parent
    raise AssertionError(f"no entry for {stage_label}")


def _checks_of(report: dict, key: str) -> list[dict]:
    record = next(a for a in report["artifacts"] if (a["optimization"] or a["format"]) == key)
    return [c for c in record["checks"] if c["runtime"] == "onnxruntime" and c["device"] == "cpu"]


def _changed_weights(source: Path, target: Path) -> None:
    import torch

    program = torch.export.load(str(source))
    with torch.no_grad():
        next(iter(program.state_dict.values())).add_(0.5)
    torch.export.save(program, str(target))


@pytest.fixture(scope="module")
def runs(tmp_path_factory, torch_files):
    """A cold run, then each variant on its own copy of the filled cache: {name: (run, report, cache folder)}."""
    root = tmp_path_factory.mktemp("cache")
    model = torch_files / "cnn.pt2"
    cold = run_cli(str(model), *TARGETS, "--out", str(root / "cold"), "--cache-dir", str(root / "cache"), env=CACHE_ON)
    assert cold.returncode == 0, cold.output[-3000:]
    cold_report = load_report(root / "cold" / "report.json")
    _changed_weights(model, root / "changed.pt2")
    policy = root / "promotion.yaml"
    policy.write_text(
        yaml.safe_dump(
            {"model": {"path": str(model)}, "require": {"targets": ["onnx"], "optimizations": ["int8-dynamic"]}, "out": str(root / "gated")}
        )
    )

    def tampered(name: str) -> Path:
        cache = root / f"cache-{name}"
        shutil.copytree(root / "cache", cache)
        if name == "old_onnxruntime":
            entry = _entry_of(cache, "validate:onnx onnxruntime cpu", cold_report) / "entry.json"
            recorded = json.loads(entry.read_text())
            recorded["environment"]["onnxruntime"] = "1.0.0"
            entry.write_text(json.dumps(recorded))
        elif name == "partial":
            (_entry_of(cache, "export:onnx", cold_report) / "entry.json").unlink()
        elif name == "edited":
            (_entry_of(cache, "export:onnx", cold_report) / "files" / "cnn.onnx").write_bytes(b"not the exported model")
        return cache

    variants = {
        "again": (str(model), *TARGETS),
        "gate": ("gate", str(policy)),
        "tolerance": (str(model), *TARGETS, "--tolerance", "atol=1e-3,rtol=1e-3"),
        "samples": (str(model), *TARGETS, "--samples", "4"),
        "weights": (str(root / "changed.pt2"), *TARGETS),
        "no_cache": (str(model), "--to", "onnx", "--no-cache"),
        "old_onnxruntime": (str(model), *TARGETS),
        "partial": (str(model), *TARGETS),
        "edited": (str(model), *TARGETS),
        "factory": (
            "fixtures.torch_models:build_cnn",
            "--weights",
            str(torch_files / "cnn.safetensors"),
            "--input",
            "x:float32[B,3,32,32]",
            "--to",
            "onnx",
        ),
    }
    # only the tampered variants need a cache of their own: the others add entries under new keys or none at all
    caches = {name: tampered(name) if name in ("old_onnxruntime", "partial", "edited") else root / "cache" for name in variants}

    def run(name: str):
        out = root / name
        args = (*variants[name], "--cache-dir", str(caches[name])) + (() if name == "gate" else ("--out", str(out)))
        done = run_cli(*args, env=CACHE_ON)
        report = root / "gated" / "report.json" if name == "gate" else out / "report.json"
        return done, load_report(report) if report.exists() else None, caches[name]

    results = {name: run(name) for name in variants}  # one at a time: the other xdist worker has the other core
    return {"cold": (cold, cold_report, root / "cache"), **results}


def _reused(report: dict) -> set[str]:
    return set(report["cache"]["reused"])


def _rebuilt(report: dict) -> dict[str, str]:
    return {r["stage"]: r["reason"] for r in report["cache"]["rebuilt"]}


def _ok(runs, name: str) -> dict:
    done, report, _ = runs[name]
    assert done.returncode == 0, done.output[-3000:]
    return report


def test_a_cold_run_fills_the_cache_and_reuses_nothing(runs):
    report = _ok(runs, "cold")
    assert report["cache"]["used"] and report["cache"]["reused"] == [] and report["cache"]["rebuilt"] == []
    assert not any(stage["reused"] for stage in report["stages"])
    assert len(list((runs["cold"][2] / "v1").glob("*/*/entry.json"))) >= len(EVERY_JOB) + 1  # and the reference cases


def test_a_second_run_of_an_unchanged_model_reuses_every_stage_after_loading(runs):
    cold, report = _ok(runs, "cold"), _ok(runs, "again")
    assert EVERY_JOB <= _reused(report) and any(label.startswith("reference") for label in _reused(report))
    assert [s["name"] for s in report["stages"] if not s["reused"]] == ["load"]  # the model is still loaded, and checked
    for before, now in zip(cold["artifacts"], report["artifacts"]):
        assert now["sha256"] == before["sha256"] and now["passed"] and now["checks"] == before["checks"]
        assert Path(now["path"]).is_file() and Path(now["path"]).parent.name == "again"
    assert "reused from the cache" in runs["again"][0].stderr and "reused from the cache" not in runs["cold"][0].stderr


def test_the_gate_on_an_unchanged_model_reuses_the_artifacts_and_promotes(runs):
    report = _ok(runs, "gate")
    assert report["gate"]["decision"] == "promote"
    assert {job for job in EVERY_JOB if "torch" not in job} <= _reused(report)


def test_a_changed_tolerance_re_runs_only_the_validations(runs):
    report = _ok(runs, "tolerance")
    assert _reused(report) & EVERY_JOB == {"export:onnx", "export:torchscript", "optimize:int8-dynamic"}
    validated = [s for s in report["stages"] if s["name"].startswith("validate:")]
    assert validated and not any(s["reused"] for s in validated)


def test_more_samples_re_run_the_references_and_validations_but_not_the_exports(runs):
    report = _ok(runs, "samples")
    assert not any(label.startswith(("reference", "validate:")) for label in _reused(report))
    assert {"export:onnx", "export:torchscript", "optimize:int8-dynamic"} <= _reused(report)


def test_changed_weights_re_run_every_stage(runs):
    report = _ok(runs, "weights")
    assert report["cache"]["reused"] == []
    assert report["source"]["sha256"] != runs["cold"][1]["source"]["sha256"]


def test_no_cache_runs_every_stage_and_says_so(runs):
    report = _ok(runs, "no_cache")
    assert not report["cache"]["used"] and "--no-cache" in report["cache"]["reason"] and report["cache"]["reused"] == []


def test_a_model_whose_code_lives_outside_its_file_is_not_cached(runs):
    report = _ok(runs, "factory")
    assert not report["cache"]["used"] and "factory model" in report["cache"]["reason"] and report["cache"]["reused"] == []


def test_an_entry_made_with_another_library_version_is_rebuilt_and_only_that_one(runs):
    report = _ok(runs, "old_onnxruntime")
    assert _rebuilt(report) == {
        "validate:onnx onnxruntime cpu": "made with other library versions (onnxruntime 1.0.0 → "
        + report["environment"]["packages"]["onnxruntime"]
        + ")"
    }
    assert EVERY_JOB - _reused(report) == {"validate:onnx onnxruntime cpu"}
    again = _entry_of(runs["old_onnxruntime"][2], "validate:onnx onnxruntime cpu", report) / "entry.json"
    assert json.loads(again.read_text())["environment"]["onnxruntime"] != "1.0.0"  # the rebuilt entry replaced it


@pytest.mark.parametrize(
    "name, reason",
    [("partial", "a partial entry (its entry.json is missing)"), ("edited", "its file cnn.onnx changed since it was cached")],
)
def test_an_entry_that_cannot_be_trusted_is_rebuilt_with_everything_made_from_it(runs, name, reason):
    report = _ok(runs, name)
    assert _rebuilt(report) == {"export:onnx": reason}
    assert all(a["passed"] for a in report["artifacts"])
    assert {"export:torchscript", "validate:torchscript torch.jit cpu"} <= _reused(report)
    assert "export:onnx" not in _reused(report)
