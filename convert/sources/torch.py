"""PyTorch source: nn.Module objects, torch.export .pt2, TorchScript, pickled modules, factories + weights.

Nothing is unpickled silently. A full pickled module, a TorchScript archive and a .pt2 with pickled
parts run code when loaded, so they need ``trust_code``; every other load uses torch's weights-only
unpickler, which doubles as the allowlist scanner: whatever it refuses is not loaded without trust.
A .pt2 whose input or output tree names a type of a well-known library imports the module that defines it
(``load_program`` in convert/backends/torch.py); no other module is imported on a file's say-so.
"""

from __future__ import annotations

import inspect
import pickle
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from convert.archives import check_archive
from convert.backends.torch import TRUST_HINT, CallConvention, load_program, pt2_code_reasons, require_torch, to_numpy
from convert.errors import ConvertError
from convert.safety import detect_format, sha256_file
from convert.sources.base import SourceInfo, example_arrays
from convert.sources.request import SourceRequest, importable_working_folder, weights_need_factory
from convert.sources.signature import (
    SPEC_HINT,
    export_sizes_from_arrays,
    order_by_parameters,
    specs_from_arrays,
    with_declared_domains,
)
from convert.sources.torch_model import TorchSource, image_domain
from convert.specs import InputSpec


def load_torch_source(request: SourceRequest) -> TorchSource:
    torch = require_torch()
    model = request.model
    info = SourceInfo(framework="torch", kind=request.kind, description=type(model).__name__)
    exported = None
    if isinstance(model, Path):
        info.path, info.sha256 = str(model), sha256_file(model)
        model, info.kind = _load_file(model, request.trust_code)
        info.description = type(model).__name__
    if request.weights is not None:
        if not isinstance(model, torch.nn.Module) or info.kind not in ("factory", "object"):
            raise ConvertError(
                "--weights goes with a module:callable factory (or an nn.Module object)",
                "Drop --weights: this model file already holds its weights.",
            )
        info.notes += _load_weights(model, request.weights, request.weights_key)
    if isinstance(model, torch.export.ExportedProgram):
        exported = model
        model = exported.module()
        info.kind = "pt2" if info.path else "exported-program"
    elif isinstance(model, torch.nn.Module):
        model.eval()
    else:
        raise ConvertError(
            f"the model is a {type(model).__name__}, not a torch.nn.Module",
            "Give an nn.Module, a torch.export .pt2, a TorchScript file, or a factory returning an nn.Module.",
        )

    parameters, accepts_any = _parameters(model, exported)
    what = f"{info.description}.forward"
    arrays = example_arrays(request.example_inputs, parameters, _tensor_to_numpy)
    dim_ranges: dict[str, tuple[int, int | None]] = {}
    named = exported is None and not accepts_any and not isinstance(model, torch.jit.ScriptModule)
    if request.inputs:
        specs = order_by_parameters(request.inputs, parameters, accepts_any, what, keyword=named)
        if exported is not None:
            _check_against_program(specs, _specs_from_exported(exported)[0])
    elif arrays is not None:
        specs = order_by_parameters(specs_from_arrays(arrays), parameters, accepts_any, what, keyword=named)
    elif exported is not None:
        specs, dim_ranges, arrays = _specs_from_exported(exported)
    else:
        raise ConvertError(f"the input shapes and dtypes of {what} are not known", SPEC_HINT)
    domain = image_domain(model) if exported is None and specs else None
    if domain is not None:  # the image a model of a known image library takes is its first input
        specs = with_declared_domains(specs, {specs[0].name: domain})
    if exported is not None:
        convention = CallConvention.of_program(exported)
    elif named:
        convention = _module_convention(model, specs, parameters, what)
    else:
        convention = CallConvention()
    export_sizes = export_sizes_from_arrays(specs, arrays) if arrays is not None else {}
    source = TorchSource(model, info, specs, export_sizes, dim_ranges, convention)
    source.example_feed = arrays
    return source


