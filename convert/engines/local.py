"""The local engine: up to N models at a time, each a convert process on this machine."""

from __future__ import annotations

from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

from convert.engines import interrupts_forwarded, run_model


class LocalEngine:
    def __init__(self, workers: int):
        self.workers = workers
        self.description = f"local ({workers} worker{'s' * (workers != 1)})"

    def run(self, jobs, commands, done) -> None:
        pool = ThreadPoolExecutor(self.workers)
        try:
            with interrupts_forwarded():
                running = {pool.submit(run_model, commands[job.name], str(job.log)): job for job in jobs}
                try:
                    while running:
                        finished, _ = wait(running, timeout=0.5, return_when=FIRST_COMPLETED)
                        for future in finished:
                            done(running.pop(future), *future.result())
                except KeyboardInterrupt:
                    for future in running:  # before the running models stop: no waiting model may start
                        future.cancel()
                    raise
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
