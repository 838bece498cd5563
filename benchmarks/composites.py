"""Models of several networks through this tool and through Optimum's ONNX exporter, side by side, in one run.

    python -m benchmarks.composites [--optimum-python PYTHON] [RESULTS_FILE]

The same ``save_pretrained`` folders (encoder-decoders, dual encoders, a diffusion pipeline; small configs from the
libraries' own classes, fixed seeds: fixtures/transformers_folders.py and fixtures/diffusers_folders.py) go through
``python -m convert FOLDER --to onnx`` (one command converts every component and runs them together) and through
Optimum's ``main_export`` of the same folder (benchmarks/optimum_side.py, in its own environment: ``make bench`` makes
``.venv-optimum``). For each family the table gives each tool's wall time for the whole process, this tool's verdict,
its components and its assembled check with its metrics; for an encoder-decoder, whether Optimum's ORTModel class loads
this tool's folder and generates transformers' greedy tokens with it (``optimum_side.py --load-seq2seq``). Results go
to benchmarks/results/composites.md.
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

REPO = Path(__file__).resolve().parents[1]
DEFAULT_RESULTS = Path(__file__).parent / "results" / "composites.md"
DEFAULT_OPTIMUM_PYTHON = REPO / ".venv-optimum" / "bin" / "python"
# family -> (the fixture module that writes its folder, the folder's name there, Optimum's task for it)
FAMILIES = {
    "t5": ("transformers_folders", "t5", "text2text-generation-with-past"),
    "bart": ("transformers_folders", "bart", "text2text-generation-with-past"),
    "whisper": ("transformers_folders", "whisper", "automatic-speech-recognition-with-past"),
    "vision-encoder-decoder": ("transformers_folders", "vision_encoder_decoder", "image-to-text-with-past"),
    "clip": ("transformers_folders", "clip", "zero-shot-image-classification"),
    "siglip": ("transformers_folders", "siglip", "zero-shot-image-classification"),
    "stable-diffusion": ("diffusers_folders", "pipeline", "text-to-image"),
}
ENCODER_DECODERS = ("t5", "bart", "whisper", "vision-encoder-decoder")


def _write(module: str, name: str, folder: Path) -> Path | None:
    """The fixture's folder, or None where the fixture module has no such folder."""
    import importlib

    fixtures = importlib.import_module(f"fixtures.{module}")
    if name not in getattr(fixtures, "FOLDERS", {}):
        return None
    return fixtures.write_folder(name, folder)


def _ours(folder: Path, out: Path) -> dict:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "convert", str(folder), "--to", "onnx", "--out", str(out), "--no-cache"],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    seconds = time.perf_counter() - started
    report_path = out / "report.json"
    if not report_path.is_file():
        return {"seconds": seconds, "exit_code": done.returncode, "error": done.stderr.strip().splitlines()[-1:] or [""]}
    report = json.loads(report_path.read_text())
    return {
        "seconds": seconds,
        "exit_code": done.returncode,
        "components": [(c["name"], c["passed"]) for c in report["components"]],
        "assembled": [(a["artifact"], a["status"], a["metrics"], a["reason"]) for a in report["assembled"]],
    }


def _optimum_export(python: Path | None, folder: Path, name: str, task: str, work: Path) -> dict:
    if python is None or not python.exists():
        return {"error": "no Optimum environment (make bench builds .venv-optimum)"}
    models = work / "optimum-models" / name
    models.parent.mkdir(parents=True, exist_ok=True)
    if not models.exists():
        os.symlink(folder, models)
    (folder / "task.txt").write_text(task)
    out = work / f"optimum-{name}.json"
    started = time.perf_counter()
    subprocess.run(
        [str(python), str(REPO / "benchmarks" / "optimum_side.py"), "--folders", str(models.parent), "--only", name, "--out", str(out)],
        capture_output=True,
        text=True,
        cwd=work,
    )
    seconds = time.perf_counter() - started
    (folder / "task.txt").unlink()
    results = json.loads(out.read_text()) if out.is_file() else []
    entry = results[0] if results else {"ok": False, "error": "optimum_side.py wrote no result"}
    return {"process_seconds": seconds, **entry}


