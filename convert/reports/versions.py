"""Which report.json files this version of convert reads: its own schema version, newer minors of it, and the older
versions an upgrade function brings, one step at a time, to the meaning of this one.

The rule (since 2.0): a minor version only adds fields, with defaults that say what an older report did not record;
a field removed, renamed or changing meaning is a major version. Under 1.x minor versions also changed meaning (1.8
timed every benchmark interleaved in rounds and judged gate budgets and regressions on the 95% interval; 1.5 made a
fixed dim or a wrong declared shape fail a check that passed before; 1.2 computed rel_rms_error for every float
output where it had been only for fp16 / int8 ones), so a 1.x number does not say what a report's fields mean. Only
the reports whose meaning an upgrade can state exactly are read: 1.8 and 1.9 (the benchmarks as they are timed today),
and an older minor of 2.x (the fields it lacks added); any older one, and any other major, is refused with what to do
instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from convert import __version__
from convert.errors import ConvertError
from convert.readers import shown
from convert.reports.model import SCHEMA_VERSION, Stage, unbuilt_of
from convert.timing import is_unstable

# What each schema version changed, newest first: the documentation's changelog is generated from it, and a test keeps
# it complete (every version from 1.0 to SCHEMA_VERSION, with no gap).
SCHEMA_CHANGES: dict[str, str] = {
    "2.6": "Adds to each output's metrics `atol_scale` (the RMS of the source's output over the shape case: the default "
    "atol is multiplied by max(1, atol_scale); null where the atol is the user's, taken as absolute), `masked_values` and "
    "`masked_by` (values of a token-level output at positions the padding mask excludes, not compared), `spread` and "
    "`deviation_cosine` (an output whose values spread over less than its tolerance is judged by the cosine of its "
    "deviations from the source's mean, >= 0.9999, too) and `note`. `atol` is the atol applied, scaled or not. A 2.5 "
    "report's outputs were judged with an absolute atol at every position: they have none of these (null, 0: not "
    "recorded). Adds `source.input_domains`: per generated input, what its values were drawn from (`drawn`, `low`, "
    "`high`) and why (`source`: 'given', what the model declares such as its Rescaling layer or its folder's "
    "preprocessor_config.json, the source's input specs, or 'default'); a 2.5 report has none (empty).",
    "2.5": "Adds the `chain` detail of every validated artifact: the error each link adds on one sample (`links`: "
    "`capture`, the source model against the program its exporter captured; `conversion`, that program against the "
    "artifact; `optimization`, a pass's base artifact against its output), each `measured` with its largest absolute "
    "error, worst output, lowest cosine and whether it is within the tolerance of its end, or `skipped` with the reason. "
    "Figures only: no verdict changes.",
    "2.4": "Adds the `precision` detail of every validated artifact: what its matrix products compute in and their weights "
    "are stored in, as shares of multiply-accumulates by type, measured from the artifact (`compute`, `weights`) and its "
    "runtime (`runtime_compute`), and its pass's claim judged (`claimed`, `claim`, `attested_share`, `threshold`, "
    "`status`), with `computes` on each CPU benchmark and `auto` candidate; the `precision` gate reason; the "
    "`min_precision_share` option. A reduced-precision artifact whose attested share is below the threshold fails "
    "(`passed` false, its checks as they were). A 2.3 report has no such detail (not measured).",
    "2.3": "Adds a decoder's generation benchmarks: each benchmark's `prefill_length`, `prefill_ms_p50` and "
    "`prefill_ms_interval` (one call on a batch-1 prompt, the cache empty) and `decode_steps`, `decode_tokens_per_s`, "
    "`decode_tokens_per_s_interval` and `decode_round_ms` (one token a call, the cache fed back), the source's among them; "
    "`auto` ranks a decoder's candidates by decode speed (its `criterion` says so), each with its `prefill_ms_p50`, "
    "`decode_tokens_per_s`, `decode_tokens_per_s_interval`, `decode_speedup_vs_source` and `decode_vs_chosen`. "
    "A 2.2 report's benchmarks have none (null: not measured). Adds the `weight_compression` detail of the weight-only "
    "passes (`int4`, `int8-weights`, `openvino:int4`, `openvino:int8-weights`: which layers were stored in how many bits "
    "and groups); each check's `memory_mapped`; each stage's `peak_rss_mb`; the environment's `memory_available_mb` and "
    "`memory_limit_mb`; the `token_agreement` term of an accuracy budget (a decoder's generation check); and the "
    "`perplexity` task metric of a token task (a decoder's text), whose `drop` is its relative rise; and budget results "
    "of the policy's `prefill_ms_p50` and `decode_tokens_per_s`; a `capture` divergence's `layer` (the first module "
    "of the captured program whose output departs) and its `probes` of op_type `module`. A 2.2 report has none of them (false or null: not "
    "recorded).",
    "2.2": "Adds `composite`, `components` and `assembled`: a model of several networks (an encoder-decoder, a dual encoder, "
    "a diffusion pipeline) converted in one run, each component with its own report, and the components' artifacts run "
    "together against the library's assembled model.",
    "2.1": "Adds `unbuilt`: what `--to` and `--optimize` asked for and the run did not build, with why. Each fails the "
    "run unless `--unbuilt warn` accepts a skipped one (`accepted`; the verdict is then PASSED WITH GAPS), and the "
    "`unbuilt` option. A 2.0 report's are read from its stages, each skipped one accepted (a 2.0 run passed with it).",
    "2.0": "An artifact's details are one list, `details`, each with its `kind` (a 1.9 artifact had a field for each kind, "
    "which the upgrade moves there); each stage is named by typed `kind`, `subject` and `detail` (read from a 1.9 "
    "stage's name by the upgrade); adds `packages` and the gate's `required_packages`. The first version under the rule "
    "that a change of meaning is a major version.",
    "1.9": "Adds `environment.outside_tested`: installed versions outside the tested ranges.",
    "1.8": "Adds `environment.cpu` and `benchmark_threads`; the benchmarks' intervals, rounds, `session`, `unstable` and "
    "`compute_limit`; `auto` candidates' `vs_chosen`; `baseline_benchmarks`; the report's `out`; the interval and "
    "`side_by_side` of budgets and baseline deltas. Benchmarks are timed interleaved in rounds, and budgets and "
    "regressions judged on their interval (a change of meaning).",
    "1.7": "Adds the edge targets (`executorch`, `tflite` from PyTorch) with the `delegation` detail, an ONNX file as the "
    "source, `convert validate` (`artifacts[].given`) and a policy's `require.artifacts`.",
    "1.6": "Adds `data` (the datasets given with `--data`), the checks' `task` metrics, task budgets (`task_*_drop`) and "
    "their baseline deltas.",
    "1.5": "Adds the checks' `declared_mismatches`, the artifacts' `fixed_dims` and `repairs`, and the "
    "`allow_fixed_shapes` option. A fixed dim or a wrong declared shape fails a check that passed before (a change of "
    "meaning).",
    "1.4": "Adds `cache`, the stages' `reused` and the `cache` option.",
    "1.3": "Adds `isolation`, the stages' `signal` and `timed_out`, and the `stage_timeout` and `isolate` options.",
    "1.2": "Adds `error_histogram`, `device_unsupported`, `gate`, and rel RMS / top-1 / top-5 for every float output (rel "
    "RMS had been computed only for FP16 and INT8 outputs: a change of meaning).",
    "1.1": "Adds `benchmarks` (per artifact, and `source_benchmark`) and `auto`.",
    "1.0": "The first version: source, environment, options, stages, artifacts with their checks and per-output metrics.",
}


def upgrade_1_8_to_1_9(data: dict) -> dict:
    """1.9 added ``environment.outside_tested`` (left empty: a 1.8 report did not record it). A 1.8 report may come
    from before two fixes that kept 1.8: a p50's interval that did not hold the p50 (widened to hold it, as the tool
    does since, and ``unstable`` judged on the widened interval), and a throughput run that failed at the batch but
    left the latency runs' figure as its throughput (removed: it must not stand in for the batch in a budget)."""
    for bench in _benchmarks(data):
        if bench.get("status") == "failed" and str(bench.get("reason", "")).startswith("throughput at "):
            bench["throughput_shape"], bench["throughput_per_s"], bench["throughput_interval"] = "", None, None
        _widen(bench, "latency_ms_interval", "latency_ms_p50", unstable=True)
        _widen(bench, "throughput_interval", "throughput_per_s", unstable=False)
    auto = data.get("auto")
    for candidate in auto.get("candidates", []) if isinstance(auto, dict) and isinstance(auto.get("candidates"), list) else []:
        if isinstance(candidate, dict):
            _widen(candidate, "latency_ms_interval", "latency_ms_p50", unstable=True)
    return {**data, "schema_version": "1.9"}


