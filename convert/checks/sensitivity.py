"""Which nodes cost a reduced-precision ONNX artifact its accuracy.

Each candidate node (a convolution or matrix product the pass reduces) is measured alone: the pass is run again with
every other node kept in FP32 (the same ``--keep-fp32`` mechanism a user has), and the worst output's error against
the source on one feed is that node's sensitivity. The most sensitive are then kept in FP32, one more at a time, until
the outputs meet the accuracy budget; the report names them and the option that builds that artifact.
"""

from __future__ import annotations

import glob
import shutil
import tempfile
import time
from dataclasses import dataclass, replace
from typing import Any

from convert.backends.onnx import module_path
from convert.checks.base import Run, Subject, diagnosis, failing_case
from convert.reports import model as rm
from convert.validators.compare import compare_outputs, merge_results
from convert.validators.tolerances import TolerancePolicy
from convert.worker.protocol import WorkerState, worker_job

REDUCED_OPS = ("Conv", "ConvTranspose", "MatMul", "Gemm")
MAX_CANDIDATES = 48
MAX_KEPT = 8
PASSES = ("int8", "int8-dynamic", "fp16")  # ONNX Runtime's passes, which take --keep-fp32 by node name


def sensitivity(run: Run, subject: Subject) -> None:
    """For a reduced-precision artifact a pass made that failed its budget: its most sensitive nodes, and which to keep
    in FP32. Not where accuracy control has already ranked them."""
    from convert.registry import REGISTRY

    record, name = subject.record, subject.record.optimization
    control = record.detail(rm.AccuracyControl)
    if subject.made_by is None or not name or (control is not None and control.status in ("met", "not-met")):
        return
    failing = failing_case(run, record)
    if failing is None or REGISTRY.get("optimizer", name).load().precision == "fp32":  # a pass that reduces no precision
        return
    if name not in PASSES:
        record.add(
            rm.Sensitivity(
                status="skipped", optimization=name, reason=f"sensitivity is measured for ONNX Runtime's passes ({', '.join(PASSES)})"
            )
        )
        return
    case = failing[1]
    cases = [case, *(c for c in run.cases if c is not case and c.generation is None)]  # the failing case ranks them
    found = diagnosis(
        run,
        ("sensitivity", name),
        lambda why: rm.Sensitivity(status="skipped", optimization=name, reason=f"sensitivity failed: {why}"),
        RankSensitivity(name, subject.made_by, [pair for c in cases for pair in zip(c.feeds, c.references)], run.policy),
    )
    record.add(found)


def rank(optimizer, job, samples: list[tuple[dict, dict]], policy: TolerancePolicy) -> rm.Sensitivity:
    """Measure every candidate alone on the first (feed, reference) sample, then keep the most sensitive in FP32 until
    the budget holds on every sample: the outputs' budget, or with ``job.task`` the task metric's drop on its labelled
    samples."""
    import onnx

    started = time.perf_counter()
    found = rm.Sensitivity(status="not-found", optimization=optimizer.name)
    graph = onnx.load(str(job.base.path), load_external_data=False).graph
    nodes = [node for node in graph.node if node.op_type in REDUCED_OPS and node.name]
    found.candidates = len(nodes)
    every = [node.name for node in graph.node if node.name]
    rows = []
    with tempfile.TemporaryDirectory(dir=job.folder) as scratch:
        for node in nodes[:MAX_CANDIDATES]:
            kept = [name for name in every if name != node.name]
            outputs = _compared(optimizer, job, kept, scratch, samples[:1], policy)
            if outputs is None:
                continue
            worst = max(outputs, key=lambda o: o.rel_rms_error or 0.0)
            rows.append(
                rm.SensitivityRow(
                    node=node.name,
                    op_type=node.op_type,
                    layer=module_path(node),
                    rel_rms_error=worst.rel_rms_error,
                    cosine_similarity=min((o.cosine_similarity for o in outputs if o.cosine_similarity is not None), default=None),
                )
            )
        rows.sort(key=lambda row: -(row.rel_rms_error or 0.0))
        found.rows = rows
        for count in range(1, min(MAX_KEPT, len(rows)) + 1):
            kept = [row.node for row in rows[:count]]
            if job.task is not None:
                actual = _run_with(optimizer, job, kept, scratch, job.task.feeds)
                found.drop = job.task.drop(actual, job.task.labels) if actual is not None else None
                holds = found.drop is not None and found.drop <= job.task.max_drop
            else:
                outputs = _compared(optimizer, job, kept, scratch, samples, policy)
                holds = outputs is not None and all(o.status == "passed" for o in outputs)
            if holds:
                found.status, found.keep = "found", kept
                found.outputs = [o.metrics() for o in outputs] if job.task is None else []
                found.keep_layers = [row.layer for row in rows[:count]]
                found.suggestion = f"--optimize {optimizer.name} --keep-fp32 {','.join(glob.escape(name) for name in kept)}"
                break
    if found.status != "found":
        found.reason = f"keeping the {min(MAX_KEPT, len(rows))} most sensitive of {len(nodes)} nodes in FP32 did not meet it"
    found.seconds = round(time.perf_counter() - started, 3)
    return found


def _run_with(optimizer, job, kept: list[str], scratch: str, feeds: list[dict]) -> list[dict] | None:
    """The pass run again with ``kept`` in FP32, and its outputs for ``feeds`` (None where the pass failed)."""
    from convert.runtimes.onnxruntime import OnnxRuntimeRunner

    folder = tempfile.mkdtemp(dir=scratch)
    try:
        outcome = optimizer.export(replace(job, folder=type(job.folder)(folder), keep_fp32=tuple(glob.escape(n) for n in kept)))
        if outcome.artifact is None:
            return None
        runner = OnnxRuntimeRunner(outcome.artifact, "cpu")
        runner.activate()
        try:
            return [runner.infer(feed) for feed in feeds]
        finally:
            runner.deactivate()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _compared(optimizer, job, kept: list[str], scratch: str, samples: list[tuple[dict, dict]], policy: TolerancePolicy):
    """The pass's outputs with ``kept`` in FP32 on every sample compared with the source's, merged (None where it failed)."""
    actual = _run_with(optimizer, job, kept, scratch, [feed for feed, _ in samples])
    if actual is None:
        return None
    from convert.validation import named_as_the_source

    return merge_results(
        [
            compare_outputs(reference, named_as_the_source(outputs, reference, tuple(feed)), policy, optimizer.precision)
            for (feed, reference), outputs in zip(samples, actual)
        ]
    )


@worker_job
@dataclass(frozen=True)
class RankSensitivity:
    """The nodes that cost the pass ``optimizer`` its accuracy, and which to keep in FP32 (``rank``)."""

    optimizer: str
    job: Any  # the pass's OptimizeJob
    samples: list[tuple[dict, dict]]
    policy: TolerancePolicy

    def run(self, state: WorkerState) -> rm.Sensitivity:
        from convert.registry import REGISTRY

        return rank(REGISTRY.get("optimizer", self.optimizer).load()(), replace(self.job, source=state.source), self.samples, self.policy)
