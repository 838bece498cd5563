"""The stage cache: an unchanged model, options and environment reuse artifacts and validation results.

Each entry is keyed by a sha256 over what its stage reads: the content hash of the model file, of the artifact it
starts from, of the feeds and reference outputs, and the options that change its result; a change there gives a new
key, so exactly the stages downstream of it run again. An entry also records the versions of the libraries that made
it and the sha256 of each of its files. An entry that cannot be trusted (a partial entry, a file changed since, other
library versions) is rebuilt, never used, and the report says why.

An entry is bound to its content: entry.json holds a digest over its key, environment, data and the digests of its
files and arrays, checked before anything in it is used; an entry edited without its digest is rebuilt. A plain digest
stops edits, not forgers (whoever can write the cache can recompute it), so a stage that reuses an entry also judges
what it says again (``find(..., judge=...)``): cached checks must be supported by their metrics under this run's
tolerances, a cached skip must be one this run would make, a cached export must be what its stage makes. An entry its
judge rejects is rebuilt, and one it would reject is never written.

Entries are written to a temporary folder and renamed into place: a run that dies while writing leaves no entry.
Files are copied between the cache and the run's staging folder, never hard-linked: onnx (1.23) refuses to load
external data that has more than one hard link, as a guard against hard-link attacks.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from convert import __version__
from convert.registry import REGISTRY

if TYPE_CHECKING:
    from convert.validation import ValidationCase
from convert.safety import sha256_files

LAYOUT = "v1"  # the entry layout; a new layout ignores the old entries
ENTRY_FILE = "entry.json"
ARRAYS_FILE = "arrays.npz"
ABANDONED_SECONDS = 24 * 3600

# Libraries whose version a stage's result depends on, beyond convert and Python: a new version of one of them
# rebuilds that stage's entries, and only those.
# Model kinds whose file holds all of the model's code: a pickled module or a module:callable factory runs code from
# Python files that can change while the model file does not, so their results are not cached.
SELF_CONTAINED_KINDS = ("pt2", "torchscript", "savedmodel", "keras", "transformers", "onnx")


def default_folder() -> Path:
    """$CONVERT_CACHE_DIR, else $XDG_CACHE_HOME/convert, else ~/.cache/convert."""
    if os.environ.get("CONVERT_CACHE_DIR"):
        return Path(os.environ["CONVERT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "convert"


def digest(*parts: Any) -> str:
    """A sha256 over JSON-able parts (NumPy arrays by dtype, shape and bytes)."""
    hasher = hashlib.sha256()
    _feed(hasher, parts)
    return hasher.hexdigest()


def _feed(hasher, value: Any) -> None:
    if isinstance(value, np.ndarray):
        hasher.update(f"array:{value.dtype.str}:{value.shape}:".encode())
        hasher.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, dict):
        hasher.update(b"{")
        for key in sorted(value, key=str):
            hasher.update(json.dumps(str(key)).encode() + b":")
            _feed(hasher, value[key])
        hasher.update(b"}")
    elif isinstance(value, (list, tuple)):
        hasher.update(b"[")
        for item in value:
            _feed(hasher, item)
            hasher.update(b",")
        hasher.update(b"]")
    else:
        hasher.update(json.dumps(value if isinstance(value, (str, int, float, bool, type(None))) else str(value)).encode())


def entry_digest(recorded: dict) -> str:
    """The digest that binds an entry to its content: its key, environment, data, and the sha256 of each of its files
    and of its arrays, as entry.json holds them (the ``digest`` field itself aside)."""
    return digest("entry", LAYOUT, {part: recorded.get(part) for part in ("key", "environment", "data", "files", "arrays")})


def _plain_name(name: Any) -> bool:
    """A file name an entry may hold: no folder, no '..' (an entry names its files; it cannot reach outside them)."""
    return isinstance(name, str) and name not in ("", ".", "..") and Path(name).name == name and "\\" not in name


def environment(packages: tuple[str, ...]) -> dict[str, str]:
    """The versions a stage's entry is made with: convert (its version and a digest of its code), Python and the
    stage's libraries."""
    from convert.compat import package_version

    return {
        "convert": f"{__version__}+{_code_digest()}",
        "python": sys.version.split()[0],
        **{name: package_version(name) for name in packages},
    }


