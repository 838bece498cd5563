"""Unit tests of convert/worker/: choosing the worker, the in-process path, the child worker's protocol (a user
error, an internal error, a crash, a timeout, a fresh worker after a crash) and the messages a dead worker gives.

The child-worker tests load factory files named ``*_fake``: they stand in for a model only to exercise our own
error handling (a factory that crashes, sleeps or records its process), and import no framework."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from convert.errors import ConvertError
from convert.sources.request import SourceRequest
from convert.worker import ChildWorker, InProcessWorker, LoadSource, ReferenceOutputs, SelectOutputs, StageCrashed, WorkerError
from convert.worker import process as worker_module
from convert.worker.process import _death, start, start_ahead
from convert.worker.protocol import WorkerState, worker_job
from tests.conftest import REPO

FAKES = '''
import os, signal, time
from pathlib import Path


def crash_with_sigkill_fake():
    os.kill(os.getpid(), signal.SIGKILL)


def exit_with_status_7_fake():
    os._exit(7)


def sleeping_factory_fake():
    pid_file = Path(os.environ["CONVERT_TEST_PID_FILE"])
    pid_file.write_text(str(os.getpid()))
    time.sleep(60)
    pid_file.with_name("finished.txt").write_text("the job ran to its end")


def pid_recording_factory_fake():
    """Returns an object no framework owns: load() ends in a ConvertError after the factory ran."""
    with open(os.environ["CONVERT_TEST_PID_FILE"], "a") as stream:
        stream.write(f"{os.getpid()}\\n")
    return object()
'''


@pytest.fixture
def fakes(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "worker_fakes.py"
    path.write_text(textwrap.dedent(FAKES))
    monkeypatch.setenv("CONVERT_TEST_PID_FILE", str(tmp_path / "pids.txt"))  # the child inherits the environment
    return path


@pytest.fixture
def child():
    worker = ChildWorker(timeout=60)
    yield worker
    worker.close(kill=True)


def _load(fakes: Path, name: str) -> SourceRequest:
    return SourceRequest(model=f"{fakes}:{name}")


def _pids(fakes: Path) -> list[int]:
    return [int(line) for line in (fakes.parent / "pids.txt").read_text().split()]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# start(): which worker runs the jobs


def test_a_model_path_gets_a_child_worker_with_its_timeout(tmp_path):
    worker = start(SourceRequest(model=str(tmp_path / "m.pt2")), 120.0)
    assert isinstance(worker, ChildWorker)
    assert worker.isolation == "worker process (stage timeout 120 s)"
    assert ChildWorker(None).isolation == "worker process (no stage timeout)"


def test_a_python_object_model_runs_in_process_and_the_isolation_says_why():
    worker = start(SourceRequest(model=[1, 2]), 120.0)
    assert isinstance(worker, InProcessWorker)
    assert worker.isolation == ("in-process: the model was given as a Python object (list) (no crash isolation, no stage timeout)")


def test_turning_isolation_off_runs_in_process(tmp_path):
    worker = start(SourceRequest(model=str(tmp_path / "m.pt2")), 120.0, isolate=False)
    assert isinstance(worker, InProcessWorker) and "isolation was turned off" in worker.isolation


def test_params_that_cannot_be_sent_to_another_process_run_in_process(tmp_path):
    worker = start(SourceRequest(model=str(tmp_path / "m.py:f"), params={"w": lambda: 0}), 120.0)
    assert isinstance(worker, InProcessWorker) and "cannot be sent to another process" in worker.isolation


# the in-process worker and the session


def test_a_user_error_in_process_is_raised_as_it_is(tmp_path):
    worker = InProcessWorker("test")
    with pytest.raises(ConvertError) as info:
        worker.call(LoadSource(SourceRequest(model=str(tmp_path / "missing.pt2"))), setup=True)
    assert info.value.problem == f"the model {tmp_path / 'missing.pt2'} does not exist"


def test_an_internal_error_in_process_is_the_exception_itself():
    with pytest.raises(AttributeError):
        InProcessWorker("test").call(SelectOutputs(("y",)))  # no source was loaded


class FailingOnSecondFeedSourceFake:
    """A source whose run fails on its second feed, to test how reference() reports it."""

    def __init__(self, error: Exception):
        self.error, self.calls = error, 0

    def run(self, feed):
        self.calls += 1
        if self.calls == 2:
            raise self.error
        return {"y": feed["x"] * 2}


@dataclasses.dataclass(frozen=True)
class UnregisteredJob:
    """A job in every way but its registration."""

    def run(self, state):
        return "ran"


@pytest.mark.parametrize("job", ["load", print, UnregisteredJob()])
def test_a_job_whose_type_is_not_registered_is_refused_before_it_runs(job):
    """A worker runs registered job types only: anything else must not reach the child."""
    for worker in (InProcessWorker("test"), ChildWorker(timeout=60)):
        with pytest.raises(TypeError, match="is not a registered worker job"):
            worker.call(job)
        assert worker.processes() == [os.getpid()]  # no child was started for it
        worker.close()


def test_a_job_type_must_be_a_frozen_dataclass_with_run():
    with pytest.raises(TypeError, match="frozen dataclass with run"):
        worker_job(dataclasses.dataclass(type("MutableJob", (), {"run": lambda self, state: None})))
    with pytest.raises(TypeError, match="frozen dataclass with run"):
        worker_job(dataclasses.dataclass(frozen=True)(type("NoRun", (), {})))


def test_reference_returns_the_outputs_before_the_first_failing_feed_and_its_error():
    state = WorkerState(source=FailingOnSecondFeedSourceFake(ValueError("shapes (2,3) and (4,) differ\nwhile running node 7")))
    outputs, error = ReferenceOutputs([{"x": 1}, {"x": 2}, {"x": 3}]).run(state)
    assert outputs == [{"y": 2}]
    assert error == "ValueError: shapes (2,3) and (4,) differ"
    assert state.source.calls == 2  # the third feed was not run


def test_reference_with_no_failure_returns_every_output_and_no_error():
    state = WorkerState(source=FailingOnSecondFeedSourceFake(ValueError("unused")))
    assert ReferenceOutputs([{"x": 5}]).run(state) == ([{"y": 10}], "")


def test_a_user_error_from_the_source_in_reference_is_raised():
    state = WorkerState(source=FailingOnSecondFeedSourceFake(ConvertError("the input x must be 2-D", "Check --input.")))
    with pytest.raises(ConvertError, match="must be 2-D"):
        ReferenceOutputs([{"x": 1}, {"x": 2}]).run(state)


# how a dead worker is described


def test_a_worker_killed_by_sigkill_mentions_the_out_of_memory_killer():
    message, name = _death(-signal.SIGKILL)
    assert name == "SIGKILL"
    assert message == ("the worker process was killed by SIGKILL (the kernel's out-of-memory killer sends it when memory runs out)")


def test_a_worker_killed_by_another_signal_names_it_without_the_memory_hint():
    assert _death(-signal.SIGSEGV) == ("the worker process was killed by SIGSEGV", "SIGSEGV")
    assert _death(-signal.SIGABRT) == ("the worker process was killed by SIGABRT", "SIGABRT")


def test_a_worker_that_exits_gives_its_status_and_no_signal():
    assert _death(7) == ("the worker process exited with status 7", None)


def test_stage_crashed_carries_its_signal_and_whether_it_timed_out():
    crashed = StageCrashed("gone", "SIGSEGV")
    assert (str(crashed), crashed.signal, crashed.timed_out) == ("gone", "SIGSEGV", False)
    assert StageCrashed("late", timed_out=True).timed_out


# the child worker's protocol


def test_a_user_error_in_the_child_comes_back_as_that_error(child, tmp_path):
    missing = tmp_path / "missing.pt2"
    with pytest.raises(ConvertError) as info:
        child.call(LoadSource(SourceRequest(model=str(missing))), setup=True)
    assert info.value.problem == f"the model {missing} does not exist"
    assert info.value.next_step.startswith("Give a model file")


def test_an_internal_error_in_the_child_comes_back_with_its_traceback(child):
    with pytest.raises(WorkerError) as info:
        child.call(SelectOutputs(("y",)))  # no source was loaded
    text = str(info.value)
    assert text.startswith("in the worker process, job 'SelectOutputs':")
    assert "Traceback" in text and "AttributeError" in text


def test_the_child_keeps_serving_after_a_user_error_and_a_crash_starts_a_fresh_one(child, fakes):
    for _ in range(2):
        with pytest.raises(ConvertError, match="cannot tell which framework a object belongs to"):
            child.call(LoadSource(_load(fakes, "pid_recording_factory_fake")))
    first, second = _pids(fakes)
    assert first == second != os.getpid()  # one child served both jobs
    with pytest.raises(StageCrashed):
        child.call(LoadSource(_load(fakes, "crash_with_sigkill_fake")))
    with pytest.raises(ConvertError, match="cannot tell which framework"):
        child.call(LoadSource(_load(fakes, "pid_recording_factory_fake")))
    assert _pids(fakes)[-1] not in (first, os.getpid())


def test_a_child_killed_by_a_signal_is_a_stage_crash_naming_it(child, fakes):
    with pytest.raises(StageCrashed) as info:
        child.call(LoadSource(_load(fakes, "crash_with_sigkill_fake")))
    assert info.value.signal == "SIGKILL" and not info.value.timed_out
    assert str(info.value).startswith("the worker process was killed by SIGKILL")


def test_a_child_that_exits_is_a_stage_crash_with_its_status(child, fakes):
    with pytest.raises(StageCrashed) as info:
        child.call(LoadSource(_load(fakes, "exit_with_status_7_fake")))
    assert str(info.value) == "the worker process exited with status 7"
    assert info.value.signal is None and not info.value.timed_out


def test_a_job_past_the_stage_timeout_is_stopped(fakes, tmp_path):
    worker = ChildWorker(timeout=1.5)
    try:
        with pytest.raises(ConvertError):  # starts the worker, so the timed job's clock runs on the job alone
            worker.call(LoadSource(SourceRequest(model=str(tmp_path / "missing.pt2"))))
        with pytest.raises(StageCrashed) as info:
            worker.call(LoadSource(_load(fakes, "sleeping_factory_fake")))
    finally:
        worker.close(kill=True)
    assert info.value.timed_out and info.value.signal is None
    assert str(info.value) == "it ran past the stage timeout of 1.5 s and was stopped"
    assert not (tmp_path / "finished.txt").exists(), "the job ran to its end instead of being stopped"
    pid = int((tmp_path / "pids.txt").read_text())
    assert not _alive(pid), "the timed-out worker was left running"


def test_closing_the_child_ends_its_process(fakes):
    worker = ChildWorker(timeout=60)
    with pytest.raises(ConvertError):
        worker.call(LoadSource(_load(fakes, "pid_recording_factory_fake")))
    [pid] = _pids(fakes)
    assert _alive(pid)
    worker.close()
    assert not _alive(pid)
    worker.close()  # closing twice is harmless


# a worker started ahead of its run (by the command line)


@pytest.fixture
def started_ahead(fakes):
    """The process of a worker started ahead for a fakes' factory; stopped after the test if no ChildWorker took it."""
    start_ahead(f"{fakes}:pid_recording_factory_fake", None)
    process, connection = worker_module._ahead[:2]
    yield process
    if worker_module._ahead is not None:
        worker_module._ahead = None
        worker_module._stop(process, connection, kill=True)


