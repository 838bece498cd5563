"""Every reader of what a user hands the tool, fuzzed: the input-spec grammar, the policy and manifest readers, the
report loader, and the gate's comparison with a baseline. Each either gives a valid object or raises the tool's user
error (ConvertError: exit 2, a problem and a next step), never another exception, never a hang.

The inputs are built near the grammar (valid pieces, mutated) so that the fuzzing reaches past the first check, and
salted with what broke readers before: YAML anchors and aliases, dates Python cannot build (2001-13-45), integers of
more digits than Python reads, digits that are not ASCII ('²'), NaN and Inf, JSON nested past Python's recursion
limit. Each test runs a few hundred examples; the file takes about 20 s on one core. A deadline of a few seconds per
example fails any input that makes a reader stall (an alias bomb took 37 s)."""

from __future__ import annotations

import json
import math
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from convert.batch import load_manifest
from convert.errors import ConvertError
from convert.gate.baseline import load_report
from convert.gate.judge import judge
from convert.policy import Policy, load_policy
from convert.reports import model as rm
from convert.specs import DTYPES, InputSpec, parse_input_spec, parse_input_specs
from tests.conftest import REPO
from tests.convert.unit.test_judge_units import _artifact, _check, _output, _policy, _report, _task_check

FUZZ = settings(max_examples=150, deadline=timedelta(seconds=5), suppress_health_check=[HealthCheck.too_slow])

NASTY_SCALARS = [
    "2001-13-45",  # a date YAML resolves and datetime refuses
    "2001-02-30",
    "9" * 4400,  # more digits than int() reads
    "-" + "9" * 4400,
    "0x" + "f" * 4000,
    "1e400",
    ".nan",
    ".inf",
    "-.inf",
    "~",
    "'²'",
    "²",
    "٣",
    "!!python/object/apply:os.system [echo]",
    "!!binary aGVsbG8=",
    "!!timestamp 2001-13-45",
    "!!int 12abc",
    "!!float x",
    "&a [x, x]",
    "*a",
    "[*a, *a]",
    "{<<: *a}",
    "? [a, b]",
    "'\\ud800'",
    '"\\ud800"',
    "[" * 200 + "]" * 200,
    "{" * 60 + "}" * 60,
    "\t",
    "---",
    "...",
    "%YAML 1.1",
    "|\n  x",
    "x:float32[B,²]",
    "x:float32[B," + "9" * 30 + "]",
    "x:float32[B]{0..1e400}",
    "x:int64[B]{-1e400..0}",
    "cosine>=nan",
    "B=" + "9" * 4400,
]


# the input-spec grammar


def mostly(valid, other):
    """Nine draws in ten from ``valid``: most examples get past the first check, and on to the next."""
    return st.sampled_from([True] * 9 + [False]).flatmap(lambda ok: valid if ok else other)


NAMES = mostly(st.sampled_from(["x", "input_ids", "a.b/c-d", "_"]), st.sampled_from(["9x", "", " x ", "x y", "²"]) | st.text(max_size=6))
DTYPE_TEXT = mostly(st.sampled_from(DTYPES), st.sampled_from(["float33", "", "FLOAT32", "int"]) | st.text(max_size=6))
DIMS = mostly(
    st.integers(1, 64).map(str) | st.sampled_from(["B", "S", "P+S", " B + S "]),
    st.integers(-3, 10**20).map(str)
    | st.sampled_from(["B+", "+", "²", "٣", "𝟘", "9" * 5000, "", " ", "0", "01", "1_000", "B-1"])
    | st.text(alphabet=st.characters(codec="utf-8", exclude_characters="],"), max_size=5),
)
NUMBERS = mostly(
    st.integers(-300, 300).map(str) | st.floats(-1e6, 1e6).map(repr),
    st.floats(allow_nan=True, allow_infinity=True).map(repr)
    | st.integers(-(10**30), 10**30).map(str)
    | st.sampled_from(["1e400", "-1e400", "nan", "inf", ".5", "5.", "+1", "1e-400", "9" * 400, "", "a", "1e38", "-1e308", "65504"]),
)
DOMAINS = st.none() | st.tuples(NUMBERS, NUMBERS, mostly(st.just(".."), st.sampled_from(["...", ".", "-"]))).map(
    lambda t: f"{t[0]}{t[2]}{t[1]}"
)


@st.composite
def spec_texts(draw) -> str:
    dims = draw(st.lists(DIMS, max_size=5))
    domain = draw(DOMAINS)
    text = f"{draw(NAMES)}:{draw(DTYPE_TEXT)}[{','.join(dims)}]" + ("" if domain is None else f"{{{domain}}}")
    if draw(st.integers(0, 3)) == 0:  # and a random splice
        at = draw(st.integers(0, len(text)))
        text = text[:at] + draw(st.sampled_from(["", "[", "]", "{", "}", ":", ",", "..", " ", "\n", "\x00"])) + text[at:]
    return text


