"""The promotion policy: a YAML file validated with a schema whose errors name the line.

Relative paths in a policy file are relative to the folder of the policy file, so a policy means the same
from whatever folder CI runs it. Every key is checked: an unknown key or a value of the wrong type is an
error, never ignored. The YAML is read without anchors, aliases or tags (``convert/readers.py``): a 500-byte file of
nested aliases expands to hundreds of millions of values.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from convert.errors import ConvertError
from convert.options import CALIBRATION_METHODS, policy_bounds, policy_default
from convert.readers import PlainYamlLoader, load_yaml, shown
from convert.text import closest

Device = Literal["cpu", "cuda"]
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
# one bound for every device, or one per device
PerDevice = Positive | Annotated[dict[Device, Positive], Field(min_length=1)] | None
# the budgets of an artifact that are judged on a benchmark's measurement (convert/gate/budgets.py)
TIMED_METRICS = ("latency_ms_p50", "latency_ms_p90", "latency_ms_p99", "throughput_per_s", "prefill_ms_p50", "decode_tokens_per_s")


class _Strict(BaseModel):
    # strict: "yes" is no bool and "5" no number (a policy says what it means); an int is still a float
    model_config = ConfigDict(extra="forbid", strict=True)


def _parsed(parse, texts):
    """Run a command-line option's parser on policy values: its ConvertError becomes a schema error with a line."""
    try:
        parse(tuple(texts))
    except ConvertError as exc:
        raise ValueError(exc.paragraph()) from None
    return texts


class ModelSpec(_Strict):
    path: str = Field(description="a model file or folder, package.module:callable, or path/to/file.py:callable (relative to this file)")
    framework: Literal["torch", "transformers", "sentence-transformers", "diffusers", "keras", "jax", "onnx"] | None = policy_default(
        "model.framework"
    )
    task: str | None = Field(
        policy_default("model.task"), description="a Hugging Face model's task (Optimum's names), e.g. text-generation-with-past"
    )
    component: list[str] = Field(
        policy_default("model.component"),
        description="only these components of a model made of several (default: every one); require.components still "
        "names those that must pass",
    )
    dtype: Literal["float32", "float16", "bfloat16", "source"] = Field(
        policy_default("model.dtype"),
        description="what a Hugging Face folder's floating weights compute in (source: the checkpoint's own dtype)",
    )
    weights: str | None = policy_default("model.weights")
    weights_key: str | None = Field(
        policy_default("model.weights_key"), description="the entry of a training checkpoint (weights) that holds the model's state dict"
    )
    params: str | None = policy_default("model.params")
    inputs: list[str] = policy_default("model.inputs")
    example_inputs: str | None = policy_default("model.example_inputs")
    trust_code: bool = policy_default("model.trust_code")

    @field_validator("inputs")
    @classmethod
    def _inputs(cls, texts: list[str]) -> list[str]:
        from convert.specs import parse_input_specs

        return _parsed(parse_input_specs, texts)


class Requirements(_Strict):
    targets: list[str] = Field(
        policy_default("require.targets"),
        description="artifact formats that must be exported and pass (an .onnx model requiring nothing else: [onnx])",
    )
    artifacts: dict[str, str] = Field(
        {},
        description="NAME: PATH of artifacts you already have (relative to this file) that must pass against the model, "
        "validated as they are and never changed; budgets name them by NAME",
    )
    optimizations: list[str] = Field(
        policy_default("require.optimizations"), description="--optimize passes whose artifacts must be built and pass"
    )
    packages: list[str] = Field(
        policy_default("require.packages"), description="--package packagers whose packages must be built from the artifacts and pass"
    )
    components: list[str] = Field(
        [],
        description="of a model made of several (an encoder-decoder, a dual encoder, a diffusion pipeline): the components "
        "that must be converted and pass this policy each, and together (default: every one of the model's)",
    )
    devices: list[Device] = Field(["cpu"], min_length=1, description="devices every required artifact must pass on")
    may_skip_devices: list[Device] = Field([], description="required devices that may be absent from the machine")


