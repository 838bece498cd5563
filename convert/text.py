"""Plain-text helpers for messages: what the pipeline, validation, the worker, the CLI and the reports share."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def first_line(text: str, limit: int | None = 160) -> str:
    """The first non-blank line of a message, cut to ``limit`` characters (None: whole)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    line = lines[0].strip() if lines else ""
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"


def closest(given: str, choices: Iterable[str]) -> str | None:
    """The choice a misspelt name most likely meant (difflib's closest, at least 0.6 alike), or None when none is close."""
    near = difflib.get_close_matches(given, list(choices), n=1)
    return near[0] if near else None


def did_you_mean(given: str, choices: Iterable[str]) -> str:
    """'Did you mean X? ' to start an error's next step with, or '' when no choice is close to ``given``."""
    near = closest(given, choices)
    return f"Did you mean {near}? " if near else ""
