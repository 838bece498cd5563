"""Hugging Face Transformers source: a model folder as ``save_pretrained`` writes it (or a model object), and a task.

The task picks the Auto class, the inputs and the outputs, with Optimum's task names. It is inferred from
``config.architectures`` when not given, and the report says which and why. Specs come from the config: token ids
below the vocabulary size, padding masks, token types below ``type_vocab_size``, pixel values at the config's image
size, audio features at the feature extractor's size; the sequence is bounded by ``max_position_embeddings``.

``text-generation-with-past`` wraps a decoder so that it takes and returns its cache as Optimum names it
(``past_key_values.N.key``/``.value`` in, ``present.N.key``/``.value`` out, beside ``logits``), with the cache
length ``P`` a dynamic dim of its own that may be 0 (the first step) and the attention mask spanning ``P+S``.

Nothing is downloaded, and nothing in the folder runs without ``trust_code``: weights load from safetensors only
(``pytorch_model.bin`` is a pickle), and a config whose ``auto_map`` names code in the folder is refused.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convert.backends.torch import CallConvention, TorchSource, require_torch
from convert.compat import library_mismatch
from convert.errors import ConvertError, require
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.request import SourceRequest
from convert.specs import InputSpec
from convert.validators.generation import CacheLayout

TRUST_HINT = "If you trust the folder and where it came from, pass --trust-code."


@dataclass(frozen=True)
class Task:
    name: str
    auto_class: str  # the transformers Auto class that loads the folder for this task
    with_past: bool = False  # a decoder that takes and returns its cache


TASKS = {
    task.name: task
    for task in (
        Task("feature-extraction", "AutoModel"),
        Task("fill-mask", "AutoModelForMaskedLM"),
        Task("text-classification", "AutoModelForSequenceClassification"),
        Task("token-classification", "AutoModelForTokenClassification"),
        Task("image-classification", "AutoModelForImageClassification"),
        Task("text-generation", "AutoModelForCausalLM"),
        Task("text-generation-with-past", "AutoModelForCausalLM", with_past=True),
        Task("text2text-generation-with-past", "AutoModelForSeq2SeqLM", with_past=True),
        Task("automatic-speech-recognition-with-past", "AutoModelForSpeechSeq2Seq", with_past=True),
    )
}
# config.architectures[0] ends with one of these → the task a folder is for (a decoder is exported with its cache by
# default, as Optimum does)
ARCHITECTURE_TASKS = (
    ("ForMaskedLM", "fill-mask"),
    ("ForSequenceClassification", "text-classification"),
    ("ForTokenClassification", "token-classification"),
    ("ForImageClassification", "image-classification"),
    ("ForCausalLM", "text-generation-with-past"),
    ("LMHeadModel", "text-generation-with-past"),
    ("Model", "feature-extraction"),
)
# Optimum's tasks of an encoder-decoder's decoder without its cache: exported with it (-with-past) instead
SEQ2SEQ_TASKS = ("text2text-generation", "automatic-speech-recognition")
TASK_HINT = "Tasks: " + ", ".join(TASKS) + "."
SEQ2SEQ_HINT = (
    "Export the decoder with its cache (--task text2text-generation-with-past, or automatic-speech-recognition-with-past), "
    "and the encoder with --task feature-extraction."
)


def infer_task(config: dict | Any) -> tuple[str, str]:
    """(task, why) from a config's architectures."""
    architectures = (config.get("architectures") if isinstance(config, dict) else getattr(config, "architectures", None)) or []
    encoder_decoder = config.get("is_encoder_decoder") if isinstance(config, dict) else getattr(config, "is_encoder_decoder", False)
    for architecture in architectures:
        if encoder_decoder and not architecture.endswith("Model"):
            task = (
                "automatic-speech-recognition-with-past"
                if "Speech" in architecture or "Whisper" in architecture
                else "text2text-generation-with-past"
            )
            return task, f"inferred from config.architectures ({architecture}, an encoder-decoder)"
        for suffix, task in ARCHITECTURE_TASKS:
            if architecture.endswith(suffix):
                return task, f"inferred from config.architectures ({architecture})"
    return "feature-extraction", "the config names no architecture with a task head, so the base model's features"


