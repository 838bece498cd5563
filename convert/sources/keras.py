"""Keras / TensorFlow source: keras.Model objects, .keras archives, SavedModel folders, legacy .h5, factories + weights.

``.keras`` archives are loaded with Keras's safe mode, after our own scan of their config: a config that
names code outside Keras (a custom module, a lambda's bytecode) is refused unless ``trust_code``; with it, the
modules the config names are imported first (so that their registered custom objects exist) and safe mode is off. A
SavedModel folder is a TensorFlow graph that can run arbitrary ops, and legacy
``.h5`` files were loaded without safe mode by older Keras versions, so both need ``trust_code``.
"""

from __future__ import annotations

import importlib
import json
import re
import sys
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from convert.archives import check_archive, read_member
from convert.backends.tf import SERVING_KEY, keras, tensorflow, to_numpy
from convert.errors import ConvertError
from convert.safety import detect_format, sha256_files
from convert.sources.base import SourceInfo, SourceModel, example_arrays
from convert.sources.request import SourceRequest
from convert.sources.signature import (
    SPEC_HINT,
    export_sizes_from_arrays,
    order_by_parameters,
    specs_from_arrays,
    with_declared_domains,
)
from convert.specs import InputSpec, SourceSignature
from convert.text import first_line

TRUST_HINT = (
    "If you trust the file and where it came from, pass --trust-code; otherwise save the model as a "
    ".keras archive of built-in layers, or give its code as a module:callable factory with --weights."
)
SAVEDMODEL_MARKER = "saved_model.pb"
BATCH_SYMBOL = "B"
# A Normalization layer with no Rescaling before it declares its input's mean and variance, not a range: inputs are drawn
# within this many standard deviations of the mean (a 0..255 image normalised with ImageNet's statistics spans about 2.1)
NORMALIZATION_SPREAD = 2.0


def flatten_outputs(value: Any, names: list[str] | None = None, prefix: str = "") -> dict[str, Any]:
    """Name every tensor a model returns: dict keys (dotted when nested), else the model's own output
    names when it has one per tensor, else ``output`` / ``output_0``, ``output_1``..."""
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(flatten_outputs(item, None, f"{prefix}.{key}" if prefix else str(key)))
        return flat
    if isinstance(value, (tuple, list)):
        if not prefix and names and len(names) == len(value) and len(set(names)) == len(names):
            return dict(zip(names, value))
        flat = {}
        for index, item in enumerate(value):
            flat.update(flatten_outputs(item, None, f"{prefix}.{index}" if prefix else f"output_{index}"))
        return flat
    if value is None:
        return {}
    if not hasattr(value, "shape"):
        raise ConvertError(
            f"the model returns a {type(value).__name__}, which is not a tensor",
            "Return tensors (alone, or in lists or dicts) from the model.",
        )
    if not prefix and names and len(names) == 1:
        return {names[0]: value}
    return {prefix or "output": value}


class KerasSource(SourceModel):
    """A Keras model, or the serving signature of a SavedModel, run on the CPU for reference outputs."""

    def __init__(
        self,
        model: Any,
        info: SourceInfo,
        inputs: tuple[InputSpec, ...],
        export_sizes: dict[str, int],
        model_inputs: list[str] | None = None,
        output_hint: list[str] | None = None,
        signature_fn: Any = None,
    ):
        self.model = model
        self.info = info
        self.export_sizes = export_sizes
        self.signature = SourceSignature(inputs=inputs)
        self.model_inputs = model_inputs  # a functional model's input names in its own (flattened) order
        self.input_structure = getattr(model, "_inputs_struct", None) if model_inputs else None  # list, dict or one tensor
        self.output_hint = output_hint
        self.signature_fn = signature_fn  # a SavedModel's serving signature (then ``model`` is the loaded object)

    @property
    def native(self) -> Any:
        return self.model

    @property
    def trackable(self) -> Any:
        """What a SavedModel written from this source must hold (the model, or the loaded SavedModel)."""
        return self.model

    @property
    def is_keras(self) -> bool:
        return self.signature_fn is None

    def call(self, tensors: dict[str, Any]) -> dict[str, Any]:
        """Outputs by name for named input tensors; traceable inside a tf.function."""
        if self.signature_fn is not None:
            return dict(self.signature_fn(**tensors))
        if self.input_structure is not None and set(self.model_inputs) == set(tensors):
            # the functional model's own input structure (a list, or a dict whose keys need not be the input names)
            flat = [tensors[name] for name in self.model_inputs]
            arguments = keras().tree.pack_sequence_as(
                self.input_structure, flat
            )  # no annotation: AutoGraph cannot convert annotated nonlocals
        elif len(tensors) == 1:
            arguments = next(iter(tensors.values()))
        else:  # a subclassed model with several inputs gets them as a dict by input name
            arguments = dict(tensors)
        return flatten_outputs(self.model(arguments, training=False), self.output_hint)

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        tf = tensorflow()
        with tf.device("/CPU:0"):
            tensors = {s.name: tf.constant(feed[s.name]) for s in self.signature.inputs}
            outputs = self.call(tensors)
        return {name: to_numpy(value) for name, value in outputs.items()}


