"""The error each link of an artifact's chain adds, on one sample: source model → the program its exporter captured
(torch.export's program, tf2onnx's frozen graph, the jaxpr traced at the export's symbolic shapes) → the exported
artifact → each optimization. A link is measured by running both of its ends on the same feed and comparing their
outputs as validation does (the tolerance of the link's end), so a chain says which link made the difference its
end-to-end checks saw. The figures judge nothing: the checks judge the artifact.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np

from convert.artifacts import Artifact
from convert.checks.base import Run, Subject, export_job, measured
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.validation import ValidationCase, case_comparison, named_as_the_source, token_outputs
from convert.validators import TolerancePolicy
from convert.validators.compare import compare_outputs
from convert.validators.inputs import ShapeCase
from convert.worker.protocol import WorkerState, traced_key, worker_job


def chain(run: Run, subject: Subject) -> None:
    """Record the error each link of the artifact's chain adds, on the first sample of its first shape check that ran:
    an optimized artifact's base's links, then its pass's. A given artifact has no chain."""
    import time

    record = subject.record
    cases = {c.shape.describe(): c for c in run.cases if c.feeds and c.padding is None}
    ran = next((c for c in record.checks if c.kind == "shape" and c.status in ("passed", "failed") and c.shape in cases), None)
    if record.exporter == "given" or ran is None:
        return
    case = cases[ran.shape]
    by_path = {r.path: r for r in run.report.artifacts if r.path}
    base_record = by_path.get(record.derived_from) if record.derived_from else None
    base = next((a for a in run.artifacts.values() if str(a.path) == record.derived_from), None) if base_record else None
    started = time.perf_counter()
    job = MeasureChain(
        subject.artifact,
        record.exporter,
        record.optimization or record.strategy,
        export_job(run),
        case.feeds[0],
        case.references[0],
        run.policy,
        base,
    )
    found = measured(lambda: run.worker.call(job), lambda why: rm.ChainLinks(links=[_chain_failed(record, why)]))
    before = base_record.detail(rm.ChainLinks) if base_record is not None else None
    found.links = [*(before.links if before is not None else []), *found.links]
    found.shape, found.runtime, found.seconds = ran.shape, ran.runtime, round(time.perf_counter() - started, 3)
    record.add(found)


def _chain_failed(record: rm.ArtifactRecord, reason: str) -> rm.ChainLink:
    kind = "optimization" if record.derived_from else "capture"
    return rm.ChainLink(link=kind, step=record.optimization or record.strategy, compares="", status="skipped", reason=reason)


def measure(artifact: Artifact, step: str, feed: dict, reference: dict, policy: TolerancePolicy, base, traced, kept: dict):
    """The links this artifact adds to its chain (``base``'s are its base's record's): for an artifact made by a pass
    from ``base``, that pass's; for a captured program (.pt2, TorchScript), capture; for any other export, capture and
    conversion, through the program ``traced()`` gives (None, one without ``outputs``, or why not as a string: not
    measured). ``kept`` holds each artifact's outputs on a sample, by digest and the sample's shapes: a base is not run
    again for its passes, nor an artifact its first check ran."""
    from convert.exporters.base import quiet
    from convert.text import first_line

    shapes = _shapes(feed)
    found = rm.ChainLinks()
    outputs = kept.get((artifact.sha256, shapes))
    if outputs is None:
        outputs = outputs_on_cpu(artifact, feed)
        if not isinstance(outputs, str):
            keep_outputs(kept, artifact, feed, outputs)
    if base is not None:
        compares = f"the {base.format} artifact it was made from against this artifact"
        before = kept.get((base.sha256, shapes)) or outputs_on_cpu(base, feed)
        unmeasured = next((ends for ends in (before, outputs) if isinstance(ends, str)), "")
        found.links = [
            skipped("optimization", step, compares, unmeasured)
            if unmeasured
            else link("optimization", step, compares, before, outputs, feed, policy, artifact.precision, artifact.inputs)
        ]
        return found
    if REGISTRY.format(artifact.format).captured_program:
        compares = "the source model against the program the exporter captured (this artifact)"
        found.links = [
            skipped("capture", step, compares, outputs)
            if isinstance(outputs, str)
            else link("capture", step, compares, reference, outputs, feed, policy, artifact.precision, artifact.inputs)
        ]
        return found
    capture = "the source model against the program the exporter captured"
    conversion = f"the captured program against the {artifact.format} artifact"
    found_program = traced()
    program = getattr(found_program, "outputs", None)
    captured = found_program if isinstance(found_program, str) else f"{step} keeps no program of its own that runs apart from the artifact"
    if program is not None:
        try:
            with quiet(io.StringIO()):  # the program's chatter, as when the exporter ran it
                captured = program(feed)
        except Exception as exc:  # noqa: BLE001 - a link that cannot be run is reported, never fails the run
            captured = f"running the captured program failed: {type(exc).__name__}: {first_line(str(exc))}"
    if isinstance(captured, str):
        found.links = [skipped("capture", step, capture, captured), skipped("conversion", step, conversion, captured)]
        return found
    found.links = [
        link("capture", step, capture, reference, captured, feed, policy, artifact.precision, artifact.inputs),
        skipped("conversion", step, conversion, outputs)
        if isinstance(outputs, str)
        else link("conversion", step, conversion, captured, outputs, feed, policy, artifact.precision, artifact.inputs),
    ]
    return found


