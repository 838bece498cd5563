"""Export and validation cost and accuracy for every PyTorch fixture, every target.

    python -m benchmarks.export_validate [RESULTS_FILE]

Runs each fixture's .pt2 through the pipeline ``REPEATS`` times and writes, per fixture and format, the
worst max abs error over every CPU check and the median export and validation seconds, to
benchmarks/results/export_validate.md by default.
"""

from __future__ import annotations

import platform
import statistics
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import convert
from fixtures.build_torch import write_fixture
from fixtures.torch_models import FIXTURES

TARGETS = ("onnx", "torchscript", "torch_export")
REPEATS = 3
DEFAULT_RESULTS = Path(__file__).parent / "results" / "export_validate.md"


def measure(name: str, folder: Path) -> dict[str, dict[str, float]]:
    paths = write_fixture(name, folder / "models")
    runs: dict[str, dict[str, list[float]]] = {t: {"export": [], "validate": [], "error": []} for t in TARGETS}
    strategies = {}
    for repeat in range(REPEATS):
        result = convert.convert(str(paths["pt2"]), to=TARGETS, out=folder / f"{name}-{repeat}")
        if not result.passed:
            raise SystemExit(f"{name} did not pass validation: see {result.report_path}")
        stages = {s.name: s.seconds for s in result.report.stages}
        for artifact in result.report.artifacts:
            errors = [o.max_abs_error for c in artifact.checks if c.device == "cpu" for o in c.outputs if o.max_abs_error is not None]
            runs[artifact.format]["export"].append(stages[f"export:{artifact.format}"])
            runs[artifact.format]["validate"].append(stages[f"validate:{artifact.format}"])
            runs[artifact.format]["error"].append(max(errors))
            strategies[artifact.format] = artifact.strategy
    return {t: {"export_s": statistics.median(v["export"]), "validate_s": statistics.median(v["validate"]),
                "max_abs_error": max(v["error"]), "strategy": strategies[t]} for t, v in runs.items()}


def main(argv: list[str]) -> None:
    results_file = Path(argv[0]) if argv else DEFAULT_RESULTS
    lines = [
        "# Export and validation: PyTorch fixtures",
        "",
        f"Measured {datetime.now(timezone.utc):%Y-%m-%d} on {platform.machine()} with {platform.python_version()}, "
        f"CPU only; medians of {REPEATS} runs of `convert FIXTURE.pt2 --to {','.join(TARGETS)}` (python -m benchmarks.export_validate).",
        "Max abs error is the worst over every CPU check (3 shapes x 3 samples).",
        "",
        "| fixture | format | strategy | max abs error | export s | validation s |",
        "|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for name in FIXTURES:
            for fmt, row in measure(name, Path(scratch)).items():
                lines.append(f"| {name} | {fmt} | {row['strategy']} | {row['max_abs_error']:.2e} | {row['export_s']:.2f} | {row['validate_s']:.2f} |")
                print(lines[-1], flush=True)
    results_file.parent.mkdir(parents=True, exist_ok=True)
    results_file.write_text("\n".join(lines) + "\n")
    print(f"wrote {results_file}")


if __name__ == "__main__":
    main(sys.argv[1:])
