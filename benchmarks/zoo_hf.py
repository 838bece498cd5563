"""The second zoo: third-party models as their libraries' users save them, each pass checked independently.

    python -m benchmarks.zoo_hf [--only NAME ...] [--jobs N] [--results FILE] [--timeout SECONDS] [--keep FOLDER [--reuse]]

One cell per entry of fixtures/zoo_hf.py, in three child processes: the entry is written by its library's own saving
call (a builder that fails is an error cell with its reason); the real CLI converts it to ONNX (``python -m convert
MODEL --to onnx``, stage cache off); its report.json is classified as benchmarks/zoo.py classifies one: passed (every
check passed, every symbol validated at two sizes or more), failed, fixed-shape or error. Then every passed cell gets
the truth check: the written ONNX file runs in ONNX Runtime at sizes the tool's validation did not use (read from the
report's checks) against the library's own eager model loaded from the saved folder, and agrees or CONTRADICTS the
pass (or is not run, with why). A decoder decodes two steps from a past longer than every window its config declares,
built by the eager model, and its logits and presents are compared with the eager model's own.

Writes its own section of benchmarks/results/zoo.md (between ``<!-- zoo-hf -->`` and ``<!-- /zoo-hf -->``, appended when
absent; the rest of the file is left as it is) after every entry: an interrupted run leaves its cells so far.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.zoo import Limitation, _cpu, _last_line, _number, _one_line, _version, _versions, artifact_verdict, limitation_of
from fixtures.zoo import REPO
from fixtures.zoo_hf import ENTRIES, KERAS_MODULE, HfEntry

DEFAULT_RESULTS = Path(__file__).parent / "results" / "zoo.md"
DEFAULT_TIMEOUT = 900
TRUTH_TIMEOUT = 600
BUILD_TIMEOUT = 600
BEGIN, END = "<!-- zoo-hf -->", "<!-- /zoo-hf -->"
LIBRARIES = (
    "torch",
    "transformers",
    "peft",
    "sentence-transformers",
    "diffusers",
    "keras",
    "tensorflow-cpu",
    "tensorflow",
    "onnx",
    "onnxruntime",
    "onnxscript",
)
STATUSES = ("passed", "failed", "fixed-shape", "error")
AGREES, CONTRADICTS, NOT_RUN = "agrees", "CONTRADICTS", "not run"


@dataclass
class Cell:
    entry: str
    status: str
    reason: str = ""
    export_s: float | None = None
    validate_s: float | None = None
    max_abs_error: float | None = None  # the tool's own, worst over its checks
    sizes: str = ""  # the sizes each symbol was validated at, e.g. "B=1,2,5 S=1,7,15"
    truth: str = ""  # agrees / CONTRADICTS / not run ("" for a cell that did not pass)
    truth_error: float | None = None  # the truth check's worst error
    truth_sizes: str = ""
    truth_why: str = ""
    truth_budget: str = ""
    seconds: float | None = None  # the whole cell: build, conversion, truth check
    domains: str = ""  # what each float input was drawn from, and why (the report's source.input_domains)
    defaulted: str = ""  # forward inputs left at their defaults, as the report's notes name them ("none" where none)


def _environment(extra_path: str | None = None) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(REPO), extra_path) if p)
    return {**os.environ, "PYTHONPATH": path, "CONVERT_NO_CACHE": "1", "COLUMNS": "200"}


# ---- one cell: build, convert, classify, check -------------------------------------------------------------------


def _child(code: str, *args: str, cwd: Path | str = REPO, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, env=_environment(), capture_output=True, text=True, timeout=timeout)


def build(entry: HfEntry, folder: Path, timeout: float = BUILD_TIMEOUT) -> dict:
    """Write the entry into ``folder`` in a child process; its JSON (model, flags, cwd), or a RuntimeError."""
    code = "import json, sys, pathlib; from fixtures.zoo_hf import write; print(json.dumps(write(sys.argv[1], pathlib.Path(sys.argv[2]))))"
    try:
        done = _child(code, entry.name, str(folder), timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the builder passed the {timeout:.0f} s timeout") from None
    if done.returncode != 0:
        raise RuntimeError(f"the builder failed: {_one_line(_last_line(done.stderr))}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_entry(entry: HfEntry, folder: Path, timeout: float = DEFAULT_TIMEOUT, reuse: bool = False) -> Cell:
    """Build, convert, classify and (for a pass) check one entry in ``folder``."""
    started = time.monotonic()
    folder.mkdir(parents=True, exist_ok=True)
    out, written_file = folder / "out", folder / "written.json"
    cell = _run_entry(entry, folder, out, written_file, timeout, reuse)
    cell.seconds = time.monotonic() - started
    return cell


def _run_entry(entry: HfEntry, folder: Path, out: Path, written_file: Path, timeout: float, reuse: bool) -> Cell:
    if reuse and (out / "report.json").exists() and written_file.exists():
        written = json.loads(written_file.read_text())
    else:
        shutil.rmtree(folder / "model", ignore_errors=True)  # what an earlier run kept: the builders write a fresh folder
        try:
            written = build(entry, folder / "model")
        except RuntimeError as error:
            return Cell(entry.name, "error", str(error))
        written_file.write_text(json.dumps(written))
        command = [
            sys.executable,
            "-m",
            "convert",
            written["model"],
            "--to",
            "onnx",
            "--out",
            str(out),
            "--no-cache",
            "--force",
            "--quiet",
            *written["flags"],
        ]
        try:
            done = subprocess.run(command, cwd=written["cwd"] or REPO, env=_environment(), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return Cell(entry.name, "error", f"the run passed the {timeout:.0f} s timeout")
        if not (out / "report.json").exists():
            return Cell(entry.name, "error", f"exit {done.returncode}, no report: {_one_line(_last_line(done.stderr + done.stdout), 400)}")
    judged = out / "report.json"
    report = json.loads(judged.read_text())
    if report.get("composite") in JUDGED_COMPONENT:
        # the folder converts as its components; the entry's network is one of them, judged by its own report
        component = JUDGED_COMPONENT[report["composite"]]
        judged = out / next(c["report"] for c in report["components"] if c["name"] == component)
        report = json.loads(judged.read_text())
    cell = classify(report, entry.name)
    if cell.status == "passed":
        truth = run_truth(entry, written, judged)
        cell.truth, cell.truth_error, cell.truth_sizes = truth["verdict"], truth.get("max_error"), truth.get("sizes", "")
        cell.truth_why, cell.truth_budget = truth.get("why", ""), truth.get("budget", "")
    return cell


# the component of a composite folder whose artifact the truth check runs: an encoder-decoder's decoder with its cache
# (the seq2seq check), a dual encoder's joint model (both towers, as the architecture class runs them)
JUDGED_COMPONENT = {"encoder-decoder": "decoder_with_past", "dual-encoder": "joint"}


def run_truth(entry: HfEntry, written: dict, report: Path, timeout: float = TRUTH_TIMEOUT) -> dict:
    """The truth check in a child process (in the folder the conversion ran in); a crash or a timeout is 'not run'."""
    code = "import sys; from benchmarks.zoo_hf import truth_main; truth_main(sys.argv[1:])"
    try:
        done = _child(code, entry.name, written["model"], str(report), cwd=written["cwd"] or REPO, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"verdict": NOT_RUN, "why": f"the truth check passed the {timeout:.0f} s timeout"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"verdict": NOT_RUN, "why": f"the truth check crashed (exit {done.returncode}): {_one_line(_last_line(done.stderr))}"}
    return json.loads(lines[-1])


SUMMARY = "## Exception summary"  # torch.onnx's errors: the root cause is the first exception of this part
CLASS_LINE = re.compile(r"^<class '(?:[\w.]+\.)?(\w+)'>: (.*)$")


def _reason(text: str) -> str:
    """One line of an error: the root cause torch.onnx names in its exception summary, else benchmarks.zoo's line."""
    if SUMMARY in text:
        causes = [CLASS_LINE.match(line.strip()) for line in text.split(SUMMARY, 1)[1].splitlines()]
        causes = [c for c in causes if c]
        if causes:
            return _one_line(f"{text.split(':', 1)[0]} ({causes[0][1]}): {causes[0][2]}", 300)
    return _one_line(text, 300)


