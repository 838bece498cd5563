"""Diffusers source: one model folder as ``save_pretrained`` of a diffusers model class writes it (``config.json``
naming the class in ``_class_name``, and ``diffusion_pytorch_model.safetensors``), or such a model object.

The class is the one the config names, taken from diffusers' own model classes only; the inputs come from its config:

- ``UNet2DConditionModel``: ``sample`` [B, in_channels, H, W], ``timestep`` int64 [B] below the training steps,
  ``encoder_hidden_states`` [B, S, cross_attention_dim] (``encoder_hid_dim`` where the UNet projects it);
- ``UNet2DModel``: ``sample`` and ``timestep``;
- ``AutoencoderKL``: ``sample`` [B, in_channels, H, W], an image in [-1, 1), encoded to the posterior's mode and
  decoded (``sample_posterior=False``: deterministic).

H and W are fixed at the config's ``sample_size``: the down- and up-sampling blocks take sizes divisible by
2**(blocks - 1) only, and an input spec cannot say "a multiple of". ``--input`` gives other sizes. The outputs are the
fields of the model's output dataclass (``sample``), as a dict of tensors.

Nothing is downloaded, and nothing in the folder runs without ``trust_code``: weights load from safetensors only
(``diffusion_pytorch_model.bin`` is a pickle). diffusers' own load report is never silenced: a weight the folder lacks,
does not use, or holds at another shape is an error.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

from convert.backends import native_stderr_silenced
from convert.backends.huggingface import offline
from convert.backends.torch import CallConvention, require_torch
from convert.compat import library_mismatch
from convert.errors import ConvertError, require
from convert.readers import loads_json
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.request import SourceRequest
from convert.sources.torch_model import TorchSource
from convert.specs import InputSpec

TRUST_HINT = "If you trust the folder and where it came from, pass --trust-code."
WEIGHTS = "diffusion_pytorch_model"  # the stem of the weights file diffusers' save_pretrained writes
# A model folder holds no scheduler config: its timesteps are taken below 1000, every diffusers scheduler's default
# num_train_timesteps (UNet2DModel's config names its own).
TRAIN_TIMESTEPS = 1000
# diffusers' error for a weight of another shape than the model's (it raises rather than report it)
MISMATCH = re.compile(
    r"because (?P<key>\S+) expected shape (?:torch\.Size\()?(?P<expected>\[[^\]]*\])\)?, but got (?:torch\.Size\()?(?P<found>\[[^\]]*\])"
)
SHOWN_KEYS = 5  # weight names shown in a load-report error; the rest are counted


def load_diffusers_source(request: SourceRequest) -> TorchSource:
    """A TorchSource of the folder's diffusers model (or a diffusers model object), its inputs from its config."""
    require_torch()
    diffusers = require("diffusers", "Loading a diffusers model")
    diffusers.utils.logging.set_verbosity_error()  # its load report is read below, and raised on, not logged
    diffusers.utils.logging.disable_progress_bar()
    with native_stderr_silenced():  # importing its models imports torchao, which reports on fd 2 the kernels it cannot load
        base = diffusers.ModelMixin
    model = request.model
    info = SourceInfo(framework="torch", kind="diffusers")
    if isinstance(model, Path):
        if not model.is_dir():
            raise ConvertError(f"{model} is not a model folder", "Give the folder that save_pretrained wrote.")
        config, safetensors = _check_folder(model, request.trust_code)
        name = config.get("_class_name")
        model_class = _model_class(diffusers, base, name, model)
        info.path = str(model)
        info.sha256 = sha256_files(sorted(p for p in model.rglob("*") if p.is_file()))
        model = _load(model_class, model, safetensors)
        info.description = f"{name}, a diffusers model folder"
    else:
        name = type(model).__name__
        if name not in SUPPORTED or type(model) is not getattr(diffusers, name):  # a subclass may take other inputs
            raise ConvertError(
                f"the diffusers source takes diffusers' own {', '.join(SUPPORTED)}, and this model is a {name}",
                "Give such a model (or the folder its save_pretrained wrote), or drop framework='diffusers' and give the inputs.",
            )
        info.kind = "object"
        info.description = f"{name}, a diffusers model"
    model.eval()
    given = {s.name: s for s in request.inputs}
    names, inputs_of = SUPPORTED[name]
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise ConvertError(f"--input names '{unknown[0]}', which {name} does not take", f"Its inputs are: {', '.join(names)}.")
    specs, constants, why = inputs_of(model.config, given)
    specs = tuple(given.get(s.name, s) for s in specs)
    info.description += f" ({why})" if why else ""
    return TorchSource(_with_named_outputs(model, [s.name for s in specs], constants), info, specs, {}, {}, CallConvention())


