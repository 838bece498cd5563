"""The zoo: every real architecture of fixtures/zoo.py, in every form a user holds it, through every target.

    python -m benchmarks.zoo [--only NAME ...] [--jobs N] [--results FILE] [--timeout SECONDS] [--keep FOLDER [--reuse]]

One conversion per entry x form, with all of its framework's targets: the file forms through the real CLI
(``python -m convert FILE --to ...``), the object form through ``convert.convert`` in a child process. The stage
cache is off. Each target of each run is one cell: passed (every requested symbol validated at more than one size),
failed (a check failed), fixed-shape (a requested dynamic dim was fixed: checks skipped or refused at a size),
error (no artifact: the export or the run failed) or n/a (the library cannot write that form of that model).
Writes benchmarks/results/zoo.md by default, after every conversion (an interrupted run leaves its cells so far).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from fixtures.zoo import ENTRIES, REPO, ZooEntry

DEFAULT_RESULTS = Path(__file__).parent / "results" / "zoo.md"
DEFAULT_TIMEOUT = 900
LIBRARIES = (
    "torch",
    "transformers",
    "onnx",
    "onnxruntime",
    "onnxscript",
    "tensorflow-cpu",
    "tensorflow",
    "keras",
    "tf2onnx",
    "jax",
    "flax",
    "jax2onnx",
)
STATUSES = ("passed", "failed", "fixed-shape", "error", "n/a")


@dataclass
class Cell:
    entry: str
    form: str
    target: str
    status: str
    reason: str = ""
    export_s: float | None = None
    validate_s: float | None = None
    max_abs_error: float | None = None
    sizes: str = ""  # the sizes each symbol was validated at, e.g. "B=1,2,5 S=1,7"


def _environment() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "CONVERT_NO_CACHE": "1", "COLUMNS": "200"}


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith(("error:", "Error", "ConvertError")) or "Error:" in line]
    return (errors or lines or ["(no output)"])[-1]


def _convert_flags(entry: ZooEntry) -> list[str]:
    return [
        *(f for spec in entry.inputs for f in ("--input", spec)),
        *(f for dim in entry.dims for f in ("--dim", dim)),
        *(f for bound in entry.shape_ranges for f in ("--shape-range", bound)),
    ]


def convert_object(name: str, targets: list[str], out: str) -> None:
    """The object form: build the model here and hand it to convert.convert (run in a child process)."""
    import convert
    from fixtures.zoo import build

    entry = ENTRIES[name]
    try:
        convert.convert(
            build(entry),
            inputs=list(entry.inputs),
            dims=list(entry.dims),
            shape_ranges=list(entry.shape_ranges),
            to=targets,
            out=out,
            cache=False,
            force=True,
        )
    except convert.ConvertError as error:
        raise SystemExit(f"error: {error}") from None


def run_conversion(
    entry: ZooEntry, form: str, folder: Path, timeout: float = DEFAULT_TIMEOUT, targets: tuple[str, ...] | None = None, reuse: bool = False
) -> list[Cell]:
    """Write the entry in ``form``, convert it to every target (default: its framework's) in one run, and return one
    cell per target; with ``reuse``, a report already in ``folder`` is classified again instead."""
    folder.mkdir(parents=True, exist_ok=True)
    out = folder / "out"
    targets = targets or entry.targets
    if reuse and (out / "report.json").exists():
        report = json.loads((out / "report.json").read_text())
        return [classify(report, entry, form, t) for t in targets]
    if form == "object":
        command = [
            sys.executable,
            "-c",
            f"from benchmarks.zoo import convert_object; convert_object({entry.name!r}, {list(targets)!r}, {str(out)!r})",
        ]
    else:
        written = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, json; from fixtures.zoo import ENTRIES, source_arguments; "
                "print(json.dumps(source_arguments(ENTRIES[sys.argv[1]], sys.argv[2], __import__('pathlib').Path(sys.argv[3]))))",
                entry.name,
                form,
                str(folder / "model"),
            ],
            cwd=REPO,
            env=_environment(),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if written.returncode != 0:
            return [Cell(entry.name, form, t, "n/a", f"the form cannot be written: {_last_line(written.stderr)}") for t in targets]
        source = json.loads(written.stdout.strip().splitlines()[-1])
        command = [
            sys.executable,
            "-m",
            "convert",
            source["model"],
            "--to",
            ",".join(targets),
            "--out",
            str(out),
            "--no-cache",
            "--force",
            "--quiet",
            *source["flags"],
            *_convert_flags(entry),
        ]
    try:
        done = subprocess.run(command, cwd=REPO, env=_environment(), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [Cell(entry.name, form, t, "error", f"the run passed the {timeout:.0f} s timeout") for t in targets]
    report_path = out / "report.json"
    if not report_path.exists():
        reason = f"exit {done.returncode}, no report: {_last_line(done.stderr + done.stdout)}"
        return [Cell(entry.name, form, t, "error", reason) for t in targets]
    report = json.loads(report_path.read_text())
    return [classify(report, entry, form, t) for t in targets]


# First lines that only say where an error surfaced (TensorFlow's "in user code:", torch.onnx's step): the root cause
# is the last exception line of the text.
WRAPPER_ERRORS = ("in user code:", "Failed to decompose", "Failed to export")
EXCEPTION_LINE = re.compile(r"^(<class '[\w.]+'>|[\w.]*(Error|Exception)): \S")


def _one_line(text: str, limit: int = 220) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if lines and any(marker in lines[0] for marker in WRAPPER_ERRORS):
        causes = [line for line in lines[1:] if EXCEPTION_LINE.match(line)]
        wrapper = lines[0].split(":")[0]
        lines = [causes[-1] if causes[-1].startswith(wrapper) else f"{wrapper}: {causes[-1]}"] if causes else lines
    line = " ".join(" ".join(lines).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _symbols(entry: ZooEntry) -> list[str]:
    from convert.specs import parse_input_specs

    return list(dict.fromkeys(s for spec in parse_input_specs(entry.inputs) for s in spec.symbols))


def sizes_checked(artifact: dict, symbol: str) -> set[int]:
    """The sizes a symbol took in an artifact's passed CPU checks."""
    shapes = [c["shape"] for c in artifact.get("checks", []) if c["device"] == "cpu" and c["status"] == "passed"]
    return {int(part.split("=")[1]) for shape in shapes for part in shape.split(",") if part.startswith(symbol + "=")}


def _fixed_dim(reason: str) -> bool:
    """A check skipped at a size the artifact cannot take, or failed because the artifact fixes a dim asked dynamic."""
    return "not run at this shape" in reason or "asked dynamic" in reason


def classify(report: dict, entry: ZooEntry, form: str, target: str) -> Cell:
    """One target's cell from a run's report.json."""
    return Cell(entry.name, form, target, **artifact_verdict(report, target, _symbols(entry)))


def artifact_verdict(report: dict, target: str, symbols: list[str], error_line: Callable[[str], str] = _one_line) -> dict:
    """A cell's fields for the report's artifact of ``target``: status, reason, the stage seconds, the worst error and
    the sizes each symbol was validated at (``error_line`` makes an export error one line)."""
    stages = {s["name"]: s for s in report.get("stages", [])}
    export, validate = stages.get(f"export:{target}", {}), stages.get(f"validate:{target}", {})
    verdict = {"status": "error", "export_s": export.get("seconds"), "validate_s": validate.get("seconds")}
    artifact = next((a for a in report.get("artifacts", []) if a["format"] == target and not a.get("optimization")), None)
    if artifact is None or not artifact.get("path"):
        failed_stages = [s for s in report.get("stages", []) if s["status"] == "failed"]
        attempts = [a["error"] for a in (artifact or {}).get("attempts", []) if a.get("error")]
        verdict["reason"] = error_line(
            export.get("error")
            or (attempts[0] if attempts else "")
            or report.get("error")
            or (failed_stages[0]["error"] if failed_stages else "")
            or export.get("reason")
            or "no artifact"
        )
        return verdict
    errors = [o["max_abs_error"] for c in artifact.get("checks", []) for o in c.get("outputs", []) if o.get("max_abs_error") is not None]
    verdict["max_abs_error"] = max(errors) if errors else None
    verdict["sizes"] = " ".join(f"{s}={','.join(map(str, sorted(sizes_checked(artifact, s))))}" for s in symbols)
    checks = artifact.get("checks", [])
    failed = [c for c in checks if c["status"] == "failed"]
    skipped = [c for c in checks if c["status"] == "skipped" and not c.get("device_unsupported") and c["device"] == "cpu"]
    if failed:
        check = failed[0]
        output_reasons = [o["reason"] for o in check.get("outputs", []) if o["status"] == "failed" and o.get("reason")]
        reason = check.get("reason") or (output_reasons[0] if output_reasons else "a check failed")
        status = "fixed-shape" if _fixed_dim(reason) else "failed"
        return {**verdict, "status": status, "reason": _one_line(f"{check['runtime']} {check['shape']}: {reason}")}
    if skipped:
        reason = _one_line(f"{skipped[0]['runtime']} {skipped[0]['shape']}: {skipped[0]['reason']}")
        return {**verdict, "status": "fixed-shape", "reason": reason}
    if not artifact.get("passed"):
        return {**verdict, "status": "failed", "reason": _one_line(report.get("error") or "the artifact did not pass")}
    once = [s for s in symbols if len(sizes_checked(artifact, s)) < 2]
    if once:
        return {**verdict, "status": "fixed-shape", "reason": f"validated at one size of {', '.join(once)} only"}
    return {**verdict, "status": "passed"}


def run_zoo(
    names: Iterable[str],
    jobs: int,
    timeout: float,
    scratch: Path,
    progress: Callable[[list[Cell], int, int], None] = lambda cells, done, total: None,
    reuse: bool = False,
) -> list[Cell]:
    """Every entry x form, ``jobs`` at a time; ``progress`` gets the cells so far (in work order) after each conversion."""
    order = ("keras", "jax", "torch")
    work = [(ENTRIES[n], form) for n in sorted(names, key=lambda n: order.index(ENTRIES[n].framework)) for form in ENTRIES[n].forms]
    results: list[list[Cell] | None] = [None] * len(work)
    lock = threading.Lock()

    def one(index: int) -> None:
        entry, form = work[index]
        started = time.monotonic()
        cells = run_conversion(entry, form, scratch / f"{entry.name}-{form}", timeout, reuse=reuse)
        with lock:
            results[index] = cells
            print(
                f"{entry.name:20} {form:12} {time.monotonic() - started:6.1f}s  " + "  ".join(f"{c.target}:{c.status}" for c in cells),
                flush=True,
            )
            progress([c for r in results if r for c in r], sum(r is not None for r in results), len(work))

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, range(len(work))))
    return [c for r in results if r for c in r]


