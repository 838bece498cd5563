"""A PyTorch module as a source model: what every PyTorch-based source gives the pipeline (a module, a .pt2's program,
a TorchScript archive, a transformers, sentence-transformers or diffusers model).

The technology it runs on (tensors to and from NumPy, the call convention, naming a model's outputs) is in
convert/backends/torch.py, which exporters and runtimes share; this class is the sources' own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from convert.backends.huggingface import normalized_range
from convert.backends.torch import CallConvention, flatten_outputs, require_torch, to_numpy, to_tensors
from convert.sources.base import SourceInfo, SourceModel
from convert.specs import InputSpec, SourceSignature


class TorchSource(SourceModel):
    """A PyTorch module (or a .pt2's program, as a module) run on the CPU, its inputs passed by ``convention``."""

    def __init__(
        self,
        module: Any,
        info: SourceInfo,
        inputs: tuple[InputSpec, ...],
        export_sizes: dict[str, int],
        dim_ranges: dict[str, tuple[int, int | None]] | None = None,
        convention: CallConvention | None = None,
    ):
        self.module = module
        self.convention = convention or CallConvention()
        self.info = info
        self.export_sizes = export_sizes
        self.dim_ranges = dim_ranges or {}
        self.signature = SourceSignature(inputs=inputs)
        self.precision = _precision_of(module)

    @property
    def native(self) -> Any:
        return self.module

    def generation_inputs(self, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        own = getattr(self.module, "generation_inputs", None)  # an encoder-decoder's: its encoder's outputs
        return own(seed) if own is not None else super().generation_inputs(seed)

    @property
    def is_scripted(self) -> bool:
        return isinstance(self.module, require_torch().jit.ScriptModule)

    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        torch = require_torch()
        with torch.inference_mode():
            outputs = self.convention(self.module, to_tensors(self.signature.inputs, feed))
        return {name: to_numpy(t) for name, t in flatten_outputs(outputs).items()}

    @contextlib.contextmanager
    def pinned_threads(self, threads: int) -> Iterator[bool]:
        torch = require_torch()
        before = torch.get_num_threads()
        torch.set_num_threads(threads)
        try:
            yield True
        finally:
            torch.set_num_threads(before)


def image_domain(module: Any) -> tuple[float, float, str] | None:
    """The range of the images a module of a known image library is made for, read from its attributes (the libraries
    themselves are not imported: they need torchvision): a timm model's ``pretrained_cfg`` mean and std normalise 0..1
    images; an ultralytics model (its class from ``ultralytics.nn.tasks``) takes 0..1 images as they are. None for any
    other module: (low, high, where it comes from)."""
    config = getattr(module, "pretrained_cfg", None)
    if isinstance(config, Mapping) and "mean" in config and "std" in config:
        normalized = normalized_range(config["mean"], config["std"], 0.0, 1.0)
        if normalized is not None:
            low, high = normalized
            return (
                round(low, 6),
                round(high, 6),
                f"the model's pretrained_cfg (timm): 0..1 images normalised with mean {config['mean']} and std {config['std']}",
            )
    library = next((c for c in type(module).__mro__ if c.__module__.startswith("ultralytics.nn.tasks")), None)
    if library is not None:
        return 0.0, 1.0, f"an ultralytics {library.__name__}: it takes 0..1 images (pixels divided by 255)"
    return None


def _precision_of(module: Any) -> str:
    """What the module's floating weights compute in: bf16 or fp16 where its first floating parameter is so, else fp32."""
    parameters = getattr(module, "parameters", None)
    floating = next((p for p in parameters() if p.is_floating_point()), None) if callable(parameters) else None
    name = str(floating.dtype).removeprefix("torch.") if floating is not None else ""
    return {"bfloat16": "bf16", "float16": "fp16"}.get(name, "fp32")
