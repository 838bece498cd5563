"""Exporter protocol: strategies tried in order, each returning a recorded attempt instead of raising."""

from __future__ import annotations

import abc
import contextlib
import io
import logging
import re
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from convert.artifacts import Artifact
from convert.errors import ConvertError
from convert.registry import REGISTRY, FromSpec
from convert.reports import model as rm
from convert.safety import no_space_error
from convert.sources.base import SourceModel

MAX_ERROR_CHARS = 4000


class Attempt(rm.Attempt):
    """One strategy's try, as the report records it (convert.reports.model.Attempt: the report takes these as they are),
    with what the strategy printed (``log``: kept in the stage cache, never written to the report). Its fields may be
    given in order, as positional arguments; its seconds are kept to the millisecond, as the report shows them."""

    log: str = Field("", exclude=True, description="what the strategy printed (its last MAX_ERROR_CHARS characters)")

    def __init__(self, strategy: str, status: str, seconds: float, error: str = "", log: str = "", note: str = ""):
        super().__init__(strategy=strategy, status=status, seconds=seconds, error=error, log=log, note=note)

    @field_validator("seconds")
    @classmethod
    def _to_the_millisecond(cls, seconds: float) -> float:
        return round(seconds, 3)


@dataclass
class ExportJob:
    source: SourceModel | None  # None where the pipeline builds the job: the worker process fills in its loaded model
    feed: dict[str, np.ndarray]  # example inputs at the export shape
    folder: Path  # the staging folder to write into
    stem: str  # file name stem of the artifact
    opset: int | None = None
    dim_ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)


@dataclass
class ExportOutcome:
    artifact: Artifact | None
    attempts: list[Attempt]

    @property
    def primary_error(self) -> str:
        return self.attempts[0].error if self.attempts else ""


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")  # torch.onnx colours parts of its error messages


def describe_exception(exc: BaseException) -> str:
    text = ANSI_ESCAPE.sub("", f"{type(exc).__name__}: {exc}").strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " [...]"


@contextlib.contextmanager
def quiet(log: io.StringIO) -> Iterator[None]:
    """Capture the chatter exporters print (progress lines, tracer warnings) into the attempt's log."""
    loggers = [
        logging.getLogger(name)
        for name in ("torch.onnx", "torch.export", "torch._export", "torch.fx", "tensorflow", "absl", "tf2onnx", "jax2onnx", "onnx_ir")
    ]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            warnings.simplefilter("always")
            yield
        for warning in caught:
            log.write(f"{warning.category.__name__}: {warning.message}\n")
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


class Exporter(abc.ABC):
    """Turns a source model into one artifact of ``format``; subclasses list their strategies in order."""

    # read from the class's registered spec (convert/exporters/__init__.py): declared once, there
    name = FromSpec()
    format = FromSpec()

    @classmethod
    def artifact_suffix(cls) -> str:
        """How its artifact's name ends: the format's suffix (an optimizer's own, where each pass names its artifact)."""
        return REGISTRY.format(cls.format).suffix

    @abc.abstractmethod
    def strategies(self, job: ExportJob) -> list[tuple[str, Callable[[Path], Artifact]]]:
        """(strategy name, function that writes the artifact at the given path) in the order to try."""

    def traced(self, job: ExportJob, strategy: str):
        """The program the named strategy converted, able to give the values of its intermediate tensors under the
        names the artifact's graph keeps (``method``; ``names(graph)``: the graph's values it has, with their source-side
        layers; ``values(feed, names, budget_bytes)``: see convert/localize.py); None where its artifacts keep no such
        names."""
        return None

    captured = None  # the program the strategy that wrote the artifact captured, where it keeps one (see traced)

    def export(self, job: ExportJob) -> ExportOutcome:
        attempts: list[Attempt] = []
        for strategy, run in self.strategies(job):
            self.captured = None
            path = job.folder / f"{job.stem}{self.artifact_suffix()}"
            log = io.StringIO()
            started = time.perf_counter()
            try:
                with quiet(log):
                    artifact = run(path)
            except ConvertError:
                raise
            except Exception as exc:  # a failed strategy is recorded, and the next one is tried
                _remove_partial(path)
                full = no_space_error(exc, job.folder.parent)
                if full is not None:  # no other strategy can write either
                    raise full from exc
                log.write(traceback.format_exc())
                attempts.append(
                    Attempt(strategy, "failed", time.perf_counter() - started, describe_exception(exc), log.getvalue()[-MAX_ERROR_CHARS:])
                )
                continue
            artifact.exporter, artifact.strategy = self.name, strategy
            artifact.precision = job.source.precision
            artifact.inputs = artifact.inputs or job.source.signature.inputs
            artifact.output_names = artifact.output_names or job.source.signature.outputs
            attempts.append(
                Attempt(
                    strategy, "ok", time.perf_counter() - started, log=log.getvalue()[-MAX_ERROR_CHARS:], note="; ".join(artifact.notes)
                )
            )
            return ExportOutcome(artifact, attempts)
        return ExportOutcome(None, attempts)


def _remove_partial(path: Path) -> None:
    """Remove what a failed strategy left: the artifact and files named after it (e.g. model.onnx.data)."""
    for leftover in path.parent.glob(f"{path.name}*"):
        if leftover.is_file():
            leftover.unlink()
