"""Start-up, help, doctor, and the lazy-import contract."""

import subprocess
import sys

from tests.conftest import REPO, run_cli

FRAMEWORKS = ("torch", "tensorflow", "jax", "keras", "onnxruntime", "openvino", "tensorrt")


def test_import_convert_imports_no_framework():
    probe = "import sys, convert; heavy = [m for m in " + repr(FRAMEWORKS) + " if m in sys.modules]; print(heavy)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


def test_importtime_shows_no_framework():
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import convert"], capture_output=True, text=True, cwd=REPO, check=True
    )
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert not imported & set(FRAMEWORKS)


def test_help_imports_no_framework_and_lists_the_formats():
    probe = (
        "import sys; from click.testing import CliRunner; from convert.cli import main; "
        "r = CliRunner().invoke(main, ['export', '--help']); print(r.exit_code); print(r.output); "
        "print([m for m in " + repr(FRAMEWORKS) + " if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.splitlines()[0] == "0"
    assert "onnx, torchscript, torch_export" in " ".join(done.stdout.split())
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_python_m_convert_help():
    run = run_cli("--help")
    assert run.returncode == 0 and "MODEL --to FORMATS" in run.stdout and "doctor" in run.stdout


def test_doctor_reports_frameworks_runtimes_and_devices():
    run = run_cli("doctor")
    assert run.returncode == 0, run.output
    assert "torch" in run.stdout and "onnxruntime on cpu" in run.stdout and "usable" in run.stdout
    assert "cuda" in run.stdout


def test_missing_to_is_a_usage_error():
    run = run_cli("model.pt2")
    assert run.returncode == 2 and "--to" in run.output and "Traceback" not in run.output
