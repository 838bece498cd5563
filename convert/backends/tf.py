"""TensorFlow as every layer uses it: imported quietly on first use, Keras, the serving signature's key, tensors to
NumPy; and every .tflite file: the interpreter (LiteRT's where it is installed, which needs no TensorFlow), its serving
signature's tensor details, the symbolic axes a converter fixed, and output axes declared dynamic."""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np

from convert.artifacts import Artifact
from convert.backends import native_stderr_silenced
from convert.errors import ArtifactUnsupported, MissingDependency, require
from convert.specs import InputSpec

SERVING_KEY = "serving_default"


def tensorflow():
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with native_stderr_silenced():
        return require("tensorflow", "A Keras or TensorFlow model")


def keras():
    tensorflow()
    return require("keras", "A Keras model")


def to_numpy(value) -> np.ndarray:
    return np.asarray(value.numpy() if hasattr(value, "numpy") else value)


def tflite_interpreter_class():
    """LiteRT's interpreter (ai-edge-litert) where it is installed; else TensorFlow's tf.lite.Interpreter, which
    TensorFlow deprecates in its favour (and whose CPU wheel links no Flex delegate)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        if importlib.util.find_spec("tensorflow") is None:
            raise MissingDependency("ai_edge_litert", "Running a .tflite model") from None
        return tensorflow().lite.Interpreter
    return Interpreter


def tflite_unavailable_reason() -> str | None:
    """Why no .tflite can run here (neither interpreter is installed), or None; imports neither."""
    if importlib.util.find_spec("ai_edge_litert") is None and importlib.util.find_spec("tensorflow") is None:
        return "neither the LiteRT interpreter (ai-edge-litert) nor TensorFlow is installed: pip install 'model-convert[litert]'"
    return None


def interpreter_name(interpreter) -> str:
    if type(interpreter).__module__.startswith("ai_edge_litert"):
        return "the LiteRT interpreter (ai-edge-litert)"
    return "TensorFlow's TFLite interpreter (tf.lite.Interpreter)"


def tflite_interpreter(path: Path, allocate: bool = True, threads: int | None = None, delegates: bool = True):
    """The interpreter of a TFLite file; without ``delegates``, its builtin kernels alone (every tensor then has the
    shape its kernel computed, where a delegate keeps the shapes of the tensors inside it to itself)."""
    interpreter_class = tflite_interpreter_class()
    options = {}
    if not delegates:
        resolvers = (
            getattr(sys.modules[interpreter_class.__module__], "OpResolverType", None) or tensorflow().lite.experimental.OpResolverType
        )
        options["experimental_op_resolver_type"] = resolvers.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter warns that it moves to the ai-edge-litert package
        interpreter = interpreter_class(model_path=str(path), num_threads=threads, **options)
    if allocate:
        try:
            with native_stderr_silenced():  # the first allocation prints an INFO line about the XNNPACK delegate
                interpreter.allocate_tensors()
        except RuntimeError as exc:
            if "Select TensorFlow op" in str(exc):
                raise ArtifactUnsupported(
                    f"the model uses TensorFlow ops through SELECT_TF_OPS (Flex), and {interpreter_name(interpreter)} "
                    "installed here has no Flex delegate: run it where one is linked in"
                ) from exc
            raise
    return interpreter


def signature_details(interpreter) -> tuple[dict[str, dict], dict[str, dict]]:
    """Input and output tensor details of the serving signature, by signature name.

    Read through the signature's tensor indices: holding a SignatureRunner keeps numpy views of the
    interpreter's buffers alive, which makes every later resize_tensor_input fail.
    """
    signature = interpreter._get_full_signature_list()[SERVING_KEY]
    by_index = {d["index"]: d for d in interpreter.get_input_details() + interpreter.get_output_details()}
    return (
        {name: by_index[index] for name, index in signature["inputs"].items()},
        {name: by_index[index] for name, index in signature["outputs"].items()},
    )


def invoke_tflite(interpreter, inputs: dict[str, dict], outputs: dict[str, dict], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run the serving signature (its ``signature_details``) on one feed of named arrays."""
    # strict: only axes the model declares dynamic (-1) may change size; a failure here is the artifact's fault
    for name, value in feed.items():
        interpreter.resize_tensor_input(inputs[name]["index"], value.shape, strict=True)
    interpreter.allocate_tensors()
    for name, value in feed.items():
        interpreter.set_tensor(inputs[name]["index"], value)
    interpreter.invoke()
    return {name: interpreter.get_tensor(d["index"]).copy() for name, d in outputs.items()}


