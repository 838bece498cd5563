"""Where a failing ONNX artifact first goes wrong.

The source's traced program (``SourceModel.traced``) gives the values of its intermediate tensors under the names the
exporter gave the graph's values. Those the artifact's graph still has are compared in graph order: a chunk of them is
marked as extra outputs of a temporary copy of the graph (never all at once: a chunk holds at most CHUNK_BYTES of
values, so memory stays near what validation takes), run on ONNX Runtime's CPU provider beside the source, and the first
value out of tolerance is where it diverged; the nodes between it and the last values within tolerance are the region
the fault is in. A reproducer (that region as an ONNX model, the source's inputs to it, the expected output and a
script) is written beside the report.
"""

from __future__ import annotations

import functools
import resource
import shutil
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from convert.artifacts import Artifact
from convert.backends.onnx import module_path
from convert.checks.base import Run, Subject, diagnosis, export_job, exported, failing_case
from convert.registry import REGISTRY
from convert.reports import model as rm
from convert.text import first_line
from convert.validators.compare import compare_output
from convert.validators.tolerances import Tolerance
from convert.worker.protocol import WorkerState, worker_job

CHUNK_BYTES = 256 * 2**20
REPRODUCER_SCRIPT = "reproduce.py"
REPRODUCER_SUFFIX = ".divergence"


def localize(run: Run, subject: Subject) -> None:
    """Trace a failing artifact's first failing check's first sample through its graph; the result goes on the record
    (the report, the renderings and the gate's reasons show it)."""
    artifact, record = subject.artifact, subject.record
    failing = failing_case(run, record)
    if failing is None:
        return
    check, case = failing
    if not REGISTRY.format(artifact.format).localizable:
        record.add(
            rm.Divergence(
                status="skipped",
                reason="localisation reads ONNX graphs, OpenVINO IRs converted from one, torch.export programs and TorchScript "
                f"archives, not {artifact.format} artifacts (their intermediate values are not compared with the source's)",
            )
        )
        return
    graph = Path(record.derived_from) if artifact.format == "openvino" and record.derived_from else None
    output = next((o.name for o in check.outputs if o.status == "failed"), "")
    source_export = exported(run.report, record)
    divergence = diagnosis(
        run,
        ("localize", subject.key),
        lambda why: rm.Divergence(status="skipped", reason=f"localisation failed: {why}"),
        Localize(
            artifact,
            source_export.exporter,
            source_export.strategy,
            export_job(run),
            case.feeds[0],
            case.references[0],
            run.policy.for_output(output, artifact.precision),
            artifact.path.with_name(f"{artifact.path.name}{REPRODUCER_SUFFIX}"),
            graph,
        ),
    )
    divergence.runtime, divergence.device, divergence.shape = check.runtime, check.device, check.shape
    record.add(divergence)


@dataclass
class Probe:
    value: str
    node: str
    op_type: str
    layer: str


