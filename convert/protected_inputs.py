"""A run never replaces, removes or writes into what it reads.

Before any work, every path a run will write (artifacts and their data files, the failed folder, stale staging
folders it would remove, the lock, the report and its renderings, MLflow's local store, a batch's summary and
per-model folders) is compared, after resolving symlinks, with every path it reads (the model file or folder and each
file inside it, weights, params, example inputs, calibration data, the policy, the baseline report, the manifest).
``--force`` replaces what an earlier run wrote, never an input.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convert.errors import ConvertError

NEXT_STEP = (
    "Nothing was written. Choose output paths outside the files the run reads (a new folder with --out, another "
    "--report-json or rendering path); --force replaces only what an earlier convert run wrote, never an input."
)


@dataclass(frozen=True)
class Write:
    what: str  # how the message names it: "the onnx artifact", "the JSON report"
    path: Path
    replaces: bool = True  # False: a folder the run writes into (the output folder), which may already hold other files


@dataclass(frozen=True)
class Read:
    what: str  # "the model", "the calibration data"
    path: Path


def reads_of(model: Any = None, **named: Any) -> list[Read]:
    """The paths a conversion reads: ``model`` when it is a path (or a ``file.py:callable`` factory's file), and every
    other value given by keyword that is a path (``weights=...``: the keyword, with spaces, names it)."""
    found = []
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        module_file = text.rpartition(":")[0]
        if Path(text).exists():
            found.append(Read("the model", Path(text)))
        elif module_file.endswith(".py") and Path(module_file).is_file():
            found.append(Read("the model's code", Path(module_file)))
    for key, value in named.items():
        if isinstance(value, (str, os.PathLike)) and os.fspath(value):
            found.append(Read(f"the {key.replace('_', ' ')}", Path(value)))
    return found


def refuse_writes_to_inputs(writes: Iterable[Write], reads: Iterable[Read]) -> None:
    """A ConvertError naming both paths when a write would replace, remove or land inside something the run reads."""
    inputs = [(read, path) for read in reads for path in _expanded(read.path)]
    for write in writes:
        target = Path(os.path.realpath(write.path))
        for read, source in inputs:
            verb = _collision(target, source, write.replaces)
            if verb is None:
                continue
            given = read.path if source == Path(os.path.realpath(read.path)) else f"{source} (inside {read.path})"
            through = "" if Path(os.path.abspath(write.path)) == target else f", which resolves to {target}"
            raise ConvertError(
                f"{write.what} {write.path}{through} would {verb} {read.what} {given}: a run never changes its "
                "inputs, with or without --force",
                NEXT_STEP,
            )


def _collision(target: Path, source: Path, replaces: bool) -> str | None:
    if target == source:
        return "replace" if replaces else "write into"
    if target.is_relative_to(source):
        return "land inside"
    if replaces and source.is_relative_to(target):
        return "remove"
    return None


def _expanded(path: Path) -> list[Path]:
    """The input itself and, for a folder, every file and folder inside it, each with its symlinks resolved."""
    if not path.exists() and not path.is_symlink():
        return []
    found = [Path(os.path.realpath(path))]
    if path.is_dir():
        found += [Path(os.path.realpath(inner)) for inner in path.rglob("*")]
    return list(dict.fromkeys(found))
