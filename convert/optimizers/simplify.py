"""Graph simplification: onnxslim first, ONNX Runtime's offline basic graph optimization as the fallback.

Both give a plain ONNX model (the basic level folds constants and removes redundant nodes without
ONNX Runtime-specific fused ops), so the result runs anywhere the original did.
"""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.onnx import onnx_artifact, save_onnx
from convert.optimizers.base import OptimizeJob, Optimizer


class Simplify(Optimizer):
    def strategies(self, job: OptimizeJob):
        return [
            ("onnxslim.slim", lambda path: self._onnxslim(job, path)),
            ("onnxruntime offline optimization (basic)", lambda path: self._onnxruntime(job, path)),
        ]

    def _onnxslim(self, job: OptimizeJob, path: Path) -> Artifact:
        import onnxslim

        save_onnx(onnxslim.slim(str(job.base.path)), path)
        return onnx_artifact(path)

    def _onnxruntime(self, job: OptimizeJob, path: Path) -> Artifact:
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
        options.optimized_model_filepath = str(path)
        if len(job.base.files) > 1:  # else the optimized model names the base's external data file, not beside it
            options.add_session_config_entry("session.optimized_model_external_initializers_file_name", f"{path.name}.data")
        onnxruntime.InferenceSession(str(job.base.path), options, providers=["CPUExecutionProvider"])
        return onnx_artifact(path)
