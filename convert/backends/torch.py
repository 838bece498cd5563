"""PyTorch as every layer uses it: tensors to and from NumPy, a model's outputs named as the exporters see them, how a
module takes its inputs, and loading a torch.export archive (a .pt2 the user gives, or one this run wrote). The source
model every PyTorch source gives is the sources' own (convert/sources/torch_model.py); this module imports no source.

A .pt2 whose input or output tree names a type of a well-known library (``PYTREE_LIBRARIES``, e.g. a transformers
ModelOutput) imports the module that defines it, from that installed library, so that the type registers itself with
pytree; no other module is imported on a file's say-so.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import re
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from convert.archives import check_archive, read_member
from convert.errors import ConvertError, require
from convert.specs import InputSpec, SourceSignature

# Libraries whose installed modules a .pt2 may name as pytree node types (package to import: what to pip install).
PYTREE_LIBRARIES = {"transformers": "transformers"}


def require_torch():
    return require("torch", "Loading a PyTorch model")


def flatten_outputs(value: Any, prefix: str = "") -> dict[str, Any]:
    """Name every tensor in a model's output the way the exporters see it (pytree order).

    A lone tensor is ``output``; a tuple gives ``output_0``, ``output_1``...; a dict keeps its keys (so does a
    transformers ModelOutput, an OrderedDict of its fields that are set); nesting joins with dots (``hidden.0``).
    None entries are dropped, as the exporters drop them.
    """
    torch = require_torch()
    if isinstance(value, torch.Tensor):
        return {prefix or "output": value}
    flat: dict[str, Any] = {}
    if isinstance(value, Mapping):
        for key, item in value.items():
            flat.update(flatten_outputs(item, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(value, (tuple, list)):
        fields = getattr(value, "_fields", None)
        for index, item in enumerate(value):
            part = fields[index] if fields else str(index)
            flat.update(flatten_outputs(item, f"{prefix}.{part}" if prefix else (part if fields else f"output_{index}")))
    elif value is not None:
        raise ConvertError(
            f"the model returns a {type(value).__name__}, which is not a tensor",
            "Return tensors (alone, or in tuples, lists or dicts) from forward().",
        )
    return flat


# The archive member a TorchScript this tool writes names its flat outputs in (Triton's LibTorch backend, like any
# caller that takes outputs by position, needs a Tensor or a flat tuple; the names say which output each one is).
SCRIPT_OUTPUT_NAMES = "convert/output_names.json"


def flattening_hook(names: list[str]):
    """A forward hook that returns a module's outputs as ``flatten_outputs`` orders them: the one tensor alone, else a
    flat tuple; ``names`` gets each output's name in that order at every call. Registered last, it runs after the
    module's own hooks, and a tracer records what it returns."""

    def flatten(module, args, outputs):
        flat = flatten_outputs(outputs)
        names[:] = list(flat)
        values = tuple(flat.values())
        return values[0] if len(values) == 1 else values

    return flatten


def save_script(module, path: Path, output_names: list[str] | None = None) -> None:
    """A TorchScript archive; ``output_names`` is stored with it where its forward() returns flat outputs."""
    extra = {SCRIPT_OUTPUT_NAMES: json.dumps(output_names)} if output_names is not None else {}
    require_torch().jit.save(module, str(path), _extra_files=extra)


def load_script(path: Path, device: str = "cpu") -> tuple[Any, list[str] | None]:
    """A TorchScript archive (this loads its code: only for archives this run wrote or the user trusts), with the names
    of the flat outputs it returns where the archive stores them."""
    extra = {SCRIPT_OUTPUT_NAMES: ""}
    module = require_torch().jit.load(str(path), map_location=device, _extra_files=extra)
    return module, json.loads(extra[SCRIPT_OUTPUT_NAMES]) if extra[SCRIPT_OUTPUT_NAMES] else None


def script_outputs(outputs: Any, output_names: list[str] | None) -> dict[str, Any]:
    """A TorchScript's outputs by name: by the names its archive stores, else as ``flatten_outputs`` names them."""
    if output_names is None:
        return flatten_outputs(outputs)
    values = (outputs,) if isinstance(outputs, require_torch().Tensor) else tuple(outputs)
    if len(values) != len(output_names):
        raise ValueError(f"the TorchScript returns {len(values)} outputs where its archive names {len(output_names)}")
    return dict(zip(output_names, values))


