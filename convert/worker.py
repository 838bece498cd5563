"""Crash isolation: the framework work of a run happens in a child process, the worker.

Loading the source, its reference outputs, every export, optimization, validation and benchmark are jobs the
pipeline sends to one worker process, which keeps the source model loaded between jobs. A job that crashes the
worker (a segfault or abort in a framework's native code, the kernel's out-of-memory killer) or runs past the stage
timeout ends that job only: its stage fails with the signal, and the next job starts a fresh worker, which loads
the source model again. Fork is not an option: a process forked after PyTorch, TensorFlow or JAX started their
thread pools hangs in them (OpenMP, XLA), so the worker is a new interpreter. The command line starts it ahead of
its run (``start_ahead``), to import the model's framework while the pipeline imports its own code and plans.

A model given as a Python object (the Python API) cannot be sent to another process; its jobs run in-process, and
the report says so.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
import io
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from convert.errors import ConvertError
from convert.specs import SourceSignature

if TYPE_CHECKING:  # kept out of start-up: the command line reads DEFAULT_STAGE_TIMEOUT from here
    import numpy as np

    from convert.reports import model as rm
    from convert.sources.base import SourceInfo
    from convert.validation import ValidationCase

DEFAULT_STAGE_TIMEOUT = 3600.0
_POLL_SECONDS = 0.2


class StageCrashed(Exception):
    """The worker died during a job (``signal`` names the signal that killed it, when one did)."""

    def __init__(self, message: str, signal_name: str | None = None, timed_out: bool = False):
        super().__init__(message)
        self.signal = signal_name
        self.timed_out = timed_out


class WorkerError(Exception):
    """An internal error inside the worker; its message carries the worker's traceback."""


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


