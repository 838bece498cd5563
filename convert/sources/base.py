"""SourceModel: what every framework adapter gives the pipeline."""

from __future__ import annotations

import abc
import contextlib
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
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
    notes: list[str] = field(default_factory=list)  # what loading did that the user should know (the report's notes)


class SourceModel(abc.ABC):
    """A loaded model that can run reference inference on named NumPy arrays."""

    info: SourceInfo
    signature: SourceSignature
    export_sizes: dict[str, int]  # sizes of symbolic dims in the example inputs (the export shape), if known
    example_feed: dict[str, np.ndarray] | None = None  # the user's example inputs, by input name
    dim_ranges: dict[str, tuple[int, int | None]] = {}  # sizes a symbol may take (inclusive; None: no upper bound)
    generation: Any = None  # a decoder's CacheLayout: its artifacts are also checked over greedy generation
    # what its floating weights compute in (bf16, fp16: a Hugging Face folder loaded with --dtype or in its own dtype):
    # its exports hold that precision and are judged by that precision's tolerance
    precision: str = "fp32"

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


def example_arrays(example: Any, names: Sequence[str] | None, to_array: Callable[[Any], Any] = np.asarray) -> dict[str, np.ndarray] | None:
    """The user's example inputs as NumPy arrays by input name; None where none are given.

    ``example`` is a dict of arrays or tensors by input name, a tuple or list of them in call order, one alone, or the
    path of an .npz (read as --example-inputs is). Values in call order take the first of ``names`` (the model's input
    or parameter names, in order) where there are at least as many names as values, else ``input_0``, ``input_1``...
    ``to_array`` turns one value (a framework's tensor, or anything NumPy reads) into an array: each source passes its
    framework's conversion, so that this module imports no framework.
    """
    if example is None:
        return None
    if isinstance(example, (str, os.PathLike)):
        from convert.sources.request import load_example_inputs

        example = load_example_inputs(Path(example))
    if isinstance(example, Mapping):
        return {key: np.asarray(to_array(value)) for key, value in example.items()}
    values = example if isinstance(example, (tuple, list)) else (example,)
    named = names is not None and len(names) >= len(values)
    keys = list(names[: len(values)]) if named else [f"input_{index}" for index in range(len(values))]
    return {key: np.asarray(to_array(value)) for key, value in zip(keys, values)}