class Validation(_Strict):
    dims: list[str] = policy_default("validation.dims")
    shape_ranges: list[str] = policy_default("validation.shape_ranges")
    samples: int = Field(policy_default("validation.samples"), **policy_bounds("validation.samples"))
    seed: int = Field(policy_default("validation.seed"), **policy_bounds("validation.seed"))
    allow_fixed_shapes: bool = Field(
        policy_default("validation.allow_fixed_shapes"),
        description="accept an artifact that fixes a dim asked dynamic; its checks at other "
        "sizes are skipped, and a skipped check on a required device still rejects",
    )
    min_precision_share: float = Field(
        policy_default("validation.min_precision_share"),
        **policy_bounds("validation.min_precision_share"),
        description="the least share of multiply-accumulates a reduced-precision artifact computes (or, weight-only, stores) in its "
        "precision, as --min-precision-share (0 judges nothing)",
    )
    tolerances: list[str] = Field(policy_default("validation.tolerances"), description="fp32 tolerance overrides, as --tolerance")
    accuracy: list[str] = Field(
        policy_default("validation.accuracy"), description="accuracy budgets that judge fp16 / int8 / int4 checks, as --accuracy"
    )
    opset: int | None = Field(policy_default("validation.opset"), **policy_bounds("validation.opset"))
    data: str | None = Field(
        policy_default("validation.data"),
        description="samples every artifact is validated on, in any form --data takes (relative to this file)",
    )
    data_samples: int = Field(
        policy_default("validation.data_samples"),
        **policy_bounds("validation.data_samples"),
        description="samples of the data used, chosen with the seed when there are more",
    )
    columns: list[str] = Field(
        policy_default("validation.columns"), description="INPUT=COLUMN: the column or array that feeds an input, or label=COLUMN"
    )
    preprocess: str | None = Field(policy_default("validation.preprocess"), description="an image folder's preprocessing, as --preprocess")
    metric: str | None = Field(
        policy_default("validation.metric"), description="module:function of a task metric of your own (needs model.trust_code)"
    )
    calibration_data: str | None = policy_default("validation.calibration_data")
    calibration_method: Literal[CALIBRATION_METHODS] = policy_default("validation.calibration_method")
    keep_fp32: list[str] = Field(
        policy_default("validation.keep_fp32"),
        description="node-name or module-path patterns the INT8 / FP16 passes leave in FP32, as --keep-fp32",
    )
    weight_group_size: int = Field(
        policy_default("validation.weight_group_size"),
        **policy_bounds("validation.weight_group_size"),
        description="weights per scale in the weight-only passes, as --weight-group-size (-1: one per output channel)",
    )
    weight_ratio: float = Field(
        policy_default("validation.weight_ratio"),
        **policy_bounds("validation.weight_ratio"),
        description="share of the layers openvino:int4 puts in INT4 (the rest in INT8), as --weight-ratio",
    )
    stage_timeout: float = Field(
        policy_default("validation.stage_timeout"),
        **policy_bounds("validation.stage_timeout"),
        description="seconds a stage may run in the worker process before it is stopped and failed",
    )

    @field_validator("dims", "shape_ranges", "tolerances", "accuracy", "columns")
    @classmethod
    def _options(cls, texts: list[str], info) -> list[str]:
        from convert.datasets import parse_columns
        from convert.specs import parse_dim_sizes, parse_shape_ranges
        from convert.validators.tolerances import TolerancePolicy

        parse = {
            "dims": parse_dim_sizes,
            "shape_ranges": parse_shape_ranges,
            "tolerances": TolerancePolicy,
            "accuracy": lambda texts: TolerancePolicy((), texts),
            "columns": parse_columns,
        }[info.field_name]
        return _parsed(parse, texts)

    @field_validator("preprocess")
    @classmethod
    def _preprocess(cls, text: str | None) -> str | None:
        from convert.datasets import parse_preprocess

        return _parsed(lambda texts: parse_preprocess(texts[0]), [text]) if text else text