def load_keras_source(request: SourceRequest) -> KerasSource:
    keras_module = keras()
    model = request.model
    info = SourceInfo(framework="keras", kind=request.kind, description=type(model).__name__)
    signature_fn = None
    if isinstance(model, Path):
        info.path = str(model)
        info.sha256 = sha256_files([model])
        model, info.kind, signature_fn = _load_path(model, request.trust_code)
        info.description = type(model).__name__
    if request.weights is not None and (signature_fn is not None or info.kind not in ("factory", "object")):
        raise ConvertError(
            "--weights goes with a module:callable factory (or a keras.Model object)",
            "Drop --weights: this model file already holds its weights.",
        )
    if signature_fn is None and not isinstance(model, keras_module.Model):
        raise ConvertError(
            f"the model is a {type(model).__name__}, not a keras.Model",
            "Give a keras.Model, a .keras archive, a SavedModel folder, or a factory returning a keras.Model.",
        )

    arrays = example_arrays(request.example_inputs, _keras_input_names(model) if signature_fn is None else None, to_numpy)
    dim_ranges: dict[str, tuple[int, int | None]] = {}
    if signature_fn is not None:
        own_specs = _specs_from_signature(signature_fn)
        what = f"the SavedModel's {SERVING_KEY} signature"
    else:
        own_specs, dim_ranges = keras_hub_specs(model, _specs_from_model(model))
        what = f"the Keras model {model.name}"
    parameters = [s.name for s in own_specs] if own_specs else []
    if request.inputs:
        specs = order_by_parameters(request.inputs, parameters, not own_specs, what)
    elif own_specs:  # example inputs, when given, set the export sizes of the model's own symbolic dims
        specs = own_specs
    elif arrays is not None:
        specs = specs_from_arrays(arrays)
    else:
        raise ConvertError(
            f"the input shapes and dtypes of {what} are not known (a subclassed model, or a Sequential one without an Input, declares none)",
            SPEC_HINT,
        )
    if own_specs and len(specs) != len(own_specs):
        missing = [s.name for s in own_specs if s.name not in {t.name for t in specs}]
        raise ConvertError(f"no spec is given for the input '{missing[0]}' of {what}", "Give an --input spec for every input.")
    if signature_fn is None:
        specs = with_declared_domains(specs, declared_domains(model))
    export_sizes = export_sizes_from_arrays(specs, arrays) if arrays is not None else {}
    source = KerasSource(
        model,
        info,
        specs,
        export_sizes,
        model_inputs=_keras_input_names(model) if signature_fn is None else None,
        output_hint=list(getattr(model, "output_names", None) or []) if signature_fn is None else None,
        signature_fn=signature_fn,
    )
    source.example_feed = arrays
    source.dim_ranges = {symbol: bounds for symbol, bounds in dim_ranges.items() if symbol in source.signature.symbols}
    if request.weights is not None:
        _load_weights(source, request.weights)
    return source


