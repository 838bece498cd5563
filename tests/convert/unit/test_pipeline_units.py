"""Unit tests of the pure parts of convert/pipeline/: exit-code rules, option checks, stage records, the stem of
the output files, the report of a run an error stopped, and the shape cases every artifact is validated at."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from convert.checks.base import crashed
from convert.errors import ConvertError, MissingDependency
from convert.pipeline import ConvertRequest, Progress, run
from convert.pipeline.benchmark import _now_at
from convert.pipeline.context import Stages, finish, report_stop
from convert.pipeline.plan import check_optimizations, check_targets, exporter_for, stem
from convert.pipeline.validate import artifact_passed
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.validators import plan_shape_cases
from convert.worker import StageCrashed
from convert.worker.process import _death


def _report(*artifacts: rm.ArtifactRecord, interrupted: bool = False) -> rm.Report:
    return rm.Report(
        tool_version="0",
        created_at="2024-01-01T00:00:00+00:00",
        interrupted=interrupted,
        environment=rm.Environment(python="3", platform="test"),
        artifacts=list(artifacts),
    )


def _check(status: str, device: str = "cpu") -> rm.Check:
    return rm.Check(runtime="onnxruntime", device=device, shape="B=2", status=status)


def _artifact(passed: bool, *statuses: str, candidate: bool = False, optimization: str = "") -> rm.ArtifactRecord:
    return rm.ArtifactRecord(
        format="onnx", optimization=optimization, candidate=candidate, passed=passed, checks=[_check(s) for s in statuses]
    )


def _stages(*records: tuple[str, str]) -> Stages:
    stages = Stages(Progress())
    stages.records = [rm.Stage(kind=name.partition(":")[0], subject=name.partition(":")[2], status=status) for name, status in records]
    return stages


class RecordingProgress(Progress):
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def started(self, name: str) -> None:
        self.events.append(("started", name))

    def finished(self, stage: rm.Stage, detail: str = "") -> None:
        self.events.append(("finished", f"{stage.name} {stage.status}"))


# finish: the exit-code rules


def test_a_run_whose_artifacts_all_passed_exits_0():
    report = _report(_artifact(True, "passed", "skipped"))
    finish(report, _stages(("load", "ok"), ("export:onnx", "ok"), ("validate:onnx", "ok")))
    assert report.passed and report.exit_code == 0
    assert [s.name for s in report.stages] == ["load", "export:onnx", "validate:onnx"]


def test_a_failed_check_makes_exit_code_1():
    report = _report(_artifact(True, "passed"), _artifact(False, "passed", "failed"))
    finish(report, _stages(("export:onnx", "ok")))
    assert not report.passed and report.exit_code == 1


def test_an_artifact_none_of_whose_checks_could_run_makes_exit_code_1():
    report = _report(_artifact(False, "skipped", "skipped"))
    finish(report, _stages(("export:onnx", "ok")))
    assert not report.passed and report.exit_code == 1


@pytest.mark.parametrize("stage", ["export:torchscript", "optimize:fp16"])
def test_a_failed_export_or_optimize_stage_makes_exit_code_2(stage):
    report = _report(_artifact(True, "passed"))
    finish(report, _stages(("export:onnx", "ok"), (stage, "failed")))
    assert not report.passed and report.exit_code == 2


def test_a_failed_auto_candidate_does_not_fail_the_run():
    """--optimize auto: a candidate that fails to build or to validate loses; it does not fail the run."""
    report = _report(_artifact(True, "passed"), _artifact(False, "failed", candidate=True, optimization="int8"))
    finish(report, _stages(("export:onnx", "ok"), ("auto:fp16", "failed"), ("auto:int8", "ok")))
    assert report.passed and report.exit_code == 0


def test_a_requested_pass_that_could_not_be_built_fails_the_run_unless_accepted():
    """An --optimize pass skipped here (TensorRT without a GPU) is a missing artifact: exit 1 and listed, as the gate
    fails closed on it; --unbuilt warn accepts it (exit 0, still listed); a failed one is never accepted (exit 2)."""
    report = _report(_artifact(True, "passed"))
    finish(report, _stages(("export:onnx", "ok"), ("optimize:trt", "skipped")))
    assert not report.passed and report.exit_code == 1
    assert [(u.artifact, u.stage, u.status, u.accepted) for u in report.unbuilt] == [("trt", "optimize:trt", "skipped", False)]
    finish(report, _stages(("export:onnx", "ok"), ("optimize:trt", "skipped")), unbuilt="warn")
    assert report.passed and report.exit_code == 0 and report.unbuilt[0].accepted
    finish(report, _stages(("export:onnx", "ok"), ("optimize:fp16", "failed"), ("optimize:trt", "skipped")), unbuilt="warn")
    assert not report.passed and report.exit_code == 2
    assert [(u.artifact, u.accepted) for u in report.unbuilt] == [("fp16", False), ("trt", True)]


def test_auto_candidates_and_a_passes_rerun_are_no_unbuilt_request():
    report = _report(_artifact(True, "passed"))
    stages = _stages(("export:onnx", "ok"), ("auto:trt", "skipped"), ("optimize:int8", "ok"), ("optimize:int8", "failed"))
    stages.records[-1].detail = "keeping 2 in FP32"
    finish(report, stages)
    assert report.unbuilt == [] and report.exit_code == 2  # the re-run's failure fails the run as before, unlisted


def test_an_interrupted_run_exits_130_and_has_not_passed():
    report = _report(_artifact(True, "passed"), interrupted=True)
    finish(report, _stages(("export:onnx", "ok")))
    assert not report.passed and report.exit_code == 130


def test_a_run_with_no_artifacts_has_not_passed():
    report = _report()
    finish(report, _stages(("load", "ok"), ("reference", "ok")))
    assert not report.passed and report.exit_code != 0


def test_an_artifact_passes_only_with_a_passed_check_and_no_failed_one():
    assert artifact_passed(_artifact(False, "passed", "skipped"))
    assert not artifact_passed(_artifact(False, "passed", "failed"))
    assert not artifact_passed(_artifact(False, "skipped"))
    assert not artifact_passed(_artifact(False))


# check_targets / check_optimizations / exporter_for


def test_targets_are_stripped_and_deduplicated_in_order():
    assert check_targets([" torchscript", "onnx", "torchscript ", ""]) == ["torchscript", "onnx"]


def test_no_target_is_an_error_listing_the_formats():
    with pytest.raises(ConvertError) as info:
        check_targets(["", " "])
    assert info.value.problem == "no target format was given"
    assert info.value.next_step.startswith("Pass --to with one or more of: ")
    assert all(f in info.value.next_step for f in REGISTRY.target_formats())


def test_an_unknown_target_is_an_error_naming_it_and_the_choices():
    with pytest.raises(ConvertError) as info:
        check_targets(["onnx", "pdf"])
    assert info.value.problem == "unknown target format 'pdf'"
    assert info.value.next_step == f"Choose from: {', '.join(REGISTRY.target_formats())}."


def test_known_optimizations_are_kept_in_order_and_not_auto():
    assert check_optimizations(["fp16", " simplify", "fp16"], ["onnx"]) == (["fp16", "simplify"], False)
    assert check_optimizations([], ["onnx"]) == ([], False)


def test_an_unknown_optimization_is_an_error_naming_it_and_the_choices():
    with pytest.raises(ConvertError) as info:
        check_optimizations(["fp16", "int9"], ["onnx"])
    assert info.value.problem == "unknown optimization 'int9'"
    # the closest pass comes first: int9 is no pass, int8 the likeliest meant
    assert info.value.next_step.startswith("Did you mean int8? Choose from: auto, ") and "int8-dynamic" in info.value.next_step


def test_an_optimization_whose_artifact_is_not_exported_is_an_error_saying_what_to_add():
    with pytest.raises(ConvertError) as info:
        check_optimizations(["fp16"], ["torchscript"])
    assert info.value.problem == "--optimize fp16 works on the onnx artifact, which --to does not ask for"
    assert info.value.next_step == "Add onnx to --to."


def test_auto_becomes_every_pass_that_starts_from_a_requested_target():
    passes, auto = check_optimizations(["auto"], ["onnx", "torchscript"])
    assert auto
    assert passes == [e.name for e in REGISTRY.entries("optimizer") if e.takes == "onnx"]


def test_auto_with_other_passes_is_an_error():
    with pytest.raises(ConvertError) as info:
        check_optimizations(["auto", "fp16"], ["onnx"])
    assert info.value.problem == "--optimize auto is given with other passes"
    assert "Give auto alone" in info.value.next_step


def test_auto_without_onnx_is_an_error_saying_to_add_it():
    with pytest.raises(ConvertError) as info:
        check_optimizations(["auto"], ["torchscript"])
    assert "--optimize auto starts from the onnx artifact" in info.value.problem
    assert info.value.next_step == "Add onnx to --to."


def test_an_optimization_whose_package_is_missing_names_the_extra_to_install():
    import importlib.util

    if importlib.util.find_spec("openvino") is not None:
        pytest.skip("openvino is installed here")
    with pytest.raises(MissingDependency) as info:
        check_optimizations(["openvino"], ["onnx"])
    assert "'openvino'" in info.value.problem and "model-convert[openvino]" in info.value.next_step


def test_the_exporter_is_chosen_by_target_and_framework():
    assert exporter_for("onnx", "torch") == "torch-onnx"
    assert exporter_for("onnx", "keras") == "keras-onnx"
    assert exporter_for("savedmodel", "jax") == "tf-savedmodel"


def test_a_target_the_framework_cannot_reach_is_an_error_naming_who_can():
    with pytest.raises(ConvertError) as info:
        exporter_for("executorch", "keras")
    assert info.value.problem == "there is no exporter from keras to executorch"
    assert info.value.next_step == "executorch can be made from: torch."


# run(): options refused before anything is written


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"samples": 0}, "--samples must be at least 1"),
        ({"samples": 20_000}, "--samples must be at most 10000, not 20000"),
        ({"threads": 0}, "--threads must be at least 1, not 0"),
        ({"benchmark_batch": 0}, "--benchmark-batch must be at least 1, not 0"),
        ({"stage_timeout": 0}, "--stage-timeout must be positive, not 0"),
        ({"to": ("onnx", "docx")}, "unknown target format 'docx'"),
        ({"inputs": ("x:float32[B",)}, "cannot read the input spec"),
        ({"dims": ("B=0",)}, "cannot read the dim sizes 'B=0'"),
    ],
)
def test_bad_options_are_refused_before_anything_is_written(tmp_path, options, fragment):
    out = tmp_path / "out"
    with pytest.raises(ConvertError) as info:
        run(ConvertRequest(model=str(tmp_path / "missing.pt2"), out=out, cache=False, **{"to": ("onnx",), **options}))
    assert fragment in str(info.value)
    assert list(tmp_path.iterdir()) == []


# stem


@pytest.mark.parametrize(
    "model, expected",
    [
        ("models/resnet50.pt2", "resnet50"),
        ("models/bert.weights.keras", "bert"),
        (Path("nets") / "cnn.h5", "cnn"),
        ("fixtures.torch_models:build_cnn", "build_cnn"),
        ("nets/zoo.py:Models.resnet", "resnet"),
        ("C:\\models\\nets.py:build", "build"),
        ("saved_models/encoder", "encoder"),
    ],
)
def test_the_stem_is_the_file_name_or_the_factory_name(model, expected):
    assert stem(model) == expected


def test_a_model_given_as_an_object_has_the_stem_model():
    assert stem(object()) == "model"
    assert stem({"weights": 1}) == "model"


def test_an_existing_file_with_a_colon_in_its_name_is_a_file_not_a_factory(tmp_path):
    """'weights:v2.pt' reads as module 'weights', attribute 'v2.pt'; a file of that name is the model."""
    path = tmp_path / "weights:v2.pt"
    path.write_bytes(b"x")
    assert stem(str(path)) == "weights:v2"


def test_a_hidden_file_has_the_stem_model():
    assert stem("folder/.pt2") == "model"


# Stages.run


def test_a_stage_that_finishes_is_recorded_ok_with_its_seconds():
    progress = RecordingProgress()
    stages = Stages(progress)
    with stages.run("export", "onnx") as stage:
        time.sleep(0.05)
        stage.reason = "kept"
    [record] = stages.records
    assert (record.name, record.status, record.error, record.reason) == ("export:onnx", "ok", "", "kept")
    assert 0.05 <= record.seconds < 5
    assert progress.events == [("started", "export:onnx"), ("finished", "export:onnx ok")]


def test_a_stage_keeps_a_status_set_inside_it():
    stages = Stages(Progress())
    with stages.run("optimize", "trt") as stage:
        stage.status, stage.reason = "skipped", "tensorrt is not installed"
    assert (stages.records[0].status, stages.records[0].reason) == ("skipped", "tensorrt is not installed")


def test_a_convert_error_in_a_stage_fails_it_with_the_paragraph_and_is_raised_again():
    progress = RecordingProgress()
    stages = Stages(progress)
    with pytest.raises(ConvertError, match="the model is broken"):
        with stages.run("load"):
            raise ConvertError("the model is broken", "Fix it.")
    [record] = stages.records
    assert (record.status, record.error) == ("failed", "the model is broken. Fix it.")
    assert progress.events[-1] == ("finished", "load failed")


def test_another_exception_in_a_stage_fails_it_with_its_type_and_is_raised_again():
    stages = Stages(Progress())
    with pytest.raises(ValueError):
        with stages.run("reference"):
            raise ValueError("shapes do not match")
    assert (stages.records[0].status, stages.records[0].error) == ("failed", "ValueError: shapes do not match")


def test_an_interruption_in_a_stage_is_recorded_and_raised_again():
    stages = Stages(Progress())
    with pytest.raises(KeyboardInterrupt):
        with stages.run("validate", "onnx"):
            raise KeyboardInterrupt
    assert stages.records[0].status == "failed" and stages.records[0].error.startswith("KeyboardInterrupt")


def test_stages_are_recorded_in_the_order_they_ran():
    stages = Stages(Progress())
    for stage_id in (("load",), ("reference",), ("export", "onnx")):
        with stages.run(*stage_id):
            pass
    assert [s.name for s in stages.records] == ["load", "reference", "export:onnx"]


def test_a_worker_crash_fails_the_stage_with_the_signal():
    stage = rm.Stage(kind="export", subject="onnx", status="ok")
    message = crashed(stage, StageCrashed(*_death(-11)))
    assert (stage.status, stage.signal, stage.timed_out) == ("failed", "SIGSEGV", False)
    assert message == stage.error == "the export:onnx stage did not finish: the worker process was killed by SIGSEGV"


def test_a_stage_timeout_is_recorded_as_timed_out():
    stage = rm.Stage(kind="validate", subject="onnx", status="ok")
    crashed(stage, StageCrashed("it ran past the stage timeout of 5 s and was stopped", timed_out=True))
    assert stage.status == "failed" and stage.timed_out and stage.signal is None
    assert "past the stage timeout of 5 s" in stage.error


# report_stop


def _stopped(tmp_path: Path, exc: Exception) -> tuple[rm.Report, Path]:
    stages = Stages(Progress())
    with pytest.raises(type(exc)):
        with stages.run("export", "onnx"):
            raise exc
    report = _report(_artifact(True, "passed"))
    path = tmp_path / "report.json"
    report_stop(report, stages, path, exc)
    return report, path


def test_a_run_stopped_by_a_user_error_exits_2_and_writes_the_error(tmp_path):
    report, path = _stopped(tmp_path, ConvertError("there is no room to write to out", "Free some space."))
    assert not report.passed and report.exit_code == 2
    assert report.error == "there is no room to write to out. Free some space."
    written = rm.Report.from_json(path.read_text())
    assert (written.exit_code, written.error, written.passed) == (2, report.error, False)
    assert [(s.name, s.status) for s in written.stages] == [("export:onnx", "failed")]


def test_a_run_stopped_by_an_internal_error_exits_3_and_names_the_exception(tmp_path):
    report, path = _stopped(tmp_path, KeyError("outputs"))
    assert not report.passed and report.exit_code == 3
    assert report.error == "internal error: KeyError: 'outputs'"
    assert json.loads(path.read_text())["exit_code"] == 3


def test_a_stop_report_that_cannot_be_written_leaves_the_error_to_say_why(tmp_path):
    (tmp_path / "a-file").write_text("")
    report = _report(_artifact(True, "passed"))
    report_stop(report, Stages(Progress()), tmp_path / "a-file" / "report.json", RuntimeError("boom"))
    assert report.exit_code == 3 and report.error == "internal error: RuntimeError: boom"
    assert (tmp_path / "a-file").read_text() == ""


# plan_shape_cases, as the reference stage uses it


def _at(cases, **sizes):
    return [c for c in cases if all(c.sizes[s] == v for s, v in sizes.items())]


def test_each_symbol_is_at_its_max_while_the_others_are_at_their_min():
    cases = plan_shape_cases(("B", "S", "H"))
    lows = {s: min(c.sizes[s] for c in cases) for s in ("B", "S", "H")}
    highs = {s: max(c.sizes[s] for c in cases) for s in ("B", "S", "H")}
    for symbol in lows:
        others = {o: lows[o] for o in lows if o != symbol}
        assert _at(cases, **{symbol: highs[symbol]}, **others), f"{symbol} at its max with the others at their min"
        for other in others:
            assert _at(cases, **{symbol: lows[symbol], other: highs[other]}), f"{symbol} min while {other} max"


def test_symbols_get_distinct_export_sizes_and_the_export_case_comes_first():
    cases = plan_shape_cases(("B", "S", "H"))
    assert cases[0].label == "export"
    assert len(set(cases[0].sizes.values())) == 3


def test_every_case_is_distinct_and_every_symbol_takes_a_size_other_than_its_export_one():
    cases = plan_shape_cases(("B", "S"))
    assert len({tuple(sorted(c.sizes.items())) for c in cases}) == len(cases)
    for symbol in ("B", "S"):
        assert {c.sizes[symbol] for c in cases} - {cases[0].sizes[symbol]}


def test_shape_range_sizes_are_validated_with_opt_as_the_export_size():
    """run() turns --shape-range B=1..8..32 into the sizes (opt, min, max), opt first."""
    cases = plan_shape_cases(("B", "S"), chosen={"B": (8, 1, 32)}, ranges={"B": (1, 32)})
    assert cases[0].sizes["B"] == 8
    assert {c.sizes["B"] for c in cases} == {1, 8, 32}
    s_low = min(c.sizes["S"] for c in cases)
    assert _at(cases, B=32, S=s_low)  # B at its max with S at its min
    s_high = max(c.sizes["S"] for c in cases)
    assert _at(cases, B=1, S=s_high)  # and S at its max with B at its min


def test_an_extra_dim_size_gets_a_case_of_its_own_with_the_others_at_their_min():
    cases = plan_shape_cases(("B", "S"), chosen={"B": (4, 1, 16, 8)})
    s_low = min(c.sizes["S"] for c in cases)
    [extra] = [c for c in cases if c.sizes["B"] == 8]
    assert extra.label == "B=8" and extra.sizes["S"] == s_low


def test_a_range_bounds_the_default_sizes_of_its_symbol():
    cases = plan_shape_cases(("B", "S"), ranges={"S": (4, 6)})
    assert {c.sizes["S"] for c in cases} <= {4, 5, 6} and len({c.sizes["S"] for c in cases}) == 2
    assert {c.sizes["B"] for c in cases} >= {1, cases[0].sizes["B"]}


def test_a_baseline_report_moved_with_its_output_folder_still_finds_its_artifacts(tmp_path):
    old_out, moved = tmp_path / "out", tmp_path / "promoted"
    moved.mkdir()
    (moved / "cnn.onnx").write_bytes(b"onnx")
    baseline = _report()
    baseline.out = str(old_out)
    assert _now_at(str(old_out / "cnn.onnx"), baseline, moved / "report.json") == moved / "cnn.onnx"
    old_out.mkdir()
    (old_out / "cnn.onnx").write_bytes(b"onnx")  # still where the report says: that one
    assert _now_at(str(old_out / "cnn.onnx"), baseline, moved / "report.json") == old_out / "cnn.onnx"
    elsewhere = tmp_path / "given" / "model.onnx"  # outside the output folder: only where it was
    assert _now_at(str(elsewhere), baseline, moved / "report.json") == elsewhere
    assert _now_at("cnn.onnx", baseline, moved / "report.json") == moved / "cnn.onnx"  # relative: from the report's folder