class Session:
    """The worker's side: the loaded source model, and one method per job."""

    def __init__(self) -> None:
        self.source = None
        self._traced: dict = {}  # the source's program as an exporter traced it, by exporter, strategy and export shape
        # the programs exporters captured while they exported (they share the source's weights), by the same key
        self._captured: dict = {}
        self._chain_outputs: dict = {}  # an artifact's outputs on the chain's sample, by its digest and that sample's shape

    def load(self, request) -> SourceSummary:
        from convert.sources.resolve import resolve_source

        self.source = resolve_source(request)
        source = self.source
        return SourceSummary(
            info=source.info,
            signature=source.signature,
            export_sizes=dict(source.export_sizes or {}),
            dim_ranges=dict(getattr(source, "dim_ranges", {}) or {}),
            example_feed=source.example_feed,
            generation=source.generation,
            precision=source.precision,
        )

    def reference(self, feeds: list[dict[str, np.ndarray]]) -> tuple[list[dict[str, np.ndarray]], str]:
        """The source's outputs for each feed, up to the first that fails, and that failure ("" when none did)."""
        from convert.text import first_line

        outputs = []
        for feed in feeds:
            try:
                outputs.append(self.source.run(feed))
            except ConvertError:
                raise
            except Exception as exc:
                return outputs, f"{type(exc).__name__}: {first_line(str(exc))}"
        return outputs, ""

    def task_scores(self, outputs: list[dict[str, np.ndarray]], labels: list[np.ndarray], metric: str | None):
        """The scored output and the task metrics of outputs on labelled samples (a --metric is imported here)."""
        from convert.validation import user_metric
        from convert.validators.task_metrics import TaskMetricError, task_scores

        try:
            return task_scores(outputs, labels, user_metric(metric))
        except TaskMetricError as exc:
            raise ConvertError(
                f"cannot score the task on the labelled --data: {exc}", "Check the labels' shape against the model's outputs."
            ) from None
        except ConvertError:
            raise
        except Exception as exc:
            if metric is None:
                raise
            raise ConvertError(
                f"the metric {metric} raised {type(exc).__name__}: {exc}", "It is called as function(outputs, labels): fix it."
            ) from exc

    def generate(self, seed: int, steps: int):
        """The source's greedy decoding of ``steps`` new tokens from its seeded prompts (its cache fed back)."""
        from convert.validators.generation import decode

        prompts, context = self.source.generation_inputs(seed)
        return decode(self.source.run, self.source.generation, prompts, steps, context=context)

    def assembled(self, target: str, folder, artifacts: dict, precision: str, seed: int, trust_code: bool) -> rm.AssembledCheck:
        """A composite's artifacts (component -> path) run together against the library's assembled model from
        ``folder``: ``target`` is the composite's check (convert/assembled/), called with no source loaded."""
        from convert.registry import load_target

        return load_target(target)(folder, artifacts, precision=precision, seed=seed, trust_code=trust_code)

    def set_outputs(self, names: tuple[str, ...]) -> None:
        self.source.with_outputs(names)

    def export(self, exporter: str, job):
        from convert.registry import REGISTRY

        made = REGISTRY.get("exporter", exporter).load()()
        outcome = made.export(replace(job, source=self.source))
        if outcome.artifact is not None and made.captured is not None:
            self._captured[_traced_key(exporter, outcome.artifact.strategy, job)] = made.captured
        return outcome

    def optimize(self, name: str, job):
        from convert.registry import REGISTRY

        return REGISTRY.get("optimizer", name).load()().export(replace(job, source=self.source))

    def validate(
        self, artifact, runtime: str, device: str, cases: list[ValidationCase], policy, allow_fixed_shapes: bool
    ) -> list[rm.Check]:
        import functools

        from convert.chain import keep_outputs
        from convert.validation import checks_on

        first = None
        if device == "cpu" and not any(key[0] == artifact.sha256 for key in self._chain_outputs):
            first = functools.partial(keep_outputs, self._chain_outputs, artifact)
        return checks_on(artifact, runtime, device, cases, policy, allow_fixed_shapes, first)

    def localize(self, artifact, exporter: str, strategy: str, job, feed, reference, tolerance, folder, graph=None) -> rm.Divergence:
        """Where the artifact first diverges from the source on one feed (convert/localize.py); ``exporter`` and
        ``strategy`` made the ONNX file it comes from, which is ``graph`` for an OpenVINO IR."""
        from convert.exporters.base import quiet
        from convert.localize import locate

        if artifact.format in ("torch_export", "torchscript"):  # the artifact is the program the exporter captured
            from convert.backends.torch import TracedProgram, TracedScript

            program = (TracedProgram if artifact.format == "torch_export" else TracedScript).of_file(self.source, artifact.path)
            return locate(program, artifact, feed, reference, tolerance, folder)
        traced = self._traced_program(exporter, strategy, job)
        if traced is None:
            from convert.reports.details import Divergence

            return Divergence(status="skipped", reason=f"the graph {strategy} wrote keeps no names of the source's values")
        with quiet(io.StringIO()):  # the program's chatter, as when the exporter ran it
            return locate(traced, artifact, feed, reference, tolerance, folder, graph)

    def _traced_program(self, exporter: str, strategy: str, job):
        """The source's program as the exporter's strategy captured it: the one kept from the export where the exporter
        keeps it, else traced again (one at a time: a frozen graph holds a copy of the weights)."""
        from convert.exporters.base import quiet
        from convert.registry import REGISTRY

        key = _traced_key(exporter, strategy, job)
        if key in self._captured:
            return self._captured[key]
        with quiet(io.StringIO()):  # the exporter's chatter, as when it exported
            if key not in self._traced:
                self._traced = {key: REGISTRY.get("exporter", exporter).load()().traced(replace(job, source=self.source), strategy)}
        return self._traced[key]

    def chain(self, artifact, exporter: str, strategy: str, job, feed, reference, policy, base=None) -> rm.ChainLinks:
        """The error each link of the artifact's chain adds on one sample (convert/chain.py): for an exported artifact its
        capture and conversion links, for an optimized one (``base``: the artifact the pass started from) its pass's.
        Each artifact's outputs are kept for the passes made from it (one sample per artifact)."""
        from convert.chain import measure
        from convert.memory import available_bytes
        from convert.safety import size_of

        def traced():
            """The kept program, or one traced again where that leaves room: a frozen graph holds a copy of the weights."""
            if _traced_key(exporter, strategy, job) not in self._captured and 4 * size_of(artifact.files) > available_bytes():
                return "tracing the program again would hold a second copy of the weights, more than a quarter of the memory available"
            return self._traced_program(exporter, strategy, job)

        return measure(artifact, strategy, feed, reference, policy, base, traced, self._chain_outputs)

    def attest(self, fmt: str, path, input_shapes: dict[str, list[int]]):
        """What the artifact's matrix products compute in (convert/precision.py ``Measured``), as its format's spec
        says how; the reason, a string, where it cannot be read here."""
        from convert.precision import NotMeasured
        from convert.registry import REGISTRY, load_target

        try:
            return load_target(REGISTRY.format(fmt).attest)(path, input_shapes)
        except NotMeasured as exc:
            return str(exc)

    def sensitivity(self, name: str, job, samples: list[tuple[dict, dict]], policy) -> rm.Sensitivity:
        """The nodes that cost the pass ``name`` its accuracy, and which to keep in FP32 (convert/sensitivity.py)."""
        from convert.registry import REGISTRY
        from convert.sensitivity import rank

        return rank(REGISTRY.get("optimizer", name).load()(), replace(job, source=self.source), samples, policy)

    def repair_output_dims(self, fmt: str, path, dims) -> None:
        """Make the artifact's declared output dims dynamic in place, as its format's spec says how."""
        from convert.registry import REGISTRY, load_target

        load_target(REGISTRY.format(fmt).repair_output_dims)(path, dims)

    def benchmark_session(self, entries: list[tuple[str | None, object, str]], plan, settings, session: str) -> list[rm.Benchmark]:
        """Time the source (runtime None) and artifacts (runtime, artifact, device) interleaved (convert/benchmark.py)."""
        from convert.benchmark import Entry, benchmark_session
        from convert.registry import REGISTRY

        resolved = [
            Entry(REGISTRY.get("runtime", runtime).load() if runtime else None, artifact, device) for runtime, artifact, device in entries
        ]
        return benchmark_session(self.source, resolved, plan, settings, session)


