"""The error each link of an artifact's chain adds, on one sample: source model → the program its exporter captured
(torch.export's program, tf2onnx's frozen graph, the jaxpr traced at the export's symbolic shapes) → the exported
artifact → each optimization. A link is measured by running both of its ends on the same feed and comparing their
outputs as validation does (the tolerance of the link's end), so a chain says which link made the difference its
end-to-end checks saw. The figures judge nothing: the checks judge the artifact.
"""

from __future__ import annotations

import numpy as np

from convert.artifacts import Artifact
from convert.reports import model as rm
from convert.validation import named_as_the_source
from convert.validators import TolerancePolicy
from convert.validators.compare import compare_outputs

CAPTURED_FORMATS = ("torch_export", "torchscript")  # the artifact is the program its exporter captured


def link(kind: str, step: str, compares: str, expected: dict, actual: dict, feed: dict, policy: TolerancePolicy, precision: str):
    """One link measured: the worst output's figures, and whether every output is within the tolerance of ``precision``."""
    results = compare_outputs(expected, named_as_the_source(actual, expected, tuple(feed)), policy, precision)
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