@dataclass(frozen=True)
class Limitation:
    """A library limitation that keeps cells from passing: matched by a fragment of the cell's reason."""

    fragment: str
    library: str  # the distribution whose version the table names
    why: str


LIMITATIONS = (
    Limitation(
        "vhlo.dynamic_gather_v1",
        "tensorflow-cpu",
        "the TFLite converter has no vhlo.dynamic_gather, which JAX's shape-polymorphic export emits for an embedding "
        "lookup or a position table sliced to a symbolic length",
    ),
    Limitation(
        "Runtime assertion failed for expression u1",
        "torch",
        "TS2EPConverter (torch._export.converter) turns a traced model's sizes into data-dependent values; the program "
        "torch.export makes from it asserts them at least 2 (or 8) at run time, so it refuses a sequence or batch of 1",
    ),
    Limitation(
        "output 'hidden'",
        "jax2onnx",
        "its masked attention renormalises the softmax and gives 0 for a query row whose keys are all masked (a padded "
        "position), where flax's dot_product_attention averages every value: the artifact differs from the model there",
    ),
)


def limitation_of(cell, known_ones: tuple[Limitation, ...] = LIMITATIONS) -> Limitation | None:
    """The known limitation a cell that did not pass names in its reason, if any."""
    return next((known for known in known_ones if known.fragment in cell.reason), None) if cell.status != "passed" else None


