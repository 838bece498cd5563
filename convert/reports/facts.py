"""The facts and sentences every rendering of a report derives from it, each computed once here.

The console, Markdown, HTML and JUnit renderings format these their own way (emoji, colour, badges, testcases), but
whether an artifact is a candidate --optimize auto did not choose, what the verdict is, why an artifact has no checks,
the source's p50 that speed-ups are measured against and the like are facts of the report, and all four must agree
on them. Pure functions of the report: they read no file, clock or environment.

A fact that belongs to one model class is a method there instead (``PackageRecord.describe``, ``Verdict.summary``,
``Benchmark.spread``, the details' ``describe`` and ``diagnosis`` in convert/reports/details.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from convert.reports.model import (
    ArtifactRecord,
    AutoCandidate,
    BaselineDelta,
    Benchmark,
    BudgetResult,
    Check,
    Report,
    Stage,
    Unbuilt,
    Verdict,
)
from convert.text import first_line
from convert.timing import UNSTABLE_WIDTH

NOT_CHOSEN = " (auto candidate, not chosen)"
STATUSES = ("passed", "failed", "skipped")


def not_chosen(report: Report, artifact: ArtifactRecord) -> bool:
    """A candidate of --optimize auto that was not chosen: listed, but its failures do not fail the run."""
    return artifact.candidate and artifact.key != (report.auto.chosen if report.auto else None)


def label(report: Report, artifact: ArtifactRecord) -> str:
    """How a rendering names an artifact: its key, marked " (auto candidate, not chosen)" where it was not chosen."""
    return artifact.key + NOT_CHOSEN * not_chosen(report, artifact)


@dataclass(frozen=True)
class Outcome:
    """The verdict a rendering leads with: the gate's decision on a gated report, else whether the run passed."""

    word: Literal["PROMOTE", "REJECT", "PASSED", "PASSED WITH GAPS", "FAILED"]
    good: bool  # PASSED WITH GAPS is not: a requested artifact that is missing never reads as green
    interrupted: bool = False  # a run (not a gate) that was interrupted
    unbuilt: tuple[Unbuilt, ...] = ()  # a run's: what it was asked for and did not build

    @property
    def status(self) -> str:
        """The word as a machine reads it: promote, reject, passed, passed_with_gaps or failed."""
        return self.word.lower().replace(" ", "_")

    @property
    def not_built(self) -> str:
        """What the verdict line adds: "requested but not built: trt:fp16 (TensorRT is not installed: …)", every
        unbuilt artifact with the first line of its reason; "" where everything asked for was built."""
        if not self.unbuilt:
            return ""
        return "requested but not built: " + "; ".join(f"{u.artifact} ({first_line(u.reason)})" for u in self.unbuilt)

    @property
    def not_built_names(self) -> str:
        """The same without the reasons, for a rendering that has just shown each one: "requested but not built: trt"."""
        return "requested but not built: " + ", ".join(u.artifact for u in self.unbuilt) if self.unbuilt else ""

    @property
    def title(self) -> str:
        """The word a banner shows: INTERRUPTED for an interrupted run, the word otherwise."""
        return "INTERRUPTED" if self.interrupted else self.word


def gate_outcome(verdict: Verdict) -> Outcome:
    """The gate's decision: PROMOTE or REJECT."""
    return Outcome("PROMOTE" if verdict.promoted else "REJECT", verdict.promoted)


def run_outcome(report: Report) -> Outcome:
    """The run's own verdict, whatever a gate made of it: PASSED, PASSED WITH GAPS (it passed without an artifact it was
    asked for, which --unbuilt warn accepted) or FAILED; whether it was interrupted, and what it did not build."""
    word = ("PASSED WITH GAPS" if report.unbuilt else "PASSED") if report.passed else "FAILED"
    return Outcome(word, word == "PASSED", report.interrupted, tuple(report.unbuilt))