def upgrade_1_9_to_2_0(data: dict) -> dict:
    """2.0 is the first version under the rule that a change of meaning is a major version, so that 1.x reports whose
    fields meant something else are told apart (refused). Its stages name what they are in typed fields (kind, subject,
    detail), which a 1.9 report's stage names are read into; an artifact's details are one list (``details``), each
    with its ``kind``, where a 1.9 artifact had a field for each kind."""
    artifacts = data.get("artifacts")
    if isinstance(artifacts, list):  # an artifact's divergence, sensitivity, accuracy_control, delegation: its details
        data = {**data, "artifacts": [_details_listed(artifact) for artifact in artifacts]}
    return {**data, "stages": [_stage_identity(stage) for stage in data.get("stages", [])], "schema_version": "2.0"}


def upgrade_2_0_to_2_1(data: dict) -> dict:
    """2.1 added ``unbuilt``, read from a 2.0 report's export and optimize stages that did not make their artifact.
    A 2.0 run passed with a requested pass skipped, so each skipped one is accepted: it reads as the gap it was."""
    try:
        stages = [Stage.model_validate(stage) for stage in data.get("stages", [])]
    except (ValidationError, TypeError):
        return {**data, "schema_version": "2.1"}  # malformed stages: left to the schema to name
    unbuilt = [record.model_dump() for record in unbuilt_of(stages, accept_skipped=True)]
    return {**data, "unbuilt": unbuilt, "schema_version": "2.1"}


