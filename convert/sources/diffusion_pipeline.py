"""A diffusion pipeline folder (``model_index.json``, as ``DiffusionPipeline.save_pretrained`` writes it) as its three
networks, each a source of its own, named as Optimum names them:

- ``text_encoder``: ``input_ids [B,S]`` (S up to the text model's positions) to ``last_hidden_state`` (the pipeline's
  prompt embeddings) and ``pooler_output``;
- ``unet``: ``sample [B,C,H,W]`` (H and W at its config's sample_size), ``timestep [B]`` below the scheduler's
  training steps and ``encoder_hidden_states [B,S,D]`` to ``out_sample``, the predicted noise;
- ``vae_decoder``: ``latent_sample [B,C,H,W]`` to ``sample``, the image, as the autoencoder's ``decode`` gives it
  (the pipeline divides the latents by the VAE's scaling factor first, as Optimum's pipelines do outside the file).

Each network is loaded from the subfolder ``model_index.json`` names, as the class it names there, which must be one
whose inputs this tool knows (CLIPTextModel, UNet2DConditionModel, AutoencoderKL) and the one the subfolder's own
config names; with the refusals of the transformers and diffusers sources (safetensors only without ``trust_code``,
no code a config names, the library's load report a refusal where a weight was dropped or freshly initialised). An
index naming a class outside diffusers and transformers (a custom pipeline or component, loaded from code) is refused
without ``trust_code``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from convert.backends import native_stderr_silenced
from convert.backends.torch import CallConvention, require_torch
from convert.errors import ConvertError, require
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.diffusers import TRUST_HINT, _check_folder, _load, _model_class, _sample, _timestep, _unet_condition_inputs
from convert.sources.request import SourceRequest
from convert.sources.torch_model import TorchSource
from convert.sources.transformers import TASKS, _load_folder, check_folder
from convert.specs import InputSpec

INDEX = "model_index.json"
LIBRARIES = ("diffusers", "transformers")  # the libraries an index may name classes of without trust_code
# component -> (its subfolder's key in model_index.json, the classes whose inputs this tool knows)
COMPONENTS = {
    "text_encoder": ("text_encoder", ("CLIPTextModel",)),
    "unet": ("unet", ("UNet2DConditionModel",)),
    "vae_decoder": ("vae", ("AutoencoderKL",)),
}
OUTPUTS = {"text_encoder": ("last_hidden_state", "pooler_output"), "unet": ("out_sample",), "vae_decoder": ("sample",)}
INDEX_HINT = "Write the folder again with the pipeline's save_pretrained, or fix model_index.json."


def load_pipeline_component(request: SourceRequest) -> TorchSource:
    """The component ``request.component`` names of the diffusion pipeline in the folder ``request.model``."""
    torch = require_torch()
    folder = Path(request.model)
    index = read_index(folder, request.trust_code)
    component = request.component
    if request.dtype != "float32":
        raise ConvertError(
            f"a diffusion pipeline's components are converted in float32, and --dtype asks for {request.dtype}",
            "Drop --dtype; --optimize fp16 makes float16 artifacts of the float32 ones.",
        )
    model = load_component_model(folder, index, component, request.trust_code)
    given = {s.name: s for s in request.inputs}
    specs, ranges, why = _inputs(folder, model, component, given)
    unknown = sorted(set(given) - {s.name for s in specs})
    if unknown:
        raise ConvertError(
            f"--input names '{unknown[0]}', which the pipeline's {component} does not take",
            f"Its inputs are: {', '.join(s.name for s in specs)}.",
        )
    specs = tuple(given.get(s.name, s) for s in specs)
    ranges = {symbol: bounds for symbol, bounds in ranges.items() if any(symbol in s.symbols for s in specs)}
    subfolder, _ = COMPONENTS[component]
    info = SourceInfo(
        framework="torch",
        kind="diffusers",
        path=str(folder),
        sha256=sha256_files(sorted(p for p in folder.rglob("*") if p.is_file())),
        description=f"{index.get('_class_name')}'s {component}, {type(model).__name__} from {subfolder}/: "
        f"{', '.join(s.name for s in specs)} to {', '.join(OUTPUTS[component])}" + (f" ({why})" if why else ""),
    )
    module = _component_module(torch, model, component)
    return TorchSource(module, info, specs, {}, ranges, CallConvention(keywords=tuple(s.name for s in specs)))


def read_index(folder: Path, trust_code: bool) -> dict:
    """The folder's model_index.json, once every class it names is diffusers' or transformers' own (or ``trust_code``)."""
    path = folder / INDEX
    try:
        index = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConvertError(f"cannot read {path}: {exc}", INDEX_HINT) from exc
    if not isinstance(index, dict):
        raise ConvertError(f"{path} is not a JSON object", INDEX_HINT)
    diffusers = _diffusers()
    pipeline = index.get("_class_name")
    found = getattr(diffusers, pipeline, None) if isinstance(pipeline, str) and pipeline.isidentifier() else None
    if not (isinstance(found, type) and issubclass(found, diffusers.DiffusionPipeline)) and not trust_code:
        raise ConvertError(
            f"{path} names the pipeline {pipeline!r}, which is not one of diffusers' own pipelines: loading it runs its code",
            TRUST_HINT,
        )
    for key, value in index.items():
        if key.startswith("_") or not isinstance(value, list):
            continue
        library, name = (list(value) + [None, None])[:2]
        if library is None and name is None:  # a component the pipeline was saved without (safety_checker)
            continue
        if not _library_class(library, name) and not trust_code:
            raise ConvertError(
                f"{path} names {library}.{name} for its {key}, which is not a class of {' or '.join(LIBRARIES)}: loading "
                "it runs code from elsewhere",
                TRUST_HINT,
            )
    return index


