"""PyTorch as every layer uses it: tensors to and from NumPy, a model's outputs named as the exporters see them, how a
module takes its inputs, a module as a source model (every PyTorch source gives one), and loading a torch.export
archive (a .pt2 the user gives, or one this run wrote).

A .pt2 whose input or output tree names a type of a well-known library (``PYTREE_LIBRARIES``, e.g. a transformers
ModelOutput) imports the module that defines it, from that installed library, so that the type registers itself with
pytree; no other module is imported on a file's say-so.
"""

from __future__ import annotations

import contextlib
import io
import json
import zipfile
import zlib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from convert.errors import ConvertError, require
from convert.sources.base import SourceInfo, SourceModel
from convert.specs import InputSpec, SourceSignature

# Libraries whose installed modules a .pt2 may name as pytree node types (package to import: what to pip install).
PYTREE_LIBRARIES = {"transformers": "transformers"}


def require_torch():
    return require("torch", "torch", "Loading a PyTorch model")


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


def to_numpy(tensor) -> np.ndarray:
    torch = require_torch()
    tensor = tensor.detach().cpu()
    if tensor.dtype == torch.bfloat16:
        tensor = tensor.float()
    return tensor.numpy()


def to_tensors(specs: tuple[InputSpec, ...], feed: dict[str, np.ndarray], device: str = "cpu") -> tuple:
    torch = require_torch()
    return tuple(torch.from_numpy(np.ascontiguousarray(feed[s.name])).to(device) for s in specs)


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
    missing = register_pytree_types(path)
    if missing:
        raise ConvertError(f"cannot load the torch.export archive {path}: {missing[0]}", missing[1])
    return torch.export.load(str(path))


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
    except (ValueError, KeyError, IndexError, AttributeError, TypeError, OSError, zipfile.BadZipFile, zlib.error):
        return set()  # torch.export.load reports an unreadable archive
    return names


class TorchSource(SourceModel):
    def __init__(
        self,
        module: Any,
        info: SourceInfo,
        inputs: tuple[InputSpec, ...],
        export_sizes: dict[str, int],
        dim_ranges: dict[str, tuple[int, int | None]] | None = None,
        convention: CallConvention | None = None,
    ):
        self.module = module
        self.convention = convention or CallConvention()
        self.info = info
        self.export_sizes = export_sizes
        self.dim_ranges = dim_ranges or {}
        self.signature = SourceSignature(inputs=inputs)

    @property
    def native(self) -> Any:
        return self.module

    def generation_inputs(self, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        own = getattr(self.module, "generation_inputs", None)  # an encoder-decoder's: its encoder's outputs
        return own(seed) if own is not None else super().generation_inputs(seed)

    @property
    def is_scripted(self) -> bool:
        return isinstance(self.module, require_torch().jit.ScriptModule)

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = require_torch()
        with torch.inference_mode():
            outputs = self.convention(self.module, to_tensors(self.signature.inputs, feed))
        return {name: to_numpy(t) for name, t in flatten_outputs(outputs).items()}

    @contextlib.contextmanager
    def pinned_threads(self, threads: int) -> Iterator[bool]:
        torch = require_torch()
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            yield True
        finally:
            torch.set_num_threads(before)


class TracedProgram:
    """The program torch.onnx exports from this source (torch.export, then torch.onnx's decompositions), run node by
    node: its call nodes' names are the names of the values of an ONNX graph torch.onnx's dynamo exporter wrote."""

    method = "torch.onnx's exported program, run node by node (ONNX values named after its nodes)"

    def __init__(self, source: TorchSource, program):
        self.program = program  # an ExportedProgram as torch.onnx decomposed it
        self.source = source
        self.layers = {
            node.name: _module_path(node) for node in self.program.graph.nodes if node.op == "call_function" and _is_tensor(node)
        }

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
    """Why loading this .pt2 would run code (empty when it holds only JSON graphs and raw tensors).

    torch.export.load unpickles weights and constants flagged ``use_pickle``, custom and opaque objects,
    and falls back from weights_only=True to a full unpickle of the sample inputs if the former fails;
    it also loads AOTInductor shared libraries.
    """
    try:
        return _pt2_code_reasons(path)
    except (ValueError, AttributeError, TypeError, EOFError, OSError, zipfile.BadZipFile, zlib.error) as exc:
        raise ConvertError(
            f"{path} is a torch.export archive that cannot be read: {type(exc).__name__}: {exc}",
            "The file may be truncated or corrupt: export it again with torch.export.save.",
        ) from exc


def _pt2_code_reasons(path: Path) -> list[str]:
    torch = require_torch()
    reasons: list[str] = []
    with zipfile.ZipFile(path) as archive:
        names = archive.namelist()
        for name in names:
            inner = name.split("/", 1)[-1]
            if inner.startswith("data/aotinductor/"):
                reasons.append("it holds compiled AOTInductor code")
                break
        for name in names:
            inner = name.split("/", 1)[-1]
            if inner.endswith("_config.json") and (inner.startswith("data/weights/") or inner.startswith("data/constants/")):
                config = json.loads(archive.read(name)).get("config", {})
                for fqn, meta in config.items():
                    if meta.get("use_pickle"):
                        reasons.append(f"'{fqn}' is stored as a pickle")
                    if str(meta.get("path_name", "")).startswith(("custom_obj", "opaque_obj")):
                        reasons.append(f"'{fqn}' is a pickled custom object")
            elif inner.startswith("data/sample_inputs/"):
                try:
                    torch.load(io.BytesIO(archive.read(name)), weights_only=True)
                except Exception:
                    reasons.append("its sample inputs are not plain tensors (torch would unpickle them fully)")
            elif (
                inner.startswith(("data/weights/", "data/constants/"))
                and inner.endswith(".pt")
                and "/" not in inner[len("data/weights/") :]
            ):
                reasons.append(f"it uses the legacy pickled layout ({inner})")
    return sorted(set(reasons))