def _symbols(report: dict) -> list[str]:
    from convert.specs import parse_input_specs

    specs = parse_input_specs(report.get("source", {}).get("inputs") or [])
    return list(dict.fromkeys(s for spec in specs for s in spec.symbols))


DEFAULTED_NOTE = "forward inputs left at their defaults, not inputs of the artifact: "


def classify(report: dict, name: str) -> Cell:
    """The cell of the report's ONNX artifact, as benchmarks.zoo judges one (symbols from the report's inputs), with the
    domains its inputs were drawn from and the forward inputs the report says were left at their defaults."""
    cell = Cell(name, **artifact_verdict(report, "onnx", _symbols(report), _reason))
    domains = (report.get("source") or {}).get("input_domains") or []
    cell.domains = "; ".join(
        f"{d['name']}: {d['drawn']}" + ("" if d.get("source") in ("default", "the source's input specs") else f" ({d['source']})")
        for d in domains
        if d.get("drawn", "").startswith(("uniform", "standard normal"))
    )
    defaulted = [note.removeprefix(DEFAULTED_NOTE) for note in report.get("notes") or [] if note.startswith(DEFAULTED_NOTE)]
    cell.defaulted = "; ".join(re.sub(r" \([^()]*(?:\([^()]*\)[^()]*)*\)", "", d) for d in defaulted) or "none"
    return cell


def run_zoo(
    names: Iterable[str],
    jobs: int,
    timeout: float,
    scratch: Path,
    progress: Callable[[list[Cell], int, int], None] = lambda cells, done, total: None,
    reuse: bool = False,
) -> list[Cell]:
    """Every entry, ``jobs`` at a time; ``progress`` gets the cells so far (in entry order) after each one."""
    work = [ENTRIES[n] for n in ENTRIES if n in set(names)]
    results: list[Cell | None] = [None] * len(work)
    lock = threading.Lock()

    def one(index: int) -> None:
        entry = work[index]
        cell = run_entry(entry, scratch / entry.name, timeout, reuse)
        with lock:
            results[index] = cell
            truth = (
                f"  truth: {cell.truth}" + (f" ({cell.truth_why})" if cell.truth != AGREES and cell.truth_why else "") if cell.truth else ""
            )
            print(f"{entry.name:22} {cell.seconds:6.1f}s  {cell.status}{truth}" + (f"  {cell.reason}" if cell.reason else ""), flush=True)
            progress([c for c in results if c], sum(c is not None for c in results), len(work))

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, range(len(work))))
    return [c for c in results if c]


# ---- the truth check (run in a child process) --------------------------------------------------------------------


class NotRun(Exception):
    """The truth check cannot run: its reason."""


class Contradiction(Exception):
    """The artifact does not do what the library's model does: how."""

    def __init__(self, why: str, max_error: float | None = None):
        super().__init__(why)
        self.max_error = max_error


# Per element |onnx - eager| <= ATOL * max(1, |eager|): absolute up to 1, relative above. Per the artifact's dtype.
BUDGETS = {"float32": 1e-4, "float16": 5e-3, "bfloat16": 3e-2}
PRECISIONS = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}
# sizes tried in this order for each symbol: the first outside the sizes the tool validated and inside its bounds
PREFERRED = {
    "B": (3, 4, 6, 7, 9),
    "S": (23, 19, 29, 13, 31, 11),
    "C": (3, 4, 6),
    "T": (777, 901, 613, 1001),
    "E": (23, 19, 29, 13),
    "H": (40, 56, 24),
    "W": (48, 24, 56),
}
OTHER = (23, 19, 29, 13, 11, 7, 5, 3)
SMALL = 100  # an output whose values stay below SMALL x the budget is one the budget tells apart only coarsely
WINDOW_FIELDS = ("sliding_window", "attention_chunk_size", "window_size", "local_attention")


