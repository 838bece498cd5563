"""The jobs on the loaded source and on the registered makers: load the source, choose its outputs, its reference
outputs, task metrics and greedy decoding, an export, an optimization, a benchmark session, a composite's assembled
check. The analyses' jobs live beside their code (convert/validation.py, chain.py, localize.py, precision.py,
sensitivity.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from convert.errors import ConvertError
from convert.specs import SourceSignature
from convert.worker.protocol import WorkerState, traced_key, worker_job

if TYPE_CHECKING:
    import numpy as np

    from convert.exporters.base import ExportJob, ExportOutcome
    from convert.optimizers.base import OptimizeJob
    from convert.reports import model as rm
    from convert.sources.base import SourceInfo
    from convert.sources.request import SourceRequest


@dataclass
class SourceSummary:
    """What the pipeline needs to know about the loaded source model, sent back from the worker."""

    info: SourceInfo
    signature: SourceSignature
    export_sizes: dict[str, int]
    dim_ranges: dict[str, tuple[int, int | None]]
    example_feed: dict[str, np.ndarray] | None
    generation: Any = None  # a decoder's CacheLayout (convert.validators.generation), checked over generation
    precision: str = "fp32"  # what the source's floating weights compute in: its exports' precision

    def with_outputs(self, names: tuple[str, ...]) -> None:
        self.signature = SourceSignature(inputs=self.signature.inputs, outputs=names)


@worker_job
@dataclass(frozen=True)
class LoadSource:
    """Load the source model the request names; it stays loaded for the worker's later jobs."""

    request: SourceRequest
    outlives_job: ClassVar[bool] = True

    def run(self, state: WorkerState) -> SourceSummary:
        from convert.sources.resolve import resolve_source

        state.source = source = resolve_source(self.request)
        return SourceSummary(
            info=source.info,
            signature=source.signature,
            export_sizes=dict(source.export_sizes or {}),
            dim_ranges=dict(getattr(source, "dim_ranges", {}) or {}),
            example_feed=source.example_feed,
            generation=source.generation,
            precision=source.precision,
        )


@worker_job
@dataclass(frozen=True)
class SelectOutputs:
    """The source's outputs the run compares, by name."""

    names: tuple[str, ...]

    def run(self, state: WorkerState) -> None:
        state.source.with_outputs(self.names)


@worker_job
@dataclass(frozen=True)
class ReferenceOutputs:
    """The source's outputs for each feed, up to the first that fails, and that failure ("" when none did)."""

    feeds: list[dict[str, np.ndarray]]

    def run(self, state: WorkerState) -> tuple[list[dict[str, np.ndarray]], str]:
        from convert.text import first_line

        outputs = []
        for feed in self.feeds:
            try:
                outputs.append(state.source.run(feed))
            except ConvertError:
                raise
            except Exception as exc:
                return outputs, f"{type(exc).__name__}: {first_line(str(exc))}"
        return outputs, ""


@worker_job
@dataclass(frozen=True)
class TaskScores:
    """The scored output and the task metrics of outputs on labelled samples (a --metric is imported here)."""

    outputs: list[dict[str, np.ndarray]]
    labels: list[np.ndarray]
    metric: str | None

    def run(self, state: WorkerState):
        from convert.validation import user_metric
        from convert.validators.task_metrics import TaskMetricError, task_scores

        try:
            return task_scores(self.outputs, self.labels, user_metric(self.metric))
        except TaskMetricError as exc:
            raise ConvertError(
                f"cannot score the task on the labelled --data: {exc}", "Check the labels' shape against the model's outputs."
            ) from None
        except ConvertError:
            raise
        except Exception as exc:
            if self.metric is None:
                raise
            raise ConvertError(
                f"the metric {self.metric} raised {type(exc).__name__}: {exc}", "It is called as function(outputs, labels): fix it."
            ) from exc


@worker_job
@dataclass(frozen=True)
class GreedyDecoding:
    """The source's greedy decoding of ``steps`` new tokens from its seeded prompts (its cache fed back)."""

    seed: int
    steps: int

    def run(self, state: WorkerState):
        from convert.validators.generation import decode

        prompts, context = state.source.generation_inputs(self.seed)
        return decode(state.source.run, state.source.generation, prompts, self.steps, context=context)


@worker_job
@dataclass(frozen=True)
class AssembledCheck:
    """A composite's artifacts (component -> path) run together against the library's assembled model from ``folder``:
    ``target`` is the composite's check (convert/assembled/), called with no source loaded."""

    target: str
    folder: Path
    artifacts: dict[str, Path]
    precision: str
    seed: int
    trust_code: bool

    def run(self, state: WorkerState) -> rm.AssembledCheck:
        from convert.registry import load_target

        return load_target(self.target)(self.folder, self.artifacts, precision=self.precision, seed=self.seed, trust_code=self.trust_code)


@worker_job
@dataclass(frozen=True)
class Export:
    """The registered exporter ``name`` run on the loaded source; the program it captured is kept for the chain and
    localisation."""

    name: str
    job: ExportJob

    def run(self, state: WorkerState) -> ExportOutcome:
        from convert.registry import REGISTRY

        made = REGISTRY.get("exporter", self.name).load()()
        outcome = made.export(replace(self.job, source=state.source))
        if outcome.artifact is not None and made.captured is not None:
            state.captured[traced_key(self.name, outcome.artifact.strategy, self.job)] = made.captured
        return outcome


@worker_job
@dataclass(frozen=True)
class Optimize:
    """The registered pass ``name`` run on its job's base artifact."""

    name: str
    job: OptimizeJob

    def run(self, state: WorkerState) -> ExportOutcome:
        from convert.registry import REGISTRY

        return REGISTRY.get("optimizer", self.name).load()().export(replace(self.job, source=state.source))


@worker_job
@dataclass(frozen=True)
class BenchmarkSession:
    """Time the source (runtime None) and artifacts (runtime, artifact, device) interleaved (convert/benchmark.py)."""

    entries: list[tuple[str | None, Any, str]]
    plan: Any
    settings: Any
    session: str

    def run(self, state: WorkerState) -> list[rm.Benchmark]:
        from convert.benchmark import Entry, benchmark_session
        from convert.registry import REGISTRY

        resolved = [
            Entry(REGISTRY.get("runtime", runtime).load() if runtime else None, artifact, device)
            for runtime, artifact, device in self.entries
        ]
        return benchmark_session(state.source, resolved, self.plan, self.settings, self.session)