def record_fixed_axes(artifact: Artifact, specs: tuple[InputSpec, ...], converter: str) -> Artifact:
    """Record the symbolic axes of ``specs`` that the converter fixed in the .tflite's serving signature
    (shape_signature not -1): the artifact takes them at that size only, and checks at other sizes say why."""
    details, _ = signature_details(tflite_interpreter(artifact.path, allocate=False))
    taken, fixed = [], []
    for spec in specs:
        signature = [int(n) for n in details[spec.name]["shape_signature"]]
        dims = tuple(d if isinstance(d, int) or signature[axis] == -1 else signature[axis] for axis, d in enumerate(spec.dims))
        fixed += [f"{spec.name} axis {axis} ({d})" for axis, d in enumerate(spec.dims) if isinstance(d, str) and dims[axis] != d]
        taken.append(replace(spec, dims=dims))
    if fixed:
        artifact.inputs = tuple(taken)
        reason = f"{converter} fixed " + ", ".join(fixed)
        artifact.fixed_shape_reason = "; ".join(filter(None, (artifact.fixed_shape_reason, reason)))
        artifact.notes.append(reason)
    return artifact


def declare_dynamic_outputs(path: Path, axes: dict[str, list[int]]) -> list[str]:
    """Declare the given axes of the serving signature's outputs dynamic (-1 in their shape signatures), rewriting the
    .tflite file where one was declared fixed; what was ("axis 0 of output 'logits' (2)"). The flatbuffer is rebuilt
    with its buffers inline, as LiteRT's own flatbuffer tools write it (a model past the 2 GB flatbuffer limit cannot be)."""
    _, outputs = signature_details(tflite_interpreter(path, allocate=False))
    declared = {name: [int(n) for n in d["shape_signature"]] for name, d in outputs.items()}
    fixed = {name: [a for a in axes.get(name, ()) if a < len(shape) and shape[a] != -1] for name, shape in declared.items()}
    fixed = {name: found for name, found in fixed.items() if found}
    if not fixed:
        return []
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model(str(path))
    for signature in model.signatureDefs:
        if signature.signatureKey.decode() == SERVING_KEY:
            tensors = model.subgraphs[signature.subgraphIndex].tensors
            for output in signature.outputs:
                name = output.name.decode()
                if name in fixed:
                    tensors[output.tensorIndex].shapeSignature = [-1 if a in fixed[name] else n for a, n in enumerate(declared[name])]
    flatbuffer_utils.write_model(model, str(path))
    return [f"axis {a} of output '{name}' ({declared[name][a]})" for name, found in fixed.items() for a in found]