@dataclass
class Context:
    entry: HfEntry
    model: Path
    onnx: Path
    specs: tuple  # the report's input specs (names, dtypes, which dims are symbols, value domains)
    validated: dict[str, set[int]]  # the sizes each symbol took in the tool's checks (shape and generation)
    bounds: dict[str, tuple[int, int]]
    dtype: str  # the artifact's float dtype, from its precision
    sizes: dict[str, int | str]  # what this check ran at, for the table
    outputs: list[str] = field(default_factory=list)  # the source's output names, as the report gives them
    notes: list[str] = field(default_factory=list)
    max_error: float = 0.0
    compared: int = 0

    @property
    def budget(self) -> float:
        return BUDGETS[self.dtype]

    def pick(self, symbol: str, preferred: Iterable[int] | None = None, low: int = 1, high: int | None = None) -> int:
        """A size of ``symbol`` the tool's validation did not use, inside its bounds and ``low..high``."""
        used = self.validated.get(symbol, set())
        bound_low, bound_high = self.bounds.get(symbol, (1, None))
        low = max(low, bound_low or 1)
        highs = [h for h in (high, bound_high) if h is not None]
        high = min(highs) if highs else None
        for size in preferred or PREFERRED.get(symbol, OTHER):
            if size not in used and size >= low and (high is None or size <= high):
                self.sizes[symbol] = size
                return size
        raise NotRun(f"no size of {symbol} outside the validated {sorted(used)} within {low}..{high}")

    def compare(self, name: str, got, want) -> None:
        """One output of the artifact against the eager model's; a Contradiction where it is out of budget."""
        import numpy as np

        want = np.asarray(want, dtype=np.float64) if want.dtype.kind == "f" else np.asarray(want)
        got = np.asarray(got, dtype=np.float64) if got.dtype.kind == "f" else np.asarray(got)
        if got.shape != want.shape:
            raise Contradiction(f"{name} has shape {list(got.shape)} where the library's model gives {list(want.shape)}")
        nan_got, nan_want = np.isnan(got) if got.dtype.kind == "f" else False, np.isnan(want) if want.dtype.kind == "f" else False
        if np.any(nan_got != nan_want):
            raise Contradiction(f"{name}: NaN where the library's model has none (or the reverse)")
        error, allowed = _error(got, want, self.budget)
        worst = float(error.max()) if error.size else 0.0
        scale = float(np.nanmax(np.abs(want))) if want.size and want.dtype.kind == "f" else None
        if scale is not None and scale < SMALL * self.budget:
            self.notes.append(f"{name.split(' (')[0]} is at most {scale:.1e}: the budget is coarse for it")
        self.max_error, self.compared = max(self.max_error, worst), self.compared + 1
        if np.any(error > allowed):
            index = np.unravel_index(int(np.argmax(error - allowed)), error.shape)
            raise Contradiction(
                f"{name} differs by {worst:.3g} (at {list(map(int, index))}: {got[index]:.6g} where the library's model gives "
                f"{want[index]:.6g})",
                worst,
            )


def _error(got, want, budget: float):
    """|got - want| per element (0 where both are NaN) and what the budget allows there."""
    import numpy as np

    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    error = np.where(np.isnan(got) & np.isnan(want), 0.0, np.abs(got - want))
    return error, budget * np.maximum(1.0, np.abs(np.nan_to_num(want)))


def truth_main(argv: list[str]) -> None:
    """The truth check of one passed cell: NAME MODEL REPORT; prints its verdict as one JSON line."""
    name, model, report = argv
    print(json.dumps(truth_check(ENTRIES[name], Path(model), json.loads(Path(report).read_text()))), flush=True)


def _validated(artifact: dict, symbols: list[str]) -> dict[str, set[int]]:
    """Every size each symbol took in the tool's CPU checks, with the pasts its generation check went through."""
    sizes = {}
    for symbol in symbols:
        shapes = [c["shape"] for c in artifact.get("checks", []) if c["device"] == "cpu" and c.get("kind") != "generation"]
        sizes[symbol] = {int(part.split("=")[1]) for shape in shapes for part in shape.split(",") if part.startswith(symbol + "=")}
    for check in artifact.get("checks", []):
        past = re.search(r"past (\d+)\.\.(\d+)", check.get("shape", "")) if check.get("kind") == "generation" else None
        if past:
            sizes.setdefault("P", set()).update(range(int(past[1]), int(past[2]) + 1))
    return sizes


def truth_check(entry: HfEntry, model: Path, report: dict) -> dict:
    from convert.specs import parse_input_specs

    artifact = next(a for a in report["artifacts"] if a["format"] == "onnx" and not a.get("optimization"))
    specs = parse_input_specs(report["source"]["inputs"])
    symbols = list(dict.fromkeys(s for spec in specs for s in spec.symbols))
    bounds = {k: tuple(v) for k, v in (artifact.get("dim_bounds") or {}).items()}
    dtype = PRECISIONS.get(artifact.get("precision") or "fp32", "float32")
    context = Context(entry, model, Path(artifact["path"]), specs, _validated(artifact, symbols), bounds, dtype, {})
    context.outputs = list(report["source"].get("outputs") or [])
    budget = f"|Δ| ≤ {BUDGETS[dtype]:g}·max(1, |eager|), {dtype}"
    saved = _saved_dtype(model)
    if saved and saved != dtype:
        context.notes.append(f"the folder holds {saved} weights, the artifact is {dtype}: the eager model is loaded in {dtype}")
    try:
        CHECKS[entry.check](context)
        if not context.compared:
            raise NotRun("no output of the artifact has a counterpart in the library's model")
        verdict, why = AGREES, f"{context.compared} outputs compared"
    except Contradiction as contradiction:
        verdict, why = CONTRADICTS, str(contradiction)
        if contradiction.max_error is not None:
            context.max_error = max(context.max_error, contradiction.max_error)
    except NotRun as reason:
        verdict, why = NOT_RUN, str(reason)
    except Exception as error:  # noqa: BLE001 - the check's own failure is a reason, not a verdict
        verdict, why = (
            NOT_RUN,
            f"the check failed: {type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}",
        )
    if context.notes:
        why += "; " + "; ".join(dict.fromkeys(context.notes))
    sizes = " ".join(f"{k}={v}" for k, v in context.sizes.items())
    return {"verdict": verdict, "max_error": context.max_error if context.compared else None, "sizes": sizes, "why": why, "budget": budget}


