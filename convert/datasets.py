"""The user's own samples, for validation (``--data``) and calibration (``--calibration-data``).

Four forms: a folder of ``.npz`` files (one feed each: a sample or a batch, arrays by input name), one ``.npz`` with a
leading sample axis, a Hugging Face ``datasets`` folder written by ``save_to_disk`` (columns mapped to inputs), and an
image folder (``class/xxx.png``) with a preprocessing spec. A dataset is streamed: only the chosen samples are read,
rows of a large ``.npz`` member are read one at a time from the archive, and Arrow tables stay memory-mapped, so a
dataset larger than memory is never loaded whole. Labels (an array or column named ``label`` / ``labels``, another
column with ``--columns label=NAME``, or the image folder's classes) come with each sample.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from convert.archives import check_npz, read_npy_header
from convert.errors import ConvertError

LABEL_KEY = "label"  # the --columns key that names the labels' column
LABEL_NAMES = ("label", "labels")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
DATA_HINT = (
    "Give a folder of .npz files (arrays by input name, one feed each), one .npz whose arrays have a leading sample axis, "
    "a Hugging Face datasets folder written by save_to_disk (--columns INPUT=COLUMN maps columns to inputs), or an image "
    "folder CLASS/IMAGE.png (--preprocess gives size, mean, std and layout)."
)
# an .npz whose members declare more than they can hold (convert/archives.py) is refused before any is read
ARCHIVE_HINT = "Refused before reading it: save the arrays again with numpy.savez, or check where the file came from."


@dataclass
class Sample:
    """One feed of the model, its labels (None where the data has none) and its index in the dataset."""

    index: int
    feed: dict[str, np.ndarray]
    label: np.ndarray | None = None


@dataclass(frozen=True)
class ImagePreprocess:
    """How an image file becomes an input: resized to ``size`` (H, W), scaled to 0..1, normalized per channel, laid out."""

    size: tuple[int, int] | None = None
    mean: tuple[float, ...] = (0.0,)
    std: tuple[float, ...] = (1.0,)
    layout: str | None = None  # NCHW or NHWC; default: where the input spec has its 3 (or 1) channels

    def describe(self) -> str:
        size = f"{self.size[0]}x{self.size[1]}" if self.size else "?"
        return f"size={size};mean={','.join(map(str, self.mean))};std={','.join(map(str, self.std))};layout={self.layout}"


def parse_preprocess(text: str | None) -> ImagePreprocess | None:
    """``size=224x224;mean=0.485,0.456,0.406;std=0.229,0.224,0.225;layout=NCHW`` (every key optional)."""
    if not text:
        return None
    values: dict = {}
    for item in filter(None, re.split(r"[;\s]+", text.strip())):
        key, _, raw = item.partition("=")
        try:
            if key == "size":
                height, _, width = raw.lower().partition("x")
                values["size"] = (int(height), int(width or height))
                if min(values["size"]) < 1:
                    raise ValueError
            elif key in ("mean", "std"):
                values[key] = tuple(float(v) for v in raw.split(","))
                if key == "std" and not all(v > 0 for v in values[key]):
                    raise ValueError
            elif key == "layout" and raw.upper() in ("NCHW", "NHWC"):
                values["layout"] = raw.upper()
            else:
                raise ValueError
        except ValueError:
            raise ConvertError(
                f"cannot read the preprocessing spec {text!r} (at {item!r})",
                "Write it as size=224x224;mean=0.485,0.456,0.406;std=0.229,0.224,0.225;layout=NCHW (every key optional; "
                "size and layout default to the input spec's).",
            ) from None
    return ImagePreprocess(**values)


def parse_columns(texts: tuple[str, ...]) -> dict[str, str]:
    """``input_ids=tokens`` (repeatable, or comma-separated): model input (or ``label``) → column or array name."""
    mapping: dict[str, str] = {}
    for text in texts:
        for item in filter(None, text.split(",")):
            name, sep, column = (part.strip() for part in item.partition("="))
            if not sep or not name or not column:
                raise ConvertError(
                    f"cannot read the column mapping {item!r}",
                    "Write it as INPUT=COLUMN, e.g. --columns input_ids=tokens,attention_mask=mask,label=target.",
                )
            mapping[name] = column
    return mapping


@dataclass
class Dataset:
    """A dataset on disk: its form, its size, and a reader of chosen samples that never loads it whole."""

    path: Path
    kind: str  # npz-folder, npz, hf-datasets, image-folder
    size: int
    specs: tuple
    columns: dict[str, str] = field(default_factory=dict)
    labelled: bool = False
    detail: str = ""  # e.g. the classes of an image folder, the columns used

    def read(self, indices: list[int]) -> Iterator[Sample]:
        raise NotImplementedError

    def column(self, name: str) -> str:
        return self.columns.get(name, name)

    def checked(self, sample: Sample) -> Sample:
        """A sample whose arrays fit the input specs (dtype, rank, fixed sizes), else a clear error naming it."""
        from convert.sources.signature import export_sizes_from_arrays

        try:
            export_sizes_from_arrays(self.specs, sample.feed)
        except ConvertError as exc:
            raise ConvertError(
                f"sample {sample.index} of {self.path} does not fit the model: {exc.problem.replace('example input', 'input')}", DATA_HINT
            ) from None
        return sample


def open_dataset(path: Path, specs: tuple, columns: dict[str, str] | None = None, preprocess: ImagePreprocess | None = None) -> Dataset:
    """The dataset at ``path`` in whichever of the four forms it is (told from its files, never from its name)."""
    columns = columns or {}
    if path.is_file():
        if path.suffix != ".npz":
            raise ConvertError(f"the data {path} is neither an .npz nor a folder", DATA_HINT)
        return _NpzRows.open(path, specs, columns)
    if not path.is_dir():
        raise ConvertError(f"the data {path} does not exist", "Check the path given to --data or --calibration-data.")
    if (path / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in path.iterdir() if p.is_dir())
        raise ConvertError(
            f"{path} holds a DatasetDict with the splits {', '.join(splits)}, and one split is needed",
            f"Point the option at one split's folder, e.g. {path / (splits[0] if splits else 'validation')}.",
        )
    if (path / "state.json").is_file() and (path / "dataset_info.json").is_file():
        return _HuggingFaceRows.open(path, specs, columns)
    files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".npz", ".npy"))
    if files:
        return _NpzFiles.open(path, files, specs, columns)
    classes = sorted(p for p in path.iterdir() if p.is_dir() and any(f.suffix.lower() in IMAGE_SUFFIXES for f in p.iterdir()))
    if classes:
        return _ImageFolder.open(path, classes, specs, preprocess or ImagePreprocess())
    raise ConvertError(f"{path} holds no .npz files, Hugging Face dataset or class folders of images", DATA_HINT)


def chosen_indices(size: int, count: int | None, seed: int) -> list[int]:
    """Every index, or ``count`` of them chosen with ``seed`` (sorted: a stream reads them in one pass)."""
    if count is None or count >= size:
        return list(range(size))
    return sorted(np.random.default_rng(seed).choice(size, size=count, replace=False).tolist())


def _label_key(names, columns: dict[str, str]) -> str | None:
    if LABEL_KEY in columns:
        return columns[LABEL_KEY] if columns[LABEL_KEY] in names else None
    return next((name for name in LABEL_NAMES if name in names), None)


def _require_label(columns: dict[str, str], labelled: bool, where: Path) -> None:
    """--columns label=NAME names a column the data must have."""
    if LABEL_KEY in columns and not labelled:
        raise ConvertError(f"{where} has no column or array {columns[LABEL_KEY]} for the labels", "Check --columns label=NAME.")


def _labels(value, where: str) -> np.ndarray:
    labels = np.asarray(value)
    if not np.issubdtype(labels.dtype, np.integer):
        raise ConvertError(f"the labels of {where} are {labels.dtype}, not class or token ids", "Store labels as integers.")
    return labels.astype(np.int64)


class _NpzFiles(Dataset):
    """A folder of .npz feeds (or of .npy arrays, for a model with one input)."""

    files: list[Path]

    @classmethod
    def open(cls, path: Path, files: list[Path], specs, columns) -> _NpzFiles:
        dataset = cls(path, "npz-folder", len(files), specs, columns)
        dataset.files = files
        if files[0].suffix == ".npy" and len(specs) != 1:
            raise ConvertError(f"{files[0]} is one array, and the model takes {len(specs)} inputs", DATA_HINT)
        if files[0].suffix == ".npz":
            check_npz(files[0], next_step=ARCHIVE_HINT)
            try:
                with np.load(files[0], allow_pickle=False) as first:
                    dataset.labelled = _label_key(first.files, columns) is not None
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise ConvertError(f"cannot read {files[0]} as arrays ({exc})", DATA_HINT) from exc
            _require_label(columns, dataset.labelled, files[0])
        return dataset

    def read(self, indices: list[int]) -> Iterator[Sample]:
        for index in indices:
            file = self.files[index]
            # NumPy allocates the shape a header declares before it reads: each file is checked against its size first
            if file.suffix == ".npy":
                _check_npy(file)
            else:
                check_npz(file, next_step=ARCHIVE_HINT)
            try:
                if file.suffix == ".npy":
                    yield self.checked(Sample(index, {self.specs[0].name: np.load(file, allow_pickle=False)}))
                    continue
                with np.load(file, allow_pickle=False) as arrays:
                    label = _label_key(arrays.files, self.columns)
                    missing = [s.name for s in self.specs if self.column(s.name) not in arrays.files]
                    if missing:
                        raise ConvertError(
                            f"{file} has no array for the input {missing[0]} (it has {', '.join(arrays.files)})",
                            "Name each array as its input, or map them with --columns INPUT=ARRAY.",
                        )
                    feed = {s.name: arrays[self.column(s.name)] for s in self.specs}
                    labels = _labels(arrays[label], file.name) if label else None
                    labels = labels[None] if labels is not None and not labels.ndim else labels
            except (ValueError, OSError, zipfile.BadZipFile) as exc:
                raise ConvertError(f"cannot read {file} as arrays ({exc})", DATA_HINT) from exc
            yield self.checked(Sample(index, feed, labels))


class _NpzRows(Dataset):
    """One .npz whose arrays share a leading sample axis, read a row at a time from the archive (never whole).

    An array of the input's rank gives each sample a batch of one (row i as [1, ...]); an array of one more dim than
    the input gives row i as it is."""

    members: dict[str, str]  # input (or label) → member name in the archive

    @classmethod
    def open(cls, path: Path, specs, columns) -> _NpzRows:
        check_npz(path, next_step=ARCHIVE_HINT)  # sizes, ratios and headers, before any member is read
        try:
            with zipfile.ZipFile(path) as archive:
                names = [n[: -len(".npy")] for n in archive.namelist() if n.endswith(".npy")]
                headers = {name: _npy_header(archive, f"{name}.npy") for name in names}
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise ConvertError(f"cannot read {path} as an .npz of arrays ({exc})", DATA_HINT) from exc
        members = {}
        for spec in specs:
            name = columns.get(spec.name, spec.name)
            if name not in headers:
                raise ConvertError(
                    f"{path} has no array for the input {spec.name} (it has {', '.join(names) or 'none'})",
                    "Name each array as its input, or map them with --columns INPUT=ARRAY.",
                )
            members[spec.name] = name
        label = _label_key(names, columns)
        _require_label(columns, bool(label), path)
        if label:
            members[LABEL_KEY] = label
        counts = {name: headers[member][0][0] if headers[member][0] else 0 for name, member in members.items()}
        if len(set(counts.values())) != 1:
            raise ConvertError(
                f"the arrays of {path} have different numbers of samples ({', '.join(f'{n}: {c}' for n, c in counts.items())})",
                "Give every array the same leading sample axis.",
            )
        dataset = cls(path, "npz", next(iter(counts.values())), specs, columns, labelled=bool(label))
        dataset.members = members
        return dataset

    def read(self, indices: list[int]) -> Iterator[Sample]:
        ranks = {spec.name: len(spec.dims) for spec in self.specs}
        with zipfile.ZipFile(self.path) as archive:
            streams = {name: _RowStream(archive, f"{member}.npy") for name, member in self.members.items()}
            for index in indices:
                rows = {name: stream.row(index) for name, stream in streams.items()}
                batched = any(rows[n].ndim < ranks[n] for n in ranks)  # rows of the input's rank less one: a batch of one
                feed = {n: row[None] if row.ndim < ranks[n] else row for n, row in rows.items() if n != LABEL_KEY}
                label = rows.get(LABEL_KEY)
                if label is not None:
                    label = _labels(label[None] if batched or not label.ndim else label, self.path.name)
                yield self.checked(Sample(index, feed, label))


def _npy_header(archive: zipfile.ZipFile, member: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    with archive.open(member) as stream:
        return _read_header(stream)


def _read_header(stream) -> tuple[tuple[int, ...], bool, np.dtype]:
    """An .npy stream's (shape, fortran_order, dtype), the stream left at the first value."""
    return read_npy_header(stream)