def locate(
    traced,
    artifact: Artifact,
    feed: dict[str, np.ndarray],
    reference: dict[str, np.ndarray],
    tolerance: Tolerance,
    repro_folder: Path,
    graph_path: Path | None = None,
) -> rm.Divergence:
    """Compare the artifact's intermediate values with the traced source's for one feed, in graph order, chunk by
    chunk, stopping at the chunk where one first falls out of tolerance. A traced program whose own outputs already
    differ from the source's (``reference``) diverged when it was captured, before any conversion. An OpenVINO IR is
    traced along the ONNX graph it was converted from (``graph_path``): its tensors keep that graph's value names."""
    import onnx

    from convert.backends.openvino import tensor_values

    started = time.perf_counter()
    divergence = rm.Divergence(status="not-found", method=traced.method)
    if REGISTRY.format(artifact.format).captured_program:  # the artifact is the captured program: capture is its one link
        if not _captured_differently(divergence, traced, feed, reference, tolerance, lambda: traced.outputs(feed)):
            divergence.reason = "the program's own outputs are within tolerance of the source model's on this sample"
        return _finish(divergence, started)
    graph_file = graph_path or artifact.path
    model = onnx.load(str(graph_file), load_external_data=False)
    if artifact.format == "onnx":
        values_of = functools.partial(artifact_values, artifact.path, model, feed=feed)
    else:
        values_of = functools.partial(tensor_values, artifact.path, feed=feed)
    if _captured_differently(
        divergence, traced, feed, reference, tolerance, lambda: values_of(names=[o.name for o in model.graph.output if o.name in reference])
    ):
        return _finish(divergence, started)
    probes = _probes(model.graph, traced.names(model.graph))
    divergence.matched = len(probes)
    if not probes:
        divergence.status, divergence.reason = "skipped", "no value of the artifact's graph has a name the source's program has"
        return _finish(divergence, started)
    within: dict[str, bool] = {}  # compared values within tolerance, and whether they were channels-first in the graph
    # (their source values are not kept: memory stays bounded)
    pending = list(probes)
    while pending and divergence.status != "found":
        expected = traced.values(feed, [p.value for p in pending], CHUNK_BYTES)
        chunk = [p for p in pending if p.value in expected]
        if not chunk:
            break
        pending = [p for p in pending if p.value not in expected]
        actual = values_of(names=[p.value for p in chunk])
        divergence.chunks += 1
        for probe in chunk:
            if probe.value not in actual:
                continue  # converted away (fused into another op)
            compared = _compared(probe.value, expected[probe.value], actual[probe.value], tolerance)
            if compared is None:
                continue  # the same name for a value of another shape is not the same value
            moved, result = compared
            divergence.compared += 1
            divergence.probes.append(
                rm.ProbePoint(
                    value=probe.value,
                    node=probe.node,
                    op_type=probe.op_type,
                    layer=probe.layer,
                    status=result.status,
                    max_abs_error=result.max_abs_error,
                    cosine_similarity=result.cosine_similarity,
                )
            )
            if result.status == "passed":
                within[probe.value] = moved
                continue
            if divergence.status != "found":
                _name(divergence, model.graph, probe, result, within)
                if artifact.format == "onnx":  # the subgraph of an IR's ONNX graph would not run what the IR runs
                    inputs = traced.values(feed, divergence.inputs_within, 2**62) if divergence.inputs_within else {}
                    inputs = {name: _channels_first(value) if within[name] else value for name, value in inputs.items()}
                    output = _channels_first(expected[probe.value]) if moved else expected[probe.value]
                    _write_reproducer(divergence, model, graph_file.parent, {**feed, **inputs}, output, tolerance, repro_folder)
    if divergence.status != "found":
        divergence.reason = (
            f"all {divergence.compared} intermediate values the source could name are within tolerance: the difference is "
            "made after them, or in values the exporter renamed"
        )
    return _finish(divergence, started)


def _captured_differently(
    divergence: rm.Divergence, traced, feed, reference: dict[str, np.ndarray], tolerance: Tolerance, converted
) -> bool:
    """Whether the difference is made when the model is captured: the program the exporter captured computes another
    output than the source model does, and the artifact (``converted()``: its outputs) computes what that program does.
    Where the artifact departs from the program as well (float noise on both links, under a tolerance tighter than it),
    the search goes on inside the graph."""
    own = getattr(traced, "outputs", None)
    captured = own(feed) if own is not None else {}
    artifact = converted() if captured else {}
    for name, expected in reference.items():
        if name in captured and name in artifact:
            result = compare_output(name, expected, captured[name], tolerance)
            if result.status == "failed" and compare_output(name, captured[name], artifact[name], tolerance).status == "passed":
                divergence.status, divergence.stage, divergence.value, divergence.metrics = "found", "capture", name, result.metrics()
                _name_captured_module(divergence, traced, feed, tolerance)
                return True
    return False


def _name_captured_module(divergence: rm.Divergence, traced, feed, tolerance: Tolerance) -> None:
    """The first module, in the order the modules finish, whose output in the captured program departs from the source
    model's own (every module that finished before it, its inputs among them, agrees): where the capture went wrong."""
    modules = getattr(traced, "module_outputs", None)
    try:
        compared = modules(feed) if modules is not None else []
    except Exception as exc:  # the capture's finding stands; that its modules could not be run beside it is said
        divergence.reason = f"no module is named: running the modules beside the captured program failed: {first_line(str(exc))}"
        return
    for label, expected, actual in compared:
        result = compare_output(label, expected, actual, tolerance)
        divergence.compared += 1
        divergence.probes.append(
            rm.ProbePoint(
                value=label,
                node="",
                op_type="module",
                layer=label,
                status=result.status,
                max_abs_error=result.max_abs_error,
                cosine_similarity=result.cosine_similarity,
            )
        )
        if result.status == "failed":
            divergence.layer = label
            return


def _finish(divergence: rm.Divergence, started: float) -> rm.Divergence:
    divergence.seconds = round(time.perf_counter() - started, 3)
    divergence.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return divergence


def _channels_first(value: np.ndarray) -> np.ndarray:
    return np.moveaxis(value, -1, 1)


