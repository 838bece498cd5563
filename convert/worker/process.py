"""The worker process: the framework work of a run happens in a child process, apart from the jobs it runs
(convert/worker/protocol.py).

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
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Any

from convert.errors import ConvertError
from convert.options import DEFAULTS
from convert.worker.protocol import Job, WorkerState, checked, job_name

DEFAULT_STAGE_TIMEOUT: float = DEFAULTS["stage_timeout"]  # --stage-timeout's default, declared with the option
_POLL_SECONDS = 0.2


class StageCrashed(Exception):
    """The worker died during a job (``signal`` names the signal that killed it, when one did)."""

    def __init__(self, message: str, signal_name: str | None = None, timed_out: bool = False):
        super().__init__(message)
        self.signal = signal_name
        self.timed_out = timed_out


class WorkerError(Exception):
    """An internal error inside the worker; its message carries the worker's traceback."""


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
        self._state = WorkerState()
        self.log = new_log()

    def call(self, job: Job, setup: bool = False) -> Any:
        checked(job)
        with _library_output_logged(self.log):
            return job.run(self._state)

    def close(self) -> None:
        self._state = WorkerState()

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
        self._setup: list[Job] = []
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self.log: IO[bytes] | None = None  # every worker of the run writes its stdout and stderr here

    def call(self, job: Job, setup: bool = False) -> Any:
        """Run one job; ``setup`` jobs are replayed, in order, in every worker started after this one."""
        checked(job)
        if self._process is None:
            self._start()
            for setup_job in self._setup:
                self._exchange(setup_job)
        result = self._exchange(job)
        if setup:
            self._setup.append(job)
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

    def _exchange(self, job: Job) -> Any:
        try:
            with contextlib.suppress(OSError):  # a worker that died sending is reported by _receive, with how it died
                self._connection.send(job)
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
            [sys.executable, "-c", "from convert.worker.process import serve; serve()", str(theirs.fileno()), str(os.getpid())]
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


def isolates(requested: bool) -> bool:
    """Whether the framework work runs in a child process: as requested, unless CONVERT_NO_ISOLATION is set (as
    --no-isolation; for a test suite or a profiler that runs many conversions in one process)."""
    return requested and os.environ.get("CONVERT_NO_ISOLATION", "").lower() in ("", "0", "false", "no")


def start(request, timeout: float | None, isolate: bool = True) -> InProcessWorker | ChildWorker:
    """A child worker for this SourceRequest, unless the model is a Python object (or isolation is off) and must
    stay in this process."""
    if not isolates(isolate):
        return InProcessWorker("isolation was turned off")
    if not isinstance(request.model, (str, os.PathLike)):
        return InProcessWorker(f"the model was given as a Python object ({type(request.model).__name__})")
    try:
        pickle.dumps(request)
    except Exception:
        return InProcessWorker("the model's params or example inputs are Python objects that cannot be sent to another process")
    return ChildWorker(timeout)


def serve() -> None:
    """The worker's main loop: one job per message until the pipeline closes the connection."""
    _die_with_parent(int(sys.argv[2]))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the pipeline handles it
    connection = Connection(int(sys.argv[1]))
    sys.path[:] = connection.recv()
    if len(sys.argv) > 3:
        _import_ahead(sys.argv[3], sys.argv[4] or None)
        gc.freeze()  # the modules just imported live as long as this process: no collection need walk them
    state = WorkerState()
    while True:
        try:
            job = connection.recv()
        except EOFError:
            # the interpreter's teardown collects what is left, frozen objects aside (with torch loaded: 1.6 s, frozen
            # 0.3 s, while the pipeline waits for the exit); the OS frees them all, and the exit handlers still run
            gc.freeze()
            return
        try:
            reply = ("ok", checked(job).run(state))
        except ConvertError as exc:
            reply = ("user_error", (exc.problem, exc.next_step))
        except Exception:
            reply = ("internal", f"in the worker process, job '{job_name(job)}':\n{traceback.format_exc()}")
        connection.send(reply)
        del reply
        gc.collect()  # libraries leave whole model copies in reference cycles (GBs for a large model): free them now
        if getattr(job, "outlives_job", False):
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