def _check_npy(path: Path) -> None:
    """Refuse an .npy file whose header declares more values than the file holds."""
    try:
        with open(path, "rb") as stream:
            shape, _, dtype = read_npy_header(stream)
            needed = int(np.prod(shape, dtype=object)) * dtype.itemsize + stream.tell()
    except (ValueError, OSError, EOFError) as exc:
        raise ConvertError(f"cannot read {path} as an array ({exc})", DATA_HINT) from exc
    if dtype.hasobject:
        raise ConvertError(f"{path} holds Python objects: a pickle, which is never loaded", "Save numeric arrays with numpy.save.")
    if needed > path.stat().st_size:
        raise ConvertError(
            f"{path} declares an array of shape {tuple(shape)} of {dtype} ({needed:,} bytes) in a file of "
            f"{path.stat().st_size:,} bytes: the file is truncated, corrupt or crafted",
            "Save the array again with numpy.save.",
        )


class _RowStream:
    """Rows of one array in an .npz, read forward at increasing indices: memory holds one row at a time."""

    def __init__(self, archive: zipfile.ZipFile, member: str):
        self.stream = archive.open(member)
        shape, fortran, self.dtype = _read_header(self.stream)
        if fortran or self.dtype.hasobject:
            raise ConvertError(f"{member} is stored in Fortran order or holds objects", "Save C-ordered numeric arrays with numpy.savez.")
        self.row_shape = shape[1:]
        self.row_bytes = int(np.prod(self.row_shape, dtype=np.int64)) * self.dtype.itemsize
        self.next = 0

    def row(self, index: int) -> np.ndarray:
        try:
            skip = (index - self.next) * self.row_bytes
            while skip > 0:  # read and dropped in bounded pieces
                piece = self.stream.read(min(skip, 1 << 24))
                if not piece:
                    break
                skip -= len(piece)
            data = self.stream.read(self.row_bytes)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ConvertError(f"cannot read row {index} of {self.stream.name} ({exc})", DATA_HINT) from exc
        if skip > 0 or len(data) != self.row_bytes:
            raise ConvertError(f"{self.stream.name} ends before its row {index}: the archive is truncated", DATA_HINT)
        self.next = index + 1
        return np.frombuffer(data, self.dtype).reshape(self.row_shape).copy()


