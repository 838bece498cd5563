"""A diffusion pipeline's artifacts run together as a text-to-image pipeline runs them, against diffusers' own
``StableDiffusionPipeline`` on the same seeded token ids and initial latents.

The reference is the library's pipeline (its ``__call__``, with the folder's scheduler, classifier-free guidance on)
given the prompt embeddings its own text encoder makes of the seeded token ids (no tokenizer: what ``encode_prompt``
does with the tokenizer's ids) and the seeded latents; each denoising step's latents are read through its
``callback_on_step_end``. The artifacts run in this module's own loop, which makes the same calls the pipeline makes
(a fresh scheduler from the folder's config, ``scale_model_input``, the UNet on the unconditional and conditional
batch, guidance, ``step``, the VAE's decode of the latents over its scaling factor, the pipeline's own
post-processing). That loop run with the library's own modules must give the pipeline's latents and image exactly,
or the check stops as a library mismatch: so the artifacts are judged against diffusers itself.

The final image (in [0, 1], as the pipeline returns it) is judged on ``psnr_db``, ``cosine`` (of the image in the
decoder's [-1, 1]) and ``max_abs_error``, with budgets by precision; ``diverged_at`` is the first step whose latents
part from the library's by more than the budget's per-step bound (relative to the library's largest latent). On a
failure each component's artifact runs alone, the others the library's own modules: ``blamed`` lists those that fail.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from convert.backends.huggingface import offline
from convert.compat import library_mismatch
from convert.errors import require
from convert.reports.model import AssembledCheck

STEPS = 4  # denoising steps: enough for each to feed the next through the scheduler
PROMPTS = 2  # prompts in the batch: the UNet runs at twice that (unconditional and conditional)
GUIDANCE = 7.5  # StableDiffusionPipeline's default guidance scale
COMPONENTS = ("text_encoder", "unet", "vae_decoder")
PIPELINE = "StableDiffusionPipeline"  # the pipeline whose __call__ the loop makes the same calls as
PSNR_CAP = 200.0  # the PSNR reported for images equal to float precision (an MSE of 1e-20)


@dataclass(frozen=True)
class Budget:
    psnr_db: float  # the least PSNR of the final image against the library's (peak 1)
    cosine: float  # the least cosine of the final image (in [-1, 1]) to the library's
    step: float  # the largest error of a step's latents, relative to the library's largest latent at that step

    def said(self, precision: str) -> str:
        return (
            f"{precision}: the final image's psnr_db >= {self.psnr_db:g} and cosine >= {self.cosine:g} against "
            f"diffusers' {PIPELINE}; a step's latents within {self.step:g} of the library's largest (diverged_at)"
        )


# Measured on the fixture (fixtures/diffusers_folders.py, 4 Euler steps): a correct fp32 export gives 134 dB and each
# step's latents within 1.5e-6 of the library's largest; its fp16 pass 74 dB and 1.5e-3. One UNet weight scaled by 1.01
# gives 68 dB but steps off by 2.7e-3, by 1.1 49 dB and 2.6e-2: the per-step bound catches what the image hides. The
# bounds leave room (about 70x at fp32, 7x at fp16) for deeper networks, larger latents and other kernels.
BUDGETS = {
    "fp32": Budget(psnr_db=60.0, cosine=0.99999, step=1e-4),
    "fp16": Budget(psnr_db=35.0, cosine=0.999, step=1e-2),
    "bf16": Budget(psnr_db=28.0, cosine=0.99, step=5e-2),
    "int8": Budget(psnr_db=25.0, cosine=0.98, step=1e-1),
    "int4": Budget(psnr_db=20.0, cosine=0.97, step=2e-1),
}


@dataclass
class Run:
    """One run of the pipeline: each step's latents (its timestep), and the final image [B, H, W, C] in [0, 1]."""

    latents: list[np.ndarray]
    timesteps: list[float]
    image: np.ndarray


@dataclass
class Judgement:
    psnr_db: float
    cosine: float
    max_abs_error: float
    step_errors: list[float]  # each step's latents' error relative to the library's largest latent

    def failed(self, budget: Budget) -> bool:
        return self.psnr_db < budget.psnr_db or self.cosine < budget.cosine or max(self.step_errors) > budget.step


class _Broken(Exception):
    """A component's artifact that does not load or run, or lacks what the loop reads from it."""

    def __init__(self, component: str, reason: str):
        super().__init__(reason)
        self.component = component


def check_pipeline(folder: Path, artifacts: dict[str, Path], *, precision: str, seed: int, trust_code: bool) -> AssembledCheck:
    """The text encoder's, UNet's and VAE decoder's ONNX artifacts (``artifacts``: component -> path) run as a
    text-to-image pipeline against diffusers' own pipeline from ``folder``."""
    started = time.perf_counter()
    check = _check(Path(folder), artifacts, precision, seed, trust_code)
    check.precision = precision
    check.seconds = round(time.perf_counter() - started, 3)
    return check