def check_task(name: str, why: str = "") -> Task:
    if name in SEQ2SEQ_TASKS:
        raise ConvertError(
            f"the task {name} ({why or 'given'}) exports an encoder-decoder model's decoder without its cache, which this "
            "version does not do",
            SEQ2SEQ_HINT,
        )
    if name not in TASKS:
        raise ConvertError(f"unknown task '{name}'", TASK_HINT)
    return TASKS[name]


def check_folder(folder: Path, trust_code: bool) -> dict:
    """The folder's config, once the folder is known to hold a model this tool may load: refuses code (``auto_map``)
    and pickled weights without trust, and a folder without weights."""
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as exc:
        raise ConvertError(
            f"cannot read {folder / 'config.json'}: {exc}", "Write the folder again with save_pretrained, or fix the JSON."
        ) from exc
    if not isinstance(config, dict):
        raise ConvertError(f"{folder / 'config.json'} is not a JSON object", "Write the folder again with save_pretrained.")
    if config.get("auto_map") and not trust_code:
        named = ", ".join(sorted({str(v).split(".")[0] + ".py" for v in config["auto_map"].values() if isinstance(v, str)}))
        raise ConvertError(
            f"{folder} is a model whose config names code in the folder (auto_map: {named}); loading it runs that code",
            TRUST_HINT,
        )
    names = {p.name for p in folder.iterdir()}
    if any(n.endswith(".safetensors") for n in names) or "model.safetensors.index.json" in names:
        return config
    pickled = sorted(n for n in names if n.endswith(".bin") and n.startswith("pytorch_model"))
    if pickled and not trust_code:
        raise ConvertError(
            f"{folder} holds its weights only as {pickled[0]}, a pickle: unpickling it runs code from the file",
            TRUST_HINT + " Or save the model again with save_pretrained (safetensors is its default).",
        )
    if not pickled:
        others = sorted(n for n in names if n in ("tf_model.h5", "flax_model.msgpack"))
        raise ConvertError(
            f"{folder} holds no PyTorch weights (model.safetensors)" + (f", only {', '.join(others)}" if others else ""),
            "Save the PyTorch model with save_pretrained into this folder.",
        )
    return config


@contextlib.contextmanager
def _offline():
    """Loading from a folder never reaches the network (the hub client reads these on each call)."""
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


