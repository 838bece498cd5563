"""The reproduce command of an artifact: the one command that makes it again, derived from the options' declaration
(convert/options.py): every option that changes how an artifact is made is repeated, every other one is left out
with its reason there."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from convert import options
from convert.pipeline.context import ConvertRequest


def reproduce_command(request: ConvertRequest, target: str, out_dir: Path, optimization: str = "") -> str:
    """The command that makes this one artifact again: the CLI for a model given by path or name, else the API call."""
    repeated = [o for o in options.OPTIONS if o.reproduce == "always" or (o.reproduce == "optimization" and optimization)]
    if not isinstance(request.model, (str, os.PathLike)):
        keywords = {"to": [target], **({"optimize": [optimization]} if optimization else {})}
        for option in repeated:
            value = getattr(request, option.name)
            if not options.is_object(value) and value not in (None, (), False, option.default):
                keywords[option.keyword] = list(value) if isinstance(value, tuple) else _spelled(value)
        return f"convert.convert(<{type(request.model).__name__} object>" + "".join(f", {k}={v!r}" for k, v in keywords.items()) + ")"
    parts = ["python", "-m", "convert", os.fspath(request.model), "--to", target, "--out", str(out_dir)]
    if optimization:
        parts += ["--optimize", optimization]
    for option in repeated:
        value = getattr(request, option.name)
        if options.is_object(value) or value is None or value == option.default:
            continue
        if option.kind == "flag":
            parts += [option.flag] if value else []
        elif option.kind == "multiple":
            for item in value:
                parts += [option.flag, item]
        elif option.kind == "comma-list":
            parts += [option.flag, ",".join(value)] if value else []
        else:
            parts += [option.flag, _spelled(value)]
    return shlex.join(parts)


def _spelled(value: Any) -> str:
    return os.fspath(value) if isinstance(value, os.PathLike) else str(value)