def to_numpy(tensor) -> np.ndarray:
    torch = require_torch()
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def to_tensors(specs: tuple[InputSpec, ...], feed: dict[str, np.ndarray], device: str = "cpu") -> tuple:
    """The feed as tensors; a bfloat16 input (NumPy has none: it is fed as float32) cast to bfloat16."""
    torch = require_torch()
    # np.asarray keeps a rank-0 input rank 0 (np.ascontiguousarray makes it rank 1, and an export would take rank 1)
    tensors = (torch.from_numpy(np.asarray(feed[s.name], order="C")) for s in specs)
    return tuple(
        (tensor.to(torch.bfloat16) if spec.dtype == "bfloat16" else tensor).to(device) for spec, tensor in zip(specs, tensors, strict=True)
    )


class CallConvention:
    """How a module takes its inputs (given in the specs' order): positionally; by keyword (a forward whose
    named parameters the specs skip); or as a torch.export program's input tree ``(args, kwargs)``, whose
    keyword inputs must come by name and in the order it was exported with."""

    def __init__(self, keywords: tuple[str, ...] | None = None, in_spec: Any = None):
        self.keywords = keywords
        self.in_spec = in_spec

    @classmethod
    def of_program(cls, program) -> CallConvention:
        return cls(in_spec=program.call_spec.in_spec)

    def arguments(self, values) -> tuple[tuple, dict[str, Any]]:
        """Positional and keyword arguments from one value per input, in the specs' order."""
        if self.in_spec is not None:
            from torch.utils._pytree import tree_unflatten

            return tree_unflatten(list(values), self.in_spec)
        if self.keywords is not None:
            return (), dict(zip(self.keywords, values))
        return tuple(values), {}

    def dynamic_shapes(self, per_input: list) -> tuple | dict[str, Any]:
        """torch.export's dynamic_shapes from one entry per input: keyed by parameter name for a keyword call,
        else a tuple in call order (arguments, then keyword arguments as the program orders them)."""
        args, kwargs = self.arguments(per_input)
        return kwargs if self.keywords is not None else (*args, *kwargs.values())

    def __call__(self, module, values):
        args, kwargs = self.arguments(values)
        return module(*args, **kwargs)


def load_program(path: Path):
    """torch.export.load, after the library types its input and output trees name have registered with pytree
    (see PYTREE_LIBRARIES); a ConvertError names the package to install where one is missing."""
    torch = require_torch()
    check_archive(path, next_step=_NEXT_STEP)  # the caller decided on trust (pt2_code_reasons); sizes bind everyone
    missing = register_pytree_types(path)
    if missing:
        raise ConvertError(f"cannot load the torch.export archive {path}: {missing[0]}", missing[1])
    with torch_export_quiet():
        return torch.export.load(str(path))


