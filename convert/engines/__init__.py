"""Where ``convert batch`` runs its models: processes on this machine, or tasks on a Ray cluster.

An engine has a ``description`` for the summary and ``run(jobs, commands, done)``, which runs every job's command
and calls ``done(job, exit_code, seconds, where)`` as each one ends (``done(job, None, 0, where, failure)`` when one
could not run to its end); Ctrl-C reaches every running model.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import time
from collections.abc import Iterator

INTERRUPT_GRACE_SECONDS = 30  # how long an interrupted model may take to write its 'interrupted' report
_RUNNING: set[subprocess.Popen] = set()


def run_model(command: list[str], log: str) -> tuple[int, float, str]:
    """Run one model's command with its output in ``log``; its exit code (negative: the signal that killed it),
    seconds and where it ran. Also the body of a Ray task."""
    import socket

    started = time.perf_counter()
    with open(log, "w", encoding="utf-8") as stream:
        process = subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        _RUNNING.add(process)
        try:
            code = process.wait()
        finally:
            _RUNNING.discard(process)
    return code, round(time.perf_counter() - started, 3), socket.gethostname()


@contextlib.contextmanager
def interrupts_forwarded() -> Iterator[None]:
    """On Ctrl-C (or SIGTERM), pass SIGINT to every running model, give each time to write its report, then stop."""
    try:
        yield
    except KeyboardInterrupt:
        for process in list(_RUNNING):
            with contextlib.suppress(OSError):
                process.send_signal(signal.SIGINT)
        deadline = time.monotonic() + INTERRUPT_GRACE_SECONDS
        for process in list(_RUNNING):
            try:
                process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
        raise
