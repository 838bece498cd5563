"""Safe loading rules and atomic writes.

Everything the pipeline writes goes first to a private staging folder beside the output and is renamed
into place only when it is complete, so a crash or interruption leaves nothing at a final path.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from convert.archives import check_archive
from convert.errors import ConvertError

STAGING_PREFIX = ".convert-staging-"
LOCK_NAME = ".convert.lock"
FAILED_FOLDER = "failed"  # artifacts that failed validation: kept for inspection, never at a final path


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def named_files(paths: list[Path]) -> list[tuple[str, Path]]:
    """(name, file) for every file, folders walked; a name inside a folder is relative to that folder (as the digest of
    several files names each)."""
    found = []
    for path in paths:
        if path.is_dir():
            found += [(str(f.relative_to(path)), f) for f in sorted(path.rglob("*")) if f.is_file()]
        else:
            found.append((path.name, path))
    return sorted(found)


def sha256_files(paths: list[Path]) -> str:
    """One digest over several files or folders (a single file's digest is its plain sha256)."""
    if len(paths) == 1 and paths[0].is_file():
        return sha256_file(paths[0])
    return combine_digests([(name, sha256_file(path)) for name, path in named_files(paths)])


def combine_digests(named: list[tuple[str, str]]) -> str:
    """The digest of several files from (name, sha256) of each: what ``sha256_files`` gives for them."""
    digest = hashlib.sha256()
    for name, file_digest in sorted(named):
        digest.update(name.encode() + b"\0" + file_digest.encode())
    return digest.hexdigest()


def size_of(paths: list[Path]) -> int:
    return sum(path.stat().st_size for _, path in named_files(paths))


class Staging:
    """A private folder inside the output folder; ``publish`` renames finished files to their final paths.

    It holds an exclusive lock on the output folder until ``cleanup``: two runs on one folder cannot mix their files,
    the second is refused. ``finals`` that exist once the lock is held are refused too (unless ``force``), as another
    run may have published them since this one started."""

    def __init__(self, out_dir: Path, finals: list[Path] = (), force: bool = False):
        import fcntl

        self.out_dir = out_dir
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            self._lock = open(out_dir / LOCK_NAME, "a+")
        except OSError as exc:
            raise ConvertError(
                f"cannot write to the output folder {out_dir}: {exc.strerror or exc}",
                "Choose a writable folder with --out.",
            ) from exc
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # a lock on a file another run has just unlinked guards nothing: it must still be the file at the path
            held = os.fstat(self._lock.fileno()).st_ino == os.stat(out_dir / LOCK_NAME).st_ino
        except OSError:
            held = False
        if not held:
            self._lock.close()
            raise ConvertError(
                f"another convert run is writing to {out_dir}", "Wait for it to finish, or choose another folder with --out."
            )
        try:
            refuse_existing(finals, force)
        except ConvertError:
            self._release()
            raise
        for stale in out_dir.glob(f"{STAGING_PREFIX}*"):  # left by a run that was killed: no live run holds the lock
            shutil.rmtree(stale, ignore_errors=True)
        try:
            self.path = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir))
        except OSError as exc:
            self._release()
            raise ConvertError(
                f"cannot write to the output folder {out_dir}: {exc.strerror or exc}", "Choose a writable folder with --out."
            ) from exc

    def publish(self, staged: list[Path], into: Path | None = None, instead_of: Path | None = None) -> list[Path]:
        """Move staged files into the output folder (or the folder ``into``); each rename is atomic (same file system).
        Same-named files in ``instead_of`` (an earlier run's other outcome, replaced with --force) are removed."""
        finals = []
        folder = into or self.out_dir
        folder.mkdir(exist_ok=True)
        # In the order given: the caller puts the file that refers to the others last, so a reader never sees a model
        # without its data.
        for path in staged:
            final = folder / path.name
            stale = instead_of / path.name if instead_of is not None else None
            if stale is not None and (stale.exists() or stale.is_symlink()):
                os.replace(stale, self.path / f".stale-{path.name}")  # removed with the staging folder
            if final.is_dir() and not final.is_symlink():
                # os.replace cannot overwrite a non-empty folder: move the old one aside (it is removed with
                # the staging folder), then rename the new one into place.
                os.replace(final, self.path / f".replaced-{path.name}")
            os.replace(path, final)
            finals.append(final)
        return finals

    def cleanup(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        self._release()

    def _release(self) -> None:
        (self.out_dir / LOCK_NAME).unlink(missing_ok=True)  # unlinked while still held: no other run can slip in between
        self._lock.close()


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def no_space_error(exc: BaseException, folder: Path) -> ConvertError | None:
    """A clear error when ``exc`` (or an exception it was raised from) says the disk is full, else None."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
            return ConvertError(
                f"there is no room to write to {folder}: {exc.strerror or exc} (the disk is full, or a quota or "
                "file size limit is reached); nothing was left at a final path",
                "Free some space there, or choose another folder with --out.",
            )
        exc = exc.__cause__ or exc.__context__
    return None


def refuse_existing(finals: list[Path], force: bool) -> None:
    existing = [str(p) for p in finals if p.exists()]
    if existing and not force:
        raise ConvertError(
            f"the output already exists: {', '.join(existing)}", "Pass --force to replace it, or choose another folder with --out."
        )


def atomic_write_text(final: Path, text: str) -> None:
    """Write a text file so that ``final`` holds either its old content or the whole new one."""
    final.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".part", dir=final.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp creates 0600; give the file the usual permissions
        os.replace(temporary, final)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def zip_members(path: Path) -> list[str]:
    """The member names of a zip archive, once ``convert.archives.check_archive`` has passed it: refused when a member
    points outside the archive's folder (an absolute path, a '..' part, a symlink: a loader that extracts it would
    write or read there), or declares more than it can hold (a decompression bomb, overlapping members, two members
    of one name)."""
    return [info.filename for info in check_archive(path)]


def check_contained(folder: Path) -> None:
    """Refuse a model folder with a symlink that leads outside it (a loader would read whatever it points at)."""
    root = folder.resolve()
    for path in folder.rglob("*"):
        if path.is_symlink() and not path.resolve().is_relative_to(root):
            raise ConvertError(
                f"{folder} has a symlink that leads outside it: {path.relative_to(folder)} -> {os.readlink(path)}",
                "Refused: copy the files it needs into the folder instead.",
            )


def is_torchscript(path: Path) -> bool:
    """Whether a file is a TorchScript archive, by its members (a given artifact's format where its name says none)."""
    return path.is_file() and detect_format(path) == "torchscript"


def detect_format(path: Path) -> str:
    """The file's real format from its bytes, not its extension.

    Returns one of: ``pt2``, ``torchscript``, ``torch-save``, ``torch-legacy-pickle``, ``safetensors``,
    ``zip``, ``hdf5``, ``onnx-or-unknown``, ``directory``, ``empty``.
    """
    if path.is_dir():
        return "directory"
    with open(path, "rb") as handle:
        head = handle.read(16)
    if not head:
        return "empty"
    if head.startswith(b"PK"):
        members = zip_members(path)
        names = {m.split("/", 1)[-1] for m in members}
        if "archive_format" in names or any(m.startswith("models/") and m.endswith(".json") for m in names):
            return "pt2"
        if "constants.pkl" in names or any(m.startswith("code/") for m in names):
            return "torchscript"
        if "data.pkl" in names:
            return "torch-save"
        return "zip"
    if head[:1] == b"\x80":
        return "torch-legacy-pickle"
    if head.startswith(b"\x89HDF"):
        return "hdf5"
    if len(head) >= 9 and head[8:9] == b"{":
        return "safetensors"
    return "onnx-or-unknown"
