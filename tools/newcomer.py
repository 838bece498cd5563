"""A newcomer's first hour, replayed: the README's install lines into a fresh virtual environment, then the README's
"Convert your model" lines, run as shown through the installed ``model-convert``, from a folder of the user's own
outside the repository that holds models of each kind under the README's placeholder names.

    python -m tools.newcomer [--venv PATH] [--folder PATH] [--reuse-venv]

``make newcomer`` runs it; tests/test_readme.py runs the same lines against the project's environment. The user folder
is built with the libraries' own classes (transformers configs with ``save_pretrained``, keras, flax, a torch module in
the user's own file), fixed seeds, nothing downloaded. Exit code 0 when every line passed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

# the user's own model code, as a project defines it: a module file beside the pickled model
USER_MODEL_CODE = """import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, num_classes)

    def forward(self, x):
        return self.head(torch.flatten(self.features(x), 1))
"""

# what the user runs in their folder to save the model whole and to save a training checkpoint
USER_SAVE_SCRIPT = """import torch
from mynet import Net

torch.manual_seed(0)
model = Net(num_classes=10).eval()
torch.save(model, "model.pt")
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
torch.save({"epoch": 3, "model_state_dict": model.state_dict(), "optimizer_state_dict": optimizer.state_dict(), "lr": 0.1},
           "checkpoint.pt")
"""

# a JAX model as a user writes one: a flax linen module and the function the README converts, apply(params, x)
USER_JAX_CODE = """import flax.linen as nn


class Mlp(nn.Module):
    @nn.compact
    def __call__(self, x):
        x = x.reshape((x.shape[0], -1))
        return nn.Dense(10)(nn.relu(nn.Dense(32)(x)))


def apply(params, x):
    return Mlp().apply(params, x)
"""

USER_JAX_SAVE = """import jax
import jax.numpy as jnp
from flax import serialization
from jax_model import Mlp

params = Mlp().init(jax.random.key(0), jnp.zeros((1, 28, 28, 1), jnp.float32))
open("params.msgpack", "wb").write(serialization.msgpack_serialize(jax.device_get(params)))
"""


def readme_blocks(language: str, heading: str | None = None) -> list[str]:
    """The README's fenced blocks of a language (in one section when a heading is given)."""
    text = README.read_text()
    if heading:
        text = text.split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def install_lines() -> list[str]:
    return [line.split("#", 1)[0].strip() for line in readme_blocks("console", "## Install")[0].splitlines() if line.startswith("pip ")]


def command_lines() -> list[str]:
    """Every model-convert line of the README's runnable (bash) blocks."""
    return [line for block in readme_blocks("bash") for line in block.splitlines() if line.startswith("model-convert ")]


def build_user_folder(folder: Path, python: Path) -> None:
    """The user's folder: one model of each kind the README names, under its placeholder name. ``python`` builds them
    (the repository's fixtures import from REPO on PYTHONPATH, for this set-up only)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mynet.py").write_text(USER_MODEL_CODE)
    (folder / "nets.py").write_text(readme_blocks("python", "## Convert your model")[0])
    (folder / "save_model.py").write_text(USER_SAVE_SCRIPT)
    (folder / "jax_model.py").write_text(USER_JAX_CODE)
    (folder / "save_params.py").write_text(USER_JAX_SAVE)
    (folder / "promotion.yaml").write_text(readme_blocks("yaml", "## Gate a model in CI")[0])
    user = {**activated_environment(python)}
    fixtures = {**user, "PYTHONPATH": str(REPO)}
    scratch = folder / ".fixtures"
    steps = [
        ([str(python), "save_model.py"], user),
        ([str(python), "save_params.py"], user),
        ([str(python), "-m", "fixtures.build_torch", str(scratch), "cnn"], fixtures),
        ([str(python), "-m", "fixtures.build_keras", str(scratch), "two_io"], fixtures),
        (
            [
                str(python),
                "-c",
                "import sys; from fixtures.transformers_folders import write_folder; "
                "write_folder('bert', sys.argv[1] + '/my-bert'); write_folder('llama', sys.argv[1] + '/my-llama')",
                str(folder),
            ],
            fixtures,
        ),
        (
            [
                str(python),
                "-c",
                "import sys, torch; from fixtures.torch_models import build; "
                "torch.onnx.export(build('cnn'), (torch.randn(2, 3, 32, 32),), sys.argv[1], input_names=['x'], "
                "dynamic_axes={'x': {0: 'B'}}, dynamo=False)",
                str(folder / "model.onnx"),
            ],
            fixtures,
        ),
    ]
    for argv, env in steps:
        done = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode:
            raise SystemExit(f"building the user folder failed: {' '.join(argv)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    shutil.copy(scratch / "cnn.pt2", folder / "model.pt2")
    shutil.copy(scratch / "two_io.keras", folder / "model.keras")
    shutil.copy(scratch / "two_io.h5", folder / "model.h5")
    shutil.copytree(scratch / "two_io_savedmodel", folder / "saved_model_dir")
    shutil.rmtree(scratch)


def clone_of_repository(folder: Path) -> Path:
    """The repository's files as a clone has them (tracked, and new files git does not ignore), so that installing
    from it writes its build files there and not into the working tree."""
    listed = (
        subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, folder / name)
    return folder


def activated_environment(python: Path) -> dict[str, str]:
    """A user's shell with the environment activated: its bin folder first on PATH, no PYTHONPATH."""
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = "200"
    return env


def run_line(line: str, folder: Path, python: Path, out: Path) -> subprocess.CompletedProcess:
    """One README line, as typed, in the user's folder, with its own --out so that the lines do not share a folder."""
    return subprocess.run(
        ["bash", "-c", f"{line} --out {out}"],
        cwd=folder,
        env=activated_environment(python),
        capture_output=True,
        text=True,
        timeout=1200,
    )


def install(venv: Path) -> Path:
    """A fresh virtual environment at ``venv`` with the README's install lines run in it, as shown, from a clone's
    root, with its own pip; gives its Python."""
    python = venv / "bin" / "python"
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    clone = clone_of_repository(Path(tempfile.mkdtemp(prefix="model-convert-clone-")))
    for line in install_lines():
        print(f"$ {line}", flush=True)
        done = subprocess.run(["bash", "-c", line], cwd=clone, env=activated_environment(python), capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the README's install line failed: {line}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    shutil.rmtree(clone)
    return python


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "model-convert-newcomer" / "venv")
    parser.add_argument("--folder", type=Path, default=Path(tempfile.gettempdir()) / "model-convert-newcomer" / "my-project")
    parser.add_argument("--reuse-venv", action="store_true", help="keep an environment an earlier run installed")
    args = parser.parse_args(argv)
    python = args.venv / "bin" / "python"
    if not (args.reuse_venv and python.exists()):
        install(args.venv)
    shutil.rmtree(args.folder, ignore_errors=True)
    build_user_folder(args.folder, python)
    failed = []
    for number, line in enumerate(command_lines(), 1):
        done = run_line(line, args.folder, python, args.folder / "out" / str(number))
        verdict = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
        print(f"[{'ok' if done.returncode == 0 else f'exit {done.returncode}'}] {line}\n    {verdict}", flush=True)
        if done.returncode:
            failed.append(f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    print("\n\n".join(failed) or f"every README line passed ({len(command_lines())})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
