"""Tolerances live with the precision, not as magic numbers at call sites.

An element passes when ``|actual - expected| <= atol + rtol * |expected|``. The fp32 defaults sit close to
what ONNX Runtime achieves on CPU for float32 graphs; a user may loosen or tighten them per output, and the
report records which tolerance applied and where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass

from convert.errors import ConvertError

PRECISION_DEFAULTS = {
    "fp32": (1e-4, 1e-3),
    "fp16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    source: str  # e.g. "default fp32" or "--tolerance logits:atol=1e-3"


def default_tolerance(precision: str) -> Tolerance:
    atol, rtol = PRECISION_DEFAULTS.get(precision, PRECISION_DEFAULTS["fp32"])
    return Tolerance(atol, rtol, f"default {precision}")


class TolerancePolicy:
    """Default tolerance per precision, with overrides for all outputs or for one output by name."""

    def __init__(self, overrides: list[str] | tuple[str, ...] = ()):
        self._all: dict[str, float] = {}
        self._per_output: dict[str, dict[str, float]] = {}
        self._texts: dict[str | None, str] = {}
        for text in overrides:
            output, values = _parse_override(text)
            target = self._per_output.setdefault(output, {}) if output else self._all
            target.update(values)
            self._texts[output] = text

    def for_output(self, name: str, precision: str = "fp32") -> Tolerance:
        base = default_tolerance(precision)
        values = {"atol": base.atol, "rtol": base.rtol, **self._all, **self._per_output.get(name, {})}
        if name in self._per_output:
            source = f"--tolerance {self._texts[name]}"
        elif self._all:
            source = f"--tolerance {self._texts[None]}"
        else:
            source = base.source
        return Tolerance(values["atol"], values["rtol"], source)

    def unknown_outputs(self, outputs: tuple[str, ...] | list[str]) -> list[str]:
        return [name for name in self._per_output if name not in outputs]


def _parse_override(text: str) -> tuple[str | None, dict[str, float]]:
    """``atol=1e-3,rtol=1e-2`` for every output, or ``logits:atol=1e-3`` for one."""
    output = None
    body = text
    if ":" in text:
        output, _, body = text.rpartition(":")
        output = output.strip() or None
    values: dict[str, float] = {}
    for item in body.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip()
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not sep or key not in ("atol", "rtol") or not value >= 0:
            raise ConvertError(
                f"cannot read the tolerance {text!r}",
                "Write it as atol=1e-3,rtol=1e-2 for every output, or OUTPUT:atol=1e-3 for one output.",
            )
        values[key] = value
    return output, values