def _check_folder(folder: Path, trust_code: bool) -> tuple[dict, bool]:
    """The folder's config, and whether its weights are safetensors, once it is known to hold weights this tool may load
    (pickled ones only with trust)."""
    path = folder / "config.json"
    hint = "Write the folder again with save_pretrained, or fix config.json."
    try:
        config = loads_json(path.read_text(errors="replace"), str(path), hint)
    except OSError as exc:
        raise ConvertError(f"cannot read {path}: {exc}", hint) from exc
    if not isinstance(config, dict):
        raise ConvertError(f"{path} is not a JSON object", hint)
    names = {p.name for p in folder.iterdir()}
    if f"{WEIGHTS}.safetensors" in names or f"{WEIGHTS}.safetensors.index.json" in names:
        return config, True
    pickled = sorted(names & {f"{WEIGHTS}.bin", f"{WEIGHTS}.bin.index.json"})
    if pickled and not trust_code:
        raise ConvertError(
            f"{folder} holds its weights only as {pickled[0]}, a pickle: unpickling it runs code from the file",
            TRUST_HINT + " Or save the model again with save_pretrained (safetensors is its default).",
        )
    if not pickled:
        # a variant (diffusion_pytorch_model.fp16.safetensors) is loaded only when asked for by name, which this tool does not do
        others = sorted(n for n in names if n.startswith(f"{WEIGHTS}.") or n.endswith((".msgpack", ".safetensors")))
        raise ConvertError(
            f"{folder} holds no diffusers weights ({WEIGHTS}.safetensors)" + (f", only {', '.join(others)}" if others else ""),
            "Save the PyTorch model with save_pretrained into this folder" + (", without a variant." if others else "."),
        )
    return config, False


