"""Turn what the user named (a path, a factory reference or an object) into a SourceModel."""

from __future__ import annotations

import os
from pathlib import Path

from convert.errors import ConvertError
from convert.readers import loads_json
from convert.registry import REGISTRY
from convert.safety import check_contained, detect_format
from convert.sources.base import SourceModel
from convert.sources.request import (
    SourceRequest,
    call_factory,
    import_reference,
    is_factory_reference,
    missing_model_error,
    weights_need_factory,
)

_TORCH_FORMATS = ("pt2", "torchscript", "torch-save", "torch-legacy-pickle")
PARAMS_FRAMEWORK = "jax"  # --params belongs to JAX models only
TASK_FRAMEWORK = "transformers"  # --task belongs to Hugging Face models only


def frameworks() -> list[str]:
    return [entry.name for entry in REGISTRY.entries("source")]


def resolve_source(request: SourceRequest) -> SourceModel:
    """Load the model with its framework's source adapter.

    A factory reference is imported here and called with no arguments, unless the framework's source takes
    the callable itself (JAX: a function f(params, *inputs) is the model, not a factory).
    """
    model = request.model
    framework = request.framework
    if isinstance(model, (str, os.PathLike)):
        text = os.fspath(model)
        if Path(text).exists():
            if Path(text).suffix.lower() == ".py":
                raise ConvertError(
                    f"{text} is Python code, not a saved model, and names no callable in it",
                    f"Name the function or class that builds the model, e.g. {text}:build_model.",
                )
            request.model, request.kind = Path(text), "path"
            if request.model.is_dir():
                check_contained(request.model)
        elif is_factory_reference(text):
            target = import_reference(text)
            implied = framework or (PARAMS_FRAMEWORK if request.params is not None else None)
            if implied is not None and _entry(implied).takes_callables:
                request.model, framework = target, implied
            else:
                request.model = call_factory(text, target)
            request.kind, request.factory = "factory", text
        else:
            raise missing_model_error(text)
    if request.component is not None:
        return _component(request, framework)
    _refuse_composite(request, framework)
    if request.task is not None and framework in (None, "torch"):
        framework = TASK_FRAMEWORK
    framework = framework or detect_framework(request.model)
    if request.task is not None and framework != TASK_FRAMEWORK:
        raise ConvertError(
            f"--task goes with Hugging Face Transformers models, and this model is a {framework} one",
            "Drop --task, or give a transformers model folder (what save_pretrained writes).",
        )
    if request.params is not None and framework != PARAMS_FRAMEWORK:
        raise ConvertError(
            f"--params goes with JAX models, and this model is a {framework} one",
            "Give a PyTorch or Keras model's weights with --weights instead.",
        )
    if request.weights_key is not None and (framework != "torch" or request.weights is None):
        raise ConvertError(
            "--weights-key picks the entry of a PyTorch training checkpoint given as --weights with a factory, "
            + ("and no --weights is given" if request.weights is None else f"and this model is a {framework} one"),
            "Drop --weights-key, or give the checkpoint as --weights with the factory that builds its model.",
        )
    return _entry(framework).load()(request)


def _component(request: SourceRequest, framework: str | None) -> SourceModel:
    """One network of a model made of several, loaded by its composite's own loader."""
    from convert.composites import composite_of
    from convert.registry import load_target

    composite = composite_of(request.model, request.task, framework)
    if composite is None:
        raise ConvertError(
            f"--component {request.component} names one network of a model made of several, and {request.model} is a model of one",
            "Drop --component.",
        )
    composite.chosen((request.component,))
    return load_target(composite.load)(request)


def _refuse_composite(request: SourceRequest, framework: str | None) -> None:
    """A model of several networks loads one component at a time: as a whole it is no one source."""
    from convert.composites import composite_of

    composite = composite_of(request.model, request.task, framework)
    if composite is not None:
        raise ConvertError(
            f"{request.model} is a {composite.kind} ({composite.why}), a model of several networks that loads one at a time",
            f"Name one with component= ({', '.join(composite.names())}); convert() converts them all.",
        )


def _entry(framework: str):
    try:
        return REGISTRY.get("source", framework)
    except KeyError:
        raise ConvertError(f"unknown framework '{framework}'", f"Choose one of: {', '.join(frameworks())}.") from None


def detect_framework(model) -> str:
    if isinstance(model, Path):
        if model.is_dir():
            for entry in REGISTRY.entries("source"):
                if _holds_marker(model, entry):
                    return entry.name
            markers = [
                f"{e.folder_name} holds {' or '.join(e.folder_markers)}" + (f" (with {e.folder_key})" if e.folder_key else "")
                for e in REGISTRY.entries("source")
                if e.folder_markers
            ]
            raise ConvertError(
                f"{model} is a folder with no model in it ({'; '.join(markers)})",
                "Give the model file itself, a SavedModel folder, or a Hugging Face model folder (what save_pretrained writes).",
            )
        if model.is_file():
            kind = detect_format(model)
            if kind in _TORCH_FORMATS:
                return "torch"
            if kind == "safetensors":  # said before asking for --framework, which would not help
                raise weights_need_factory(model, "safetensors weights")
            for entry in REGISTRY.entries("source"):
                if model.suffix.lower() in entry.suffixes:
                    return entry.name
        raise ConvertError(f"cannot tell which framework {model} belongs to", f"Pass --framework ({', '.join(frameworks())}).")
    roots = {cls.__module__.split(".")[0] for cls in type(model).__mro__}
    for entry in REGISTRY.entries("source"):
        if set(entry.modules) & roots:
            return entry.name
    raise ConvertError(f"cannot tell which framework a {type(model).__name__} belongs to", f"Pass framework= ({', '.join(frameworks())}).")


def _holds_marker(folder: Path, entry) -> bool:
    """Whether the folder holds one of the entry's marker files (with its top-level key, where the entry names one)."""
    key = entry.folder_key
    for marker in entry.folder_markers:
        path = folder / marker
        if not path.is_file():
            continue
        if key is None:
            return True
        try:
            data = loads_json(path.read_text(errors="replace"), str(path), "")
        except (ConvertError, OSError):
            return False
        return isinstance(data, dict) and key in data
    return False
