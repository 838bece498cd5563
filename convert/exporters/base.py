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
from convert.text import first_line

MAX_ERROR_CHARS = 4000
PACKAGE = Path(__file__).resolve().parents[1]  # this tool's code: its own exceptions' messages are kept as they are


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
    """The exception as the report keeps it, the library's own reason first: where a library raised it from another
    (torch.onnx wraps the cause, "No ONNX function found for <OpOverload(op='aten.histc')>", in a banner of next steps),
    the first line of the innermost cause leads, and the exception raised follows. This tool's own messages say what
    they mean already, and are kept as they are."""
    text = f"{type(exc).__name__}: {exc}"
    cause = root_cause(exc)
    if cause is not exc and str(cause).strip() and not _raised_here(exc):
        text = f"{type(cause).__name__}: {first_line(str(cause), None)}\n(raised as) {text}"
    text = ANSI_ESCAPE.sub("", text).strip()
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + " [...]"


def _raised_here(exc: BaseException) -> bool:
    """Whether this tool's own code raised the exception (the innermost frame of its traceback is in this package)."""
    frame = exc.__traceback__
    while frame is not None and frame.tb_next is not None:
        frame = frame.tb_next
    return frame is not None and Path(frame.tb_frame.f_code.co_filename).resolve().is_relative_to(PACKAGE)


def root_cause(exc: BaseException) -> BaseException:
    """The innermost exception ``exc`` was raised from (``raise ... from``: a library wrapping its reason on purpose; an
    exception raised while handling another is not the other's doing)."""
    seen = {id(exc)}
    while True:
        cause = exc.__cause__
        if cause is None or id(cause) in seen:
            return exc
        seen.add(id(cause))
        exc = cause


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
        layers; ``values(feed, names, budget_bytes)``: see convert/checks/localize.py); None where its artifacts keep no such
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
                    check_signature(artifact, job)
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


class SignatureMismatch(ValueError):
    """An artifact that does not take the inputs the specs declare: no tolerance makes it right, and the next strategy
    is tried."""


def check_signature(artifact: Artifact, job: ExportJob, taken: dict[str, tuple[str, int]] | None = None) -> None:
    """Raise SignatureMismatch where the written artifact takes other inputs than declared: other names, dtypes or ranks
    (an exporter may make a rank-0 input rank 1). ``taken``: what it takes by name, (dtype, rank), where its exporter
    knows; else read from the file where its format's inputs are cheap to read (ONNX)."""
    if taken is None and artifact.format != "onnx":
        return
    from convert.backends.onnx import graph_inputs

    declared = {spec.name: spec for spec in artifact.inputs or job.source.signature.inputs}
    taken = graph_inputs(artifact.path) if taken is None else taken
    problems = []
    if set(taken) != set(declared):
        problems.append(f"it takes the inputs {sorted(taken)} where the specs declare {sorted(declared)}")
    for name in sorted(set(taken) & set(declared)):
        spec, (dtype, rank) = declared[name], taken[name]
        fed = "float32" if spec.dtype == "bfloat16" else spec.dtype  # a bfloat16 input is fed as float32
        if dtype != fed and (dtype, fed) != ("bfloat16", "float32"):  # validation's own rule (runtimes/base.py)
            problems.append(f"it takes '{name}' as {dtype} where its spec ({spec}) declares {spec.dtype}")
        if rank != len(spec.dims):
            problems.append(f"it takes '{name}' with rank {rank} where its spec ({spec}) declares rank {len(spec.dims)}")
    if problems:
        raise SignatureMismatch("the artifact does not take the inputs as declared: " + "; ".join(problems))


def _remove_partial(path: Path) -> None:
    """Remove what a failed strategy left: the artifact and files named after it (e.g. model.onnx.data)."""
    for leftover in path.parent.glob(f"{path.name}*"):
        if leftover.is_file():
            leftover.unlink()
