"""PyTorch runtimes for TorchScript and torch.export artifacts, on CPU and CUDA.

These load only artifacts this run wrote (both formats can carry code), never user files.
"""

from __future__ import annotations

import numpy as np

from convert.backends.torch import CallConvention, load_program, load_script, script_outputs, to_numpy, to_tensors
from convert.runtimes.base import InputMeta, Runner


class _TorchRunner(Runner):
    pins_threads = True
    _restore_threads: int | None = None
    convention = CallConvention()
    output_names: list[str] | None = None  # where a TorchScript archive names its flat outputs

    def _pin_threads(self) -> None:
        import torch

        if self.threads:
            self._restore_threads = torch.get_num_threads()
            torch.set_num_threads(self.threads)

    @classmethod
    def build_unavailable_reason(cls, device: str) -> str | None:
        import torch

        if device == "cuda" and not torch.cuda.is_available():
            return f"this torch build ({torch.__version__}) cannot use CUDA"
        return None

    def input_metadata(self) -> dict[str, InputMeta]:
        # a bfloat16 input is fed as float32 (NumPy has no bfloat16) and cast when it becomes a tensor
        return {
            s.name: InputMeta("float32" if s.dtype == "bfloat16" else s.dtype, tuple(d if isinstance(d, int) else None for d in s.dims))
            for s in self.artifact.inputs
        }

    def _infer(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        tensors = to_tensors(tuple(self.artifact.inputs), feed, self.device)
        with torch.inference_mode():
            outputs = self.convention(self.module, tensors)
        return {name: to_numpy(t) for name, t in script_outputs(outputs, self.output_names).items()}

    def deactivate(self) -> None:
        import torch

        self.module = None
        if self._restore_threads:
            torch.set_num_threads(self._restore_threads)


class TorchScriptRunner(_TorchRunner):
    def activate(self) -> None:
        self._pin_threads()
        self.module, self.output_names = load_script(self.path, self.device)
        self.module.eval()
        names = tuple(s.name for s in self.artifact.inputs)
        parameters = [a.name for a in self.module.forward.schema.arguments[1:]]
        if set(names) <= set(parameters) and list(names) != parameters[: len(names)]:
            self.convention = CallConvention(keywords=names)  # traced by keyword: inputs that skip some of the forward's parameters


class ExportedProgramRunner(_TorchRunner):
    def activate(self) -> None:
        self._pin_threads()
        program = load_program(self.path)
        self.module = program.module()
        self.convention = CallConvention.of_program(program)
        if self.device != "cpu":
            self.module.to(self.device)
