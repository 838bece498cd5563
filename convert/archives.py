"""Zip archives checked from their central directory before any loader reads a member.

A zip member declares its stored (compressed) and its uncompressed size; a reader allocates and inflates by the
latter. A small file can declare gigabytes (a decompression bomb: 3 MB of deflated zeros inflate to 3 GB), members
can overlap so that one stored block is inflated many times, and two members can share a name so that two readers
(Python's zipfile takes the last, the C reader torch uses may take another) read different bytes. Every archive a
loader opens (.pt2, TorchScript and torch.save zips, .keras, .npz) goes through ``check_archive`` first:

- its members sit where its directory says (no data before them that Python's reader skips and torch's does not);
- no member points outside the archive's folder (an absolute path, a '..' part, a symlink): a loader that extracts
  it would write or read there;
- at most ``max_members`` members; no two with the same name, compared without case (torch's reader looks names up
  without case), and no name that Python reads cut short at a NUL byte;
- each member's stored bytes lie inside the file, and no two members' stored bytes overlap;
- a stored (uncompressed) member declares as many bytes as it stores;
- a member larger than ``ratio_floor`` inflates at most ``max_ratio`` times its stored size (weights stored raw
  have 1x, JSON and code 3 to 20x; deflate cannot pass about 1032x, so a bomb sits far above);
- all members together inflate to at most ``max_ratio`` times the file's size (or ``total_floor``, for small files),
  and never past ``max_total``.

This module imports no framework (NumPy only inside ``check_npz``).
"""

from __future__ import annotations

import io
import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from convert.errors import ConvertError

MiB = 1 << 20
_LOCAL_HEADER = 30  # the fixed part of a member's local header, which its stored bytes follow


@dataclass(frozen=True)
class Limits:
    """What an archive may declare. ``MODEL`` for model files, ``DATA`` for the user's arrays."""

    max_ratio: int = 100  # a member may inflate to this many times its stored bytes...
    ratio_floor: int = MiB  # ...once it is larger than this (a small config of repeated keys may compress further)
    total_floor: int = 256 * MiB  # all members together: max_ratio x the file's size, or this much for a small file
    max_total: int = 1 << 40  # 1 TiB: never more, whatever the file's size
    max_members: int = 100_000


MODEL = Limits()
# Arrays of masks, padding and labels compress far better than weights (an all-ones mask deflates about 1000x): an
# .npz member up to 64 MiB may have any ratio, and the total stays bounded.
DATA = Limits(ratio_floor=64 * MiB)

DEFAULT_NEXT_STEP = "Refused before reading it: save the file again with the framework that wrote it, or check where it came from."


