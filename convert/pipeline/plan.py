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
from convert.options import DEFAULTS, check_bounds
from convert.pipeline.auto import AUTO_BASE
from convert.pipeline.context import ConvertRequest, RunHooks
from convert.protected_inputs import Read, Write, reads_of, refuse_writes_to_inputs
from convert.registry import REGISTRY
from convert.safety import FAILED_FOLDER, LOCK_NAME, STAGING_PREFIX, refuse_existing
from convert.sources.request import is_factory_reference, load_example_inputs
from convert.specs import InputSpec, parse_dim_sizes, parse_input_specs, parse_shape_ranges
from convert.text import did_you_mean
from convert.validators import TolerancePolicy


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
    packages: list[str]  # the packagers to run on the validated artifacts


def plan(request: ConvertRequest, hooks: RunHooks | None = None) -> Plan:
    """Check the request and plan the run; refuse it before any work when it would write over one of its inputs (or
    over what the caller's ``hooks`` read) or, without --force, over an earlier run's files."""
    hooks = hooks or RunHooks()
    given = {name: (Path(path), given_format(Path(path))) for name, path in request.given.items()}
    check_given_trust(given, request.trust_code)
    targets = check_targets(request.to or default_targets(request.model)) if request.to or not given else []
    optimizations, auto = check_optimizations(request.optimize, targets)
    check_bounds(request)  # the CLI's and the API's values, held to the bounds a policy's schema holds its keys to
    check_weight_options(request, optimizations)
    formats = {**{t: t for t in targets}, **{o: REGISTRY.get("optimizer", o).format for o in optimizations}}
    packages = check_packages(request.package, {*formats.values(), *(fmt for _, fmt in given.values())})
    out_dir = Path(request.out)
    specs = parse_input_specs(request.inputs)
    dim_sizes = parse_dim_sizes(request.dims)
    shape_ranges = parse_shape_ranges(request.shape_ranges)
    # a range's opt, min and max are validated, with opt as the export size, unless --dim chooses the sizes
    dim_sizes = {**{s: tuple(dict.fromkeys((opt, low, high))) for s, (low, opt, high) in shape_ranges.items()}, **dim_sizes}
    policy = TolerancePolicy(request.tolerances, request.accuracy)
    check_data_options(request, policy)
    settings = BenchmarkSettings(
        **{k: v for k, v in (("threads", request.threads), ("batch", request.benchmark_batch)) if v}, seconds=request.benchmark_seconds
    )
    example = request.example_inputs
    if isinstance(example, (str, os.PathLike)):
        example = load_example_inputs(Path(example))

    name = hooks.stem or stem(request.model)
    report_path = Path(request.report_json) if request.report_json else out_dir / "report.json"
    finals = {t: out_dir / f"{name}{REGISTRY.format(t).suffix}" for t in targets}
    finals.update({o: out_dir / f"{name}{REGISTRY.get('optimizer', o).suffix}" for o in optimizations})
    formats.update({f"{key} (failed)": fmt for key, fmt in formats.items()})
    finals.update({f"{p} package": out_dir / f"{name}{REGISTRY.get('packager', p).suffix}" for p in packages})
    finals.update({f"{key} (failed)": out_dir / FAILED_FOLDER / path.name for key, path in finals.items()})
    refuse_writes_to_inputs([*writes(out_dir, finals, formats, report_path), *hooks.writes], [*reads(request, given), *hooks.reads])
    refuse_existing([*finals.values(), report_path], request.force)  # again under the output lock, before writing
    return Plan(
        targets,
        optimizations,
        auto,
        specs,
        dim_sizes,
        shape_ranges,
        policy,
        settings,
        example,
        out_dir,
        name,
        report_path,
        finals,
        given,
        packages,
    )


def check_data_options(request: ConvertRequest, policy: TolerancePolicy) -> None:
    """Refuse what the data options cannot do before any work: a user metric without --trust-code, a task metric
    without data, an unreadable --columns or --preprocess."""
    from convert.datasets import parse_columns, parse_preprocess

    parse_columns(request.columns)
    parse_preprocess(request.preprocess)
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
    from convert.backends.torch import TRUST_HINT

    for path, fmt in given.values():
        runs_code = "; ".join(REGISTRY.format(fmt).code_reasons(path))
        if runs_code and not trust_code:
            raise ConvertError(f"loading the artifact {path} runs code: {runs_code}", TRUST_HINT)


ONNX_SOURCE = "onnx"  # an ONNX model is a source, and the format of its checked copy


def default_targets(model: Any) -> tuple[str, ...]:
    """What a run without --to makes: an ONNX model's checked and normalised copy; nothing for any other model."""
    is_onnx_file = isinstance(model, (str, os.PathLike)) and Path(model).suffix.lower() == ".onnx" and Path(model).is_file()
    return (ONNX_SOURCE,) if is_onnx_file else ()