def load_transformers_source(request: SourceRequest):
    """A TorchSource of the folder (or transformers model object) for the request's task."""
    require_torch()
    transformers = require("transformers", "transformers", "Loading a Hugging Face Transformers model")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = request.model
    task_name = request.task
    info = SourceInfo(framework="torch", kind="transformers")
    if isinstance(model, Path):
        if not model.is_dir():
            raise ConvertError(f"{model} is not a model folder", "Give the folder that save_pretrained wrote.")
        config = check_folder(model, request.trust_code)
        if task_name is None:
            task_name, why = infer_task(config)
        else:
            why = "given with --task"
        task = check_task(task_name, why)
        info.path = str(model)
        info.sha256 = sha256_files(sorted(p for p in model.rglob("*") if p.is_file()))
        model = _load_folder(transformers, model, task, request.trust_code)
    else:
        if not isinstance(model, transformers.PreTrainedModel):
            raise ConvertError(
                f"a task goes with a Hugging Face Transformers model, and this model is a {type(model).__name__}",
                "Give a transformers model (or the folder save_pretrained wrote), or drop the task.",
            )
        if task_name is None:
            task_name, why = infer_task(model.config)
        else:
            why = "given with task="
        task = check_task(task_name, why)
        info.kind = "object"
    model.eval()
    info.task, info.task_reason = task.name, why
    info.description = f"{type(model).__name__} ({model.config.model_type}), task {task.name}: {why}"
    config = model.config
    if task.name == "feature-extraction" and getattr(config, "is_encoder_decoder", False):
        model = model.get_encoder()  # an encoder-decoder's features are its encoder's
        info.description += "; its encoder"
    parameters = list(inspect.signature(model.forward).parameters)
    if task.with_past and getattr(config, "is_encoder_decoder", False):
        layout, specs, ranges = seq2seq_layout(model)
        module, convention = seq2seq_decoder_with_past(model, layout, specs), CallConvention()
        info.description += "; its decoder with its cache (its encoder: --task feature-extraction)"
    elif task.with_past:
        specs, ranges = _model_inputs(config, parameters, request)
        cache_argument = _cache_parameter(model)
        if cache_argument is None:
            # a generating model whose config keeps a key/value cache (use_cache) takes it under some argument: finding
            # none is the library's API, not the model (XLNet's memories, say, are no such cache)
            if model.can_generate() and getattr(config, "use_cache", None) is not None:
                raise library_mismatch(
                    "transformers",
                    f"{type(model).__name__} generates text, yet its forward declares no cache argument (a parameter typed "
                    "Cache, or named cache or past_key_values)",
                )
            raise ConvertError(
                f"{type(model).__name__} takes no cache, so it cannot be exported for {task.name}", "Use --task text-generation."
            )
        layout = cache_layout(model, "position_ids" in parameters)
        specs, ranges = _with_past_specs(specs, layout, ranges)
        module, convention = decoder_with_past(model, layout, cache_argument), CallConvention()
    else:
        specs, ranges = _model_inputs(config, parameters, request)
        if hasattr(config, "use_cache"):
            config.use_cache = False  # outputs are the task's fields, with no cache object among them
        module, convention = model, CallConvention(keywords=tuple(s.name for s in specs))
        layout = None
    if request.inputs:
        given = {s.name: s for s in request.inputs}
        unknown = sorted(set(given) - {s.name for s in specs})
        if unknown:
            raise ConvertError(
                f"--input names '{unknown[0]}', which the {task.name} model does not take",
                "Its inputs are: " + ", ".join(s.name for s in specs) + ".",
            )
        specs = tuple(given.get(s.name, s) for s in specs)
        ranges = {k: v for k, v in ranges.items() if any(k in s.symbols for s in specs)}
    source = TorchSource(module, info, specs, {}, ranges, convention)
    source.generation = layout
    return source


def _load_folder(transformers, folder: Path, task: Task, trust_code: bool):
    auto = getattr(transformers, task.auto_class)
    safetensors = any(p.suffix == ".safetensors" for p in folder.iterdir())
    with _offline():
        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=trust_code)
        except (OSError, ValueError, KeyError) as exc:
            raise ConvertError(
                f"transformers cannot read the config of {folder}: {first_line(exc)}",
                "Check that the folder was written by save_pretrained with a transformers version that knows this model type.",
            ) from exc
        try:
            return auto.from_pretrained(
                str(folder), config=config, local_files_only=True, trust_remote_code=trust_code, use_safetensors=safetensors
            )
        except ValueError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise ConvertError(f"transformers cannot load {folder}: {first_line(exc)}", "Check that the folder is complete.") from exc
            inferred, _ = infer_task(config)
            raise ConvertError(
                f"a {type(config).__name__} model has no {task.auto_class} head, so it cannot be exported for the task {task.name}",
                f"Its architectures ({', '.join(config.architectures or ['none'])}) fit --task {inferred}. {TASK_HINT}",
            ) from exc
        except OSError as exc:
            raise ConvertError(
                f"transformers cannot load the weights of {folder}: {first_line(exc)}",
                "Check that the folder is complete (every shard its index names).",
            ) from exc


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _model_inputs(config, parameters: list[str], request: SourceRequest) -> tuple[tuple[InputSpec, ...], dict[str, tuple[int, int | None]]]:
    """The task model's inputs from its config: text, image or audio, as its forward names them."""
    ranges: dict[str, tuple[int, int | None]] = {}
    if "input_ids" in parameters:
        text = _text_config(config)
        specs = [InputSpec("input_ids", "int64", ("B", "S"), 0, text.vocab_size - 1)]
        if "attention_mask" in parameters:
            specs.append(InputSpec("attention_mask", "int64", ("B", "S")))
        type_vocab = getattr(text, "type_vocab_size", None)
        if "token_type_ids" in parameters and type_vocab:
            specs.append(InputSpec("token_type_ids", "int64", ("B", "S"), 0, type_vocab - 1))
        positions = getattr(text, "max_position_embeddings", None)
        if positions:
            ranges["S"] = (1, positions - position_offset(text))
        return tuple(specs), ranges
    if "pixel_values" in parameters:
        size = getattr(config, "image_size", 224)
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        return (InputSpec("pixel_values", "float32", ("B", getattr(config, "num_channels", 3), height, width)),), ranges
    if "input_features" in parameters:
        frames = 2 * config.max_source_positions if hasattr(config, "max_source_positions") else 3000
        return (InputSpec("input_features", "float32", ("B", config.num_mel_bins, frames)),), ranges
    if "input_values" in parameters:
        return (InputSpec("input_values", "float32", ("B", "T"), -1.0, 1.0),), ranges
    raise ConvertError(
        f"cannot tell the inputs of this model from its forward ({', '.join(parameters[:4])}...)",
        "Give every input with --input name:dtype[dims].",
    )


