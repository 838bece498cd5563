"""An ONNX graph declares its dims under the specs' names (B, S) where an exporter named them after itself (torch's
s53, tf2onnx's unk__24): known by where they stand on the inputs, renamed on the outputs and intermediates alike."""

from __future__ import annotations

from onnx import TensorProto, helper

from convert.backends.onnx import name_dims_after_specs
from convert.specs import parse_input_specs


def _graph(inputs: dict[str, list], outputs: dict[str, list], inner: dict[str, list] | None = None):
    def values(shapes):
        return [helper.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in shapes.items()]

    graph = helper.make_graph([], "dims", values(inputs), values(outputs), value_info=values(inner or {}))
    return helper.make_model(graph)


def _dims(values) -> list[list]:
    return [[d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values]


def test_exporter_dim_names_become_the_specs_on_inputs_outputs_and_intermediates():
    model = _graph(
        {"ids": ["s53", "s30"], "mask": ["s53", "unk__24"]},
        {"logits": ["s53", "s30", 8], "longer": ["s53", "s30 + 1"], "own": ["d0"]},
        {"hidden": ["s53", "s30", 16]},
    )
    specs = parse_input_specs(["ids:int64[B,S]", "mask:int64[B,P+S]"])
    assert name_dims_after_specs(model, specs) == {"s53": "B", "s30": "S", "unk__24": "P+S"}
    assert _dims(model.graph.input) == [["B", "S"], ["B", "P+S"]]
    assert _dims(model.graph.output) == [["B", "S", 8], ["B", "S + 1"], ["d0"]]  # d0 stands on no input: it keeps its name
    assert _dims(model.graph.value_info) == [["B", "S", 16]]


def test_an_ambiguous_or_clashing_name_is_left_as_the_exporter_wrote_it():
    """s1 stands where the specs say B and where they say S (an export that tied them): it is no one name. S is
    already the exporter's name of another dim (on an output only): naming s2 S would make the two one."""
    model = _graph({"x": ["s1", "s1"], "y": ["s2"]}, {"z": ["s1", "S"]})
    specs = parse_input_specs(["x:float32[B,S]", "y:float32[S]"])
    assert name_dims_after_specs(model, specs) == {}
    assert _dims(model.graph.input) == [["s1", "s1"], ["s2"]] and _dims(model.graph.output) == [["s1", "S"]]


def test_names_that_are_already_the_specs_stay():
    model = _graph({"x": ["B", "S"]}, {"y": ["B", "S"]})
    assert name_dims_after_specs(model, parse_input_specs(["x:float32[B,S]"])) == {}
    assert _dims(model.graph.output) == [["B", "S"]]
