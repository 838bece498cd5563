"""The latest-releases check: the newest release of every dependency, no lock, the fast tests and one end-to-end
conversion per source kind and target.

    python -m tools.latest --extras torch,tensorflow,... [--pin transformers==4.56.2] [--name NAME]

Builds a fresh environment (``.venv-NAME``) with uv, installs the project with the extras at the newest releases (torch
is held at the locked build: another torch build is gigabytes of CUDA wheels), runs the tests below in it, records its
versions as the check ``NAME`` (``compat/NAME.json``) and writes ``compat/NAME.md``: each registered package's locked
and checked version, and the test outcome. ``--pin`` holds a package at a version (to check the low end of a range).
The exit code is pytest's.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "requirements.lock"
# The fast unit tests, and one end-to-end conversion per source kind and target (the fixture-coverage test's modules,
# one model each), every optimizer on one model, and the Transformers folders' tasks.
TESTS = (
    "tests/convert/unit",
    "tests/convert/validators",
    "tests/convert/test_options.py",
    "tests/convert/test_registry_packages.py",
    "tests/convert/test_e2e_torch.py::test_pt2_fixture_exports_and_validates_every_target",
    "tests/convert/test_e2e_keras.py::test_keras_fixture_exports_and_validates_every_target",
    "tests/convert/test_e2e_jax.py::test_jax_fixture_exports_and_validates_every_target",
    "tests/convert/test_onnx_source.py::test_a_third_party_onnx_file_goes_through_optimize_auto",
    "tests/convert/exporters/test_executorch.py::test_a_cnn_and_its_int8_program_pass_and_say_what_xnnpack_runs",
    "tests/convert/exporters/test_litert.py::test_the_tflite_artifact_passes_and_keeps_the_sources_names_and_dtypes",
    "tests/convert/test_optimize.py::test_every_optimizer_on_a_torch_fixture",
    "tests/convert/test_transformers.py::test_an_encoder_folder_infers_its_task_and_takes_its_specs_from_the_config",
    "tests/convert/test_transformers.py::test_a_decoder_is_exported_with_its_cache_under_optimums_names_and_checked_over_generation",
    "tests/convert/test_transformers.py::test_an_encoder_decoder_converts_as_its_encoder_and_decoders_under_optimums_names_and_generates_as_transformers",
    "tests/convert/test_with_past_wrappers.py",
    "tests/convert/test_seq2seq_components.py::test_each_component_s_source_is_the_library_s_own_step",
    "tests/convert/test_transformers.py::test_the_source_decodes_as_transformers_generate_does",
)


def locked_versions() -> dict[str, str]:
    """Distribution → version, as the lock pins them."""
    pins = {}
    for line in LOCK.read_text(encoding="utf-8").splitlines():
        match = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if match:
            pins[match[1].lower().replace("_", "-")] = match[2]
    return pins


def uv_index_flags() -> list[str]:
    """pip's configured --find-links (where this machine keeps the CPU torch wheel), for uv, which reads no pip config."""
    links = os.environ.get("PIP_FIND_LINKS", "")
    return [flag for link in links.split() for flag in ("--find-links", link)]


def build(venv: Path, extras: str, pins: list[str]) -> None:
    shutil.rmtree(venv, ignore_errors=True)
    uv = [sys.executable, "-m", "uv"]
    subprocess.run([*uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
    torch = f"torch=={locked_versions()['torch']}"
    overrides = venv / "held.txt"
    overrides.write_text("\n".join([torch, *pins]) + "\n", encoding="utf-8")
    subprocess.run(
        [
            *uv,
            "pip",
            "install",
            "--quiet",
            "--python",
            str(venv / "bin" / "python"),
            *uv_index_flags(),
            "--override",
            str(overrides),
            "-e",
            f".[{extras}]",
        ],
        cwd=REPO,
        check=True,
    )


def render(name: str, check: dict, pins: list[str], outcome: str, seconds: float) -> str:
    from packaging.version import Version

    locked = locked_versions()
    command = "make test-latest" if not pins else f"python -m tools.latest --name {name} " + " ".join(f"--pin {p}" for p in pins)
    lines = [
        f"# The {name} check",
        "",
        f"`{command}` on {check['date']}, Python {check['python']}: the newest release of every dependency (no lock), "
        f"torch held at the locked build{', ' + ', '.join(pins) + ' held' if pins else ''}. Tests: the fast unit tests and one "
        "end-to-end conversion per source kind and target (`tools/latest.py` lists them).",
        "",
        f"**Result: {outcome}** in {seconds / 60:.1f} min.",
        "",
        "| package | locked | checked here |",
        "|---|---|---|",
    ]
    for found in sorted(check["packages"].values(), key=lambda p: p["distribution"]):
        version, was = found["version"], locked.get(found["distribution"], "-")
        moved = "" if was in ("-", version) else " (newer)" if Version(version) > Version(was) else " (older)"
        lines.append(f"| {found['distribution']} | {was} | {version}{moved} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.latest", description=__doc__.split("\n\n")[0])
    parser.add_argument("--extras", required=True)
    parser.add_argument("--pin", action="append", default=[], help="hold a package at a version (name==version)")
    parser.add_argument("--name", default="latest")
    args = parser.parse_args(argv)
    venv = REPO / f".venv-{args.name}"
    started = time.monotonic()
    build(venv, args.extras, args.pin)
    python = str(venv / "bin" / "python")
    tests = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", *TESTS], cwd=REPO)
    passed = tests.returncode == 0
    summary = f"pytest exit {tests.returncode}"
    subprocess.run(
        [python, "-m", "tools.versions", "record", args.name, "--passed" if passed else "--failed", "--note", summary], cwd=REPO, check=True
    )
    check = json.loads((REPO / "compat" / f"{args.name}.json").read_text(encoding="utf-8"))
    outcome = "passed" if passed else f"failed ({summary})"
    (REPO / "compat" / f"{args.name}.md").write_text(
        render(args.name, check, args.pin, outcome, time.monotonic() - started), encoding="utf-8"
    )
    subprocess.run([python, "-m", "tools.versions", "ranges"], cwd=REPO, check=True)
    print(f"{args.name} check {outcome} on {datetime.date.today().isoformat()}: compat/{args.name}.md")
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