def upgrade_2_1_to_2_2(data: dict) -> dict:
    """2.2 added a composite's ``components`` and ``assembled`` checks: a 2.1 report is of one network, with neither."""
    return {**data, "composite": "", "components": [], "assembled": [], "schema_version": "2.2"}


def upgrade_2_2_to_2_3(data: dict) -> dict:
    """2.3 added fields whose defaults say what a 2.2 report did not record: a decoder's prefill and decode figures
    (null: not measured), and its auto candidates' (ranked by p50 then, as the 2.2 report's criterion says)."""
    return {**data, "schema_version": "2.3"}


def upgrade_2_4_to_2_5(data: dict) -> dict:
    """2.5 added the ``chain`` detail: a 2.4 report's artifacts have none (their links were not measured)."""
    return {**data, "schema_version": "2.5"}


def upgrade_2_5_to_2_6(data: dict) -> dict:
    """2.6 added the scale of an output's atol, its masked values, spread, deviation cosine and note, and the source's
    input domains: a 2.5 report's outputs have none (its atol was absolute, every position compared), nor its source."""
    return {**data, "schema_version": "2.6"}


def upgrade_2_3_to_2_4(data: dict) -> dict:
    """2.4 added the ``precision`` detail: a 2.3 report's artifacts have none (what they compute in was not measured)."""
    return {**data, "schema_version": "2.4"}


# the fields a 1.9 artifact had for what 2.0 lists in its details, each the kind of detail it is (in 1.9's field order)
DETAIL_FIELDS_1_9 = ("divergence", "sensitivity", "accuracy_control", "delegation")


def _details_listed(artifact: Any) -> Any:
    """A 1.9 artifact's detail fields moved into its ``details``, each with its ``kind`` (the field's name)."""
    if not isinstance(artifact, dict) or not any(name in artifact for name in DETAIL_FIELDS_1_9):
        return artifact
    details = list(artifact.get("details") or [])
    details += [{**artifact[name], "kind": name} for name in DETAIL_FIELDS_1_9 if isinstance(artifact.get(name), dict)]
    rest = {key: value for key, value in artifact.items() if key not in DETAIL_FIELDS_1_9}
    return {**rest, "details": details}


def _stage_identity(stage: Any) -> Any:
    """A 1.x stage's name, "KIND", "KIND:SUBJECT" or "KIND:SUBJECT (DETAIL)", as the typed fields of a 2.0 stage."""
    if not isinstance(stage, dict) or not isinstance(stage.get("name"), str):
        return stage
    text, _, detail = stage["name"].partition(" (")
    kind, _, subject = text.partition(":")
    rest = {key: value for key, value in stage.items() if key != "name"}
    return {**rest, "kind": kind, "subject": subject, "detail": detail.removesuffix(")")}