def _saved_dtype(model: Path) -> str | None:
    """The dtype a transformers folder's config says its weights were saved in."""
    config = model / "config.json" if model.is_dir() else None
    if config is None or not config.exists():
        return None
    values = json.loads(config.read_text())
    return values.get("dtype") or values.get("torch_dtype")


# feeds


def _rng():
    import numpy as np

    return np.random.default_rng(2024)


def _padded(shape: tuple[int, ...], rng):
    """A tokenizer's padding mask: each row ones then zeros, at least one one, the first row whole."""
    import numpy as np

    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    lengths = rng.integers(1, shape[-1] + 1, size=rows)
    lengths[0] = shape[-1]
    mask = (np.arange(shape[-1])[None, :] < lengths[:, None]).astype(np.int64)
    return mask.reshape(shape)


def _feed(context: Context, sizes: dict[str, int], rng) -> dict:
    """Inputs for every spec at ``sizes``: token ids and classes in their domain, masks as a tokenizer pads, floats
    standard normal (or uniform in their domain)."""
    from convert.validators.inputs import ordered_boxes

    feed = {}
    for spec in context.specs:
        shape = spec.shape(sizes)
        if spec.is_integer and spec.name.endswith("mask") and spec.low in (None, 0) and spec.high in (None, 1):
            feed[spec.name] = _padded(shape, rng).astype(spec.dtype)
        elif spec.dtype == "bool":
            feed[spec.name] = rng.integers(0, 2, size=shape).astype(bool)
        elif spec.is_integer:
            low, high = (int(spec.low), int(spec.high)) if spec.low is not None else (0, 9)
            values = rng.integers(low, high + 1, size=shape)
            if spec.name == "bbox":  # a layout model's boxes: (x0, y0, x1, y1), each corner pair ordered
                values = ordered_boxes(values)
            feed[spec.name] = values.astype(spec.dtype)
        elif spec.low is not None:
            feed[spec.name] = rng.uniform(spec.low, spec.high, size=shape).astype(_numpy_dtype(spec.dtype))
        else:
            feed[spec.name] = rng.standard_normal(shape).astype(_numpy_dtype(spec.dtype))
    return feed


def _sizes(context: Context) -> dict[str, int]:
    """A size for every symbol of the inputs that the check has not sized yet; every symbol's size."""
    for spec in context.specs:
        for symbol in spec.symbols:
            if symbol not in context.sizes:
                context.pick(symbol)
    return {k: v for k, v in context.sizes.items() if isinstance(v, int)}


