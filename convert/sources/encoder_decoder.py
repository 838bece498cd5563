"""An encoder-decoder's components (T5, BART, Marian, Whisper, a VisionEncoderDecoder), each a source over flat tensors
named as Optimum names them, so that its ``ORTModelForSeq2SeqLM`` (or ``...SpeechSeq2Seq``, ``...Vision2Seq``) loads
the three files side by side:

- ``encoder``: ``input_ids, attention_mask`` (or ``input_features``, or ``pixel_values``) to ``last_hidden_state``;
- ``decoder``, the first step: ``input_ids, [encoder_attention_mask,] encoder_hidden_states`` to ``logits`` and both
  caches, ``present.N.decoder.key/value`` (self-attention) and ``present.N.encoder.key/value`` (cross-attention);
- ``decoder_with_past``, every later step: ``input_ids, [encoder_attention_mask,]`` and both caches
  (``past_key_values.N.decoder.*`` of length ``P``, ``past_key_values.N.encoder.*`` of the encoder's length ``E``) to
  ``logits`` and the grown self-attention cache. The cross-attention is read from its cache, never recomputed.

The folder is loaded as the class its config names, with transformers' load report a refusal where a weight was dropped
or freshly initialised (convert/sources/transformers.py)."""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from convert.backends.huggingface import SEQ2SEQ_ARGUMENTS, by_name, cache_layers, cache_of, dynamic_cache, seq2seq_arguments, with_past
from convert.backends.torch import CallConvention, require_torch
from convert.errors import ConvertError, require
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.request import SourceRequest
from convert.sources.torch_model import TorchSource
from convert.sources.transformers import Task, _load_folder, _text_config, check_folder, check_task, infer_task
from convert.specs import InputSpec
from convert.validators.generation import PAST

ENCODER_LENGTH = "E"
# transformers' generic encoder-decoder classes, which no task's Auto class table lists
JOINED = {
    "VisionEncoderDecoderModel": Task("image-to-text-with-past", "AutoModelForVision2Seq", True),
    "SpeechEncoderDecoderModel": Task("automatic-speech-recognition-with-past", "AutoModelForSpeechSeq2Seq", True),
    "EncoderDecoderModel": Task("text2text-generation-with-past", "AutoModelForSeq2SeqLM", True),
}


def load_encoder_decoder_model(folder: Path, task_name: str | None, trust_code: bool, dtype: str):
    """The encoder-decoder the folder holds, as the class its config names, and its task."""
    transformers = require("transformers", "Loading a Hugging Face Transformers model")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    config = check_folder(folder, trust_code)
    architecture = (config.get("architectures") or [None])[0]
    if architecture in JOINED:
        task = JOINED[architecture]
    else:
        task = check_task(task_name or infer_task(config)[0])
    if not task.with_past:
        raise ConvertError(f"the task {task.name} names one network of this encoder-decoder", "Drop --task, or give feature-extraction.")
    model = _load_folder(transformers, folder, task, trust_code, architecture, False, dtype)
    return model.eval(), task


