"""Input specs and their text syntax: ``name:dtype[dims]{low..high}``.

Examples::

    x:float32[B,3,224,224]
    input_ids:int64[B,S]{0..30521}
    attention_mask:int64[B,S]{0..1}
    scale:float32[]

A dim is a positive integer, a symbol (an identifier such as ``B`` or ``S``), or a sum of symbols (``P+S``: a
decoder's attention mask spans its cache and its new tokens). Symbols are dynamic axes in the exports; inputs that
share a symbol share the axis. The optional value domain is inclusive for
integers and bools (``{0..0}``: all False, ``{1..1}``: all True) and half-open ``[low, high)`` for floats.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from convert.errors import ConvertError

DTYPES = (
    "float32",
    "float16",
    "bfloat16",
    "float64",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
INTEGER_DTYPES = ("int64", "int32", "int16", "int8", "uint8")
# the values each dtype holds: a value domain must lie within them (numpy refuses to draw outside them, or draws inf)
_BOUNDS = {
    "int64": (-(2**63), 2**63 - 1024),  # the largest float below 2**63: a domain is read as floats
    "int32": (-(2**31), 2**31 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int8": (-(2**7), 2**7 - 1),
    "uint8": (0, 255),
    "float16": (-65504.0, 65504.0),
    "bfloat16": (-3.3895313892515355e38, 3.3895313892515355e38),
    "float32": (-3.4028234663852886e38, 3.4028234663852886e38),
    "float64": (-1.7976931348623157e308, 1.7976931348623157e308),
}

_SPEC = re.compile(
    r"^\s*(?P<name>[A-Za-z_][A-Za-z0-9_.\-/]*)\s*:\s*(?P<dtype>[a-z0-9]+)\s*"
    r"\[(?P<dims>[^\]]*)\]\s*(?:\{(?P<domain>[^}]*)\})?\s*$"
)
_SYMBOL = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_DOMAIN = re.compile(rf"^\s*(?P<low>{_NUMBER})\s*\.\.\s*(?P<high>{_NUMBER})\s*$")

SYNTAX_HELP = (
    "An input spec looks like name:dtype[dims]{low..high}, for example "
    '"x:float32[B,3,224,224]" or "input_ids:int64[B,S]{0..30521}"; dtype is one of '
    + ", ".join(DTYPES)
    + "; a dim is a positive integer, a symbol such as B or S, or a sum of symbols such as P+S; the {low..high} value domain is optional."
)

Dim = int | str


@dataclass(frozen=True)
class InputSpec:
    name: str
    dtype: str
    dims: tuple[Dim, ...]
    low: float | None = None
    high: float | None = None
    # where the value domain comes from, for the report ("the model's Rescaling layer"); empty: given, or the default
    domain_source: str = ""
    # what the last axis holds beyond independent values: "boxes" is (x0, y0, x1, y1) with x0 <= x1 and y0 <= y1
    structure: str = ""

    @property
    def symbols(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for dim in self.dims:
            if isinstance(dim, str):
                seen.update(dict.fromkeys(dim_symbols(dim)))
        return tuple(seen)

    @property
    def is_integer(self) -> bool:
        return self.dtype in INTEGER_DTYPES

    def shape(self, sizes: dict[str, int]) -> tuple[int, ...]:
        """The concrete shape with each symbol replaced by its size."""
        return tuple(sum(sizes[s] for s in dim_symbols(d)) if isinstance(d, str) else d for d in self.dims)

    def __str__(self) -> str:
        text = f"{self.name}:{self.dtype}[{','.join(str(d) for d in self.dims)}]"
        if self.low is not None and self.high is not None:
            text += f"{{{_fmt(self.low)}..{_fmt(self.high)}}}"
        return text


@dataclass(frozen=True)
class SourceSignature:
    """What a source model takes and gives: input specs in call order, and output names."""

    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...] = field(default=())

    @property
    def symbols(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for spec in self.inputs:
            for symbol in spec.symbols:
                seen.setdefault(symbol)
        return tuple(seen)


def dim_symbols(dim: str) -> tuple[str, ...]:
    """The symbols a dim names: one, or the terms of a sum (``P+S``)."""
    return tuple(part.strip() for part in dim.split("+"))


def is_sum(dim: Dim) -> bool:
    return isinstance(dim, str) and "+" in dim


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_input_spec(text: str) -> InputSpec:
    """Parse one spec; raise ConvertError naming what is wrong."""
    if not isinstance(text, str):
        raise ConvertError(f"input spec {text!r} is not text", SYNTAX_HELP)
    match = _SPEC.match(text)
    if not match:
        raise ConvertError(f"cannot read the input spec {text!r}", SYNTAX_HELP)
    name, dtype = match["name"], match["dtype"]
    if dtype not in DTYPES:
        raise ConvertError(f"the input spec {text!r} has an unknown dtype '{dtype}'", SYNTAX_HELP)
    dims: list[Dim] = []
    raw_dims = match["dims"].strip()
    for raw in raw_dims.split(",") if raw_dims else []:
        raw = raw.strip()
        if raw.isascii() and raw.isdigit():  # str.isdigit alone takes '²', which int() refuses
            if len(raw) > 18:  # int() refuses over 4300 digits; no tensor has 10**18 elements along an axis
                raise ConvertError(f"the input spec {text!r} has a dim of {len(raw)} digits", "Dims must be below 10**18.")
            if int(raw) < 1:
                raise ConvertError(f"the input spec {text!r} has a dim of size {raw}", "Dims must be at least 1.")
            dims.append(int(raw))
        elif all(_SYMBOL.match(part) for part in dim_symbols(raw)):
            dims.append("+".join(dim_symbols(raw)))
        else:
            raise ConvertError(
                f"the input spec {text!r} has a dim {raw!r} that is neither a positive integer, a symbol nor a sum of symbols", SYNTAX_HELP
            )
    low = high = None
    if match["domain"] is not None:
        domain = _DOMAIN.match(match["domain"])
        if not domain:
            raise ConvertError(f"the input spec {text!r} has a value domain that is not low..high", SYNTAX_HELP)
        low, high = float(domain["low"]), float(domain["high"])
        bounds, form = _BOUNDS.get(dtype), "d" if dtype in INTEGER_DTYPES else ".8g"
        # float('1e400') is inf, which no input is drawn from; nor from a range wider than the largest float
        if bounds is not None and not (bounds[0] <= low and high <= bounds[1] and math.isfinite(high - low)):
            raise ConvertError(
                f"the input spec {text!r} has a value domain outside what {dtype} holds",
                f"Give bounds within {bounds[0]:{form}}..{bounds[1]:{form}}" + ("." if form == "d" else ", with a finite width."),
            )
        if dtype in INTEGER_DTYPES + ("bool",) and not (low.is_integer() and high.is_integer()):
            raise ConvertError(
                f"the input spec {text!r} gives a fractional domain to an integer input", "Use whole numbers, e.g. {0..30521}."
            )
        if high < low or (high == low and dtype not in INTEGER_DTYPES + ("bool",)):
            raise ConvertError(
                f"the input spec {text!r} has an empty value domain",
                "Write the domain as {low..high}: low at most high for integers and bools (both included), "
                "low below high for floats ([low, high)).",
            )
        if dtype == "bool" and not (low >= 0 and high <= 1):
            raise ConvertError(
                f"the input spec {text!r} gives a bool input a domain outside 0..1",
                "Use {0..1} for both values, {0..0} for all False or {1..1} for all True.",
            )
    return InputSpec(name=name, dtype=dtype, dims=tuple(dims), low=low, high=high)


def parse_input_specs(texts: list[str] | tuple[str, ...]) -> tuple[InputSpec, ...]:
    specs = tuple(parse_input_spec(t) for t in texts)
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise ConvertError(f"the input '{duplicates[0]}' is given more than once", "Give each input one --input spec.")
    return specs


def parse_dim_sizes(texts: list[str] | tuple[str, ...]) -> dict[str, tuple[int, ...]]:
    """Parse ``--dim B=2,1,8``: the first size is the export size, the rest are extra validation sizes."""
    sizes: dict[str, tuple[int, ...]] = {}
    for text in texts:
        name, sep, values = text.partition("=")
        name = name.strip()
        try:
            parsed = tuple(int(v) for v in values.split(","))
        except ValueError:
            parsed = ()
        if not sep or not _SYMBOL.match(name) or not parsed or min(parsed) < 1:
            raise ConvertError(
                f"cannot read the dim sizes {text!r}",
                "Write them as SYMBOL=EXPORT_SIZE[,OTHER_SIZE...], for example --dim B=2,1,8.",
            )
        sizes[name] = parsed
    return sizes


def parse_shape_ranges(texts: list[str] | tuple[str, ...]) -> dict[str, tuple[int, int, int]]:
    """Parse ``--shape-range B=1..8..32,S=16..128..512``: each symbol's min..opt..max (or min..max, opt = max)."""
    ranges: dict[str, tuple[int, int, int]] = {}
    for text in texts:
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, sep, values = item.partition("=")
            name = name.strip()
            try:
                parsed = tuple(int(v) for v in values.split(".."))
            except ValueError:
                parsed = ()
            if len(parsed) == 2:
                parsed = (parsed[0], parsed[1], parsed[1])
            if not sep or not _SYMBOL.match(name) or len(parsed) != 3 or parsed[0] < 1 or not parsed[0] <= parsed[1] <= parsed[2]:
                raise ConvertError(
                    f"cannot read the shape range {item!r}",
                    'Write each as SYMBOL=MIN..OPT..MAX with 1 <= MIN <= OPT <= MAX, for example --shape-range "B=1..8..32,S=16..128..512".',
                )
            ranges[name] = parsed
    return ranges
