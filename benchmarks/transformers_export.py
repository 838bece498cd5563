"""Hugging Face model folders through this tool and through Optimum's ONNX exporter, side by side.

    python -m benchmarks.transformers_export [--optimum-python PYTHON] [RESULTS_FILE]

The same ``save_pretrained`` folders (fixtures/transformers_folders.py: BERT, GPT-2, a Llama-family decoder, ViT, T5,
Whisper; small configs, fixed seeds) go through ``python -m convert FOLDER --task T --to onnx`` and through Optimum's
``main_export`` (benchmarks/optimum_side.py, one process per model). Optimum runs in a virtual environment of its own
(``make bench`` makes ``.venv-optimum``): optimum-onnx pins transformers < 4.58, and this tool's environment has
transformers 5. Without that interpreter the Optimum columns say so.

For each model the table gives: whether each tool exported it (and, for this tool, validated it), the wall time of
the whole process, and the largest absolute error of each tool's ONNX file against the transformers model of this
environment *at the same inputs* (a batch of 2 for encoders; for decoders, 16 steps of teacher-forced greedy decoding
from the same prompts with each file's cache fed back, with the token agreement). For encoder-decoder models this
tool's encoder is compared with Optimum's; the whole encoder-decoder is benchmarks/composites.py's.
Results go to benchmarks/results/transformers.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path(__file__).parent / "results" / "transformers.md"
DEFAULT_OPTIMUM_PYTHON = REPO / ".venv-optimum" / "bin" / "python"
# model → (this tool's task, Optimum's task)
TASKS = {
    "bert": ("fill-mask", "fill-mask"),
    "gpt2": ("text-generation-with-past", "text-generation-with-past"),
    "llama": ("text-generation-with-past", "text-generation-with-past"),
    "vit": ("image-classification", "image-classification"),
    "t5": ("feature-extraction", "text2text-generation-with-past"),
    "whisper": ("feature-extraction", "automatic-speech-recognition-with-past"),
}


def _ours(folder: Path, task: str, out: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "convert", str(folder), "--task", task, "--to", "onnx", "--out", str(out), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    seconds = time.perf_counter() - started
    report_path = out / "report.json"
    if not report_path.exists():
        return {"ok": False, "seconds": seconds, "error": (done.stderr.strip().splitlines() or ["no report"])[-1], "path": None}
    report = json.loads(report_path.read_text())
    (record,) = [a for a in report["artifacts"] if a["format"] == "onnx"]
    checks = [c for c in record["checks"] if c["status"] != "skipped"]
    return {
        "ok": record["passed"],
        "seconds": seconds,
        "checks": f"{sum(c['kind'] == 'shape' for c in checks)} shapes"
        + (" + generation" if any(c["kind"] == "generation" for c in checks) else ""),
        "path": record["path"],
        "error": "" if record["passed"] else record.get("reason", "failed validation"),
    }


def _optimum(python: Path | None, folder: Path, name: str, task: str, work: Path) -> dict:
    if python is None:
        return {"ok": None, "error": "not run: no Optimum environment (make bench makes .venv-optimum)"}
    # optimum_side.py reads DIR/<model>/task.txt: a folder of one model, linked, with its task
    single = work / "optimum_single" / name
    single.mkdir(parents=True, exist_ok=True)
    target = single / name
    if not target.exists():
        target.mkdir()
        for file in folder.iterdir():
            (target / file.name).symlink_to(file)
        (target / "task.txt").write_text(task)
    out = work / "optimum" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [
            str(python),
            str(REPO / "benchmarks" / "optimum_side.py"),
            "--folders",
            str(single),
            "--out",
            str(out),
            "--onnx-dir",
            str(work / "optimum" / "onnx"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    seconds = time.perf_counter() - started
    if not out.exists():
        return {"ok": False, "seconds": seconds, "error": (done.stderr.strip().splitlines() or ["no results"])[-1]}
    (entry,) = json.loads(out.read_text())
    files = work / "optimum" / "onnx" / name
    main = files / ("model.onnx" if (files / "model.onnx").exists() else "encoder_model.onnx")
    return {
        "ok": bool(entry["ok"]),
        "seconds": seconds,
        "error": entry.get("error") or entry.get("optimum_warning") or "",
        "files": ", ".join(sorted(p.name for p in files.glob("*.onnx"))),
        "path": str(main) if main.exists() else None,
    }


def _in_optimum(python: Path | None, folder: Path, path: str | None, work: Path) -> str:
    """Whether Optimum's ORTModelForCausalLM loads this tool's decoder and generates the transformers model's tokens."""
    if python is None or path is None:
        return "-"
    out = work / "optimum" / f"{folder.name}_loads_ours.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [str(python), str(REPO / "benchmarks" / "optimum_side.py"), "--load-decoder", str(folder), path, "--out", str(out)],
        capture_output=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if not out.exists():
        return "the check did not run"
    found = json.loads(out.read_text())
    if not found["loads"]:
        return f"not loaded: {found['error']}"
    return "loads; generate() gives transformers' tokens" if found["identical_tokens"] else "loads; generate() differs from transformers"


