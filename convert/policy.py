"""The promotion policy: a YAML file validated with a schema whose errors name the line.

Relative paths in a policy file are relative to the folder of the policy file, so a policy means the same
from whatever folder CI runs it. Every key is checked: an unknown key or a value of the wrong type is an
error, never ignored.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from convert.errors import ConvertError

Device = Literal["cpu", "cuda"]
Positive = Annotated[float, Field(gt=0)]
PerDevice = Positive | dict[Device, Positive] | None  # one bound for every device, or one per device


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ModelSpec(_Strict):
    path: str = Field(description="a model file or folder, or package.module:callable")
    framework: Literal["torch", "keras", "jax"] | None = None
    weights: str | None = None
    params: str | None = None
    inputs: list[str] = []
    example_inputs: str | None = None
    trust_code: bool = False


class Requirements(_Strict):
    targets: list[str] = Field(min_length=1, description="artifact formats that must be exported and pass")
    optimizations: list[str] = Field([], description="--optimize passes whose artifacts must be built and pass")
    devices: list[Device] = Field(["cpu"], min_length=1, description="devices every required artifact must pass on")
    may_skip_devices: list[Device] = Field([], description="required devices that may be absent from the machine")


class Validation(_Strict):
    dims: list[str] = []
    shape_ranges: list[str] = []
    samples: int = Field(3, ge=1)
    seed: int = 0
    tolerances: list[str] = Field([], description="fp32 tolerance overrides, as --tolerance")
    accuracy: list[str] = Field([], description="accuracy budgets that judge fp16 / int8 checks, as --accuracy")
    opset: int | None = None
    calibration_data: str | None = None


class ArtifactBudget(_Strict):
    accuracy: str | dict[str, str] | None = Field(
        None, description="'cosine>=0.999,max_abs<=1e-4' for every output, or {output: budget}")
    runtime: str | None = Field(None, description="judge latency and throughput on this runtime only (default: every runtime)")
    latency_ms_p50: PerDevice = None
    latency_ms_p90: PerDevice = None
    latency_ms_p99: PerDevice = None
    throughput_per_s: PerDevice = Field(None, description="a minimum")
    size_mb: float | None = Field(None, gt=0, description="a maximum, in 10^6 bytes")

    def timed(self) -> bool:
        return any(v is not None for v in (self.latency_ms_p50, self.latency_ms_p90, self.latency_ms_p99, self.throughput_per_s))


class Allowance(_Strict):
    """How much worse than the baseline counts as noise, not a regression."""

    accuracy: float = Field(0.25, ge=0, description="relative growth of an error (max abs, rel RMS, 1 - cosine)")
    accuracy_abs: float = Field(1e-6, ge=0, description="absolute growth of an error on top of the relative one")
    latency: float = Field(0.10, ge=0, description="relative growth of p50 latency")
    latency_ms: float = Field(0.02, ge=0, description="absolute growth of p50 latency on top of the relative one")
    size: float = Field(0.01, ge=0, description="relative growth of the artifact's size")


class Baseline(_Strict):
    report: str | None = Field(None, description="the JSON report of the last promoted model (or pass --baseline)")
    allowance: Allowance = Allowance()


class BenchmarkOptions(_Strict):
    threads: int | None = Field(None, ge=1)
    batch: int = Field(8, ge=1)


class Policy(_Strict):
    version: Literal[1] = 1
    model: ModelSpec
    require: Requirements
    validation: Validation = Validation()
    budgets: dict[str, ArtifactBudget] = Field({}, description="by artifact key: a target format or an optimization")
    benchmark: BenchmarkOptions = BenchmarkOptions()
    baseline: Baseline | None = None
    out: str = "out"

    def required_keys(self) -> list[str]:
        return [*self.require.targets, *self.require.optimizations]

    def timed(self) -> bool:
        return any(budget.timed() for budget in self.budgets.values())


def load_policy(source: str | os.PathLike | dict) -> tuple[Policy, str]:
    """The validated policy, with its relative paths made absolute, and its name for messages."""
    if isinstance(source, dict):
        return _validated(source, {}, "the policy"), "<dict>"
    path = Path(source)
    name = str(path)
    if not path.is_file():
        raise ConvertError(f"the policy file {name} does not exist" if not path.exists() else f"the policy {name} is not a file",
                           "Pass the path of a promotion policy YAML file (see 'Promotion gate' in the README).")
    try:
        text = path.read_text(encoding="utf-8")
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except UnicodeDecodeError:
        raise ConvertError(f"the policy {name} is not UTF-8 text", "Save it as a UTF-8 YAML file.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConvertError(f"{name}{where}: not valid YAML: {problem}", "Fix the YAML syntax there.") from None
    if not isinstance(data, dict):
        raise ConvertError(f"{name}: a policy is a mapping of keys (model, require, budgets, ...), not {type(data).__name__}",
                           "Start from the example policy in the README's 'Promotion gate' section.")
    policy = _validated(data, _lines(node), name)
    return _resolved(policy, path.resolve().parent), name


def _validated(data: dict, lines: dict[tuple, int], name: str) -> Policy:
    try:
        policy = Policy.model_validate(data)
    except ValidationError as exc:
        raise ConvertError(f"{name} is not a valid policy: {'; '.join(_problems(exc, data, lines))}",
                           "Fix those keys; the README's 'Promotion gate' section lists every key.") from None
    problems = _cross_checks(policy, lines)
    if problems:
        raise ConvertError(f"{name} is not a valid policy: {'; '.join(problems)}",
                           "Fix those keys; the README's 'Promotion gate' section lists every key.")
    return policy


def _problems(exc: ValidationError, data: dict, lines: dict[tuple, int]) -> list[str]:
    """One message per place in the file, in file order.

    A value that fits none of a union's types gives one pydantic error per type; the deepest says most (a bad
    value inside a mapping rather than 'not a string'), and of several at one place the first is kept."""
    errors = [(error, _data_path(tuple(error["loc"]), data, error["type"] in ("extra_forbidden", "missing")))
              for error in exc.errors()]
    paths = {path for _, path in errors}
    kept: dict[tuple, dict] = {}
    for error, path in errors:
        if not any(other[:len(path)] == path and len(other) > len(path) for other in paths):
            kept.setdefault(path, error)
    ordered = sorted(kept.items(), key=lambda item: _line(lines, item[0]) or 0)
    return [_describe(error, path, lines) for path, error in ordered]


def _describe(error: dict, path: tuple, lines: dict[tuple, int]) -> str:
    dotted = ".".join(str(p) for p in path) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(path[:-1])
        return f"{_at(lines, path)}{dotted}: unknown key" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
    if error["type"] == "missing":
        return f"{_at(lines, path[:-1])}{dotted}: missing, and it is required"
    return f"{_at(lines, path)}{dotted}: {error['msg'][0].lower()}{error['msg'][1:]} (got {error.get('input')!r})"


def _data_path(loc: tuple, data: Any, names_key: bool) -> tuple:
    """The parts of a pydantic location that are keys and items of the data (it also names union members,
    e.g. 'float' or 'dict[str,str]'); for an unknown or a missing key, that key is the last part."""
    path = []
    for part in loc[:-1] if names_key else loc:
        if isinstance(data, dict) and part in data or isinstance(data, list) and isinstance(part, int) and part < len(data):
            path.append(part)
            data = data[part]
    return tuple(path) + ((loc[-1],) if names_key else ())


def _allowed_keys(path: tuple) -> list[str]:
    """The keys the schema allows in the mapping at ``path``."""
    model: Any = Policy
    for part in path:
        if isinstance(model, type) and issubclass(model, BaseModel):
            model = model.model_fields[part].annotation if part in model.model_fields else None
        elif get_origin(model) in (dict, list):
            model = get_args(model)[-1]
        members = [m for m in get_args(model) if isinstance(m, type) and issubclass(m, BaseModel)] if get_origin(model) else []
        model = members[0] if members else model
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _cross_checks(policy: Policy, lines: dict[tuple, int]) -> list[str]:
    """What the schema alone cannot say: names that must exist in the registry or elsewhere in the policy."""
    from convert.registry import REGISTRY

    formats = REGISTRY.target_formats()
    passes = [e.name for e in REGISTRY.entries("optimizer")]
    problems = []
    for index, target in enumerate(policy.require.targets):
        if target not in formats:
            problems.append(f"{_at(lines, ('require', 'targets', index))}require.targets: unknown format '{target}' "
                            f"(known: {', '.join(formats)})")
    for index, name in enumerate(policy.require.optimizations):
        if name not in passes:
            problems.append(f"{_at(lines, ('require', 'optimizations', index))}require.optimizations: unknown pass '{name}' "
                            f"(known: {', '.join(passes)})")
    for key in policy.budgets:
        if key not in policy.required_keys():
            problems.append(f"{_at(lines, ('budgets', key))}budgets.{key}: '{key}' is not a required target or optimization "
                            f"(required: {', '.join(policy.required_keys())})")
    for index, device in enumerate(policy.require.may_skip_devices):
        if device not in policy.require.devices:
            problems.append(f"{_at(lines, ('require', 'may_skip_devices', index))}require.may_skip_devices: '{device}' "
                            f"is not in require.devices")
    return problems


def _line(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of the deepest part of ``path`` that the file has; None for a policy given as a dict."""
    return next((lines[path[:end]] for end in range(len(path), -1, -1) if path[:end] in lines), None)