# the version a report has → the function that brings it one step up (each sets the next schema_version)
UPGRADES: dict[str, Callable[[dict], dict]] = {
    "1.8": upgrade_1_8_to_1_9,
    "1.9": upgrade_1_9_to_2_0,
    "2.0": upgrade_2_0_to_2_1,
    "2.1": upgrade_2_1_to_2_2,
    "2.2": upgrade_2_2_to_2_3,
    "2.3": upgrade_2_3_to_2_4,
    "2.4": upgrade_2_4_to_2_5,
    "2.5": upgrade_2_5_to_2_6,
}


def upgrade(data: Any, what: str) -> Any:
    """The JSON of a report brought to this schema version, or a ConvertError saying why ``what`` cannot be read. A
    newer minor of this major is read as it is (it only adds fields, which are ignored)."""
    version = data.get("schema_version") if isinstance(data, dict) else None
    major, minor = _parsed(version)
    if minor is None:
        major = None
    current_major, current_minor = _parsed(SCHEMA_VERSION)
    if major == current_major and minor is not None and minor >= current_minor:
        return data
    if version not in UPGRADES:
        raise ConvertError(_refusal(what, version, major), _next_step(what))
    while data.get("schema_version") in UPGRADES:
        data = UPGRADES[data["schema_version"]](data)
    return data


def readable_versions() -> str:
    """'2.x, and 1.8 and 1.9 (upgraded)': what this tool reads, for messages and the docs (an older minor of this major is
    upgraded too, and is part of MAJOR.x)."""
    major = SCHEMA_VERSION.split(".")[0]
    older = [version for version in UPGRADES if version.split(".")[0] != major]
    return f"{major}.x, and {' and '.join(older)} (upgraded)"


def _refusal(what: str, version: Any, major: int | None) -> str:
    reads = f"this convert ({__version__}) reads report schema {readable_versions()}"
    if major is None:
        return (
            f"the {what} is not a convert report of a schema version this tool knows (its schema_version is {shown(version, 60)}): {reads}"
        )
    version = shown(version, 60).strip("'")
    newer = major > int(SCHEMA_VERSION.split(".")[0])
    why = (
        "a newer convert wrote it, and its fields may mean what this one cannot know"
        if newer
        else "its fields meant something else then (benchmarks timed otherwise, checks judged otherwise)"
    )
    return f"the {what} is a convert report of schema {version}, and {reads}: {why}"


def _next_step(what: str) -> str:
    if what.startswith("baseline report"):
        return (
            "Re-run the baseline with this version of convert (convert gate on the last promoted model's policy, "
            "with its artifacts) and pass the report.json it writes, or leave the baseline out for this promotion."
        )
    return "Re-run that model with this version of convert and pass the report.json it writes."


def _parsed(version: Any) -> tuple[int | None, int | None]:
    """(major, minor) of 'MAJOR.MINOR'; None where it is not that."""
    if not isinstance(version, str):
        return None, None
    major, dot, minor = version.partition(".")
    if not (major.isdigit() and major.isascii() and len(major) <= 4):
        return None, None
    return int(major), int(minor) if dot and minor.isdigit() and minor.isascii() and len(minor) <= 4 else None


def _benchmarks(data: dict) -> list[dict]:
    """Every benchmark record of a report's JSON: the source's, and each artifact's (and its baseline's beside it)."""
    found = list(data.get("source_benchmark") or []) if isinstance(data.get("source_benchmark"), list) else []
    for artifact in data.get("artifacts") or [] if isinstance(data.get("artifacts"), list) else []:
        if isinstance(artifact, dict):
            for name in ("benchmarks", "baseline_benchmarks"):
                if isinstance(artifact.get(name), list):
                    found += artifact[name]
    return [bench for bench in found if isinstance(bench, dict)]


def _widen(record: dict, interval_field: str, value_field: str, unstable: bool) -> None:
    """Widen ``[low, high]`` to hold the value it is the interval of (and judge ``unstable`` on it)."""
    interval, value = record.get(interval_field), record.get(value_field)
    if not (isinstance(interval, list) and len(interval) == 2 and all(_number(x) for x in (*interval, value))):
        return
    record[interval_field] = [min(interval[0], value), max(interval[1], value)]
    if unstable:
        record["unstable"] = is_unstable(value, record[interval_field])


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
