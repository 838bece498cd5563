"""Models made of several networks that run together, told from their folder before any framework is imported.

An encoder-decoder (T5, BART, Marian, Whisper, a VisionEncoderDecoder), a dual encoder (CLIP, SigLIP) and a diffusion
pipeline (a ``model_index.json`` folder) are each converted as their components, one run per component, into one
report with one verdict; then the components' artifacts are run together against the library's own assembled model
(``assembled``, a ``module:function`` run in the worker). Each component's artifacts are named as Optimum names them,
so the output folder is one Optimum loads.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from convert.errors import ConvertError
from convert.text import did_you_mean


@dataclass(frozen=True)
class Component:
    name: str  # what --component names, and the component's folder under --out
    stem: str  # its artifacts' file name stem: model.onnx of a diffusion pipeline's unet/, encoder_model.onnx beside it
    description: str


@dataclass(frozen=True)
class Composite:
    kind: str  # encoder-decoder, dual-encoder, diffusion-pipeline
    components: tuple[Component, ...]
    # module:function that loads one component as a source (called in the worker with the SourceRequest)
    load: str
    # module:function, called in the worker with the components' artifacts (convert/assembled/)
    assembled: str
    # whether the components' artifacts lie in one folder (Optimum's seq2seq layout) instead of one folder each
    flat: bool
    why: str  # what in the folder says it is this composite
    # what the assembled check needs of the folder, checked before any component runs: raises a ConvertError where it lacks it
    ready: Callable[[Path], None] | None = None

    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.components)

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)

    def chosen(self, names: tuple[str, ...]) -> tuple[Component, ...]:
        """The components ``--component`` names (all where it names none), in the composite's order."""
        unknown = [n for n in names if n not in self.names()]
        if unknown:
            raise ConvertError(
                f"--component names '{unknown[0]}', which this {self.kind} ({self.why}) does not have",
                did_you_mean(unknown[0], self.names()) + f"Its components are: {', '.join(self.names())}.",
            )
        return tuple(c for c in self.components if not names or c.name in names)


ENCODER_DECODER = (
    Component("encoder", "encoder_model", "the encoder: its inputs to last_hidden_state"),
    Component(
        "decoder",
        "decoder_model",
        "the decoder's first step: the start tokens and the encoder's states to logits and both caches (present.N.decoder.*, "
        "present.N.encoder.*)",
    ),
    Component(
        "decoder_with_past",
        "decoder_with_past_model",
        "the decoder's later steps: one token and both caches (past_key_values.N.decoder.*, past_key_values.N.encoder.*) "
        "to logits and the grown self-attention cache",
    ),
)
DUAL_ENCODER = (
    Component("text_model", "text_model", "the text tower: token ids to its projected (unnormalised) text_embeds"),
    Component("vision_model", "vision_model", "the vision tower: pixel values to its projected (unnormalised) image_embeds"),
    Component("joint", "model", "the joint model: text and images to logits_per_image and logits_per_text"),
)
DIFFUSION_PIPELINE = (
    Component("text_encoder", "model", "the text encoder: token ids to the prompt's hidden states"),
    Component("unet", "model", "the denoiser: a noisy latent, its timestep and the prompt's states to the predicted noise"),
    Component("vae_decoder", "model", "the autoencoder's decoder: a latent to the image"),
)
# The seq2seq tasks (Optimum's names) whose model is an encoder-decoder: given with --task, still the whole model
SEQ2SEQ_TASKS = ("text2text-generation-with-past", "automatic-speech-recognition-with-past", "image-to-text-with-past")
# config model types of an encoder and a decoder joined by transformers' generic classes
JOINED_TYPES = ("vision-encoder-decoder", "speech-encoder-decoder", "encoder-decoder")
DUAL_ENCODER_ARCHITECTURES = ("CLIPModel", "SiglipModel", "Siglip2Model")


@dataclass(frozen=True)
class CompositeKind:
    """A kind of model made of several networks, declared once: its components, how one is loaded, the check of them
    run together, and how a folder is told to be one (``detect``: why the folder is one, or None)."""

    name: str  # the report's ``composite``
    components: tuple[Component, ...]
    load: str  # module:function that loads one component as a source (called in the worker with the SourceRequest)
    assembled: str  # module:function, called in the worker with the components' artifacts (convert/assembled/)
    flat: bool  # the components' artifacts lie in one folder (Optimum's seq2seq layout) instead of one folder each
    detect: Callable[[Path, str | None, str | None], str | None]  # (folder, task, framework) -> why it is one, or None
    ready: Callable[[Path], None] | None = None  # as Composite.ready

    def of(self, why: str) -> Composite:
        return Composite(self.name, self.components, self.load, self.assembled, self.flat, why, self.ready)


