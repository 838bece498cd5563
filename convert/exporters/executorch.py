"""ExecuTorch ``.pte`` from PyTorch: torch.export with the specs' dynamic dims, each bounded (ExecuTorch plans memory
at the bound: --shape-range, torch's own, else the default of convert/backends/executorch.py), lowered with the XNNPACK
partitioner. The report keeps the bounds and where they came from, and which operators XNNPACK took over."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.executorch import (
    DEFAULT_MAX_SIZE,
    LOWERING,
    default_bounds,
    in_call_order,
    lower,
    require_executorch,
)
from convert.backends.torch import TracedProgram
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import export_program, record_bounds


class TorchToExecuTorch(Exporter):
    def strategies(self, job: ExportJob):
        require_executorch("--to executorch")
        converted = "TS2EPConverter, then " if job.source.is_scripted else ""  # see torch_common.exportable_module
        return [(f"{converted}torch.export.export(strict=False), {LOWERING}", lambda path: self._export(job, path))]

    def _export(self, job: ExportJob, path: Path) -> Artifact:
        defaults = default_bounds(job.source.signature.inputs, job.feed, job.dim_ranges)
        bounded = replace(job, dim_ranges={**job.dim_ranges, **defaults})
        program, why = export_program(bounded)
        self.captured = TracedProgram(job.source, program)  # the chain's capture link (it shares the source's weights)
        taken = record_bounds(Artifact(format=self.format, path=path), program, bounded).dim_bounds  # the program's sizes
        kept = [symbol for symbol, (_, high) in defaults.items() if taken.get(symbol, (0, None))[1] == high]
        if kept:  # the defaults that torch did not narrow
            why += (
                f"; {', '.join(kept)} had no upper bound, which ExecuTorch's memory plan needs: bounded at "
                f"{DEFAULT_MAX_SIZE} or twice the export size plus one (--shape-range sets it)"
            )
        artifact = Artifact(format=self.format, path=path, files=[path])
        delegation, planned = lower(program, path)
        artifact.details.append(delegation)
        record_bounds(artifact, program, bounded, why)
        artifact.inputs = artifact.inputs or job.source.signature.inputs
        return in_call_order(artifact, program, job.source.convention, planned)