def _check(folder: Path, artifacts: dict[str, Path], precision: str, seed: int, trust_code: bool) -> AssembledCheck:
    if precision not in BUDGETS:
        return _skipped(f"no pipeline budget for {precision} artifacts (budgets: {', '.join(BUDGETS)})")
    missing = [name for name in COMPONENTS if name not in artifacts]
    if missing:
        return _skipped(f"the check runs every component together, and {', '.join(missing)} has no artifact")
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return _skipped("onnxruntime is not installed (pip install onnxruntime)")
    named = _pipeline_class(folder)
    if named != PIPELINE:
        return _skipped(
            f"the check makes the calls of diffusers' {PIPELINE} (text to image), and model_index.json names {named}, whose loop may differ"
        )
    pipeline = _library_pipeline(folder, trust_code)
    if pipeline.unet.config.get("time_cond_proj_dim") is not None:
        return _skipped("the UNet takes a guidance embedding (time_cond_proj_dim), which its artifact is not given")
    budget = BUDGETS[precision]
    ids, latents = _inputs(pipeline, seed)
    library = _library_run(pipeline, ids, latents)
    own = _library_modules(pipeline)
    ours = _denoise(pipeline, own, ids, latents)
    _same_as_library(ours, library)
    shape = (
        f"{PROMPTS} prompts of {ids['positive'].shape[1]} seeded token ids, {STEPS} steps of "
        f"{type(pipeline.scheduler).__name__} at guidance {GUIDANCE} (the UNet at batch {2 * PROMPTS}), "
        f"{latents.shape[2]}x{latents.shape[3]} latents to {library.image.shape[1]}x{library.image.shape[2]} images; "
        "this check's loop with diffusers' own modules gives the pipeline's image exactly"
    )
    try:
        sessions = {name: _Artifact(Path(artifacts[name]), name) for name in COMPONENTS}
        got = _denoise(pipeline, {name: sessions[name].runner() for name in COMPONENTS}, ids, latents)
    except _Broken as broken:
        return AssembledCheck(
            name="pipeline",
            artifact="",
            status="failed",
            reason=str(broken),
            budget=budget.said(precision),
            blamed=[broken.component],
            detail=shape,
        )
    judged = _judge(got, library)
    metrics = {
        "psnr_db": judged.psnr_db,
        "cosine": judged.cosine,
        "max_abs_error": judged.max_abs_error,
        "max_step_error": max(judged.step_errors),
    }
    detail = shape + f"; each step's latents within {', '.join(f'{e:.3g}' for e in judged.step_errors)} of the library's largest"
    if not judged.failed(budget):
        return AssembledCheck(name="pipeline", artifact="", status="passed", metrics=metrics, budget=budget.said(precision), detail=detail)
    blamed = []
    for name in COMPONENTS:
        try:
            alone = _denoise(pipeline, {**own, name: sessions[name].runner()}, ids, latents)
        except _Broken:
            alone = None
        if alone is None or _judge(alone, library).failed(budget):
            blamed.append(name)
    return AssembledCheck(
        name="pipeline",
        artifact="",
        status="failed",
        reason=f"the artifacts' run is not diffusers' (image: psnr {judged.psnr_db:.4g} dB, cosine {judged.cosine:.6g}, max error "
        f"{judged.max_abs_error:.4g}; latents off by up to {max(judged.step_errors):.3g} of the library's largest; budget: "
        f"{budget.said(precision)})" + ("" if blamed else "; no component's artifact fails alone: they fail together"),
        metrics=metrics,
        budget=budget.said(precision),
        diverged_at=_diverged_at(judged, library, budget),
        blamed=blamed,
        detail=detail,
    )


def _pipeline_class(folder: Path):
    """The pipeline class model_index.json names (read as JSON: the components' sources refuse what it must not name)."""
    try:
        return json.loads((folder / "model_index.json").read_text()).get("_class_name")
    except (OSError, ValueError, AttributeError):
        return None


def _library_pipeline(folder: Path, trust_code: bool):
    """diffusers' pipeline from the folder, its networks the components' sources' own models (loaded with their
    refusals), no tokenizer (the check gives token ids), no safety checker."""
    from convert.sources.request import SourceRequest
    from convert.sources.resolve import resolve_source

    networks = {
        name: resolve_source(SourceRequest(model=folder, component=name, trust_code=trust_code)).native.model for name in COMPONENTS
    }
    diffusers = require("diffusers", "Checking a diffusion pipeline")
    diffusers.utils.logging.set_verbosity_error()
    with offline():
        pipeline = diffusers.StableDiffusionPipeline.from_pretrained(
            str(folder),
            local_files_only=True,
            text_encoder=networks["text_encoder"],
            unet=networks["unet"],
            vae=networks["vae_decoder"],
            tokenizer=None,
            safety_checker=None,
            feature_extractor=None,
            image_encoder=None,
            requires_safety_checker=False,
        )
    pipeline.set_progress_bar_config(disable=True)
    return pipeline