def unbuilt(report: Report, artifact: ArtifactRecord) -> Unbuilt | None:
    """The report's record of an artifact it was asked for and did not build; None for one built, given or a candidate."""
    if artifact.candidate or artifact.given:
        return None
    return next((record for record in report.unbuilt if record.artifact == artifact.key), None)


def outcome(report: Report) -> Outcome:
    """The report's verdict: the gate's when it has one, else the run's."""
    return gate_outcome(report.gate) if report.gate is not None else run_outcome(report)


def source_name(report: Report) -> str:
    """What the model is called in a heading or title: its file's name, else its description, else "model"."""
    source = report.source
    return Path(source.path).name if source.path else source.description or "model"


def status_counts(statuses: list[str]) -> dict[str, int]:
    """How many of each of passed, failed and skipped, in that order (zeros included)."""
    return {status: statuses.count(status) for status in STATUSES}


def place(check: Check) -> str:
    """Where a check ran: "RUNTIME on DEVICE at SHAPE"."""
    return f"{check.runtime} on {check.device} at {check.shape}"


def where(measured: BudgetResult | BaselineDelta) -> str:
    """Which output, runtime, device and shape a gate measurement is of, e.g. "output 'y', onnxruntime on cpu at B=1";
    "" where it is of the whole artifact (its size)."""
    at = " on ".join(filter(None, (measured.runtime, measured.device)))
    shape = getattr(measured, "shape", "")
    at += f" at {shape}" if shape else ""
    return ", ".join(filter(None, (f"output '{measured.output}'" if measured.output else "", at)))


def failed_checks(artifact: ArtifactRecord) -> list[Check]:
    """The artifact's failed checks in report order: the first is the one a failure message names."""
    return [check for check in artifact.checks if check.status == "failed"]


def check_errors(checks: list[Check]) -> tuple[float | None, float | None]:
    """The largest absolute error and the lowest cosine of some checks, over their outputs and, for a generation check,
    its logits over the decoding; None where none was measured."""
    worst = worst_error(checks)
    cosines = [o.cosine_similarity for c in checks for o in c.outputs if o.cosine_similarity is not None]
    cosines += [c.generation.min_cosine for c in checks if c.generation is not None]
    return worst[0] if worst else None, min(cosines, default=None)


def worst_error(checks: list[Check]) -> tuple[float, str] | None:
    """The largest absolute error of some checks and the output it is on (a generation check's is on its "logits",
    over the decoding); None where none was measured."""
    errors = [(o.max_abs_error, o.name) for c in checks for o in c.outputs if o.max_abs_error is not None]
    errors += [(c.generation.max_abs_logits, "logits") for c in checks if c.generation is not None]
    return max(errors, key=lambda error: error[0], default=None)


@dataclass(frozen=True)
class Unchecked:
    """Why an artifact has no checks: its pass was ``skipped`` (it cannot run here), it was ``not built`` (its export or
    pass failed), or it was ``not validated`` (its validate stage failed, or no check ran)."""

    status: Literal["skipped", "not built", "not validated"]
    reason: str
    stage: Stage | None = None  # the stage that says so: the build stage skipped or failed, or the validate stage failed


def unchecked(report: Report, artifact: ArtifactRecord) -> Unchecked:
    """Why an artifact without checks has none (see ``Unchecked``)."""
    build = report.stage(artifact.build_kind, artifact.key) if artifact.build_kind else None
    if build is not None and build.status == "skipped":
        return Unchecked("skipped", build.reason, build)
    if build is not None and build.status == "failed":
        return Unchecked("not built", build.error, build)
    validate = report.stage("validate", artifact.key)
    if validate is not None and validate.status == "failed":
        return Unchecked("not validated", validate.error, validate)
    return Unchecked("not validated", "no check was run on this artifact")


def benchmark_rows(report: Report) -> list[tuple[str, Benchmark]]:
    """Every benchmark with the name of what it measured: the source's ("source") first, then each artifact's by key."""
    return [("source", b) for b in report.source_benchmark] + [(a.key, b) for a in report.artifacts for b in a.benchmarks]


