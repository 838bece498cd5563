"""What an engineer writes by hand for what ``convert MODEL.pt2 --to onnx`` does: the baseline of benchmarks/overhead.py.

    python -m benchmarks.handwritten_onnx_check MODEL.pt2 OUT_DIR

Loads the torch.export program, exports it with torch.onnx.export(dynamo=True) (the program's own dynamic dims), saves
and checks OUT_DIR/MODEL.onnx, then runs it with ONNX Runtime on the CPU at the batch sizes and number of random
samples convert validates (the export batch, 1 and 2 × export + 1; 3 samples each), each compared with the program's
own outputs at convert's default fp32 tolerances. Exits 1 when a check fails. Prints the seconds of each step.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import torch

SAMPLES = 3
ATOL, RTOL = 1e-4, 1e-3


def batch_sizes(export_batch: int) -> tuple[int, ...]:
    """The batch sizes convert checks a dynamic batch at: the export size, the smallest, and past the export size."""
    return tuple(dict.fromkeys((export_batch, 1, 2 * export_batch + 1)))


def main(argv: list[str]) -> None:
    model_path, out = Path(argv[0]), Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    steps, started = {}, time.perf_counter()

    def step(name: str) -> None:
        nonlocal started
        now = time.perf_counter()
        steps[name], started = now - started, now

    program = torch.export.load(str(model_path))
    step("load")
    onnx_path = out / f"{model_path.stem}.onnx"
    torch.onnx.export(program, dynamo=True).save(str(onnx_path))
    onnx.checker.check_model(str(onnx_path))
    step("export")

    module = program.module()
    (example,) = program.example_inputs[0]
    session = onnxruntime.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    (input_name,) = (i.name for i in session.get_inputs())
    rng = np.random.default_rng(0)
    worst = 0.0
    for batch in batch_sizes(example.shape[0]):
        for _ in range(SAMPLES):
            x = rng.standard_normal((batch, *example.shape[1:]), dtype=np.float32)
            with torch.inference_mode():
                expected = module(torch.from_numpy(x)).numpy()
            (actual,) = session.run(None, {input_name: x})
            if actual.shape != expected.shape or not np.allclose(actual, expected, rtol=RTOL, atol=ATOL):
                raise SystemExit(
                    f"batch {batch}: ONNX Runtime's output differs from the program's by {np.abs(actual - expected).max():.2e}"
                )
            worst = max(worst, float(np.abs(actual - expected).max()))
    step("check")
    print(
        f"{onnx_path}: passed, max abs error {worst:.1e}; " + ", ".join(f"{name} {seconds:.3f} s" for name, seconds in steps.items()),
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