def _same_inputs(task: str, folder: Path, paths: dict[str, str | None]) -> dict[str, str]:
    """Each file's largest error against this environment's transformers model at the same inputs."""
    import convert
    from convert.validators.generation import CacheLayout, decode

    source = convert.load(folder, task=task)
    figures: dict[str, str] = {}
    if source.generation is not None:
        layout = source.generation
        prompts, context = source.generation_inputs(0)
        reference = decode(source.run, layout, prompts, 16, context=context)
        for who, path in paths.items():
            if path is None:
                figures[who] = "-"
                continue
            step, takes = _onnx_step(path)
            theirs = CacheLayout(**{**layout.__dict__, "position_ids": "position_ids" in takes})
            actual = decode(step, theirs, prompts, 16, reference.tokens, context)
            agree = float(np.mean(actual.tokens == reference.tokens))
            figures[who] = f"{float(np.abs(actual.logits - reference.logits).max()):.1e} (tokens {agree:.0%})"
        return figures
    from convert.validators import generate_feed

    sizes = {"B": 2, "S": 9}
    feed = generate_feed(source.signature.inputs, {s: sizes.get(s, 2) for s in source.signature.symbols}, 0, 0)
    expected = source.run(feed)
    for who, path in paths.items():
        if path is None:
            figures[who] = "-"
            continue
        got = _onnx_step(path)[0](feed)
        shared = [o for o in expected if o in got]
        figures[who] = f"{max(float(np.abs(got[o] - expected[o]).max()) for o in shared):.1e}" if shared else "no shared output"
    return figures


def _onnx_step(path: str):
    """A function from a feed to an ONNX file's outputs by name (inputs it does not take are left out), and its inputs."""
    import onnxruntime as ort

    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    takes = {i.name for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]

    def step(feed):
        return dict(zip(outputs, session.run(None, {k: v for k, v in feed.items() if k in takes})))

    return step, takes


def _versions(python: Path | None) -> str:
    from importlib.metadata import version

    ours = ", ".join(f"{p} {version(p)}" for p in ("torch", "transformers", "onnx", "onnxruntime", "onnxscript"))
    if python is None:
        return f"this tool: {ours}; Optimum: not installed"
    script = "from importlib.metadata import version as v; print(', '.join(f'{p} {v(p)}' for p in ('optimum-onnx','optimum','transformers','torch','onnxruntime')))"
    theirs = subprocess.run([str(python), "-c", script], capture_output=True, text=True).stdout.strip()
    return f"this tool: {ours}; Optimum's environment: {theirs}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--optimum-python", type=Path, default=DEFAULT_OPTIMUM_PYTHON)
    args = parser.parse_args(argv)
    from fixtures.transformers_folders import write_folder

    python = args.optimum_python if args.optimum_python.exists() else None
    rows = []
    loaded: dict[str, str] = {}  # decoder → how Optimum's ORTModelForCausalLM takes this tool's file
    with tempfile.TemporaryDirectory(prefix="bench-transformers-") as tmp:
        work = Path(tmp)
        for name, (task, optimum_task) in TASKS.items():
            folder = write_folder(name, work / "folders" / name)
            ours = _ours(folder, task, work / "ours" / name)
            theirs = _optimum(python, folder, name, optimum_task, work)
            errors = _same_inputs(task, folder, {"ours": ours.get("path"), "optimum": theirs.get("path")})
            if task == "text-generation-with-past":
                loaded[name] = _in_optimum(python, folder, ours.get("path"), work)
            rows.append((name, task, optimum_task, ours, theirs, errors))
            print(
                f"{name}: ours {ours['ok']} {ours['seconds']:.1f}s {errors['ours']}; optimum {theirs.get('ok')} {errors['optimum']}",
                flush=True,
            )
        versions = _versions(python)
    lines = [
        "# Hugging Face folders: this tool vs Optimum's ONNX exporter",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC by `python -m benchmarks.transformers_export` on "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores; {versions}.",
        "",
        "Wall time is the whole process, one model at a time. This tool validates every artifact at several shapes "
        "(and decoders over 16 steps of greedy generation) before it passes it; Optimum checks one random batch "
        "(atol 1e-5) and only warns when it fails. Errors are against this environment's transformers model at the "
        "same inputs; for decoders, each file decodes the same prompts teacher-forced with its own cache fed back.",
        "",
        "| model | task (this tool / Optimum) | this tool | checks | s | Optimum | s | Optimum files | max abs error, this tool | max abs error, Optimum |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, task, optimum_task, ours, theirs, errors in rows:
        status = "passed" if ours["ok"] else f"failed: {ours['error']}"
        their_status = (
            ("not run" if optimum_task != "(above)" else "-")
            if theirs["ok"] is None
            else "exported"
            if theirs["ok"]
            else f"failed: {theirs['error']}"
        )
        their_seconds = f"{theirs['seconds']:.1f}" if "seconds" in theirs else "-"
        lines.append(
            f"| {name} | {task} / {optimum_task} | {status} | {ours.get('checks', '-')} | {ours['seconds']:.1f} | {their_status} | "
            f"{their_seconds} | {theirs.get('files', '-')} | {errors['ours']} | {errors['optimum']} |"
        )
    if loaded:
        lines += ["", "This tool's decoders in Optimum's `ORTModelForCausalLM` (from_pretrained on the folder's config and the file):", ""]
        lines += [f"- {name}: {how}" for name, how in loaded.items()]
    if python is None:
        lines += ["", f"Optimum was not run: {DEFAULT_OPTIMUM_PYTHON} does not exist (`make bench` makes it)."]
    lines += [
        "",
        "For T5 and Whisper this table compares the encoder (feature-extraction) with Optimum's encoder_model.onnx. The "
        "whole encoder-decoder (its encoder, decoder and decoder_with_past in one command, loaded and run by Optimum's "
        "ORTModel classes) is in composites.md (python -m benchmarks.composites).",
    ]
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text("\n".join(lines) + "\n")
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