class ArtifactBudget(_Strict):
    accuracy: str | dict[str, str] | None = Field(None, description="'cosine>=0.999,max_abs<=1e-4' for every output, or {output: budget}")
    runtime: str | None = Field(None, description="judge latency and throughput on this runtime only (default: every runtime)")
    latency_ms_p50: PerDevice = None
    latency_ms_p90: PerDevice = None
    latency_ms_p99: PerDevice = None
    throughput_per_s: PerDevice = Field(None, description="a minimum")
    prefill_ms_p50: PerDevice = Field(None, description="a decoder's prompt call, a maximum")
    decode_tokens_per_s: PerDevice = Field(None, description="a decoder's generated tokens per second, a minimum")
    size_mb: float | None = Field(None, gt=0, allow_inf_nan=False, description="a maximum, in 10^6 bytes")

    @field_validator("accuracy")
    @classmethod
    def _accuracy(cls, accuracy: str | dict[str, str] | None) -> str | dict[str, str] | None:
        from convert.validators.tolerances import parse_budget

        for output, text in ({"*": accuracy} if isinstance(accuracy, str) else accuracy or {}).items():
            try:
                named, _ = parse_budget(text)
            except ConvertError as exc:
                raise ValueError(exc.paragraph()) from None
            if named is not None:
                raise ValueError(
                    f"'{text}' names an output in the text; write {{{named}: '{text.rpartition(':')[2]}'}}"
                    + (" instead" if output == "*" else " as its own key")
                )
        return accuracy

    def timed(self) -> bool:
        return any(getattr(self, metric) is not None for metric in TIMED_METRICS)


class Allowance(_Strict):
    """How much worse than the baseline counts as noise, not a regression."""

    accuracy: float = Field(0.25, ge=0, allow_inf_nan=False, description="relative growth of an error (max abs, rel RMS, 1 - cosine)")
    accuracy_abs: float = Field(1e-6, ge=0, allow_inf_nan=False, description="absolute growth of an error on top of the relative one")
    task_drop: float = Field(
        0.005,
        ge=0,
        allow_inf_nan=False,
        description="growth of a task metric's drop on the labelled data, in absolute terms (0.005: half a point)",
    )
    latency: float = Field(
        0.10, ge=0, allow_inf_nan=False, description="relative growth of p50 latency, timed beside the baseline's artifact in the same run"
    )
    latency_recorded: float = Field(
        1.0,
        ge=0,
        allow_inf_nan=False,
        description="relative growth of p50 latency against the baseline report's recorded p50 (its artifact not timed beside): "
        "another run's machine load is not measured, and a shared runner's timings move by 2x from one run to the next",
    )
    latency_ms: float = Field(0.02, ge=0, allow_inf_nan=False, description="absolute growth of p50 latency on top of the relative one")
    size: float = Field(0.01, ge=0, allow_inf_nan=False, description="relative growth of the artifact's size")


class Baseline(_Strict):
    report: str | None = Field(None, description="the JSON report of the last promoted model (or pass --baseline)")
    allowance: Allowance = Allowance()


class BenchmarkOptions(_Strict):
    threads: int | None = Field(policy_default("benchmark.threads"), **policy_bounds("benchmark.threads"))
    batch: int = Field(policy_default("benchmark.batch"), **policy_bounds("benchmark.batch"))
    seconds: float = Field(
        policy_default("benchmark.seconds"),
        **policy_bounds("benchmark.seconds"),
        description="each measurement's least duration, as --benchmark-seconds",
    )


class Policy(_Strict):
    version: Literal[1] = 1
    model: ModelSpec
    require: Requirements = Requirements()
    validation: Validation = Validation()
    budgets: dict[str, ArtifactBudget] = Field({}, description="by artifact key: a target format or an optimization")
    benchmark: BenchmarkOptions = BenchmarkOptions()
    baseline: Baseline | None = None
    out: str = policy_default("out")  # relative to the policy file's folder, as every path here

    def required_keys(self) -> list[str]:
        return [*self.require.targets, *self.require.optimizations, *self.require.artifacts]

    def timed(self) -> bool:
        return any(budget.timed() for budget in self.budgets.values())