def _inputs(pipeline, seed: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Token ids as CLIP's tokenizer writes them, padded to the text model's positions (the tokenizer's length in a
    Stable Diffusion folder): the prompts a start token, seeded words of several lengths and the end token; the
    unconditional prompt the empty one (start and end tokens). And the seeded initial latents."""
    config = pipeline.text_encoder.config
    rng = np.random.default_rng(seed)
    length = config.max_position_embeddings
    bos, eos = config.bos_token_id, config.eos_token_id
    pad = config.pad_token_id if config.pad_token_id is not None else eos
    words = np.setdiff1d(np.arange(config.vocab_size), [bos, eos, pad])
    positive = np.full((PROMPTS, length), pad, dtype=np.int64)
    for row, count in enumerate([length - 2, *rng.integers(1, length - 2, size=PROMPTS - 1, endpoint=True)]):
        positive[row, : count + 2] = [bos, *rng.choice(words, size=count), eos]
    negative = np.full((PROMPTS, length), pad, dtype=np.int64)
    negative[:, :2] = [bos, eos]
    size = pipeline.unet.config.sample_size
    height, width = (size, size) if isinstance(size, int) else tuple(size)
    shape = (PROMPTS, pipeline.unet.config.in_channels, height, width)
    latents = np.random.default_rng(seed + 1).standard_normal(shape).astype(np.float32)
    return {"positive": positive, "negative": negative}, latents


def _library_run(pipeline, ids: dict[str, np.ndarray], latents: np.ndarray) -> Run:
    """diffusers' own pipeline call on the prompt embeddings its text encoder makes of the ids (as encode_prompt makes
    them of the tokenizer's), with each step's latents read by its callback."""
    import torch

    steps: list[np.ndarray] = []
    timesteps: list[float] = []

    def record(_pipeline, _step, timestep, tensors):
        steps.append(tensors["latents"].detach().numpy().copy())
        timesteps.append(float(timestep))
        return {}

    with torch.no_grad():
        embeds = {key: pipeline.text_encoder(torch.from_numpy(value))[0] for key, value in ids.items()}
        image = pipeline(
            prompt_embeds=embeds["positive"],
            negative_prompt_embeds=embeds["negative"],
            latents=torch.from_numpy(latents),
            num_inference_steps=STEPS,
            guidance_scale=GUIDANCE,
            output_type="np",
            callback_on_step_end=record,
            callback_on_step_end_tensor_inputs=["latents"],
        ).images
    return Run(steps, timesteps, np.asarray(image))


Runner = Callable  # a component as the loop calls it: torch tensors in, one torch tensor out


def _library_modules(pipeline) -> dict[str, Runner]:
    """The components as the pipeline calls its own modules."""

    def text_encoder(ids):
        return pipeline.text_encoder(ids)[0]

    def unet(sample, timestep, states):
        return pipeline.unet(sample, timestep, encoder_hidden_states=states, timestep_cond=None, return_dict=False)[0]

    def vae_decoder(latents):
        return pipeline.vae.decode(latents, return_dict=False)[0]

    return {"text_encoder": text_encoder, "unet": unet, "vae_decoder": vae_decoder}


def _denoise(pipeline, runners: dict[str, Runner], ids: dict[str, np.ndarray], latents: np.ndarray) -> Run:
    """StableDiffusionPipeline.__call__'s calls with the given components: the prompts' embeddings, the latents scaled
    by the scheduler's initial sigma, STEPS steps with guidance, the VAE's decode and the pipeline's post-processing."""
    import torch

    scheduler = type(pipeline.scheduler).from_config(pipeline.scheduler.config)  # its own state: a run of its own
    extra = pipeline.prepare_extra_step_kwargs(None, 0.0)
    with torch.no_grad():
        embeds = torch.cat([runners["text_encoder"](torch.from_numpy(ids[key])) for key in ("negative", "positive")])
        scheduler.set_timesteps(STEPS, device="cpu")
        current = torch.from_numpy(latents) * scheduler.init_noise_sigma
        steps, timesteps = [], []
        for timestep in scheduler.timesteps:
            model_input = scheduler.scale_model_input(torch.cat([current] * 2), timestep)
            unconditional, conditional = runners["unet"](model_input, timestep, embeds).chunk(2)
            noise = unconditional + GUIDANCE * (conditional - unconditional)
            current = scheduler.step(noise, timestep, current, **extra, return_dict=False)[0]
            steps.append(current.numpy().copy())
            timesteps.append(float(timestep))
        image = runners["vae_decoder"](current / pipeline.vae.config.scaling_factor)
        image = pipeline.image_processor.postprocess(image, output_type="np", do_denormalize=[True] * image.shape[0])
    return Run(steps, timesteps, np.asarray(image))


def _same_as_library(ours: Run, library: Run) -> None:
    """This check's loop with the library's modules must be diffusers' pipeline, bit for bit, or its judgement of the
    artifacts would be against something else."""
    same = (
        ours.timesteps == library.timesteps
        and len(ours.latents) == len(library.latents)
        and all(np.array_equal(a, b) for a, b in zip(ours.latents, library.latents, strict=True))
        and np.array_equal(ours.image, library.image)
    )
    if not same:
        raise library_mismatch(
            "diffusers",
            f"{PIPELINE}.__call__ no longer makes the calls this check's loop makes (timesteps {library.timesteps} and ours "
            f"{ours.timesteps}; image off by {np.abs(ours.image.astype(np.float64) - library.image).max():.3g})",
        )


def _judge(got: Run, library: Run) -> Judgement:
    want = library.image.astype(np.float64)
    have = got.image.astype(np.float64)
    mse = float(np.mean((have - want) ** 2))
    psnr = min(PSNR_CAP, 10 * np.log10(1.0 / max(mse, 1e-20)))
    centred_have, centred_want = (2 * have - 1).ravel(), (2 * want - 1).ravel()
    norms = np.linalg.norm(centred_have) * np.linalg.norm(centred_want)
    cosine = float(centred_have @ centred_want / norms) if norms else float(np.array_equal(have, want))
    steps = [
        float(np.abs(a.astype(np.float64) - b).max() / max(np.abs(b).max(), 1e-12))
        for a, b in zip(got.latents, library.latents, strict=True)
    ]
    return Judgement(float(psnr), cosine, float(np.abs(have - want).max()), steps)


def _diverged_at(judged: Judgement, library: Run, budget: Budget) -> str:
    for step, error in enumerate(judged.step_errors):
        if error > budget.step:
            return (
                f"step {step + 1} of {STEPS} (timestep {library.timesteps[step]:g}): the latents off by {error:.3g} of the "
                f"library's largest (bound {budget.step:g})"
            )
    return f"the decoded image: every step's latents within {budget.step:g} of the library's, the image not"


NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64, "tensor(int64)": np.int64}