@contextlib.contextmanager
def torch_export_quiet() -> Iterator[None]:
    """Keep what torch.export.load logs (a warning with a full traceback when its reader fails and it falls back to
    the old layout, deprecation notes) off the user's terminal: the error that follows says what went wrong, in one
    paragraph."""
    import logging
    import warnings

    loggers = [logging.getLogger(name) for name in ("torch.export", "torch._export")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def register_pytree_types(path: Path) -> tuple[str, str] | None:
    """Import the installed, allowlisted modules that define the pytree node types the archive's programs name,
    so that torch can rebuild their input and output trees; (problem, next step) for a type that stays unknown."""
    import importlib
    import importlib.util

    from torch.utils._pytree import SERIALIZED_TYPE_TO_PYTHON_TYPE

    for name in sorted(_pytree_type_names(path)):
        if name in SERIALIZED_TYPE_TO_PYTHON_TYPE:
            continue
        module, _, _ = name.rpartition(".")
        package = module.split(".")[0]
        if package not in PYTREE_LIBRARIES:
            return (
                f"its input or output tree holds a {name}, a type from {package}, which this tool does not import on a file's say-so",
                "Export the program with tensors, tuples and dicts as its inputs and outputs; "
                "or, in Python, import the package and pass torch.export.load(path) to convert.convert(..., isolate=False).",
            )
        install = f"pip install {PYTREE_LIBRARIES[package]}"
        if importlib.util.find_spec(package) is None:
            return (
                f"its input or output tree holds a {name}, a type from the {package} library, which is not installed here",
                f"Install it ({install}, the version the program was exported with), then run the same command again.",
            )
        try:
            importlib.import_module(module)
        except ImportError as exc:
            return (
                f"its input or output tree holds a {name}, but {module} cannot be imported: {exc}",
                f"Install the {package} version the program was exported with ({install}==VERSION).",
            )
        if name not in SERIALIZED_TYPE_TO_PYTHON_TYPE:
            return (
                f"its input or output tree holds a {name}, which the installed {package} does not register with pytree",
                f"Install the {package} version the program was exported with ({install}==VERSION).",
            )
    return None


def _pytree_type_names(path: Path) -> set[str]:
    """The node type names of every input and output tree in the archive's serialized programs."""

    def walk(node) -> Iterator[str]:
        if isinstance(node, dict):
            if node.get("type"):
                yield node["type"]
            for child in node.get("children_spec") or ():
                yield from walk(child)

    names: set[str] = set()
    try:
        with zipfile.ZipFile(path) as archive:
            for member in archive.namelist():
                inner = member.split("/", 1)[-1]
                if not (inner.startswith("models/") and inner.endswith(".json")):
                    continue
                program = json.loads(archive.read(member))
                for entry in program.get("graph_module", {}).get("module_call_graph", ()):
                    signature = entry.get("signature") or {}
                    for tree in (signature.get("in_spec"), signature.get("out_spec")):
                        if isinstance(tree, str):
                            names.update(walk(json.loads(tree)[1]))
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, OSError, RecursionError, zipfile.BadZipFile, zlib.error):
        return set()  # torch.export.load reports an unreadable archive
    return names


class CalledModel(Protocol):
    """What the helpers here need of a PyTorch source model (convert/sources/torch_model.py's TorchSource): how its
    module takes its inputs, and their specs."""

    convention: CallConvention
    signature: SourceSignature


