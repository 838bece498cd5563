"""A dual encoder (CLIP, SigLIP) as its three components, each a source of its own, named as Optimum names them.

- ``text_model``: ``input_ids [B,S]`` (and ``attention_mask [B,S]`` where the model is given one) to ``text_embeds`` and
  ``last_hidden_state``, as the library's ``get_text_features`` returns them (Optimum's text tower with projection).
- ``vision_model``: ``pixel_values [B,C,H,W]`` at the config's image size to ``image_embeds`` and ``last_hidden_state``,
  as ``get_image_features`` returns them.
- ``joint``: the whole model, ``input_ids [T,S]``, ``pixel_values [B,C,H,W]`` (and ``attention_mask [T,S]``) to
  ``logits_per_image [B,T]``, ``logits_per_text [T,B]``, ``text_embeds``, ``image_embeds``, as its forward returns them.
  Texts and images are counted apart (``T``, ``B``): a query's texts and a gallery's images rarely number the same, and
  validation sizes the two differently, so an artifact that ties them fails.

The towers' embeddings are the projected features unnormalised, as ``get_*_features`` and Optimum's towers give them
(the norm is information a caller may want; a retrieval index divides by it). The joint model's are normalised, as its
forward returns them; its logits are ``exp(logit_scale)`` times their cosine similarity (plus SigLIP's ``logit_bias``).

SigLIP takes no attention mask, as Optimum exports it: it was trained on texts padded to a fixed length with the pad
token and no mask, pools the last position, and its tokenizer gives no mask. Its text model takes any length up to its
positions all the same. SigLIP 2 (``Siglip2Model``) is refused: its images are patch sequences of a size each image
chooses (``pixel_attention_mask``, ``spatial_shapes``), whose positions are resized per image.

The folder is checked and loaded as the transformers source loads a folder (safetensors only without ``trust_code``, no
code its config names, transformers' load report a refusal where a weight was dropped or freshly initialised).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from convert.backends.huggingface import image_domain, position_offset, stored_dtype
from convert.backends.torch import CallConvention, require_torch
from convert.errors import ConvertError, require
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.request import SourceRequest
from convert.sources.torch_model import TorchSource
from convert.sources.transformers import TASKS, _load_folder, check_folder
from convert.specs import InputSpec

# the dual encoders this tool converts, and whether their text tower is given a padding mask (as Optimum exports them)
TAKES_MASK = {"CLIPModel": True, "SiglipModel": False}
TASK = TASKS["zero-shot-image-classification"]  # whose Auto class loads CLIPModel and SiglipModel


def load_dual_encoder_component(request: SourceRequest) -> TorchSource:
    """The component ``request.component`` names of the dual encoder in the folder ``request.model``."""
    model, info = load_dual_encoder(request.model, request.trust_code, request.dtype)
    component = request.component
    architecture = type(model).__name__
    text = model.config.text_config
    vision = model.config.vision_config
    dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
    texts = "B" if component == "text_model" else "T"
    text_specs = [InputSpec("input_ids", "int64", (texts, "S"), 0, text.vocab_size - 1)]
    if TAKES_MASK[architecture]:
        text_specs.append(InputSpec("attention_mask", "int64", (texts, "S")))
    size = vision.image_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    pixels = InputSpec("pixel_values", dtype, ("B", vision.num_channels, height, width), **image_domain(request.model))
    positions = {"S": (1, text.max_position_embeddings - position_offset(text))}
    if component == "text_model":
        specs, ranges = tuple(text_specs), positions
    elif component == "vision_model":
        specs, ranges = (pixels,), {}
    else:
        # the forward's own order (input_ids, pixel_values, attention_mask), as Optimum's joint export orders them
        specs, ranges = (text_specs[0], pixels, *text_specs[1:]), positions
    module = _component_module(require_torch(), model, component)
    if request.inputs:
        joint = (text_specs[0].name, pixels.name, *(s.name for s in text_specs[1:]))
        specs = _with_given_inputs(specs, request.inputs, component, joint)
        ranges = {symbol: bounds for symbol, bounds in ranges.items() if any(symbol in s.symbols for s in specs)}
    info.description += f"; its {component}: {', '.join(s.name for s in specs)} to {', '.join(module.outputs)}"
    return TorchSource(module.eval(), info, specs, {}, ranges, CallConvention(keywords=tuple(s.name for s in specs)))


def load_dual_encoder(folder: Any, trust_code: bool, dtype: str = "float32") -> tuple[Any, SourceInfo]:
    """The library's own model of a dual-encoder folder (in eval mode), with the refusals of the transformers source,
    and the source's SourceInfo."""
    require_torch()
    transformers = require("transformers", "Loading a Hugging Face Transformers model")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    folder = Path(folder)
    config = check_folder(folder, trust_code)
    architecture = (config.get("architectures") or [""])[0]
    if architecture == "Siglip2Model":
        raise ConvertError(
            f"{folder} holds a SigLIP 2 model (Siglip2Model), whose images are patch sequences of a size each image chooses "
            "(pixel_attention_mask, spatial_shapes) with positions resized per image, which this version does not export",
            "Convert a SigLIP (SiglipModel) or CLIP (CLIPModel) folder; a SigLIP 2 model is not converted by this version.",
        )
    if architecture not in TAKES_MASK:
        raise ConvertError(
            f"{folder} names the architecture {architecture or 'none'}, which is not a dual encoder this tool converts",
            f"Dual encoders converted as their towers: {', '.join(TAKES_MASK)}.",
        )
    model = _load_folder(transformers, folder, TASK, trust_code, architecture, False, dtype).eval()
    why = f"config.json names {architecture}, a text and a vision tower"
    stored = stored_dtype(config)
    computed = str(next(model.parameters()).dtype).removeprefix("torch.")
    if stored and stored != computed:
        why += f"; weights stored as {stored}, computed in {computed} (--dtype {dtype})"
    info = SourceInfo(
        framework="torch",
        kind="transformers",
        path=str(folder),
        sha256=sha256_files(sorted(p for p in folder.rglob("*") if p.is_file())),
        description=f"{architecture} ({model.config.model_type}): {why}",
        task=TASK.name,
        task_reason=why,
    )
    return model, info