def _load_path(path: Path, trust_code: bool) -> tuple[Any, str, Any]:
    if path.is_dir():
        if not (path / SAVEDMODEL_MARKER).is_file():
            raise ConvertError(
                f"{path} is a folder without a {SAVEDMODEL_MARKER}, so not a TensorFlow SavedModel",
                "Give a SavedModel folder, a .keras archive or a model file.",
            )
        if not trust_code:
            raise ConvertError(
                f"{path} is a TensorFlow SavedModel: its graph can run any TensorFlow op (file and "
                "network access included) when loaded and called",
                TRUST_HINT,
            )
        tf = tensorflow()
        try:
            loaded = tf.saved_model.load(str(path))
        except Exception as exc:
            raise ConvertError(
                f"cannot load the SavedModel {path}: {type(exc).__name__}: {_first(exc)}",
                "Check that the folder is complete, and was written by this TensorFlow version or older.",
            ) from exc
        signatures = dict(getattr(loaded, "signatures", {}) or {})
        if SERVING_KEY not in signatures:
            raise ConvertError(
                f"the SavedModel {path} has no '{SERVING_KEY}' signature (it has: {', '.join(signatures) or 'none'})",
                "Export it with a serving signature, e.g. keras model.export(path) or tf.saved_model.save(obj, path, signatures=fn).",
            )
        return loaded, "savedmodel", signatures[SERVING_KEY]
    kind = detect_format(path)
    if kind == "empty":
        raise ConvertError(f"{path} is empty", "Check that the file was written completely.")
    if path.suffix.lower() == ".keras" or kind == "zip":
        return _load_keras_archive(path, trust_code), "keras", None
    if kind == "hdf5":
        return _load_h5(path, trust_code), "h5", None
    raise ConvertError(
        f"{path} is not a Keras model file that this tool can read (its bytes look like: {kind})",
        "Give a .keras archive, a SavedModel folder, a legacy .h5 (with --trust-code) or a factory with --weights.",
    )


def _serialized_objects(config: Any) -> Iterator[Mapping]:
    """Every mapping in a .keras config, nested ones included (each serialized object is one)."""
    if isinstance(config, Mapping):
        yield config
        values = config.values()
    elif isinstance(config, list):
        values = config
    else:
        return
    for value in values:
        yield from _serialized_objects(value)


def _outside_keras(module: Any) -> bool:
    return isinstance(module, str) and module.split(".")[0] != "keras"


def keras_config_risks(config: Any) -> list[str]:
    """What in a .keras config would import or run code from outside Keras."""
    found = []
    for item in _serialized_objects(config):
        if item.get("class_name") == "__lambda__":
            found.append("a Lambda layer holding serialized Python bytecode")
        elif _outside_keras(item.get("module")):
            found.append(f"'{item['module']}.{item.get('class_name')}', from outside Keras")
    return found


def _custom_modules(config: Any) -> list[str]:
    """The modules outside Keras that a .keras config takes its custom objects from."""
    return sorted({item["module"] for item in _serialized_objects(config) if _outside_keras(item.get("module"))})


def _without_module(config: Any) -> list[str]:
    """The custom objects a .keras config names with no module: Keras writes none for a class or function defined in
    the script that saved the model (``__main__``), so no load can find them."""
    return sorted(
        {
            item["registered_name"]
            for item in _serialized_objects(config)
            if "module" in item and item["module"] is None and isinstance(item.get("registered_name"), str)
        }
    )


def _import_custom_modules(path: Path, modules: list[str]) -> None:
    """Import the modules a trusted archive's config names: Keras itself imports only its own packages, and finds a
    custom object only once its module has run its @register_keras_serializable decorator."""
    if str(Path.cwd()) not in sys.path and "" not in sys.path:  # the console script does not put it there
        sys.path.insert(0, str(Path.cwd()))
    for module in modules:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name is None or not (module == exc.name or module.startswith(exc.name + ".")):
                raise _import_failed(path, module, exc) from exc  # the module was found, and something it imports was not
            raise ConvertError(
                f"the config of {path} names custom objects from the module '{module}', which cannot be imported here ({exc})",
                f"Put the folder that holds {module.split('.')[0]} (its .py file or package) on PYTHONPATH, or run "
                "convert from that folder, so that the module registers its custom objects before Keras loads the model.",
            ) from exc
        except Exception as exc:
            raise _import_failed(path, module, exc) from exc


def _import_failed(path: Path, module: str, exc: Exception) -> ConvertError:
    return ConvertError(
        f"importing the module '{module}', which the config of {path} names for its custom objects, raised "
        f"{type(exc).__name__}: {_first(exc)}",
        f"Fix the module, or what it imports, so that python -c 'import {module}' works from this folder.",
    )


