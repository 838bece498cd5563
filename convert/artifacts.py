"""Artifact: one file (or folder) the pipeline produced, with what it is and where it came from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from convert.errors import ConvertError
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
    # what the pass or format found, each a report detail's JSON with its "kind" (convert/reports/details.py): an INT8
    # pass's accuracy_control (what it kept in FP32 for a task budget), an edge program's delegation (what a backend took over)
    details: list[dict] = field(default_factory=list)

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


def given_by_name(paths) -> dict[str, Path]:
    """Artifacts given to validate, by the name the report gives them: their file names, which must differ."""
    found = {Path(path).name: Path(path) for path in paths}
    if len(found) != len(paths):
        raise ConvertError("two of the artifacts have the same file name", "Validate them in separate runs, or rename one.")
    return found


def given_format(path: Path) -> str:
    """The format of an artifact given by path (``convert validate``, a policy's ``require.artifacts``): the format
    whose suffix its name has, else whose marker file its folder holds, else whose bytes it has (each format's spec)."""
    from convert.registry import REGISTRY, load_target

    if not path.exists():
        raise ConvertError(f"the artifact {path} does not exist", "Give the path of an artifact file or folder.")
    formats = REGISTRY.entries("format")
    suffix = path.suffix.lower()
    for spec in formats:
        if spec.given_refusal and suffix in spec.given_suffixes:
            raise ConvertError(f"{path} is {spec.title}, which is not taken: {spec.given_refusal[0]}", spec.given_refusal[1])
    if path.is_dir():
        found = next((spec.name for spec in formats if spec.given_folder_marker and (path / spec.given_folder_marker).is_file()), None)
    else:
        found = next((spec.name for spec in formats if suffix in spec.given_suffixes), None)
        found = found or next((spec.name for spec in formats if spec.given_detect and load_target(spec.given_detect)(path)), None)
    if found:
        return found
    suffixes = [s for spec in formats if not spec.given_refusal for s in spec.given_suffixes]
    folders = [f"a folder holding {spec.given_folder_marker} ({spec.name})" for spec in formats if spec.given_folder_marker]
    detected = [spec.title for spec in formats if spec.given_detect]
    raise ConvertError(
        f"cannot tell which format the artifact {path} is",
        f"Give a file ending in {', '.join(suffixes)}, {' or '.join(detected)}, or {', or '.join(folders)}.",
    )
