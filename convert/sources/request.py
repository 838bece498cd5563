"""What the user asked to load, before any framework is imported."""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from convert.errors import ConvertError
from convert.specs import InputSpec

FACTORY_HINT = "Give a model file, or the model's code as module.path:callable (importable from the current folder)."


@dataclass
class SourceRequest:
    model: Any  # a path, "package.module:callable", or a framework object
    framework: str | None = None
    weights: Path | None = None
    params: Any = None  # a JAX model's params: a file path, or a pytree from Python
    inputs: tuple[InputSpec, ...] = ()
    example_inputs: dict[str, np.ndarray] | tuple | None = None
    trust_code: bool = False
    kind: str = "object"  # set by resolve(): "path", "factory" or "object"
    factory: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def is_factory_reference(text: str) -> bool:
    module, sep, attribute = text.partition(":")
    return bool(sep) and bool(attribute) and all(p.isidentifier() for p in module.split(".") + attribute.split("."))


def import_reference(reference: str) -> Any:
    """Import ``package.module:attribute`` (from the current folder too) without calling it."""
    module_name, _, attribute = reference.partition(":")
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConvertError(f"cannot import the module '{module_name}' of {reference}: {exc}", FACTORY_HINT) from exc
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            raise ConvertError(f"the module '{module_name}' has no attribute '{attribute}'", FACTORY_HINT)
        target = getattr(target, part)
    if not callable(target):
        raise ConvertError(f"{reference} is not callable", "Point at a function or class that builds the model with no arguments.")
    return target


def required_positional(function: Any) -> list[str] | None:
    """The names of the positional parameters a call must give (None when they cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in parameters
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]


def call_factory(reference: str, target: Any) -> Any:
    """Call the factory ``target`` (imported from ``reference``) with no arguments."""
    required = [] if inspect.isclass(target) else required_positional(target)
    if required:
        raise ConvertError(
            f"{reference} takes arguments ({', '.join(required)}), so it is not a factory that builds the model",
            "If it is a JAX function f(params, *inputs), pass --framework jax and --params with its params file; "
            "otherwise point at a function that builds the model with no arguments.")
    try:
        return target()
    except Exception as exc:
        raise ConvertError(f"the factory {reference} raised {type(exc).__name__}: {exc}",
                           "Fix the factory so that calling it with no arguments returns the model.") from exc


def load_example_inputs(path: Path) -> dict[str, np.ndarray]:
    """Example inputs from an .npz (never unpickled)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError as exc:
        raise ConvertError(f"the example inputs file {path} does not exist", "Check the path given to --example-inputs.") from exc
    except (ValueError, OSError) as exc:
        raise ConvertError(f"cannot read {path} as an .npz of arrays ({exc})",
                           "Save example inputs with numpy.savez(path, name=array, ...), one array per model input.") from exc
    if not arrays:
        raise ConvertError(f"{path} holds no arrays", "Save one array per model input, named as the input.")
    return arrays


def load_calibration_data(path: Path, specs) -> list[dict[str, np.ndarray]]:
    """Calibration feeds: an .npz (one feed, arrays by input name), or a folder of .npz feeds (or of .npy
    arrays, for a model with one input). Read without unpickling, and checked against the input specs."""
    from convert.sources.signature import export_sizes_from_arrays

    if path.is_dir():
        files = sorted(f for f in path.iterdir() if f.suffix in (".npz", ".npy"))
        if not files:
            raise ConvertError(f"the calibration folder {path} holds no .npz or .npy files", CALIBRATION_HINT)
    elif path.is_file():
        files = [path]
    else:
        raise ConvertError(f"the calibration data {path} does not exist", "Check the path given to --calibration-data.")
    feeds = []
    for file in files:
        if file.suffix == ".npy":
            if len(specs) != 1:
                raise ConvertError(f"{file} is one array, and the model takes {len(specs)} inputs", CALIBRATION_HINT)
            try:
                feed = {specs[0].name: np.load(file, allow_pickle=False)}
            except (ValueError, OSError) as exc:
                raise ConvertError(f"cannot read {file} as a .npy array ({exc})", CALIBRATION_HINT) from exc
        else:
            feed = load_example_inputs(file)
        try:
            export_sizes_from_arrays(specs, feed)
        except ConvertError as exc:
            raise ConvertError(f"the calibration data {file} does not fit the model: {exc.problem.replace('example input', 'input')}",
                               CALIBRATION_HINT) from exc
        feeds.append(feed)
    return feeds


CALIBRATION_HINT = ("Give an .npz with one array per input (by input name), or a folder of such .npz files (one feed each); "
                    "a folder of .npy files works for a model with one input.")