def _traced_key(exporter: str, strategy: str, job) -> tuple:
    return (exporter, strategy, tuple((name, value.shape) for name, value in job.feed.items()))


def new_log() -> IO[bytes]:
    """The run's log: an anonymous file (nothing is left behind) that keeps what the frameworks write, warnings and
    log records included, off the user's terminal; the run copies it beside its report (``log_bytes``)."""
    return tempfile.TemporaryFile()


def log_bytes(log: IO[bytes]) -> bytes:
    """What a log holds, read without moving its offset: the worker processes write through that same offset."""
    return os.pread(log.fileno(), os.fstat(log.fileno()).st_size, 0)


class InProcessWorker:
    """Runs the jobs in this process: for models given as Python objects (no isolation, no stage timeout). The jobs'
    Python warnings and log records go to the run's log; native writes to stderr are left on this process's stderr,
    which its progress spinner shares (redirecting the file descriptor would send the spinner to the log too)."""

    def __init__(self, reason: str):
        self.isolation = f"in-process: {reason} (no crash isolation, no stage timeout)"
        self._session = Session()
        self.log = new_log()

    def call(self, job: Callable, *args: Any, setup: bool = False) -> Any:
        with _library_output_logged(self.log):
            return _checked(job)(self._session, *args)

    def close(self) -> None:
        self._session = Session()

    def processes(self) -> list[int]:
        """The process ids its jobs run in: this one."""
        return [os.getpid()]


@contextlib.contextmanager
def _library_output_logged(log: IO[bytes]):
    """Python warnings, and log records that no handler of the caller's takes, written to ``log`` while a job runs."""
    import logging

    stream = io.TextIOWrapper(os.fdopen(os.dup(log.fileno()), "ab"), encoding="utf-8", write_through=True)
    root = logging.getLogger()
    # only where the records would reach the last-resort handler (stderr): a caller's own handlers stay as they are
    handler = logging.StreamHandler(stream) if not root.handlers else None
    if handler is not None:
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: stream.write(
                warnings.formatwarning(message, category, filename, lineno, line)
            )
            yield
    finally:
        if handler is not None:
            root.removeHandler(handler)
        stream.close()