def load_policy(source: str | os.PathLike | dict) -> tuple[Policy, str]:
    """The validated policy, with its relative paths made absolute, and its name for messages."""
    if isinstance(source, dict):
        return _validated(source, {}, "the policy"), "<dict>"
    path = Path(source)
    name = str(path)
    data, lines = read_yaml(path, "policy", "promotion policy YAML file (see docs/how-to/gate.md)")
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}"
        raise ConvertError(
            f"{name}: a policy is a mapping of keys (model, require, budgets, ...); this one is {what}",
            "Start from the example policy examples/gate/promotion.yaml (docs/how-to/gate.md).",
        )
    policy = _validated(data, lines, name)
    return _resolved(policy, path.resolve().parent), name


def read_yaml(path: Path, what: str, hint: str) -> tuple[Any, dict[tuple, int]]:
    """A YAML file's data and the line of each key and item; a ConvertError naming the file (and line) when it
    cannot be read."""
    name = str(path)
    if not path.is_file():
        raise ConvertError(
            f"the {what} file {name} does not exist" if not path.exists() else f"the {what} {name} is not a file",
            f"Pass the path of a {hint}.",
        )
    try:
        text = path.read_text(encoding="utf-8")
        # no anchors or aliases: nine levels of nine aliases are 387 million values in 500 bytes
        data, lines = load_yaml(text, name, walk=lambda node: _lines(node, name))
    except UnicodeDecodeError:
        raise ConvertError(f"the {what} {name} is not UTF-8 text", "Save it as a UTF-8 YAML file.") from None
    except OSError as exc:
        raise ConvertError(f"cannot read the {what} {name}: {exc.strerror or exc}", "Check that the file is readable.") from None
    except RecursionError:
        raise ConvertError(f"{name} nests too deeply", f"Write the {what} as plain mappings and lists.") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConvertError(f"{name}{where}: not valid YAML: {problem}", "Fix the YAML syntax there.") from None
    return data, lines


def validated(data: dict, lines: dict[tuple, int], name: str, schema: type[BaseModel], what: str, hint: str) -> Any:
    """``data`` validated against a schema, every problem in one message, each with its line."""
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise ConvertError(f"{name} is not a valid {what}: {'; '.join(_problems(exc, data, lines, schema))}", hint) from None


POLICY_HINT = "Fix those keys; docs/reference/policy.md lists every key."


def _validated(data: dict, lines: dict[tuple, int], name: str, what: str = "policy", hint: str = POLICY_HINT) -> Policy:
    policy = _with_default_targets(validated(data, lines, name, Policy, what, hint))
    problems = [problem for _, problem in sorted(_cross_checks(policy, lines), key=lambda item: item[0])]
    if problems:
        raise ConvertError(f"{name} is not a valid {what}: {'; '.join(problems)}", hint)
    return policy


def _with_default_targets(policy: Policy) -> Policy:
    """An ONNX model's policy that requires nothing requires its checked and normalised onnx artifact: what a run of it
    makes without --to, so that its budgets, passes and verdict have an artifact to judge."""
    require = policy.require
    if require.targets or require.artifacts or not policy.model.path.lower().endswith(".onnx"):
        return policy
    return policy.model_copy(update={"require": require.model_copy(update={"targets": ["onnx"]})})


def _problems(exc: ValidationError, data: dict, lines: dict[tuple, int], schema: type[BaseModel]) -> list[str]:
    """One message per place in the file, in file order.

    A value that fits none of a union's types gives one pydantic error per type; the deepest says most (a bad
    value inside a mapping rather than 'not a string'), and of several at one place the first is kept."""
    errors = [(error, _data_path(tuple(error["loc"]), data, error["type"] in ("extra_forbidden", "missing"))) for error in exc.errors()]
    paths = {path for _, path in errors}
    kept: dict[tuple, dict] = {}
    for error, path in errors:
        if not any(other[: len(path)] == path and len(other) > len(path) for other in paths):
            kept.setdefault(path, error)
    ordered = sorted(kept.items(), key=lambda item: _line(lines, item[0]) or 0)
    return [_describe(error, path, lines, schema) for path, error in ordered]