class TracedProgram:
    """The program torch.onnx exports from this source (torch.export, then torch.onnx's decompositions), run node by
    node: its call nodes' names are the names of the values of an ONNX graph torch.onnx's dynamo exporter wrote."""

    method = "torch.onnx's exported program, run node by node (ONNX values named after its nodes)"

    def __init__(self, source: CalledModel, program):
        self.program = program  # an ExportedProgram as torch.onnx decomposed it
        self.source = source
        self.layers = {
            node.name: _module_path(node) for node in self.program.graph.nodes if node.op == "call_function" and _is_tensor(node)
        }

    @classmethod
    def of_file(cls, source: CalledModel, path: Path) -> TracedProgram:
        """A torch.export artifact's own program (validation has loaded it already)."""
        traced = cls(source, require_torch().export.load(str(path)))
        traced.method = "the torch.export program, run node by node beside the source model's modules"
        return traced

    def names(self, graph) -> dict[str, str]:
        """The graph's values this program has, with their layers."""
        return {value: self.layers[value] for node in graph.node for value in node.output if value in self.layers}

    def values(self, feed: dict[str, np.ndarray], names: list[str], budget_bytes: int) -> dict[str, np.ndarray]:
        """The values of the named nodes for one feed, in the order asked, until they take ``budget_bytes`` (at least one)."""
        torch = require_torch()
        wanted = {name: index for index, name in enumerate(names)}
        found: dict[str, np.ndarray] = {}
        taken = [0]

        class Enough(Exception):
            pass

        class Recorder(torch.fx.Interpreter):
            def run_node(self, node):
                result = super().run_node(node)
                if node.name in wanted and isinstance(result, torch.Tensor):
                    array = to_numpy(result)
                    if found and taken[0] + array.nbytes > budget_bytes:
                        raise Enough
                    found[node.name], taken[0] = array, taken[0] + array.nbytes
                return result

        args, kwargs = self.source.convention.arguments(to_tensors(self.source.signature.inputs, feed))
        flat = self.program._get_flat_args_with_check(args, kwargs)  # as torch.onnx's own verification does
        with torch.inference_mode():
            try:
                Recorder(self.program.module()).run(*flat)
            except Enough:
                pass
        return {name: found[name] for name in sorted(found, key=wanted.__getitem__)}

    def outputs(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The program's own outputs for one feed, named as the source's."""
        torch = require_torch()
        args, kwargs = self.source.convention.arguments(to_tensors(self.source.signature.inputs, feed))
        with torch.inference_mode():
            outputs = self.program.module()(*args, **kwargs)
        return {name: to_numpy(t) for name, t in flatten_outputs(outputs).items()}

    def module_outputs(self, feed: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Each submodule's output in the source model run eagerly (a forward hook) beside its value in the captured
        program (the last node the program runs inside that module), in the order the modules finish. A module called
        more than once, or whose values do not have the same shape on both sides, is left out: which value stands for
        it is not known."""
        module = self.source.module
        eager = {
            path: [to_numpy(output) if output is not None else None for _, output in made]
            for path, made in module_calls(self.source, feed).items()
        }
        last: dict[str, str] = {}  # module path -> the last node run inside it
        for node in self.program.graph.nodes:
            if node.op == "call_function" and _is_tensor(node):
                for path, _ in (node.meta.get("nn_module_stack") or {}).values():
                    last[path] = node.name
        once = [path for path, outputs in eager.items() if len(outputs) == 1 and outputs[0] is not None and path in last]
        captured = self.values(feed, [last[path] for path in once], 2**62)
        kinds = {path: type(m).__name__ for path, m in module.named_modules()}
        return [
            (f"{path} ({kinds[path]})", eager[path][0], captured[last[path]])
            for path in once
            if last[path] in captured and captured[last[path]].shape == eager[path][0].shape
        ]


class TracedScript:
    """A TorchScript artifact, its own captured program: its outputs, and each submodule run on the inputs the source's
    same module received when the source ran eagerly (a forward hook), beside that module's eager output."""

    method = "the TorchScript archive, each submodule run on the inputs its eager twin received"

    def __init__(self, source: CalledModel, scripted, output_names: list[str] | None = None):
        self.source, self.scripted, self.output_names = source, scripted, output_names

    @classmethod
    def of_file(cls, source: CalledModel, path: Path) -> TracedScript:
        """A TorchScript artifact (validation has loaded it already, with the trust it needs)."""
        return cls(source, *load_script(path))

    def outputs(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The archive's outputs for one feed, named as the source's."""
        torch = require_torch()
        with torch.inference_mode():
            outputs = self.source.convention(self.scripted, to_tensors(self.source.signature.inputs, feed))
        return {name: to_numpy(t) for name, t in script_outputs(outputs, self.output_names).items()}

    def module_outputs(self, feed: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Each submodule called once, in the order the modules finish: its eager output beside the archive's same
        submodule's on the same inputs. A module whose archive twin is missing, takes other arguments (a traced
        submodule takes the positional tensors it was traced with: a call with keyword arguments is not replayed) or
        gives another shape is left out."""
        torch = require_torch()
        module = self.source.module
        calls = module_calls(self.source, feed)
        scripted = dict(self.scripted.named_modules())
        kinds = {path: type(m).__name__ for path, m in module.named_modules()}
        found = []
        for path, made in calls.items():
            (args, expected), twin = made[0], scripted.get(path)
            if len(made) != 1 or args is None or expected is None or twin is None:
                continue
            try:
                with torch.inference_mode():
                    actual = twin(*args)
            except Exception:  # noqa: BLE001 - a submodule the archive calls with other arguments is not compared
                continue
            actual = actual if isinstance(actual, torch.Tensor) else next(iter(flatten_outputs(actual).values()), None)
            if isinstance(actual, torch.Tensor) and actual.shape == expected.shape:
                found.append((f"{path} ({kinds[path]})", to_numpy(expected), to_numpy(actual)))
        return found


def module_calls(source: CalledModel, feed: dict[str, np.ndarray]) -> dict[str, list[tuple[tuple | None, Any]]]:
    """Each submodule's calls while the source runs eagerly on one feed (a forward hook on every one), by module path:
    the positional tensors it was called with (None where it took keyword or non-tensor arguments: not replayable) and
    its first output tensor (None where it gave none)."""
    torch = require_torch()
    calls: dict[str, list] = {}

    def record(path, _module, args, kwargs, output):
        tensor = next(iter(flatten_outputs(output).values()), None) if not isinstance(output, torch.Tensor) else output
        replayable = not kwargs and all(isinstance(a, torch.Tensor) for a in args)
        calls.setdefault(path, []).append((args if replayable else None, tensor if isinstance(tensor, torch.Tensor) else None))

    module = source.module
    hooks = [m.register_forward_hook(functools.partial(record, path), with_kwargs=True) for path, m in module.named_modules() if path]
    try:
        with torch.inference_mode():
            source.convention(module, to_tensors(source.signature.inputs, feed))
    finally:
        for hook in hooks:
            hook.remove()
    return calls


def _module_path(node) -> str:
    """The innermost module a node of an exported program runs in, as ``path (Class)``."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, kind = list(stack.values())[-1]
    kind = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return f"{path or '(model)'} ({kind.rsplit('.', 1)[-1]})"


def _is_tensor(node) -> bool:
    return hasattr(node.meta.get("val"), "shape")


TRUST_HINT = "If you trust the file and where it came from, pass --trust-code; otherwise save the model as a torch.export .pt2 without pickled parts, or as a state dict for a module:callable factory."


def pt2_code_reasons(path: Path) -> list[str]:
    """Why loading this .pt2 would run code (empty when it holds only what torch.export.save writes: JSON graphs whose
    shape expressions are plain sympy, raw tensors, sample inputs torch's weights-only unpickler reads).

    The archive is checked by allow-list, before torch sees it: one folder (torch's own layout) holding only the
    members torch 2.13 writes (``PT2_MEMBERS``). torch.export.load unpickles in full: weights and constants flagged
    ``use_pickle``, custom and opaque objects, the legacy ``data/weights/NAME.pt`` and ``data/constants/NAME.pt``, the
    whole old (torch 2.7) layout it falls back to when its reader fails, and sample inputs the weights-only unpickler
    refuses; it evaluates every shape expression with sympy.sympify (Python's eval); it loads AOTInductor shared
    libraries. Each of these, and any member it does not write, is a reason. A member that declares more than it can
    hold (a decompression bomb) is refused outright (``convert.archives``).
    """
    try:
        return _pt2_code_reasons(path)
    except ConvertError:
        raise
    except (ValueError, AttributeError, TypeError, KeyError, EOFError, OSError, RecursionError, zipfile.BadZipFile, zlib.error) as exc:
        raise ConvertError(
            f"{path} is a torch.export archive that cannot be read: {type(exc).__name__}: {exc}",
            "The file may be truncated or corrupt: export it again with torch.export.save.",
        ) from exc


_PROGRAM_NAME = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"  # "model" for torch.export.save; package_pt2 takes any name
# Every member torch.export.save (torch 2.13) writes, by its path inside the archive's one folder, and what it is.
PT2_MEMBERS = {
    r"archive_format|archive_version|byteorder|\.data/version|\.data/serialization_id": "format",
    rf"models/{_PROGRAM_NAME}\.json": "program",
    rf"data/weights/{_PROGRAM_NAME}_weights_config\.json": "weights config",
    rf"data/constants/{_PROGRAM_NAME}_constants_config\.json": "constants config",
    r"data/weights/weight_[0-9]+|data/constants/tensor_[0-9]+": "raw tensor",
    rf"data/sample_inputs/{_PROGRAM_NAME}\.pt": "sample inputs",
    r"extra/[^\x00]+": "extra file",  # torch.export.save(extra_files=...): read back as text
    r"data/constants/(custom|opaque)_obj_[0-9]+": "pickled object",
    r"data/aotinductor/.+": "aotinductor",
}
_PT2_PATTERNS = [(re.compile(pattern), kind) for pattern, kind in PT2_MEMBERS.items()]
_PAYLOAD_NAMES = {"weights config": re.compile(r"weight_[0-9]+"), "constants config": re.compile(r"(tensor|custom_obj|opaque_obj)_[0-9]+")}
# The members of torch's old layout, at the archive's root, which it unpickles in full (weights_only=False).
_OLD_LAYOUT = {
    "version",
    "serialized_exported_program.json",
    "serialized_state_dict.pt",
    "serialized_constants.pt",
    "serialized_example_inputs.pt",
}
_NEXT_STEP = "Refused before torch reads it: export the program again with torch.export.save, or check where the file came from."


def pt2_member_kind(inner: str) -> str | None:
    """What a member is, by its path inside the archive's folder (None: torch.export.save writes no such member)."""
    return next((kind for pattern, kind in _PT2_PATTERNS if pattern.fullmatch(inner)), None)


def _pt2_code_reasons(path: Path) -> list[str]:
    infos = check_archive(path, next_step=_NEXT_STEP)
    names = [info.filename for info in infos]
    folders = {name.split("/", 1)[0] for name in names if "/" in name}
    root = [name for name in names if "/" not in name]
    if _OLD_LAYOUT & set(root):
        return [
            "it is in torch's old layout (serialized_*.pt at the archive's root), whose state dict, constants and sample "
            "inputs torch unpickles in full"
        ]
    if root or len(folders) != 1:
        shown = ", ".join(sorted(root)[:3] or sorted(folders)[:3])
        return [
            f"its members are not all in one folder as torch.export.save writes them ({shown}); torch would read them in its old layout, unpickling them in full"
        ]
    torch = require_torch()
    reasons: list[str] = []
    unknown: list[str] = []
    with zipfile.ZipFile(path) as archive:
        for info in infos:
            inner = info.filename.split("/", 1)[1]
            kind = pt2_member_kind(inner)
            if kind is None:
                unknown.append(inner)
            elif kind == "aotinductor":
                reasons.append("it holds compiled AOTInductor code")
            elif kind == "pickled object":
                reasons.append(f"it holds a pickled custom object ({inner})")
            elif kind in ("program", "weights config", "constants config"):
                document = json.loads(read_member(archive, info))
                reasons += _evaluated_expressions(document)
                if kind != "program":
                    reasons += _payload_reasons(document, kind)
            elif kind == "sample inputs":
                data = read_member(archive, info)
                if not data:
                    continue  # a program saved without example inputs: torch writes an empty member and reads {}
                check_archive(data, f"{path}'s member {inner}", next_step=_NEXT_STEP)  # a torch.save zip, read by torch
                try:
                    torch.load(io.BytesIO(data), weights_only=True)
                except Exception:
                    reasons.append("its sample inputs are not plain tensors (torch would unpickle them fully)")
    legacy = [name for name in unknown if re.fullmatch(rf"data/(weights|constants)/{_PROGRAM_NAME}\.pt", name)]
    if legacy:
        reasons.append(f"it holds legacy pickled members that torch unpickles in full ({', '.join(legacy[:3])})")
    others = [name for name in unknown if name not in legacy]
    if others:
        more = f" and {len(others) - 3} more" if len(others) > 3 else ""
        reasons.append(f"it holds members torch.export.save does not write ({', '.join(others[:3])}{more}), which torch may unpickle")
    return sorted(set(reasons))


def _payload_reasons(document: Any, kind: str) -> list[str]:
    """What a weights or constants config makes torch unpickle: entries flagged use_pickle, custom and opaque objects,
    and entries naming members it does not write."""
    config = document.get("config") if isinstance(document, Mapping) else None
    if not isinstance(config, Mapping):
        return [f"its {kind} is not one torch.export.save writes"]
    reasons = []
    for fqn, meta in config.items():
        meta = meta if isinstance(meta, Mapping) else {}
        name = str(meta.get("path_name", ""))
        if meta.get("use_pickle"):
            reasons.append(f"'{fqn}' is stored as a pickle")
        if name.startswith(("custom_obj", "opaque_obj")):
            reasons.append(f"'{fqn}' is a pickled custom object")
        elif not _PAYLOAD_NAMES[kind].fullmatch(name):
            reasons.append(f"'{fqn}' names a member torch.export.save does not write ({name!r})")
    return reasons


# What a shape expression may hold. torch 2.13 writes each as sympy.srepr (``Mul(Integer(2), Symbol('s77',
# positive=True, integer=True))``) and reads it back with sympy.sympify, which is Python's eval: the expression must be
# calls of these sympy and torch names, numbers, symbol names in quotes, and arithmetic.
_EXPRESSION_NAMES = frozenset(
    # sympy classes and constants srepr writes
    "Symbol Dummy Integer Rational Float Add Mul Pow Mod Max Min Abs floor ceiling sign sqrt Eq Ne Lt Le Gt Ge Equality "
    "Unequality StrictLessThan LessThan StrictGreaterThan GreaterThan And Or Not Xor ITE Piecewise ExprCondPair Tuple "
    "true false True False None oo zoo nan int_oo Infinity NegativeInfinity NaN ComplexInfinity Half One Zero NegativeOne "
    "IntInfinity NegativeIntInfinity precision "
    # torch.utils._sympy.functions, as torch's deserializer names them
    "FloorDiv ModularIndexing Where PythonMod CleanDiv CeilToInt FloorToInt CeilDiv LShift RShift PowByNatural FloatPow "
    "FloatTrueDiv IntTrueDiv IsNonOverlappingAndDenseIndicator TruncToFloat TruncToInt RoundToInt RoundDecimal ToFloat "
    "Identity "
    # sympy's assumptions, as keyword arguments of Symbol
    "algebraic antihermitian commutative complex composite even extended_negative extended_nonnegative "
    "extended_nonpositive extended_nonzero extended_positive extended_real finite hermitian imaginary infinite integer "
    "irrational negative noninteger nonnegative nonpositive nonzero odd polar positive prime rational real transcendental "
    "zero".split()
)
_EXPRESSION_OPERATORS = frozenset("( ) , = + - * / ** // %".split())
_SYMBOL_NAME = re.compile(r"[a-z]+[0-9]+")  # s0, u3, zf1: a bare symbol name in an expression written as text
_PLAIN_STRING = re.compile(r"[A-Za-z0-9_.+-]*")  # a symbol's name or a Float's digits, in quotes


def plain_expression(text: str) -> bool:
    """Whether sympy.sympify(text) can only build a sympy expression (no call, attribute or name outside the lists)."""
    import ast
    import tokenize

    if "\n" in text or "\r" in text or "__" in text:
        return False
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    for token in tokens:
        if token.type == tokenize.NAME:
            ok = token.string in _EXPRESSION_NAMES or bool(_SYMBOL_NAME.fullmatch(token.string))
        elif token.type == tokenize.OP:
            ok = token.string in _EXPRESSION_OPERATORS
        elif token.type == tokenize.STRING:
            try:
                value = ast.literal_eval(token.string)
            except (ValueError, SyntaxError):
                return False
            ok = isinstance(value, str) and bool(_PLAIN_STRING.fullmatch(value))
        elif token.type == tokenize.NUMBER:
            ok = len(token.string) <= _NUMBER_DIGITS
        else:
            ok = token.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
        if not ok:
            return False
    try:
        return _bounded_powers(ast.parse(text, mode="eval"))
    except (SyntaxError, ValueError, RecursionError):
        return False


_NUMBER_DIGITS = 40  # a shape expression's literals are sizes and strides
_POWERS = frozenset({"Pow", "PowByNatural", "FloatPow"})


def _bounded_powers(tree) -> bool:
    """Whether every power's exponent is a small number or depends on a symbol: sympy evaluates a power of numbers
    when it builds it, and 10**(10**10) would take all memory."""
    import ast

    def symbolic(node) -> bool:
        return any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("Symbol", "Dummy") for n in ast.walk(node)
        ) or any(isinstance(n, ast.Name) and _SYMBOL_NAME.fullmatch(n.id) for n in ast.walk(node))

    def small(node) -> bool:
        numbers = [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, (int, float))]
        calls = [
            n
            for n in ast.walk(node)
            if isinstance(n, (ast.Call, ast.BinOp))
            and not (isinstance(n, ast.Call) and getattr(n.func, "id", "") in ("Integer", "Rational", "Float"))
        ]
        return not calls and all(abs(value) <= 1024 for value in numbers)

    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _POWERS and len(node.args) == 2:
            exponent = node.args[1]
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            exponent = node.right
        else:
            continue
        if not (symbolic(exponent) or small(exponent)):
            return False
    return True


# What a graph node may call, as torch serializes it: an operator (``torch.ops.NAMESPACE.OP[.OVERLOAD]``, a higher-order
# operator under torch.ops.higher_order, an extension operator ``#...``), or one of the Python functions torch's
# verifier admits (symbolic arithmetic, grad and autocast switches). torch resolves any other dotted name under torch,
# math or _operator by getattr (``torch.os.system`` included) and leaves refusing it to its verifier.
_OPERATOR = re.compile(
    r"torch\.ops\.(?P<namespace>[A-Za-z][A-Za-z0-9_]*)\.(?P<op>[A-Za-z_][A-Za-z0-9_]*)(\.(?P<overload>[A-Za-z_][A-Za-z0-9_]*))?"
)
_EXTENSION_OPERATOR = re.compile(r"#[A-Za-z0-9_.:]+")
# ATen's own operators named like Python's (aten::__and__, __lshift__...); not attributes every object has
_PYTHON_OBJECT_ATTRIBUTES = frozenset(dir(object)) | {"__dict__", "__module__", "__getattr__", "__call__", "__weakref__", "__file__"}
_PREDISPATCH = re.compile(r"torch\._functorch\.predispatch\.[A-Za-z_][A-Za-z0-9_]*")  # vmap and jvp in pre-dispatch graphs
_OPS_ATTRIBUTES = frozenset({"load_library", "import_module", "loaded_libraries"})  # torch.ops' own, not namespaces
_PYTHON_TARGETS = frozenset(
    [
        f"_operator.{name}"
        for name in "getitem add mul sub truediv floordiv mod pow neg pos abs eq ne lt le gt ge and_ or_ not_ lshift rshift".split()
    ]
    + [f"math.{name}" for name in "ceil floor trunc sqrt".split()]
    + [f"torch.{name}" for name in "sym_int sym_float sym_ite sym_max sym_min sym_not sym_sqrt _sym_sqrt sym_sum".split()]
    + [
        "torch._C._set_grad_enabled",
        "torch.autograd.grad_mode.set_grad_enabled",
        "torch.amp.autocast_mode._enter_autocast",
        "torch.amp.autocast_mode._exit_autocast",
        "torch.fx.experimental.symbolic_shapes.cast_symbool_to_symint_guardless",
        "torch.export.custom_ops._call_custom_autograd_function_in_pre_dispatch",
    ]
)


def plain_target(target: str) -> bool:
    """Whether a graph node's target names an operator or an admitted Python function (see ``_PYTHON_TARGETS``)."""
    if target in _PYTHON_TARGETS or _PREDISPATCH.fullmatch(target) or _EXTENSION_OPERATOR.fullmatch(target):
        return "__" not in target
    operator = _OPERATOR.fullmatch(target)
    if operator is None or "__" in operator["namespace"] + (operator["overload"] or "") or operator["namespace"] in _OPS_ATTRIBUTES:
        return False
    if operator["namespace"] in _NAMESPACES_OUTSIDE_TENSORS or (operator["namespace"], operator["op"]) in _OPERATORS_OUTSIDE_TENSORS:
        return False
    name = operator["op"]
    return "__" not in name or (bool(re.fullmatch(r"__[a-z]+__", name)) and name not in _PYTHON_OBJECT_ATTRIBUTES)


# Operators that reach beyond tensors: files (aten::from_file maps one writable, aten::save writes one), a debugger's
# tensor store, the profiler, and the network of distributed collectives. A model's graph has no use for them.
_OPERATORS_OUTSIDE_TENSORS = frozenset({("aten", "from_file"), ("aten", "save"), ("aten", "_nested_from_file")})
_NAMESPACES_OUTSIDE_TENSORS = frozenset({"debugprims", "profiler", "c10d", "_c10d_functional", "c10d_functional", "symm_mem", "_dtensor"})


def _evaluated_expressions(document: Any) -> list[str]:
    """What in a serialized program torch would evaluate or call beyond plain sympy and operators: shape expressions
    (``expr_str``) that are not plain sympy, and node targets or operator arguments that name other functions."""
    found: list[str] = []
    pending = [document]
    while pending:
        node = pending.pop()
        if isinstance(node, Mapping):
            expression = node.get("expr_str")
            if isinstance(expression, str) and not plain_expression(expression):
                shown = expression if len(expression) <= 80 else expression[:77] + "..."
                found.append(
                    f"its graph holds a shape expression that is not plain sympy ({shown!r}), and torch evaluates "
                    "every shape expression as Python (sympy.sympify)"
                )
            target = node.get("target") if isinstance(node.get("inputs"), list) else None
            for called in (target, node.get("as_operator")):
                if isinstance(called, str) and not plain_target(called):
                    shown = called if len(called) <= 80 else called[:77] + "..."
                    found.append(f"its graph calls {shown!r}, which is not an operator")
            pending += [value for value in node.values() if isinstance(value, (Mapping, list))]
        elif isinstance(node, list):
            pending += [value for value in node if isinstance(value, (Mapping, list))]
    return found