class _HuggingFaceRows(Dataset):
    """A ``datasets`` folder from ``save_to_disk``: Arrow files memory-mapped, rows read by index."""

    table: object

    @classmethod
    def open(cls, path: Path, specs, columns) -> _HuggingFaceRows:
        try:
            import datasets
        except ImportError:
            raise ConvertError(
                f"{path} is a Hugging Face datasets folder, and the datasets package is not installed",
                "pip install 'model-convert[data]'",
            ) from None
        try:
            table = datasets.load_from_disk(str(path))
        except Exception as exc:  # the library's own errors for a folder it cannot read (KeyError, FileNotFoundError...)
            raise ConvertError(f"cannot read {path} as a datasets folder ({type(exc).__name__}: {exc})", DATA_HINT) from exc
        names = table.column_names
        missing = [s.name for s in specs if columns.get(s.name, s.name) not in names]
        if missing:
            raise ConvertError(
                f"the dataset {path} has no column for the input {missing[0]} (its columns: {', '.join(names)})",
                f"Map columns to inputs with --columns, e.g. --columns {missing[0]}={names[0]}.",
            )
        label = _label_key(names, columns)
        _require_label(columns, bool(label), path)
        used = {s.name: columns.get(s.name, s.name) for s in specs} | ({LABEL_KEY: label} if label else {})
        dataset = cls(path, "hf-datasets", table.num_rows, specs, columns, labelled=bool(label))
        dataset.detail = ", ".join(f"{name}←{column}" for name, column in used.items())
        dataset.table = table.select_columns(list(dict.fromkeys(used.values())))
        return dataset

    def read(self, indices: list[int]) -> Iterator[Sample]:
        label = _label_key(self.table.column_names, self.columns)
        for index in indices:
            row = self.table[index]
            feed = {}
            for spec in self.specs:
                try:
                    value = np.asarray(row[self.column(spec.name)])
                except ValueError as exc:  # a ragged nested column
                    raise ConvertError(f"row {index} of {self.path}: column {self.column(spec.name)} is ragged ({exc})", DATA_HINT) from exc
                if value.dtype.kind not in "biuf" or not np.can_cast(value.dtype, spec.dtype, "same_kind"):
                    raise ConvertError(
                        f"row {index} of {self.path}: column {self.column(spec.name)} holds {value.dtype}, and the input "
                        f"{spec.name} takes {spec.dtype}",
                        "Map the input to a numeric column with --columns INPUT=COLUMN.",
                    )
                batched = value.ndim == len(spec.dims) - 1  # a row is one sample: given a batch axis of one
                feed[spec.name] = value.astype(spec.dtype)[None] if batched else value.astype(spec.dtype)
            labels = None
            if label:
                labels = _labels(row[label], f"row {index} of {self.path.name}")
                labels = labels[None] if batched or not labels.ndim else labels
            yield self.checked(Sample(index, feed, labels))