def keep_outputs(kept: dict, artifact: Artifact, feed: dict, outputs: dict) -> None:
    """Keep an artifact's outputs on one sample, in place of any it had (a sample per artifact)."""
    for stale in [key for key in kept if key[0] == artifact.sha256]:
        del kept[stale]
    kept[(artifact.sha256, _shapes(feed))] = outputs


def _shapes(feed: dict) -> tuple:
    return tuple((name, value.shape) for name, value in feed.items())


def link(kind: str, step: str, compares: str, expected: dict, actual: dict, feed: dict, policy: TolerancePolicy, precision: str, specs=()):
    """One link measured: the worst output's figures, and whether every output is within the tolerance of ``precision``,
    compared as validation compares (token-level outputs at the positions the padding mask of ``specs`` keeps, the atol
    scaled by each output's RMS)."""
    case = ValidationCase(ShapeCase("chain", {}), feeds=[feed], references=[expected])
    shown, stats = case_comparison(case, token_outputs(specs, [case]))
    results = compare_outputs(expected, named_as_the_source(actual, expected, tuple(feed)), policy, precision, shown[0], stats)
    measured = rm.ChainLink(link=kind, step=step, compares=compares, status="measured")
    measured.within_tolerance = all(r.status == "passed" for r in results)
    errors = [(r.max_abs_error, r.name) for r in results if r.max_abs_error is not None]
    if errors:
        measured.max_abs_error, measured.worst_output = max(errors)
    cosines = [r.cosine_similarity for r in results if r.cosine_similarity is not None]
    measured.cosine_similarity = min(cosines) if cosines else None
    missing = [r.reason for r in results if r.status == "failed" and r.max_abs_error is None]
    measured.reason = "; ".join(missing)
    return measured


def skipped(kind: str, step: str, compares: str, reason: str) -> rm.ChainLink:
    return rm.ChainLink(link=kind, step=step, compares=compares, status="skipped", reason=reason)


def outputs_on_cpu(artifact: Artifact, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray] | str:
    """The artifact's outputs for one feed from the first runtime registered for its format that runs on this machine's
    CPU; why not, as a string, where none does."""
    from convert.registry import REGISTRY
    from convert.runtimes.base import runtime_failure

    reasons = []
    for entry in REGISTRY.entries("runtime", formats=artifact.format):
        runner_class = entry.load()
        reason = runner_class.unavailable_reason("cpu")
        if reason:
            reasons.append(f"{entry.name}: {reason}")
            continue
        try:
            with runner_class(artifact, "cpu") as runner:
                return runner.infer(feed)
        except Exception as exc:  # noqa: BLE001 - a link that cannot be run is reported, never fails the run
            return f"{entry.name} failed on the CPU: {runtime_failure(exc)}"
    return "no runtime runs it on this machine's CPU" + (f" ({'; '.join(reasons)})" if reasons else "")


@worker_job
@dataclass(frozen=True)
class MeasureChain:
    """The error each link of the artifact's chain adds on one sample (``measure``): for an exported artifact its capture
    and conversion links, for an optimized one (``base``: the artifact the pass started from) its pass's. Each
    artifact's outputs are kept for the passes made from it (one sample per artifact)."""

    artifact: Artifact
    exporter: str
    strategy: str
    job: Any  # the export's ExportJob, as the exporter traces the source again
    feed: dict
    reference: dict
    policy: TolerancePolicy
    base: Artifact | None = None

    def run(self, state: WorkerState) -> rm.ChainLinks:
        from convert.memory import available_bytes
        from convert.safety import size_of

        def traced():
            """The kept program, or one traced again where that leaves room: a frozen graph holds a copy of the weights."""
            kept = traced_key(self.exporter, self.strategy, self.job) in state.captured
            if not kept and 4 * size_of(self.artifact.files) > available_bytes():
                return "tracing the program again would hold a second copy of the weights, more than a quarter of the memory available"
            return state.traced_program(self.exporter, self.strategy, self.job)

        return measure(self.artifact, self.strategy, self.feed, self.reference, self.policy, self.base, traced, state.chain_outputs)
