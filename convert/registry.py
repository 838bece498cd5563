"""The one registration mechanism for sources, exporters, optimizers and runtimes.

Entries are declared by name with the import path of their implementation, so listing them (for the CLI's
choices, ``convert doctor`` or the coverage test) imports no framework. Each package declares its own
entries in its ``__init__``; the registry imports those packages on first use.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any

KINDS = ("source", "exporter", "optimizer", "runtime")
# Installed with the tool itself; every other package is declared by the entries that use it (``packages``, with the
# ``extra`` that installs it), once: the environment record, the cache's version keys and ``convert doctor`` read them here.
CORE_PACKAGES = ("numpy", "onnx", "onnxruntime")
_DECLARING_PACKAGES = ("convert.sources", "convert.exporters", "convert.optimizers", "convert.runtimes")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    target: str  # "package.module:Attribute"
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def packages(self) -> tuple[str, ...]:
        """What this entry's results depend on: the core packages and its own."""
        return tuple(dict.fromkeys([*CORE_PACKAGES, *self.meta.get("packages", ())]))

    def load(self) -> Any:
        module_name, _, attribute = self.target.partition(":")
        return getattr(importlib.import_module(module_name), attribute)


class Registry:
    def __init__(self) -> None:
        self._entries: dict[tuple[str, str], Entry] = {}
        self._loaded = False

    def add(self, kind: str, name: str, target: str, **meta: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown registry kind {kind!r}")
        key = (kind, name)
        if key in self._entries:
            raise ValueError(f"{kind} {name!r} is registered twice")
        self._entries[key] = Entry(kind, name, target, dict(meta))

    def _ensure_loaded(self) -> None:
        if not self._loaded:
            self._loaded = True
            for package in _DECLARING_PACKAGES:
                importlib.import_module(package)

    def entries(self, kind: str, **where: Any) -> list[Entry]:
        """Entries of one kind whose meta matches ``where`` (a tuple-valued meta matches any member)."""
        self._ensure_loaded()
        found = []
        for (entry_kind, _), entry in self._entries.items():
            if entry_kind != kind:
                continue
            if all(_matches(entry.meta.get(k), v) for k, v in where.items()):
                found.append(entry)
        return found

    def get(self, kind: str, name: str) -> Entry:
        self._ensure_loaded()
        return self._entries[(kind, name)]

    def packages(self, kind: str | None = None, **where: Any) -> tuple[str, ...]:
        """The import packages the matching entries declare (every entry of every kind by default), core first, in
        registration order, without repeats."""
        kinds = (kind,) if kind else KINDS
        declared = [p for k in kinds for entry in self.entries(k, **where) for p in entry.meta.get("packages", ())]
        return tuple(dict.fromkeys([*CORE_PACKAGES, *declared]))

    def loading_packages(self) -> tuple[str, ...]:
        """The packages sources declare as ``loading_packages``: not installed by any extra, yet when installed they
        change what a source loads (PEFT makes transformers load a folder's adapter)."""
        return tuple(dict.fromkeys(p for entry in self.entries("source") for p in entry.meta.get("loading_packages", ())))

    def source_packages(self, framework: str, kind: str = "") -> tuple[str, ...]:
        """What a source's results depend on: its framework's packages, those of the source of its ``kind`` where one is
        registered (a transformers folder is a torch model), those that change what either loads (installed or not),
        and the packages of every exporter that takes the framework."""
        self._ensure_loaded()
        sources = [self.get("source", name) for name in (framework, kind) if ("source", name) in self._entries]
        return tuple(
            dict.fromkeys(
                [
                    *CORE_PACKAGES,
                    *(p for source in sources for p in (*source.meta.get("packages", ()), *source.meta.get("loading_packages", ()))),
                    *self.packages("exporter", source=framework)[len(CORE_PACKAGES) :],
                ]
            )
        )

    def extra_of(self, package: str) -> str:
        """The extra that installs ``package`` ("(core)" for the tool's own dependencies)."""
        if package in CORE_PACKAGES:
            return "(core)"
        return next(entry.meta["extra"] for kind in KINDS for entry in self.entries(kind) if package in entry.meta.get("packages", ()))

    def target_formats(self) -> list[str]:
        """Every format some exporter can produce, in registration order (the CLI's --to choices)."""
        formats: dict[str, None] = {}
        for entry in self.entries("exporter"):
            formats.setdefault(entry.meta["format"])
        return list(formats)


def _matches(value: Any, wanted: Any) -> bool:
    if isinstance(value, tuple):
        return wanted in value
    return value == wanted


REGISTRY = Registry()
