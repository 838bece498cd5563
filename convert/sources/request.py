"""What the user asked to load, before any framework is imported."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import inspect
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from convert.errors import ConvertError
from convert.specs import InputSpec
from convert.text import closest

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
FACTORY_HINT = (
    "Give a model file, or the model's code as module.path:callable (importable from the current folder) or path/to/file.py:callable."
)


@dataclass
class SourceRequest:
    model: Any  # a path, "package.module:callable", "path/to/file.py:callable", or a framework object
    framework: str | None = None
    weights: Path | None = None
    weights_key: str | None = None  # the entry of a training checkpoint (--weights) that holds the model's state dict
    params: Any = None  # a JAX model's params: a file path, or a pytree from Python
    inputs: tuple[InputSpec, ...] = ()
    example_inputs: dict[str, np.ndarray] | tuple | None = None
    trust_code: bool = False
    task: str | None = None  # a Hugging Face task (Optimum's names); implies the transformers source
    component: str | None = None  # one network of a model made of several (convert/composites.py names them)
    dtype: str = "float32"  # what a Hugging Face folder's floating weights compute in ("source": the checkpoint's)
    dim_ranges: dict[str, tuple[int, int | None]] = field(default_factory=dict)  # the bounds of --shape-range
    kind: str = "object"  # set by resolve(): "path", "factory" or "object"
    factory: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)


# weights files a factory takes, besides the model files every source and format names
WEIGHTS_SUFFIXES = (".safetensors", ".ckpt", ".msgpack", ".npz")


def missing_model_error(text: str) -> ConvertError:
    """The error for a model name that is neither a file or folder here nor a factory reference: a missing path, or a
    Hugging Face Hub id (``org/name``), which is never downloaded. A name is a path where it says so: a model file's
    suffix, a leading ./ ../ / or ~, or a parent folder that exists (``examples/nosuch.pt2`` is no Hub id)."""
    path = Path(text).expanduser()
    says_path = (
        text.startswith(("./", "../", "/", "~", ".\\", "..\\"))
        or path.suffix.lower() in _model_suffixes()
        or (path.parent != Path(".") and path.parent.is_dir())
    )
    if HUB_ID.match(text) and not says_path:
        local = text.split("/")[-1]
        return ConvertError(
            f"{text} is not a file or folder here; it looks like a Hugging Face Hub id, and this tool never downloads models",
            f"Download the folder first (huggingface-cli download {text} --local-dir {local}), then run: convert {local}/ ...",
        )
    if not says_path:
        return ConvertError(f"the model {text} does not exist", FACTORY_HINT)
    where = "" if path.is_absolute() else f" (a relative path is read from the working folder, {Path.cwd()})"
    near = _near_name(path)
    return ConvertError(
        f"the model {text} does not exist{where}",
        f"Give a model file that exists: did you mean {near}?" if near else "Give a model file that exists: check the path.",
    )


def _near_name(path: Path) -> Path | None:
    """The file or folder beside a missing path whose name is closest to its name (a typo's likely target), if any."""
    try:
        names = [entry.name for entry in path.parent.iterdir()]
    except OSError:  # no parent folder, or one this user cannot list
        return None
    near = difflib.get_close_matches(path.name, names, n=1)
    return path.parent / near[0] if near else None


def _model_suffixes() -> set[str]:
    from convert.registry import REGISTRY

    sources = {suffix for entry in REGISTRY.entries("source") for suffix in entry.suffixes}
    formats = {suffix for entry in REGISTRY.entries("format") for suffix in entry.given_suffixes}
    return sources | formats | set(WEIGHTS_SUFFIXES)


def weights_need_factory(path: Path, what: str) -> ConvertError:
    """The error for a weights-only file given as the model: its first words say that weights need the model's code."""
    return ConvertError(
        f"{path} holds {what}, and weights alone need a model factory: a Python function that builds the model with no "
        "arguments, given as the model, with this file as --weights",
        "Write one, e.g. a file mymodel.py with the four lines `from mynet import MyNet` / `def build():` / "
        "`    model = MyNet(num_classes=10)  # the class and arguments the weights were saved from` / `    return model`, "
        f'then run: convert mymodel.py:build --weights {path} --input "x:float32[B,3,224,224]" --to onnx',
    )


def split_reference(text: str) -> tuple[str, str] | None:
    """(module or file, attribute) of ``module.path:callable`` or ``path/to/file.py:callable``, else None.

    The split is on the last ':', so a drive (``C:\\models\\nets.py:build``) or a folder with ':' in its name stays
    in the file part."""
    target, sep, attribute = text.rpartition(":")
    if not (sep and target and attribute) or not all(part.isidentifier() for part in attribute.split(".")):
        return None
    if _names_a_file(target) or all(part.isidentifier() for part in target.split(".")):
        return target, attribute
    return None


def _names_a_file(target: str) -> bool:
    return target.lower().endswith(".py") or "/" in target or "\\" in target or Path(target).is_file()


def is_factory_reference(text: str) -> bool:
    return split_reference(text) is not None


def anchored_reference(text: str, folder: Path) -> str:
    """A model path or factory reference written in a file in ``folder``: a relative file (a model, or a factory's
    .py) is taken from ``folder``; a module reference imports as it would anywhere."""
    parts = None if (folder / text).exists() else split_reference(text)
    if parts is None:
        return text if Path(text).is_absolute() else str(folder / text)
    target, attribute = parts
    if not _names_a_file(target) or Path(target).is_absolute():
        return text
    return f"{folder / target}:{attribute}"


def import_reference(reference: str) -> Any:
    """Import ``package.module:attribute`` (from the current folder too), or ``path/to/file.py:attribute``, without
    calling it. Importing runs the module's code: naming it is trusting it, as with any import."""
    parts = split_reference(reference)
    if parts is None:
        raise ConvertError(f"{reference} is not a factory reference", FACTORY_HINT)
    target, attribute = parts
    if _names_a_file(target):
        module, where = _import_file(Path(target), reference), target
    else:
        importable_working_folder()
        try:
            module = importlib.import_module(target)
        except ImportError as exc:
            raise ConvertError(f"cannot import the module '{target}' of {reference}: {exc}", FACTORY_HINT) from exc
        where = f"the module '{target}'"
    found: Any = module
    parts = attribute.split(".")
    for depth, part in enumerate(parts):
        if not hasattr(found, part):
            defined = sorted(
                name
                for name, value in vars(module).items()
                if callable(value) and not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
            )
            near = closest(part, [name for name in dir(found) if not name.startswith("_")])
            suggestion = f"Did you mean {target}:{'.'.join([*parts[:depth], near])}? " if near else ""
            raise ConvertError(
                f"{where} has no attribute '{attribute}'" + (f" (it defines {', '.join(defined)})" if defined else ""),
                suggestion + FACTORY_HINT,
            )
        found = getattr(found, part)
    if not callable(found):
        raise ConvertError(f"{reference} is not callable", "Point at a function or class that builds the model with no arguments.")
    return found


def importable_working_folder() -> None:
    """Put the working folder on sys.path, as ``python -m convert`` does and the console script does not: a user's
    factory module, or the classes a trusted pickle names, are imported from the folder the user runs in."""
    if str(Path.cwd()) not in sys.path and "" not in sys.path:
        sys.path.insert(0, str(Path.cwd()))


def _import_file(path: Path, reference: str) -> ModuleType:
    """Run a .py file as a module of its own, with its folder on sys.path for its own imports."""
    if not path.is_file():
        raise ConvertError(
            f"the model file {path} of {reference} does not exist" if not path.exists() else f"{path} of {reference} is not a file",
            FACTORY_HINT,
        )
    if path.suffix.lower() != ".py":
        raise ConvertError(
            f"{path} of {reference} is not a Python file (.py)",
            "Point at the .py file that defines the callable, as path/to/file.py:callable.",
        )
    path = path.resolve()
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    # a name of its own: a file called torch.py or model.py must not replace (or be replaced by) another module
    stem = re.sub(r"\W", "_", path.stem)
    name = f"_convert_file_{stem}_{hashlib.sha1(str(path).encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ConvertError(f"cannot import {path} as a Python module", FACTORY_HINT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look their module up there
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ConvertError(
            f"running {path} (of {reference}) raised {type(exc).__name__}: {exc}",
            "Fix the file so that it imports; the folder it is in is on sys.path for its own imports.",
        ) from exc
    return module


def required_positional(function: Any) -> list[str] | None:
    """The names of the positional parameters a call must give (None when they cannot be read)."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty]


def call_factory(reference: str, target: Any) -> Any:
    """Call the factory ``target`` (imported from ``reference``) with no arguments."""
    required = [] if inspect.isclass(target) else required_positional(target)
    if required:
        raise ConvertError(
            f"{reference} takes arguments ({', '.join(required)}), so it is not a factory that builds the model",
            "If it is a JAX function f(params, *inputs), pass --framework jax and --params with its params file; "
            "otherwise point at a function that builds the model with no arguments.",
        )
    try:
        return target()
    except Exception as exc:
        raise ConvertError(
            f"the factory {reference} raised {type(exc).__name__}: {exc}",
            "Fix the factory so that calling it with no arguments returns the model.",
        ) from exc


def load_example_inputs(path: Path) -> dict[str, np.ndarray]:
    """Example inputs from an .npz (never unpickled; its sizes checked before NumPy allocates what it declares)."""
    from convert.archives import check_npz

    hint = "Save example inputs with numpy.savez(path, name=array, ...), one array per model input."
    try:
        if path.is_file():
            check_npz(path, next_step=hint)
        with np.load(path, allow_pickle=False) as data:
            arrays = {name: data[name] for name in data.files}
    except FileNotFoundError as exc:
        raise ConvertError(f"the example inputs file {path} does not exist", "Check the path given to --example-inputs.") from exc
    except (ValueError, OSError) as exc:
        raise ConvertError(
            f"cannot read {path} as an .npz of arrays ({exc})",
            hint,
        ) from exc
    if not arrays:
        raise ConvertError(f"{path} holds no arrays", "Save one array per model input, named as the input.")
    return arrays