class ChildWorker:
    """Runs the jobs in a child interpreter; after a crash or timeout the next job starts a new one, which first
    replays the setup jobs (loading the source, naming its outputs)."""

    def __init__(self, timeout: float | None):
        self.timeout = timeout
        self.isolation = "worker process" + (f" (stage timeout {timeout:g} s)" if timeout else " (no stage timeout)")
        self._setup: list[tuple[Callable, tuple]] = []
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self.log: IO[bytes] | None = None  # every worker of the run writes its stdout and stderr here

    def call(self, job: Callable, *args: Any, setup: bool = False) -> Any:
        """Run one job (a Session method); ``setup`` jobs are replayed, in order, in every worker started after this one."""
        _checked(job)
        if self._process is None:
            self._start()
            for setup_job, setup_args in self._setup:
                self._exchange(setup_job.__name__, setup_args)
        result = self._exchange(job.__name__, args)
        if setup:
            self._setup.append((job, args))
        return result

    def processes(self) -> list[int]:
        """The process ids its jobs run in: this one, and the child while one runs."""
        return [os.getpid(), *([self._process.pid] if self._process is not None else [])]

    def close(self, kill: bool = False) -> None:
        process, connection = self._process, self._connection
        self._process = self._connection = None
        if process is not None:
            _stop(process, connection, kill)

    def _start(self) -> None:
        global _ahead
        ahead, _ahead = _ahead, None
        if ahead is not None:
            process, connection, path, self.log = ahead
            if process.poll() is None and path == sys.path:
                self._process, self._connection = process, connection
                return
            _stop(process, connection, kill=True)  # it died starting, or it would import from another sys.path
        if self.log is None:
            self.log = new_log()
        self._process, self._connection = _spawn(self.log)

    def _exchange(self, method: str, args: tuple) -> Any:
        try:
            with contextlib.suppress(OSError):  # a worker that died sending is reported by _receive, with how it died
                self._connection.send((method, args))
            reply = self._receive()
        except BaseException:
            self.close(kill=True)  # a timeout, a crash or an interruption: this worker is not used again
            raise
        kind, payload = reply
        if kind == "ok":
            return payload
        if kind == "user_error":
            raise ConvertError(*payload)
        raise WorkerError(payload)

    def _receive(self) -> Any:
        deadline = time.monotonic() + self.timeout if self.timeout else None
        while True:
            try:
                if self._connection.poll(_POLL_SECONDS):
                    return self._connection.recv()
            except (EOFError, OSError):
                pass  # the worker died mid-reply: reported below
            code = self._process.poll()
            if code is not None:
                raise StageCrashed(*_death(code))
            if deadline is not None and time.monotonic() > deadline:
                raise StageCrashed(f"it ran past the stage timeout of {self.timeout:g} s and was stopped", timed_out=True)


def _death(code: int) -> tuple[str, str | None]:
    """How the worker died, from its exit code."""
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.valid_signals() else f"signal {-code}"
        hint = " (the kernel's out-of-memory killer sends it when memory runs out)" if -code == signal.SIGKILL else ""
        return f"the worker process was killed by {name}{hint}", name
    return f"the worker process exited with status {code}", None


def _spawn(log: IO[bytes], model: str | None = None, framework: str | None = None) -> tuple[subprocess.Popen, Connection]:
    """A new worker process and the pipeline's end of its connection; given the run's model, the worker imports what
    loading it takes while it waits for its first job. What the frameworks print, warn and log in it (Python or
    native, on stdout or stderr) goes to ``log``: replies and errors come back over the connection."""
    ours, theirs = socket.socketpair()
    with ours, theirs:
        process = subprocess.Popen(
            [sys.executable, "-c", "from convert.worker import serve; serve()", str(theirs.fileno()), str(os.getpid())]
            + ([model, framework or ""] if model else []),
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
        )
        connection = Connection(os.dup(ours.fileno()))
    with contextlib.suppress(OSError):  # a worker that died at start is reported by the first job
        connection.send(list(sys.path))
    return process, connection