def _compared(name: str, expected: np.ndarray, actual: np.ndarray, tolerance: Tolerance):
    """(whether the source's channels-last value was read channels-first, the comparison), or None where no layout of
    it has the graph value's shape. Exporters move channels first (jax2onnx's convolutions, tf2onnx's transpose
    optimizer keeps a TensorFlow name on a value it made NCHW), and a shape alone cannot tell which when the spatial
    and channel extents are equal: each layout that fits is compared, and the first within tolerance (else the closest)
    is taken."""
    fits = [(False, expected)] if expected.shape == actual.shape else []
    if expected.ndim >= 3 and _channels_first(expected).shape == actual.shape:
        fits.append((True, _channels_first(expected)))
    results = [(moved, compare_output(name, value, actual, tolerance)) for moved, value in fits]
    passed = [found for found in results if found[1].status == "passed"]
    return (passed or sorted(results, key=lambda found: found[1].max_abs_error or 0.0) or [None])[0]


def _probes(graph, layers: dict[str, str]) -> list[Probe]:
    """The graph's node outputs the source can name, in graph order (ONNX graphs are topologically sorted)."""
    probes = []
    for node in graph.node:
        for value in node.output:
            if value in layers:
                probes.append(Probe(value, node.name, node.op_type, layers[value] or module_path(node)))
    return probes


