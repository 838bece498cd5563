"""One judge for fresh and cached checks: the cache keeps a check's measurements, and a run that reuses them judges them
again under its own tolerances and budgets with the judge a fresh check gets (convert/validation.py). In process: a
tiny ONNX graph measured by ONNX Runtime, its checks kept as the stage cache keeps them, then judged by another run's
policy."""

from __future__ import annotations

import numpy as np
import pytest

from convert.artifacts import Artifact
from convert.checks.comparison import judged_again, reusable
from convert.specs import parse_input_spec
from convert.validation import ValidationCase, checks_on
from convert.validators import TolerancePolicy
from convert.validators.inputs import ShapeCase

SCALE = 1.01  # the artifact's outputs are the source's times this: rel_rms 0.01, cosine 1


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """An int8-precision ONNX artifact that scales its input by SCALE, and a case of the source's (identity) outputs."""
    import onnx
    from onnx import TensorProto, helper

    path = tmp_path_factory.mktemp("judge") / "model.onnx"
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        "scaled",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 8])],
        [helper.make_tensor("scale", TensorProto.FLOAT, [], [SCALE])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    artifact = Artifact(format="onnx", path=path, files=[path], precision="int8", inputs=(parse_input_spec("x:float32[B,8]"),))
    artifact.sha256 = "recorded"
    rng = np.random.default_rng(0)
    feeds = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(2)]
    case = ValidationCase(shape=ShapeCase("export", {"B": 2}), feeds=feeds, references=[{"y": feed["x"].copy()} for feed in feeds])
    return artifact, [case]


def _fresh(measured, policy: TolerancePolicy):
    artifact, cases = measured
    return checks_on(artifact, "onnxruntime", "cpu", cases, policy)


LOOSE = TolerancePolicy()  # int8's default budget: rel_rms <= 0.2
TIGHT = TolerancePolicy(accuracy=["rel_rms<=0.001"])


@pytest.mark.fast
def test_a_cached_measurement_is_judged_again_under_a_changed_budget_as_a_fresh_one_is(measured):
    artifact, cases = measured
    [kept] = _fresh(measured, LOOSE)
    assert kept.status == "passed"
    stored = [kept.model_dump()]  # what the stage cache keeps
    assert reusable(stored, artifact, "onnxruntime", "cpu", cases, TIGHT, False) == ""
    [judged] = judged_again(stored, artifact, cases, TIGHT)
    [fresh] = _fresh(measured, TIGHT)
    assert judged.status == fresh.status == "failed"
    assert "rel_rms" in judged.reason and "misses the budget rel_rms<=0.001" in judged.reason
    assert (judged.reason, judged.outputs) == (fresh.reason, fresh.outputs)
    # and back: the failure kept under the tight budget passes under the loose one, as a fresh check does
    [passed] = judged_again([fresh.model_dump()], artifact, cases, LOOSE)
    assert passed.status == "passed" and passed.outputs == kept.outputs


def test_mismatches_counted_at_another_elementwise_tolerance_are_measured_again(measured):
    """An elementwise tolerance decides which values count as mismatches: a kept count at another one cannot be judged."""
    artifact, cases = measured
    stored = [check.model_dump() for check in _fresh(measured, LOOSE)]
    why = reusable(stored, artifact, "onnxruntime", "cpu", cases, TolerancePolicy(overrides=["atol=0.5,rtol=0.5"]), False)
    assert "counted its mismatches at" in why


def test_a_kept_pass_whose_metrics_cannot_be_a_pass_is_measured_again(measured):
    """A planted fault: a kept output whose histogram does not count its values is not reused."""
    artifact, cases = measured
    [kept] = _fresh(measured, LOOSE)
    stored = kept.model_dump()
    stored["outputs"][0]["error_histogram"] = [0] * len(stored["outputs"][0]["error_histogram"])
    assert "error histogram" in reusable([stored], artifact, "onnxruntime", "cpu", cases, LOOSE, False)
