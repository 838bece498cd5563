"""What a whole ``convert MODEL.pt2 --to onnx`` run costs beside a hand-written export and check of the same model.

    python -m benchmarks.overhead [RESULTS_FILE]

Writes the cnn fixture (fixtures/torch_models.py: SmallCNN, x:float32[B,3,32,32], exported at B=2) and times, each as
a fresh process, ``python -m convert cnn.pt2 --to onnx --out DIR`` (with a new, empty stage cache each run: a model it
has not seen) beside ``python -m benchmarks.handwritten_onnx_check cnn.pt2 DIR``, which does the same work by hand: the
same export, the same ONNX Runtime CPU checks (batch sizes, samples, tolerances; checked against the tool's report
every run). After one untimed run of each, ``PAIRS`` pairs are timed in alternating order (A B, B A, ...). Writes each
side's median wall seconds, each pair's ratio, the median ratio with its min–max, and where each side's seconds go
(the tool's from its stage progress lines and report, the hand-written script's from the steps it prints) to
benchmarks/results/overhead.md by default.
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path(__file__).parent / "results" / "overhead.md"
PAIRS = 6
FIXTURE = "cnn"


@dataclass
class Timed:
    seconds: float
    parts: dict[str, float] = field(default_factory=dict)  # where the seconds went, in order


def _run(command: list[str], env: dict[str, str]) -> tuple[float, dict[str, list[tuple[float, str]]]]:
    """Wall seconds of a command, and its stdout and stderr lines, each with the second it arrived."""
    lines: dict[str, list[tuple[float, str]]] = {"stdout": [], "stderr": []}
    started = time.perf_counter()
    process = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def read(name: str) -> None:
        for line in getattr(process, name):
            lines[name].append((time.perf_counter() - started, line.rstrip("\n")))

    readers = [threading.Thread(target=read, args=(name,)) for name in lines]
    for reader in readers:
        reader.start()
    process.wait()
    seconds = time.perf_counter() - started
    for reader in readers:
        reader.join()
    if process.returncode != 0:
        output = "\n".join(line for stream in lines.values() for _, line in stream)
        raise SystemExit(f"{' '.join(command)} exited {process.returncode}:\n{output[-4000:]}")
    return seconds, lines


def run_convert(model: Path, scratch: Path) -> Timed:
    """The tool's whole run; its parts: before the first stage starts (process start, imports, planning; the worker
    process starts meanwhile), each stage as its report times it (the load stage waits for the worker's imports),
    the gaps between stages, after the last stage until the summary's last line (report, worker exit, summary), and
    the process's own exit."""
    run = Path(tempfile.mkdtemp(prefix="convert-", dir=scratch))
    out = run / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONVERT_CACHE_DIR": str(run / "cache")}
    env.pop("CONVERT_NO_CACHE", None)
    seconds, lines = _run([sys.executable, "-m", "convert", str(model), "--to", "onnx", "--out", str(out)], env)
    report = json.loads((out / "report.json").read_text())
    if not report["passed"]:
        raise SystemExit(f"convert did not pass: see {out / 'report.json'}")
    _check_same_work(report)
    # progress lines off a terminal: "… STAGE" as a stage starts, "✓ STAGE (N s)" as it ends
    starts = [at for at, line in lines["stderr"] if line.startswith("… ")]
    ends = [at for at, line in lines["stderr"] if re.match(r"[✓✗-] ", line)]
    summarized = lines["stdout"][-1][0]
    stages = {s["name"]: s["seconds"] for s in report["stages"]}
    parts = {"before the first stage: process start, imports, planning": starts[0]}
    parts.update(stages)
    parts["between stages"] = ends[-1] - starts[0] - sum(stages.values())
    parts["after the last stage: report, worker exit, summary"] = summarized - ends[-1]
    parts["exit"] = seconds - summarized
    return Timed(seconds, parts)


def run_handwritten(model: Path, scratch: Path) -> Timed:
    """The hand-written script; its parts: process start and imports (until its first step), each step it times,
    and the process's exit after its last line."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = tempfile.mkdtemp(prefix="handwritten-", dir=scratch)
    seconds, lines = _run([sys.executable, "-m", "benchmarks.handwritten_onnx_check", str(model), out], env)
    printed, last = lines["stdout"][-1]
    steps = {name: float(value) for name, value in re.findall(r"(\w+) ([\d.]+) s", last)}
    return Timed(seconds, {"process start and imports": printed - sum(steps.values()), **steps, "exit": seconds - printed})


def _check_same_work(report: dict) -> None:
    """The tool ran the checks the hand-written script runs: ONNX Runtime on the CPU only, at its batch sizes and
    number of samples; otherwise the comparison is not of the same work."""
    from benchmarks.handwritten_onnx_check import SAMPLES, batch_sizes
    from fixtures.build_torch import EXPORT_SIZE

    ran = [
        (c["runtime"], c["device"], c["input_shapes"]["x"][0], c["samples"])
        for a in report["artifacts"]
        for c in a["checks"]
        if c["status"] != "skipped"
    ]
    expected = [("onnxruntime", "cpu", batch, SAMPLES) for batch in batch_sizes(EXPORT_SIZE)]
    if ran != expected:
        raise SystemExit(f"convert ran the checks {ran}, the hand-written script {expected}: update benchmarks/handwritten_onnx_check.py")


def _medians(runs: list[Timed]) -> dict[str, float]:
    return {part: statistics.median(run.parts[part] for run in runs) for part in runs[0].parts}


def main(argv: list[str]) -> None:
    from benchmarks.handwritten_onnx_check import SAMPLES, batch_sizes
    from convert.hardware import cpu_info
    from fixtures.build_torch import EXPORT_SIZE, write_fixture

    results = Path(argv[0]) if argv else DEFAULT_RESULTS
    tool: list[Timed] = []
    hand: list[Timed] = []
    orders: list[str] = []
    with tempfile.TemporaryDirectory(prefix="convert-overhead-bench-") as temp:
        scratch = Path(temp)
        model = write_fixture(FIXTURE, scratch / "model")["pt2"]
        # untimed: from here on the files both read are in the page cache
        run_convert(model, scratch)
        run_handwritten(model, scratch)
        for pair in range(PAIRS):
            if pair % 2 == 0:
                tool.append(run_convert(model, scratch))
                hand.append(run_handwritten(model, scratch))
            else:
                hand.append(run_handwritten(model, scratch))
                tool.append(run_convert(model, scratch))
            orders.append("convert, hand-written" if pair % 2 == 0 else "hand-written, convert")
            print(f"pair {pair + 1}: convert {tool[-1].seconds:.2f} s, hand-written {hand[-1].seconds:.2f} s", flush=True)

    ratios = [t.seconds / h.seconds for t, h in zip(tool, hand)]
    # each process's own exit left out: the hand-written script's teardown with torch loaded is most of its exit
    until_printed = [(t.seconds - t.parts["exit"]) / (h.seconds - h.parts["exit"]) for t, h in zip(tool, hand)]
    tool_median, hand_median = statistics.median(t.seconds for t in tool), statistics.median(h.seconds for h in hand)
    cpu = cpu_info()
    lines = [
        "# Overhead of a whole run beside a hand-written export and check",
        "",
        f"Measured {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')} on {cpu.model} ({cpu.logical_cores} CPU cores, "
        f"{cpu.usable_cores} usable), {platform.platform()}, Python {platform.python_version()}, with `python -m benchmarks.overhead`.",
        "",
        f"`python -m convert {FIXTURE}.pt2 --to onnx --out DIR` (a new, empty stage cache each run) against "
        f"`python -m benchmarks.handwritten_onnx_check {FIXTURE}.pt2 DIR`: torch.export.load, torch.onnx.export(dynamo=True) "
        f"of the program, onnx.checker, then ONNX Runtime on the CPU at the batch sizes the tool validates "
        f"({', '.join(map(str, batch_sizes(EXPORT_SIZE)))}) with {SAMPLES} random samples each, compared with the "
        "program's outputs at the tool's fp32 tolerances (checked against the "
        f"tool's report every run). Both are fresh processes, timed wall to wall in {PAIRS} pairs of alternating order "
        "after one untimed run of each.",
        "",
        "| pair | order | convert s | hand-written s | ratio |",
        "|---|---|---|---|---|",
    ]
    for index, (order, t, h, ratio) in enumerate(zip(orders, tool, hand, ratios), 1):
        lines.append(f"| {index} | {order} | {t.seconds:.2f} | {h.seconds:.2f} | {ratio:.3f} |")
    lines += [
        "",
        f"**Median: convert {tool_median:.2f} s, hand-written {hand_median:.2f} s; ratio {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}).**",
        "",
        f"Until each printed its last line, each process's own exit left out (the tool's still waits for its worker's "
        f"exit): ratio {statistics.median(until_printed):.3f} (min {min(until_printed):.3f}, max {max(until_printed):.3f}).",
        "",
        "## Where the seconds go (medians)",
        "",
        "convert: from when its progress and summary lines arrived and the stage times of its report; its worker "
        "process starts with it and imports torch while it plans, and the load stage waits for that. Hand-written: the "
        "steps it times itself, and when its last line arrived.",
        "",
        "| convert | s | hand-written | s |",
        "|---|---|---|---|",
    ]
    tool_parts, hand_parts = list(_medians(tool).items()), list(_medians(hand).items())
    for row in range(max(len(tool_parts), len(hand_parts))):
        left = tool_parts[row] if row < len(tool_parts) else ("", None)
        right = hand_parts[row] if row < len(hand_parts) else ("", None)
        lines.append(" | ".join(["", left[0], _seconds(left[1]), right[0], _seconds(right[1]), ""]).strip())
    lines.append(f"| **whole run** | **{tool_median:.2f}** | **whole run** | **{hand_median:.2f}** |")
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text("\n".join(lines) + "\n")
    print(f"wrote {results}")


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main(sys.argv[1:])