def _optimum_loads_ours(python: Path | None, folder: Path, out: Path, work: Path) -> dict:
    if python is None or not python.exists():
        return {"error": "no Optimum environment"}
    result = work / f"load-{folder.name}.json"
    done = subprocess.run(
        [str(python), str(REPO / "benchmarks" / "optimum_side.py"), "--load-seq2seq", str(folder), str(out), "--out", str(result)],
        capture_output=True,
        text=True,
        cwd=work,
    )
    if not result.is_file():
        return {"error": (done.stderr.strip().splitlines() or ["no result"])[-1]}
    return json.loads(result.read_text())


def _versions(python: Path | None) -> str:
    if python is None or not python.exists():
        return "Optimum: not installed"
    code = "import optimum.version, transformers, onnxruntime; print(optimum.version.__version__, transformers.__version__, onnxruntime.__version__)"
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
    return f"Optimum environment: optimum / transformers / onnxruntime {done.stdout.strip() or '?'}"


def _metrics(assembled: list) -> str:
    return "; ".join(
        f"{artifact} {status}"
        + (" " + ", ".join(f"{k}={v:.3g}" for k, v in metrics.items()) if metrics else "")
        + (f" ({reason})" if reason else "")
        for artifact, status, metrics, reason in assembled
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", default=str(DEFAULT_RESULTS))
    parser.add_argument("--optimum-python", default=str(DEFAULT_OPTIMUM_PYTHON))
    args = parser.parse_args(argv)
    python = Path(args.optimum_python) if args.optimum_python else None
    rows = []
    with tempfile.TemporaryDirectory(prefix="composites-") as scratch:
        work = Path(scratch)
        for family, (module, name, task) in FAMILIES.items():
            folder = _write(module, name, work / "folders" / name)
            if folder is None:
                rows.append(f"| {family} | no fixture folder | | | | | |")
                continue
            ours = _ours(folder, work / "ours" / name)
            optimum = _optimum_export(python, folder, name, task, work)
            loads = _optimum_loads_ours(python, folder, work / "ours" / name, work) if family in ENCODER_DECODERS else {}
            components = ", ".join(f"{n} {'passed' if ok else 'failed'}" for n, ok in ours.get("components", []))
            optimum_cell = (
                f"{optimum['process_seconds']:.1f} s ({'exported' if optimum.get('ok') else 'failed: ' + str(optimum.get('error', ''))[:120]})"
                if "process_seconds" in optimum
                else optimum.get("error", "")
            )
            loads_cell = (
                ""
                if not loads
                else f"tokens equal: {loads['tokens_equal']} ({loads.get('class', '')})"
                if "tokens_equal" in loads
                else f"failed: {str(loads.get('error', ''))[:160]}"
            )
            rows.append(
                f"| {family} | {ours['seconds']:.1f} s (exit {ours['exit_code']}) | {components or ours.get('error')} | "
                f"{_metrics(ours.get('assembled', []))} | {optimum_cell} | {loads_cell} |"
            )
            print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Models of several networks: this tool beside Optimum",
            "",
            f"Made by `python -m benchmarks.composites` on {datetime.now(UTC).date()}, {platform.platform()}, "
            f"{os.cpu_count()} cores; {_versions(python)}.",
            "",
            "Each family is one `save_pretrained` folder of the libraries' own classes (small configs, fixed seeds). "
            "This tool's time is one `python -m convert FOLDER --to onnx --no-cache` process: every component exported "
            "and validated at several sizes, then the components run together against the library (the assembled "
            "check). Optimum's is one `main_export` process of the same folder (its own validation on), in its own "
            "environment. For an encoder-decoder, the last column loads this tool's output folder with Optimum's "
            "ORTModel class and compares its `generate()` with transformers' greedy tokens.",
            "",
            "| family | this tool (wall) | components | assembled check | Optimum export (wall) | Optimum's ORTModel on this tool's folder |",
            "| --- | --- | --- | --- | --- | --- |",
            *rows,
            "",
        ]
    )
    Path(args.results).write_text(text)
    print(f"wrote {args.results}")


if __name__ == "__main__":
    main()
