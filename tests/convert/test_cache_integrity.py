"""Stage-cache entries that cannot lie. Whoever can write a cache folder (a shared or restored CI cache) can edit an
entry; the next run must not report, or promote, what the edit says:

* an entry is bound to its content by a digest over all of it: an edit that leaves the digest as it was is rebuilt,
  and the report says why;
* a forger who knows the format recomputes the digest, so a reused result is also judged again: a cached check must
  be supported by its metrics under this run's tolerances, a cached skip must be one this run would make, a cached
  export must be of the format and precision its stage makes. What does not hold is rebuilt, with the reason.

One cold run of cnn.pt2 to ONNX fills a cache; every case runs on its own copy of it (a run takes seconds)."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from convert import cache as stage_cache
from tests.conftest import load_report, run_cli

CACHE_ON = {"CONVERT_NO_CACHE": ""}
VALIDATION = "validate:onnx onnxruntime cpu"
TIGHT = "atol=1e-9,rtol=0"  # no exported graph meets it: its checks fail


@pytest.fixture(scope="module")
def cold(tmp_path_factory, torch_files):
    """A cold run to ONNX and a cold gate run under a tolerance the artifact cannot meet, each filling a cache."""
    root = tmp_path_factory.mktemp("integrity")
    model = torch_files / "cnn.pt2"
    done = run_cli(str(model), "--to", "onnx", "--out", str(root / "cold"), "--cache-dir", str(root / "cache"), env=CACHE_ON)
    assert done.returncode == 0, done.output[-3000:]
    gated = _gate(root, model, root / "gate-cache", "gate-cold")
    assert gated[0].returncode == 1 and gated[1]["gate"]["decision"] == "reject", gated[0].output[-3000:]
    return {"root": root, "model": model, "report": load_report(root / "cold" / "report.json"), "gate": gated[1]}


def _gate(root: Path, model: Path, cache: Path, name: str):
    policy = root / f"{name}.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "model": {"path": str(model)},
                "require": {"targets": ["onnx"]},
                "validation": {"tolerances": [TIGHT]},
                "out": str(root / name),
            }
        )
    )
    done = run_cli("gate", str(policy), "--cache-dir", str(cache), env=CACHE_ON)
    report = root / name / "report.json"
    return done, load_report(report) if report.exists() else None


def _copy(cold, name: str, source: str = "cache") -> Path:
    cache = cold["root"] / f"cache-{name}"
    shutil.copytree(cold["root"] / source, cache)
    return cache


def _entries(cache: Path) -> list[Path]:
    return sorted((cache / stage_cache.LAYOUT).glob("*/*/entry.json"))


def _validation_entry(cache: Path) -> Path:
    found = [
        e for e in _entries(cache) if any(c.get("runtime") == "onnxruntime" for c in json.loads(e.read_text())["data"].get("checks", []))
    ]
    assert len(found) == 1, found
    return found[0]


def _export_entry(cache: Path) -> Path:
    found = [e for e in _entries(cache) if json.loads(e.read_text())["data"].get("path") == "cnn.onnx"]
    assert len(found) == 1, found
    return found[0]


def _reference_entries(cache: Path) -> list[Path]:
    return [e for e in _entries(cache) if "outputs" in json.loads(e.read_text())["data"]]


def _edit(entry: Path, change, seal: bool) -> None:
    """Apply ``change`` to an entry's recorded content; with ``seal``, recompute its digest as a forger who knows the
    format would (an entry of a version without a digest is written without one)."""
    recorded = json.loads(entry.read_text())
    change(recorded)
    sealer = getattr(stage_cache, "entry_digest", None)
    if seal and sealer is not None:
        recorded["digest"] = sealer(recorded)
    entry.write_text(json.dumps(recorded))


def _run(cold, cache: Path, name: str, *extra: str):
    out = cold["root"] / name
    done = run_cli(str(cold["model"]), "--to", "onnx", "--out", str(out), "--cache-dir", str(cache), *extra, env=CACHE_ON)
    return done, load_report(out / "report.json")


def _rebuilt(report: dict) -> dict[str, str]:
    return {r["stage"]: r["reason"] for r in report["cache"]["rebuilt"]}


def _onnx_checks(report: dict) -> list[dict]:
    record = next(a for a in report["artifacts"] if a["format"] == "onnx" and not a["optimization"])
    return [c for c in record["checks"] if c["runtime"] == "onnxruntime" and c["device"] == "cpu"]


def _worst_error(report: dict) -> float:
    return max(o["max_abs_error"] for c in _onnx_checks(report) for o in c["outputs"])


def _set_error(value):
    def change(recorded):
        recorded["data"]["checks"][0]["outputs"][0]["max_abs_error"] = value  # the status stays "passed"

    return change


# --- (a) the security review's edit: an error of 123 under a tolerance of 1e-4, still marked passed -------------------


def test_the_reviews_edit_is_rebuilt_and_the_true_error_reported(cold):
    cache = _copy(cold, "review")
    _edit(_validation_entry(cache), _set_error(123.0), seal=False)
    done, report = _run(cold, cache, "review")
    assert done.returncode == 0, done.output[-3000:]
    assert _rebuilt(report) == {VALIDATION: "its content does not match its digest (entry.json was changed after it was written)"}
    assert VALIDATION not in report["cache"]["reused"] and "export:onnx" in report["cache"]["reused"]
    assert _worst_error(report) == _worst_error(cold["report"]) < 1e-4  # the true error, measured again
    # the rebuilt entry replaced the edited one
    stored = json.loads(_validation_entry(cache).read_text())["data"]["checks"]
    assert max(o["max_abs_error"] for c in stored for o in c["outputs"]) < 1e-4


@pytest.mark.parametrize("seal", [False, True], ids=["digest-left", "digest-recomputed"])
def test_the_gate_does_not_promote_on_a_forged_pass(cold, seal):
    """The gate's own cache, filled by a run that failed (no artifact meets the tight tolerance), edited to say every
    check passed with its true metrics: the gate still rejects, whether the digest was left (the edit is seen) or
    recomputed (the metrics do not support a pass)."""
    name = f"gate-forged-{seal}"
    cache = _copy(cold, name, "gate-cache")

    def forge(recorded):
        for check in recorded["data"]["checks"]:
            check["status"], check["reason"] = "passed", ""
            for output in check["outputs"]:
                output["status"], output["reason"], output["mismatch_count"] = "passed", "", 0

    _edit(_validation_entry(cache), forge, seal=seal)
    done, report = _gate(cold["root"], cold["model"], cache, name)
    assert report is not None, done.output[-3000:]
    assert report["gate"]["decision"] == "reject" and done.returncode == 1, done.output[-3000:]
    reason = _rebuilt(report)[VALIDATION]
    if seal:
        assert reason.startswith("its cached result does not hold under this run's judgement") and "beyond atol=1e-09" in reason
    else:
        assert reason == "its content does not match its digest (entry.json was changed after it was written)"
    assert all(c["status"] == "failed" for c in _onnx_checks(report) if c["shape"] != "*")
    assert any(r["code"] == "failed_check" for r in report["gate"]["reasons"])


# --- (b) any edit that leaves the digest as it was ----------------------------------------------------------------------


def _strategy(recorded):
    recorded["data"]["strategy"] = "a strategy that never ran"


def _seconds(recorded):
    recorded["data"]["checks"][0]["seconds"] = 99.0


def _source_failure(recorded):
    recorded["data"]["error"] = "RuntimeError: forged"  # the checks at this shape would be skipped


def _arrays_digest(recorded):
    recorded["arrays"] = "0" * 64


@pytest.mark.parametrize(
    "name, entry, change, stage",
    [
        ("strategy", _export_entry, _strategy, "export:onnx"),
        ("seconds", _validation_entry, _seconds, VALIDATION),
        ("source_failure", lambda cache: _reference_entries(cache)[0], _source_failure, "reference"),
        ("arrays_digest", lambda cache: _reference_entries(cache)[0], _arrays_digest, "reference"),
    ],
)
def test_an_edit_that_leaves_the_digest_is_rebuilt_with_the_reason(cold, name, entry, change, stage):
    cache = _copy(cold, f"edit-{name}")
    _edit(entry(cache), change, seal=False)
    done, report = _run(cold, cache, f"edit-{name}")
    assert done.returncode == 0, done.output[-3000:]
    rebuilt = _rebuilt(report)
    assert len(rebuilt) == 1 and next(iter(rebuilt)).startswith(stage), rebuilt
    assert next(iter(rebuilt.values())) == "its content does not match its digest (entry.json was changed after it was written)"
    assert all(c["status"] == "passed" for c in _onnx_checks(report) if c["shape"] != "*")
    assert len(_onnx_checks(report)) == len(_onnx_checks(cold["report"]))


# --- (c) forged entries whose digest was recomputed: the re-judgement catches them ----------------------------------------


def _skip_a_shape(recorded):
    check = recorded["data"]["checks"][1]
    check.update(status="skipped", reason="not run at this shape", outputs=[], samples=0)


def _nan_error(recorded):
    recorded["data"]["checks"][0]["outputs"][0]["max_abs_error"] = math.nan


def _no_cosine(recorded):
    recorded["data"]["checks"][0]["outputs"][0]["cosine_similarity"] = None


def _drop_a_check(recorded):
    del recorded["data"]["checks"][-1]


def _looser_tolerance(recorded):
    for output in recorded["data"]["checks"][0]["outputs"]:
        output["atol"] = 1000.0
        output["max_abs_error"] = 123.0


def _not_a_check(recorded):
    recorded["data"]["checks"][0]["status"] = "promoted"


@pytest.mark.parametrize(
    "name, change, says",
    [
        ("error_123", _set_error(123.0), "judged passed with max_abs_error 123, beyond atol=0.0001 + rtol=0.001"),
        ("skipped_shape", _skip_a_shape, "recorded skipped, but this run would have run it"),
        ("nan_error", _nan_error, "max_abs_error is missing or not finite"),
        ("no_cosine", _no_cosine, "cosine_similarity is missing or not finite"),
        ("dropped_check", _drop_a_check, "3 shape cases but 2 checks"),
        (
            "looser_tolerance",
            _looser_tolerance,
            "counted its mismatches at atol=1000, rtol=0.001 where this run's tolerance is atol=0.0001, rtol=0.001",
        ),
        ("not_a_check", _not_a_check, "cannot be read"),
    ],
)
def test_a_forged_check_with_its_digest_recomputed_is_re_judged_and_rebuilt(cold, name, change, says):
    cache = _copy(cold, f"forged-{name}")
    _edit(_validation_entry(cache), change, seal=True)
    done, report = _run(cold, cache, f"forged-{name}")
    assert done.returncode == 0, done.output[-3000:]
    reason = _rebuilt(report).get(VALIDATION, "")
    assert reason.startswith("its cached result does not hold under this run's judgement") and says in reason, _rebuilt(report)
    assert VALIDATION not in report["cache"]["reused"]
    assert [(c["shape"], c["status"]) for c in _onnx_checks(report)] == [(c["shape"], c["status"]) for c in _onnx_checks(cold["report"])]
    assert _worst_error(report) < 1e-4


def test_a_forged_source_failure_with_its_digest_recomputed_is_rebuilt(cold):
    """A reference entry that records the source failing at a shape skips every check there: it is never reused."""
    cache = _copy(cold, "forged-source-failure")
    entry = next(e for e in _reference_entries(cache) if len(json.loads(e.read_text())["data"]["outputs"]) > 1)

    def fail_after_the_first(recorded):
        recorded["data"]["error"], recorded["data"]["outputs"] = "RuntimeError: forged", recorded["data"]["outputs"][:1]

    _edit(entry, fail_after_the_first, seal=True)
    done, report = _run(cold, cache, "forged-source-failure")
    assert done.returncode == 0, done.output[-3000:]
    (label, reason), *others = _rebuilt(report).items()
    assert not others and label.startswith("reference ") and "records the source model failing" in reason
    assert all(c["status"] == "passed" and c["samples"] == 3 for c in _onnx_checks(report) if c["shape"] != "*")


def test_a_forged_export_precision_with_its_digest_recomputed_is_rebuilt(cold):
    """The precision an export records chooses the judgement (int8 is judged by a looser budget): it must be the one
    its stage makes."""
    cache = _copy(cold, "forged-precision")
    _edit(_export_entry(cache), lambda recorded: recorded["data"].update(precision="int8"), seal=True)
    done, report = _run(cold, cache, "forged-precision")
    assert done.returncode == 0, done.output[-3000:]
    assert "records precision int8 where export:onnx makes fp32" in _rebuilt(report)["export:onnx"]
    assert report["artifacts"][0]["precision"] == "fp32" and _onnx_checks(report)[0]["outputs"][0]["atol"] == 1e-4


# --- the digest itself, on a cache folder of its own ---------------------------------------------------------------------


def test_the_digest_binds_every_part_of_an_entry(tmp_path):
    store = stage_cache.StageCache(tmp_path)
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    key = "ab" + "0" * 62
    store.store(key, (), {"checks": [{"status": "passed"}]}, [model], {"a": np.arange(3)})
    assert isinstance(store.lookup(key, ()), stage_cache.Hit)
    entry = tmp_path / stage_cache.LAYOUT / key[:2] / key / stage_cache.ENTRY_FILE
    original = entry.read_text()
    for part, change in (
        ("data", lambda r: r["data"]["checks"][0].update(status="failed")),
        ("files", lambda r: r["files"].update({"model.bin": "1" * 64})),
        ("arrays", lambda r: r.update(arrays="2" * 64)),
        ("environment", lambda r: r["environment"].update(python="0.0")),
        ("digest", lambda r: r.pop("digest")),
    ):
        entry.write_text(original)
        _edit(entry, change, seal=False)
        found = store.lookup(key, ())
        assert isinstance(found, stage_cache.Miss) and found.rebuilt, part
        if part == "environment":
            assert found.rebuilt.startswith("made with other library versions")
        elif part == "digest":
            assert found.rebuilt == "its entry.json carries no digest of its content"
        else:
            assert found.rebuilt == "its content does not match its digest (entry.json was changed after it was written)", part
    # a forger who recomputes the digest gets past it: what the entry says is then judged again by the stage
    entry.write_text(original)
    _edit(entry, lambda r: r["data"]["checks"][0].update(status="failed"), seal=True)
    assert isinstance(store.lookup(key, ()), stage_cache.Hit)


def test_an_entry_naming_a_file_outside_its_folder_is_not_used(tmp_path):
    store = stage_cache.StageCache(tmp_path)
    model = tmp_path / "model.bin"
    model.write_bytes(b"weights")
    key = "cd" + "0" * 62
    store.store(key, (), {}, [model])
    entry = tmp_path / stage_cache.LAYOUT / key[:2] / key / stage_cache.ENTRY_FILE
    outside = tmp_path / "secret.txt"
    outside.write_text("not the cache's")
    from convert.safety import sha256_files

    _edit(entry, lambda r: r.update(files={"../../../../secret.txt": sha256_files([outside])}), seal=True)
    found = store.lookup(key, ())
    assert isinstance(found, stage_cache.Miss) and "is not a plain file name" in found.rebuilt
