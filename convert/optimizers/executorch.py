"""INT8 ExecuTorch ``.pte`` through PT2E: the source captured with torch.export, observed by the XNNPACK quantizer
(symmetric INT8, per-channel weights) on the calibration feeds, converted to quantize/dequantize pairs, exported
again within the FP32 .pte's bounds and lowered with the XNNPACK partitioner, which runs the quantized operators."""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.backends import native_stderr_silenced
from convert.backends.executorch import LOWERING, bounded_dynamic_shapes, in_call_order, lower, require_executorch
from convert.backends.torch import to_tensors
from convert.optimizers.base import OptimizeJob, Optimizer


class ExecuTorchInt8(Optimizer):
    def strategies(self, job: OptimizeJob):
        require_executorch("--optimize executorch:int8")
        steps = "torch.export, prepare_pt2e(XNNPACKQuantizer, symmetric per-channel), calibration, convert_pt2e, torch.export"
        return [(f"{steps}, {LOWERING}", lambda path: self._quantize(job, path))]

    def _quantize(self, job: OptimizeJob, path: Path) -> Artifact:
        import torch

        with native_stderr_silenced():  # torchao reports on fd 2 the optional CUDA kernels it cannot load here
            from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import XNNPACKQuantizer, get_symmetric_quantization_config
            from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

        source = job.source
        specs = source.signature.inputs
        # the FP32 .pte's bounds and fixed dims, with the inputs in the order the source's convention takes them
        exported = {spec.name: spec for spec in job.base.inputs}
        inputs = tuple(exported[spec.name] for spec in specs)
        shapes = bounded_dynamic_shapes(source.convention, inputs, job.base.dim_bounds)
        args, kwargs = source.convention.arguments(to_tensors(specs, job.feed))
        captured = torch.export.export(source.native, args, kwargs, dynamic_shapes=shapes, strict=False).module()
        prepared = prepare_pt2e(captured, XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True)))
        with torch.no_grad():
            for feed in job.calibration:
                source.convention(prepared, to_tensors(specs, feed))
        program = torch.export.export(convert_pt2e(prepared), args, kwargs, dynamic_shapes=shapes, strict=False)
        artifact = Artifact(format=self.format, path=path, files=[path], inputs=inputs, dim_bounds=dict(job.base.dim_bounds))
        delegation, planned = lower(program, path)
        artifact.details.append(delegation)
        return in_call_order(artifact, program, source.convention, planned)
