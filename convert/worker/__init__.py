"""Crash isolation: the framework work of a run happens in a worker, a child process (``process``) that runs typed
jobs (``protocol``: each a frozen dataclass beside its code, run by ``run(state)``; ``jobs``: those on the loaded
source and the registered makers)."""

from convert.worker.jobs import (
    AssembledCheck,
    BenchmarkSession,
    Export,
    GreedyDecoding,
    LoadSource,
    Optimize,
    ReferenceOutputs,
    SelectOutputs,
    SourceSummary,
    TaskScores,
)
from convert.worker.process import (
    DEFAULT_STAGE_TIMEOUT,
    ChildWorker,
    InProcessWorker,
    StageCrashed,
    WorkerError,
    isolates,
    log_bytes,
    new_log,
    start,
    start_ahead,
)
from convert.worker.protocol import Job, WorkerState, worker_job

__all__ = [
    "DEFAULT_STAGE_TIMEOUT",
    "AssembledCheck",
    "BenchmarkSession",
    "ChildWorker",
    "Export",
    "GreedyDecoding",
    "InProcessWorker",
    "Job",
    "LoadSource",
    "Optimize",
    "ReferenceOutputs",
    "SelectOutputs",
    "SourceSummary",
    "StageCrashed",
    "TaskScores",
    "WorkerError",
    "WorkerState",
    "isolates",
    "log_bytes",
    "new_log",
    "start",
    "start_ahead",
    "worker_job",
]