def check_targets(targets) -> list[str]:
    formats = REGISTRY.target_formats()
    chosen = list(dict.fromkeys(t.strip() for t in targets if t.strip()))
    if not chosen:
        raise ConvertError("no target format was given", f"Pass --to with one or more of: {', '.join(formats)}.")
    unknown = [t for t in chosen if t not in formats]
    if unknown:
        raise ConvertError(
            f"unknown target format '{unknown[0]}'", f"{did_you_mean(unknown[0], formats)}Choose from: {', '.join(formats)}."
        )
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
        if AUTO_BASE not in targets:
            raise ConvertError(
                f"--optimize auto starts from the {AUTO_BASE} artifact, which --to does not ask for", f"Add {AUTO_BASE} to --to."
            )
        return [e.name for e in REGISTRY.entries("optimizer") if e.takes in targets], True
    unknown = [n for n in chosen if n not in available]
    if unknown:
        raise ConvertError(
            f"unknown optimization '{unknown[0]}'",
            f"{did_you_mean(unknown[0], ['auto', *available])}Choose from: auto, {', '.join(available)}.",
        )
    for name in list(chosen):  # a pass that starts from another's artifact runs after it, which is added if not asked
        start = REGISTRY.get("optimizer", name).starts_from
        if start and chosen.index(name) < (chosen.index(start) if start in chosen else len(chosen)):
            chosen = [n for n in chosen if n != start]
            chosen.insert(chosen.index(name), start)
    for name in chosen:
        entry = REGISTRY.get("optimizer", name)
        if entry.takes not in targets:
            raise ConvertError(
                f"--optimize {name} works on the {entry.takes} artifact, which --to does not ask for", f"Add {entry.takes} to --to."
            )
        for package in entry.requires:
            require(package, f"--optimize {name}")
    return chosen, False


def check_weight_options(request: ConvertRequest, passes: list[str]) -> None:
    """--weight-group-size and --weight-ratio: each given only with a pass that reads it, and a size MatMulNBits takes."""
    for name, flag in (("weight_group_size", "--weight-group-size"), ("weight_ratio", "--weight-ratio")):
        readers = [p for p in passes if name in REGISTRY.get("optimizer", p).weight_options]
        if getattr(request, name) != DEFAULTS[name] and not readers:
            able = [e.name for e in REGISTRY.entries("optimizer") if name in e.weight_options]
            raise ConvertError(
                f"{flag} is given, and no pass that reads it is asked for", f"It shapes {', '.join(able)}: add one to --optimize."
            )
    size = request.weight_group_size
    if size != -1 and (size < 16 or size & (size - 1)):
        raise ConvertError(
            f"--weight-group-size {size} is not a group size the weight-only passes take",
            "Give a power of two of 16 or more (32, 64, 128 are usual), or -1 for one scale per output channel.",
        )


def check_packages(names, formats: set[str]) -> list[str]:
    """The packagers to run: each registered, and taking one of the formats the run makes or is given."""
    available = [e.name for e in REGISTRY.entries("packager")]
    chosen = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    for name in chosen:
        if name not in available:
            raise ConvertError(f"unknown packager '{name}'", f"{did_you_mean(name, available)}Choose from: {', '.join(available)}.")
        spec = REGISTRY.get("packager", name)
        if not any(spec.packs(fmt) for fmt in formats):
            raise ConvertError(
                f"--package {name} packages {', '.join(spec.takes)} artifacts, and the run makes none",
                f"Add one of {', '.join(spec.takes)} to --to.",
            )
    return chosen


def exporter_for(target: str, framework: str) -> str:
    """The name of the exporter from this framework to the target."""
    entries = REGISTRY.entries("exporter", format=target, sources=framework)
    if not entries:
        able = sorted({name for e in REGISTRY.entries("exporter", format=target) for name in e.sources})
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


def run_log_path(out_dir: Path, report_path: Path) -> Path:
    """Where a run keeps what the frameworks printed, warned and logged: REPORT_STEM.log in the output folder."""
    return out_dir / f"{report_path.stem}.log"


def writes(out_dir: Path, finals: dict[str, Path], formats: dict[str, str], report_path: Path) -> list[Write]:
    """Every path the run writes, replaces or removes in the output folder."""
    found = [
        Write("the output folder", out_dir, replaces=False),
        Write("the failed folder", out_dir / FAILED_FOLDER, replaces=False),
        Write("the JSON report", report_path),
        Write("the output lock", out_dir / LOCK_NAME),
        Write("the run's log", run_log_path(out_dir, report_path)),
    ]
    for key, path in finals.items():
        found.append(Write(f"the {key} artifact", path))
        for companion in REGISTRY.format(formats[key]).companion_suffixes if key in formats else ():
            found.append(Write(f"the {key} artifact's external data", path.with_name(f"{path.name}{companion}")))
    found += [Write("a stale staging folder, which the run removes,", stale) for stale in out_dir.glob(f"{STAGING_PREFIX}*")]
    return found


def reads(request: ConvertRequest, given: dict[str, tuple[Path, str]]) -> list[Read]:
    """Every path the run reads (``given``: the artifacts to validate as they are, with their formats)."""
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
            for what, path, fmt in [("model", request.model, ONNX_SOURCE), *((f"artifact {name}", p, f) for name, (p, f) in given.items())]
            for data in _files_beside(path, fmt)
        ]
        + [Read(f"the artifact {name}", Path(path)) for name, path in request.given.items()]
    )


def _files_beside(path: Any, fmt: str) -> list[Path]:
    """The files beside it (ONNX external data) a model or artifact of this format given by path names, each checked to
    lie inside its folder; none for a model of another format."""
    spec = REGISTRY.format(fmt)
    if not isinstance(path, (str, os.PathLike)) or not Path(path).is_file() or Path(path).suffix.lower() not in spec.given_suffixes:
        return []
    return spec.files_beside(Path(path))


def _metric_file(reference: str | None) -> Path | None:
    """The file of a ``file.py:function`` metric (a module's is not the run's to name)."""
    module = (reference or "").rpartition(":")[0]
    return Path(module) if module.endswith(".py") else None