def position_offset(config) -> int:
    """Positions a model's position table keeps before the first token (RoBERTa-style models count from the padding id)."""
    return (
        config.pad_token_id + 1 if config.model_type in ("roberta", "xlm-roberta", "camembert") and config.pad_token_id is not None else 0
    )


def cache_layout(model, position_ids: bool) -> CacheLayout:
    """The cache's layout, read from one step of the decoder on one token (the config's head counts vary by family)."""
    torch = require_torch()
    with torch.no_grad():
        out = model(input_ids=torch.zeros((1, 1), dtype=torch.int64), use_cache=True)
    return _layout_of(out, position_ids=position_ids)


# What transformers has called the cache argument and output field: ``cache`` since 5.24, ``past_key_values`` before
# (a deprecated alias until 5.40). Read only where the signature's annotations do not name the Cache type.
CACHE_NAMES = ("cache", "past_key_values")
_CACHE_TYPE = re.compile(r"\b(Cache|EncoderDecoderCache|DynamicCache)\b")  # the annotation of the cache argument


def _cache_parameter(model) -> str | None:
    """The forward parameter that takes the cache: the one annotated with transformers' ``Cache`` type, else one of
    the names transformers has used for it, else None (a model without a cache)."""
    parameters = inspect.signature(model.forward).parameters
    typed = [name for name, p in parameters.items() if _CACHE_TYPE.search(str(p.annotation))]
    if len(typed) == 1:
        return typed[0]
    return next((name for name in CACHE_NAMES if name in parameters), None)


def _cache_of(out):
    """The cache a decoder step returned: the output's field holding a transformers ``Cache``, else its field of a name
    transformers has used for it."""
    from transformers import Cache

    for value in out.values():
        if isinstance(value, Cache):
            return value
    for name in CACHE_NAMES:
        if out.get(name) is not None:
            return out[name]
    raise library_mismatch(
        "transformers", f"a decoder step's {type(out).__name__} holds no cache among its fields ({', '.join(out.keys())})"
    )


def _layout_of(out, **facts) -> CacheLayout:
    """The layout of the cache a decoder step returned, with the facts its inputs add."""
    layers = _cache_layers(_cache_of(out))
    key = layers[0][0]
    return CacheLayout(
        layers=len(layers),
        kv_heads=int(key.shape[1]),
        head_dim=int(key.shape[3]),
        dtype=str(key.dtype).removeprefix("torch."),
        vocab_size=int(out.logits.shape[-1]),
        **facts,
    )


