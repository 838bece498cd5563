"""What the Hugging Face sources share (transformers, sentence-transformers and diffusers folders): loading offline, and
the facts a transformers config states."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """Loading from a folder never reaches the network (the hub client reads these on each call; diffusers reads
    ``HF_HUB_OFFLINE`` once at import, so its loads pass ``local_files_only`` too)."""
    saved = {key: os.environ.get(key) for key in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    os.environ.update({key: "1" for key in saved})
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def stored_dtype(config: Any) -> str | None:
    """The dtype a folder's config (a dict) says its weights were saved in (``dtype``, ``torch_dtype`` before
    transformers 5)."""
    stored = (config.get("dtype") or config.get("torch_dtype")) if isinstance(config, dict) else None
    return stored if isinstance(stored, str) else None


def position_offset(config) -> int:
    """Positions a model's position table keeps before the first token (RoBERTa-style models count from the padding id)."""
    return (
        config.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta", "camembert") and config.pad_token_id is not None else 0
    )
