"""What the Hugging Face sources share (transformers, sentence-transformers and diffusers folders): loading offline, the
facts a transformers config states, the pixel range a folder's image processor makes, and transformers' key/value
cache: the forward argument that takes it, read from the annotations, and one wrapper of a forward that takes and
returns it as flat tensors (a decoder's, an encoder-decoder's decoder's)."""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
from collections.abc import Callable, Collection, Iterator
from pathlib import Path
from typing import Any

from convert.compat import library_mismatch
from convert.errors import ConvertError


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


# The annotation of the forward parameter that takes the key/value cache: transformers' Cache or a class of its own
# (EncoderDecoderCache, a hybrid model's HybridMambaAttentionDynamicCache)...
_CACHE_TYPE = re.compile(r"\b\w*Cache\b")
# ...else, in forwards older than that type (transformers 4's GPT-2, VisionEncoderDecoderModel, BERT's decoders), tensors
# per layer: a tuple or list of tensors, or of tuples of them
_PER_LAYER_TENSORS = re.compile(r"\b(tuple|list|Tuple|List)\[\s*((tuple|Tuple)\[\s*)?(torch\.)?\w*Tensor\b")
# The forward arguments a with-past step fills besides the cache: a decoder's, and an encoder-decoder's (its decoder's
# tokens, the encoder's outputs standing for its input_ids, and the encoder's mask)
DECODER_ARGUMENTS = ("input_ids", "attention_mask", "position_ids")
SEQ2SEQ_ARGUMENTS = ("decoder_input_ids", "encoder_outputs", "attention_mask")
# The output fields transformers has returned the cache in (``cache`` since 5.24, ``past_key_values`` before), read only
# where no field holds a Cache object.
CACHE_FIELDS = ("cache", "past_key_values")


def cache_parameter(forward: Callable, filled: Collection[str] = ()) -> str | None:
    """The parameter of a transformers forward that takes the key/value cache, by its annotation (transformers renames
    it: ``past_key_values``, then ``cache``): the one typed as a Cache, else the one typed as tensors per layer. The
    parameters the caller fills itself (``filled``: an encoder-decoder's ``encoder_outputs`` are typed as tensors per
    layer too) are not candidates. None where no parameter, or more than one, is so typed: a name alone says nothing."""
    annotations = {
        name: str(parameter.annotation)
        for name, parameter in inspect.signature(forward).parameters.items()
        if name not in filled and parameter.annotation is not parameter.empty
    }
    for annotation in (_CACHE_TYPE, _PER_LAYER_TENSORS):
        typed = [name for name, text in annotations.items() if annotation.search(text)]
        if typed:
            return typed[0] if len(typed) == 1 else None
    return None


def cache_of(out) -> Any:
    """The cache a transformers step returned: its output's field holding a Cache, else its field of a name transformers
    has used for it (a cache of tuples)."""
    from transformers import Cache

    for value in out.values():
        if isinstance(value, Cache):
            return value
    for name in CACHE_FIELDS:
        if out.get(name) is not None:
            return out[name]
    raise library_mismatch(
        "transformers", f"a decoder step's {type(out).__name__} holds no cache among its fields ({', '.join(out.keys())})"
    )


def cache_layers(cache) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache (``.layers`` since transformers 4.56, the legacy tuple before);
    an encoder-decoder's self-attention cache (its cross-attention is computed from the encoder's outputs)."""
    import torch

    cache = getattr(cache, "self_attention_cache", cache)
    if not hasattr(cache, "layers"):
        return [(k, v) for k, v in cache]
    layers = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers]
    if not layers or not all(isinstance(part, torch.Tensor) for layer in layers for part in layer):
        raise ConvertError(
            f"the model's cache ({type(cache).__name__}) holds no key and value tensors of its own in every layer (a "
            "state-space or recurrent cache, or layers that share another layer's keys and values), and this tool exports "
            "decoders whose every layer keeps its own key/value cache only",
            "Use --task text-generation (the decoder without its cache).",
        )
    return layers


def dynamic_cache(layers) -> Any:
    """A DynamicCache holding each layer's (keys, values), every layer at full length.

    Not ``DynamicCache(config=...)``: its sliding-window layers keep only their last window-1 tokens, so their outputs
    would be shorter than the full layers' once the past reaches the window (no one length for the graph, and ONNX
    Runtime fails there). A sliding layer given the whole past gives the same logits: its attention mask leaves out
    what lies beyond its window."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for i, (keys, values) in enumerate(layers):
        cache.update(keys, values, i)
    return cache


def by_name(module_class, names: list[str]):
    """An instance of the module class, its forward declaring one parameter per input (dots made underscores), so that
    torch.export binds its inputs by name."""
    parameter = inspect.Parameter.POSITIONAL_OR_KEYWORD
    module_class.forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", parameter), *(inspect.Parameter(n.replace(".", "_"), parameter) for n in names)]
    )
    return module_class().eval()


def seq2seq_arguments(inputs: dict, states) -> dict:
    """An encoder-decoder step's arguments besides its cache (SEQ2SEQ_ARGUMENTS) from a flat feed: the decoder's tokens,
    the encoder's outputs ``states``, the encoder's mask where the feed has one."""
    return {"decoder_input_ids": inputs["input_ids"], "encoder_outputs": (states,), "attention_mask": inputs.get("encoder_attention_mask")}


def with_past(model, names: list[str], step: Callable[[dict], tuple[dict, Any]], outputs: Callable[[Any], dict], filled: Collection[str]):
    """A transformers model's forward as a module over the flat tensors ``names``: ``step`` makes of a feed the forward's
    arguments (of those named in ``filled``: DECODER_ARGUMENTS, SEQ2SEQ_ARGUMENTS) and the cache, which goes in under
    the parameter the forward's annotations name (:func:`cache_parameter`); ``outputs`` names the tensors of what the
    forward returns."""
    import torch

    cache_argument = cache_parameter(model.forward, filled)
    if cache_argument is None:
        raise library_mismatch(
            "transformers",
            f"{type(model).__name__}'s forward declares no one cache argument (a parameter typed Cache, or tensors per layer)",
        )

    class WithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *values):
            arguments, cache = step(dict(zip(names, values)))
            return outputs(self.model(**arguments, use_cache=True, **{cache_argument: cache}))

    return by_name(WithPast, names)
