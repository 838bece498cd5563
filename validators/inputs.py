"""Seeded inputs generated from input specs, inside their value domains, at several shapes.

Every symbolic dim is validated at no fewer than two sizes, and at sizes other than the export's: the
export size, 1, and a larger odd size by default (``--dim`` chooses others).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np

DEFAULT_EXPORT_SIZE = 2
DEFAULT_INT_DOMAIN = (0, 9)


@dataclass(frozen=True)
class ShapeCase:
    """One assignment of sizes to the symbolic dims; ``label`` names it in reports."""

    label: str
    sizes: dict[str, int]

    def describe(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.sizes.items()) or "static"


def plan_shape_cases(symbols: tuple[str, ...], chosen: dict[str, tuple[int, ...]] | None = None,
                     export_sizes: dict[str, int] | None = None,
                     ranges: dict[str, tuple[int, int | None]] | None = None) -> list[ShapeCase]:
    """The export case first, then cases that move every symbol to its other sizes.

    ``chosen`` maps a symbol to (export size, other sizes...) as given with ``--dim``; ``export_sizes``
    are the sizes symbols take in the example inputs; ``ranges`` bound a symbol's sizes (inclusive).
    """
    if not symbols:
        return [ShapeCase("export", {})]
    per_symbol: dict[str, list[int]] = {}
    for symbol in symbols:
        low, high = (ranges or {}).get(symbol, (1, None))
        low = max(low, 1)
        export = (export_sizes or {}).get(symbol)
        if symbol in (chosen or {}):
            sizes = list(chosen[symbol])
            if export is not None and sizes[0] != export:
                sizes.insert(0, export)
        else:
            export = export if export is not None else max(DEFAULT_EXPORT_SIZE, low)
            sizes = [export, 1, 2 * export + 1]
            sizes = [min(max(size, low), high) if high else max(size, low) for size in sizes]
        per_symbol[symbol] = list(dict.fromkeys(sizes))
    count = max(len(v) for v in per_symbol.values())
    cases: list[ShapeCase] = []
    for index in range(count):
        sizes = {s: v[min(index, len(v) - 1)] for s, v in per_symbol.items()}
        if all(c.sizes != sizes for c in cases):
            cases.append(ShapeCase("export" if index == 0 else f"shape{index}", sizes))
    return cases


def _seed(*parts: object) -> int:
    return zlib.crc32("/".join(str(p) for p in parts).encode())


def generate_feed(specs, sizes: dict[str, int], sample: int, seed: int = 0) -> dict[str, np.ndarray]:
    """One sample: an array per input spec, drawn within its domain, deterministic in (seed, shape, sample)."""
    feed = {}
    for spec in specs:
        rng = np.random.default_rng(_seed(seed, spec.name, sorted(sizes.items()), sample))
        shape = spec.shape(sizes)
        if spec.dtype == "bool":
            feed[spec.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif spec.is_integer:
            low, high = (spec.low, spec.high) if spec.low is not None else DEFAULT_INT_DOMAIN
            feed[spec.name] = rng.integers(int(low), int(high), size=shape, endpoint=True).astype(spec.dtype)
        else:
            if spec.low is not None:
                values = rng.uniform(spec.low, spec.high, size=shape)
            else:
                values = rng.standard_normal(size=shape)
            dtype = np.float32 if spec.dtype == "bfloat16" else spec.dtype
            feed[spec.name] = np.asarray(values, dtype=dtype)
    return feed
