"""The plan of a run, made before any work: the options checked, the targets and passes, the shape sizes asked for,
every path the run writes (checked against every path it reads), and the names its artifacts will have."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convert.artifacts import given_format
from convert.benchmark import BenchmarkSettings
from convert.errors import ConvertError, require
from convert.pipeline.context import ConvertRequest
from convert.protected_inputs import Read, Write, reads_of, refuse_writes_to_inputs
from convert.registry import REGISTRY
from convert.safety import FAILED_FOLDER, LOCK_NAME, STAGING_PREFIX, refuse_existing
from convert.sources.request import is_factory_reference, load_example_inputs
from convert.specs import InputSpec, parse_dim_sizes, parse_input_specs, parse_shape_ranges
from convert.validators import TolerancePolicy
from convert.worker import DEFAULT_STAGE_TIMEOUT


@dataclass
class Plan:
    targets: list[str]
    optimizations: list[str]
    auto: bool  # the optimizations are --optimize auto's candidates
    specs: tuple[InputSpec, ...]
    dim_sizes: dict[str, tuple[int, ...]]
    shape_ranges: dict[str, tuple[int, int, int]]
    policy: TolerancePolicy
    settings: BenchmarkSettings
    example: Any  # the example inputs, loaded
    out_dir: Path
    stem: str
    report_path: Path
    finals: dict[str, Path]  # where each artifact lands (and, failed, in the failed folder)
    given: dict[str, tuple[Path, str]]  # the artifacts given to validate as they are: name -> (path, format)


def plan(request: ConvertRequest) -> Plan:
    """Check the request and plan the run; refuse it before any work when it would write over one of its inputs or,
    without --force, over an earlier run's files."""
    given = {name: (Path(path), given_format(Path(path))) for name, path in request.given.items()}
    check_given_trust(given, request.trust_code)
    targets = check_targets(request.to or default_targets(request.model)) if request.to or not given else []
    optimizations, auto = check_optimizations(request.optimize, targets)
    out_dir = Path(request.out) if request.out is not None else Path("out")
    specs = parse_input_specs(request.inputs)
    dim_sizes = parse_dim_sizes(request.dims)
    shape_ranges = parse_shape_ranges(request.shape_ranges)
    # a range's opt, min and max are validated, with opt as the export size, unless --dim chooses the sizes
    dim_sizes = {**{s: tuple(dict.fromkeys((opt, low, high))) for s, (low, opt, high) in shape_ranges.items()}, **dim_sizes}
    policy = TolerancePolicy(request.tolerances, request.accuracy)
    if request.samples < 1:
        raise ConvertError("--samples must be at least 1", "Use 3 or more samples per shape.")
    if request.threads is not None and request.threads < 1 or request.benchmark_batch < 1:
        raise ConvertError("--threads and --benchmark-batch must be at least 1", "Leave them out for every core and a batch of 8.")
    if not request.benchmark_seconds > 0:
        raise ConvertError(f"--benchmark-seconds must be positive, not {request.benchmark_seconds}", "Leave it out for 2 seconds.")
    if request.stage_timeout is not None and not request.stage_timeout > 0:
        raise ConvertError(
            f"the stage timeout must be a positive number of seconds, not {request.stage_timeout}",
            f"Leave it out for {DEFAULT_STAGE_TIMEOUT:g} s.",
        )
    check_data_options(request, policy)
    settings = BenchmarkSettings(
        **{k: v for k, v in (("threads", request.threads), ("batch", request.benchmark_batch)) if v}, seconds=request.benchmark_seconds
    )
    example = request.example_inputs
    if isinstance(example, (str, os.PathLike)):
        example = load_example_inputs(Path(example))

    name = stem(request.model)
    report_path = Path(request.report_json) if request.report_json else out_dir / "report.json"
    finals = {t: out_dir / f"{name}{REGISTRY.entries('exporter', format=t)[0].load().suffix}" for t in targets}
    finals.update({o: out_dir / f"{name}{REGISTRY.get('optimizer', o).load().suffix}" for o in optimizations})
    finals.update({f"{key} (failed)": out_dir / FAILED_FOLDER / path.name for key, path in finals.items()})
    refuse_writes_to_inputs([*writes(out_dir, finals, report_path), *request.writes], [*reads(request), *request.reads])
    refuse_existing([*finals.values(), report_path], request.force)  # again under the output lock, before writing
    return Plan(
        targets, optimizations, auto, specs, dim_sizes, shape_ranges, policy, settings, example, out_dir, name, report_path, finals, given
    )


def check_data_options(request: ConvertRequest, policy: TolerancePolicy) -> None:
    """Refuse what the data options cannot do before any work: a user metric without --trust-code, a task metric
    without data, fewer than one sample, an unreadable --columns or --preprocess."""
    from convert.datasets import parse_columns, parse_preprocess

    parse_columns(request.columns)
    parse_preprocess(request.preprocess)
    if request.data_samples < 1:
        raise ConvertError("--data-samples must be at least 1", "Leave it out for up to 500 samples.")
    if request.metric and not request.trust_code:
        raise ConvertError(
            f"--metric {request.metric} runs your code, and that needs --trust-code",
            "Add --trust-code (model.trust_code in a policy) if you trust the metric's module.",
        )
    if (policy.task_budget or request.metric) and request.data is None:
        raise ConvertError(
            "a task metric is asked for (an --accuracy task_..._drop budget or --metric) but no --data gives labelled samples",
            "Add --data with labels: an array or column named label, or an image folder of class folders.",
        )


