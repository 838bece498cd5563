"""The readers of what a user hands the gate have limits: a policy or a manifest with YAML anchors and aliases (a 1 KB
"billion laughs" expands to 387 million items) and a baseline or report JSON nested past any report's depth are
refused in well under a second, exit 2, one paragraph and its next step, no traceback; nothing runs.

The command-line tests run the real CLI with a timeout that guards against a hang only (before these limits, a 9-level
alias bomb took 37 s and 391 MB in the review, and ran past 20 s and 400 MB here); the unit tests pin each refusal's wording and what the fuzzing found."""

from __future__ import annotations

import json

import pytest
import yaml

from convert.batch import load_manifest
from convert.errors import ConvertError
from convert.gate.baseline import load_report
from convert.policy import load_policy
from convert.readers import MAX_JSON_DEPTH, loads_json
from convert.reports import model as rm
from tests.conftest import run_cli

HANG_GUARD = 20  # seconds: a hang guard, not a timing assertion (each refusal takes well under a second of its own)
CNN = {"path": "fixtures.torch_models:build_cnn", "inputs": ["x:float32[B,3,32,32]"]}


def laughs(levels: int = 9, under: str = "require: {targets: *%s}") -> str:
    """A billion-laughs YAML document: each level a list of nine aliases of the level before; the last under a key."""
    names = [f"l{i}" for i in range(levels)]
    lines = ["model: {path: model.onnx}", f"x0: &{names[0]} [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"x{i}: &{names[i]} [{', '.join(['*' + names[i - 1]] * 9)}]")
    lines.append(under % names[-1])
    return "\n".join(lines) + "\n"


def deep_json(depth: int = 100_000) -> str:
    return '{"schema_version": "1.9", "options": ' + "[" * depth + "]" * depth + "}"


def paragraph(stderr: str) -> str:
    return " ".join(stderr.split())


def assert_refused(run, *fragments: str) -> None:
    """Exit 2, one paragraph naming the problem and the next step, no traceback."""
    assert run.returncode == 2, run.output
    assert "Traceback" not in run.output and "internal error" not in run.output
    text = paragraph(run.stderr)
    assert text.startswith("error: ") and text.count("error: ") == 1, run.stderr
    for fragment in fragments:
        assert fragment in text, text


# 1. a policy or a manifest with anchors and aliases


def test_the_gate_refuses_an_alias_bomb_policy_at_once(tmp_path):
    policy = tmp_path / "promotion.yaml"
    policy.write_text(laughs(9))
    assert policy.stat().st_size < 1024
    run = run_cli("gate", str(policy), timeout=HANG_GUARD)
    assert_refused(run, f"{policy} line 2: the YAML anchor '&l0'", "anchors and aliases are not accepted", "Write the values out")
    assert not (tmp_path / "out").exists()


def test_batch_refuses_an_alias_bomb_manifest_at_once(tmp_path):
    manifest = tmp_path / "zoo.yaml"
    manifest.write_text(
        laughs(9, under="models: [{name: a, model: {path: m.onnx, inputs: *%s}}]").replace("model: {path: model.onnx}\n", "version: 1\n")
    )
    run = run_cli("batch", str(manifest), timeout=HANG_GUARD)
    assert_refused(run, f"{manifest} line 2: the YAML anchor '&l0'", "Write the values out")
    assert not (tmp_path / "batch-out").exists()


def test_an_alias_or_an_anchor_is_refused_with_its_line(tmp_path):
    path = tmp_path / "promotion.yaml"
    # an anchor alone is refused too (it is there only to be aliased): the first of either is named
    path.write_text("model: {path: m.onnx}\nrequire:\n  targets: [onnx]\nout: *nowhere\n")
    with pytest.raises(ConvertError) as info:
        load_policy(path)
    assert info.value.problem.startswith(f"{path} line 4: the YAML alias '*nowhere'")
    assert info.value.next_step.startswith("Write the values out")
    path.write_text("model: {path: m.onnx}\nrequire: &r\n  targets: [onnx]\n")
    with pytest.raises(ConvertError, match=r"line 2: the YAML anchor '&r'"):
        load_policy(path)


def test_a_merge_key_is_refused_as_an_alias(tmp_path):
    path = tmp_path / "zoo.yaml"
    path.write_text("version: 1\nmodels:\n  - name: a\n    <<: *base\n")
    with pytest.raises(ConvertError, match=r"line 4: the YAML alias '\*base'"):
        load_manifest(path)


def test_a_policy_batch_writes_for_a_model_has_no_alias_to_refuse(tmp_path):
    """Batch writes OUT/NAME/policy.yaml for each model and gates it: the writer makes no anchors, even where one value
    is shared (the manifest's defaults under every model)."""
    from convert.batch import policy_yaml

    shared = ["onnx"]
    data = {"model": {"path": "m.onnx"}, "require": {"targets": shared}, "validation": {"keep_fp32": shared}}
    assert yaml.safe_dump(data).count("*") == 1  # what the plain safe_dump would have written: an alias
    text = policy_yaml(data)
    assert "&" not in text and "*" not in text
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    policy = load_policy(path)[0]
    assert policy.require.targets == policy.validation.keep_fp32 == shared


# 2. a baseline or a report JSON nested too deep


def test_the_gate_refuses_a_deeply_nested_baseline_before_any_work(tmp_path):
    policy = tmp_path / "promotion.yaml"
    policy.write_text(yaml.safe_dump({"model": CNN, "require": {"targets": ["onnx"]}, "out": "out"}))
    baseline = tmp_path / "last-promoted.json"
    baseline.write_text(deep_json())
    run = run_cli("gate", str(policy), "--baseline", str(baseline), timeout=HANG_GUARD)
    assert_refused(
        run, f"the baseline report {baseline} nests deeper than {MAX_JSON_DEPTH} levels (line 1)", "Pass a report.json written by convert"
    )
    assert not (tmp_path / "out").exists()


def test_convert_report_refuses_a_deeply_nested_report(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(deep_json())
    run = run_cli("report", str(report), "--html", str(tmp_path / "report.html"), timeout=HANG_GUARD)
    assert_refused(run, f"the report {report} nests deeper than {MAX_JSON_DEPTH} levels", "Pass a report.json written by convert")
    assert not (tmp_path / "report.html").exists()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ('{"schema_version": ' + "9" * 5000 + "}", "is not JSON"),  # int() refuses over 4300 digits: a ValueError, no JSONDecodeError
        ('{"schema_version": "1.9", "a": "[[[[", "b": ' + "[" * 70 + "]" * 70 + "}", f"nests deeper than {MAX_JSON_DEPTH} levels"),
        ("[" * 10 + "]" * 10, "is not a convert report of a schema version"),  # brackets inside strings do not count: see above
    ],
)
def test_a_report_json_is_refused_with_a_user_error(tmp_path, text, fragment):
    path = tmp_path / "report.json"
    path.write_text(text)
    with pytest.raises(ConvertError) as info:
        load_report(path)
    assert fragment in info.value.problem and info.value.next_step


