"""SourceModel: what every framework adapter gives the pipeline."""

from __future__ import annotations

import abc
import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from convert.specs import SourceSignature


@dataclass
class SourceInfo:
    framework: str
    kind: str  # how it was given: "object", "pt2", "torchscript", "pickled-module", "factory"
    path: str | None = None
    sha256: str | None = None
    description: str = ""
    task: str | None = None  # a Hugging Face task, for a transformers model
    task_reason: str = ""  # how the task was chosen


class SourceModel(abc.ABC):
    """A loaded model that can run reference inference on named NumPy arrays."""

    info: SourceInfo
    signature: SourceSignature
    export_sizes: dict[str, int]  # sizes of symbolic dims in the example inputs (the export shape), if known
    example_feed: dict[str, np.ndarray] | None = None  # the user's example inputs, by input name
    dim_ranges: dict[str, tuple[int, int | None]] = {}  # sizes a symbol may take (inclusive; None: no upper bound)
    generation: Any = None  # a decoder's CacheLayout: its artifacts are also checked over greedy generation

    @abc.abstractmethod
    def run(self, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Reference outputs by name, as NumPy arrays, computed on the CPU."""

    def generation_inputs(self, seed: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """A decoder's generation check: the prompts it starts from, and the inputs every step takes as they are."""
        from convert.validators.generation import make_prompts

        return make_prompts(self.generation, seed), {}

    def with_outputs(self, names: tuple[str, ...]) -> SourceModel:
        """Record the output names, learned from the first reference run."""
        self.signature = SourceSignature(inputs=self.signature.inputs, outputs=names)
        return self

    def pinned_threads(self, threads: int) -> contextlib.AbstractContextManager[bool]:
        """Run the source with this many intra-op threads where its framework allows it after start-up;
        the context gives whether it did (TensorFlow and XLA fix their thread pools when they start)."""
        return contextlib.nullcontext(False)

    @property
    def native(self) -> Any:
        """The framework object the exporters work on."""
        raise NotImplementedError
