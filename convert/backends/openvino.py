"""OpenVINO as the optimizer writes its IR and the runtime reads it: the model file's name in the IR folder; the values of
an IR's tensors by the names of the ONNX values they were converted from (localisation)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from convert.formats import IR_NAME

# f32 for every artifact, INT8 included: the CPU plugin's default on CPUs with bf16 would run a computation the
# artifact does not describe
F32_CPU = {"INFERENCE_PRECISION_HINT": "f32"}


def tensor_values(folder: Path, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The IR's tensors that carry the given names (OpenVINO keeps the ONNX value names of the ops it converted), as
    extra outputs of one inference on the CPU plugin at f32; a name no tensor carries any more is left out."""
    import openvino

    core = openvino.Core()
    model = core.read_model(str(folder / IR_NAME))
    carried = {name for op in model.get_ops() for port in op.outputs() for name in port.get_names()}
    wanted = [name for name in names if name in carried]
    if not wanted:
        return {}
    model.add_outputs(wanted)
    compiled = core.compile_model(model, "CPU", F32_CPU)
    results = compiled.create_infer_request().infer({p.get_any_name(): feed[p.get_any_name()] for p in compiled.inputs})
    found = {}
    for port in compiled.outputs:
        for name in port.get_names() & set(wanted):
            found[name] = np.array(results[port])
    return found