class TracedGraph:
    """The frozen TensorFlow graph tf2onnx converts from this source's serving function, run with any of its tensors
    fetched: tf2onnx names an ONNX value after the TensorFlow tensor it came from (``scope/op:0``)."""

    method = "the frozen TensorFlow graph tf2onnx converted, its tensors fetched by name"

    def __init__(self, function, source):
        """``function``: the concrete serving function tf2onnx converted, of ``source``'s inputs in spec order."""
        import tf2onnx.tf_loader

        tf = tensorflow()
        inputs = [t.name for t in function.inputs if t.dtype != tf.dtypes.resource]
        outputs = [t.name for t in function.outputs]
        graph_def = tf2onnx.tf_loader.from_function(function, inputs, outputs)
        self.wrapped = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
        self.inputs = {spec.name: self.wrapped.graph.get_tensor_by_name(name) for spec, name in zip(source.signature.inputs, inputs)}
        structure = function.structured_outputs
        # the serving function returns the outputs by name; its flat outputs come in tf.nest's order of their names
        named = tf.nest.flatten({key: key for key in structure}) if isinstance(structure, dict) else []
        self.output_tensors = dict(zip(named, outputs))
        self.source = source
        layers = list(getattr(source.native, "layers", [])) if source.is_keras else []
        scopes = _scopes_of_weights(function.graph, layers)
        self.layers = {
            tensor.name: _keras_layer(op.name, [layer.name for layer in layers], scopes)
            for op in self.wrapped.graph.get_operations()
            if op.type not in ("Placeholder", "Const", "NoOp")
            for tensor in op.outputs
            if tensor.dtype.is_floating
        }

    def names(self, graph) -> dict[str, str]:
        """The graph's values this program has, with their layers."""
        return {value: self.layers[value] for node in graph.node for value in node.output if value in self.layers}

    def values(self, feed: dict[str, np.ndarray], names: list[str], budget_bytes: int) -> dict[str, np.ndarray]:
        """The named tensors for one feed, in the order asked, until they take ``budget_bytes`` (at least one)."""
        found: dict[str, np.ndarray] = {}
        taken = 0
        for start in range(0, len(names), 16):  # fetched a few at a time: each run keeps only what it fetches
            batch = names[start : start + 16]
            for name, array in zip(batch, self._fetch(feed, batch)):
                if found and taken + array.nbytes > budget_bytes:
                    return found
                found[name], taken = array, taken + array.nbytes
        return found

    def outputs(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The frozen graph's own outputs for one feed, named as the source's."""
        return dict(zip(self.output_tensors, self._fetch(feed, list(self.output_tensors.values()))))

    def module_outputs(self, feed: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Each layer's output in a functional Keras model run eagerly beside its value in the frozen graph (the last
        tensor of the layer's scope that an op outside it reads), in the model's order of layers. A layer called more than
        once, one several of whose tensors leave its scope, a model that is not functional, or values of different
        shapes are left out: which value stands for the layer is not known."""
        keras_module = keras()
        model = self.source.native
        if not self.source.is_keras or not getattr(model, "_is_graph_network", getattr(model, "inputs", None) is not None):
            return []
        layers = [
            layer
            for layer in model.layers
            if not isinstance(layer, keras_module.layers.InputLayer) and len(getattr(layer, "_inbound_nodes", ())) == 1
        ]
        names = {layer.name for layer in layers}
        leaving: dict[str, list[str]] = {}  # layer -> the tensors of its scope that an op outside the scope reads
        for op in self.wrapped.graph.get_operations():
            for tensor in op.outputs:
                scope = self.layers.get(tensor.name)
                if scope in names and any(self.layers.get(c.outputs[0].name if c.outputs else "") != scope for c in tensor.consumers()):
                    leaving.setdefault(scope, []).append(tensor.name)
        # one tensor leaving a layer is its output; where grappler folded the layer into its neighbour (a constant
        # multiplied into the next layer's product), several partial values leave it and none is its output
        last = {scope: tensors[0] for scope, tensors in leaving.items() if len(tensors) == 1}
        layers = [layer for layer in layers if layer.name in last and isinstance(layer.output, keras_module.KerasTensor)]
        if not layers:
            return []
        probe = keras_module.Model(model.inputs, [layer.output for layer in layers])
        tf = tensorflow()
        with tf.device("/CPU:0"):
            eager = probe([tf.constant(feed[spec.name]) for spec in self.source.signature.inputs], training=False)
        captured = self._fetch(feed, [last[layer.name] for layer in layers])
        return [
            (f"{layer.name} ({type(layer).__name__})", to_numpy(expected), actual)
            for layer, expected, actual in zip(layers, eager, captured)
            if tuple(expected.shape) == actual.shape
        ]

    def _fetch(self, feed: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        tf = tensorflow()
        run = self.wrapped.prune(list(self.inputs.values()), [self.wrapped.graph.get_tensor_by_name(n) for n in names])
        with tf.device("/CPU:0"):
            return [to_numpy(value) for value in run(*(tf.constant(feed[name]) for name in self.inputs))]


def _scopes_of_weights(graph, layers: list) -> dict[str, str]:
    """Name scope → Keras layer, for the scopes whose ops read a layer's weights (the function's captured variables)."""
    owner = {id(weight.value.handle): layer.name for layer in layers for weight in layer.weights if hasattr(weight.value, "handle")}
    captured = {id(inner): owner[id(outer)] for outer, inner in graph.captures if id(outer) in owner}
    scopes = {}
    for op in graph.get_operations():
        parts = op.name.split("/")
        if op.type == "ReadVariableOp" and len(parts) >= 3 and id(op.inputs[0]) in captured:
            scopes.setdefault(parts[1], captured[id(op.inputs[0])])
    return scopes


def _keras_layer(op_name: str, layer_names: list[str], scopes: dict[str, str]) -> str:
    """The Keras layer a TensorFlow op ran in, from its name scope (``model_1/dense_2_1/MatMul``): the layer whose
    weights the scope reads; else by name, where TensorFlow makes a scope unique by appending ``_N``, which a layer's
    own name may also end with: every layer it may be is named."""
    parts = op_name.split("/")
    if len(parts) < 3:
        return ""
    scope = parts[1]
    if scope in scopes:
        return scopes[scope]
    candidates = [name for name in layer_names if scope == name or (scope.startswith(f"{name}_") and scope[len(name) + 1 :].isdigit())]
    if not candidates:
        return scope
    return " or ".join(sorted(candidates, key=len, reverse=True))


# TFLite tensor types in the precision report's spelling
_TFLITE_TYPES = {"float32": "fp32", "float16": "fp16", "float64": "fp64", "int8": "int8", "uint8": "int8", "int16": "int16", "int4": "int4"}
_TFLITE_PRODUCTS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV", "CONV_3D")


def tflite_precision(path: Path, input_shapes: dict[str, list[int]]):
    """What a TFLite model's matrix products compute in, from the interpreter's op and tensor details with the serving
    signature's inputs resized to ``input_shapes``: an integer input is integer arithmetic (a float input with an
    integer weight is a hybrid kernel, which quantizes the input as it runs); a weight is stored in its tensor's type,
    or in the type a DEQUANTIZE op reads it from."""
    import math

    from convert.precision import MatrixProduct, Measured

    interpreter = tflite_interpreter(path, delegates=False)
    inputs, _ = signature_details(interpreter)
    for name, shape in input_shapes.items():
        if name in inputs:
            interpreter.resize_tensor_input(inputs[name]["index"], shape, strict=True)
    interpreter.allocate_tensors()
    tensors = {d["index"]: d for d in interpreter.get_tensor_details()}
    ops = interpreter._get_ops_details()
    producer = {int(t): op for op in ops for t in op["outputs"]}
    graph_inputs = {d["index"] for d in interpreter.get_input_details()}

    def precision(index: int) -> str:
        return _TFLITE_TYPES.get(np.dtype(tensors[index]["dtype"]).name, "other")

    def shape(index: int) -> list[int]:
        return [int(d) for d in tensors[index]["shape"]]

    products = []
    for op in ops:
        kind = op["op_name"]
        if kind not in _TFLITE_PRODUCTS:
            continue
        operands = [int(t) for t in op["inputs"]]
        first, weight = (operands[2], operands[1]) if kind == "TRANSPOSE_CONV" else (operands[0], operands[1])
        made = producer.get(weight)
        stored = None
        if made is not None and made["op_name"] == "DEQUANTIZE":
            stored = precision(int(made["inputs"][0]))
        elif made is None and weight not in graph_inputs:
            stored = precision(weight)
        compute = precision(first)
        if compute in ("fp32", "fp16") and stored in ("int8", "int4") and made is None:
            compute = "int8"  # a hybrid kernel: the float input is quantized as the op runs
        output = shape(int(op["outputs"][0]))
        macs = None
        if output and all(size > 0 for size in output):
            if kind in ("CONV_2D", "FULLY_CONNECTED"):  # [Cout, kh, kw, Cin] / [N, K]
                macs = math.prod(output) * math.prod(shape(weight)[1:])
            elif kind == "CONV_3D":  # [kd, kh, kw, Cin, Cout]
                macs = math.prod(output) * math.prod(shape(weight)[:-1])
            elif kind == "DEPTHWISE_CONV_2D":
                macs = math.prod(output) * math.prod(shape(weight)[1:-1])
            elif kind == "TRANSPOSE_CONV":
                macs = math.prod(shape(first)) * math.prod(shape(weight)[:-1])
            else:
                macs = math.prod(output) * shape(first)[-1]
        products.append(MatrixProduct(kind, str(op["index"]), macs, compute, stored))
    return Measured(products, how="the TFLite model's ops (the interpreter's op and tensor details)")