def _describe(error: dict, path: tuple, lines: dict[tuple, int], schema: type[BaseModel]) -> str:
    dotted = ".".join(str(p) for p in path) or "(top level)"
    if error["type"] == "extra_forbidden":
        allowed = _allowed_keys(path[:-1], schema)
        return f"{_at(lines, path)}{dotted}: unknown key" + (_names("allowed", str(path[-1]), allowed) if allowed else "")
    if error["type"] == "missing":
        return f"{_at(lines, path[:-1])}{dotted}: missing, and it is required"
    if error["type"] == "value_error":  # our own parsers' messages, which quote the value already
        return f"{_at(lines, path)}{dotted}: {error['msg'].removeprefix('Value error, ')}"
    return f"{_at(lines, path)}{dotted}: {error['msg'][0].lower()}{error['msg'][1:]} (got {shown(error.get('input'))})"


def _data_path(loc: tuple, data: Any, names_key: bool) -> tuple:
    """The parts of a pydantic location that are keys and items of the data (it also names union members,
    e.g. 'float' or 'dict[str,str]'); for an unknown or a missing key, that key is the last part."""
    path = []
    for part in loc[:-1] if names_key else loc:
        if isinstance(data, dict) and part in data or isinstance(data, list) and isinstance(part, int) and part < len(data):
            path.append(part)
            data = data[part]
    return tuple(path) + ((loc[-1],) if names_key else ())


def _names(label: str, given: str, names: list[str]) -> str:
    """The names an unknown one could be, and the closest of them when one is close (a typo's likely meaning)."""
    near = closest(given, names)
    return f" ({label}: {', '.join(names)}" + (f"; did you mean {near}?)" if near else ")")


def _allowed_keys(path: tuple, schema: type[BaseModel]) -> list[str]:
    """The keys the schema allows in the mapping at ``path``."""
    model: Any = schema
    for part in path:
        model = _member(model)
        if isinstance(model, type) and issubclass(model, BaseModel):
            model = model.model_fields[part].annotation if part in model.model_fields else None
        elif get_origin(model) in (dict, list):
            model = get_args(model)[-1]
    model = _member(model)
    return list(model.model_fields) if isinstance(model, type) and issubclass(model, BaseModel) else []


def _member(annotation: Any) -> Any:
    """The structured member of an optional or union annotation (``Baseline | None`` → ``Baseline``)."""
    if get_origin(annotation) in (dict, list) or not get_args(annotation) or get_origin(annotation) is Literal:
        return annotation
    members = [m for m in get_args(annotation) if isinstance(m, type) and issubclass(m, BaseModel) or get_origin(m) in (dict, list)]
    return members[0] if members else annotation


def _cross_checks(policy: Policy, lines: dict[tuple, int]) -> list[tuple[int, str]]:
    """What the schema alone cannot say: names that must exist in the registry or elsewhere in the policy."""
    from convert.registry import REGISTRY

    formats = REGISTRY.target_formats()
    passes = [e.name for e in REGISTRY.entries("optimizer")]
    runtimes = [e.name for e in REGISTRY.entries("runtime")]
    problems = []

    def problem(path: tuple, text: str) -> None:
        problems.append((_line(lines, path) or 0, f"{_at(lines, path)}{'.'.join(map(str, path))}: {text}"))

    if not policy.require.targets and not policy.require.artifacts:  # an ONNX model's default target is set by now
        problem(("require",), "give require.targets (formats to export) or require.artifacts (artifacts you already have)")
    for name in policy.require.artifacts:
        if name in formats or name in passes:
            problem(("require", "artifacts", name), f"'{name}' is a format or pass name: name a given artifact otherwise")
    for index, target in enumerate(policy.require.targets):
        if target not in formats:
            problem(("require", "targets", index), f"unknown format '{target}'" + _names("known", target, formats))
    for index, name in enumerate(policy.require.optimizations):
        if name not in passes:
            problem(("require", "optimizations", index), f"unknown pass '{name}'" + _names("known", name, passes))
        elif (takes := REGISTRY.get("optimizer", name).takes) not in policy.require.targets:
            problem(
                ("require", "optimizations", index), f"the pass '{name}' starts from the {takes} artifact: add {takes} to require.targets"
            )
    packagers = [e.name for e in REGISTRY.entries("packager")]
    for index, name in enumerate(policy.require.packages):
        if name not in packagers:
            problem(("require", "packages", index), f"unknown packager '{name}'" + _names("known", name, packagers))
    for key, budget in policy.budgets.items():
        if key not in policy.required_keys():
            problem(("budgets", key), f"'{key}' is not a required target or optimization (required: {', '.join(policy.required_keys())})")
        if budget.runtime is not None and budget.runtime not in runtimes:
            problem(("budgets", key, "runtime"), f"unknown runtime '{budget.runtime}'" + _names("known", budget.runtime, runtimes))
    for index, device in enumerate(policy.require.may_skip_devices):
        if device not in policy.require.devices:
            problem(("require", "may_skip_devices", index), f"'{device}' is not in require.devices")
    return problems


