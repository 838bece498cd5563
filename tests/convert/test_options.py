"""Every run option is declared once (convert/options.py); the CLI, the API, the gate, the report, the cache key and the
reproduce command are derived from that declaration, and these tests hold them to it."""

from __future__ import annotations

import dataclasses
import inspect
import shlex
import tempfile
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from convert import api, options
from convert.cli import export_command, main, validate_command
from convert.errors import ConvertError
from convert.pipeline import ConvertRequest
from convert.pipeline.reproduce import reproduce_command
from convert.policy import Policy, load_policy

# A value for every option other than its default, as the CLI spells it
NON_DEFAULT = {
    "to": "onnx",
    "out": "elsewhere",
    "framework": "torch",
    "task": "fill-mask",
    "component": ("encoder",),
    "dtype": "bfloat16",
    "weights": "w.safetensors",
    "weights_key": "model_state_dict",
    "params": "p.msgpack",
    "inputs": ("x:float32[B,8]", "m:int64[B]{0..1}"),
    "example_inputs": "x.npz",
    "dims": ("B=2,1,8",),
    "optimize": "trt:fp16",
    "package": "archive",
    "data": "samples",
    "data_samples": 50,
    "columns": ("input_ids=tokens", "label=target"),
    "preprocess": "size=32x32;mean=0.5;std=0.25",
    "metric": "metrics.py:f1",
    "calibration_data": "calib.npz",
    "calibration_method": "entropy",
    "keep_fp32": "encoder.layer.3.*,head",
    "weight_group_size": 32,
    "weight_ratio": 0.8,
    "accuracy": ("cosine>=0.99",),
    "shape_ranges": ("B=1..8..32",),
    "benchmark": True,
    "threads": 2,
    "benchmark_batch": 4,
    "benchmark_seconds": 0.5,
    "opset": 18,
    "tolerances": ("atol=1e-3,rtol=1e-2",),
    "samples": 5,
    "seed": 7,
    "allow_fixed_shapes": True,
    "min_precision_share": 0.8,
    "unbuilt": "warn",
    "trust_code": True,
    "force": True,
    "stage_timeout": 60.0,
    "isolate": False,
    "cache": False,
    "cache_dir": "cache",
    "report_json": "r.json",
}


def test_every_option_is_reproduced_or_excluded_with_its_reason():
    assert set(NON_DEFAULT) == set(options.BY_NAME)
    for option in options.OPTIONS:
        if option.reproduce == "never":
            assert option.not_reproduced, f"{option.name} is never reproduced and says not why"
        else:
            assert not option.not_reproduced, option.name


def test_the_cli_takes_exactly_the_declared_options():
    flags = {flag for parameter in export_command.params if parameter.name != "model" for flag in parameter.opts}
    # what is printed is no run option: --quiet and --verbose change no run, report or cache key
    assert flags - {"--quiet", "-q", "--verbose", "-v"} == {option.flag for option in options.OPTIONS}
    assert [p.name for p in export_command.params if p.name not in ("model", "quiet", "verbose")] == [o.parameter for o in options.OPTIONS]


def test_the_api_takes_every_declared_option_but_the_report_path():
    keywords = set(inspect.signature(api.convert).parameters) - {"model"}
    assert keywords == {option.keyword for option in options.OPTIONS} - {"report_json"}


def test_every_policy_key_is_a_policy_field_and_every_run_setting_of_a_policy_is_declared():
    declared = {option.policy for option in options.OPTIONS if option.policy}
    fields = {
        f"{section}.{name}"
        for section in ("model", "validation", "benchmark", "require")
        for name in Policy.model_fields[section].annotation.model_fields
    } | {"out"}
    assert declared <= fields
    # what a policy holds for the gate alone, not for the run, or passes to the run itself (the model and given artifacts)
    gate_only = {"model.path", "require.artifacts", "require.components", "require.devices", "require.may_skip_devices"}
    assert fields - declared == gate_only


def _request_from_cli(argv: list[str]) -> dict:
    context = export_command.make_context("export", argv)
    return {"model": context.params["model"], **options.from_cli(context.params)}