def load_component_model(folder: Path, index: dict, component: str, trust_code: bool) -> Any:
    """The library's own model of the component (in eval mode), from the subfolder the index names, as the class it
    names, with the library's load report a refusal."""
    key, classes = COMPONENTS[component]
    entry = index.get(key)
    library, name = (list(entry) + [None, None])[:2] if isinstance(entry, list) else (None, None)
    subfolder = folder / key
    if name not in classes or library != ("transformers" if component == "text_encoder" else "diffusers"):
        raise ConvertError(
            f"{folder / INDEX} names {library}.{name} for its {key}, whose inputs this tool does not know",
            f"The pipeline's {component} is converted where it is one of: {', '.join(classes)}.",
        )
    if not subfolder.is_dir():
        raise ConvertError(f"{folder / INDEX} names a {key}, and the folder has no {key}/", INDEX_HINT)
    if library == "transformers":
        transformers = require("transformers", "Loading a Hugging Face Transformers model")
        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        config = check_folder(subfolder, trust_code)
        _same_class(name, (config.get("architectures") or [None])[0], subfolder, "architectures")
        return _load_folder(transformers, subfolder, TASKS["feature-extraction"], trust_code, name, False).eval()
    diffusers = _diffusers()
    config, safetensors = _check_folder(subfolder, trust_code)
    _same_class(name, config.get("_class_name"), subfolder, "_class_name")
    return _load(_model_class(diffusers, diffusers.ModelMixin, name, subfolder), subfolder, safetensors).eval()


def _diffusers():
    diffusers = require("diffusers", "Loading a diffusers pipeline")
    diffusers.utils.logging.set_verbosity_error()  # its load report is read and raised on, not logged
    diffusers.utils.logging.disable_progress_bar()
    with native_stderr_silenced():  # importing its models imports torchao, which reports on fd 2 the kernels it cannot load
        diffusers.ModelMixin  # noqa: B018
    return diffusers


def _library_class(library: Any, name: Any) -> bool:
    """Whether the index's [library, class] is a class of diffusers or transformers: a library may also be one of
    diffusers' pipeline modules, as Stable Diffusion's index names its safety checker (stable_diffusion)."""
    if not (isinstance(library, str) and library.isidentifier() and isinstance(name, str) and name.isidentifier()):
        return False
    if library in LIBRARIES:
        module = require(library, "Loading a diffusion pipeline")
    else:
        module = getattr(_diffusers().pipelines, library, None)
    return isinstance(getattr(module, name, None), type)


def _same_class(indexed: str, configured: Any, subfolder: Path, field: str) -> None:
    """Refuse a subfolder whose config names another class than the index: which model the folder means is unclear."""
    if configured != indexed:
        raise ConvertError(
            f"model_index.json names {indexed} for {subfolder.name}/, and {subfolder / 'config.json'} names {configured} "
            f"({field}): the folder says two things about what {subfolder.name}/ holds",
            INDEX_HINT,
        )


def _inputs(folder: Path, model, component: str, given: dict[str, InputSpec]) -> tuple[tuple[InputSpec, ...], dict, str]:
    """The component's input specs, the ranges of their symbols, and what fixed them."""
    config = model.config
    if component == "text_encoder":
        ids = InputSpec("input_ids", "int64", ("B", "S"), 0, config.vocab_size - 1)
        return (ids,), {"S": (1, config.max_position_embeddings)}, f"S up to its {config.max_position_embeddings} positions"
    if component == "unet":
        specs, _, why = _unet_condition_inputs(config, given)
        steps = _scheduler_steps(folder)
        if steps is None or "timestep" in given:
            return specs, {}, why
        sample, _, states = specs
        timestep, told = _timestep(config, given, steps, "the scheduler's num_train_timesteps")
        return (sample, timestep, states), {}, "; ".join(filter(None, (_sample(config, given)[1], told)))
    latent = InputSpec("latent_sample", "float32", ("B", config.latent_channels, "H", "W"))
    return (latent,), {}, "decoded as the autoencoder's decode"


def _scheduler_steps(folder: Path) -> int | None:
    """The training steps the pipeline's scheduler config names (its timesteps lie below), or None."""
    try:
        steps = json.loads((folder / "scheduler" / "scheduler_config.json").read_text()).get("num_train_timesteps")
    except (OSError, ValueError, AttributeError):
        return None
    return steps if isinstance(steps, int) and steps > 0 else None


def _component_module(torch, model, component: str):
    """The component as a module over its inputs by name (torch.export binds them by the forward's parameters) to a
    dict of its outputs under Optimum's names."""

    class Component(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

    class TextEncoder(Component):
        def forward(self, input_ids):
            out = self.model(input_ids=input_ids, return_dict=True)
            return {"last_hidden_state": out.last_hidden_state, "pooler_output": out.pooler_output}

    class Denoiser(Component):
        def forward(self, sample, timestep, encoder_hidden_states):
            return {"out_sample": self.model(sample, timestep, encoder_hidden_states, return_dict=False)[0]}

    class VaeDecoder(Component):
        def forward(self, latent_sample):
            return {"sample": self.model.decode(latent_sample, return_dict=False)[0]}

    return {"text_encoder": TextEncoder, "unet": Denoiser, "vae_decoder": VaeDecoder}[component]().eval()
