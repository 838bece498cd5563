"""Localisation: time and peak memory of tracing a failing ONNX artifact back to where it diverged, beside validating
the same artifact, on a small and a large PyTorch MLP, with a fault at each link of the chain.

    python -m benchmarks.localize [RESULTS_FILE]

Each model (fixtures/large_torch.py: square Linear layers with fixed-seed fp32 weights, written as a .pt2) is converted
with ``--to onnx`` in a fresh child process, the pipeline in that process so that the fault can be put into the real
export. At the conversion link, the weights of the last hidden layer are scaled by 1.5 in the ONNX file before
validation, so every value before it is compared (the worst case for the search). At the capture link, the same layer
computes x1.5 only while torch.onnx exports it (the model given as the module itself, not the .pt2): the captured
program differs from the source, and every module is run beside the program to name the first that departs. A thread samples the process's resident memory every 20 ms and
charges each sample to the stage running then. Per model: the seconds and the peak resident memory of the validation
stage and of the localisation stage, the chunks the search took and the node it named. Writes
benchmarks/results/localize.md by default.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path(__file__).parent / "results" / "localize.md"
MODELS = {"10M": 10e6, "300M": 300e6}  # 300M parameters: 1.2 GB of fp32 weights
LINKS = ("conversion", "capture")  # where the fault is put
SAMPLE_SECONDS = 0.02
GIB = 2**30


def child(pt2: str, out: str, result: str, link: str, width: int, layers: int) -> None:
    """Convert the MLP with the last hidden layer scaled at ``link``; write the measurements."""
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper

    from convert.exporters.onnx import TorchToOnnx
    from convert.pipeline.context import ConvertRequest, Progress
    from convert.pipeline.runner import run
    from fixtures.large_torch import INPUT_WIDTH, build_mlp

    real = TorchToOnnx._dynamo

    def faulty(self, job, path):
        artifact = real(self, job, path)
        model = onnx.load(str(path))
        node = [n for n in model.graph.node if n.op_type in ("MatMul", "Gemm")][-2]  # the last hidden layer
        weight = next(t for t in model.graph.initializer if t.name == node.input[1])
        weight.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(weight) * np.float32(1.5), weight.name))
        onnx.save(model, str(path))
        return artifact

    model, inputs = Path(pt2), ()
    if link == "conversion":
        TorchToOnnx._dynamo = faulty
    else:
        model, inputs = build_mlp(int(width), int(layers)), (f"x:float32[B,{INPUT_WIDTH}]",)
        last, plain = model.hidden[-1], model.hidden[-1].forward
        last.forward = lambda x: plain(x) * 1.5 if torch.onnx.is_in_onnx_export() else plain(x)
    process = psutil.Process()
    running = {"stage": "", "peaks": {}}
    done = threading.Event()

    def sample() -> None:
        while not done.wait(SAMPLE_SECONDS):
            stage = running["stage"]
            if stage:
                running["peaks"][stage] = max(running["peaks"].get(stage, 0), process.memory_info().rss)

    class Stages(Progress):
        def started(self, name: str) -> None:
            running["stage"] = name

        def finished(self, stage, detail: str = "") -> None:
            running["stage"] = ""

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    request = ConvertRequest(model=model, to=("onnx",), out=Path(out), inputs=inputs, isolate=False, cache=False, samples=1)
    report = run(request, Stages()).report
    done.set()
    sampler.join()
    (record,) = report.artifacts
    seconds = {s.name: s.seconds for s in report.stages}
    Path(result).write_text(
        json.dumps(
            {
                "seconds": seconds,
                "peaks": running["peaks"],
                "divergence": found.model_dump(exclude={"probes"}) if (found := record.detail("divergence")) else None,
                "size_bytes": record.size_bytes,
            }
        )
    )


def measure(label: str, params: float, folder: Path, link: str) -> dict:
    from fixtures.large_torch import INPUT_WIDTH, shape_for, write_mlp

    width, layers = shape_for(int(params))
    pt2 = folder / f"mlp_{label}.pt2"
    if not pt2.exists():  # one .pt2 for both links
        write_mlp(pt2, width, layers)
    result = folder / f"{label}_{link}.json"
    started = time.perf_counter()
    arguments = [str(pt2), str(folder / f"out_{label}_{link}"), str(result), link, str(width), str(layers)]
    subprocess.run([sys.executable, "-m", "benchmarks.localize", "--child", *arguments], check=True, cwd=REPO)
    found = json.loads(result.read_text())
    count = layers * width * width + 2 * INPUT_WIDTH * width
    found.update(label=label, params=count, layers=layers, width=width, link=link, wall=time.perf_counter() - started)
    return found


def render(rows: list[dict]) -> str:
    lines = [
        "# Localisation beside validation",
        "",
        f"`python -m benchmarks.localize`, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.processor() or platform.machine()}, "
        f"{os.cpu_count()} cores, {psutil.virtual_memory().total / GIB:.0f} GiB. One run per model (a figure from one run on "
        "a shared machine is a measurement, not a property of the tool). The fault, in the last hidden layer: at the "
        "conversion link its weights x1.5 in the exported graph, so the search compares every value before it; at the "
        "capture link its output x1.5 only while torch.onnx exports it, so every module runs beside the captured program.",
        "",
        "| model | link | ONNX size | validate s | localize s | validate peak RSS | localize peak RSS | ratio | chunks | compared "
        "| named node | layer |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for row in rows:
        validate, localize = row["peaks"].get("validate:onnx", 0), row["peaks"].get("localize:onnx", 0)
        found = row["divergence"] or {}
        lines.append(
            f"| {row['label']} ({row['layers']} x {row['width']}²) | {found.get('stage', '-')} | {row['size_bytes'] / GIB:.2f} GiB "
            f"| {row['seconds'].get('validate:onnx', 0):.1f} | {row['seconds'].get('localize:onnx', 0):.1f} "
            f"| {validate / GIB:.2f} GiB | {localize / GIB:.2f} GiB | {localize / max(validate, 1):.2f}x "
            f"| {found.get('chunks', '-')} | {found.get('compared', '-')} | {found.get('node') or '-'} | {found.get('layer') or '-'} |"
        )
    lines += [
        "",
        "Peak RSS is the whole process's (the source model, the ONNX graph in memory and ONNX Runtime's session), sampled "
        "while each stage ran. The validate stage includes the artifact's chain (each link's error on one sample: the "
        "captured program run once; the artifact's outputs are the first check's). Localisation uses the program the "
        "exporter captured, kept from the export (it shares the source's weights), and runs a copy of the graph with a "
        "chunk of values marked as outputs (at most 256 MiB of values a chunk). At the capture link it runs the captured program once (its outputs against "
        "the source's and the artifact's), then the source with a forward hook on every module and the program node by "
        "node, keeping each module's output: no graph value is compared.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        child(*argv[1:7])
        return
    results = Path(argv[0]) if argv else DEFAULT_RESULTS
    with tempfile.TemporaryDirectory(prefix="convert-localize-") as tmp:
        rows = [measure(label, params, Path(tmp), link) for label, params in MODELS.items() for link in LINKS]
    results.parent.mkdir(parents=True, exist_ok=True)
    results.write_text(render(rows))
    print(results.read_text())


if __name__ == "__main__":
    main(sys.argv[1:])
