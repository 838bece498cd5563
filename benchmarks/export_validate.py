"""Export and validation cost and accuracy for every fixture of every framework, every target.

    python -m benchmarks.export_validate [RESULTS_FILE]

Runs each fixture through the pipeline ``REPEATS`` times and writes, per fixture and format, the worst
max abs error over every CPU check and the median export and validation seconds, to
benchmarks/results/export_validate.md by default.
"""

from __future__ import annotations

import platform
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import convert

REPEATS = 3
DEFAULT_RESULTS = Path(__file__).parent / "results" / "export_validate.md"


@dataclass(frozen=True)
class Suite:
    title: str
    targets: tuple[str, ...]
    command: str  # how the source is given, for the results file
    fixtures: Callable[[], list[str]]
    source: Callable[[str, Path], dict]  # fixture name, folder -> keyword arguments of convert.convert


def _torch_fixtures() -> list[str]:
    from fixtures.torch_models import FIXTURES

    return list(FIXTURES)


def _torch_source(name: str, folder: Path) -> dict:
    from fixtures.build_torch import write_fixture

    return {"model": str(write_fixture(name, folder)["pt2"])}


def _keras_fixtures() -> list[str]:
    from fixtures.keras_models import FIXTURES

    return list(FIXTURES)


def _keras_source(name: str, folder: Path) -> dict:
    from fixtures.build_keras import write_fixture
    from fixtures.keras_models import FIXTURES

    paths = write_fixture(name, folder)
    if "keras" in paths:
        return {"model": str(paths["keras"])}
    return {
        "model": f"fixtures.keras_models:{FIXTURES[name].builder}",
        "framework": "keras",
        "weights": paths["weights"],
        "inputs": FIXTURES[name].inputs,
    }


def _jax_fixtures() -> list[str]:
    from fixtures.jax_models import FIXTURES

    return list(FIXTURES)


def _jax_source(name: str, folder: Path) -> dict:
    from fixtures.build_jax import write_fixture
    from fixtures.jax_models import FIXTURES

    paths = write_fixture(name, folder)
    return {
        "model": f"fixtures.jax_models:{FIXTURES[name].model}",
        "framework": "jax",
        "params": paths.get("params"),
        "inputs": FIXTURES[name].inputs,
    }


SUITES = (
    Suite("PyTorch", ("onnx", "torchscript", "torch_export"), "`convert FIXTURE.pt2`", _torch_fixtures, _torch_source),
    Suite(
        "Keras",
        ("savedmodel", "onnx", "tflite"),
        "`convert FIXTURE.keras` (the subclassed model: its factory with `--weights`)",
        _keras_fixtures,
        _keras_source,
    ),
    Suite(
        "JAX",
        ("onnx", "savedmodel", "tflite"),
        "`convert fixtures.jax_models:FACTORY_OR_FUNCTION --framework jax [--params FILE]`",
        _jax_fixtures,
        _jax_source,
    ),
)


def measure(suite: Suite, name: str, folder: Path) -> dict[str, dict]:
    source = suite.source(name, folder / "models")
    runs: dict[str, dict[str, list[float]]] = {t: {"export": [], "validate": [], "error": []} for t in suite.targets}
    strategies = {}
    for repeat in range(REPEATS):
        result = convert.convert(to=suite.targets, out=folder / f"{name}-{repeat}", **source)
        if not result.passed:
            raise SystemExit(f"{name} did not pass validation: see {result.report_path}")
        stages = {s.name: s.seconds for s in result.report.stages}
        for artifact in result.report.artifacts:
            errors = [o.max_abs_error for c in artifact.checks if c.device == "cpu" for o in c.outputs if o.max_abs_error is not None]
            runs[artifact.format]["export"].append(stages[f"export:{artifact.format}"])
            runs[artifact.format]["validate"].append(stages[f"validate:{artifact.format}"])
            runs[artifact.format]["error"].append(max(errors))
            strategies[artifact.format] = artifact.strategy
    return {
        t: {
            "export_s": statistics.median(v["export"]),
            "validate_s": statistics.median(v["validate"]),
            "max_abs_error": max(v["error"]),
            "strategy": strategies[t],
        }
        for t, v in runs.items()
    }


def main(argv: list[str]) -> None:
    results_file = Path(argv[0]) if argv else DEFAULT_RESULTS
    lines = [
        "# Export and validation of the fixtures",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} on {platform.machine()} with Python {platform.python_version()}, "
        f"CPU only, by `python -m benchmarks.export_validate`: medians of {REPEATS} runs per fixture.",
        "Max abs error is the worst over every CPU check (3 shapes x 3 samples).",
    ]
    with tempfile.TemporaryDirectory() as scratch:
        for suite in SUITES:
            lines += [
                "",
                f"## {suite.title}: {suite.command} --to {','.join(suite.targets)}",
                "",
                "| fixture | format | strategy | max abs error | export s | validation s |",
                "|---|---|---|---|---|---|",
            ]
            for name in suite.fixtures():
                for fmt, row in measure(suite, name, Path(scratch) / suite.title).items():
                    lines.append(
                        f"| {name} | {fmt} | {row['strategy']} | {row['max_abs_error']:.2e} | {row['export_s']:.2f} | {row['validate_s']:.3f} |"
                    )
                    print(lines[-1], flush=True)
    results_file.parent.mkdir(parents=True, exist_ok=True)
    results_file.write_text("\n".join(lines) + "\n")
    print(f"wrote {results_file}")


if __name__ == "__main__":
    main(sys.argv[1:])