def check_given_trust(given: dict[str, tuple[Path, str]], trust_code: bool) -> None:
    """Refuse a given artifact whose loading runs code unless --trust-code, as the same file as a source would be."""
    from convert.backends.torch import TRUST_HINT, pt2_code_reasons

    for path, fmt in given.values():
        if fmt == "torchscript":
            runs_code = "it is TorchScript, whose code runs when it loads"
        elif fmt == "savedmodel":
            runs_code = "it is a SavedModel, whose graph can run any TensorFlow op, file access included"
        elif fmt == "torch_export":
            runs_code = "; ".join(pt2_code_reasons(path))
        else:
            continue
        if runs_code and not trust_code:
            raise ConvertError(f"loading the artifact {path} runs code: {runs_code}", TRUST_HINT)


def default_targets(model: Any) -> tuple[str, ...]:
    """What a run without --to makes: an ONNX model's checked and normalised copy; nothing for any other model."""
    is_onnx_file = isinstance(model, (str, os.PathLike)) and Path(model).suffix.lower() == ".onnx" and Path(model).is_file()
    return ("onnx",) if is_onnx_file else ()


def check_targets(targets) -> list[str]:
    formats = REGISTRY.target_formats()
    chosen = list(dict.fromkeys(t.strip() for t in targets if t.strip()))
    if not chosen:
        raise ConvertError("no target format was given", f"Pass --to with one or more of: {', '.join(formats)}.")
    unknown = [t for t in chosen if t not in formats]
    if unknown:
        raise ConvertError(f"unknown target format '{unknown[0]}'", f"Choose from: {', '.join(formats)}.")
    return chosen


def check_optimizations(names, targets: list[str]) -> tuple[list[str], bool]:
    """The passes to run, and whether they are --optimize auto's candidates."""
    available = [e.name for e in REGISTRY.entries("optimizer")]
    chosen = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if "auto" in chosen:
        if len(chosen) > 1:
            raise ConvertError(
                "--optimize auto is given with other passes",
                "Give auto alone (it tries every pass this machine can run), or list the passes you want.",
            )
        if "onnx" not in targets:
            raise ConvertError("--optimize auto starts from the onnx artifact, which --to does not ask for", "Add onnx to --to.")
        return [e.name for e in REGISTRY.entries("optimizer") if e.meta["takes"] in targets], True
    unknown = [n for n in chosen if n not in available]
    if unknown:
        raise ConvertError(f"unknown optimization '{unknown[0]}'", f"Choose from: auto, {', '.join(available)}.")
    for name in chosen:
        entry = REGISTRY.get("optimizer", name)
        if entry.meta["takes"] not in targets:
            raise ConvertError(
                f"--optimize {name} works on the {entry.meta['takes']} artifact, which --to does not ask for",
                f"Add {entry.meta['takes']} to --to.",
            )
        for package in entry.meta.get("requires", ()):
            require(package, entry.meta["extra"], f"--optimize {name}")
    return chosen, False


def exporter_for(target: str, framework: str) -> str:
    """The name of the exporter from this framework to the target."""
    entries = REGISTRY.entries("exporter", format=target, source=framework)
    if not entries:
        able = sorted(
            {
                name
                for e in REGISTRY.entries("exporter", format=target)
                for name in (e.meta["source"] if isinstance(e.meta["source"], tuple) else (e.meta["source"],))
            }
        )
        raise ConvertError(f"there is no exporter from {framework} to {target}", f"{target} can be made from: {', '.join(able)}.")
    return entries[0].name


def stem(model: Any) -> str:
    """The artifacts' file name stem: the model file's, the factory's name, else 'model'."""
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if not Path(text).exists() and is_factory_reference(text):
            return text.rpartition(":")[2].split(".")[-1]
        return Path(text).name.split(".")[0] or "model"
    return "model"


def writes(out_dir: Path, finals: dict[str, Path], report_path: Path) -> list[Write]:
    """Every path the run writes, replaces or removes in the output folder."""
    found = [
        Write("the output folder", out_dir, replaces=False),
        Write("the failed folder", out_dir / FAILED_FOLDER, replaces=False),
        Write("the JSON report", report_path),
        Write("the output lock", out_dir / LOCK_NAME),
    ]
    for key, path in finals.items():
        found.append(Write(f"the {key} artifact", path))
        if path.suffix == ".onnx":
            found.append(Write(f"the {key} artifact's external data", path.with_name(f"{path.name}.data")))
    found += [Write("a stale staging folder, which the run removes,", stale) for stale in out_dir.glob(f"{STAGING_PREFIX}*")]
    return found


def reads(request: ConvertRequest) -> list[Read]:
    """Every path the run reads."""
    params = request.params if isinstance(request.params, (str, os.PathLike)) else None
    example = request.example_inputs if isinstance(request.example_inputs, (str, os.PathLike)) else None
    return (
        reads_of(
            request.model,
            weights=request.weights,
            params=params,
            example_inputs=example,
            calibration_data=request.calibration_data,
            data=request.data,
            metric=_metric_file(request.metric),
        )
        + [
            Read(f"the {what}'s external data", data)
            for what, path in [("model", request.model), *((f"artifact {name}", p) for name, p in request.given.items())]
            for data in _onnx_external_data(path)
        ]
        + [Read(f"the artifact {name}", Path(path)) for name, path in request.given.items()]
    )


def _onnx_external_data(path: Any) -> list[Path]:
    """The external data files an ONNX model given by path names, each checked to lie inside its folder."""
    from convert.backends.onnx import check_external_data

    if not isinstance(path, (str, os.PathLike)) or Path(path).suffix.lower() != ".onnx" or not Path(path).is_file():
        return []
    return check_external_data(Path(path))


def _metric_file(reference: str | None) -> Path | None:
    """The file of a ``file.py:function`` metric (a module's is not the run's to name)."""
    module = (reference or "").rpartition(":")[0]
    return Path(module) if module.endswith(".py") else None