def load_encoder_decoder_component(request: SourceRequest) -> TorchSource:
    require_torch()
    folder = Path(request.model)
    model, task = load_encoder_decoder_model(folder, request.task, request.trust_code, request.dtype)
    if request.inputs:
        raise ConvertError(
            f"--input gives the inputs of one network, and the {request.component} of an encoder-decoder takes those its "
            "encoder and cache fix",
            "Drop --input.",
        )
    info = SourceInfo(framework="torch", kind="transformers")
    info.path = str(folder)
    info.sha256 = sha256_files(sorted(p for p in folder.rglob("*") if p.is_file()))
    info.task, info.task_reason = task.name, f"the {request.component} of {type(model).__name__}"
    info.description = f"{type(model).__name__} ({model.config.model_type}), the {request.component} of the encoder-decoder"
    kind = encoder_kind(model)
    floating = str(next(model.parameters()).dtype).removeprefix("torch.")  # --dtype: what the states and caches hold
    if request.component == "encoder":
        specs, ranges = encoder_specs(model, kind, floating)
        return TorchSource(_encoder(model, [s.name for s in specs]), info, specs, {}, ranges, CallConvention())
    layers, heads, head_dim, cross_heads, cross_dim = cache_shape(model)
    text = _text_config(model.config.decoder if hasattr(model.config, "decoder") else model.config)
    specs = [InputSpec("input_ids", "int64", ("B", "S"), 0, text.vocab_size - 1)]
    if kind == "text":
        specs.append(InputSpec("encoder_attention_mask", "int64", ("B", ENCODER_LENGTH)))
    frames = encoder_frames(model, kind)
    ranges: dict[str, tuple[int, int | None]] = {}
    if request.component == "decoder":
        width = encoder_width(model)
        specs.append(InputSpec("encoder_hidden_states", floating, ("B", frames or ENCODER_LENGTH, width)))
        module = _first_step(model, [s.name for s in specs], layers)
    else:
        for i in range(layers):
            specs += [InputSpec(f"past_key_values.{i}.decoder.{part}", floating, ("B", heads, PAST, head_dim)) for part in ("key", "value")]
            specs += [
                InputSpec(f"past_key_values.{i}.encoder.{part}", floating, ("B", cross_heads, frames or ENCODER_LENGTH, cross_dim))
                for part in ("key", "value")
            ]
        module = _later_step(model, [s.name for s in specs], layers, frames)
        ranges[PAST] = (1, None)
    positions = getattr(text, "max_target_positions", None) or getattr(text, "max_position_embeddings", None)
    if positions:
        ranges["S"] = (1, positions // 2)
    return TorchSource(module, info, tuple(specs), {}, ranges, CallConvention())


def encoder_kind(model) -> str:
    """text, audio (mel features at a fixed length) or vision, from the encoder's forward."""
    parameters = inspect.signature(model.get_encoder().forward).parameters
    return "audio" if "input_features" in parameters else "vision" if "pixel_values" in parameters else "text"


def encoder_frames(model, kind: str) -> int | None:
    """The encoder's fixed output length, where it has one (Whisper's max_source_positions; a vision encoder's patches)."""
    if kind == "audio":
        return model.config.max_source_positions
    if kind == "vision":
        torch = require_torch()
        specs, _ = encoder_specs(model, kind)
        with torch.no_grad():
            pixels = torch.zeros(specs[0].shape({"B": 1}), dtype=model.dtype)
            return int(model.get_encoder()(pixel_values=pixels).last_hidden_state.shape[1])
    return None


def encoder_width(model) -> int:
    config = model.config
    encoder = getattr(config, "encoder", None)
    return getattr(encoder, "hidden_size", None) or getattr(config, "d_model", None) or config.hidden_size


def encoder_specs(model, kind: str, floating: str = "float32") -> tuple[tuple[InputSpec, ...], dict]:
    config = model.config
    if kind == "audio":
        return (InputSpec("input_features", floating, ("B", config.num_mel_bins, 2 * config.max_source_positions)),), {}
    if kind == "vision":
        vision = getattr(config, "encoder", config)
        size = vision.image_size
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        return (InputSpec("pixel_values", floating, ("B", getattr(vision, "num_channels", 3), height, width)),), {}
    text = _text_config(getattr(config, "encoder", config))
    positions = getattr(text, "max_position_embeddings", None)
    ranges = {"S": (1, positions // 2)} if positions else {}
    return (
        InputSpec("input_ids", "int64", ("B", "S"), 0, text.vocab_size - 1),
        InputSpec("attention_mask", "int64", ("B", "S")),
    ), ranges


def cache_shape(model) -> tuple[int, int, int, int, int]:
    """(layers, self-attention heads, head size, cross-attention heads, head size), read from one first step."""
    torch = require_torch()
    kind = encoder_kind(model)
    frames = encoder_frames(model, kind) or 3
    with torch.no_grad():
        out = model(
            decoder_input_ids=torch.zeros((1, 1), dtype=torch.int64),
            encoder_outputs=(torch.zeros((1, frames, encoder_width(model)), dtype=model.dtype),),
            use_cache=True,
        )
    cache = cache_of(out)
    own, cross = cache_layers(cache.self_attention_cache), cache_layers(cache.cross_attention_cache)
    return len(own), int(own[0][0].shape[1]), int(own[0][0].shape[3]), int(cross[0][0].shape[1]), int(cross[0][0].shape[3])


def _encoder(model, names: list[str]):
    torch = require_torch()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = model.get_encoder()

        def forward(self, *values):
            return {"last_hidden_state": self.encoder(**dict(zip(names, values))).last_hidden_state}

    return by_name(Encoder, names)


def _outputs(out, layers: int, with_cross: bool) -> dict:
    outputs = {"logits": out.logits}
    cache = cache_of(out)
    for i, (key, value) in enumerate(cache_layers(cache.self_attention_cache)[:layers]):
        outputs[f"present.{i}.decoder.key"], outputs[f"present.{i}.decoder.value"] = key, value
    if with_cross:
        for i, (key, value) in enumerate(cache_layers(cache.cross_attention_cache)[:layers]):
            outputs[f"present.{i}.encoder.key"], outputs[f"present.{i}.encoder.value"] = key, value
    return outputs


def _first_step(model, names: list[str], layers: int):
    """The decoder's first step: both caches start empty, and it returns both."""
    from transformers import DynamicCache, EncoderDecoderCache

    def step(inputs: dict) -> tuple[dict, Any]:
        return seq2seq_arguments(inputs, inputs["encoder_hidden_states"]), EncoderDecoderCache(DynamicCache(), DynamicCache())

    return with_past(model, names, step, lambda out: _outputs(out, layers, with_cross=True), SEQ2SEQ_ARGUMENTS)


def _later_step(model, names: list[str], layers: int, frames: int | None):
    """A later step: both caches in, the cross-attention read from its cache; the grown self-attention cache out."""
    torch = require_torch()
    from transformers import EncoderDecoderCache

    width = encoder_width(model)

    def step(inputs: dict) -> tuple[dict, Any]:
        own = dynamic_cache(
            (inputs[f"past_key_values.{i}.decoder.key"], inputs[f"past_key_values.{i}.decoder.value"]) for i in range(layers)
        )
        cross = dynamic_cache(
            (inputs[f"past_key_values.{i}.encoder.key"], inputs[f"past_key_values.{i}.encoder.value"]) for i in range(layers)
        )
        # the encoder's states are not an input: its cross-attention cache holds what the layers need of them; the
        # model's forward takes states of their shape all the same (their values are never read)
        batch, length = inputs["input_ids"].shape[0], inputs["past_key_values.0.encoder.key"].shape[2]
        states = torch.zeros((batch, length, width), dtype=inputs["past_key_values.0.encoder.key"].dtype)
        return seq2seq_arguments(inputs, states), EncoderDecoderCache(own, cross)

    return with_past(model, names, step, lambda out: _outputs(out, layers, with_cross=False), SEQ2SEQ_ARGUMENTS)
