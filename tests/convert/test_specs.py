import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from convert.errors import ConvertError
from convert.specs import parse_dim_sizes, parse_input_spec, parse_input_specs, parse_shape_ranges


def test_parses_symbols_integers_and_domain():
    spec = parse_input_spec("input_ids:int64[B,S]{0..30521}")
    assert spec.name == "input_ids" and spec.dtype == "int64"
    assert spec.dims == ("B", "S") and (spec.low, spec.high) == (0, 30521)
    assert str(spec) == "input_ids:int64[B,S]{0..30521}"
    image = parse_input_spec("x:float32[B,3,224,224]")
    assert image.dims == ("B", 3, 224, 224) and image.symbols == ("B",)
    assert image.shape({"B": 5}) == (5, 3, 224, 224)
    assert parse_input_spec("scale:float32[]").dims == ()


def test_integer_and_bool_domains_are_inclusive_so_one_value_is_a_domain():
    assert (parse_input_spec("mask:bool[B,S]{0..0}").low, parse_input_spec("mask:bool[B,S]{0..0}").high) == (0, 0)
    assert str(parse_input_spec("mask:bool[B,S]{1..1}")) == "mask:bool[B,S]{1..1}"
    assert parse_input_spec("ids:int64[B]{3..3}").high == 3


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("x:float33[B]", "unknown dtype"),
        ("x[B]", "cannot read"),
        ("x:float32[B,0]", "size 0"),
        ("x:float32[B,-3]", "neither"),
        ("ids:int64[B]{0.5..3}", "fractional"),
        ("ids:int64[B]{9..1}", "empty value domain"),
        ("x:float32[B]{1..1}", "empty value domain"),
        ("mask:bool[B]{1..0}", "empty value domain"),
        ("mask:bool[B]{0..2}", "a bool input a domain outside 0..1"),
        ("mask:bool[B]{-1..0}", "a bool input a domain outside 0..1"),
        ("x:float32[B]{a..b}", "not low..high"),
    ],
)
def test_bad_specs_give_a_clear_error(text, fragment):
    with pytest.raises(ConvertError) as info:
        parse_input_spec(text)
    assert fragment in str(info.value)
    assert info.value.next_step  # every error says what to do next


def test_duplicate_input_names_are_refused():
    with pytest.raises(ConvertError, match="more than once"):
        parse_input_specs(["x:float32[B]", "x:float32[B]"])


def test_dim_sizes():
    assert parse_dim_sizes(["B=2,1,8"]) == {"B": (2, 1, 8)}
    for bad in ("B", "B=", "B=0", "=3", "B=x"):
        with pytest.raises(ConvertError):
            parse_dim_sizes([bad])


def test_shape_ranges():
    assert parse_shape_ranges(["B=1..8..32,S=16..128..512"]) == {"B": (1, 8, 32), "S": (16, 128, 512)}
    assert parse_shape_ranges(["B=1..4", "T=3..3..3"]) == {"B": (1, 4, 4), "T": (3, 3, 3)}
    for bad in ("B=1..8..4", "B=0..1..2", "B=1..x..3", "B", "B=1", "1B=1..2..3", "B=1..2..3..4"):
        with pytest.raises(ConvertError, match="cannot read the shape range"):
            parse_shape_ranges([bad])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_any_text_parses_or_gives_a_clear_error(text):
    try:
        spec = parse_input_spec(text)
    except ConvertError as exc:
        assert str(exc)
    else:
        assert parse_input_spec(str(spec)) == spec
