"""Precision attestation: what an artifact's matrix products compute in, measured from the artifact and its runtime
(convert/precision.py, as its format's ``FormatSpec.attest`` reads them), judged against the precision its pass claims
by ``--min-precision-share``. A measurement that fails or crashes is ``skipped`` with why: it fails nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from convert.checks.base import Run, Subject, measured
from convert.precision import MatrixProduct, Measured, NotMeasured, accepted, shares
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.worker.protocol import WorkerState, worker_job


def attest(run: Run, subject: Subject) -> None:
    """Record what the artifact's matrix products compute in, measured at the input shapes of its first check that
    passed (else that ran), and judge its pass's precision claim against ``--min-precision-share``."""
    artifact, record = subject.artifact, subject.record
    spec = REGISTRY.format(artifact.format)
    pass_spec = REGISTRY.get("optimizer", record.optimization) if record.optimization else None
    # a pass claims its own precision (an FP32 pass on a BF16 base only changes the format); an export, the source's
    claimed, claim = (pass_spec.precision, pass_spec.claim) if pass_spec else (record.precision, "compute")
    threshold = run.request.min_precision_share
    attestation = rm.PrecisionAttestation(status="skipped", claimed=claimed, claim=claim, threshold=threshold)
    ran = [c for c in record.checks if c.input_shapes and c.kind == "shape"]
    sizing = next((c for c in ran if c.status == "passed"), None) or next((c for c in ran if c.status == "failed"), None)
    if spec.attest is None:
        attestation.reason = f"the tool cannot read the types of {spec.title}'s matrix products"
    elif sizing is None:
        attestation.reason = "no check ran, whose input shapes would size its products"
    else:
        started = time.perf_counter()
        found = measured(lambda: run.worker.call(Attest(artifact.format, artifact.path, sizing.input_shapes)), lambda why: why)
        attestation.seconds = round(time.perf_counter() - started, 3)
        if isinstance(found, Measured):
            _judge(attestation, found, sizing, claimed, claim, threshold)
        else:
            attestation.reason = found
    record.add(attestation)


def _judge(attestation: rm.PrecisionAttestation, found: Measured, sizing: rm.Check, claimed: str, claim: str, threshold: float) -> None:
    products = found.products
    attestation.shape, attestation.measured, attestation.casts = found.sized_at or sizing.shape, found.how, found.casts
    attestation.products, attestation.macs = len(products), sum(p.macs or 0 for p in products)
    attestation.unsized = sum(1 for p in products if p.macs is None)
    attestation.compute, attestation.weights = shares(products, "compute"), shares(products, "weights")
    attestation.runtime, attestation.runtime_compute = found.runtime, found.runtime_shares()
    attestation.runtime_note = found.runtime_reason
    attestation.attested_share = attested_share(claimed, claim, products)
    unsized = unsized_for(claim, products)
    if not products:
        attestation.reason = "it has no matrix products (convolutions, matrix multiplications, Gemm)"
    elif not judged(claimed, threshold) or attestation.attested_share is None:
        attestation.status = "measured"
    elif unsized:
        attestation.status = "measured"
        attestation.reason = f"{unsized} of its products the claim counts could not be sized: the claim is not judged"
    else:
        attestation.status = "passed" if attestation.attested_share >= threshold else "failed"


def attested_share(claimed: str, claim: str, products: list[MatrixProduct]) -> float | None:
    """The share of multiply-accumulates that meets the claim: of all of them for a compute claim, of those with a
    stored weight for a weights claim; None where nothing was counted."""
    found = shares(products, "weights" if claim == "weights" else "compute")
    if not found:
        return None
    return sum(share for kind, share in found.items() if kind in accepted(claimed))


def unsized_for(claim: str, products: list[MatrixProduct]) -> int:
    """How many of the products a claim counts have no known size (a weights claim counts those with a stored weight):
    where some do and others do not, the shares leave them out, and the claim cannot be judged on them."""
    counted = [p for p in products if claim != "weights" or p.weights is not None]
    unsized = sum(1 for p in counted if p.macs is None)
    return unsized if unsized < len(counted) else 0  # none sized: the shares are by layer, and judged so


def judged(claimed: str, threshold: float) -> bool:
    """Whether the claim is judged: a reduced precision, and a threshold above 0."""
    return claimed not in ("fp32", "fp64") and threshold > 0


@worker_job
@dataclass(frozen=True)
class Attest:
    """What the artifact's matrix products compute in (``Measured``), as its format's spec says how; the reason, a
    string, where it cannot be read here."""

    format: str
    path: Path
    input_shapes: dict[str, list[int]]

    def run(self, state: WorkerState) -> Measured | str:
        from convert.registry import load_target

        try:
            return load_target(REGISTRY.format(self.format).attest)(self.path, self.input_shapes)
        except NotMeasured as exc:
            return str(exc)
