"""A fake check, registered from outside the package (through $CONVERT_PLUGINS, as any plugin module): a test of
how far one check registration reaches (the validation loop, the report, its four renderings, the stage cache), named
as a fake.

``worst-error`` reads the comparison's checks of an ONNX artifact and records its largest error (the ``WorstError``
detail). ``RUNS`` counts the times it ran in this process: a detail the cache gave back was not measured again. Nothing
else in the tool is edited for it."""

from __future__ import annotations

from typing import ClassVar, Literal

from convert.checks.base import Run, Subject
from convert.registry import CORE_EXTRA, REGISTRY, CheckSpec
from convert.reports.details import ArtifactDetail

RUNS: list[str] = []

SPEC = CheckSpec(
    name="worst-error",
    target=f"{__name__}:worst_error",
    formats=("onnx",),
    phase="validate",
    detail=f"{__name__}:WorstError",
    cacheable=True,
    packages=(),
    extra=CORE_EXTRA,
)


class WorstError(ArtifactDetail):
    """The largest error of any output the comparison measured, and where."""

    title: ClassVar[str] = "worst error"
    kind: Literal["worst-error"] = "worst-error"
    output: str = ""
    check: str = ""
    max_abs_error: float = 0.0

    def describe(self) -> str:
        return f"fake worst error {self.max_abs_error:.3g} at output '{self.output}' ({self.check})"


def worst_error(run: Run, subject: Subject) -> None:
    RUNS.append(subject.key)
    measured = [
        (output.max_abs_error, output.name, f"{check.runtime} on {check.device} at {check.shape}")
        for check in subject.record.checks
        for output in check.outputs
        if output.max_abs_error is not None
    ]
    if measured:
        error, output, where = max(measured)
        subject.record.add(WorstError(output=output, check=where, max_abs_error=error))


REGISTRY.add(SPEC)
