"""ONNX from PyTorch: the torch.export-based exporter first, the TorchScript-based one as a recorded fallback.

The ONNX file helpers every layer shares (external data, ``save_onnx``, ``onnx_artifact``) are in convert/backends/onnx.py.
"""

from __future__ import annotations

from pathlib import Path

from convert.artifacts import Artifact
from convert.backends.onnx import onnx_artifact, outputs_apart
from convert.backends.torch import TracedProgram
from convert.exporters.base import Exporter, ExportJob
from convert.exporters.torch_common import dynamic_axes, dynamic_shapes, example_arguments, export_program, exportable_module, record_bounds


class TorchToOnnx(Exporter):
    def strategies(self, job: ExportJob):
        converted = "TS2EPConverter, then " if job.source.is_scripted else ""  # see torch_common.exportable_module
        return [
            (f"{converted}torch.onnx.export(dynamo=True)", lambda path: self._noted(job, self._dynamo(job, path))),
            (
                f"{converted}torch.export.export, its default decompositions, then torch.onnx.export",
                lambda path: self._noted(job, self._decomposed(job, path)),
            ),
            ("torch.onnx.export(dynamo=False)", lambda path: self._noted(job, self._torchscript(job, path))),
        ]

    def traced(self, job: ExportJob, strategy: str):
        """The program torch.onnx translated (its nodes name the graph's values), made again the strategy's way."""
        import torch

        from convert.backends.torch import TracedProgram

        index = [name for name, _ in self.strategies(job)].index(strategy)
        if index == 0:
            args, kwargs = example_arguments(job)
            module, dynamic = exportable_module(job), dynamic_shapes(job)
            made = torch.onnx.export(module, args, kwargs=kwargs, dynamo=True, dynamic_shapes=dynamic, optimize=False, verbose=False)
        elif index == 1:
            made = torch.onnx.export(export_program(job)[0].run_decompositions(), dynamo=True, optimize=False, verbose=False)
        else:  # the TorchScript-based exporter names values after nothing the source has
            return None
        return TracedProgram(job.source, made.exported_program)

    def _names(self, job: ExportJob) -> dict:
        inputs = [s.name for s in job.source.signature.inputs]
        renamed = outputs_apart(job.source.signature.outputs, inputs)
        return {"input_names": inputs, "output_names": [renamed.get(name, name) for name in job.source.signature.outputs]}

    def _noted(self, job: ExportJob, artifact: Artifact) -> Artifact:
        """The artifact, with a note of each output the graph names apart from an input."""
        for name, new in outputs_apart(job.source.signature.outputs, [s.name for s in job.source.signature.inputs]).items():
            artifact.notes.append(
                f"the output '{name}' is '{new}' in the graph, apart from the input '{name}', which keeps its name "
                f"(ONNX names inputs and outputs alike; Optimum's convention); validation compares it with the source's '{name}'"
            )
        return artifact

    def _dynamo(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        args, kwargs = example_arguments(job)
        program = torch.onnx.export(
            exportable_module(job),
            args,
            kwargs=kwargs,
            dynamo=True,
            dynamic_shapes=dynamic_shapes(job),
            opset_version=job.opset,
            optimize=True,
            **self._names(job),
        )
        program.save(str(path), external_data=None)  # None: external data only past the 2 GB limit
        self.captured = TracedProgram(job.source, program.exported_program)  # it shares the source's weights
        _dims_named_after_specs(path, job)
        # torch.onnx applies torch.export's suggested fixes on its own (a bound on a dim): its program tells which
        return record_bounds(onnx_artifact(path, job.opset), program.exported_program, job)

    def _decomposed(self, job: ExportJob, path: Path) -> Artifact:
        """torch.onnx's own decomposition of a re-exported program can fail where torch's default table does not
        (T5's attention from a .pt2: a view of a transposed tensor, "Cannot view a tensor with shape [s43, s53, 4, 8]
        and strides (32*s53, 8, 8*s53, 1)"): the program is decomposed first, and torch.onnx exports that."""
        import torch

        program, bounded = export_program(job)
        onnx_program = torch.onnx.export(
            program.run_decompositions(), dynamo=True, opset_version=job.opset, optimize=True, **self._names(job)
        )
        onnx_program.save(str(path), external_data=None)
        self.captured = TracedProgram(job.source, onnx_program.exported_program)
        _dims_named_after_specs(path, job)
        return record_bounds(onnx_artifact(path, job.opset), program, job, bounded)

    def _torchscript(self, job: ExportJob, path: Path) -> Artifact:
        import torch

        args, kwargs = example_arguments(job)
        torch.onnx.export(
            job.source.native,
            args,
            str(path),
            kwargs=kwargs or None,
            dynamo=False,
            dynamic_axes=dynamic_axes(job) or None,
            do_constant_folding=True,
            **({"opset_version": job.opset} if job.opset else {}),
            **self._names(job),
        )
        _dims_named_after_specs(path, job)
        return onnx_artifact(path, job.opset)


def _dims_named_after_specs(path: Path, job: ExportJob) -> None:
    """The exported graph's dims under the specs' names where it named them after itself (torch.export's s53)."""
    import onnx

    from convert.backends.onnx import name_dims_after_specs

    model = onnx.load(str(path), load_external_data=False)
    if name_dims_after_specs(model, job.source.signature.inputs):
        onnx.save(model, str(path))