def features(output) -> tuple[Any, Any]:
    """(projected features, last hidden state) of ``get_text_features`` / ``get_image_features``: a ModelOutput whose
    ``pooler_output`` is projected since transformers 5; the projected tensor alone before (no hidden state: None)."""
    if require_torch().is_tensor(output):
        return output, None
    return output.pooler_output, output.last_hidden_state


def _component_module(torch, model, component: str):
    """The component as a module over its inputs by name (torch.export binds them by the forward's parameters) to a dict
    of its outputs, whose names it lists in ``outputs``."""

    class Component(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

    class TextTower(Component):
        outputs = ("text_embeds", "last_hidden_state")

        def forward(self, input_ids, attention_mask=None):
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            projected, hidden = features(self.model.get_text_features(**inputs))
            if hidden is None:  # transformers 4: the features are the projected tensor alone, the states the tower's
                hidden = self.model.text_model(**inputs).last_hidden_state
            return {"text_embeds": projected, "last_hidden_state": hidden}

    class VisionTower(Component):
        outputs = ("image_embeds", "last_hidden_state")

        def forward(self, pixel_values):
            projected, hidden = features(self.model.get_image_features(pixel_values=pixel_values))
            if hidden is None:
                hidden = self.model.vision_model(pixel_values=pixel_values).last_hidden_state
            return {"image_embeds": projected, "last_hidden_state": hidden}

    class Joint(Component):
        outputs = ("logits_per_image", "logits_per_text", "text_embeds", "image_embeds")

        def forward(self, input_ids, pixel_values, attention_mask=None):
            out = self.model(input_ids=input_ids, pixel_values=pixel_values, attention_mask=attention_mask, return_dict=True)
            return {name: out[name] for name in self.outputs}

    return {"text_model": TextTower, "vision_model": VisionTower, "joint": Joint}[component]()


def _with_given_inputs(
    specs: tuple[InputSpec, ...], given_specs: tuple[InputSpec, ...], component: str, joint: tuple[str, ...]
) -> tuple[InputSpec, ...]:
    """The specs with those ``--input`` gives in their place: a component's inputs are fixed, their shapes may be pinned.
    ``joint``: the joint model's inputs, which a tower refused an input of the other tower points to."""
    given = {s.name: s for s in given_specs}
    unknown = sorted(set(given) - {s.name for s in specs})
    if unknown:
        both = component != "joint" and set(given) <= set(joint)
        raise ConvertError(
            f"--input names '{unknown[0]}', which the dual encoder's {component} does not take"
            + (": inputs of both towers are its joint model's" if both else ""),
            f"Its inputs are: {', '.join(s.name for s in specs)}."
            + (
                f" Convert the joint model alone with --component joint (it takes {', '.join(joint)}), or give each "
                "tower its own inputs in a run of --component text_model or --component vision_model."
                if both
                else ""
            ),
        )
    return tuple(given.get(s.name, s) for s in specs)
