"""The policy parser, fuzzed: any text, any YAML-shaped data and any edit of the example policy either loads or gives
a clear ConvertError (exit 2), never an internal error. The same for the option parsers a policy shares with the CLI."""

from __future__ import annotations

import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from convert.errors import ConvertError
from convert.policy import Policy, load_policy
from convert.specs import parse_dim_sizes, parse_shape_ranges
from convert.validators.tolerances import TolerancePolicy
from tests.conftest import REPO

EXAMPLE = (REPO / "examples" / "gate" / "promotion.yaml").read_text()
KEYS = [
    "version",
    "model",
    "require",
    "validation",
    "budgets",
    "benchmark",
    "baseline",
    "out",
    "path",
    "inputs",
    "targets",
    "optimizations",
    "devices",
    "may_skip_devices",
    "dims",
    "samples",
    "accuracy",
    "onnx",
    "fp16",
    "int8",
    "size_mb",
    "latency_ms_p50",
    "throughput_per_s",
    "decode_tokens_per_s",
    "cpu",
    "cuda",
    "allowance",
    "latency",
    "trust_code",
    "runtime",
    "report",
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["onnx", "cpu", "cuda", "int8", "x:float32[B,3]", "B=2,1", "cosine>=0.9", "1e-3", "-1", ".nan", "[", "*a"])
)
DATA = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=8) | st.integers(), inner, max_size=5)
    ),
    max_leaves=25,
)


def _load(text: str) -> Policy | None:
    """load_policy on the text as a file: a Policy, or None for a clear error; anything else fails the test."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "promotion.yaml"
        path.write_text(text, encoding="utf-8")
        try:
            return load_policy(path)[0]
        except ConvertError as exc:
            assert exc.problem and exc.next_step, exc
            return None


FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.text(max_size=200))
def test_any_text_loads_or_gives_a_clear_error(text):
    _load(text.encode("utf-8", "replace").decode("utf-8"))


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), DATA, max_size=6))
def test_any_yaml_data_loads_or_gives_a_clear_error(data):
    _load(yaml.safe_dump(data, allow_unicode=True))


@FUZZ
@given(st.data())
def test_any_edit_of_the_example_policy_loads_or_gives_a_clear_error(data):
    lines = EXAMPLE.splitlines()
    for _ in range(data.draw(st.integers(1, 3))):
        index = data.draw(st.integers(0, len(lines) - 1))
        edit = data.draw(st.sampled_from(["drop", "replace", "indent", "truncate"]))
        if edit == "drop":
            del lines[index]
        elif edit == "replace":
            key, _, _ = lines[index].partition(":")
            lines[index] = f"{key}: {yaml.safe_dump(data.draw(DATA), default_flow_style=True).strip()}"
        elif edit == "indent":
            lines[index] = " " * data.draw(st.integers(0, 5)) + lines[index].lstrip()
        else:
            lines[index] = lines[index][: data.draw(st.integers(0, max(0, len(lines[index]) - 1)))]
    _load("\n".join(lines) + "\n")


def test_the_example_policy_loads():
    policy = _load(EXAMPLE)
    assert policy is not None and policy.require.targets == ["onnx", "torchscript"]


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_the_option_parsers_a_policy_shares_read_any_text_or_give_a_clear_error(text):
    for parse in (parse_dim_sizes, parse_shape_ranges, lambda t: TolerancePolicy(t), lambda t: TolerancePolicy((), t)):
        try:
            parse((text,))
        except ConvertError as exc:
            assert exc.problem and exc.next_step