def _run_onnx(context: Context, feed: dict, where: str = "") -> dict:
    """The artifact's outputs by name; ONNX Runtime failing at these sizes contradicts the pass."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(context.onnx), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    missing = [n for n in names if n not in feed]
    if missing:
        raise NotRun(f"the artifact takes {', '.join(missing)}, which this check does not give")
    try:
        values = session.run(None, {n: feed[n] for n in names})
    except Exception as error:  # noqa: BLE001 - ONNX Runtime's own failure at a size the artifact declares it takes
        shown = where or " ".join(f"{k}={v}" for k, v in context.sizes.items())
        raise Contradiction(f"ONNX Runtime fails at {shown}: {_one_line(str(error), 200)}") from None
    return dict(zip([o.name for o in session.get_outputs()], values, strict=True))


def _field(output, name: str):
    """A (dotted) field of a ModelOutput, dict or object; None where there is none."""
    value = output
    for part in name.split("."):
        if isinstance(value, dict) or hasattr(value, "keys"):
            value = value.get(part) if part in value else None
        else:
            value = getattr(value, part, None)
        if value is None:
            return None
    return value


def _numpy(tensor):
    import torch

    tensor = tensor.detach()
    return (tensor.float() if tensor.dtype in (torch.bfloat16, torch.float16) else tensor).numpy()


def _compare_outputs(context: Context, outputs: dict, eager, mask=None) -> None:
    """Each artifact output against the eager output's field of the name the source gives it (the report's outputs,
    in order: ONNX renames an output that has an input's name, e.g. sample to out_sample). A token-level output (its
    leading axes the padding ``mask``'s [batch, tokens]) is compared at the tokens the mask keeps: a padded token's
    values are garbage no one reads, and frameworks compute them differently."""
    names = context.outputs if len(context.outputs) == len(outputs) else list(outputs)
    for (onnx_name, value), name in zip(outputs.items(), names, strict=True):
        reference = _field(eager, name)
        if reference is None:
            context.notes.append(f"{name} not compared (the library's model has no such output)")
            continue
        if onnx_name != name:
            context.notes.append(f"the artifact's {onnx_name} is the source's {name}")
        want = _numpy(reference)
        if mask is not None and not mask.all() and value.shape[: mask.ndim] == mask.shape == want.shape[: mask.ndim]:
            keep = mask.astype(bool)
            context.notes.append(f"{name} compared at the {int(keep.sum())} unpadded of {keep.size} tokens")
            value, want = value[keep], want[keep]
        context.compare(name, value, want)


def _torch_feed(feed: dict, torch_dtype=None) -> dict:
    import torch

    return {
        k: torch.from_numpy(v).to(torch_dtype) if torch_dtype is not None and v.dtype.kind == "f" else torch.from_numpy(v)
        for k, v in feed.items()
    }


def _torch_dtype(context: Context):
    import torch

    return getattr(torch, context.dtype)


# transformers


def _transformers():
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    return transformers


def _architecture(folder: Path, context: Context):
    """The class the folder's config names, from the folder, in the artifact's dtype."""
    transformers = _transformers()
    config = transformers.AutoConfig.from_pretrained(folder)
    model_class = getattr(transformers, config.architectures[0])
    return model_class.from_pretrained(folder, dtype=_torch_dtype(context)).eval()


def check_head(context: Context) -> None:
    """A task head, an encoder, two towers: one forward of the architecture class against the artifact."""
    import torch

    model = _architecture(context.model, context)
    feed = _feed(context, _sizes(context), _rng())
    outputs = _run_onnx(context, feed)
    with torch.no_grad():
        eager = model(**_torch_feed(feed, _torch_dtype(context)))
    try:
        _compare_outputs(context, outputs, eager, feed.get("attention_mask"))
    except Contradiction as contradiction:
        raise Contradiction(str(contradiction) + _diagnosis(context, outputs, eager, feed), contradiction.max_error) from None


def _diagnosis(context: Context, outputs: dict, eager, feed: dict) -> str:
    """Where a contradicted head's difference lies: only at padded positions (outputs no one reads), and whether the
    artifact agrees with the library's eager attention instead of its default (SDPA)."""
    import numpy as np
    import torch

    names = context.outputs if len(context.outputs) == len(outputs) else list(outputs)
    pairs = [
        (value, _numpy(_field(eager, name))) for value, name in zip(outputs.values(), names, strict=True) if _field(eager, name) is not None
    ]
    said = ""
    mask = feed.get("attention_mask")
    if mask is not None and not mask.all():
        unpadded = []
        for got, want in pairs:
            error, allowed = _error(got, want, context.budget)
            if error.shape[: mask.ndim] == mask.shape:
                keep = mask.astype(bool).reshape(mask.shape + (1,) * (error.ndim - mask.ndim))
                unpadded.append(bool(np.all(np.where(keep, error <= allowed, True))))
        if unpadded and all(unpadded):
            said += "; only at padded positions (every unpadded one agrees)"
    try:
        transformers = _transformers()
        config = transformers.AutoConfig.from_pretrained(context.model)
        plain = getattr(transformers, config.architectures[0]).from_pretrained(
            context.model, dtype=_torch_dtype(context), attn_implementation="eager"
        )
        with torch.no_grad():
            plain_out = plain.eval()(**_torch_feed(feed, _torch_dtype(context)))
    except Exception:  # noqa: BLE001 - a model without eager attention: nothing more to say
        return said
    worst = [_error(got, _numpy(_field(plain_out, name)), context.budget) for got, name in zip(outputs.values(), names, strict=True)]
    if all(bool(np.all(error <= allowed)) for error, allowed in worst):
        said += (
            f"; it agrees with attn_implementation='eager' (max error {max(float(e.max()) for e, _ in worst):.1e}), not the default SDPA"
        )
    return said


def check_encoder(context: Context) -> None:
    """An encoder-decoder's encoder (feature-extraction): the architecture's get_encoder() against the artifact."""
    import torch

    encoder = _architecture(context.model, context).get_encoder()
    feed = _feed(context, _sizes(context), _rng())
    outputs = _run_onnx(context, feed)
    with torch.no_grad():
        eager = encoder(**_torch_feed(feed))
    _compare_outputs(context, outputs, eager)


def _windows(config) -> list[int]:
    """Every attention span the config (or its text config) declares below its whole past."""
    configs = [config, *(c for c in (getattr(config, "get_text_config", lambda **_: None)(decoder=True),) if c is not None)]
    return [v for c in configs for name in WINDOW_FIELDS if type(v := getattr(c, name, None)) is int and v > 0]


def _cache_argument(model) -> str:
    import inspect

    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _cache_of(output):
    from transformers import Cache

    cache = next((v for v in output.values() if isinstance(v, Cache)), None)
    if cache is None:
        raise NotRun("the library's model returned no cache")
    return cache


def _layers(cache) -> list:
    """(keys, values) per layer of a cache (an encoder-decoder's self-attention cache)."""
    cache = getattr(cache, "self_attention_cache", cache)
    return [(layer.keys, layer.values) for layer in cache.layers]


PAST = re.compile(r"^past_key_values\.(\d+)\.(?:decoder\.)?(key|value)$")


def _numpy_dtype(name: str):
    if name == "bfloat16":
        import ml_dtypes

        return ml_dtypes.bfloat16
    return name


def _past_feed(context: Context, layers: list) -> dict:
    """The eager cache's layers as the artifact's past inputs, in the dtype its specs give."""
    feed = {}
    for spec in context.specs:
        match = PAST.match(spec.name)
        if match:
            tensor = layers[int(match[1])][0 if match[2] == "key" else 1]
            feed[spec.name] = _numpy(tensor).astype(_numpy_dtype(spec.dtype))
    return feed


def _compare_presents(context: Context, outputs: dict, layers: list, step: str) -> dict:
    """The artifact's presents against the eager cache's layers; the presents as the next step's past."""
    past = {}
    for name, value in outputs.items():
        match = re.match(r"^present\.(\d+)\.(?:decoder\.)?(key|value)$", name)
        if match:
            context.compare(f"{name} ({step})", value, _numpy(layers[int(match[1])][0 if match[2] == "key" else 1]))
            past[name.replace("present", "past_key_values", 1)] = value
    return past