def _stop(process: subprocess.Popen, connection: Connection, kill: bool) -> None:
    """End a worker: it exits once its connection closes; it is killed where it has not within 5 s, or at once (``kill``)."""
    with contextlib.suppress(OSError):
        connection.close()  # the worker exits when its end of the connection closes
    if not kill:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
    if process.poll() is None:
        process.kill()
        process.wait()


# start_ahead's worker, with the sys.path it was given and its log, until the run's ChildWorker takes it
_ahead: tuple[subprocess.Popen, Connection, list[str], IO[bytes]] | None = None


def start_ahead(model: str, framework: str | None) -> None:
    """Start the worker of the run the command line is about to make before the pipeline's imports and planning (half
    a second and more), so that the worker imports what loading the model takes meanwhile. The run's first
    ChildWorker takes it; a run that takes none (refused, or in-process) leaves it to exit with this process."""
    global _ahead
    log = new_log()
    _ahead = (*_spawn(log, model, framework), list(sys.path), log)


def start(request, timeout: float | None, isolate: bool = True) -> InProcessWorker | ChildWorker:
    """A child worker for this SourceRequest, unless the model is a Python object (or isolation is off) and must
    stay in this process."""
    if not isolate:
        return InProcessWorker("isolation was turned off")
    if not isinstance(request.model, (str, os.PathLike)):
        return InProcessWorker(f"the model was given as a Python object ({type(request.model).__name__})")
    try:
        pickle.dumps(request)
    except Exception:
        return InProcessWorker("the model's params or example inputs are Python objects that cannot be sent to another process")
    return ChildWorker(timeout)


def _checked(job: Callable) -> Callable:
    """A job is one of Session's methods: the child process runs it by that name."""
    if getattr(Session, getattr(job, "__name__", ""), None) is not job:
        raise TypeError(f"{job!r} is not a job of the worker's Session")
    return job


def serve() -> None:
    """The worker's main loop: one job per message until the pipeline closes the connection."""
    _die_with_parent(int(sys.argv[2]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the pipeline handles it
    connection = Connection(int(sys.argv[1]))
    sys.path[:] = connection.recv()
    if len(sys.argv) > 3:
        _import_ahead(sys.argv[3], sys.argv[4] or None)
        gc.freeze()  # the modules just imported live as long as this process: no collection need walk them
    session = Session()
    while True:
        try:
            method, args = connection.recv()
        except EOFError:
            # the interpreter's teardown collects what is left, frozen objects aside (with torch loaded: 1.6 s, frozen
            # 0.3 s, while the pipeline waits for the exit); the OS frees them all, and the exit handlers still run
            gc.freeze()
            return
        try:
            reply = ("ok", getattr(Session, method)(session, *args))
        except ConvertError as exc:
            reply = ("user_error", (exc.problem, exc.next_step))
        except Exception:
            reply = ("internal", f"in the worker process, job '{method}':\n{traceback.format_exc()}")
        connection.send(reply)
        del reply
        gc.collect()  # libraries leave whole model copies in reference cycles (GBs for a large model): free them now
        if method == Session.load.__name__:
            # what outlives the load (the frameworks' modules, the source model) lives as long as this worker: the
            # collection after each later job need not walk it again (0.2 s a job with torch loaded, while the
            # pipeline waits for the next reply)
            gc.freeze()


def _import_ahead(model: str, framework: str | None) -> None:
    """Import the source loaders and, for a model file or folder, the framework its source loads it with
    (``framework_import`` in the source's registry entry), before the load job comes: what the pipeline plans
    meanwhile costs no time. A user's factory is not imported ahead: its module may set up the framework before
    importing it. Whatever fails here is left to the load job to report."""
    with contextlib.suppress(Exception):
        from convert.registry import REGISTRY
        from convert.sources.resolve import detect_framework

        if not Path(model).exists():
            return
        function = REGISTRY.get("source", framework or detect_framework(Path(model))).framework_import
        if function:
            module, _, name = function.partition(":")
            getattr(importlib.import_module(module), name)()


def _die_with_parent(parent: int) -> None:
    """Ask Linux to kill this process when the pipeline's process dies (a SIGKILLed run leaves no worker behind)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # it died before the request took effect
        os._exit(1)