def _check_against_program(specs: tuple[InputSpec, ...], program_specs: tuple[InputSpec, ...]) -> None:
    """A .pt2 runs only what it was exported for: each --input must have its program input's rank, dtype and fixed sizes
    (a symbol stands for any size), or the reference run fails deep inside torch with an IndexError."""
    own = {spec.name: spec for spec in program_specs}
    for spec in specs:
        program = own[spec.name]
        signature = f"the program's {spec.name} is {program.dtype}[{','.join(str(d) for d in program.dims)}]"
        problem = ""
        if len(spec.dims) != len(program.dims):
            problem = f"--input {spec.name} has {len(spec.dims)} dims but {signature}"
        elif spec.dtype != program.dtype:
            problem = f"--input {spec.name} is {spec.dtype} but {signature}"
        else:
            fixed = [
                (axis, given, expected)
                for axis, (given, expected) in enumerate(zip(spec.dims, program.dims))
                if isinstance(given, int) and isinstance(expected, int) and given != expected
            ]
            if fixed:
                axis, given, expected = fixed[0]
                problem = f"--input {spec.name} has size {given} at dim {axis} but {signature}"
        if problem:
            raise ConvertError(
                problem,
                f"Give --input {program} (a symbol for each dynamic dim), or leave --input out: a .pt2 brings its own input specs.",
            )


def _module_convention(module, specs: tuple[InputSpec, ...], parameters: list[str], what: str) -> CallConvention:
    """Positional where the specs are the forward's leading parameters (as the module expects); by keyword where
    they skip some (GPT-2's ``past_key_values`` comes before ``attention_mask``), which then need defaults."""
    names = [s.name for s in specs]
    given = set(names)
    for parameter in inspect.signature(module.forward).parameters.values():
        if (
            parameter.name not in given
            and parameter.default is parameter.empty
            and parameter.kind in (parameter.POSITIONAL_ONLY, parameter.POSITIONAL_OR_KEYWORD)
        ):
            raise ConvertError(
                f"no spec is given for the input '{parameter.name}' of {what}, which it requires",
                "Give an --input spec for every input the model requires, in any order.",
            )
    return CallConvention() if names == parameters[: len(names)] else CallConvention(keywords=tuple(names))