def _at(lines: dict[tuple, int], path: tuple) -> str:
    line = _line(lines, path)
    return f"line {line}: " if line is not None else ""


def _lines(node: yaml.Node | None, path: tuple = ()) -> dict[tuple, int]:
    """The 1-based line of every key and list item of the YAML document."""
    found: dict[tuple, int] = {}
    if node is None:
        return found
    found[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            child = path + (key.value,)
            found.update(_lines(value, child))
            found[child] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.update(_lines(item, path + (index,)))
    return found


def _resolved(policy: Policy, folder: Path) -> Policy:
    """Paths in the policy made absolute against the policy file's folder."""
    from convert.sources.request import is_factory_reference

    def absolute(value: str | None) -> str | None:
        if value is None or Path(value).is_absolute():
            return value
        return str(folder / value)

    model = policy.model
    path = model.path if is_factory_reference(model.path) and not (folder / model.path).exists() else absolute(model.path)
    update = {
        "model": model.model_copy(update={"path": path, "weights": absolute(model.weights), "params": absolute(model.params),
                                          "example_inputs": absolute(model.example_inputs)}),
        "validation": policy.validation.model_copy(update={"calibration_data": absolute(policy.validation.calibration_data)}),
        "out": absolute(policy.out),
    }
    if policy.baseline is not None and policy.baseline.report is not None:
        update["baseline"] = policy.baseline.model_copy(update={"report": absolute(policy.baseline.report)})
    return policy.model_copy(update=update)