def test_a_reproduce_command_parses_back_to_the_same_request():
    """The command an artifact's record holds, read by the CLI, gives the request that made it (for every option it
    repeats); a TensorRT engine's command keeps its --shape-range, so the same profile is built again."""
    values = _request_from_cli(["model.pt2", *_argv(NON_DEFAULT)])
    request = ConvertRequest(**values)
    for optimization, repeated in (("", {"always"}), ("trt:fp16", {"always", "optimization"})):
        command = reproduce_command(request, "onnx", Path("out/onnx"), optimization)
        parsed = _request_from_cli(shlex.split(command)[3:])
        assert parsed["to"] == ("onnx",) and parsed["optimize"] == ((optimization,) if optimization else ())
        for option in options.OPTIONS:
            if option.reproduce in repeated:
                assert parsed[option.name] == values[option.name], (optimization, option.name, command)
            elif option.reproduce == "optimization":
                assert parsed[option.name] == options.BY_NAME[option.name].to_request(option.default), (option.name, command)
    assert "--shape-range B=1..8..32" in reproduce_command(request, "onnx", Path("out"), "trt:fp16")


def test_an_api_reproduce_names_the_keywords_a_model_object_was_converted_with():
    request = ConvertRequest(
        model=object(), inputs=("x:float32[B,8]",), dims=("B=2,5",), tolerances=("atol=1e-3",), example_inputs={"x": [1.0]}
    )
    text = reproduce_command(request, "onnx", Path("out"))
    assert text == ("convert.convert(<object object>, to=['onnx'], inputs=['x:float32[B,8]'], dims=['B=2,5'], tolerance=['atol=1e-3'])")


def _argv(values: dict) -> list[str]:
    argv: list[str] = []
    for name, value in values.items():
        option = options.BY_NAME[name]
        if option.kind in ("flag", "negated-flag"):
            argv += [option.flag] if value is not option.default else []
        elif option.kind == "multiple":
            for item in value:
                argv += [option.flag, item]
        else:
            argv += [option.flag, str(value)]
    return argv


@pytest.mark.parametrize("name", [o.name for o in options.OPTIONS])
def test_an_option_changes_the_cache_key_of_exactly_the_stages_it_declares(name):
    base = ConvertRequest(**_request_from_cli(["model.pt2", "--to", "onnx"]))
    changed = ConvertRequest(**_request_from_cli(["model.pt2", *_argv({"to": "onnx", name: NON_DEFAULT[name]})]))
    for stage in ("load", "reference", "export", "optimize", "validate"):
        moved = options.digest(base, stage) != options.digest(changed, stage)
        assert moved == (stage in options.BY_NAME[name].stages), (name, stage)


def test_the_gate_builds_its_request_from_the_policy_keys():
    policy = Policy.model_validate(
        {
            "model": {"path": "m.pt2", "inputs": ["x:float32[B,8]"], "trust_code": True},
            "require": {"targets": ["onnx"], "optimizations": ["fp16"]},
            "validation": {"dims": ["B=2,4"], "shape_ranges": ["B=1..2..4"], "samples": 2, "allow_fixed_shapes": True, "opset": 18},
            "benchmark": {"threads": 1, "batch": 2},
        }
    )
    values = options.from_policy(policy)
    assert values["inputs"] == ("x:float32[B,8]",) and values["trust_code"] is True
    assert values["to"] == ("onnx",) and values["optimize"] == ("fp16",)
    assert (values["dims"], values["shape_ranges"], values["samples"], values["opset"]) == (("B=2,4",), ("B=1..2..4",), 2, 18)
    assert (values["threads"], values["benchmark_batch"], values["allow_fixed_shapes"]) == (1, 2, True)


# Each option's default on every surface, read from the surface itself (the click parameter, the dataclass field, the
# keyword, the pydantic field) and compared with the declaration: a default typed anywhere else fails here.


def _same(value: Any, declared: Any) -> bool:
    """Equal and of the same type: 1 is not 1.0 nor True, () is not []."""
    return value == declared and type(value) is type(declared)


def _policy_field(key: str):
    model: Any = Policy
    *sections, name = key.split(".")
    for section in sections:
        model = model.model_fields[section].annotation
    return model.model_fields[name]