def _parsed_or_user_error(parse, *args):
    try:
        return parse(*args)
    except ConvertError as exc:
        assert exc.problem and exc.next_step, exc
        return None


@FUZZ
@given(spec_texts())
def test_an_input_spec_parses_and_round_trips_or_gives_a_clear_error(text):
    spec = _parsed_or_user_error(parse_input_spec, text)
    if spec is None:
        return
    assert isinstance(spec, InputSpec) and spec.dtype in DTYPES
    assert all(isinstance(d, str) or (isinstance(d, int) and d >= 1) for d in spec.dims)
    assert spec.low is None or (math.isfinite(spec.low) and math.isfinite(spec.high) and spec.low <= spec.high)
    assert parse_input_spec(str(spec)) == spec  # what the report and the reproducer write reads back the same


@FUZZ
@given(st.lists(spec_texts() | st.text(max_size=30), max_size=4))
def test_a_list_of_input_specs_parses_or_gives_a_clear_error(texts):
    specs = _parsed_or_user_error(parse_input_specs, texts)
    assert specs is None or len({s.name for s in specs}) == len(specs)


# the policy and manifest readers

POLICY = (REPO / "examples" / "gate" / "promotion.yaml").read_text()
MANIFEST = (REPO / "examples" / "batch" / "zoo.yaml").read_text()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@st.composite
def edited(draw, text: str) -> str:
    """The example file with up to three lines edited: a value replaced by a nasty scalar or by random YAML data, a line
    dropped, re-indented, cut, or given an anchor, an alias or a merge key."""
    lines = text.splitlines()
    for _ in range(draw(st.integers(1, 3))):
        index = draw(st.integers(0, len(lines) - 1))
        key, colon, _ = lines[index].partition(":")
        edit = draw(st.sampled_from(["nasty", "data", "drop", "indent", "cut", "anchor", "alias", "duplicate"]))
        if edit == "nasty" and colon:
            lines[index] = f"{key}: {draw(st.sampled_from(NASTY_SCALARS))}"
        elif edit == "data" and colon:
            value = draw(DATA)
            lines[index] = f"{key}: {yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()}"
        elif edit == "drop":
            del lines[index]
        elif edit == "indent":
            lines[index] = " " * draw(st.integers(0, 6)) + lines[index].lstrip()
        elif edit == "cut":
            lines[index] = lines[index][: draw(st.integers(0, max(0, len(lines[index]) - 1)))]
        elif edit == "anchor" and colon:
            lines[index] = f"{key}: &a {lines[index].partition(':')[2].strip() or '[]'}"
        elif edit == "alias" and colon:
            lines[index] = f"{key}: *a"
        elif edit == "duplicate":
            lines.insert(index, lines[index])
        if not lines:
            break
    return "\n".join(lines) + "\n"


SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["onnx", "cpu", "int8", "x:float32[B,3]", "B=2,1", "cosine>=0.9", "x:float32[²]", "2001-13-45"])
)
DATA = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=12
)


def _read(folder: Path, name: str, text: str, read):
    path = folder / name
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    return _parsed_or_user_error(read, path)


@FUZZ
@given(edited(POLICY))
def test_any_edit_of_the_example_policy_loads_or_gives_a_clear_error(folder, text):
    result = _read(folder, "promotion.yaml", text, load_policy)
    assert result is None or isinstance(result[0], Policy)


@FUZZ
@given(edited(MANIFEST))
def test_any_edit_of_the_example_manifest_loads_or_gives_a_clear_error(folder, text):
    result = _read(folder, "zoo.yaml", text, load_manifest)
    assert result is None or all(isinstance(job.policy, Policy) for job in result[0])


@FUZZ
@given(st.lists(st.sampled_from([*NASTY_SCALARS, "model: {path: m.onnx}", "require:", "  targets: [onnx]", "- x", "a: b"]), max_size=6))
def test_any_lines_of_nasty_yaml_load_or_give_a_clear_error(folder, lines):
    _read(folder, "promotion.yaml", "\n".join(lines) + "\n", load_policy)
    _read(folder, "zoo.yaml", "\n".join(lines) + "\n", load_manifest)


# the report loader, and the gate's use of what it loads

