"""JAX source: a pure function ``f(params, *inputs)`` with its params from a file, a flax NNX module, a flax
linen module with its variables, or an Equinox module.

Every form becomes one pure function ``apply(params, *inputs)`` and a params pytree. A flax NNX or Equinox module is
put in inference mode first, on a copy (dropout off, batch norm on its running statistics), and its description says
so. The reference runs ``apply`` under ``jax.jit`` on the CPU; jax2onnx exports it with the params as constants;
jax2tf exports it with the params as TensorFlow variables, so that a SavedModel holds them as variables.

Params files are never unpickled: ``.msgpack`` is read by flax's msgpack restore (arrays as raw bytes),
``.npz`` with ``allow_pickle=False``, ``.safetensors`` by safetensors. When the model's own params tree is
known (NNX, linen, Equinox), the file must match it leaf for leaf, and the first mismatch is named.
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from convert.backends.jax import key_name, named_outputs
from convert.errors import ConvertError, require
from convert.safety import sha256_files
from convert.sources.base import SourceInfo, SourceModel, example_arrays
from convert.sources.request import SourceRequest, call_factory, required_positional
from convert.sources.signature import SPEC_HINT, export_sizes_from_arrays, order_by_parameters, specs_from_arrays
from convert.specs import InputSpec, SourceSignature

PARAMS_SUFFIXES = (".msgpack", ".npz", ".safetensors")
PARAMS_HINT = (
    "Save the params with flax.serialization.to_bytes(params) (.msgpack), numpy.savez (.npz, keys joined by '/'), "
    "or safetensors (keys joined by '/'), from the same model definition."
)
INFERENCE_MODE = "in inference mode: dropout off, batch norm on its running statistics"
_WIDE_DTYPES = {"float64": "float32", "int64": "int32", "uint64": "uint32"}


def jax():
    return require("jax", "A JAX model")


class JaxSource(SourceModel):
    """A JAX model as ``apply(params, *inputs)`` and its params; the TensorFlow exporters call it through jax2tf."""

    is_keras = False
    tf_bridge = "jax2tf.convert"

    def __init__(self, apply: Callable, params: Any, info: SourceInfo, inputs: tuple[InputSpec, ...], export_sizes: dict[str, int]):
        self.apply = apply
        self.params = params
        self.info = info
        self.signature = SourceSignature(inputs=inputs)
        self.export_sizes = export_sizes
        self._leaves, self._treedef = jax().tree.flatten(params)
        self._jitted = None
        self._trackable = None

    def apply_flat(self, leaves: list, *inputs):
        return self.apply(jax().tree.unflatten(self._treedef, leaves), *inputs)

    def bound(self) -> Callable:
        """The model as a function of its inputs only, its params closed over (exported as constants)."""
        return lambda *inputs: self.apply(self.params, *inputs)

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        jx = jax()
        cpu = jx.devices("cpu")[0]
        with jx.default_device(cpu):
            if self._jitted is None:
                self._jitted = (jx.jit(self.apply_flat), jx.device_put(self._leaves, cpu))
            function, leaves = self._jitted
            outputs = function(leaves, *[feed[s.name] for s in self.signature.inputs])
        return {name: np.asarray(value) for name, value in named_outputs(outputs).items()}

    @property
    def native(self) -> Any:
        return self.apply

    @property
    def trackable(self) -> Any:
        """A tf.Module holding the params as variables, for the SavedModel."""
        if self._trackable is None:
            from convert.backends.tf import tensorflow

            tf = tensorflow()
            module = tf.Module()
            paths = [path_string(path) for path, _ in jax().tree_util.tree_flatten_with_path(self.params)[0]]
            module.params = [
                tf.Variable(np.asarray(leaf), trainable=False, name=re.sub(r"[^A-Za-z0-9_.\-/]", "_", path) or "param")
                for path, leaf in zip(paths, self._leaves)
            ]
            self._trackable = module
        return self._trackable

    def call(self, tensors: dict[str, Any]) -> dict[str, Any]:
        """Outputs by name for named TensorFlow tensors, through jax2tf (dynamic on every symbolic axis)."""
        from jax.experimental import jax2tf

        specs = self.signature.inputs
        polymorphic = [None, *[f"({', '.join(str(d) for d in s.dims)})" if s.symbols else None for s in specs]]
        converted = jax2tf.convert(
            self.apply_flat, polymorphic_shapes=polymorphic, polymorphic_constraints=self.constraints(), with_gradient=False
        )
        return named_outputs(converted(self.trackable.params, *[tensors[s.name] for s in specs]))

    def symbolic_specs(self) -> list[Any]:
        """Each input as JAX traces it for export: every symbolic axis a symbolic dim that knows the constraints."""
        jx = jax()
        symbolic = self.symbolic_dims()
        return [jx.ShapeDtypeStruct(tuple(symbolic.get(d, d) for d in s.dims), s.dtype) for s in self.signature.inputs]

    def constraints(self) -> tuple[str, ...]:
        """The --shape-range bounds as JAX shape constraints ("S <= 128"): a model that slices a table to a symbolic
        size (``positions[:S]``) broadcasts only where JAX knows the size fits the table."""
        return tuple(
            text
            for symbol, (low, high) in self.dim_ranges.items()
            for text in (f"{symbol} >= {low}" if low > 1 else "", f"{symbol} <= {high}" if high else "")
            if text
        )

    def symbolic_dims(self) -> dict[str, Any]:
        """Each symbol as a JAX symbolic dim that knows the constraints."""
        symbols = self.signature.symbols
        if not symbols:
            return {}
        return dict(zip(symbols, jax().export.symbolic_shape(", ".join(symbols), constraints=self.constraints())))

    def at_shapes(self, shapes: dict[str, tuple[int, ...]]) -> JaxSource:
        """The same model with every input fixed at the given shape (no symbolic axes)."""
        fixed = copy.copy(self)
        fixed.dim_ranges = {}
        fixed.signature = SourceSignature(
            inputs=tuple(replace(s, dims=tuple(shapes[s.name])) for s in self.signature.inputs), outputs=self.signature.outputs
        )
        return fixed


def path_string(path: tuple) -> str:
    """A pytree key path as ``a/b/0/c``; the ``value`` attribute of a flax NNX Variable is left out."""
    parts = [key_name(key) for key in path]
    if parts and type(path[-1]).__name__ == "GetAttrKey" and parts[-1] in ("value", "raw_value"):
        parts = parts[:-1]
    return "/".join(parts)


def load_jax_source(request: SourceRequest) -> JaxSource:
    jax()
    if request.weights is not None:
        raise ConvertError("--weights is for PyTorch and Keras models", "Give a JAX model's params with --params instead.")
    model = request.model
    if isinstance(model, Path):
        raise ConvertError(
            f"{model} is a file, and a JAX model is code",
            "Give the model as package.module:attribute: a function f(params, *inputs) with --params, or a "
            "factory returning a flax NNX module, a flax linen module or an Equinox module.",
        )
    if request.kind == "factory" and (inspect.isclass(model) or required_positional(model) == []):
        model = call_factory(request.factory, model)
    info = SourceInfo(framework="jax", kind=request.kind, description=_describe(model))
    params_path = Path(request.params) if isinstance(request.params, (str, Path)) else None
    loaded = load_params(params_path) if params_path is not None else request.params
    if params_path is not None:
        info.path, info.sha256 = str(params_path), sha256_files([params_path])
    apply, params, expected, parameters = _as_pure(model, loaded, request)
    if _has_modes(model):
        info.description += f" ({INFERENCE_MODE})"
    specs, arrays, export_sizes = _settle_specs(request, parameters, _describe(model))
    if expected is not None and loaded is not None:
        params = fit_params(loaded, expected, params_path or "the params given")
    elif loaded is not None:
        _check_params_by_tracing(apply, params, specs, export_sizes, params_path, _describe(model))
    source = JaxSource(apply, params, info, specs, export_sizes)
    source.dim_ranges = {symbol: bounds for symbol, bounds in request.dim_ranges.items() if symbol in source.signature.symbols}
    source.example_feed = arrays
    return source


def _describe(model: Any) -> str:
    return getattr(model, "__qualname__", None) or type(model).__name__


def _as_pure(model: Any, params: Any, request: SourceRequest) -> tuple[Callable, Any, Any, list[str] | None]:
    """(apply, params, the model's own params tree if known, the input parameter names) for any model form."""
    roots = {cls.__module__.split(".")[0] for cls in type(model).__mro__}
    if "flax" in roots and _is_nnx(model):
        from flax import nnx

        model = nnx.merge(*nnx.split(model))  # a copy, so that the user's module is left as it was
        model.eval()  # inference behaviour: dropout off, batch norm on its running statistics
        graphdef, state, rest = nnx.split(model, nnx.Not(nnx.RngState), ...)
        return (lambda p, *inputs: nnx.merge(graphdef, p, rest)(*inputs)), state, state, _call_parameters(type(model).__call__, 1)
    if "flax" in roots:
        from flax import linen

        if isinstance(model, linen.Module):
            if model.scope is not None:  # a bound module carries its variables
                model, variables = model.unbind()
                params = variables if params is None else params
            if params is None:
                raise ConvertError(
                    f"the flax linen module {type(model).__name__} comes without its variables",
                    "Give them with --params (a .msgpack of flax.serialization.to_bytes(variables)), or return module.bind(variables) from the factory.",
                )
            expected = _linen_variables(model, params, request)
            return (lambda v, *inputs: model.apply(v, *inputs)), params, expected, _call_parameters(type(model).__call__, 1)
    if "equinox" in roots:
        import equinox as eqx

        model = eqx.nn.inference_mode(model)  # a copy, each layer's inference flag set: Dropout off
        arrays, static = eqx.partition(model, eqx.is_array)
        return (lambda p, *inputs: eqx.combine(p, static)(*inputs)), arrays, arrays, _call_parameters(type(model).__call__, 1)
    if not callable(model):
        raise ConvertError(
            f"the model is a {type(model).__name__}, which JAX cannot call",
            "Give a function f(params, *inputs), a flax NNX or linen module, or an Equinox module.",
        )
    parameters = _call_parameters(model, 0)
    if params is None:
        required = required_positional(model) or []
        if request.inputs and len(required) == len(request.inputs) + 1:
            raise ConvertError(
                f"{_describe(model)} takes {len(required)} arguments ({', '.join(required)}) for "
                f"{len(request.inputs)} input spec(s): the first looks like its params, and none were given",
                "Pass its params with --params params.msgpack (or .npz, .safetensors).",
            )
        return (lambda _, *inputs: model(*inputs)), {}, None, parameters
    bound_to = getattr(model, "__self__", None)
    expected = None
    if bound_to is not None and "flax" in {c.__module__.split(".")[0] for c in type(bound_to).__mro__} and model.__name__ == "apply":
        expected = _linen_variables(bound_to, params, request)  # module.apply: its variables are known
    return model, params, expected, parameters[1:] if parameters is not None else None


def _has_modes(model: Any) -> bool:
    """Whether the model is a flax NNX or Equinox module, which has a training and an inference mode."""
    roots = {cls.__module__.split(".")[0] for cls in type(model).__mro__}
    return ("flax" in roots and _is_nnx(model)) or "equinox" in roots


def _is_nnx(model: Any) -> bool:
    from flax import nnx

    return isinstance(model, nnx.Module)


def _call_parameters(function: Any, skip: int) -> list[str] | None:
    """Input names of a call (after ``skip`` leading parameters); None when it takes *args or cannot be read."""
    try:
        parameters = list(inspect.signature(function).parameters.values())[skip:]
    except (TypeError, ValueError):
        return None
    if any(p.kind == p.VAR_POSITIONAL for p in parameters):
        return None
    return [p.name for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _settle_specs(request: SourceRequest, parameters: list[str] | None, what: str):
    arrays = example_arrays(request.example_inputs, parameters)
    if request.inputs:
        specs = order_by_parameters(request.inputs, parameters or [], parameters is None, what)
    elif arrays is not None:
        specs = specs_from_arrays(arrays)
    else:
        raise ConvertError(f"the input shapes and dtypes of the JAX model {what} are not known (JAX functions declare none)", SPEC_HINT)
    wide = [s for s in specs if s.dtype in _WIDE_DTYPES]
    if wide and not jax().config.jax_enable_x64:
        raise ConvertError(
            f"the input '{wide[0].name}' is {wide[0].dtype}, and JAX runs without 64-bit types here "
            f"(it would silently compute in {_WIDE_DTYPES[wide[0].dtype]})",
            f"Use {_WIDE_DTYPES[wide[0].dtype]} in the input spec, or set JAX_ENABLE_X64=1.",
        )
    export_sizes = export_sizes_from_arrays(specs, arrays) if arrays is not None else {}
    return specs, arrays, export_sizes


def _dummy_inputs(request: SourceRequest, parameters: list[str] | None) -> list[Any]:
    """Abstract inputs at the export shape (symbols at 2), for tracing without computing."""
    jx = jax()
    specs, _, sizes = _settle_specs(request, parameters, "the model")
    return [jx.ShapeDtypeStruct(tuple(d if isinstance(d, int) else sizes.get(d, 2) for d in s.dims), s.dtype) for s in specs]


def _linen_variables(module: Any, params: Any, request: SourceRequest) -> Any:
    """The variables tree a linen module's init makes (shapes only, nothing computed)."""
    jx = jax()
    dummies = _dummy_inputs(request, _call_parameters(type(module).__call__, 1))
    try:
        return jx.eval_shape(module.init, jx.random.key(0), *dummies)
    except Exception as exc:
        raise ConvertError(
            f"the flax linen module {type(module).__name__} fails to initialise on inputs "
            f"{', '.join(str(d.shape) for d in dummies)}: {type(exc).__name__}: {_first(exc)}",
            "Check the --input specs against the module's __call__.",
        ) from exc


def load_params(path: Path) -> Any:
    """A params tree from a file, without unpickling anything."""
    if not path.is_file():
        raise ConvertError(f"the params file {path} does not exist", "Check the path given to --params.")
    suffix = path.suffix.lower()
    if suffix not in PARAMS_SUFFIXES:
        raise ConvertError(
            f"{path} is not a params file this tool reads (its suffix is '{suffix or 'none'}')",
            f"Give a {', '.join(PARAMS_SUFFIXES)} file. {PARAMS_HINT}",
        )
    try:
        if suffix == ".msgpack":
            from flax import serialization

            tree = serialization.msgpack_restore(path.read_bytes())
        elif suffix == ".npz":
            from convert.archives import check_npz

            check_npz(path, next_step=PARAMS_HINT)
            with np.load(path, allow_pickle=False) as data:
                tree = _unflatten({name: data[name] for name in data.files})
        else:
            from safetensors.numpy import load_file

            tree = _unflatten(load_file(str(path)))
    except ConvertError:
        raise
    except Exception as exc:
        raise ConvertError(
            f"cannot read the params in {path}: {type(exc).__name__}: {_first(exc)}",
            f"The file may be truncated, or hold objects rather than arrays. {PARAMS_HINT}",
        ) from exc
    if not isinstance(tree, Mapping) or not tree:
        raise ConvertError(f"{path} holds no params (it should hold a tree of named arrays)", PARAMS_HINT)
    return tree


def _unflatten(flat: dict[str, np.ndarray]) -> dict:
    """Nested dicts from keys joined by '/' (or by '.' when no key has a '/')."""
    separator = "/" if any("/" in key for key in flat) else "."
    tree: dict = {}
    for key, value in flat.items():
        node = tree
        *parents, leaf = key.split(separator)
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConvertError(f"the params key '{key}' nests under a key that is also an array", PARAMS_HINT)
        node[leaf] = value
    return tree


def fit_params(loaded: Any, expected: Any, where: Any) -> Any:
    """``loaded`` in the structure of ``expected``, leaf by leaf; the first leaf that differs is named."""
    jx = jax()
    expected_leaves, treedef = jx.tree_util.tree_flatten_with_path(expected)
    given = {path_string(path): leaf for path, leaf in jx.tree_util.tree_flatten_with_path(loaded)[0]}
    wanted = [(path_string(path), leaf) for path, leaf in expected_leaves]
    if len(wanted) == 1 and wanted[0][0] == "" and len(given) == 1:
        given = {"": next(iter(given.values()))}
    if [p for p, _ in wanted if p.startswith("params/")] and not any(p.startswith("params/") for p in given):
        given = {f"params/{p}": leaf for p, leaf in given.items()}  # a file of params alone, for a module's variables
    leaves = []
    for path, leaf in wanted:
        if path not in given:
            raise ConvertError(
                f"the params in {where} do not match the model: the leaf '{path}' ({_describe_leaf(leaf)}) is missing from the file",
                PARAMS_HINT,
            )
        value = np.asarray(given.pop(path))
        if tuple(value.shape) != tuple(leaf.shape) or value.dtype != np.dtype(leaf.dtype):
            raise ConvertError(
                f"the params in {where} do not match the model: the leaf '{path}' is "
                f"{_describe_leaf(value)} in the file and {_describe_leaf(leaf)} in the model",
                PARAMS_HINT,
            )
        leaves.append(value)
    if given:
        raise ConvertError(
            f"the params in {where} do not match the model: the file has the leaf '{next(iter(given))}', which the model does not",
            PARAMS_HINT,
        )
    return jx.tree_util.tree_unflatten(treedef, leaves)


def _describe_leaf(leaf: Any) -> str:
    return f"{np.dtype(leaf.dtype).name}[{','.join(str(d) for d in leaf.shape)}]"


def _check_params_by_tracing(apply: Callable, params: Any, specs, sizes, path: Path | None, what: str) -> None:
    """A plain function's params tree is known only to the function: trace it once, computing nothing."""
    jx = jax()
    dummies = [jx.ShapeDtypeStruct(tuple(d if isinstance(d, int) else sizes.get(d, 2) for d in s.dims), s.dtype) for s in specs]
    try:
        jx.eval_shape(apply, params, *dummies)
    except Exception as exc:
        raise ConvertError(
            f"{what} fails with the params from {path or 'the params given'} on inputs "
            f"{', '.join(map(str, specs))}: {type(exc).__name__}: {_first(exc)}",
            f"Check that the params come from the same model definition. {PARAMS_HINT}",
        ) from exc


def _first(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""