def _decode(context: Context, prompt_ids, steps: list, eager_logits, cached, extra: Callable[[int, int], dict]) -> None:
    """Two steps through the artifact: the first from the eager model's cache of the prompt, the next from the
    artifact's own presents; each step's logits against ``eager_logits`` (the library's forward over the whole
    sequence, no cache) and its presents against ``cached(length)`` (the eager cache over that many tokens)."""
    batch, length = prompt_ids.shape
    past = _past_feed(context, cached(length))
    for number, ids in enumerate(steps, 1):
        feed = {"input_ids": ids, **extra(length, ids.shape[1]), **past}
        where = f"B={batch} P={length} S={ids.shape[1]} (step {number})"
        outputs = _run_onnx(context, feed, where)
        context.compare(f"logits (step {number})", outputs["logits"], eager_logits[:, length : length + ids.shape[1]])
        length += ids.shape[1]
        past = _compare_presents(context, outputs, cached(length), f"step {number}")
        if not past:
            raise NotRun("the artifact returns no presents")


def _decoder_model(context: Context):
    """The library's own model of the folder: a decoder's architecture class, or a PEFT adapter on its base."""
    if context.entry.check != "peft":
        return _architecture(context.model, context)
    transformers = _transformers()
    dtype = _torch_dtype(context)
    if (context.model / "config.json").exists():
        # an adapter beside the base's weights: transformers' PEFT integration loads both, as its users load them
        model = transformers.AutoModelForCausalLM.from_pretrained(context.model, dtype=dtype)
        if not any("lora_" in name for name, _ in model.named_parameters()):
            raise NotRun("transformers loaded the folder without its adapter")
        return model.eval()
    from peft import PeftModel

    base = json.loads((context.model / "adapter_config.json").read_text())["base_model_name_or_path"]
    return PeftModel.from_pretrained(transformers.AutoModelForCausalLM.from_pretrained(base, dtype=dtype), context.model).eval()


def check_decoder(context: Context) -> None:
    """A decoder with its cache: a past longer than every window its config declares, built by the eager model on a
    random prompt; then two steps (S1 tokens, then 1) through the artifact against the library's own forward."""
    import numpy as np
    import torch
    from transformers import DynamicCache

    model = _decoder_model(context)
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    windows = _windows(config)
    positions = getattr(config, "max_position_embeddings", None) or 2048
    batch = context.pick("B")
    longest = max(windows, default=0)
    past = context.pick("P", (p for p in (37, 41, 29, 23, 45) if p > 2 * longest), low=longest + 1, high=positions - 8)
    first = context.pick("S", (3, 2, 4, 5, 6))
    context.sizes["S"] = f"{first},1"
    if windows:
        context.sizes["windows"] = ",".join(map(str, sorted(set(windows))))
    rng = _rng()
    vocab = config.vocab_size
    ids = rng.integers(0, vocab, size=(batch, past + first + 1)).astype(np.int64)
    argument = _cache_argument(model.get_base_model() if hasattr(model, "get_base_model") else model)
    with torch.no_grad():
        eager_logits = _numpy(model(input_ids=torch.from_numpy(ids), use_cache=False).logits)

        def cached(length: int):
            # the library's own cache class, every layer at full length (the artifact's past is one length P)
            out = model(input_ids=torch.from_numpy(ids[:, :length]), use_cache=True, **{argument: DynamicCache()})
            return _layers(_cache_of(out))

        names = {spec.name for spec in context.specs}

        def extra(length: int, new: int) -> dict:
            given = {"attention_mask": np.ones((batch, length + new), dtype=np.int64)}
            if "position_ids" in names:
                given["position_ids"] = np.broadcast_to(np.arange(length, length + new, dtype=np.int64), (batch, new)).copy()
            return given

        _decode(context, ids[:, :past], [ids[:, past : past + first], ids[:, past + first :]], eager_logits, cached, extra)


def check_seq2seq(context: Context) -> None:
    """An encoder-decoder's decoder with its cache: the eager encoder's states for random padded tokens, the eager
    decoder's cache of a prompt from the start token, two steps through the artifact against the library's forward."""
    import numpy as np
    import torch

    model = _architecture(context.model, context)
    config = model.config
    batch, encoded = context.pick("B"), context.pick("E")
    past = context.pick("P", (19, 23, 29, 17), high=config.max_position_embeddings - 8)
    first = context.pick("S", (3, 2, 4, 5, 6))
    context.sizes["S"] = f"{first},1"
    rng = _rng()
    encoder_ids = torch.from_numpy(rng.integers(0, config.vocab_size, size=(batch, encoded)).astype(np.int64))
    encoder_mask = torch.from_numpy(_padded((batch, encoded), rng))
    ids = rng.integers(0, getattr(config, "decoder_vocab_size", None) or config.vocab_size, size=(batch, past + first + 1)).astype(np.int64)
    ids[:, 0] = config.decoder_start_token_id
    with torch.no_grad():
        states = model.get_encoder()(input_ids=encoder_ids, attention_mask=encoder_mask)
        common = {"encoder_outputs": states, "attention_mask": encoder_mask}
        eager_logits = _numpy(model(decoder_input_ids=torch.from_numpy(ids), use_cache=False, **common).logits)

        def cached(length: int):
            return _layers(_cache_of(model(decoder_input_ids=torch.from_numpy(ids[:, :length]), use_cache=True, **common)))

        context_feed = {
            "encoder_attention_mask": encoder_mask.numpy(),
            "encoder_hidden_states": _numpy(states.last_hidden_state).astype(np.float32),
        }
        # a decoder that reads its cross-attention cache (Optimum's past_key_values.N.encoder.*) instead of the
        # encoder's states: the eager model's own, computed once from those states
        cross = getattr(
            _cache_of(model(decoder_input_ids=torch.from_numpy(ids[:, :1]), use_cache=True, **common)), "cross_attention_cache", None
        )
        for number, layer in enumerate(cross.layers if cross is not None else ()):
            context_feed[f"past_key_values.{number}.encoder.key"] = _numpy(layer.keys).astype(np.float32)
            context_feed[f"past_key_values.{number}.encoder.value"] = _numpy(layer.values).astype(np.float32)
        _decode(
            context,
            ids[:, :past],
            [ids[:, past : past + first], ids[:, past + first :]],
            eager_logits,
            cached,
            lambda *_: context_feed,
        )