def reference_benchmark(report: Report) -> Benchmark | None:
    """The source's benchmark that speed-ups are measured against: its first that measured a p50."""
    return next((b for b in report.source_benchmark if b.status == "ok" and b.latency_ms_p50), None)


def source_p50(report: Report) -> float | None:
    """The p50 latency speed-ups are measured against (see ``reference_benchmark``)."""
    reference = reference_benchmark(report)
    return reference.latency_ms_p50 if reference else None


def speedup(report: Report, benchmark: Benchmark) -> float | None:
    """How many times faster than the source a benchmark's p50 is; None where either was not measured."""
    reference, p50 = source_p50(report), benchmark.latency_ms_p50
    return reference / p50 if reference and p50 else None


def generates(report: Report) -> bool:
    """Whether any benchmark of the report measured a decoder's prefill or decode: only then do the renderings show them."""
    return any(b.prefill_ms_p50 is not None or b.decode_tokens_per_s is not None for _, b in benchmark_rows(report))


def decode_speedup(report: Report, benchmark: Benchmark) -> float | None:
    """How many times the source's decode tokens/s a benchmark's is; None where either was not measured."""
    reference = next((b.decode_tokens_per_s for b in report.source_benchmark if b.status == "ok" and b.decode_tokens_per_s), None)
    return benchmark.decode_tokens_per_s / reference if reference and benchmark.decode_tokens_per_s else None


def times(ratio: float | None) -> str | None:
    """A speed-up as shown, e.g. "2.50x"; None where there is none."""
    return f"{ratio:.2f}x" if ratio else None


def headline_benchmark(report: Report, artifact: ArtifactRecord) -> Benchmark | None:
    """The benchmark that stands for an artifact where artifacts are compared in one row each: its first that measured a
    p50 on the device of the source's reference figure (so that its speed-up compares like with like), else its first
    that measured one; None where none did."""
    reference = reference_benchmark(report)
    measured = [b for b in artifact.benchmarks if b.status == "ok" and b.latency_ms_p50]
    on_reference_device = [b for b in measured if reference is not None and b.device == reference.device]
    return next(iter(on_reference_device or measured), None)


def instability(timed: Benchmark | AutoCandidate) -> str:
    """Why a p50 cannot be ranked against a figure close to it, e.g. "unstable: 95% interval 0.055–0.082 ms spans 34%
    of the p50 (over 20% cannot be ranked)"; "" where it is stable or was not measured."""
    if not timed.unstable or not timed.latency_ms_interval or not timed.latency_ms_p50:
        return ""
    low, high = timed.latency_ms_interval
    return (
        f"unstable: 95% interval {low:.3g}–{high:.3g} ms spans {(high - low) / timed.latency_ms_p50:.0%} of the p50 "
        f"(over {UNSTABLE_WIDTH:.0%} cannot be ranked)"
    )


COMPONENT_HEADER = ["component", "status", "artifacts", "exit code", "report or why it stopped"]
ASSEMBLED_HEADER = ["check", "artifacts", "status", "metrics", "budget", "diverged at", "alone, these fail it", "reason"]


def component_rows(report: Report) -> list[tuple[str, list[str]]]:
    """(status, cells) of each component of a composite, in the order they ran."""
    return [
        (
            "passed" if c.passed else "failed",
            [
                c.name,
                "passed" if c.passed else "failed",
                ", ".join(f"{a.key} {'passed' if a.passed else 'failed'}" for a in c.artifacts),
                "" if c.exit_code is None else str(c.exit_code),
                c.report or c.error,
            ],
        )
        for c in report.components
    ]


def assembled_rows(report: Report) -> list[tuple[str, list[str]]]:
    """(status, cells) of each assembled check of a composite: the components' artifacts run together."""
    return [
        (
            check.status,
            [
                check.name,
                check.artifact,
                check.status,
                ", ".join(f"{name}={value:.4g}" for name, value in check.metrics.items()),
                check.budget,
                check.diverged_at,
                ", ".join(check.blamed),
                check.reason,
            ],
        )
        for check in report.assembled
    ]