def _pipeline_index(folder: Path, task: str | None, framework: str | None) -> dict | None:
    """A diffusers folder's model_index.json, where the run takes the folder as a pipeline (no --task names one network)."""
    return _json(folder / "model_index.json") if task is None and framework in (None, "diffusers") else None


def _is_diffusion_pipeline(folder: Path, task: str | None, framework: str | None) -> str | None:
    index = _pipeline_index(folder, task, framework)
    if index is not None and all(isinstance(index.get(part), list) for part in ("text_encoder", "unet", "vae")):
        return f"model_index.json names {index.get('_class_name', 'a pipeline')} with a text encoder, a UNet and a VAE"
    return None


def _transformers_config(folder: Path, task: str | None, framework: str | None) -> dict | None:
    """The config.json of a transformers model folder taken whole: not a pipeline's, nor a PEFT adapter's."""
    if framework == "diffusers" or _pipeline_index(folder, task, framework) is not None or (folder / "adapter_config.json").is_file():
        return None
    return _json(folder / "config.json")


def _is_encoder_decoder(folder: Path, task: str | None, framework: str | None) -> str | None:
    config = _transformers_config(folder, task, framework)
    if config is None or task not in (None, *SEQ2SEQ_TASKS):
        return None
    model_type = config.get("model_type", "")
    if config.get("is_encoder_decoder") or model_type in JOINED_TYPES:
        return f"config.json says {(config.get('architectures') or [''])[0] or model_type} is an encoder-decoder"
    return None


def _is_dual_encoder(folder: Path, task: str | None, framework: str | None) -> str | None:
    config = _transformers_config(folder, task, framework)
    # a task given names one network: zero-shot-image-classification the joint model alone, as a run of one network
    architecture = (config.get("architectures") or [""])[0] if config is not None and task is None else ""
    return f"config.json names {architecture}, a text and a vision tower" if architecture in DUAL_ENCODER_ARCHITECTURES else None


def _names_decoder_start(folder: Path) -> None:
    """Refuse a folder that names no token to start decoding from, which transformers' generate needs (its generation
    config's decoder_start_token_id, else its bos_token_id, made from config.json's where the folder has no
    generation_config.json): the generation check could not run once every component had."""
    config = _json(folder / "config.json") or {}
    # a joined model's (VisionEncoderDecoder's) own tokens may be in its decoder's config
    configs = [_json(folder / "generation_config.json") or {}, config, *(part for part in config.values() if isinstance(part, dict))]
    if any(c.get(name) is not None for c in configs for name in ("decoder_start_token_id", "bos_token_id")):
        return
    raise ConvertError(
        f"{folder} names no token to start decoding from (decoder_start_token_id or bos_token_id, in generation_config.json "
        "or config.json): transformers' generate refuses it, and the components could not be run together against it",
        "Set the token the model was trained to start from and save it again (T5 starts from its pad token: "
        "model.generation_config.decoder_start_token_id = model.config.pad_token_id), or convert some components only "
        "with --component, which runs no generation check.",
    )


# Every composite kind, tried in this order; the report's ``composite`` field takes their names
# (tests/convert/unit/test_composite_units.py holds the report schema to them).
COMPOSITE_KINDS = (
    CompositeKind(
        name="diffusion-pipeline",
        components=DIFFUSION_PIPELINE,
        load="convert.sources.diffusion_pipeline:load_pipeline_component",
        assembled="convert.assembled.diffusion:check_pipeline",
        flat=False,
        detect=_is_diffusion_pipeline,
    ),
    CompositeKind(
        name="encoder-decoder",
        components=ENCODER_DECODER,
        load="convert.sources.encoder_decoder:load_encoder_decoder_component",
        assembled="convert.assembled.encoder_decoder:check_generation",
        flat=True,
        detect=_is_encoder_decoder,
        ready=_names_decoder_start,
    ),
    CompositeKind(
        name="dual-encoder",
        components=DUAL_ENCODER,
        load="convert.sources.dual_encoder:load_dual_encoder_component",
        assembled="convert.assembled.dual_encoder:check_similarity",
        flat=False,
        detect=_is_dual_encoder,
    ),
)
COMPONENTS = {kind.name: kind.components for kind in COMPOSITE_KINDS}


def composite_of(model: Any, task: str | None, framework: str | None) -> Composite | None:
    """The composite the model folder holds, or None: a model file, an object, a folder of one network, or a task that
    names one network (``--task feature-extraction`` of an encoder-decoder is its encoder alone)."""
    if not isinstance(model, (str, os.PathLike)) or framework not in (None, "transformers", "diffusers"):
        return None
    folder = Path(model)
    if not folder.is_dir():
        return None
    for kind in COMPOSITE_KINDS:
        why = kind.detect(folder, task, framework)
        if why:
            return kind.of(why)
    return None


def _json(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