# the other libraries


def check_sentence(context: Context) -> None:
    """A sentence-transformers folder: SentenceTransformer(folder)'s forward, its sentence_embedding."""
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(context.model), device="cpu").eval()
    feed = _feed(context, _sizes(context), _rng())
    outputs = _run_onnx(context, feed)
    with torch.no_grad():
        eager = model(_torch_feed(feed))
    _compare_outputs(context, outputs, {"sentence_embedding": eager["sentence_embedding"]})


def check_diffusers(context: Context) -> None:
    """A diffusers model folder: the class its config names, from_pretrained, one forward."""
    import diffusers
    import torch

    config = json.loads((context.model / "config.json").read_text())
    model = getattr(diffusers, config["_class_name"]).from_pretrained(context.model).eval()
    feed = _feed(context, _sizes(context), _rng())
    outputs = _run_onnx(context, feed)
    with torch.no_grad():
        eager = model(**_torch_feed(feed))
    _compare_outputs(context, outputs, eager)


def _in_order(context: Context, outputs: dict, eager: list) -> None:
    """Outputs with no names of their own in the source: matched in order, as many as the model returns."""
    if len(outputs) != len(eager):
        raise Contradiction(f"the artifact has {len(outputs)} outputs where the library's model returns {len(eager)}")
    for (name, value), reference in zip(outputs.items(), eager, strict=True):
        context.compare(name, value, reference)


def check_keras(context: Context) -> None:
    """A .keras or .h5 file: its module of layers imported from its folder where it has one, keras.saving.load_model,
    one call."""
    import importlib

    import numpy as np

    if (context.model.parent / f"{KERAS_MODULE}.py").exists():  # the user's own layers, registered on import
        sys.path.insert(0, str(context.model.parent))
        importlib.import_module(KERAS_MODULE)
    import keras

    model = keras.saving.load_model(context.model)
    feed = _feed(context, _sizes(context), _rng())
    outputs = _run_onnx(context, feed)
    inputs = [feed[spec.name] for spec in context.specs]
    eager = model(inputs[0] if len(inputs) == 1 else inputs)
    eager = eager if isinstance(eager, list | tuple) else [eager]
    _in_order(context, outputs, [np.asarray(keras.ops.convert_to_numpy(e)) for e in eager])


def check_torch(context: Context) -> None:
    """A pickled module: torch.load(weights_only=False), one call on the same tensors."""
    import torch

    model = torch.load(context.model, weights_only=False).eval()
    feed = _feed(context, _sizes(context), _rng())
    outputs = _run_onnx(context, feed)
    with torch.no_grad():
        eager = model(*_torch_feed(feed).values())
    eager = list(eager) if isinstance(eager, list | tuple) else [eager]
    _in_order(context, outputs, [_numpy(e) for e in eager])


CHECKS = {
    "head": check_head,
    "encoder": check_encoder,
    "decoder": check_decoder,
    "peft": check_decoder,
    "seq2seq": check_seq2seq,
    "sentence": check_sentence,
    "diffusers": check_diffusers,
    "keras": check_keras,
    "torch": check_torch,
}


# ---- the results -------------------------------------------------------------------------------------------------