def test_the_first_child_worker_takes_the_worker_started_ahead_and_the_next_starts_its_own(started_ahead, fakes):
    workers = [ChildWorker(timeout=60), ChildWorker(timeout=60)]
    try:
        for worker in workers:
            with pytest.raises(ConvertError, match="cannot tell which framework"):
                worker.call(LoadSource(_load(fakes, "pid_recording_factory_fake")))
    finally:
        for worker in workers:
            worker.close()
    first, second = _pids(fakes)
    assert first == started_ahead.pid and second not in (first, os.getpid())
    assert not _alive(first)


@pytest.mark.parametrize("why", ["it died", "sys.path changed"])
def test_a_worker_started_ahead_is_not_taken_when_it_died_or_sys_path_changed(started_ahead, fakes, tmp_path, monkeypatch, why):
    if why == "it died":
        started_ahead.kill()
        started_ahead.wait()
    else:
        monkeypatch.syspath_prepend(str(tmp_path))
    worker = ChildWorker(timeout=60)
    try:
        with pytest.raises(ConvertError, match="cannot tell which framework"):
            worker.call(LoadSource(_load(fakes, "pid_recording_factory_fake")))
    finally:
        worker.close()
    assert _pids(fakes)[0] != started_ahead.pid
    assert started_ahead.poll() is not None, "the worker not taken was stopped"


def test_a_worker_started_ahead_imports_the_framework_of_a_model_file_but_not_a_factory(tmp_path):
    archive = tmp_path / "model.pt2"
    with zipfile.ZipFile(archive, "w") as written:
        written.writestr("model/archive_format", "pt2")  # a torch.export archive to detect_format
    probe = "import sys; from convert.worker.process import _import_ahead; _import_ahead(sys.argv[1], None); print('torch' in sys.modules)"
    for model, imported in ((str(archive), "True"), (f"{tmp_path / 'factory.py'}:build", "False")):
        done = subprocess.run(
            [sys.executable, "-c", probe, model],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            timeout=300,
        )
        assert done.stdout.strip() == imported, done.stderr