@functools.cache
def _code_digest() -> str:
    """A digest of convert's own code, convert.validators included: an edited checkout (same version number) is a new
    version. Files are named as installed (convert/validators/... lives in validators/ in a checkout), so a checkout
    and an install of the same code give the same digest."""
    from convert import validators

    files: dict[str, Path] = {}
    for name, package in (("convert", Path(__file__).parent), ("convert/validators", Path(validators.__file__).parent)):
        for path in package.rglob("*.py"):
            files[f"{name}/{path.relative_to(package).as_posix()}"] = path
    hasher = hashlib.sha256()
    for name in sorted(files):
        hasher.update(name.encode() + b"\0" + files[name].read_bytes())
    return hasher.hexdigest()[:12]


@dataclass
class Hit:
    data: dict
    folder: Path | None  # the entry's folder: its files are under files/ (None: data about to be written, judged first)

    def files(self) -> list[Path]:
        return [self.folder / "files" / name for name in self.data["_files"]]

    def arrays(self) -> dict[str, np.ndarray]:
        with np.load(self.folder / ARRAYS_FILE, allow_pickle=False) as stored:
            return {name: stored[name] for name in stored.files}

    def array_names(self) -> set[str]:
        """The names of its arrays, without reading them (none for an entry not yet written)."""
        if self.folder is None or not (self.folder / ARRAYS_FILE).exists():
            return set()
        with np.load(self.folder / ARRAYS_FILE, allow_pickle=False) as stored:
            return set(stored.files)


@dataclass
class Miss:
    rebuilt: str = ""  # why an entry that exists was not used; "" when there is none