def test_brackets_in_strings_do_not_count_towards_the_depth():
    text = json.dumps({"a": "[" * 1000 + '\\"{' * 100, "b": [[["x"]]]})
    assert loads_json(text, "the report x.json", "Pass a report.json.")["b"] == [[["x"]]]


def test_a_real_report_is_far_from_the_depth_limit():
    from tests.convert.unit.test_judge_units import _artifact, _report

    report = _report(_artifact(benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", latency_ms_p50=1.0)]))
    text = report.to_json()
    assert rm.Report.from_json(text) == report
    depth, deepest = 0, 0
    for char in text:  # no brackets in this report's strings
        depth += char in "[{"
        depth -= char in "]}"
        deepest = max(deepest, depth)
    assert deepest * 4 < MAX_JSON_DEPTH


def test_report_from_json_gives_a_user_error_for_json_that_is_too_deep():
    with pytest.raises(ConvertError, match="nests deeper than"):
        rm.Report.from_json(deep_json())


# what the fuzzing found (tests/convert/test_fuzz_readers.py): values YAML resolves that Python refuses


@pytest.mark.parametrize(
    "line, fragment",
    [
        ("out: 2001-13-45", "line 2: not valid YAML: cannot read the value '2001-13-45' (month must be in 1..12)"),
        ("validation: {seed: " + "9" * 5000 + "}", "line 2: not valid YAML: cannot read the value '9999"),
        ("2001-02-30: x", "line 2: not valid YAML: cannot read the value '2001-02-30' (day is out of range for month)"),
    ],
)
def test_a_yaml_value_python_cannot_build_is_a_user_error_with_its_line(tmp_path, line, fragment):
    path = tmp_path / "promotion.yaml"
    path.write_text(f"model: {{path: m.onnx}}\n{line}\n")
    with pytest.raises(ConvertError) as info:
        load_policy(path)
    assert fragment in info.value.problem and info.value.next_step == "Fix the YAML syntax there."


@pytest.mark.parametrize("dim", ["²", "٣", "9" * 5000])
def test_a_dim_of_digits_python_cannot_read_is_a_user_error(dim):
    from convert.specs import parse_input_spec

    with pytest.raises(ConvertError, match="has a dim"):
        parse_input_spec(f"x:float32[B,{dim}]")


def test_a_report_file_that_is_no_file_or_not_utf8_is_a_user_error(tmp_path):
    path = tmp_path / "report.json"
    path.write_bytes(b'{"schema_version": "1.9\xff"}')
    with pytest.raises(ConvertError, match="is not JSON"):
        load_report(path)


def test_loads_json_names_the_file_and_the_next_step():
    with pytest.raises(ConvertError) as info:
        loads_json("[" * (MAX_JSON_DEPTH + 1), "the baseline report b.json", "Pass a report.json written by convert.")
    assert info.value.problem == f"the baseline report b.json nests deeper than {MAX_JSON_DEPTH} levels (line 1)"
    assert info.value.next_step == "Pass a report.json written by convert."


def test_an_explicit_yaml_tag_is_refused_with_its_line(tmp_path):
    """'!!timestamp 2001-13-45' raised an AttributeError inside PyYAML's own constructor; no policy needs a tag."""
    path = tmp_path / "promotion.yaml"
    path.write_text("model: {path: m.onnx}\nout: !!timestamp 2001-13-45\n")
    with pytest.raises(ConvertError) as info:
        load_policy(path)
    assert info.value.problem.startswith(f"{path} line 2: the YAML tag '!!timestamp' is refused")
    assert info.value.next_step == "Remove the tag; quote the value if it is text."


def test_an_integer_too_long_to_print_is_described_in_the_schema_error(tmp_path):
    """YAML reads 0xfff... of 4000 digits (a power-of-two base has no digit limit); repr() of it then raised."""
    path = tmp_path / "promotion.yaml"
    path.write_text("model: {path: m.onnx}\nrequire: {targets: 0x" + "f" * 4000 + "}\n")
    with pytest.raises(ConvertError, match=r"line 2: require.targets: input should be a valid list \(got an integer of 16000 bits\)"):
        load_policy(path)


@pytest.mark.parametrize(
    "text, next_step",
    [
        ("x:float32[B]{0..1e400}", "Give bounds within -3.4028235e+38..3.4028235e+38, with a finite width."),  # 1e400 is inf
        ("x:float64[B]{-1e308..1e308}", "Give bounds within -1.7976931e+308..1.7976931e+308, with a finite width."),
        ("ids:int64[B]{0..1e30}", "Give bounds within -9223372036854775808..9223372036854774784."),
        ("ids:uint8[B]{0..256}", "Give bounds within 0..255."),
        ("x:float16[B]{0..1e5}", "Give bounds within -65504..65504, with a finite width."),
    ],
)
def test_a_value_domain_outside_what_its_dtype_holds_is_refused(text, next_step):
    """It parsed, printed as {0..inf} (which did not parse back), and numpy refused to draw from it at validation."""
    from convert.specs import parse_input_spec

    with pytest.raises(ConvertError) as info:
        parse_input_spec(text)
    assert "has a value domain outside what" in info.value.problem and info.value.next_step == next_step
    assert str(parse_input_spec("ids:uint8[B]{0..255}")) == "ids:uint8[B]{0..255}"


def test_a_lone_surrogate_escape_in_a_policy_is_refused_with_its_line(tmp_path):
    """A YAML "\\ud800" makes a str no file can be named with: 'out' then failed in realpath (an internal error)."""
    path = tmp_path / "promotion.yaml"
    path.write_text('model: {path: m.onnx}\nrequire: {targets: [onnx]}\nout: "\\ud800"\n')
    with pytest.raises(ConvertError, match=r"line 3: not valid YAML: text with a lone surrogate escape"):
        load_policy(path)


def test_a_lone_surrogate_escape_in_a_report_is_refused_and_a_pair_is_read():
    """The HTML, Markdown and JUnit renderings write UTF-8, which a lone surrogate cannot be written in."""
    with pytest.raises(ConvertError, match="holds text with a lone surrogate escape"):
        loads_json('{"a": ["x", "\\ud800"]}', "the report r.json", "Pass a report.json written by convert.")
    assert loads_json('{"a": "\\ud83d\\ude00"}', "the report r.json", "Pass.") == {"a": "😀"}


def test_the_depth_scan_reads_an_unterminated_string_once():
    """A hang guard, not a timing: an unterminated string of escaped quotes was rescanned from every quote (about an
    hour for these 4 MB); read once, it takes well under a second."""
    import time

    from convert.readers import json_too_deep

    started = time.monotonic()
    assert json_too_deep('"' + '\\"' * 2_000_000) is None
    assert time.monotonic() - started < 30