def _cache_from(inputs: dict, layout: CacheLayout, config):
    """A DynamicCache holding the past keys and values of a flat feed, layer by layer (its layers as the config makes
    them: sliding-window ones where the model has them)."""
    from transformers import DynamicCache

    cache = DynamicCache(config=config)
    names = layout.past_names()
    for i in range(layout.layers):
        cache.update(inputs[names[2 * i]], inputs[names[2 * i + 1]], i)
    return cache


def _outputs(out, layout: CacheLayout) -> dict:
    """``logits`` and the cache a step returned, named ``present`` as its inputs are named ``past_key_values``."""
    outputs = {"logits": out.logits}
    names = [name.replace("past_key_values", "present", 1) for name in layout.past_names()]
    for i, (keys, values) in enumerate(_cache_layers(_cache_of(out))):
        outputs[names[2 * i]], outputs[names[2 * i + 1]] = keys, values
    return outputs


def _by_name(module_class, names: list[str]):
    """Declare one forward parameter per input (dots made underscores), so torch.export binds its inputs by name."""
    parameter = inspect.Parameter.POSITIONAL_OR_KEYWORD
    module_class.forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", parameter), *(inspect.Parameter(n.replace(".", "_"), parameter) for n in names)]
    )
    return module_class().eval()


def _cache_layers(cache) -> list[tuple[Any, Any]]:
    """(keys, values) per layer of a transformers cache (``.layers`` since transformers 4.56, the legacy tuple before);
    an encoder-decoder's self-attention cache (its cross-attention is computed from the encoder's outputs)."""
    torch = require_torch()
    cache = getattr(cache, "self_attention_cache", cache)
    if not hasattr(cache, "layers"):
        return [(k, v) for k, v in cache]
    layers = [(getattr(layer, "keys", None), getattr(layer, "values", None)) for layer in cache.layers]
    if not layers or not all(isinstance(part, torch.Tensor) for layer in layers for part in layer):
        raise ConvertError(
            f"the model's cache ({type(cache).__name__}) holds no key and value tensors per layer (a state-space or recurrent "
            "cache), and this tool exports decoders with a key/value cache only",
            "Use --task text-generation (the decoder without its cache).",
        )
    return layers


def _with_past_specs(specs: tuple[InputSpec, ...], layout: CacheLayout, ranges: dict) -> tuple[tuple[InputSpec, ...], dict]:
    by_name = {s.name: s for s in specs}
    text = [by_name["input_ids"], InputSpec("attention_mask", "int64", ("B", "P+S"))]
    if layout.position_ids:
        high = ranges.get("S", (1, None))[1]
        text.append(InputSpec("position_ids", "int64", ("B", "S"), 0, (high or 2048) - 1))
    past = [InputSpec(name, layout.dtype, ("B", layout.kv_heads, "P", layout.head_dim)) for name in layout.past_names()]
    return (*text, *past), {**ranges, "P": (0, None)}


def decoder_with_past(model, layout: CacheLayout, cache_argument: str):
    """The decoder as a module over flat tensors named as Optimum names them: ``input_ids, attention_mask,
    [position_ids,] past_key_values.N.key, past_key_values.N.value...`` in; ``logits, present.N.key,
    present.N.value...`` out. Its forward declares one parameter per input, so torch.export sees them by name."""
    torch = require_torch()
    names = ["input_ids", "attention_mask", *(["position_ids"] if layout.position_ids else []), *layout.past_names()]

    class DecoderWithPast(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *values):
            inputs = dict(zip(names, values))
            step = {name: inputs[name] for name in ("input_ids", "attention_mask", "position_ids") if name in inputs}
            step[cache_argument] = _cache_from(inputs, layout, self.model.config)
            return _outputs(self.model(**step, use_cache=True), layout)

    return _by_name(DecoderWithPast, names)