class _Artifact:
    """A component's ONNX file in ONNX Runtime on the CPU, loaded once."""

    def __init__(self, path: Path, component: str):
        import onnxruntime

        self.component, self.path = component, path
        try:
            self.session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        except Exception as exc:  # ONNX Runtime raises its own exception types, with the reason in the message
            raise _Broken(component, f"ONNX Runtime cannot load the {component} artifact {path}: {exc}") from exc
        self.inputs = {i.name: i.type for i in self.session.get_inputs()}

    def run(self, output: str, feed: dict[str, np.ndarray]) -> np.ndarray:
        unknown = sorted(set(self.inputs) - set(feed))
        if unknown or output not in {o.name for o in self.session.get_outputs()}:
            raise _Broken(
                self.component,
                f"the {self.component} artifact {self.path.name} "
                + (f"takes {', '.join(unknown)}, which the pipeline does not give" if unknown else f"has no output {output}"),
            )
        inputs = {name: feed[name].astype(NUMPY_TYPES.get(kind, feed[name].dtype)) for name, kind in self.inputs.items()}
        try:
            (value,) = self.session.run([output], inputs)
        except Exception as exc:  # ONNX Runtime's own exception types
            raise _Broken(self.component, f"the {self.component} artifact fails in ONNX Runtime: {exc}") from exc
        return np.asarray(value, np.float32)

    def runner(self) -> Runner:
        """The artifact as the loop calls the component (torch tensors in and out), under Optimum's input names."""
        import torch

        def run(*tensors):
            values = [t.detach().numpy() for t in tensors]
            if self.component == "text_encoder":
                out = self.run("last_hidden_state", {"input_ids": values[0]})
            elif self.component == "unet":
                sample, timestep, states = values
                feed = {"sample": sample, "timestep": np.full(sample.shape[0], timestep), "encoder_hidden_states": states}
                out = self.run("out_sample", feed)
            else:
                out = self.run("sample", {"latent_sample": values[0]})
            return torch.from_numpy(out)

        return run


def _skipped(reason: str) -> AssembledCheck:
    return AssembledCheck(name="pipeline", artifact="", status="skipped", reason=reason)