def _load_file(path: Path, trust_code: bool) -> tuple[Any, str]:
    torch = require_torch()
    kind = detect_format(path)
    if kind == "pt2":
        reasons = pt2_code_reasons(path)
        if reasons and not trust_code:
            raise ConvertError(f"{path} is a torch.export archive whose loading runs code: {'; '.join(reasons)}", TRUST_HINT)
        try:
            return load_program(path), "pt2"
        except ConvertError:
            raise
        except Exception as exc:
            raise ConvertError(
                f"cannot load the torch.export archive {path}: {_one_paragraph(exc)}",
                "Re-save it with torch.export.save from this torch version, or check that the file is complete.",
            ) from exc
    if kind == "torchscript":
        if not trust_code:
            raise ConvertError(f"{path} is a TorchScript archive: loading it runs the TorchScript code it contains", TRUST_HINT)
        check_archive(path)  # trusted code, but no member may declare more than it can hold (detect_format checked too)
        try:
            return torch.jit.load(str(path), map_location="cpu"), "torchscript"
        except Exception as exc:
            raise ConvertError(
                f"cannot load the TorchScript archive {path}: {_one_paragraph(exc)}", "Check that the file is complete."
            ) from exc
    if kind in ("torch-save", "torch-legacy-pickle"):
        try:
            loaded = torch.load(str(path), map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as exc:
            if not trust_code:
                refused = str(exc).strip().splitlines()
                detail = next((line for line in refused if "GLOBAL" in line or "Unsupported" in line), refused[0] if refused else "")
                raise ConvertError(
                    f"{path} holds a pickled Python object, and unpickling it runs code from the file "
                    f"(torch's weights-only unpickler refused it: {detail.strip()})",
                    TRUST_HINT,
                ) from exc
            importable_working_folder()  # the pickle names its classes by module: the user's code beside them
            try:
                loaded = torch.load(str(path), map_location="cpu", weights_only=False)
            except Exception as inner:
                raise ConvertError(
                    f"cannot unpickle {path}: {type(inner).__name__}: {inner}",
                    "A pickled module needs its classes importable: run from the folder of the code that defined it.",
                ) from inner
        except (RuntimeError, EOFError, zipfile.BadZipFile, OSError) as exc:
            raise ConvertError(
                f"cannot read {path} with torch.load: {exc}", "The file may be truncated or corrupt: save it again."
            ) from exc
        if isinstance(loaded, Mapping):
            raise weights_need_factory(path, "only weights (a state dict), not a model")
        if not isinstance(loaded, torch.nn.Module):
            raise ConvertError(
                f"{path} holds a {type(loaded).__name__}, not an nn.Module", "Save the model itself, or a state dict for a factory."
            )
        return loaded, "pickled-module"
    if kind == "safetensors":
        raise weights_need_factory(path, "safetensors weights")
    if kind == "empty":
        raise ConvertError(f"{path} is empty", "Check that the file was written completely.")
    if kind == "directory":
        raise ConvertError(f"{path} is a folder, not a PyTorch model file", "Give the model file itself.")
    raise ConvertError(
        f"{path} is not a PyTorch model file that this tool can read (its bytes look like: {kind})",
        "Give a torch.export .pt2, a TorchScript file, a torch.save'd module (with --trust-code) or a factory with --weights.",
    )


def _one_paragraph(exc: BaseException, limit: int = 600) -> str:
    """A library's error as one line (torch's verifier lists every allowed operator over several lines)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[: limit - 6] + " [...]"


def _load_weights(module, path: Path, weights_key: str | None) -> list[str]:
    """Load a state dict, or a training checkpoint's, into the factory's module; what was done to find it, as notes."""
    torch = require_torch()
    if not path.is_file():
        raise ConvertError(f"the weights file {path} does not exist", "Check the path given to --weights.")
    kind = detect_format(path)
    try:
        if kind == "safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        elif kind in ("torch-save", "torch-legacy-pickle"):
            state = torch.load(str(path), map_location="cpu", weights_only=True)
        else:
            raise ConvertError(
                f"{path} is neither a safetensors file nor a torch.save'd state dict",
                "Save the weights with safetensors.torch.save_file or torch.save(model.state_dict(), path).",
            )
    except pickle.UnpicklingError as exc:
        raise ConvertError(
            f"{path} is not a plain state dict: torch's weights-only unpickler refused it ({str(exc).splitlines()[0]})",
            "Save only the state dict: torch.save(model.state_dict(), path).",
        ) from exc
    except ConvertError:
        raise
    except Exception as exc:
        raise ConvertError(f"cannot read the weights file {path}: {exc}", "The file may be truncated or corrupt.") from exc
    if not isinstance(state, Mapping):
        raise ConvertError(f"{path} does not hold a state dict", "Save the weights with torch.save(model.state_dict(), path).")
    state, where, notes = _model_state(state, set(module.state_dict()), path, weights_key)
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        first = str(exc).splitlines()
        raise ConvertError(
            f"the weights in {where} do not fit the model: {' '.join(line.strip() for line in first[:3])}",
            "Check that the factory builds the same architecture the weights were saved from.",
        ) from exc
    return notes


def _model_state(state: Mapping, expected: set[str], path: Path, weights_key: str | None) -> tuple[Mapping, str, list[str]]:
    """The model's state dict in what a weights file holds, where in it, and what was done to find it: the file's top level, or the
    entry of a training checkpoint ({'epoch': 3, 'model_state_dict': {...}, 'optimizer_state_dict': {...}}) that
    ``weights_key`` names, else the one whose keys fit the model's; with the prefix every key carries (DDP's
    'module.', torch.compile's '_orig_mod.') stripped where that makes them the model's."""
    notes, where = [], str(path)
    entries = {key: value for key, value in state.items() if _is_state_dict(value)}
    listed = ", ".join(f"'{key}'" for key in entries) or "none"
    if weights_key is not None:
        if weights_key not in entries:
            raise ConvertError(
                f"--weights-key {weights_key}: {path} has no state dict under that key (the entries that are state dicts: {listed})",
                "Give --weights-key one of those entries." if entries else "Drop --weights-key: the file holds no nested state dict.",
            )
        state, where = entries[weights_key], f"the '{weights_key}' entry of {path}"
        notes.append(f"the weights are {where} (--weights-key)")
    elif entries:  # a checkpoint: its state dicts are entries of the top level
        fitting = [key for key, value in entries.items() if _fitting_prefix(value, expected) is not None]
        chosen = fitting or list(entries)
        if len(chosen) > 1:
            which = "fit the model's keys" if fitting else "are state dicts, and none fits the model's keys"
            raise ConvertError(
                f"{path} is a training checkpoint with several entries that {which}: {', '.join(map(repr, chosen))}",
                f"Pick the one to export with --weights-key, e.g. --weights-key {chosen[0]}.",
            )
        state, where = entries[chosen[0]], f"the '{chosen[0]}' entry of the training checkpoint {path}"
        notes.append(f"the weights are {where} (choose another with --weights-key)")
    prefix = _fitting_prefix(state, expected)
    if prefix:
        state = {key[len(prefix) :]: value for key, value in state.items()}
        notes.append(
            f"the prefix '{prefix}' that every key of the weights in {where} carries was stripped (as DDP or torch.compile save it)"
        )
    return state, where, notes


def _is_state_dict(value: Any) -> bool:
    torch = require_torch()
    return isinstance(value, Mapping) and bool(value) and all(isinstance(item, torch.Tensor) for item in value.values())


def _fitting_prefix(state: Mapping, expected: set[str]) -> str | None:
    """The prefix to strip from every key to make them the model's: empty where they are already, the leading dotted
    parts every key carries (``module.``, ``_orig_mod.``, both) where removing them does it; None where neither fits."""
    keys = [str(key) for key in state]
    if set(keys) == expected:
        return ""
    parts = keys[0].split(".") if keys else []
    for count in range(1, len(parts)):
        prefix = ".".join(parts[:count]) + "."
        if not all(key.startswith(prefix) for key in keys):
            return None
        if {key[len(prefix) :] for key in keys} == expected:
            return prefix
    return None


def _parameters(module, exported) -> tuple[list[str], bool]:
    """The forward's input names in call order, and whether it takes *args."""
    if exported is not None:
        return program_input_names(exported), False
    torch = require_torch()
    if isinstance(module, torch.jit.ScriptModule):
        return [a.name for a in module.forward.schema.arguments[1:]], False
    signature = inspect.signature(module.forward)
    names = [p.name for p in signature.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    accepts_any = any(p.kind == p.VAR_POSITIONAL for p in signature.parameters.values())
    return names, accepts_any


def program_input_names(program) -> list[str]:
    """A torch.export program's inputs in call order: a positional input by its placeholder's name, a keyword input
    by its keyword (torch names the placeholder after it too, unless that name is taken)."""
    from torch.utils._pytree import MappingKey, tree_flatten_with_path, tree_unflatten

    placeholders = [s.arg.name for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    in_spec = program.call_spec.in_spec
    if in_spec is None or in_spec.num_leaves != len(placeholders):
        return placeholders
    leaves, _ = tree_flatten_with_path(tree_unflatten(list(range(in_spec.num_leaves)), in_spec))
    return [
        path[1].key if len(path) == 2 and isinstance(path[1], MappingKey) else placeholder
        for placeholder, (path, _) in zip(placeholders, leaves)
    ]


def _tensor_to_numpy(value) -> np.ndarray:
    """An example input as an array: a tensor as to_numpy gives it (a bfloat16 one as float32), anything else as NumPy reads it."""
    return to_numpy(value) if hasattr(value, "detach") else np.asarray(value)


_TORCH_DTYPES = {
    "torch.float32": "float32",
    "torch.float16": "float16",
    "torch.bfloat16": "bfloat16",
    "torch.float64": "float64",
    "torch.int64": "int64",
    "torch.int32": "int32",
    "torch.int16": "int16",
    "torch.int8": "int8",
    "torch.uint8": "uint8",
    "torch.bool": "bool",
}


def _specs_from_exported(exported) -> tuple[tuple[InputSpec, ...], dict[str, tuple[int, int | None]], dict[str, np.ndarray] | None]:
    """Specs from a .pt2's own placeholders: symbolic sizes become symbols, with the program's ranges."""
    placeholder_names = [s.arg.name for s in exported.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    user_inputs = program_input_names(exported)
    placeholders = {n.name: n for n in exported.graph.nodes if n.op == "placeholder"}
    specs, ranges = [], {}
    range_by_symbol = {str(k): v for k, v in exported.range_constraints.items()}
    friendly: dict[str, str] = {}  # torch's own symbols (s77) become d0, d1... in order of appearance
    for name, placeholder in zip(user_inputs, placeholder_names):
        value = placeholders[placeholder].meta.get("val")
        if value is None or not hasattr(value, "shape"):
            raise ConvertError(f"the input '{name}' of the .pt2 program is not a tensor", "Only tensor inputs are supported.")
        dims = []
        for size in value.shape:
            text = str(size)
            if text.isdigit():
                dims.append(int(text))
            else:
                symbol = friendly.setdefault(text, f"d{len(friendly)}")
                dims.append(symbol)
                bounds = range_by_symbol.get(text)
                if bounds is not None:
                    upper = None if str(bounds.upper) in ("int_oo", "oo") else int(bounds.upper)
                    ranges[symbol] = (
                        max(int(bounds.lower), 1),
                        upper,
                    )  # 0 is torch.export's default, not a promise that the dim may be empty
        specs.append(InputSpec(name, _TORCH_DTYPES[str(value.dtype)], tuple(dims)))
    arrays = None
    example = getattr(exported, "example_inputs", None)
    if example:
        from torch.utils._pytree import tree_leaves

        values = tree_leaves(example)  # (args, kwargs) in the program's input order
        if len(values) == len(user_inputs) and all(hasattr(v, "detach") for v in values):
            arrays = {n: to_numpy(v) for n, v in zip(user_inputs, values)}
    return tuple(specs), ranges, arrays
