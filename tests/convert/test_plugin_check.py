"""One registration reaches everything a check touches: a fake check registered from outside the package
(tests/plugins/fake_check.py) runs in the validation loop, its detail is in the report's JSON and read back as its own
class, shown by the Markdown, HTML and JUnit renderings, and kept in the stage cache, which gives it back to the next
run without running the check again; a fresh process told of the plugin by $CONVERT_PLUGINS reads and renders it.
Nothing in convert/ is edited for it."""

from __future__ import annotations

import importlib
import sys

import numpy as np
import pytest

from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.reports.render import render_files
from tests.conftest import run_cli

PLUGIN = "tests.plugins.fake_check"


@pytest.fixture
def plugin(monkeypatch):
    """The plugin module imported into a copy of the registry, both put back afterwards: no other test sees its check."""
    REGISTRY.entries("check")  # the package's own entries first, so that the copy holds them
    monkeypatch.setattr(REGISTRY, "_entries", dict(REGISTRY._entries))
    monkeypatch.setattr(REGISTRY, "_by_target", dict(REGISTRY._by_target))
    monkeypatch.delitem(sys.modules, PLUGIN, raising=False)
    module = importlib.import_module(PLUGIN)
    yield module
    sys.modules.pop(PLUGIN, None)


@pytest.fixture
def tiny(tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", 3])],
        [weights],
    )
    path = tmp_path / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))
    return path


def test_a_plugin_check_reaches_the_report_its_renderings_and_the_cache(plugin, tiny, tmp_path, monkeypatch):
    import convert

    monkeypatch.delenv("CONVERT_NO_CACHE", raising=False)
    first = convert.convert(str(tiny), to=["onnx"], out=tmp_path / "first", cache_dir=tmp_path / "cache", isolate=False)
    assert first.passed and plugin.RUNS == ["onnx"]
    written = rm.Report.from_json((tmp_path / "first" / "report.json").read_text())
    found = written.artifacts[0].detail("worst-error")
    assert isinstance(found, plugin.WorstError) and found.output == "y" and found.check.startswith("onnxruntime on cpu at B=")
    assert found == first.report.artifacts[0].detail(plugin.WorstError)

    second = convert.convert(str(tiny), to=["onnx"], out=tmp_path / "second", cache_dir=tmp_path / "cache", isolate=False)
    assert plugin.RUNS == ["onnx"], "the cache gave the detail back: the check did not run again"
    assert "worst-error:onnx" in second.report.cache.reused
    assert second.report.artifacts[0].detail(plugin.WorstError) == found

    paths = {"html": tmp_path / "r.html", "markdown": tmp_path / "r.md", "junit": tmp_path / "r.xml"}
    render_files(written, **paths)
    for name, path in paths.items():
        assert found.describe() in path.read_text().replace("&#x27;", "'"), name

    shown = run_cli(
        "report", str(tmp_path / "first" / "report.json"), "--markdown", str(tmp_path / "fresh.md"), env={"CONVERT_PLUGINS": PLUGIN}
    )
    assert shown.returncode == 0, shown.output
    assert found.describe() in (tmp_path / "fresh.md").read_text()