def seq2seq_layout(model) -> tuple[CacheLayout, tuple[InputSpec, ...], dict[str, tuple[int, int | None]]]:
    """An encoder-decoder's decoder with its self-attention cache: the layout read from one step on a one-token start,
    and its inputs: ``input_ids``, ``encoder_attention_mask`` (where the encoder takes a mask), ``encoder_hidden_states``
    (at the audio encoder's fixed length ``max_source_positions``, else of any length ``E``), the cache."""
    torch = require_torch()
    config = model.config
    text = _text_config(config)
    audio = "input_features" in inspect.signature(model.get_encoder().forward).parameters
    frames = config.max_source_positions if audio else None
    with torch.no_grad():
        out = model(
            decoder_input_ids=torch.zeros((1, 1), dtype=torch.int64),
            encoder_outputs=(torch.zeros((1, frames or 2, config.d_model)),),
            use_cache=True,
        )
    layout = _layout_of(out, position_ids=False, attention_mask=False, infix=".decoder")
    specs = [InputSpec("input_ids", "int64", ("B", "S"), 0, text.vocab_size - 1)]
    if not audio:
        specs.append(InputSpec("encoder_attention_mask", "int64", ("B", "E")))
    specs.append(InputSpec("encoder_hidden_states", layout.dtype, ("B", frames or "E", config.d_model)))
    specs += [InputSpec(name, layout.dtype, ("B", layout.kv_heads, "P", layout.head_dim)) for name in layout.past_names()]
    ranges: dict[str, tuple[int, int | None]] = {"P": (0, None)}
    if getattr(config, "max_target_positions", None):
        ranges["S"] = (1, config.max_target_positions)
    return layout, tuple(specs), ranges


def seq2seq_decoder_with_past(model, layout: CacheLayout, specs: tuple[InputSpec, ...]):
    """An encoder-decoder's decoder over flat tensors: ``input_ids, [encoder_attention_mask,] encoder_hidden_states,
    past_key_values.N.decoder.key/value...`` in, ``logits, present.N.decoder.key/value...`` out. The cross-attention is
    computed from the encoder's outputs at every step (its cache is not an input). Its forward declares one parameter
    per input, so torch.export sees them by name."""
    torch = require_torch()
    import numpy as np
    from transformers import DynamicCache, EncoderDecoderCache

    names = [s.name for s in specs]
    audio = "encoder_attention_mask" not in names
    cache_argument = _cache_parameter(model)
    if cache_argument is None:
        raise library_mismatch(
            "transformers", f"{type(model).__name__}'s forward declares no cache argument (typed Cache, or named cache or past_key_values)"
        )

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *values):
            inputs = dict(zip(names, values))
            out = self.model(
                decoder_input_ids=inputs["input_ids"],
                encoder_outputs=(inputs["encoder_hidden_states"],),
                attention_mask=inputs.get("encoder_attention_mask"),
                use_cache=True,
                **{
                    cache_argument: EncoderDecoderCache(
                        _cache_from(inputs, layout, self.model.config), DynamicCache(config=self.model.config)
                    )
                },
            )
            return _outputs(out, layout)

        def generation_inputs(self, seed: int):
            """The start token for 2 prompts, and the encoder's outputs for 2 seeded encoder inputs (5 tokens, or audio
            features at the encoder's length)."""
            config = self.model.config
            encoder = self.model.get_encoder()
            rng = np.random.default_rng(seed + 7919)
            context = {}
            with torch.no_grad():
                if audio:
                    features = rng.standard_normal((2, config.num_mel_bins, 2 * config.max_source_positions)).astype(np.float32)
                    states = encoder(input_features=torch.from_numpy(features)).last_hidden_state
                else:
                    context["encoder_attention_mask"] = np.ones((2, 5), dtype=np.int64)
                    ids = torch.from_numpy(rng.integers(0, layout.vocab_size, size=(2, 5)))
                    states = encoder(input_ids=ids, attention_mask=torch.from_numpy(context["encoder_attention_mask"])).last_hidden_state
            context["encoder_hidden_states"] = states.numpy()
            return np.full((2, 1), config.decoder_start_token_id or 0, dtype=np.int64), context

    return _by_name(Decoder, names)