def _load_keras_archive(path: Path, trust_code: bool):
    if not zipfile.is_zipfile(path):
        raise ConvertError(f"{path} is not a readable .keras archive (it is not a zip file)", "Save the model again with model.save(path).")
    # every member's declared size is checked before any is read, here and by Keras (which loads the weights after)
    infos = {
        info.filename: info
        for info in check_archive(path, next_step="Refused before reading it: save the model again with model.save(path).")
    }
    keras_module = keras()
    try:
        with zipfile.ZipFile(path) as archive:
            config = json.loads(read_member(archive, infos["config.json"]))
        risks = sorted(set(keras_config_risks(config)))
        modules = _custom_modules(config)
        orphans = _without_module(config)
    except (zipfile.BadZipFile, KeyError, OSError, ValueError, RecursionError) as exc:
        raise ConvertError(f"{path} is not a readable .keras archive ({exc})", "Save the model again with model.save(path).") from exc
    if risks and not trust_code:
        raise ConvertError(f"the config of {path} names code that loading would import or run: {'; '.join(risks)}", TRUST_HINT)
    if trust_code:
        _import_custom_modules(path, modules)
    try:
        return keras_module.saving.load_model(str(path), compile=False, safe_mode=not trust_code)
    except Exception as exc:
        raise ConvertError(
            f"Keras cannot load {path}: {type(exc).__name__}: {_first(exc)}",
            _load_hint(modules, orphans),
        ) from exc


def _load_hint(modules: list[str], orphans: list[str]) -> str:
    if orphans:
        return (
            f"Its config names {', '.join(orphans)} with no module to import from, as Keras saves a class or function "
            "defined in the script or notebook that saved the model: move it into a module file, import it from there, "
            "and save the model again."
        )
    if modules:
        return (
            f"Check that each custom class and function the config names is registered in its module ({', '.join(modules)}) "
            "with @keras.saving.register_keras_serializable, or give the model's code as a module:callable factory with --weights."
        )
    return "If it uses custom layers, give its code as a module:callable factory with --weights."


def _load_h5(path: Path, trust_code: bool):
    import h5py

    try:
        with h5py.File(path, "r") as handle:
            has_config = "model_config" in handle.attrs
    except OSError as exc:
        raise ConvertError(
            f"cannot read {path} as an HDF5 file ({_first(exc)})", "The file may be truncated or corrupt: save it again."
        ) from exc
    if not has_config:
        raise ConvertError(
            f"{path} holds only weights, not a model",
            f"Give the model's code as a factory with the weights: convert package.module:build_model --framework keras --weights {path}",
        )
    if not trust_code:
        raise ConvertError(
            f"{path} is a legacy HDF5 Keras model: the format can hold Lambda layers with marshalled Python "
            "bytecode, and only recent Keras versions apply safe mode to it (older ones run that code on load)",
            TRUST_HINT,
        )
    try:
        return keras().saving.load_model(str(path), compile=False, safe_mode=False)
    except Exception as exc:
        raise ConvertError(
            f"Keras cannot load {path}: {type(exc).__name__}: {_first(exc)}", "Save the model again as a .keras archive."
        ) from exc


def _load_weights(source: KerasSource, path: Path) -> None:
    from convert.validators.inputs import generate_feed

    if not path.is_file():
        raise ConvertError(f"the weights file {path} does not exist", "Check the path given to --weights.")
    model = source.model
    if not model.built:  # a subclassed model has no variables until it is called once
        sizes = {s: source.export_sizes.get(s, 2) for s in source.signature.symbols}
        try:
            source.run(generate_feed(source.signature.inputs, sizes, 0, 0))
        except Exception as exc:
            raise ConvertError(
                f"the model fails on inputs generated from its specs ({', '.join(map(str, source.signature.inputs))}), "
                f"so its weights cannot be set up: {type(exc).__name__}: {_first(exc)}",
                "Check the --input specs; a subclassed model with several inputs receives them as a dict by input name.",
            ) from exc
    try:
        model.load_weights(str(path))
    except Exception as exc:
        raise ConvertError(
            f"the weights in {path} do not fit the model: {type(exc).__name__}: {_first(exc)}",
            "Check that the factory builds the same architecture the weights were saved from (model.save_weights('model.weights.h5')).",
        ) from exc