def artifact_values(path: Path, model, names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The named values of the graph for one feed: a copy of the graph (beside the original, so that its external
    data resolves) with those values as its only outputs, run on ONNX Runtime's CPU provider."""
    import onnx
    import onnxruntime as ort

    outputs = list(model.graph.output)  # marked in place and put back: a copy of a large graph would double its memory
    del model.graph.output[:]
    model.graph.output.extend(onnx.helper.make_empty_tensor_value_info(name) for name in names)
    copy = path.with_name(f".{path.stem}.probe.onnx")
    try:
        onnx.save(model, str(copy))
        options = ort.SessionOptions()
        options.log_severity_level = 3  # the copy's unused initializers are expected: no warnings about them
        session = ort.InferenceSession(str(copy), options, providers=["CPUExecutionProvider"])
        wanted = {i.name for i in session.get_inputs()}
        values = session.run(names, {k: v for k, v in feed.items() if k in wanted})
    finally:
        copy.unlink(missing_ok=True)
        del model.graph.output[:]
        model.graph.output.extend(outputs)
    return dict(zip(names, values))


def _name(divergence: rm.Divergence, graph, probe: Probe, result, within: dict[str, bool]) -> None:
    """Record the divergent value, its node, and the region back to the values within tolerance."""
    nodes, frontier = region(graph, probe.value, set(within))
    initializers = {t.name for t in graph.initializer}
    divergence.status = "found"
    divergence.value, divergence.node, divergence.op_type, divergence.layer = probe.value, probe.node, probe.op_type, probe.layer
    divergence.region = [n.name for n in nodes]
    divergence.parameters = sorted({i for n in nodes for i in n.input if i in initializers})
    divergence.inputs_within = [name for name in frontier if name in within]
    divergence.metrics = result.metrics()


def region(graph, value: str, stops: set[str]) -> tuple[list, list[str]]:
    """The nodes that compute ``value`` back to the ``stops``, the graph's inputs and its initializers (in graph order),
    and the values that feed them from outside (the stops and graph inputs they read)."""
    producer = {out: node for node in graph.node for out in node.output}
    initializers = {t.name for t in graph.initializer}
    seen: dict[int, object] = {}
    frontier: list[str] = []
    queue = deque([value])
    visited = {value}
    while queue:
        name = queue.popleft()
        node = producer.get(name)
        if node is None or (name in stops and name != value):
            if name not in initializers and name and name not in frontier:
                frontier.append(name)
            continue
        seen[id(node)] = node
        for upstream in node.input:
            if upstream and upstream not in visited:
                visited.add(upstream)
                queue.append(upstream)
    ordered = [node for node in graph.node if id(node) in seen]
    return ordered, frontier


def _write_reproducer(
    divergence: rm.Divergence,
    model,
    base_dir: Path,
    values: dict[str, np.ndarray],
    expected: np.ndarray,
    tolerance: Tolerance,
    folder: Path,
) -> None:
    """The region as a standalone ONNX model, the source's values of its inputs (``values``: the feed and the compared
    values feeding it), the source's value of its output and a script that runs it on ONNX Runtime and exits 1 when the
    output is out of tolerance."""
    import onnx
    from onnx import external_data_helper

    graph = model.graph
    in_region = set(divergence.region)
    nodes = [n for n in graph.node if n.name in in_region]
    inputs = {name: values[name] for name in _region_inputs(graph, divergence)}
    used = {i for n in nodes for i in n.input}
    initializers = []
    for tensor in graph.initializer:
        if tensor.name in used:
            copy = onnx.TensorProto()
            copy.CopyFrom(tensor)
            if external_data_helper.uses_external_data(copy):
                external_data_helper.load_external_data_for_tensor(copy, str(base_dir))
                copy.data_location = onnx.TensorProto.DEFAULT
                del copy.external_data[:]
            initializers.append(copy)
    subgraph = onnx.helper.make_graph(
        nodes,
        f"{graph.name or 'graph'}_divergence",
        [
            onnx.helper.make_tensor_value_info(name, onnx.helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))
            for name, array in inputs.items()
        ],
        [onnx.helper.make_empty_tensor_value_info(divergence.value)],
        initializers,
    )
    sub = onnx.helper.make_model(subgraph, opset_imports=list(model.opset_import), ir_version=model.ir_version)
    staging = folder.with_name(f".{folder.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    onnx.save(sub, str(staging / "subgraph.onnx"))
    np.savez(staging / "inputs.npz", **inputs)
    np.savez(staging / "expected.npz", output=expected)
    (staging / REPRODUCER_SCRIPT).write_text(_script(divergence, tolerance))
    shutil.rmtree(folder, ignore_errors=True)
    staging.rename(folder)
    divergence.reproducer = str(folder)
    divergence.reproduce = f"python {folder / REPRODUCER_SCRIPT}"


def _region_inputs(graph, divergence: rm.Divergence) -> list[str]:
    in_region = set(divergence.region)
    made = {o for n in graph.node if n.name in in_region for o in n.output}
    initializers = {t.name for t in graph.initializer}
    names: list[str] = []
    for node in graph.node:
        if node.name in in_region:
            for name in node.input:
                if name and name not in made and name not in initializers and name not in names:
                    names.append(name)
    return names


def _script(divergence: rm.Divergence, tolerance: Tolerance) -> str:
    return f'''"""The node {divergence.node} ({divergence.op_type}) of an exported model, with the nodes between it and the
last values that matched the source model. Its inputs are the source's values; expected.npz holds the source's value
of its output, {divergence.value!r} (layer: {divergence.layer or "unknown"}). Needs numpy and onnxruntime only.

Exits 1 when the output is out of tolerance (|actual - expected| <= atol + rtol * |expected|), 0 when it is within."""

import sys
from pathlib import Path

import numpy as np
import onnxruntime

ATOL, RTOL = {tolerance.atol!r}, {tolerance.rtol!r}

here = Path(__file__).parent
session = onnxruntime.InferenceSession(str(here / "subgraph.onnx"), providers=["CPUExecutionProvider"])
inputs = dict(np.load(here / "inputs.npz"))
expected = np.load(here / "expected.npz")["output"]
(actual,) = session.run(None, inputs)
error = np.abs(actual.astype(np.float64) - expected.astype(np.float64))
print(f"{divergence.value}: max abs error {{error.max():.6g}}, max expected {{np.abs(expected).max():.6g}}")
within = actual.shape == expected.shape and bool(np.all(error <= ATOL + RTOL * np.abs(expected)))
print("within tolerance" if within else f"out of tolerance (atol={{ATOL}}, rtol={{RTOL}})")
sys.exit(0 if within else 1)
'''


@worker_job
@dataclass(frozen=True)
class Localize:
    """Where the artifact first diverges from the source on one feed (``locate``); ``exporter`` and ``strategy`` made the
    ONNX file it comes from, which is ``graph`` for an OpenVINO IR. A captured program is its own trace."""

    artifact: Artifact
    exporter: str
    strategy: str
    job: Any  # the export's ExportJob, as the exporter traces the source again
    feed: dict[str, np.ndarray]
    reference: dict[str, np.ndarray]
    tolerance: Tolerance
    folder: Path
    graph: Path | None = None

    def run(self, state: WorkerState) -> rm.Divergence:
        import io

        from convert.exporters.base import quiet
        from convert.registry import load_target

        captured = REGISTRY.format(self.artifact.format).captured_program
        if captured:
            program = load_target(captured)(state.source, self.artifact.path)
            return locate(program, self.artifact, self.feed, self.reference, self.tolerance, self.folder)
        traced = state.traced_program(self.exporter, self.strategy, self.job)
        if traced is None:
            return rm.Divergence(status="skipped", reason=f"the graph {self.strategy} wrote keeps no names of the source's values")
        with quiet(io.StringIO()):  # the program's chatter, as when the exporter ran it
            return locate(traced, self.artifact, self.feed, self.reference, self.tolerance, self.folder, self.graph)
