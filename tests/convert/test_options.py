"""Every run option is declared once (convert/options.py); the CLI, the API, the gate, the report, the cache key and the
reproduce command are derived from that declaration, and these tests hold them to it."""

from __future__ import annotations

import inspect
import shlex
from pathlib import Path

import pytest

from convert import api, options
from convert.cli import export_command
from convert.pipeline import ConvertRequest
from convert.pipeline.reproduce import reproduce_command
from convert.policy import Policy

# A value for every option other than its default, as the CLI spells it
NON_DEFAULT = {
    "to": "onnx",
    "out": "elsewhere",
    "framework": "torch",
    "task": "fill-mask",
    "dtype": "bfloat16",
    "weights": "w.safetensors",
    "params": "p.msgpack",
    "inputs": ("x:float32[B,8]", "m:int64[B]{0..1}"),
    "example_inputs": "x.npz",
    "dims": ("B=2,1,8",),
    "optimize": "trt:fp16",
    "data": "samples",
    "data_samples": 50,
    "columns": ("input_ids=tokens", "label=target"),
    "preprocess": "size=32x32;mean=0.5;std=0.25",
    "metric": "metrics.py:f1",
    "calibration_data": "calib.npz",
    "calibration_method": "entropy",
    "keep_fp32": "encoder.layer.3.*,head",
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
    assert flags - {"--quiet", "-q"} == {option.flag for option in options.OPTIONS}
    assert [p.name for p in export_command.params if p.name not in ("model", "quiet")] == [o.parameter for o in options.OPTIONS]


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
    gate_only = {"model.path", "require.artifacts", "require.devices", "require.may_skip_devices"}
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
