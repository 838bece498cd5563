"""The Ray engine: each model a Ray task with the resources its manifest entry asks for.

Every node runs the model's convert process itself, so convert (with the model's framework extras) must be installed
on every node, and the manifest's paths and the batch's out folder must be on a file system every node sees.
"""

from __future__ import annotations

from convert.engines import interrupts_forwarded, run_model
from convert.errors import ConvertError, require


class RayEngine:
    def __init__(self, address: str | None):
        require("ray", "--engine ray")
        self.address = address
        self.description = f"ray ({address or 'a local instance'})"

    def run(self, jobs, commands, done) -> None:
        import ray

        try:
            ray.init(address=self.address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        except (ConnectionError, RuntimeError) as exc:
            raise ConvertError(
                f"cannot reach the Ray cluster at {self.address}: {exc}",
                "Start one with 'ray start --head' (or give its address), or leave --address out to start a local instance.",
            ) from None
        task = ray.remote(max_retries=0)(run_model)
        pending = {}
        try:
            with interrupts_forwarded():
                for job in jobs:
                    options = {"num_cpus": job.resources.cpus, "num_gpus": job.resources.gpus}
                    if job.resources.memory_gb is not None:
                        options["memory"] = int(job.resources.memory_gb * 2**30)
                    pending[task.options(**options).remote(commands[job.name], str(job.log))] = job
                while pending:
                    ready, _ = ray.wait(list(pending), num_returns=1)
                    job = pending.pop(ready[0])
                    try:
                        done(job, *ray.get(ready[0]))
                    except ray.exceptions.RayError as exc:  # the task itself died (its node was lost, it ran out of memory)
                        done(job, None, 0.0, "ray", f"its Ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0]}")
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)
            ray.shutdown()
