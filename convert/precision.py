"""What an artifact's matrix products compute in, as a format's measuring function (``FormatSpec.attest``, in its
backend) reads them: the multiply-accumulates of each matrix product (convolutions, matrix multiplications, Gemm, their
quantized forms) at one validated shape, with the type its arithmetic runs in and the type its weight is stored in;
their shares, and how they read. The backends build these records and the reports write them; the attestation check
(convert/checks/attestation.py) judges a pass's claim on them. It imports nothing of the tool."""

from __future__ import annotations

from dataclasses import dataclass

# the names a measuring function gives types, in the report's spelling
INTEGER_TYPES = ("int8", "int4")


@dataclass
class MatrixProduct:
    """One matrix product of the artifact as measured: its multiply-accumulates at the measured shape (None where its
    shapes are not known), the type its arithmetic runs in, and the type its weight is stored in (None where both its
    operands are computed, e.g. attention's scores)."""

    op: str
    name: str
    macs: int | None
    compute: str
    weights: str | None
    runtime_compute: str | None = None  # where the runtime runs it in another type than the artifact describes


@dataclass
class Measured:
    """What a format's measuring function found: the products, how they were read, and the runtime's view."""

    products: list[MatrixProduct]
    how: str  # what was read: "the ONNX graph"
    casts: int = 0  # Cast nodes the artifact's graph holds
    runtime: str = ""  # "onnxruntime on cpu": whose view runtime_compute is; "" where no runtime was asked
    runtime_reason: str = ""  # why the runtime computes otherwise than the artifact describes, or was not measured
    # the runtime's own products where it rewrites the graph (OpenVINO's compiled model): its view is read from them
    # instead of from each product's runtime_compute
    runtime_products: list[MatrixProduct] | None = None
    # the sizes the products were sized at where they are not the validated case's (a program that stores its own)
    sized_at: str = ""

    def runtime_shares(self) -> dict[str, float]:
        if not self.runtime:
            return {}
        if self.runtime_products is not None:
            return shares(self.runtime_products, "compute")
        return shares(self.products, "runtime_compute")


def shares(products: list[MatrixProduct], of: str) -> dict[str, float]:
    """The share of multiply-accumulates in each type (``of``: "compute", "weights" or "runtime_compute"), largest first;
    weighted by layer where no product's size is known. Products with no value of ``of`` are left out."""
    counted = [(getattr(p, of) or (p.compute if of == "runtime_compute" else None), p.macs) for p in products]
    counted = [(kind, macs) for kind, macs in counted if kind is not None]
    sized = [(kind, macs) for kind, macs in counted if macs]
    weighted = sized if sized else [(kind, 1) for kind, _ in counted]
    total = sum(macs for _, macs in weighted)
    if not total:
        return {}
    summed: dict[str, int] = {}
    for kind, macs in weighted:
        summed[kind] = summed.get(kind, 0) + macs
    return {kind: macs / total for kind, macs in sorted(summed.items(), key=lambda item: -item[1])}


def accepted(claimed: str) -> tuple[str, ...]:
    """The types a claim is met by: any integer type for an integer claim (a weight-only INT4 pass keeps some
    layers in INT8 by design), the float type itself for a float claim."""
    return INTEGER_TYPES if claimed in INTEGER_TYPES else (claimed,)


def percent(share: float) -> str:
    """'96.2%'; a share that is not all or nothing never reads as 100.0% or 0.0%."""
    if 0 < share < 0.001:
        return "<0.1%"
    if 0.999 < share < 1:
        return ">99.9%"
    return f"{share:.1%}"


def figure(found: dict[str, float]) -> str:
    """'int8 96.2%, fp32 3.8%'."""
    return ", ".join(f"{kind} {percent(share)}" for kind, share in found.items()) or "none"


class NotMeasured(Exception):
    """Raised by a measuring function that cannot read this artifact here: its message is the reason (skipped)."""


def macs_text(macs: int) -> str:
    """'1.23 GMACs', '259 kMACs'."""
    for scale, unit in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if macs >= scale:
            return f"{macs / scale:.3g} {unit}MACs"
    return f"{macs} MACs"