def _version(distribution: str) -> str:
    try:
        return f"{distribution} {metadata.version(distribution)}"
    except metadata.PackageNotFoundError:
        return distribution


def _versions(libraries: tuple[str, ...] = LIBRARIES) -> str:
    found = {}
    for name in libraries:
        try:
            found.setdefault(name.removesuffix("-cpu"), f"{name} {metadata.version(name)}")
        except metadata.PackageNotFoundError:
            continue
    return ", ".join(found.values())


def _cpu() -> str:
    try:
        names = [line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")]
    except OSError:
        names = []
    return f"{os.cpu_count()} cores, {names[0] if names else platform.processor() or platform.machine()}"


def _number(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def render(cells: list[Cell], jobs: int, seconds: float, command: str, progress: str = "", reused: bool = False) -> str:
    counted = [c for c in cells if c.status != "n/a"]
    passed = sum(c.status == "passed" for c in counted)
    tally = ", ".join(f"{sum(c.status == s for c in cells)} {s}" for s in STATUSES)
    lines = [
        "# The zoo: real architectures, every form, every target",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `{command}` ({jobs} conversions at a time, stage cache off, "
        f"{'the reports kept by an earlier run classified again' if reused else f'{seconds / 60:.0f} min'}) on {_cpu()}, {platform.machine()}, "
        f"Python {platform.python_version()}, CPU only.",
        f"Libraries: {_versions()}.",
        *([f"**Partial: {progress}.**"] if progress else []),
        "",
        f"**{passed} / {len(counted)} cells passed ({100 * passed / max(len(counted), 1):.1f}%)**: {tally}. "
        "A cell is one target of one conversion of one entry x form; n/a cells (a form the library cannot write) are not counted.",
        "A pass means every check passed with every requested symbol validated at two sizes or more (the `sizes` column).",
        "Max abs error is the worst over every check; export and validation seconds are the report's stages.",
    ]
    by_entry: dict[str, list[Cell]] = {}
    for cell in cells:
        by_entry.setdefault(cell.entry, []).append(cell)
    for framework in ("torch", "keras", "jax"):
        names = [n for n in by_entry if ENTRIES[n].framework == framework]
        if not names:
            continue
        lines += [
            "",
            f"## {framework}: targets {', '.join(ENTRIES[names[0]].targets)}",
            "",
            "| entry | form | target | status | export s | validation s | max abs error | sizes | reason |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name in names:
            for c in by_entry[name]:
                reason = c.reason.replace("|", "\\|")
                lines.append(
                    f"| {c.entry} | {c.form} | {c.target} | {c.status} | {_number(c.export_s, '.2f')} | "
                    f"{_number(c.validate_s, '.2f')} | {_number(c.max_abs_error, '.2e')} | {c.sizes} | {reason} |"
                )
    failing = [c for c in counted if c.status != "passed"]
    if failing:
        lines += ["", "## Why the other cells do not pass", "", "| library | cells | limitation |", "|---|---|---|"]
        for known in LIMITATIONS:
            hit = [c for c in failing if limitation_of(c) is known]
            if hit:
                where = ", ".join(f"{c.entry} {c.form} → {c.target}" for c in hit)
                lines.append(f"| {_version(known.library)} | {len(hit)}: {where} | {known.why} |")
        unknown = [c for c in failing if limitation_of(c) is None]
        if unknown:
            lines.append(
                f"| (not known) | {len(unknown)}: {', '.join(f'{c.entry} {c.form} → {c.target}' for c in unknown)} | see the reason column |"
            )
    lines += ["", "## Entries", "", "| entry | family | inputs | dims | note |", "|---|---|---|---|---|"]
    for name in by_entry:
        entry = ENTRIES[name]
        inputs = "<br>".join(f"`{spec}`" for spec in entry.inputs)
        lines.append(f"| {name} | {entry.family} | {inputs} | {' '.join((*entry.dims, *entry.shape_ranges))} | {entry.note} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(ENTRIES), metavar="NAME", help="entries to run (default: all)")
    parser.add_argument("--jobs", type=int, default=2, help="conversions at a time (default: 2)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per conversion (default: %(default)s)")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help="the Markdown file to write (after every conversion)")
    parser.add_argument("--keep", type=Path, default=None, metavar="FOLDER", help="keep every model file, artifact and report here")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: classify the reports already kept there again, run only the conversions that have none",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    command = shlex.join(["python", "-m", "benchmarks.zoo", *argv])
    args.results.parent.mkdir(parents=True, exist_ok=True)

    def write(cells: list[Cell], done: int, total: int) -> None:
        progress = f"{done} of {total} conversions so far" if done < total else ""
        args.results.write_text(render(cells, args.jobs, time.monotonic() - started, command, progress, reuse))

    reuse = args.reuse and args.keep is not None
    with tempfile.TemporaryDirectory(prefix="zoo-") as scratch:
        cells = run_zoo(args.only or list(ENTRIES), args.jobs, args.timeout, args.keep or Path(scratch), write, reuse)
    passed = sum(c.status == "passed" for c in cells)
    print(f"{passed} / {sum(c.status != 'n/a' for c in cells)} cells passed; wrote {args.results}")


if __name__ == "__main__":
    main(sys.argv[1:])
