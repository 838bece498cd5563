"""ExecuTorch's runtime (its Python bindings) for .pte programs: the inputs fed as one flat list in the order the
program takes them (recorded on the artifact), the outputs named in the order it returns them.

A .pte holds a flatbuffer program, no Python code. The runtime's public API sets no thread count (its bindings'
threadpool reset is private and process-wide), so benchmarks do not pin this runtime's threads."""

from __future__ import annotations

import numpy as np

from convert.backends import native_stderr_silenced
from convert.backends.executorch import BACKEND, EXTRA
from convert.backends.torch import to_numpy
from convert.runtimes.base import FeedMismatch, InputMeta, Runner


class ExecuTorchRunner(Runner):
    cpu_only = "ExecuTorch's XNNPACK programs run on the CPU"

    @classmethod
    def build_unavailable_reason(cls, device: str) -> str | None:
        try:
            with native_stderr_silenced():  # its cpuinfo probing reports on fd 2 what this machine's /sys lacks
                from executorch.runtime import Runtime

                available = Runtime.get().backend_registry.is_available(BACKEND)
        except ImportError as exc:
            return f"the executorch runtime cannot be imported ({exc}): pip install 'model-convert[{EXTRA}]'"
        if not available:
            return f"this executorch build has no {BACKEND}, which runs the program's delegated operators"
        return None

    def activate(self) -> None:
        from executorch.runtime import Runtime

        with native_stderr_silenced():
            self.program = Runtime.get().load_program(self.path)  # the method needs its program alive
            self.method = self.program.load_method("forward")
        # a .pte names neither its inputs nor its outputs: one given to validate must at least take as many inputs, of
        # the same ranks, as the source, where the runtime's own error would only say 0x12
        meta = self.method.metadata
        ranks = [len(meta.input_tensor_meta(index).sizes()) for index in range(meta.num_inputs())]
        if ranks != [len(spec.dims) for spec in self.artifact.inputs]:
            raise FeedMismatch(f"the program takes {len(ranks)} inputs of ranks {ranks}, not {', '.join(map(str, self.artifact.inputs))}")

    def deactivate(self) -> None:
        self.method = self.program = None

    def input_metadata(self) -> dict[str, InputMeta]:
        return {s.name: InputMeta(s.dtype, tuple(d if isinstance(d, int) else None for d in s.dims)) for s in self.artifact.inputs}

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        outputs = self.method.execute([_tensor(torch, feed[s.name]) for s in self.artifact.inputs])
        if len(outputs) != len(self.artifact.output_names):  # a .pte given to validate that returns other outputs
            raise ValueError(f"the program returns {len(outputs)} outputs where the source returns {len(self.artifact.output_names)}")
        return {name: to_numpy(tensor) for name, tensor in zip(self.artifact.output_names, outputs, strict=True)}


def _tensor(torch, array: np.ndarray):
    """A C-contiguous tensor of the array. An empty one (a cache with no past yet) gets the strides torch and ExecuTorch
    compute, counting a 0 size as 1: numpy's are 0 there, and ExecuTorch aborts the process on strides it did not expect
    (tensor_ptr.cpp: "invalid strides for dim 0: 0 != 16")."""
    array = np.asarray(array, order="C")  # rank 0 kept (np.ascontiguousarray makes it rank 1)
    return torch.from_numpy(array) if array.size else torch.empty(array.shape, dtype=torch.from_numpy(array).dtype)
