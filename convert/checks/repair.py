"""Repair of declared output shapes: an artifact whose declared output dims did not hold for the shapes it ran at has
those dims made dynamic in place, where its format can be (``FormatSpec.repair_output_dims``: ONNX), and is compared
again. The repair is kept, and recorded, only where the checks after it show that it took."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from convert.checks.base import Run, Subject
from convert.checks.comparison import measure
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.validation import ValidationCase
from convert.worker.protocol import WorkerState, worker_job


def repair(run: Run, subject: Subject) -> None:
    """Make the output dims whose declarations did not hold dynamic, and compare again. A repair is kept, and recorded,
    only where the checks after it show that it took; otherwise the artifact goes back to its exported bytes, its
    first checks stand, and a note says what was tried."""
    artifact, record = subject.artifact, subject.record
    if not (subject.repair and REGISTRY.format(artifact.format).repair_output_dims):
        return
    repairs = declared_repairs(record.checks, subject.cases)
    if not repairs:
        return
    first, digest = record.checks, (artifact.sha256, artifact.size_bytes)
    exported = artifact.path.with_name(f".{artifact.path.name}.unrepaired")
    shutil.copy2(artifact.path, exported)
    try:
        run.worker.call(RepairOutputDims(artifact.format, artifact.path, {where: name for where, (name, _) in repairs.items()}))
        repaired = measure(run, subject)
    except BaseException:
        os.replace(exported, artifact.path)
        raise
    not_held = repairs_not_held(first, repaired, repairs)
    if not not_held:
        exported.unlink()
        record.checks, record.repairs = repaired, [why for _, why in repairs.values()]
        return
    os.replace(exported, artifact.path)
    artifact.sha256, artifact.size_bytes = record.sha256, record.size_bytes = digest
    dims = ", ".join(f"axis {axis} of '{tensor}' as '{name}'" for (tensor, axis), (name, _) in repairs.items())
    run.report.notes.append(
        f"{subject.key}: its declared output dims were made dynamic ({dims}) and validated again, but the repair did not take "
        f"({not_held[0]}): the artifact is kept as exported, and its checks are those of its first validation"
    )


def declared_repairs(checks: list[rm.Check], cases: list[ValidationCase]) -> dict[tuple[str, int], tuple[str, str]]:
    """(output, axis) → (dim name, what was wrong) for every output axis whose declared shape did not hold: the symbol
    its size followed in every check (and whose export size a fixed declaration froze), else a name of its own."""
    sizes_at = {case.shape.describe(): case.shape.sizes for case in cases}
    export = cases[0].shape.sizes if cases else {}
    seen: dict[tuple[str, int], list[tuple[rm.DeclaredShapeMismatch, dict[str, int]]]] = {}
    for check in checks:
        for mismatch in check.declared_mismatches:
            if mismatch.role == "output" and mismatch.axis is not None:
                seen.setdefault((mismatch.tensor, mismatch.axis), []).append((mismatch, sizes_at.get(check.shape, {})))
    repairs = {}
    for (tensor, axis), found in seen.items():
        declared = found[0][0].declared[axis]
        symbols = [
            s
            for s in export
            if all(m.shape[axis] == sizes.get(s) for m, sizes in found) and (not isinstance(declared, int) or export[s] == declared)
        ]
        name = symbols[0] if len(symbols) == 1 else f"{tensor}_dim{axis}"
        repairs[(tensor, axis)] = (
            name,
            f"{found[0][0].reason}: made axis {axis} of output '{tensor}' the dynamic dim "
            f"'{name}' in the graph's declared outputs (the shapes it declares inside inferred again) and validated again",
        )
    return repairs


def repairs_not_held(before: list[rm.Check], after: list[rm.Check], repairs: dict[tuple[str, int], tuple[str, str]]) -> list[str]:
    """Why the checks after a repair of declared output dims do not show that it took (empty where they do): a check
    that still finds a repaired axis declared otherwise than it ran, or a runtime, device and shape that found one
    before the repair and did not run again after it."""
    found = [m.reason for check in after for m in check.declared_mismatches if (m.tensor, m.axis) in repairs]
    ran = {(c.runtime, c.device, c.shape) for c in after if c.samples}
    for check in before:
        if any((m.tensor, m.axis) in repairs for m in check.declared_mismatches) and (check.runtime, check.device, check.shape) not in ran:
            found.append(f"{check.runtime} on {check.device} did not run again at {check.shape}")
    return found


@worker_job
@dataclass(frozen=True)
class RepairOutputDims:
    """Make the artifact's declared output dims dynamic in place, as its format's spec says how."""

    format: str
    path: Path
    dims: dict[tuple[str, int], str]

    def run(self, state: WorkerState) -> None:
        from convert.registry import load_target

        load_target(REGISTRY.format(self.format).repair_output_dims)(self.path, self.dims)
