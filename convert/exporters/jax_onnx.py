"""ONNX from JAX: jax2onnx first (symbolic dims kept); where it lacks a primitive, jax2tf → TFLite → tf2onnx.

jax2tf → tf2onnx directly is not a strategy: current JAX serializes to StableHLO inside an ``XlaCallModule``
op, which tf2onnx cannot convert. The TFLite converter lowers that op, and tf2onnx reads TFLite. tf2onnx's
TFLite reader mishandles some reshapes on dynamic axes (batch matmuls), so that route is smoke-run at the
export shape and, when it fails there, tried once more with every axis fixed at the export shape.

jax2onnx 0.17's patches of flax.linen's ``max_pool``, ``avg_pool`` and ``min_pool`` take ``window_shape`` by keyword
only, so the usual ``nn.max_pool(x, (2, 2), strides=(2, 2))`` fails inside them ("patched_max_pool() takes 1
positional argument but 2 ... were given") and only a route fixed at the export shape would remain; while exporting,
their patches are called with flax's own signature instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import inspect
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.onnx import onnx_artifact, rename_values, save_onnx
from convert.exporters.base import Exporter, ExportJob

TF2ONNX_OPSET = 17
# jax2onnx's plugins that patch a flax.linen pooling function with a keyword-only window_shape
LINEN_POOLING_PLUGINS = (
    ("jax2onnx.plugins.flax.linen.max_pool", "MaxPoolPlugin"),
    ("jax2onnx.plugins.flax.linen.avg_pool", "AvgPoolPlugin"),
    ("jax2onnx.plugins.flax.linen.min_pool", "MinPoolPlugin"),
)


class JaxToOnnx(Exporter):
    def strategies(self, job: ExportJob):
        strategies = [
            ("jax2onnx.to_onnx", lambda path: self._jax2onnx(job, path)),
            ("jax2tf → TFLite → tf2onnx", lambda path: self._via_tflite(job, path, fixed=False)),
        ]
        if job.source.signature.symbols:
            strategies.append(
                ("jax2tf → TFLite → tf2onnx (fixed at the export shape)", lambda path: self._via_tflite(job, path, fixed=True))
            )
        return strategies

    def _jax2onnx(self, job: ExportJob, path: Path) -> Artifact:
        import jax2onnx

        source = job.source
        inputs = source.symbolic_specs()
        with linen_pooling_by_position(), _call_sites_recorded():
            model = jax2onnx.to_onnx(
                source.bound(),
                inputs,
                model_name=job.stem,
                **({"opset": job.opset} if job.opset else {}),
                input_names=[s.name for s in source.signature.inputs],
                output_names=list(source.signature.outputs),
            )
        save_onnx(model, path)
        return onnx_artifact(path, job.opset)

    def traced(self, job: ExportJob, strategy: str):
        """jax2onnx writes the calling source line on every node; the TFLite route keeps nothing of the source."""
        from convert.backends.jax import TracedJaxpr

        return TracedJaxpr(job.source) if strategy == self.strategies(job)[0][0] else None

    def _via_tflite(self, job: ExportJob, path: Path, fixed: bool) -> Artifact:
        import onnx
        import tf2onnx

        from convert.backends.tf import signature_details, tflite_interpreter
        from convert.exporters.tflite import write_tflite

        shapes = {name: tuple(value.shape) for name, value in job.feed.items()}
        tflite_job = replace(job, source=job.source.at_shapes(shapes)) if fixed else job
        intermediate = path.with_name(f".{path.name}.tflite")
        try:
            write_tflite(tflite_job, intermediate)
            inputs, outputs = signature_details(tflite_interpreter(intermediate, allocate=False))
            tf2onnx.convert.from_tflite(str(intermediate), opset=job.opset or TF2ONNX_OPSET, output_path=str(path))
        finally:
            intermediate.unlink(missing_ok=True)
        model = onnx.load(str(path), load_external_data=False)  # renaming needs the graph only; external data stays put
        rename_values(model, {d["name"]: name for name, d in {**inputs, **outputs}.items()})
        onnx.save(model, str(path))
        _smoke_run(path, job)
        artifact = onnx_artifact(path, job.opset)
        if fixed:
            artifact.inputs = tflite_job.source.signature.inputs
            artifact.fixed_shape_reason = "exported at the export shape: the dynamic jax2tf → TFLite → tf2onnx model failed there"
        return artifact


@contextlib.contextmanager
def _call_sites_recorded() -> Iterator[None]:
    """jax2onnx writes each node's calling source line (``pkg.jax2onnx.callsite``) when its environment flag is set:
    where an artifact diverges is then told by source line."""
    from convert.backends.jax import STACKTRACE_ENV

    before = os.environ.get(STACKTRACE_ENV)
    os.environ[STACKTRACE_ENV] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[STACKTRACE_ENV]
        else:
            os.environ[STACKTRACE_ENV] = before


def _smoke_run(path: Path, job: ExportJob) -> None:
    """Run the model once at the export shape: an artifact that cannot run there is a failed attempt."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 4  # the failure comes back as the exception; keep ONNX Runtime's log off the terminal
    session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    run_options = onnxruntime.RunOptions()
    run_options.log_severity_level = 4
    session.run(None, {i.name: job.feed[i.name] for i in session.get_inputs()}, run_options)


@contextlib.contextmanager
def linen_pooling_by_position() -> Iterator[None]:
    """While jax2onnx exports, its flax.linen pooling patches take their arguments as flax's functions do (by position
    or by name). A jax2onnx without these plugins is left as it is."""
    replaced = []
    for module_name, class_name in LINEN_POOLING_PLUGINS:
        try:
            plugin = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        replaced.append((plugin, plugin.__dict__.get("binding_specs")))
        plugin.binding_specs = classmethod(functools.partial(_specs_by_position, plugin.binding_specs))
    try:
        yield
    finally:
        for plugin, original in replaced:
            if original is None:
                del plugin.binding_specs
            else:
                plugin.binding_specs = original


def _specs_by_position(specs: Callable[[], list], cls) -> list:
    return [
        dataclasses.replace(spec, make_value=functools.partial(_patched_by_position, spec.make_value))
        if hasattr(spec, "make_value")
        else spec
        for spec in specs()
    ]


def _patched_by_position(make_value: Callable, original: Callable | None) -> Callable:
    """jax2onnx's patch of ``original``, called with ``original``'s arguments bound to their names."""
    patched = make_value(original)
    if original is None:
        return patched
    signature = inspect.signature(original)
    first = next(iter(signature.parameters))

    @functools.wraps(original)
    def call(*args, **kwargs):
        arguments = signature.bind(*args, **kwargs).arguments
        return patched(arguments.pop(first), **arguments)

    return call
