"""The checks of one artifact on one runtime and device: every shape case, every sample, every output."""

from __future__ import annotations

import time

from convert.artifacts import Artifact
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.reports.console import first_line
from validators import TolerancePolicy, compare_outputs, merge_results


def checks_on(artifact: Artifact, runtime: str, device: str, cases, policy: TolerancePolicy) -> list[rm.Check]:
    """One check per shape case; one skipped check with the reason where the runtime cannot run here."""
    from convert.runtimes.base import ArtifactUnsupported, FeedMismatch

    runner_class = REGISTRY.get("runtime", runtime).load()
    reason = runner_class.unavailable_reason(device)
    if reason:
        return [rm.Check(runtime=runtime, device=device, shape="*", status="skipped", reason=reason,
                         device_unsupported=runner_class.never_runs_on(device))]
    runner = runner_class(artifact, device)
    try:
        runner.activate()
    except ArtifactUnsupported as exc:
        return [rm.Check(runtime=runtime, device=device, shape="*", status="skipped", reason=str(exc))]
    except Exception as exc:
        return [rm.Check(runtime=runtime, device=device, shape="*", status="failed",
                         reason=f"cannot load the artifact: {type(exc).__name__}: {exc}")]
    checks = []
    try:
        for case in cases:
            check = rm.Check(runtime=runtime, device=device, shape=case.shape.describe(), status="passed",
                             input_shapes={n: list(a.shape) for n, a in case.feeds[0].items()})
            started = time.perf_counter()
            fixed = artifact.fixed_dims_mismatch({n: a.shape for n, a in case.feeds[0].items()}) if case.feeds else ""
            if case.source_error:
                check.status, check.reason = "skipped", f"the source model itself fails at this shape: {case.source_error}"
            elif fixed:
                check.status, check.reason = "skipped", f"not run at this shape: {fixed}"
            else:
                per_sample = []
                for feed, reference in zip(case.feeds, case.references):
                    try:
                        actual = runner.infer(feed)
                    except FeedMismatch as exc:
                        check.status, check.reason = "failed", f"the artifact does not take these inputs: {exc}"
                        break
                    except Exception as exc:
                        check.status, check.reason = "failed", f"the runtime failed: {type(exc).__name__}: {first_line(str(exc))}"
                        break
                    per_sample.append(compare_outputs(reference, actual, policy, artifact.precision))
                check.samples = len(per_sample)
                if check.status == "passed":
                    check.outputs = [rm.OutputMetrics(**{k: v for k, v in r.__dict__.items() if k in rm.OutputMetrics.model_fields})
                                     for r in merge_results(per_sample)]
                    failing = [o for o in check.outputs if o.status == "failed"]
                    if failing:
                        check.status = "failed"
                        check.reason = "; ".join(f"output '{o.name}': {o.reason}" for o in failing)
            check.seconds = round(time.perf_counter() - started, 3)
            checks.append(check)
    finally:
        runner.deactivate()
    return checks
