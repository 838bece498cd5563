"""convert batch: every model of a manifest gated in its own process (locally, or as Ray tasks on a local Ray instance
the test starts), a deliberately crashing and a wrong model among good ones, one summary and its exit code; a bad
manifest exits 2 before anything runs."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from convert.batch import BatchSummary, load_manifest
from convert.errors import ConvertError
from tests.conftest import REPO, CliRun, run_cli
from tests.pages import repository_root, user_environment

X8 = ["x:float32[B,8]"]


def write_manifest(folder: Path, models: list[dict], **top) -> Path:
    path = folder / "zoo.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "out": "zoo-out",
                "defaults": {"require": {"targets": ["onnx"]}, "validation": {"samples": 2}},
                "models": models,
                **top,
            },
            sort_keys=False,
        )
    )
    return path


def zoo(torch_files: Path) -> list[dict]:
    return [
        {"name": "cnn", "model": {"path": str(torch_files / "cnn.pt2")}, "require": {"targets": ["onnx", "torch_export"]}},
        {"name": "crashes", "model": {"path": "fixtures.torch_models:build_crashes_on_load", "inputs": X8}},
        {"name": "wrong", "model": {"path": "fixtures.torch_models:build_off_in_onnx", "inputs": X8}},
    ]


def summary_of(folder: Path) -> BatchSummary:
    return BatchSummary.model_validate(json.loads((folder / "summary.json").read_text()))


BATCH_PAGE = "how-to/batch.md"
BATCH_SECTION = (REPO / "docs" / BATCH_PAGE).read_text()


@pytest.fixture(scope="module")
def local_batch(tmp_path_factory):
    """The batch guide's lines, run as shown from a scratch repository root through the installed model-convert, with
    no PYTHONPATH (two of the manifest's models fail on purpose)."""
    root = repository_root(tmp_path_factory.mktemp("batch"))
    lines = [line for line in re.search(r"```bash\n(.*?)```", BATCH_SECTION, re.S).group(1).splitlines() if line.strip()]
    assert lines[0].startswith("python -m fixtures.build_torch") and lines[1].startswith("model-convert batch")
    done = [
        subprocess.run(["bash", "-c", line], cwd=root, capture_output=True, text=True, env=user_environment(), timeout=900)
        for line in lines
    ]
    assert done[0].returncode == 0, done[0].stderr[-3000:]
    return CliRun(done[1].returncode, done[1].stdout, done[1].stderr), root / "examples" / "batch" / "out"


def test_one_crashing_and_one_wrong_model_do_not_stop_the_others(local_batch):
    run, out = local_batch
    assert run.returncode == 1, run.output[-3000:]
    summary = summary_of(out)
    assert {m.name: m.status for m in summary.models} == {
        "cnn": "promoted",
        "cnn-factory": "promoted",
        "crashes-on-load": "error",
        "wrong-onnx": "rejected",
    }
    assert not summary.passed and summary.exit_code == 1 and summary.engine == "local (2 workers)"
    assert "2 of 4 models promoted" in run.stdout and "Traceback" not in run.output


def test_each_model_has_its_own_folder_report_and_reasons(local_batch):
    _, out = local_batch
    models = {m.name: m for m in summary_of(out).models}
    assert (
        (out / "cnn" / "cnn.onnx").is_file() and (out / "cnn" / "cnn.pt2").is_file() and (out / "cnn" / "cnn.int8-dynamic.onnx").is_file()
    )
    assert json.loads((out / "cnn" / "report.json").read_text())["gate"]["decision"] == "promote"
    assert "SIGSEGV" in models["crashes-on-load"].reasons[0] and models["crashes-on-load"].report is None
    assert not any((out / "crashes-on-load").glob("*.onnx"))  # nothing partial at a final path
    assert "scores" in models["wrong-onnx"].reasons[0] and Path(models["wrong-onnx"].report).is_file()
    assert (out / "wrong-onnx" / "failed" / "build_off_in_onnx.onnx").is_file()
    for model in models.values():
        assert Path(model.log).is_file() and Path(model.policy).is_file() and model.where


def test_the_summary_is_refused_again_without_force(local_batch):
    _, out = local_batch
    again = run_cli("batch", "zoo.yaml", cwd=out.parent)
    assert again.returncode == 2 and "already exists" in again.stderr and "--force" in again.stderr


def test_the_same_batch_on_a_local_ray_instance(tmp_path, torch_files):
    pytest.importorskip("ray")
    ray = str(Path(sys.executable).parent / "ray")
    temp = Path("/tmp") / f"ray-{tmp_path.name[-12:]}"  # Ray's socket paths must stay short
    started = subprocess.run(
        [
            ray,
            "start",
            "--head",
            "--num-cpus",
            "2",
            "--include-dashboard=false",
            "--disable-usage-stats",
            "--object-store-memory",
            str(100 * 2**20),
            f"--temp-dir={temp}",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert started.returncode == 0, started.stdout[-2000:] + started.stderr[-2000:]
    try:
        models = zoo(torch_files)[:2]
        models[0]["resources"] = {"cpus": 1}
        manifest = write_manifest(tmp_path, models)
        run = run_cli("batch", str(manifest), "--engine", "ray", "--address", "auto", "--out", "ray-out", cwd=tmp_path)
    finally:
        subprocess.run([ray, "stop", "--force"], capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)
    assert run.returncode == 1, run.output[-3000:]
    summary = summary_of(tmp_path / "ray-out")
    assert summary.engine == "ray (auto)"
    assert {m.name: m.status for m in summary.models} == {"cnn": "promoted", "crashes": "error"}
    assert (tmp_path / "ray-out" / "cnn" / "cnn.onnx").is_file()


@pytest.mark.parametrize(
    "models, top, says",
    [
        ([{"name": "a", "model": {"path": "m.pt2"}, "requir": {}}], {}, ["models[0] (a)", "line 13: requir: unknown key"]),
        ([{"model": {"path": "m.pt2"}}], {}, ["each model needs a name"]),
        ([{"name": "a", "model": {"path": "m.pt2"}}, {"name": "a", "model": {"path": "n.pt2"}}], {}, ["'a' is also the name of models[0]"]),
        ([{"name": "a", "model": {"path": "m.pt2"}, "out": "x"}], {}, ["'out' is set for the whole batch"]),
        ([{"name": "a", "model": {"path": "m.pt2"}, "require": {"targets": ["onnxx"]}}], {}, ["unknown format 'onnxx'"]),
        ([{"name": "a", "model": {"path": "m.pt2"}, "resources": {"gpus": -1}}], {}, ["resources", "gpus"]),
        ([], {}, ["models", "at least 1"]),
        ([{"name": "a", "model": {"path": "m.pt2"}}], {"workers": 2}, ["workers: unknown key"]),
    ],
)
def test_a_bad_manifest_names_the_problem(tmp_path, models, top, says):
    manifest = write_manifest(tmp_path, models, **top)
    with pytest.raises(ConvertError) as raised:
        load_manifest(manifest)
    for fragment in says:
        assert fragment in raised.value.paragraph()


def test_a_bad_manifest_exits_2_and_runs_nothing(tmp_path):
    manifest = write_manifest(tmp_path, [{"name": "a", "model": {"path": "m.pt2"}, "requir": {}}])
    run = run_cli("batch", str(manifest), cwd=tmp_path)
    assert run.returncode == 2 and "requir: unknown key" in run.stderr and "Traceback" not in run.output
    assert not (tmp_path / "zoo-out").exists()
    address = run_cli("batch", str(manifest), "--address", "auto", cwd=tmp_path)
    assert address.returncode == 2 and "--address goes with --engine ray" in address.stderr


def test_defaults_merge_under_each_model_and_paths_are_relative_to_the_manifest(tmp_path):
    manifest = write_manifest(tmp_path, [{"name": "a", "model": {"path": "m.pt2"}, "validation": {"seed": 3}}])
    (job,), out = load_manifest(manifest)
    assert job.policy.validation.samples == 2 and job.policy.validation.seed == 3  # both kept: mappings merge
    assert job.policy.model.path == str(tmp_path / "m.pt2") and out == tmp_path / "zoo-out"
    assert job.policy.out == str(tmp_path / "zoo-out" / "a") and job.resources.cpus == 1
