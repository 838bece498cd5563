"""What a worker runs: jobs, and the state the jobs of one worker share.

A job is a frozen dataclass, defined beside the code it runs, with one method, ``run(state)``; ``worker_job``
registers its type, and a worker runs registered job types only (a child process is sent the job itself, so nothing
else may reach it). What a job leaves for later jobs (the loaded source, the programs exporters captured, an
artifact's outputs on the chain's sample) lives in the worker's ``WorkerState``, typed, never in module globals.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from convert.sources.base import SourceModel

_JOB_TYPES: set[type] = set()


class Job(Protocol):
    """A job may set ``outlives_job = True`` (a ClassVar): what it leaves behind lives as long as its worker (loading
    the source), and the worker's collector need not walk it again after each later job."""

    def run(self, state: WorkerState) -> Any: ...


def worker_job(cls: type) -> type:
    """Register a job type: a frozen dataclass with a ``run(state)`` method."""
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or not callable(getattr(cls, "run", None)):
        raise TypeError(f"a worker job is a frozen dataclass with run(state); {cls.__qualname__} is not")
    _JOB_TYPES.add(cls)
    return cls


def checked(job: object) -> Job:
    """The job, where its type is a registered job type; a TypeError before anything runs otherwise."""
    if type(job) not in _JOB_TYPES:
        raise TypeError(f"{job!r} is not a registered worker job")
    return job  # type: ignore[return-value]


def job_name(job: object) -> str:
    return type(job).__name__


@dataclass
class WorkerState:
    """What a worker's jobs leave for the next ones."""

    source: SourceModel | None = None  # the loaded source model (its outputs selected by the setup jobs)
    # the source's program as an exporter traced it again, by exporter, strategy and export shape (one at a time: a
    # frozen graph holds a copy of the weights)
    traced: dict[tuple, Any] = field(default_factory=dict)
    # the programs exporters captured while they exported (they share the source's weights), by the same key
    captured: dict[tuple, Any] = field(default_factory=dict)
    # an artifact's outputs on the chain's sample, by its digest and that sample's shapes (convert/checks/chain.py keep_outputs)
    chain_outputs: dict[tuple, dict] = field(default_factory=dict)

    def traced_program(self, exporter: str, strategy: str, job) -> Any:
        """The source's program as the exporter's strategy captured it: the one kept from the export where the exporter
        keeps it, else traced again."""
        from convert.exporters.base import quiet
        from convert.registry import REGISTRY

        key = traced_key(exporter, strategy, job)
        if key in self.captured:
            return self.captured[key]
        with quiet(io.StringIO()):  # the exporter's chatter, as when it exported
            if key not in self.traced:
                self.traced = {key: REGISTRY.get("exporter", exporter).load()().traced(replace(job, source=self.source), strategy)}
        return self.traced[key]


def traced_key(exporter: str, strategy: str, job) -> tuple:
    return (exporter, strategy, tuple((name, value.shape) for name, value in job.feed.items()))