class StageCache:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.root = self.folder / LAYOUT

    def lookup(self, key: str, packages: tuple[str, ...]) -> Hit | Miss:
        """The entry for ``key`` when every check passes, else a Miss that says why an existing entry was not used."""
        entry = self._entry(key)
        if not entry.exists():
            return Miss()
        try:
            recorded = json.loads((entry / ENTRY_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return Miss("a partial entry (its entry.json is missing)")
        except (OSError, ValueError) as exc:
            return Miss(f"its entry.json cannot be read ({exc})")
        if not isinstance(recorded, dict) or not {"key", "environment", "data", "files"} <= set(recorded):
            return Miss("its entry.json lacks keys an entry has")
        if not all(isinstance(recorded[part], dict) for part in ("environment", "data", "files")):
            return Miss("its entry.json does not have the shape of an entry")
        if recorded["key"] != key:
            return Miss("its entry.json belongs to another key")
        now = environment(packages)
        changed = [
            f"{name} {recorded['environment'].get(name, '-')} → {version}"
            for name, version in now.items()
            if recorded["environment"].get(name) != version
        ]
        if changed:
            return Miss(f"made with other library versions ({', '.join(changed)})")
        if "digest" not in recorded:
            return Miss("its entry.json carries no digest of its content")
        if recorded["digest"] != entry_digest(recorded):
            return Miss("its content does not match its digest (entry.json was changed after it was written)")
        outside = next((name for name in recorded["files"] if not _plain_name(name)), None)
        if outside is not None:
            return Miss(f"its file name {outside!r} is not a plain file name")
        for name, sha256 in {**recorded["files"], **({ARRAYS_FILE: recorded["arrays"]} if recorded.get("arrays") else {})}.items():
            path = entry / ("" if name == ARRAYS_FILE else "files") / name
            if not path.exists():
                return Miss(f"its file {name} is missing")
            if sha256_files([path]) != sha256:
                return Miss(f"its file {name} changed since it was cached")
        return Hit(data={**recorded["data"], "_files": list(recorded["files"])}, folder=entry)

    def store(
        self, key: str, packages: tuple[str, ...], data: dict, files: list[Path] = (), arrays: dict[str, np.ndarray] | None = None
    ) -> None:
        """Write an entry (replacing one that was not trusted); a cache that cannot be written is skipped, not fatal."""
        staging = None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            self._remove_abandoned()
            staging = Path(tempfile.mkdtemp(prefix=".writing-", dir=self.root))
            (staging / "files").mkdir()
            for path in files:
                copy_files(path, staging / "files" / path.name)
            recorded = {
                "key": key,
                "environment": environment(packages),
                "data": data,
                "files": {path.name: sha256_files([staging / "files" / path.name]) for path in files},
            }
            if arrays is not None:
                np.savez(staging / ARRAYS_FILE, **arrays)
                recorded["arrays"] = sha256_files([staging / ARRAYS_FILE])
            recorded = json.loads(json.dumps(recorded))  # digested as it will be read back
            recorded["digest"] = entry_digest(recorded)
            (staging / ENTRY_FILE).write_text(json.dumps(recorded, indent=1), encoding="utf-8")  # last: marks it complete
            final = self._entry(key)
            final.parent.mkdir(exist_ok=True)
            if final.exists():  # the entry this one replaces: moved aside, then removed
                old = Path(tempfile.mkdtemp(prefix=".replaced-", dir=self.root))
                os.replace(final, old / "entry")
                shutil.rmtree(old, ignore_errors=True)
            os.replace(staging, final)
            staging = None
        except OSError:
            pass  # a full or read-only cache costs the next run time, not this run its result
        finally:
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)

    def _entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def _remove_abandoned(self) -> None:
        """Temporary folders of runs killed while writing an entry, a day or more ago (a live run's are newer)."""
        import time

        for folder in self.root.glob(".writing-*"):
            with contextlib.suppress(OSError):
                if time.time() - folder.stat().st_mtime > ABANDONED_SECONDS:
                    shutil.rmtree(folder, ignore_errors=True)


def copy_files(source: Path, target: Path) -> None:
    """Copy a file, or a folder with every file in it."""
    if source.is_dir():
        shutil.copytree(source, target)
    else:
        shutil.copy2(source, target)


# A stage's judgement of what an entry says: why it cannot be taken as it is ("" when it can). It sees the entry's data
# (with "_files", the names of its files); its folder is None when the data is about to be written.
Judge = Callable[[Hit], str]


def judged(judge: Judge | None, hit: Hit) -> str:
    """The judge's reason to reject the entry ("" to take it); data it cannot read is a reason too, never a crash."""
    if judge is None:
        return ""
    try:
        why = judge(hit)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:  # pydantic's ValidationError included
        why = f"its data cannot be read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return f"its cached result does not hold under this run's judgement: {why}" if why else ""


@dataclass
class Lookup:
    """One stage's place in the cache: its key (None when the cache is off for this run), the entry, if trusted, and
    the judge its data must satisfy, when reused and before it is written."""

    key: str | None
    packages: tuple[str, ...] = ()
    hit: Hit | None = None
    judge: Judge | None = None


class RunCache:
    """The cache as one run uses it: the keys of its stages, and what it reused and rebuilt, for the report."""

    def __init__(self, store: StageCache | None, reason: str = ""):
        from convert.reports import model as rm

        self.store = store
        self.record = rm.CacheRecord(folder=str(store.folder) if store else None, used=store is not None, reason=reason)
        self.source_key: str | None = None
        self.option_digests: dict[str, str] = {}
        self.source_packages: tuple[str, ...] = ()
        self._cases: tuple[int, str] | None = None

    @classmethod
    def open(cls, folder: Path | None, enabled: bool) -> RunCache:
        if not enabled:
            return cls(None, "turned off (--no-cache)")
        if os.environ.get("CONVERT_NO_CACHE", "").lower() not in ("", "0", "false", "no"):
            return cls(None, "turned off (CONVERT_NO_CACHE is set)")
        return cls(StageCache(folder or default_folder()))

    def attach(self, source, request) -> None:
        """Key the run on the model file's content and on the options that change each stage's results (declared in
        convert/options.py); a model whose code lives outside its file turns the cache off."""
        from convert import options

        info = source.info
        if self.store is None:
            return
        self.option_digests = {stage: options.digest(request, stage) for stage in ("load", "reference", "export", "optimize", "validate")}
        if info.kind not in SELF_CONTAINED_KINDS or not info.sha256 or (info.kind == "keras" and request.trust_code):
            self.store, self.record.used = None, False
            self.record.folder = None
            self.record.reason = (
                f"not used for a {info.kind} model: its code lives in Python files that can change while "
                "the model file does not (a .pt2, TorchScript, SavedModel, .keras or .onnx file holds all of it)"
            )
            return
        self.source_key = digest(
            "source",
            info.framework,
            info.kind,
            info.sha256,
            [str(s) for s in source.signature.inputs],
            source.export_sizes,
            source.dim_ranges,
            source.example_feed,
            self.option_digests["load"],
        )
        self.source_packages = REGISTRY.source_packages(info.framework, info.kind)

    def find(self, kind: str, label: str, packages: tuple[str, ...], *parts: Any, judge: Judge | None = None) -> Lookup:
        """Look up the entry of a job of a ``kind`` of stage, ``label`` as the report names it, keyed on ``parts``; an
        entry that ``judge`` rejects is rebuilt, like any entry that cannot be trusted."""
        if self.store is None or self.source_key is None:
            return Lookup(None)
        options = self.option_digests.get("optimize" if kind == "auto" else kind, "")  # auto builds the passes optimize would
        key = digest(kind, self.source_key, options, *parts)
        found = self.store.lookup(key, packages)
        if isinstance(found, Hit):
            why = judged(judge, found)
            if not why:
                self.record.reused.append(label)
                return Lookup(key, packages, found, judge)
            found = Miss(why)
        if found.rebuilt:
            from convert.reports import model as rm

            self.record.rebuilt.append(rm.CacheRebuild(stage=label, reason=found.rebuilt))
        return Lookup(key, packages, None, judge)

    def keep(self, lookup: Lookup, data: dict, files: list[Path] = (), arrays: dict[str, np.ndarray] | None = None) -> None:
        """Write the entry, unless its judge would reject it when reused (it would only be rebuilt: a result this run
        cannot judge again, such as a skip it cannot tell without running, is made again each time instead). The data
        is this run's own: a judge that cannot read it is a fault of this tool, raised with its traceback."""
        if lookup.key is None or self.store is None:
            return
        if lookup.judge is not None and lookup.judge(
            Hit(data=json.loads(json.dumps({**data, "_files": [Path(f).name for f in files]})), folder=None)
        ):
            return
        self.store.store(lookup.key, lookup.packages, data, files, arrays)

    def cases_digest(self, cases: list[ValidationCase]) -> str:
        """The inputs and reference outputs every validation compares against, hashed once per run."""
        if self._cases is None or self._cases[0] != id(cases):
            self._cases = (
                id(cases),
                digest(
                    [
                        (
                            c.shape.sizes,
                            c.feeds,
                            c.references,
                            c.source_error,
                            c.generation and (c.generation.prompts, c.generation.context, c.generation.logits),
                            c.labels,
                            c.task and c.task.model_dump(),
                            c.metric,
                        )
                        for c in cases
                    ]
                ),
            )
        return self._cases[1]


def artifact_data(artifact) -> dict:
    """What an export or optimization entry records about its artifact, besides its files."""
    return {
        "format": artifact.format,
        "path": artifact.path.name,
        "precision": artifact.precision,
        "files": [f.name for f in artifact.files],
        "exporter": artifact.exporter,
        "strategy": artifact.strategy,
        "inputs": [str(s) for s in artifact.inputs],
        "output_names": list(artifact.output_names),
        "fixed_shape_reason": artifact.fixed_shape_reason,
        "dim_bounds": {k: list(v) for k, v in artifact.dim_bounds.items()},
        "details": artifact.details,
    }


def cached_artifact(hit: Hit, folder: Path):
    """The entry's artifact, its files copied into ``folder``."""
    from convert.artifacts import Artifact
    from convert.specs import parse_input_spec

    data = hit.data
    for path in hit.files():
        copy_files(path, folder / path.name)
    return Artifact(
        format=data["format"],
        path=folder / data["path"],
        precision=data["precision"],
        files=[folder / name for name in data["files"]],
        exporter=data["exporter"],
        strategy=data["strategy"],
        inputs=tuple(parse_input_spec(s) for s in data["inputs"]),
        output_names=tuple(data["output_names"]),
        fixed_shape_reason=data["fixed_shape_reason"],
        dim_bounds={k: tuple(v) for k, v in data["dim_bounds"].items()},
        details=list(data.get("details", [])),
    )
