"""Plain-text helpers for messages: what the pipeline, validation, the worker, the CLI and the reports share."""

from __future__ import annotations


def first_line(text: str, limit: int | None = 160) -> str:
    """The first non-blank line of a message, cut to ``limit`` characters (None: whole)."""
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    line = lines[0].strip() if lines else ""
    return line if limit is None or len(line) <= limit else line[: limit - 1] + "…"
