"""Plans the stages for a request and runs them, recording a status per stage. One file per stage, over one
RunContext (context.py):

plan ─► load source ─► reference outputs ─► export (each target) ─► validate (artifact × runtime × device × shape)
     ─► optimize (each --optimize pass, from the validated artifact it takes) ─► validate
     ─► benchmark (source and every artifact that passed) ─► auto (--optimize auto's choice) ─► report

Artifacts are exported and validated in a staging folder and renamed into place only when complete. The framework
work of every stage runs in a worker process (convert/worker.py): a crash or a stage timeout fails that stage, and
the run goes on with the others. Each artifact's record holds the command that makes it again (reproduce.py).
``--optimize auto`` builds every pass this machine can run as a candidate, validates and benchmarks them, and
publishes only the fastest one that passed.
"""

from convert.pipeline.context import ConversionResult, ConvertRequest, Progress, RunHooks
from convert.pipeline.runner import run

__all__ = ["ConversionResult", "ConvertRequest", "Progress", "RunHooks", "run"]
