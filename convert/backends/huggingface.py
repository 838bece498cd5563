"""What the Hugging Face sources share (transformers, sentence-transformers and diffusers folders): loading offline, the
facts a transformers config states, and the pixel range a folder's image processor makes."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator
from pathlib import Path
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
        config.pad_token_id + 1
        if config.model_type in ("roberta", "xlm-roberta", "camembert", "layoutlmv3") and config.pad_token_id is not None
        else 0
    )


PREPROCESSOR_CONFIG = "preprocessor_config.json"
PIXELS = (0.0, 255.0)  # what an image processor takes: 8-bit pixel values


def normalized_range(mean: Any, std: Any, low: float, high: float) -> tuple[float, float] | None:
    """The values ``(x - mean) / std`` takes for x in low..high, per channel, as one range (the union over channels: an
    input spec has one domain); None where the mean or std are not finite numbers, or a std is not positive."""
    means, stds = _numbers(mean), _numbers(std)
    if not means or not stds or len(means) != len(stds) and 1 not in (len(means), len(stds)):
        return None
    count = max(len(means), len(stds))
    means, stds = means * (count // len(means)), stds * (count // len(stds))
    if any(not s > 0 for s in stds):
        return None
    return min((low - m) / s for m, s in zip(means, stds)), max((high - m) / s for m, s in zip(means, stds))


def _numbers(value: Any) -> list[float]:
    """A number or a list of numbers as floats; empty for anything else (or anything not finite)."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values):
        return []
    return [float(v) for v in values]


def image_domain(folder: Any) -> dict[str, Any]:
    """The range of the ``pixel_values`` a folder's image processor makes from 8-bit images, as InputSpec fields (``low``,
    ``high``, ``domain_source``): 0..255 rescaled (``do_rescale``, ``rescale_factor``, ``rescale_offset``: minus 1
    after it), then normalised per channel (``do_normalize``, ``image_mean``, ``image_std``). Empty where the folder has
    no preprocessor_config.json, or one of no image processor."""
    from convert.readers import loads_json

    path = Path(folder) / PREPROCESSOR_CONFIG if isinstance(folder, (str, Path)) else None
    if path is None or not path.is_file():
        return {}
    config = loads_json(
        path.read_text(encoding="utf-8"), f"the image processor config {path}", "Write it again with the processor's save_pretrained."
    )
    if not isinstance(config, dict) or not any(key in config for key in ("image_mean", "image_std", "rescale_factor", "do_rescale")):
        return {}
    low, high = PIXELS
    steps = []
    if config.get("do_rescale", True):
        factor = _numbers(config.get("rescale_factor", 1 / 255))
        if len(factor) != 1 or factor[0] <= 0:
            return {}
        offset = 1.0 if config.get("rescale_offset") else 0.0
        low, high = low * factor[0] - offset, high * factor[0] - offset
        steps.append(f"rescaled by {factor[0]:.6g}" + (" minus 1" if offset else ""))
    if config.get("do_normalize", "image_mean" in config):
        normalized = normalized_range(config.get("image_mean"), config.get("image_std"), low, high)
        if normalized is None:
            return {}
        low, high = normalized
        steps.append(f"normalised with mean {config.get('image_mean')} and std {config.get('image_std')}")
    how = f": 0..255 images {' and '.join(steps)}" if steps else ": 0..255 images as they are"
    return {"low": round(low, 6), "high": round(high, 6), "domain_source": f"the folder's {PREPROCESSOR_CONFIG}{how}"}


def decoder_start(model) -> int | None:
    """The token generation starts the decoder from, as transformers' generate finds it (GenerationMixin.
    _prepare_special_tokens): the generation config's decoder_start_token_id, else its bos_token_id (then the model
    config's decoder_start_token_id, which older versions read); None where there is none, and generate refuses."""
    found = (model.generation_config.decoder_start_token_id, model.generation_config.bos_token_id)
    return next((token for token in found if token is not None), getattr(model.config, "decoder_start_token_id", None))