def _model_class(diffusers, base, name: Any, folder: Path):
    """The diffusers model class a folder's config names, once it is one this tool exports."""
    supported = ", ".join(SUPPORTED)
    found = getattr(diffusers, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not (isinstance(found, type) and issubclass(found, base)):
        raise ConvertError(
            f"{folder} names the class {name!r} in config.json's _class_name, which is not a diffusers model class",
            f"This tool loads diffusers' own model classes ({supported}); a pipeline folder's models are its subfolders (unet/, vae/).",
        )
    if name not in SUPPORTED:
        raise ConvertError(
            f"{folder} holds a diffusers {name}, which this tool does not export yet",
            f"It exports {supported}; for another model, build it in Python and give its inputs with --input.",
        )
    return found


def _load(model_class, folder: Path, safetensors: bool):
    """The model from the folder, once diffusers' load report says every weight of the model came from the folder and
    every weight in the folder went into the model."""
    hint = "Save the model again with save_pretrained into this folder, or fix config.json to describe the weights it holds."
    with offline():
        try:
            loaded = model_class.from_pretrained(str(folder), local_files_only=True, use_safetensors=safetensors, output_loading_info=True)
        except (OSError, ValueError) as exc:  # a missing or unreadable file, a config it cannot build, a weight of another shape
            shape = MISMATCH.search(str(exc))
            if shape:  # diffusers' own advice (ignore_mismatched_sizes) would initialise the weight at random
                raise ConvertError(
                    f"{folder} does not hold the weights its config describes; weights of another shape than the model's: "
                    f"{shape['key']} (the folder's {shape['found']}, the model's {shape['expected']})",
                    hint,
                ) from exc
            raise ConvertError(f"diffusers cannot load {folder}: {_first_line(exc)}", hint) from exc
        except RuntimeError as exc:
            if "Error(s) in loading state_dict" not in str(exc):
                raise
            raise ConvertError(f"diffusers cannot load the weights of {folder}: {' '.join(str(exc).split())}", hint) from exc
    if not (isinstance(loaded, tuple) and len(loaded) == 2 and isinstance(loaded[1], dict)):
        raise library_mismatch("diffusers", "from_pretrained(output_loading_info=True) returned no (model, loading info) pair")
    model, report = loaded
    problems = [
        f"{what} {_keys(report.get(key))}"
        for key, what in (
            ("missing_keys", "weights the model needs that the folder lacks (diffusers would initialise them at random):"),
            ("unexpected_keys", "weights in the folder the model does not use:"),
            ("mismatched_keys", "weights of another shape than the model's:"),
            ("error_msgs", "errors:"),
        )
        if report.get(key)
    ]
    if problems:
        raise ConvertError(f"{folder} does not hold the weights its config describes; " + "; ".join(problems), hint)
    return model


def _keys(keys) -> str:
    names = sorted(str(k[0] if isinstance(k, tuple) else k) for k in keys)  # a mismatched key is (name, shape, shape)
    return ", ".join(names[:SHOWN_KEYS]) + (f" and {len(names) - SHOWN_KEYS} more" if len(names) > SHOWN_KEYS else "")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _with_named_outputs(model, names: list[str], constants: dict[str, Any]):
    """The model as a module whose forward declares one parameter per input (so torch.export binds them by name) and
    returns its output dataclass as a dict of its fields (``sample``), with ``constants`` passed on each call."""
    torch = require_torch()

    class Diffusers(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, *values):
            return dict(self.model(**dict(zip(names, values)), **constants, return_dict=True))

    parameter = inspect.Parameter.POSITIONAL_OR_KEYWORD
    Diffusers.forward.__signature__ = inspect.Signature(
        [inspect.Parameter("self", parameter), *(inspect.Parameter(name, parameter) for name in names)]
    )
    return Diffusers().eval()


def _sample(config, given: dict[str, InputSpec], low: float | None = None, high: float | None = None) -> tuple[InputSpec, str]:
    """``sample`` [B, in_channels, H, W] at the config's sample_size, and what fixed H and W."""
    if "sample" in given:
        return given["sample"], ""
    size = config.sample_size
    if size is None:
        raise ConvertError(
            "the model's config names no sample_size, so the height and width of its sample are not known",
            f'Give them with --input "sample:float32[B,{config.in_channels},64,64]" (sizes divisible by 2**(its blocks - 1)).',
        )
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    why = f"H and W fixed at the config's sample_size {height}x{width}: its blocks take only sizes divisible by 2**(blocks - 1)"
    return InputSpec("sample", "float32", ("B", config.in_channels, height, width), low, high), why


def _timestep(config, given: dict[str, InputSpec], steps: int, told: str) -> tuple[InputSpec, str]:
    """``timestep`` int64 [B] below ``steps`` (``told``: where that number comes from), and what set its domain."""
    if "timestep" in given:
        return given["timestep"], ""
    if config.get("time_embedding_type") == "fourier":
        # a Fourier embedding takes a noise level (its log), not a step: no default domain fits every such model
        raise ConvertError(
            "this UNet embeds its timestep as a noise level (time_embedding_type fourier), whose range the config does not say",
            'Give it with --input "timestep:float32[B]{LOW..HIGH}" (the noise levels its scheduler uses).',
        )
    return InputSpec("timestep", "int64", ("B",), 0, steps - 1), f"timestep below {steps}, {told}"


def _unconditioned(config) -> None:
    """Refuse a UNet that needs inputs beyond these (class labels, SDXL's added text and time embeddings)."""
    needs = []
    if config.get("class_embed_type") is not None or config.get("num_class_embeds") is not None:
        needs.append("class_labels")
    if config.get("addition_embed_type") is not None:
        needs.append(f"added_cond_kwargs (addition_embed_type {config.get('addition_embed_type')})")
    elif config.get("encoder_hid_dim_type") not in (None, "text_proj"):
        needs.append(f"added_cond_kwargs (encoder_hid_dim_type {config.get('encoder_hid_dim_type')})")
    if needs:
        raise ConvertError(
            f"this UNet also takes {' and '.join(needs)}, which this tool does not give a diffusers model yet",
            "Wrap it in a module whose forward takes every input as a tensor, and convert that (module:callable) with an --input for each.",
        )


def _unet_condition_inputs(config, given: dict[str, InputSpec]) -> tuple[tuple[InputSpec, ...], dict, str]:
    _unconditioned(config)
    sample, why = _sample(config, given)
    width = config.encoder_hid_dim if config.encoder_hid_dim is not None else config.cross_attention_dim
    widths = set(width) if isinstance(width, (list, tuple)) else {width}
    if len(widths) != 1 and "encoder_hidden_states" not in given:
        raise ConvertError(
            f"this UNet's blocks attend to encoder states of different widths ({sorted(widths)}), which one input cannot be",
            'Give it with --input "encoder_hidden_states:float32[B,S,WIDTH]".',
        )
    states = InputSpec("encoder_hidden_states", "float32", ("B", "S", next(iter(widths))))
    timestep, steps = _timestep(config, given, TRAIN_TIMESTEPS, "the schedulers' default training steps")
    return (sample, timestep, states), {}, "; ".join(filter(None, (why, steps)))


def _unet_inputs(config, given: dict[str, InputSpec]) -> tuple[tuple[InputSpec, ...], dict, str]:
    _unconditioned(config)
    sample, why = _sample(config, given)
    own = config.get("num_train_timesteps")
    told = "the config's num_train_timesteps" if own else "the schedulers' default training steps"
    timestep, steps = _timestep(config, given, own or TRAIN_TIMESTEPS, told)
    return (sample, timestep), {}, "; ".join(filter(None, (why, steps)))


def _autoencoder_inputs(config, given: dict[str, InputSpec]) -> tuple[tuple[InputSpec, ...], dict, str]:
    sample, why = _sample(config, given, -1.0, 1.0)  # an image, scaled to [-1, 1] as diffusers' image processor does
    # the posterior's mode, not a draw from it, so the reference and every artifact compute the same
    return (sample,), {"sample_posterior": False}, "; ".join(filter(None, (why, "decoded from the posterior's mode")))


# each class this tool exports: its inputs, and what makes their specs from its config and the specs --input gives
SUPPORTED = {
    "UNet2DConditionModel": (("sample", "timestep", "encoder_hidden_states"), _unet_condition_inputs),
    "UNet2DModel": (("sample", "timestep"), _unet_inputs),
    "AutoencoderKL": (("sample",), _autoencoder_inputs),
}