# ConvertRequest's fields that are no run option: the model, the artifacts given to validate, the command line that
# asked for the run, and the caller's hooks (moving to RunHooks)
NOT_OPTIONS = {"model", "given", "command", "reads", "writes", "baseline", "judge", "publish"}


def test_every_request_field_but_the_model_given_and_hooks_is_a_declared_option():
    assert {f.name for f in dataclasses.fields(ConvertRequest)} - NOT_OPTIONS == set(options.BY_NAME)


def test_every_declared_difference_is_a_difference_with_its_reason():
    for option in options.OPTIONS:
        assert len({d.surface for d in option.differs}) == len(option.differs), option.name
        for differs in option.differs:
            assert differs.why and not _same(differs.value, option.default), (option.name, differs)
        if option.kind == "flag":  # a flag can only turn something on
            assert option.default is False and option.default_on("cli") is False, option.name
        if option.kind == "negated-flag":  # --no-X turns off what is on by default
            assert option.default is True and option.default_on("cli") is True, option.name


@pytest.mark.parametrize("name", [o.name for o in options.OPTIONS])
def test_every_surface_has_the_declared_default(name):
    option = options.BY_NAME[name]
    assert _same(options.DEFAULTS[name], option.default)
    # ConvertRequest: its field's default is the option's own
    field = {f.name: f for f in dataclasses.fields(ConvertRequest)}[name]
    assert field.default_factory is dataclasses.MISSING and _same(field.default, option.default), field.default
    # the command line: every command's parameter of the option (the gate's and batch's --out excepted: None there is
    # "the policy's out", an override of the policy's own default, which is compared below)
    seen = 0
    for command in main.commands.values():
        for parameter in command.params:
            if option.flag not in parameter.opts or (option.name == "out" and command not in (export_command, validate_command)):
                continue
            default = parameter.default
            if getattr(parameter, "is_flag", False) and not isinstance(default, bool):
                default = False  # a flag declared without a default (click's UNSET) is off
            value = (not default) if option.kind == "negated-flag" else option.to_request(default)
            assert _same(value, option.default_on("cli")), (command.name, default)
            seen += 1
    assert seen >= (1 if option.name in options.MAKES_ARTIFACTS else 2), "export and validate take every option"
    # the Python API: convert()'s keyword, and load()'s where it takes the option
    for function in (api.convert, api.load):
        parameter = inspect.signature(function).parameters.get(option.keyword)
        if parameter is not None:
            assert _same(parameter.default, option.default_on("api")), (function.__name__, parameter.default)
    assert option.keyword in inspect.signature(api.convert).parameters or name == "report_json"
    # a promotion policy: its field's default, in the policy's spelling (a list, a path's text)
    if option.policy is not None:
        default = _policy_field(option.policy).get_default(call_default_factory=True)
        assert _same(default, options.policy_default(option.policy)), default
        assert _same(option.to_request(default), option.default_on("policy")), default


def test_the_requests_each_surface_builds_by_default_hold_the_declared_defaults(tmp_path, monkeypatch):
    """Not only the declared defaults, but what each way in builds when it is given nothing but the model."""
    assert {n: getattr(ConvertRequest(model="m.pt2"), n) for n in options.BY_NAME} == dict(options.DEFAULTS)
    cli = {o.name: o.default_on("cli") for o in options.OPTIONS}
    assert _request_from_cli(["m.pt2"]) == {"model": "m.pt2", **cli}
    context = validate_command.make_context("validate", ["a.onnx", "--against", "m.pt2"])
    assert options.from_cli(context.params) == {n: v for n, v in cli.items() if n not in options.MAKES_ARTIFACTS}
    policy = Policy.model_validate({"model": {"path": "m.pt2"}})
    assert options.from_policy(policy) == {o.name: o.default_on("policy") for o in options.OPTIONS if o.policy}

    built: list[ConvertRequest] = []
    monkeypatch.setattr(api, "run", built.append)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # convert() without out= makes a new folder here
    api.convert("m.pt2")
    (tmp_path / "a.onnx").write_bytes(b"")
    api.validate(tmp_path / "a.onnx", against="m.pt2")
    made, validated = built
    for option in options.OPTIONS:
        if option.name == "out":  # the API's declared default: a new temporary folder for each call
            assert made.out.parent == validated.out.parent == tmp_path and made.out != validated.out
        elif option.name == "to":  # convert()'s declared onnx; validate() makes nothing
            assert (made.to, validated.to) == (option.default_on("api"), ())
        else:
            assert getattr(made, option.name) == getattr(validated, option.name) == option.default_on("api"), option.name


