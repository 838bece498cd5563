"""An ONNX artifact whose declared output shapes did not hold is repaired only where the repair takes: the graph
declares the frozen size along the chain to the output too (value_info, an If's branches), those declarations are
inferred again, and the checks after the repair prove it; a repair they do not prove is not recorded as one."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from convert.artifacts import Artifact
from convert.checks.repair import declared_repairs, repairs_not_held
from convert.specs import parse_input_specs
from convert.validation import ValidationCase, checks_on, name_onnx_output_dims
from convert.validators import TolerancePolicy, generate_feed, plan_shape_cases
from tests.conftest import load_report, run_cli

RNN_MODULE = """
import torch


class Recurrent(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.rnn = getattr(torch.nn, kind)(8, 32, batch_first=True)
        self.head = torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.rnn(x)[0])
"""


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_a_pickled_recurrent_module_is_repaired_along_its_graph_and_passes_at_other_lengths(tmp_path, kind):
    """torch.onnx (dynamo) declares the sequence axis of a recurrent layer's output and of every value after it at the
    export length, in the graph's value_info as well as in its outputs; ONNX Runtime takes the value_info's. The repair
    reaches both, and the artifact passes at every other length."""
    (tmp_path / "rnn_model.py").write_text(RNN_MODULE)
    saved = f"import torch, rnn_model; torch.manual_seed(0); torch.save(rnn_model.Recurrent({kind!r}).eval(), 'rnn.pt')"
    subprocess.run([sys.executable, "-c", saved], cwd=tmp_path, check=True)
    run = run_cli("rnn.pt", "--trust-code", "--input", "x:float32[B,S,8]", "--to", "onnx", "--out", "out", cwd=tmp_path)
    record = load_report(tmp_path / "out" / "report.json")["artifacts"][0]
    assert run.returncode == 0, [c["reason"] for c in record["checks"]]
    export_s = int(record["checks"][0]["shape"].split("S=")[1])
    assert len(record["repairs"]) == 1 and "axis 1 of output 'output' the dynamic dim 'S'" in record["repairs"][0]
    lengths = {int(c["shape"].split("S=")[1]) for c in record["checks"] if c["status"] == "passed"}
    assert lengths - {export_s} and not any(c["declared_mismatches"] for c in record["checks"])
    model = onnx.load(str(tmp_path / "out" / "rnn.onnx"))
    assert [d.dim_param or d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == ["B", "S", 8]
    frozen = [v.name for v in model.graph.value_info if export_s in [d.dim_value for d in v.type.tensor_type.shape.dim]]
    assert not frozen


SPECS = parse_input_specs(["x:float32[B,S]"])


def _cases() -> list[ValidationCase]:
    cases = []
    for shape in plan_shape_cases(("B", "S")):
        feeds = [generate_feed(SPECS, shape.sizes, sample) for sample in range(2)]
        cases.append(ValidationCase(shape, feeds, [{"y": np.abs(feed["x"])} for feed in feeds]))
    return cases


def _branching(path, export_s: int) -> Artifact:
    """y = x if sum(x) > 0 else -x, then abs: the values are right at every shape, but each If branch declares its
    output [B, <export S>] (as a graph exported at one length can), and ONNX Runtime gives the If that shape."""

    def branch(op: str, name: str):
        body = [helper.make_node(op, ["x"], [name])]
        return helper.make_graph(body, name, [], [helper.make_tensor_value_info(name, TensorProto.FLOAT, ["B", export_s])])

    nodes = [
        helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
        helper.make_node("Greater", ["total", "zero"], ["positive"]),
        helper.make_node("If", ["positive"], ["signed"], then_branch=branch("Identity", "kept"), else_branch=branch("Neg", "negated")),
        helper.make_node("Abs", ["signed"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "branching",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", export_s])],
        [helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return Artifact(format="onnx", path=path, files=[path], inputs=SPECS, output_names=("y",))


def test_a_repair_reaches_the_declared_outputs_of_an_if_s_branches(tmp_path):
    cases = _cases()
    artifact = _branching(tmp_path / "branching.onnx", cases[0].shape.sizes["S"])
    before = checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())
    repairs = declared_repairs(before, cases)
    assert list(repairs) == [("y", 1)] and repairs[("y", 1)][0] == "S"
    name_onnx_output_dims(artifact.path, {where: name for where, (name, _) in repairs.items()})
    after = checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())
    assert {c.status for c in after} == {"passed"}, [c.reason for c in after]
    assert repairs_not_held(before, after, repairs) == []


def test_a_repair_the_checks_do_not_prove_is_told_apart(tmp_path):
    """Checks after a repair that still find the repaired axis declared at its export size, or that did not run
    again where the first ones found it, do not show that the repair took."""
    cases = _cases()
    artifact = _branching(tmp_path / "branching.onnx", cases[0].shape.sizes["S"])
    before = checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())
    repairs = declared_repairs(before, cases)
    unchanged = checks_on(artifact, "onnxruntime", "cpu", cases, TolerancePolicy())  # as after a repair that did not take
    not_held = repairs_not_held(before, unchanged, repairs)
    assert not_held and all("output 'y' is declared [B," in why for why in not_held)
    failed_shapes = [c.shape for c in before if c.declared_mismatches]
    assert repairs_not_held(before, unchanged[:1], repairs) == [f"onnxruntime on cpu did not run again at {s}" for s in failed_shapes]