def _size(amount: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", MiB), ("KiB", 1 << 10)):
        if amount >= scale:
            return f"{amount / scale:.1f} {unit}"
    return f"{amount} bytes"


def check_archive(
    source: Path | bytes,
    what: str | None = None,
    limits: Limits = MODEL,
    next_step: str = DEFAULT_NEXT_STEP,
) -> list[zipfile.ZipInfo]:
    """The archive's members, once its central directory passes every check above (a ConvertError names the first
    that fails). ``source`` is a path or the bytes of an archive held in another (``what`` then names it)."""
    what = what or str(source)
    if isinstance(source, (bytes, bytearray)):
        size, handle = len(source), io.BytesIO(source)
    else:
        size, handle = os.path.getsize(source), None
    try:
        with zipfile.ZipFile(handle or source) as archive:
            infos = archive.infolist()
            shift = _shift(archive)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ConvertError(
            f"{what} looks like a zip archive but cannot be read ({exc})", "The file may be truncated or corrupt: export it again."
        ) from exc
    if shift:
        raise ConvertError(
            f"{what} places its members {shift:,} bytes away from where its directory says: Python's reader shifts them "
            "back, and a reader that does not (torch's C reader reads the offsets as declared) would read other bytes",
            next_step,
        )
    return check_members(infos, size, what, limits, next_step)


def _shift(archive: zipfile.ZipFile) -> int:
    """How far Python's zipfile moved the central directory from the offset the archive declares (data prepended to a
    self-extracting archive; torch's miniz reads the declared offset, so a shifted archive can show it another one)."""
    find = getattr(zipfile, "_EndRecData", None)
    if find is None or archive.fp is None:
        return 0
    archive.fp.seek(0)
    record = find(archive.fp)
    return archive.start_dir - record[zipfile._ECD_OFFSET] if record else 0


def check_members(
    infos: list[zipfile.ZipInfo], size: int, what: str, limits: Limits = MODEL, next_step: str = DEFAULT_NEXT_STEP
) -> list[zipfile.ZipInfo]:
    """``check_archive`` on members already listed from an archive of ``size`` bytes."""

    def refuse(problem: str) -> ConvertError:
        return ConvertError(f"{what} {problem}", next_step)

    if len(infos) > limits.max_members:
        raise refuse(f"has {len(infos):,} members, more than the {limits.max_members:,} a model or data archive needs")
    seen: dict[str, str] = {}
    declared = 0
    for info in infos:
        parts = info.filename.replace("\\", "/").split("/")
        is_link = stat.S_ISLNK(info.external_attr >> 16)
        if info.filename.startswith(("/", "\\")) or ".." in parts or (len(parts[0]) == 2 and parts[0][1] == ":") or is_link:
            raise ConvertError(
                f"{what} has an archive member that points outside it: {info.filename!r}" + (" (a symlink)" if is_link else ""),
                "Refused: a model archive never needs that. Re-export the model from its framework.",
            )
        if info.orig_filename != info.filename:
            raise refuse(f"has a member whose name holds a NUL byte ({info.orig_filename!r}): readers disagree on its name")
        key = info.filename.casefold()
        if key in seen:
            same = seen[key] == info.filename
            raise refuse(
                f"has two members named {info.filename!r}"
                + ("" if same else f" and {seen[key]!r} (names that differ only in case)")
                + ": readers disagree on which one they read"
            )
        seen[key] = info.filename
        if info.header_offset < 0 or info.header_offset + _LOCAL_HEADER + info.compress_size > size:
            raise refuse(
                f"has a member, {info.filename!r}, that declares {_size(info.compress_size)} stored at offset "
                f"{info.header_offset:,}, beyond the end of the file ({_size(size)})"
            )
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise refuse(
                f"has an uncompressed member, {info.filename!r}, that declares {_size(info.file_size)} but stores "
                f"{_size(info.compress_size)}"
            )
        if info.file_size > limits.ratio_floor and info.file_size > limits.max_ratio * info.compress_size:
            raise refuse(
                f"has a member, {info.filename!r}, that would inflate from {_size(info.compress_size)} to "
                f"{_size(info.file_size)} ({info.file_size / max(info.compress_size, 1):,.0f} times; at most "
                f"{limits.max_ratio} times is accepted above {_size(limits.ratio_floor)}): a decompression bomb, or a "
                "file packed in an unusual way"
            )
        declared += info.file_size
    ordered = sorted(infos, key=lambda info: info.header_offset)
    for info, following in zip(ordered, ordered[1:]):
        if info.header_offset + _LOCAL_HEADER + info.compress_size > following.header_offset:
            raise refuse(
                f"has members whose stored bytes overlap ({info.filename!r} and {following.filename!r}): one block "
                "would be inflated again and again"
            )
    bound = min(limits.max_total, max(limits.max_ratio * size, limits.total_floor))
    if declared > bound:
        raise refuse(
            f"would inflate from {_size(size)} to {_size(declared)} in all, more than the {_size(bound)} accepted for "
            f"a file of its size (at most {limits.max_ratio} times, {_size(limits.total_floor)} for a small file, "
            f"never more than {_size(limits.max_total)})"
        )
    return infos


def read_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
    """A checked member's bytes, read no further than it declares (zipfile stops there and checks its CRC)."""
    with archive.open(info) as stream:
        return stream.read(info.file_size)


def check_npz(path: Path, what: str | None = None, next_step: str = DEFAULT_NEXT_STEP) -> list[zipfile.ZipInfo]:
    """``check_archive`` with the ``DATA`` limits, and each array's header checked against its member: NumPy allocates
    the shape the header declares before it reads the data, so a 1 KiB member declaring (10**10, 8) would ask for
    320 GB."""
    import numpy as np

    what = what or str(path)
    if not zipfile.is_zipfile(path):
        raise ConvertError(f"cannot read {what} as an .npz of arrays (it is not a zip archive)", "Save the arrays with numpy.savez.")
    infos = check_archive(path, what, DATA, next_step)
    try:
        with zipfile.ZipFile(path) as archive:
            for info in infos:
                if not info.filename.endswith(".npy"):
                    continue
                with archive.open(info) as stream:
                    shape, _, dtype = read_npy_header(stream)
                    needed = int(np.prod(shape, dtype=object)) * dtype.itemsize + stream.tell()
                if dtype.hasobject:
                    raise ConvertError(
                        f"{what} has an array, {info.filename[: -len('.npy')]!r}, of Python objects: a pickle, which is never loaded",
                        "Save numeric arrays with numpy.savez.",
                    )
                if needed > info.file_size:
                    raise ConvertError(
                        f"{what} has an array, {info.filename[: -len('.npy')]!r}, whose header declares shape "
                        f"{tuple(shape)} of {dtype} ({_size(needed)}) in a member of {_size(info.file_size)}: the "
                        "file is truncated, corrupt or crafted",
                        "Save the arrays again with numpy.savez.",
                    )
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise ConvertError(f"cannot read {what} as an .npz of arrays ({exc})", "Save the arrays again with numpy.savez.") from exc
    return infos


def read_npy_header(stream: BinaryIO):
    """An .npy stream's (shape, fortran_order, dtype), the stream left at the first value."""
    import numpy as np

    version = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    return read(stream)
