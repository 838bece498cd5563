"""Artifact: one file (or folder) the pipeline produced, with what it is and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from convert.specs import InputSpec


@dataclass
class Artifact:
    format: str
    path: Path
    precision: str = "fp32"
    files: list[Path] = field(default_factory=list)  # every file that belongs to it (e.g. ONNX external data)
    exporter: str = ""
    strategy: str = ""
    sha256: str = ""
    size_bytes: int = 0
    inputs: tuple[InputSpec, ...] = ()  # what the artifact takes, in call order
    output_names: tuple[str, ...] = ()
    fixed_shape_reason: str = ""  # set when the artifact keeps none of the source's dynamic dims, and why
    # sizes a symbol may take (a TensorRT profile; a torch.export bound such as S <= 128); None: no upper bound
    dim_bounds: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the exporter found or changed on the way (the report keeps it)
    accuracy_control: dict | None = None  # an INT8 pass's report.AccuracyControl: what it kept in FP32 for a task budget

    def fixed_dims_mismatch(self, feed_shapes: dict[str, tuple[int, ...]]) -> str:
        """Why the artifact cannot take inputs of these shapes ("" when it can): a fixed dim, or a size out of bounds."""
        for spec in self.inputs:
            shape = feed_shapes.get(spec.name)
            if shape is None:
                continue
            for axis, (dim, size) in enumerate(zip(spec.dims, shape)):
                if isinstance(dim, int) and dim != size:
                    return f"the artifact fixes axis {axis} of '{spec.name}' at {dim}" + (
                        f" ({self.fixed_shape_reason})" if self.fixed_shape_reason else ""
                    )
                low, high = self.dim_bounds.get(dim, (size, size)) if isinstance(dim, str) else (size, size)
                if size < low or high is not None and size > high:
                    return (
                        f"the artifact takes {dim} from {low} to {'any size' if high is None else high} "
                        f"on axis {axis} of '{spec.name}', not {size}"
                    )
        return ""

    def relocated(self, folder: Path) -> Artifact:
        """The same artifact with its files under another folder (after the atomic move into place)."""
        moved = Artifact(**{**self.__dict__})
        moved.path = folder / self.path.name
        moved.files = [folder / f.name for f in self.files]
        return moved
