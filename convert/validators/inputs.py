"""Seeded inputs generated from input specs, inside their value domains, at several shapes.

Every symbolic dim is validated at no fewer than two sizes, and at sizes other than the export's: by default the
export size, 1, and a larger odd size (``--dim`` chooses others). Symbols take distinct export sizes and move
independently of each other, so an artifact that is right only when two dims are equal (an export that tied
them, a reshape that reads the wrong axis) fails.
"""

from __future__ import annotations

import itertools
import zlib
from dataclasses import dataclass

import numpy as np

# default export sizes of the 1st, 2nd, 3rd... symbol: small, no two alike, the second (a sequence, often) far
# from the first (a batch, often); symbols past these take the next odd sizes
DEFAULT_EXPORT_SIZES = (2, 7, 5, 3, 11, 13)
DEFAULT_INT_DOMAIN = (0, 9)


@dataclass(frozen=True)
class ShapeCase:
    """One assignment of sizes to the symbolic dims; ``label`` names it in reports."""

    label: str
    sizes: dict[str, int]

    def describe(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.sizes.items()) or ("static" if self.label == "export" else self.label)


def plan_shape_cases(
    symbols: tuple[str, ...],
    chosen: dict[str, tuple[int, ...]] | None = None,
    export_sizes: dict[str, int] | None = None,
    ranges: dict[str, tuple[int, int | None]] | None = None,
    extra: dict[str, tuple[int, ...]] | None = None,
) -> list[ShapeCase]:
    """The export case, every symbol at its smallest size, then each symbol at its largest size while the others
    stay at their smallest (and at any other size ``--dim`` asks for): every symbol moves on its own.

    ``chosen`` maps a symbol to (export size, other sizes...) as given with ``--dim``; ``export_sizes``
    are the sizes symbols take in the example inputs; ``ranges`` bound a symbol's sizes (inclusive); ``extra`` are
    sizes the model asks a symbol to be checked at besides, whatever ``--dim`` says (a decoder's cache past its
    attention window).
    """
    if not symbols:
        return [ShapeCase("export", {})]
    chosen, ranges, extra = chosen or {}, ranges or {}, extra or {}
    exports = _export_sizes(symbols, chosen, export_sizes or {}, ranges)
    per_symbol: dict[str, list[int]] = {}
    for symbol in symbols:
        export = exports[symbol]
        if symbol in chosen:
            sizes = [export, *chosen[symbol]]
        else:
            low, high = ranges.get(symbol, (1, None))
            empty = (0,) if low == 0 else ()  # a dim that may be empty (a decoder's cache before the first step) is checked empty
            sizes = [export, *empty, *(_clamp(size, low, high) for size in (1, 2 * export + 1))]
        per_symbol[symbol] = list(dict.fromkeys([*sizes, *extra.get(symbol, ())]))
    low = {s: min(v) for s, v in per_symbol.items()}
    planned = [("export", exports), ("min", low)]
    planned += [(f"{symbol} max", {**low, symbol: max(sizes)}) for symbol, sizes in per_symbol.items()]
    covered = {(symbol, size) for _, sizes in planned for symbol, size in sizes.items()}
    planned += [
        (f"{symbol}={size}", {**low, symbol: size})
        for symbol, sizes in per_symbol.items()
        for size in sizes
        if (symbol, size) not in covered
    ]
    cases: list[ShapeCase] = []
    for label, sizes in planned:
        if all(c.sizes != sizes for c in cases):
            cases.append(ShapeCase(label, dict(sizes)))
    return cases


def _export_sizes(
    symbols: tuple[str, ...], chosen: dict[str, tuple[int, ...]], given: dict[str, int], ranges: dict[str, tuple[int, int | None]]
) -> dict[str, int]:
    """The example inputs' size of each symbol, else the one ``--dim`` gives first, else a default no other symbol has."""
    exports = {s: given[s] if s in given else chosen[s][0] for s in symbols if s in given or s in chosen}
    for position, symbol in enumerate(symbols):
        if symbol in exports:
            continue
        low, high = ranges.get(symbol, (1, None))
        candidates = itertools.chain(
            DEFAULT_EXPORT_SIZES[position:], DEFAULT_EXPORT_SIZES[:position], itertools.count(DEFAULT_EXPORT_SIZES[-1] + 2, 2)
        )
        exports[symbol] = _clamp(next(size for size in candidates if size not in exports.values()), low, high)
    return {s: exports[s] for s in symbols}


def _clamp(size: int, low: int, high: int | None) -> int:
    size = max(size, low, 1)
    return min(size, high) if high else size


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def is_padding_mask(spec) -> bool:
    """An integer or bool input named like a padding mask (``attention_mask``, ``padding_mask``) with no domain, or 0..1."""
    return (
        (spec.is_integer or spec.dtype == "bool")
        and spec.name.lower().endswith("mask")
        and (spec.low is None or (spec.low, spec.high) == (0, 1))
    )


def _padding_mask(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """A batch padded as a tokenizer pads it: each row along the last axis is ones then zeros, keeps at least one 1, and
    the first row is unpadded. A row of zeros only (every position masked) is something no tokenizer writes, and
    frameworks disagree on it (a softmax over nothing)."""
    length = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    kept = rng.integers(1, length, size=rows, endpoint=True) if length else np.zeros(rows, np.int64)
    kept[:1] = length
    return (np.arange(length)[None, :] < kept[:, None]).reshape(shape)


def ordered_boxes(values: np.ndarray) -> np.ndarray:
    """Boxes along the last axis of 4, as (x0, y0, x1, y1): each corner pair ordered, so x0 <= x1 and y0 <= y1 (a
    layout model's bbox; a box drawn as four independent values is upside down half of the time)."""
    if values.ndim == 0 or values.shape[-1] != 4:
        return values
    x = np.sort(values[..., 0::2], axis=-1)
    y = np.sort(values[..., 1::2], axis=-1)
    return np.stack([x[..., 0], y[..., 0], x[..., 1], y[..., 1]], axis=-1)


def generate_feed(specs, sizes: dict[str, int], sample: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One sample: an array per input spec, drawn within its domain, deterministic in (seed, shape, sample)."""
    feed = {}
    for spec in specs:
        rng = np.random.default_rng(_seed(seed, spec.name, sorted(sizes.items()), sample))
        shape = spec.shape(sizes)
        if is_padding_mask(spec) and len(shape) >= 1:
            feed[spec.name] = _padding_mask(rng, shape).astype(spec.dtype)
        elif spec.dtype == "bool":
            feed[spec.name] = rng.integers(*(int(spec.low), int(spec.high) + 1) if spec.low is not None else (0, 2), size=shape).astype(
                bool
            )
        elif spec.is_integer:
            low, high = (spec.low, spec.high) if spec.low is not None else DEFAULT_INT_DOMAIN
            values = rng.integers(int(low), int(high), size=shape, endpoint=True)
            feed[spec.name] = (ordered_boxes(values) if spec.structure == "boxes" else values).astype(spec.dtype)
        else:
            if spec.low is not None:
                values = rng.uniform(spec.low, spec.high, size=shape)
            else:
                values = rng.standard_normal(size=shape)
            if spec.structure == "boxes":
                values = ordered_boxes(values)
            dtype = np.float32 if spec.dtype == "bfloat16" else spec.dtype
            feed[spec.name] = np.asarray(values, dtype=dtype)
    return feed
