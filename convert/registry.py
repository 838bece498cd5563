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
_DECLARING_PACKAGES = ("convert.sources", "convert.exporters", "convert.optimizers", "convert.runtimes")


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    target: str  # "package.module:Attribute"
    meta: dict[str, Any] = field(default_factory=dict)

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
