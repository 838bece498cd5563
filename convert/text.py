"""Plain-text helpers for messages: what the pipeline, validation, the worker, the CLI and the reports share."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

# Keras re-raises an exception from inside a layer with its message set in bold inside a banner: "Exception encountered
# when calling Embedding.call().\n\n\x1b[1m<the message>\x1b[0m\n\nArguments received by ..."
_KERAS_BANNER = re.compile(r"\s*Exception encountered when calling [^\n]*\n\s*\x1b\[1m(.*?)\x1b\[0m", re.S)
# TensorFlow starts an op's error with the function it ran in: "{{function_node __wrapped__GatherV2_device_/job:...}} "
_TF_FUNCTION_NODE = re.compile(r"^\{\{function_node [^}]*\}\}\s*")


def first_line(text: str, limit: int | None = 160) -> str:
    """The first non-blank line of a message, cut to ``limit`` characters (None: whole). A message Keras wrapped in its
    banner gives the library's own message inside it, without TensorFlow's function-node prefix."""
    text = text or ""
    wrapped = _KERAS_BANNER.match(text)
    if wrapped:
        text = _TF_FUNCTION_NODE.sub("", wrapped.group(1).strip())
    lines = [line for line in text.strip().splitlines() if line.strip()]
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