REPORT = _report(
    _artifact(
        checks=[_check(), _check(shape="B=9", outputs=[_output(max_abs_error=2e-6)]), _task_check(0.01)],
        benchmarks=[rm.Benchmark(runtime="onnxruntime", device="cpu", shape="B=2", latency_ms_p50=3.0, latency_ms_interval=[2.5, 3.5])],
    ),
    stages=[rm.Stage(kind="export", subject="onnx", status="ok")],
).to_json()
RAW = "\x00RAW\x00"  # a placeholder for JSON text json.dumps cannot write
RAW_VALUES = ["9" * 5000, "[" * 5000 + "]" * 5000, "NaN", "-Infinity", "1e400", "{" * 70 + "}" * 70, '"\\ud800"', "0" * 20]
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10) | st.just(RAW),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def _like(value):
    """Values of the same JSON type as ``value``, the troublesome ones first: most stay within the schema."""
    if isinstance(value, bool):
        return st.booleans()
    if isinstance(value, (int, float)):
        return st.sampled_from([math.nan, math.inf, -math.inf, 0, -1, 1e308, 5e-324, RAW]) | st.floats() | st.integers()
    if isinstance(value, str):
        return st.sampled_from(["", "nan", "passed", "failed", "skipped", "ok", "cpu", "y", "B=2"]) | st.text(max_size=10)
    if isinstance(value, list) and value:
        return st.lists(st.sampled_from(value), max_size=4)
    return st.just(value)


def _paths(data, path=()):
    yield path
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        yield from _paths(value, (*path, key))


@st.composite
def report_texts(draw) -> str:
    """The report.json of a gate run with up to three of its values replaced (NaN, Inf, deep nesting, huge integers,
    wrong types), or its text cut short."""
    data = json.loads(REPORT)
    paths = [path for path in _paths(data) if path and path != ("schema_version",)]
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(paths))
        parent = data
        try:
            for part in path[:-1]:
                parent = parent[part]
            parent[path[-1]] = draw(mostly(_like(parent[path[-1]]), JSON_VALUES))
        except (KeyError, IndexError, TypeError):  # an earlier replacement took that path away
            continue
    text = json.dumps(data)
    placeholder = json.dumps(RAW)  # as json.dumps writes it: quoted, its NULs escaped
    while placeholder in text:
        text = text.replace(placeholder, draw(st.sampled_from(RAW_VALUES)), 1)
    if not draw(st.sampled_from([True] * 9 + [False])):
        text = text[: draw(st.integers(1, len(text)))]
    return text


@FUZZ
@given(report_texts())
def test_a_report_loads_or_gives_a_clear_error_and_the_gate_judges_what_loads(folder, text):
    report = _read(folder, "report.json", text, load_report)
    if report is None:
        return
    assert isinstance(report, rm.Report)
    verdict = _parsed_or_user_error(judge, _report(_artifact()), _policy(), "<dict>", report)  # as the baseline
    assert verdict is None or verdict.promoted == (not verdict.reasons)
    _parsed_or_user_error(judge, report, _policy())  # as the report judged


@FUZZ
@given(report_texts())
def test_report_from_json_gives_a_report_a_user_error_or_a_validation_error(text):
    """Report.from_json is the programmatic loader (no schema-version check): JSON that is no report is pydantic's
    ValidationError, as documented; JSON too deep or no JSON at all is a ConvertError."""
    try:
        assert isinstance(rm.Report.from_json(text), rm.Report)
    except (ConvertError, ValidationError):
        pass


@settings(max_examples=60, deadline=timedelta(seconds=5))
@given(report_texts())
def test_pydantic_model_validate_json_gives_a_report_or_a_validation_error(text):
    """pydantic's own JSON parser, which the tool does not use, holds the same: its recursion limit is an error too."""
    try:
        assert isinstance(rm.Report.model_validate_json(text), rm.Report)
    except ValidationError:
        pass


# the gate's comparison with the baseline fails closed

VALUE = st.none() | st.sampled_from([math.nan, math.inf, -math.inf, 0.0, 1e-6, 0.5, 1.0]) | st.floats(allow_nan=True, allow_infinity=True)
METRICS = st.fixed_dictionaries({"max_abs_error": VALUE, "rel_rms_error": VALUE, "cosine_similarity": VALUE})


def _distance(metrics: dict) -> dict:
    cosine = metrics["cosine_similarity"]
    return {
        "max_abs_error": metrics["max_abs_error"],
        "rel_rms_error": metrics["rel_rms_error"],
        "cosine_distance": None if cosine is None else 1.0 - cosine,
    }


@settings(max_examples=300, deadline=timedelta(seconds=5))
@given(METRICS, METRICS)
def test_a_baseline_value_that_cannot_be_compared_never_passes_as_ok(before, now):
    baseline = _report(_artifact(checks=[_check(outputs=[_output(**before)])]))
    current = _report(_artifact(checks=[_check(outputs=[_output(**now)])]))
    verdict = judge(current, _policy(), baseline=baseline)
    deltas = {d.metric: d for d in verdict.baseline.deltas if d.kind == "accuracy"}
    for metric, base in _distance(before).items():
        value = _distance(now)[metric]
        if base is None and value is None:
            assert metric not in deltas  # measured by neither: none of this output's metrics
        elif base is None or value is None or not math.isfinite(base) or not math.isfinite(value):
            assert deltas[metric].status == "regressed", deltas[metric]
            assert not verdict.promoted
        else:
            assert deltas[metric].status in ("ok", "improved", "regressed")