LIMITATIONS = (
    Limitation(
        "transformers.grouped_mm_fallback",
        "transformers",
        "transformers 5 runs a mixture of experts through its custom op transformers::grouped_mm_fallback by default "
        "(experts_implementation='grouped_mm'), which torch.onnx has no ONNX function for (transformers' own "
        "exporters/exporter_onnx.py registers a translation of it; experts_implementation='eager' avoids the op); the "
        "TorchScript-based fallback fails on the router's aten::histc",
    ),
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(cells: list[Cell], jobs: int, seconds: float, command: str, progress: str = "", reused: bool = False) -> str:
    """The section between the markers (markers included)."""
    passed = [c for c in cells if c.status == "passed"]
    contradicted = [c for c in passed if c.truth == CONTRADICTS]
    agreed = [c for c in passed if c.truth == AGREES]
    not_run = [c for c in passed if c.truth not in (AGREES, CONTRADICTS)]
    tally = ", ".join(f"{sum(c.status == s for c in cells)} {s}" for s in STATUSES)
    budgets = ", ".join(f"{dtype} {atol:g}" for dtype, atol in BUDGETS.items())
    lines = [
        BEGIN,
        "",
        "# The second zoo: third-party models as their users save them, each pass checked independently",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d} by `{command}` ({jobs} entry at a time, stage cache off, "
        f"{'the reports kept by an earlier run classified and checked again' if reused else f'{seconds / 60:.0f} min'}) on {_cpu()}, "
        f"{platform.machine()}, Python {platform.python_version()}, CPU only.",
        f"Libraries: {_versions(LIBRARIES)}.",
        *([f"**Partial: {progress}.**"] if progress else []),
        "",
        f"**{len(passed)} / {len(cells)} cells passed ({100 * len(passed) / max(len(cells), 1):.1f}%)**: {tally}. "
        f"**The truth check contradicts {len(contradicted)} of the {len(passed)} passes** ({len(agreed)} agree, {len(not_run)} not run).",
        "",
        "Each entry of [fixtures/zoo_hf.py](../../fixtures/zoo_hf.py) is written by its library's own saving call "
        "(`save_pretrained`, `SentenceTransformer.save`, `PeftModel.save_pretrained`, `model.save('x.keras')`, `torch.save(module)`) "
        "from a small config and a fixed seed, and converted by `python -m convert MODEL --to onnx` in a child process; a "
        "cell is passed (every check passed with every symbol validated at two sizes or more: `validated sizes`), failed, "
        "fixed-shape or error, with the report's reason. The tool's max abs error and stage seconds come from its report.",
        "",
        "**The truth check** of every pass loads the written ONNX file in ONNX Runtime and runs it at sizes the tool's "
        "validation did not use (`truth sizes`; image sides and mel lengths the artifact fixes stay as they are), against the "
        "library's own eager model loaded from the saved folder (the architecture class the config names, "
        "`PeftModel.from_pretrained(base, adapter)`, transformers' PEFT loading of a folder with an adapter beside its "
        "weights, `SentenceTransformer(folder)`, the diffusers class, `keras.saving.load_model`, `torch.load`). A decoder's "
        "past is longer than every window its config declares (`windows`) and beyond the pasts the tool's generation check "
        "reached: the eager model builds it on a random prompt (its own `DynamicCache`, every layer whole, since the artifact "
        "takes one past length for all layers), then the artifact decodes S1 tokens and one more from its own presents; each "
        "step's logits are compared with the library's forward over the whole sequence without a cache, and its presents "
        "with the eager cache of the same tokens. An encoder-decoder's decoder gets the eager encoder's states of padded "
        f"random tokens. Budget per element: |onnx − eager| ≤ atol·max(1, |eager|), atol by the artifact's dtype ({budgets}); "
        "ONNX Runtime failing at a size the artifact declares dynamic is a contradiction.",
        "",
        "`float inputs drawn from` is what the report records of each generated float input (a range the model declares "
        "names where it comes from); `left at default` names the forward inputs the report's notes say the artifact does not "
        "take (none may be left silently).",
        "",
        "| entry | family | status | truth | truth error | truth sizes | validated sizes | float inputs drawn from | left at default "
        "| export s | validation s | tool's max abs error | reason |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        truth = c.truth or ""
        if c.truth and c.truth != AGREES and c.truth_why:
            truth = f"{c.truth}: {c.truth_why}"
        elif c.truth == AGREES and "; " in c.truth_why:  # what the check says beside the count: dtypes, renamed outputs
            truth = f"{c.truth}; {c.truth_why.split('; ', 1)[1]}"
        lines.append(
            f"| {c.entry} | {ENTRIES[c.entry].family} | {c.status} | {_cell(_one_line(truth, 500))} | {_number(c.truth_error, '.1e')} | "
            f"{c.truth_sizes} | {c.sizes} | {_cell(_one_line(c.domains, 300))} | {_cell(c.defaulted)} | "
            f"{_number(c.export_s, '.1f')} | {_number(c.validate_s, '.1f')} | "
            f"{_number(c.max_abs_error, '.1e')} | {_cell(c.reason)} |"
        )
    failing = [c for c in cells if c.status != "passed"]
    if failing:
        lines += ["", "## Why the other cells do not pass", "", "| library | cells | limitation |", "|---|---|---|"]
        for known in LIMITATIONS:
            hit = [c for c in failing if limitation_of(c, LIMITATIONS) is known]
            if hit:
                lines.append(f"| {_version(known.library)} | {len(hit)}: {', '.join(c.entry for c in hit)} | {known.why} |")
        unknown = [c for c in failing if limitation_of(c, LIMITATIONS) is None]
        if unknown:
            lines.append(f"| (not known) | {len(unknown)}: {', '.join(c.entry for c in unknown)} | see the reason column |")
    lines += ["", "## Entries", "", "| entry | family | CLI flags | truth check | note |", "|---|---|---|---|---|"]
    for c in cells:
        entry = ENTRIES[c.entry]
        flags = f"`{shlex.join(entry.flags)}`" if entry.flags else ""
        where = " (run in the archive's folder)" if entry.in_folder else ""
        lines.append(f"| {entry.name} | {entry.family} | {flags}{where} | {entry.check} | {_cell(entry.note)} |")
    return "\n".join([*lines, "", END]) + "\n"


def write_section(results: Path, section: str) -> None:
    """Replace the text between the markers (the markers included), or append the section when they are absent."""
    text = results.read_text() if results.exists() else ""
    begin, end = text.find(BEGIN), text.find(END)
    if begin != -1 and end > begin:
        text = text[:begin] + section.rstrip("\n") + text[end + len(END) :]
    else:
        text = (text.rstrip("\n") + "\n\n" if text.strip() else "") + section
    results.write_text(text if text.endswith("\n") else text + "\n")


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.zoo_hf", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=list(ENTRIES), metavar="NAME", help="entries to run (default: all)")
    parser.add_argument("--jobs", type=int, default=1, help="entries at a time (default: 1)")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per conversion (default: %(default)s)")
    parser.add_argument(
        "--results", type=Path, default=DEFAULT_RESULTS, help="the Markdown file whose section is written (after every entry)"
    )
    parser.add_argument("--keep", type=Path, default=None, metavar="FOLDER", help="keep every model folder, artifact and report here")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: classify and check the reports already kept there again, run only the conversions that have none",
    )
    args = parser.parse_args(argv)
    started = time.monotonic()
    command = shlex.join(["python", "-m", "benchmarks.zoo_hf", *argv])
    args.results.parent.mkdir(parents=True, exist_ok=True)
    reuse = args.reuse and args.keep is not None

    def write(cells: list[Cell], done: int, total: int) -> None:
        progress = f"{done} of {total} entries so far" if done < total else ""
        write_section(args.results, render(cells, args.jobs, time.monotonic() - started, command, progress, reuse))

    with tempfile.TemporaryDirectory(prefix="zoo-hf-") as scratch:
        cells = run_zoo(args.only or list(ENTRIES), args.jobs, args.timeout, args.keep or Path(scratch), write, reuse)
    passed = [c for c in cells if c.status == "passed"]
    contradicted = sum(c.truth == CONTRADICTS for c in passed)
    print(f"{len(passed)} / {len(cells)} cells passed, the truth check contradicts {contradicted}; wrote {args.results}")
    if args.keep:
        (args.keep / "cells.json").write_text(json.dumps([asdict(c) for c in cells], indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