def _keras_input_names(model) -> list[str] | None:
    tensors = getattr(model, "_inputs", None) if not getattr(model, "built", False) else getattr(model, "inputs", None)
    if not tensors:
        return None
    names = []
    for tensor in tensors:
        history = getattr(tensor, "_keras_history", None)
        names.append(history.operation.name if history is not None else tensor.name)
    return names


def _symbolic_dims(names: list[str], shapes: list[tuple]) -> list[tuple]:
    """None dims become symbols: ``B`` for the batch axis of every input, ``NAME_dK`` for axis K of input NAME
    (inputs are free to differ there; --input can make them share a symbol)."""
    return [
        tuple(
            (BATCH_SYMBOL if axis == 0 else f"{re.sub(r'[^A-Za-z0-9_]', '_', name)}_d{axis}") if size is None else int(size)
            for axis, size in enumerate(shape)
        )
        for name, shape in zip(names, shapes)
    ]


def _specs_from_model(model) -> tuple[InputSpec, ...]:
    names = _keras_input_names(model)
    if not names:
        return ()
    tensors = model.inputs
    dims = _symbolic_dims(names, [tuple(t.shape) for t in tensors])
    return tuple(InputSpec(name, _dtype_name(t.dtype), d) for name, t, d in zip(names, tensors, dims))


# keras-hub's text inputs, named by what they hold with a prefix per sequence: one sequence's token ids, padding mask and
# segment ids share its length; an encoder-decoder backbone (BART, T5) has an encoder_ and a decoder_ sequence
KERAS_HUB_TEXT_INPUTS = ("token_ids", "padding_mask", "segment_ids")
KERAS_HUB_LENGTHS = {"": "S", "encoder_": "S", "decoder_": "T"}


def keras_hub_specs(model, specs: tuple[InputSpec, ...]) -> tuple[tuple[InputSpec, ...], dict[str, tuple[int, int | None]]]:
    """A keras-hub model's text inputs as its config declares them, with the sizes each sequence's length may take: the
    inputs of one sequence share its length symbol, token ids lie below the config's ``vocabulary_size``, segment ids
    below its ``num_segments``, padding masks are 0/1, and a length is at most ``max_sequence_length``. A task model (a
    classifier, a causal LM) takes its backbone's inputs and is read from its backbone's config. Other models, and inputs
    keras-hub does not name so, keep ``specs``."""
    if not type(model).__module__.startswith("keras_hub."):
        return specs, {}
    backbone = getattr(model, "backbone", None)
    config = (backbone if isinstance(backbone, keras().Model) else model).get_config()
    domains = {
        "token_ids": (config.get("vocabulary_size"), "vocabulary_size"),
        "segment_ids": (config.get("num_segments"), "num_segments"),
    }
    positions = config.get("max_sequence_length")
    ranges: dict[str, tuple[int, int | None]] = {}
    derived = []
    for spec in specs:
        prefix, held = next(((spec.name[: -len(k)], k) for k in KERAS_HUB_TEXT_INPUTS if spec.name.endswith(k)), ("", None))
        symbol = KERAS_HUB_LENGTHS.get(prefix)
        if held is None or symbol is None or not spec.is_integer or len(spec.dims) != 2:
            derived.append(spec)
            continue
        if isinstance(spec.dims[1], str):  # a length the model leaves open (not one it was built with)
            ranges[symbol] = (1, positions if isinstance(positions, int) and positions > 0 else None)
            spec = replace(spec, dims=(spec.dims[0], symbol))
        count, field = domains.get(held, (None, ""))
        if held == "padding_mask":
            spec = replace(spec, low=0, high=1, domain_source="keras-hub's padding mask (1 for a token, 0 for padding)")
        elif isinstance(count, int) and count > 0:
            spec = replace(spec, low=0, high=count - 1, domain_source=f"the keras-hub config's {field} ({count})")
        derived.append(spec)
    return tuple(derived), ranges