def _line(lines: dict[tuple, int], path: tuple) -> int | None:
    """The line of the deepest part of ``path`` that the file has; None for a policy given as a dict."""
    return next((lines[path[:end]] for end in range(len(path), -1, -1) if path[:end] in lines), None)


def _at(lines: dict[tuple, int], path: tuple) -> str:
    line = _line(lines, path)
    return f"line {line}: " if line is not None else ""


def _lines(node: yaml.Node | None, name: str, path: tuple = (), seen: set[int] | None = None) -> dict[tuple, int]:
    """The 1-based line of every key and list item of the YAML document, by the keys as YAML reads them (``5:`` is 5).

    A key given twice in one mapping is an error here: YAML would keep the last one and drop the first silently.
    The loader refuses aliases before this walk; a node met twice would still be walked once."""
    found: dict[tuple, int] = {}
    seen = set() if seen is None else seen
    if node is None or id(node) in seen:
        return found
    seen.add(id(node))
    found[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        first: dict = {}
        for key_node, value in node.value:
            key = _key(key_node)
            if key in first:
                raise ConvertError(
                    f"{name} line {key_node.start_mark.line + 1}: the key '{key}' is given twice in one mapping "
                    f"(first on line {first[key]})",
                    "Keep one of them: YAML would silently use the last.",
                )
            first[key] = key_node.start_mark.line + 1
            found.update(_lines(value, name, path + (key,), seen))
            found[path + (key,)] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found.update(_lines(item, name, path + (index,), seen))
    return found


def _key(node: yaml.Node) -> Any:
    """A mapping key as the YAML loader builds it (a scalar; a complex key stays its text)."""
    if isinstance(node, yaml.ScalarNode):
        return PlainYamlLoader("").construct_object(node)  # a key Python cannot build is a YAML error at its line
    return node.start_mark.line


def _resolved(policy: Policy, folder: Path) -> Policy:
    """Paths in the policy made absolute against the policy file's folder."""
    from convert.sources.request import anchored_reference

    def absolute(value: str | None) -> str | None:
        if value is None or Path(value).is_absolute():
            return value
        return str(folder / value)

    model = policy.model
    path = anchored_reference(model.path, folder)
    update = {
        "model": model.model_copy(
            update={
                "path": path,
                "weights": absolute(model.weights),
                "params": absolute(model.params),
                "example_inputs": absolute(model.example_inputs),
            }
        ),
        "validation": policy.validation.model_copy(
            update={
                "calibration_data": absolute(policy.validation.calibration_data),
                "data": absolute(policy.validation.data),
                "metric": policy.validation.metric and anchored_reference(policy.validation.metric, folder),
            }
        ),
        "require": policy.require.model_copy(update={"artifacts": {k: absolute(v) for k, v in policy.require.artifacts.items()}}),
        "out": absolute(policy.out),
    }
    if policy.baseline is not None and policy.baseline.report is not None:
        update["baseline"] = policy.baseline.model_copy(update={"report": absolute(policy.baseline.report)})
    return policy.model_copy(update=update)