def test_a_policys_default_out_is_beside_the_policy_file(tmp_path):
    """The policy's out has the option's default spelling, read (as every path in a policy) from the policy's folder."""
    (tmp_path / "policy.yaml").write_text("model:\n  path: m.onnx\n")
    policy, _ = load_policy(tmp_path / "policy.yaml")
    assert Path(policy.out) == tmp_path / options.DEFAULTS["out"]


# Each number option's bounds, declared once on the option: the CLI and the API are refused when the run is planned
# (options.check_bounds), a policy by its schema (the field's constraints); every surface takes and refuses the same
# values at each end.

BOUNDED = [option for option in options.OPTIONS if option.bounds is not None]


def _edges(option: options.RunOption) -> list[tuple[Any, bool]]:
    """(value, taken) at each declared end and just past it."""
    bounds, step = option.bounds, 1 if option.type is int else 0.5
    edges = []
    if bounds.low is not None:
        low = option.type(bounds.low)
        edges += [(low, not bounds.low_open), (low - step, False)] + ([(low + step, True)] if bounds.low_open else [])
    if bounds.high is not None:
        high = option.type(bounds.high)
        edges += [(high, True), (high + step, False)]
    return edges


def _taken(check) -> bool:
    try:
        check()
    except (ConvertError, ValidationError):
        return False
    return True


def _policy_with(option: options.RunOption, value: Any) -> Policy:
    section, key = option.policy.split(".")
    return Policy.model_validate({"model": {"path": "m.pt2"}, section: {key: value}})


def test_the_bounded_options_are_the_number_options_a_policy_bounds():
    assert {o.name for o in BOUNDED} >= {"samples", "seed", "min_precision_share", "stage_timeout", "weight_ratio", "threads"}
    for option in BOUNDED:
        assert option.type in (int, float) and option.policy, option.flag
        assert option.default is None or option.bounds.holds(option.default), f"{option.flag}'s default is outside its bounds"
        field = _policy_field(option.policy)
        constraints = {
            type(m).__name__.lower(): getattr(m, type(m).__name__.lower()) for m in field.metadata if hasattr(m, type(m).__name__.lower())
        }
        assert constraints == option.bounds.constraints(), f"{option.policy}: the schema's {constraints} are not {option.flag}'s bounds"


def _surfaces_taking(option: options.RunOption, value: Any) -> dict[str, bool]:
    """Whether the run is planned with ``value`` for the option, given on each surface."""
    cli = _request_from_cli(["m.pt2", option.flag, str(value)])
    api = {"model": "m.pt2", **options.from_api({option.keyword: value})}
    return {
        "cli": _taken(lambda: options.check_bounds(ConvertRequest(**cli))),
        "api": _taken(lambda: options.check_bounds(ConvertRequest(**api))),
        "policy": _taken(lambda: options.check_bounds(ConvertRequest(model="m.pt2", **options.from_policy(_policy_with(option, value))))),
    }


@pytest.mark.parametrize("option", BOUNDED, ids=lambda option: option.flag)
def test_the_cli_the_api_and_a_policy_take_and_refuse_the_same_values(option):
    for value, taken in _edges(option):
        surfaces = _surfaces_taking(option, value)
        assert surfaces == dict.fromkeys(surfaces, taken), f"{option.flag} {value}: {surfaces}, declared {option.bounds}"


def test_samples_past_the_bound_is_refused_on_every_surface_with_the_flag_named():
    with pytest.raises(ConvertError, match="--samples must be at most 10000, not 20000"):
        options.check_bounds(ConvertRequest(**_request_from_cli(["m.pt2", "--samples", "20000"])))
    with pytest.raises(ValidationError, match="less than or equal to 10000"):
        _policy_with(options.BY_NAME["samples"], 20_000)