def declared_domains(model) -> dict[str, tuple[float, float, str]]:
    """The value domain each input of a model takes, from the preprocessing layer it meets first, in the model or in a
    model nested in it (a keras.applications network built with its preprocessing, inside the user's model): name ->
    (low, high, which layer). An input that meets neither a Rescaling nor a Normalization layer first has none."""
    names = _keras_input_names(model) if getattr(model, "built", False) else None
    domains = {}
    for name, tensor in zip(names or [], getattr(model, "inputs", None) or []):
        layer = _first_layer(model, tensor)
        domain = _layer_domain(layer) if layer is not None else None
        if domain is not None:
            domains[name] = domain
    return domains


def _first_layer(model, tensor, depth: int = 0):
    """The one layer of ``model`` that takes ``tensor`` (looking inside a nested model with one input); None where no
    layer or several do."""
    takers = [
        layer
        for layer in getattr(model, "layers", [])
        if any(any(t is tensor for t in node.input_tensors) for node in getattr(layer, "_inbound_nodes", []))
    ]
    if len(takers) != 1:
        return None
    layer = takers[0]
    nested = getattr(layer, "inputs", None) if isinstance(layer, keras().Model) and layer.built else None
    if nested and len(nested) == 1 and depth < 8:
        return _first_layer(layer, nested[0], depth + 1)
    return layer


def _layer_domain(layer) -> tuple[float, float, str] | None:
    """The inputs a preprocessing layer is made for. A Rescaling layer maps 0..(1 - offset) / scale to offset..1 (0..1,
    or -1..1 with an offset of -1): its input is 0..255 for scale 1/255, and for scale 1/127.5 with offset -1. A
    Normalization layer is fed its mean within NORMALIZATION_SPREAD standard deviations. Per-channel values give the
    range over every channel."""
    layers = keras().layers

    def values(value) -> np.ndarray:
        return np.asarray(keras().ops.convert_to_numpy(value), dtype=np.float64).ravel()

    if isinstance(layer, layers.Rescaling):
        scale, offset = values(layer.scale), values(layer.offset)
        if not (np.all(scale > 0) and np.all(offset < 1)):
            return None
        high = round(float(np.max((1 - offset) / scale)), 6)
        mapped = f"0..{high:g} becomes {_numbers(offset)}..1"
        return 0.0, high, f"the model's Rescaling layer '{layer.name}' (scale {_numbers(scale)}, offset {_numbers(offset)}: {mapped})"
    mean, variance = getattr(layer, "mean", None), getattr(layer, "variance", None)  # set when the layer is built
    if isinstance(layer, layers.Normalization) and not getattr(layer, "invert", False) and mean is not None and variance is not None:
        mean, variance = values(mean), values(variance)
        if not np.all(variance > 0):
            return None
        spread = NORMALIZATION_SPREAD * np.sqrt(variance)
        return (
            round(float(np.min(mean - spread)), 6),
            round(float(np.max(mean + spread)), 6),
            f"the model's Normalization layer '{layer.name}' (mean {_numbers(mean)}, variance {_numbers(variance)}): its mean "
            f"within {NORMALIZATION_SPREAD:g} standard deviations",
        )
    return None


def _numbers(values: np.ndarray) -> str:
    shown = [f"{v:.6g}" for v in values]
    return shown[0] if len(set(shown)) == 1 else "[" + ", ".join(shown) + "]"


def _specs_from_signature(signature_fn) -> tuple[InputSpec, ...]:
    _, kwargs = signature_fn.structured_input_signature
    names = list(kwargs)
    unranked = [n for n in names if kwargs[n].shape.rank is None]
    if unranked:
        raise ConvertError(
            f"the input '{unranked[0]}' of the SavedModel's {SERVING_KEY} signature has no known rank",
            "Export the SavedModel with a fully ranked input signature.",
        )
    dims = _symbolic_dims(names, [tuple(kwargs[n].shape.as_list()) for n in names])
    return tuple(InputSpec(n, _dtype_name(kwargs[n].dtype), d) for n, d in zip(names, dims))


def _dtype_name(dtype) -> str:
    from convert.specs import DTYPES

    name = getattr(dtype, "name", None) or str(dtype)
    if name not in DTYPES:
        raise ConvertError(f"a model input has dtype {name}, which is not supported", f"Use one of {', '.join(DTYPES)}.")
    return name


def _first(exc: BaseException) -> str:
    return first_line(str(exc), None)
