"""Artifacts given to validate and ONNX files given as the source: what is refused before any work, and how outputs of
other names are matched."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from convert.artifacts import given_by_name, given_format
from convert.errors import ConvertError
from convert.pipeline.context import ConvertRequest
from convert.pipeline.plan import check_given_trust, plan
from convert.policy import load_policy


def _onnx(path: Path, outputs: tuple[str, ...] = ("y",), shaped: bool = True) -> Path:
    import onnx
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Identity", ["x"], [name]) for name in outputs]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4] if shaped else None)
    graph = helper.make_graph(nodes, "g", [x], [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["B", 4]) for n in outputs])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_tensorrt_engine_is_not_taken_and_other_files_are_told_apart(tmp_path):
    engine = tmp_path / "model.engine"
    engine.write_bytes(b"\0" * 8)
    with pytest.raises(ConvertError, match="is a TensorRT engine, which is not taken"):
        given_format(engine)
    (tmp_path / "ir").mkdir()
    (tmp_path / "ir" / "model.xml").write_text("<net/>")
    assert given_format(tmp_path / "ir") == "openvino"
    assert given_format(_onnx(tmp_path / "m.onnx")) == "onnx"


def test_two_artifacts_of_one_file_name_are_refused(tmp_path):
    with pytest.raises(ConvertError, match="two of the artifacts have the same file name"):
        given_by_name([tmp_path / "a" / "m.onnx", tmp_path / "b" / "m.onnx"])


def test_a_given_artifact_that_runs_code_on_load_needs_trust_code(tmp_path):
    for fmt in ("torchscript", "savedmodel"):
        with pytest.raises(ConvertError, match="runs code") as info:
            check_given_trust({"m": (tmp_path / "m", fmt)}, trust_code=False)
        assert "--trust-code" in info.value.next_step
        check_given_trust({"m": (tmp_path / "m", fmt)}, trust_code=True)


def test_a_truncated_onnx_file_is_a_clear_error(tmp_path):
    from convert.backends.onnx import check_external_data

    whole = _onnx(tmp_path / "whole.onnx").read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ConvertError, match="cut.onnx is not a valid ONNX model: it cannot be read"):
        check_external_data(cut)


def test_an_onnx_input_of_unknown_rank_asks_for_its_spec(tmp_path):
    import onnx

    from convert.sources.onnx import graph_specs

    model = onnx.load(str(_onnx(tmp_path / "m.onnx", shaped=False)))
    with pytest.raises(ConvertError, match="declares no shape, not even its rank") as info:
        graph_specs(model.graph)
    assert "--input" in info.value.next_step


def test_outputs_are_matched_in_order_only_when_no_name_is_shared(tmp_path):
    from convert.pipeline.validate import _by_the_artifacts_output_names
    from convert.registry import REGISTRY
    from convert.validation import ValidationCase
    from convert.validators import ShapeCase

    case = ValidationCase(ShapeCase("export", {"B": 2}), references=[{"a": np.zeros(1), "b": np.ones(1)}])
    disjoint = _onnx(tmp_path / "disjoint.onnx", ("p", "q"))
    onnx_format = REGISTRY.format("onnx")
    moved, matched = _by_the_artifacts_output_names(onnx_format.names_of_outputs(disjoint), ("a", "b"), [case])
    assert set(moved[0].references[0]) == {"p", "q"} and matched == "'a' ↔ 'p', 'b' ↔ 'q'"
    overlapping = _onnx(tmp_path / "overlapping.onnx", ("b", "c"))
    kept, matched = _by_the_artifacts_output_names(onnx_format.names_of_outputs(overlapping), ("a", "b"), [case])
    assert kept == [case] and matched == ""  # 'b' is compared with 'b', and 'c' is reported missing, never with 'a'


def test_an_onnx_models_policy_that_requires_nothing_requires_its_onnx_artifact():
    policy, _ = load_policy({"model": {"path": "model.onnx"}})
    assert policy.required_keys() == ["onnx"]
    with pytest.raises(ConvertError, match="give require.targets"):
        load_policy({"model": {"path": "model.pt2"}})


def test_benchmark_seconds_must_be_positive(tmp_path):
    with pytest.raises(ConvertError, match="--benchmark-seconds must be positive"):
        plan(ConvertRequest(model=str(tmp_path / "m.pt2"), to=("onnx",), benchmark_seconds=0, out=tmp_path / "out"))