class _ImageFolder(Dataset):
    """Images in one folder per class (classes sorted by name, as torchvision's ImageFolder numbers them)."""

    images: list[tuple[Path, int]]
    preprocess: ImagePreprocess

    @classmethod
    def open(cls, path: Path, classes: list[Path], specs, preprocess: ImagePreprocess) -> _ImageFolder:
        if len(specs) != 1 or len(specs[0].dims) != 4:
            raise ConvertError(
                f"{path} is an image folder, and images feed a model with one 4-d image input (it takes {', '.join(map(str, specs))})",
                "Give the data as .npz files or a datasets folder instead.",
            )
        spec = specs[0]
        layout = preprocess.layout or ("NHWC" if spec.dims[-1] in (1, 3) and spec.dims[1] not in (1, 3) else "NCHW")
        channels = spec.dims[1] if layout == "NCHW" else spec.dims[-1]
        if channels not in (1, 3) or not np.issubdtype(np.dtype(spec.dtype), np.floating):
            raise ConvertError(
                f"the input spec {spec} is not a float image of 1 or 3 channels in {layout} layout",
                'Give the layout with --preprocess "layout=NHWC" (or NCHW), or the data as .npz files.',
            )
        for name, values in (("mean", preprocess.mean), ("std", preprocess.std)):
            if len(values) not in (1, channels):
                raise ConvertError(
                    f"--preprocess gives {len(values)} {name} values for an image of {channels} channels", f"Give 1 or {channels}."
                )
        spatial = spec.dims[2:] if layout == "NCHW" else spec.dims[1:3]
        size = preprocess.size or (tuple(spatial) if all(isinstance(d, int) for d in spatial) else None)
        if size is None:
            raise ConvertError(
                f"the image size is not fixed by the input spec {spec}, so images cannot be resized to it",
                'Give the size: --preprocess "size=224x224".',
            )
        dataset = cls(path, "image-folder", 0, specs, {}, labelled=True)
        dataset.preprocess = ImagePreprocess(size, preprocess.mean, preprocess.std, layout)
        dataset.images = [
            (image, label)
            for label, folder in enumerate(classes)
            for image in sorted(folder.iterdir())
            if image.suffix.lower() in IMAGE_SUFFIXES
        ]
        dataset.size = len(dataset.images)
        dataset.detail = f"{len(classes)} classes ({', '.join(c.name for c in classes[:8])}{', ...' * (len(classes) > 8)}); {dataset.preprocess.describe()}"
        return dataset

    def read(self, indices: list[int]) -> Iterator[Sample]:
        try:
            from PIL import Image
        except ImportError:
            raise ConvertError(
                "reading an image folder needs Pillow, which is not installed", "pip install 'model-convert[data]'"
            ) from None
        spec, prep = self.specs[0], self.preprocess
        channels = spec.dims[1] if prep.layout == "NCHW" else spec.dims[-1]
        for index in indices:
            file, label = self.images[index]
            try:
                with Image.open(file) as image:
                    image = image.convert("L" if channels == 1 else "RGB").resize((prep.size[1], prep.size[0]), Image.BILINEAR)
                    pixels = np.asarray(image, dtype=np.float32) / 255.0
            except OSError as exc:
                raise ConvertError(f"cannot read the image {file} ({exc})", "Remove or replace the file.") from exc
            pixels = pixels.reshape(*prep.size, -1)
            pixels = (pixels - np.asarray(prep.mean, np.float32)) / np.asarray(prep.std, np.float32)
            array = (pixels.transpose(2, 0, 1) if prep.layout == "NCHW" else pixels)[None]
            yield self.checked(Sample(index, {spec.name: array.astype(spec.dtype)}, np.asarray([label], np.int64)))
