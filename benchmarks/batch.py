"""How a batch's time and memory grow with the number of models and workers, and what the stage cache saves.

    python -m benchmarks.batch [RESULTS_FILE]

Runs ``convert batch`` (the real command line) on 1, 2 and 4 copies of the example CNN (each copy a different model
file, so no two share cache entries), with 1 and 2 workers and the cache off, then the 4-model batch again with a
warm cache. Wall time is measured around the command; memory is the peak of the summed RSS of every process of the
batch (sampled every 0.1 s), and the peak RSS of the largest single process. Writes
benchmarks/results/batch.md by default.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path(__file__).parent / "results" / "batch.md"
MODEL_COUNTS = (1, 2, 4)
WORKERS = (1, 2)


def _write_models(folder: Path, count: int) -> list[Path]:
    """``count`` CNN .pt2 files with different weights (seeds), so their content hashes differ."""
    import torch

    from fixtures.torch_models import build

    paths = []
    for index in range(count):
        torch.manual_seed(index)
        module = build("cnn").eval()
        path = folder / f"cnn{index}.pt2"
        torch.export.save(torch.export.export(module, (torch.randn(2, 3, 32, 32),)), str(path))
        paths.append(path)
    return paths


def _manifest(folder: Path, models: list[Path]) -> Path:
    path = folder / f"zoo{len(models)}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "out": f"out{len(models)}",
                "defaults": {"require": {"targets": ["onnx"]}},
                "models": [{"name": m.stem, "model": {"path": str(m)}} for m in models],
            }
        )
    )
    return path


class _TreeMemory:
    """The peak of the summed RSS of a process and all of its descendants, sampled in a thread."""

    def __init__(self, pid: int):
        self.root, self.peak, self._stop = psutil.Process(pid), 0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                for process in [self.root, *self.root.children(recursive=True)]:
                    try:
                        total += process.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            self.peak = max(self.peak, total)
            time.sleep(0.1)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def _run_batch(manifest: Path, workers: int, cache: Path | None) -> tuple[float, int, dict]:
    command = [sys.executable, "-m", "convert", "batch", str(manifest), "--workers", str(workers), "--force", "--quiet"]
    command += ["--cache-dir", str(cache)] if cache is not None else ["--no-cache"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONVERT_NO_CACHE": ""}
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=manifest.parent, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    memory = _TreeMemory(process.pid)
    _, errors = process.communicate()
    seconds = time.perf_counter() - started
    peak = memory.stop()
    if process.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}:\n{errors[-3000:]}")
    summary = json.loads((manifest.parent / f"out{manifest.stem.removeprefix('zoo')}" / "summary.json").read_text())
    return seconds, peak, summary


def main(argv: list[str]) -> None:
    results = Path(argv[0]) if argv else DEFAULT_RESULTS
    rows, cached_row = [], None
    with tempfile.TemporaryDirectory(prefix="convert-batch-bench-") as temp:
        folder = Path(temp)
        models = _write_models(folder, max(MODEL_COUNTS))
        for count in MODEL_COUNTS:
            manifest = _manifest(folder, models[:count])
            for workers in WORKERS:
                if workers > count:
                    continue
                seconds, peak, summary = _run_batch(manifest, workers, None)
                per_model = statistics.median(m["seconds"] for m in summary["models"])
                rows.append((count, workers, seconds, per_model, peak))
                print(f"{count} models, {workers} workers: {seconds:.1f} s, peak {peak / 2**30:.2f} GiB", flush=True)
        cache = folder / "cache"
        manifest = _manifest(folder, models)
        _run_batch(manifest, 2, cache)  # fills the cache
        seconds, peak, summary = _run_batch(manifest, 2, cache)
        cached_row = (
            len(models),
            2,
            seconds,
            statistics.median(m["seconds"] for m in summary["models"]),
            peak,
            sum(m["reused"] for m in summary["models"]),
        )
    largest_child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    base = next(r for r in rows if r[0] == 1 and r[1] == 1)
    lines = [
        "# Batch cost: models and workers",
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on {platform.platform()}, "
        f"{os.cpu_count()} CPU cores, Python {platform.python_version()}, with `python -m benchmarks.batch`.",
        "",
        "`convert batch` on N copies of the example CNN (different weights), `--to onnx` with the default validation "
        "(3 shapes × 3 samples, ONNX Runtime on CPU), each model in its own `convert gate` process with its worker "
        "process; the cache off except in the last row. Peak RSS is the summed RSS of every process of the batch.",
        "",
        "| models | workers | wall s | × 1 model, 1 worker | s per model (median) | peak RSS GiB (all processes) |",
        "|---|---|---|---|---|---|",
    ]
    for count, workers, seconds, per_model, peak in rows:
        lines.append(f"| {count} | {workers} | {seconds:.1f} | {seconds / base[2]:.2f} | {per_model:.1f} | {peak / 2**30:.2f} |")
    count, workers, seconds, per_model, peak, reused = cached_row
    cold = next(r for r in rows if r[0] == count and r[1] == workers)
    lines += [
        f"| {count}, cache warm | {workers} | {seconds:.1f} | {seconds / base[2]:.2f} | {per_model:.1f} | {peak / 2**30:.2f} |",
        "",
        f"- A warm cache runs the {count}-model batch in {seconds / cold[2]:.2f}× the cold time ({reused} stage jobs reused): "
        "what is left is starting each process and loading each model.",
        f"- The largest single process of the whole benchmark peaked at {largest_child / 2**30:.2f} GiB RSS.",
        "- On 2 cores a second worker overlaps one model's process start and model loading with another's export and "
        "validation; it cannot double the throughput, as each worker process already uses every core for its framework.",
    ]
    results.write_text("\n".join(lines) + "\n")
    print(f"wrote {results}")


if __name__ == "__main__":
    main(sys.argv[1:])
