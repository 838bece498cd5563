"""Hugging Face Transformers source: a model folder as ``save_pretrained`` writes it (or a model object), and a task.

The folder is loaded as the class its config names (``config.architectures[0]``; with a task given, that task's Auto
class), and transformers' load report is a refusal where a weight was dropped, initialised afresh or resized: the
artifact is the model that was saved, or nothing. The task is the one whose Auto class loads that architecture, with
Optimum's names, and the report says which and why. A PEFT adapter in the folder (or an adapter folder naming its base's
folder) is loaded with peft and merged. ``--dtype`` says what the floating weights compute in (float32 by default: a
bfloat16 checkpoint is upcast exactly). Specs come from the config: token ids below the vocabulary size, padding masks,
token types below ``type_vocab_size``, pixel values at the config's image size, text and images together where the
model takes both, audio features at the feature extractor's size, raw audio no shorter than two frames of the feature
encoder; word boxes for a layout model; the sequence is bounded by ``max_position_embeddings``. Every other tensor
parameter of the forward is named in the source's notes, with why it is left at its default and the ``--input`` line
that adds it. A checkpoint saved without its class's pooler (``add_pooling_layer=False``) is loaded without it.

``text-generation-with-past`` wraps a decoder so that it takes and returns its cache as Optimum names it
(``past_key_values.N.key``/``.value`` in, ``present.N.key``/``.value`` out, beside ``logits``), with the cache
length ``P`` a dynamic dim of its own that may be 0 (the first step) and the attention mask spanning ``P+S``. Every
layer's cache is the whole past, sliding-window layers included (their mask leaves out what lies beyond the window), so
the artifact runs at any ``P``; validation goes past every window the config declares.

Nothing is downloaded, and nothing in the folder runs without ``trust_code``: weights load from safetensors only
(``pytorch_model.bin`` is a pickle), and a config whose ``auto_map`` names code in the folder is refused.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from convert.backends.huggingface import (
    DECODER_ARGUMENTS,
    SEQ2SEQ_ARGUMENTS,
    cache_layers,
    cache_of,
    cache_parameter,
    decoder_start,
    dynamic_cache,
    image_domain,
    offline,
    position_offset,
    seq2seq_arguments,
    stored_dtype,
    with_past,
)
from convert.backends.moe import use_dense_experts
from convert.backends.torch import CallConvention, require_torch
from convert.compat import library_mismatch
from convert.errors import ConvertError, require
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.request import SourceRequest
from convert.sources.torch_model import TorchSource
from convert.specs import InputSpec
from convert.validators.generation import PAST, CacheLayout

TRUST_HINT = "If you trust the folder and where it came from, pass --trust-code."


@dataclass(frozen=True)
class Task:
    name: str
    auto_class: str  # the transformers Auto class that loads the folder for this task
    with_past: bool = False  # a decoder that takes and returns its cache
    # the transformers table of the architectures that Auto class loads (modeling_auto's MODEL_..._MAPPING_NAMES)
    mapping: str = ""


# In the order a folder's architecture is matched against them: a head before the base model (CLIPModel is both
# AutoModel's and the zero-shot classifier's), a decoder with its cache before without. Optimum's task names.
TASKS = {
    task.name: task
    for task in (
        Task("text-generation-with-past", "AutoModelForCausalLM", True, "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
        Task("text2text-generation-with-past", "AutoModelForSeq2SeqLM", True, "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES"),
        Task("automatic-speech-recognition-with-past", "AutoModelForSpeechSeq2Seq", True, "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES"),
        Task("fill-mask", "AutoModelForMaskedLM", mapping="MODEL_FOR_MASKED_LM_MAPPING_NAMES"),
        Task("text-classification", "AutoModelForSequenceClassification", mapping="MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES"),
        Task("token-classification", "AutoModelForTokenClassification", mapping="MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES"),
        Task("question-answering", "AutoModelForQuestionAnswering", mapping="MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES"),
        Task("multiple-choice", "AutoModelForMultipleChoice", mapping="MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES"),
        Task("image-classification", "AutoModelForImageClassification", mapping="MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES"),
        Task("semantic-segmentation", "AutoModelForSemanticSegmentation", mapping="MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES"),
        Task("object-detection", "AutoModelForObjectDetection", mapping="MODEL_FOR_OBJECT_DETECTION_MAPPING_NAMES"),
        Task("depth-estimation", "AutoModelForDepthEstimation", mapping="MODEL_FOR_DEPTH_ESTIMATION_MAPPING_NAMES"),
        Task("masked-im", "AutoModelForMaskedImageModeling", mapping="MODEL_FOR_MASKED_IMAGE_MODELING_MAPPING_NAMES"),
        Task(
            "zero-shot-image-classification",
            "AutoModelForZeroShotImageClassification",
            mapping="MODEL_FOR_ZERO_SHOT_IMAGE_CLASSIFICATION_MAPPING_NAMES",
        ),
        Task("audio-classification", "AutoModelForAudioClassification", mapping="MODEL_FOR_AUDIO_CLASSIFICATION_MAPPING_NAMES"),
        Task(
            "audio-frame-classification",
            "AutoModelForAudioFrameClassification",
            mapping="MODEL_FOR_AUDIO_FRAME_CLASSIFICATION_MAPPING_NAMES",
        ),
        Task("audio-xvector", "AutoModelForAudioXVector", mapping="MODEL_FOR_AUDIO_XVECTOR_MAPPING_NAMES"),
        # CTC speech recognition (Wav2Vec2ForCTC); an encoder-decoder's is automatic-speech-recognition-with-past
        Task("automatic-speech-recognition", "AutoModelForCTC", mapping="MODEL_FOR_CTC_MAPPING_NAMES"),
        Task("feature-extraction", "AutoModel", mapping="MODEL_MAPPING_NAMES"),
        Task("text-generation", "AutoModelForCausalLM", mapping="MODEL_FOR_CAUSAL_LM_MAPPING_NAMES"),
    )
}
# Optimum's tasks of an encoder-decoder's decoder without its cache: exported with it (-with-past) instead
SEQ2SEQ_TASKS = ("text2text-generation",)
TASK_HINT = "Tasks: " + ", ".join(TASKS) + "."
SEQ2SEQ_HINT = (
    "Export the decoder with its cache (--task text2text-generation-with-past, or automatic-speech-recognition-with-past), "
    "and the encoder with --task feature-extraction."
)


def _architectures_of(task: Task, model_type: str) -> tuple[str, ...]:
    """The architecture classes transformers' Auto class of the task loads for this model type."""
    from transformers.models.auto import modeling_auto

    names = getattr(modeling_auto, task.mapping, {}).get(model_type, ())
    return (names,) if isinstance(names, str) else tuple(names)


def infer_task(config: dict | Any) -> tuple[str, str]:
    """(task, why): the task whose transformers Auto class loads the architecture the config names for its model type.
    A config naming an architecture no task loads is refused: loading it as another class would drop its head."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    architectures = get("architectures") or []
    model_type = get("model_type") or ""
    if not architectures:
        return "feature-extraction", "the config names no architecture, so the base model's features"
    architecture = architectures[0]
    for task in TASKS.values():
        if architecture in _architectures_of(task, model_type):
            return task.name, f"inferred from config.architectures ({architecture})"
    raise ConvertError(
        f"the config names the architecture {architecture} ({model_type}), which no task of this tool loads; loading it "
        "as another class would drop its head's weights",
        f"Give --task only if the folder's weights fit that task's class. {TASK_HINT}",
    )


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
        hint = "Write the folder again with save_pretrained, or fix the JSON."
        if (folder / "modules.json").is_file() and not (folder / "config.json").exists():
            hint = (
                "This is a sentence-transformers folder whose transformer is in a module folder that modules.json names "
                "(e.g. 0_Transformer/): give that folder with --task."
            )
        raise ConvertError(f"cannot read {folder / 'config.json'}: {exc}", hint) from exc
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


def load_transformers_source(request: SourceRequest):
    """A TorchSource of the folder (or transformers model object) for the request's task."""
    require_torch()
    transformers = require("transformers", "Loading a Hugging Face Transformers model")
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    model = request.model
    task_name = request.task
    info = SourceInfo(framework="torch", kind="transformers")
    if isinstance(model, Path):
        if not model.is_dir():
            raise ConvertError(f"{model} is not a model folder", "Give the folder that save_pretrained wrote.")
        folder = model
        adapter = read_adapter_config(folder)
        base = base_folder(folder, adapter) if adapter is not None else folder
        config = check_folder(base, request.trust_code)
        architecture = None
        if task_name is None:
            task_name, why = infer_task(config)
            architecture = (config.get("architectures") or [None])[0]
        else:
            why = "given with --task"
            if task_name == "feature-extraction":
                # the features of the model that was saved: its own class, then its base model (the head left aside,
                # no pooler the checkpoint lacks initialised)
                architecture = (config.get("architectures") or [None])[0]
        task = check_task(task_name, why)
        info.path = str(folder)
        info.sha256 = sha256_files(sorted({p for f in (folder, base) for p in f.rglob("*") if p.is_file()}))
        stored = stored_dtype(config)
        model = _load_folder(
            transformers, base, task, request.trust_code, architecture, adapter is not None and base == folder, request.dtype, info.notes
        )
        computed = str(next(model.parameters()).dtype).removeprefix("torch.")
        if stored and stored != computed:
            why += f"; weights stored as {stored}, computed in {computed} (--dtype {request.dtype})"
        if adapter is not None:
            model, adapted = merge_adapter(model, folder, adapter, request.trust_code)
            why += f"; {adapted}"
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
    info.description += f"; {dense}" if (dense := use_dense_experts(model)) else ""
    config = model.config
    if task.name == "feature-extraction" and getattr(config, "is_encoder_decoder", False):
        model = model.get_encoder()  # an encoder-decoder's features are its encoder's
        info.description += "; its encoder"
    parameters = list(inspect.signature(model.forward).parameters)
    if task.with_past and getattr(config, "is_encoder_decoder", False):
        layout, specs, ranges = seq2seq_layout(model)
        module, convention = seq2seq_decoder_with_past(model, layout, specs), CallConvention()
        info.description += "; its decoder with its cache (its encoder: --task feature-extraction)"
        # the decoder's inputs feed these parameters: the encoder's outputs stand for its input_ids
        taken = {"input_ids", *SEQ2SEQ_ARGUMENTS, cache_parameter(model.forward, SEQ2SEQ_ARGUMENTS)}
    elif task.with_past:
        specs, ranges = _model_inputs(config, parameters, request)
        cache_argument = cache_parameter(model.forward, DECODER_ARGUMENTS)
        if cache_argument is None:
            # a generating model whose config keeps a key/value cache (use_cache) takes it under some argument: finding
            # none is the library's API, not the model (XLNet's memories, say, are no such cache)
            if model.can_generate() and getattr(config, "use_cache", None) is not None:
                raise library_mismatch(
                    "transformers",
                    f"{type(model).__name__} generates text, yet its forward declares no one cache argument (a parameter "
                    "typed Cache, or tensors per layer)",
                )
            raise ConvertError(
                f"{type(model).__name__} takes no cache, so it cannot be exported for {task.name}", "Use --task text-generation."
            )
        layout = cache_layout(model, "position_ids" in parameters)
        specs, ranges = _with_past_specs(specs, layout, ranges)
        module, convention = decoder_with_past(model, layout), CallConvention()
        taken = {cache_argument}
    else:
        specs, ranges = _model_inputs(config, parameters, request, task)
        if hasattr(config, "use_cache"):
            config.use_cache = False  # outputs are the task's fields, with no cache object among them
        module, convention = model, CallConvention(keywords=tuple(s.name for s in specs))
        layout, taken = None, set()
    if request.inputs:
        specs, ranges = _with_given_inputs(specs, ranges, request.inputs, parameters if layout is None else [], task)
        if layout is None:
            convention = CallConvention(keywords=tuple(s.name for s in specs))
    info.notes += left_at_default(model.forward, taken | {s.name for s in specs}, config, specs, addable=layout is None)
    # raw audio is exported at a few times the shortest length, where the encoder makes more than one frame (torch.export
    # fixes a dim whose frames are 1)
    export_sizes = {"T": 4 * ranges["T"][0]} if ranges.get("T", (1, None))[0] > 1 else {}
    window = _attention_window(config) if layout is None else 0
    if window and any("S" in s.symbols for s in specs):
        # an encoder whose layers attend within a local window (ModernBERT) is exported, and checked with padded rows, at
        # a sequence past the window: below it, local and global attention agree and a wrong window would pass
        export_sizes["S"] = min(window + 1, ranges.get("S", (1, None))[1] or window + 1)
    source = TorchSource(module, info, specs, export_sizes, ranges, convention)
    source.generation = layout
    return source


def _with_given_inputs(specs, ranges, given_specs, parameters: list[str], task: Task):
    """The specs with those ``--input`` gives in their place, and those it adds: any input the model's forward takes
    by that name (``parameters``; none for a decoder with its cache, whose inputs are fixed)."""
    given = {s.name: s for s in given_specs}
    names = [s.name for s in specs]
    others = [p for p in parameters if p not in names]
    unknown = sorted(set(given) - set(names) - set(others))
    if unknown:
        raise ConvertError(
            f"--input names '{unknown[0]}', which the {task.name} model does not take",
            "Its inputs are: " + ", ".join(names) + (f"; its forward also takes: {', '.join(others)}" if others else "") + ".",
        )
    specs = (
        *(_in_place(given.get(name), spec) for name, spec in zip(names, specs, strict=True)),
        *(given[n] for n in given if n not in names),
    )
    return specs, {k: v for k, v in ranges.items() if any(k in s.symbols for s in specs)}


def _in_place(given: InputSpec | None, spec: InputSpec) -> InputSpec:
    """The spec ``--input`` gives for an input, holding what its last axis means where its shape keeps that axis (boxes
    given a domain of the user's are still drawn as boxes) and the value domain the model declares where the user gives
    none (a processor's pixel range); the tool's own where none is given."""
    if given is None:
        return spec
    if spec.structure and given.dims[-1:] == spec.dims[-1:]:
        given = replace(given, structure=spec.structure)
    if given.low is None and spec.domain_source and given.dtype == spec.dtype:
        given = replace(given, low=spec.low, high=spec.high, domain_source=spec.domain_source)
    return given


def _load_folder(
    transformers,
    folder: Path,
    task: Task,
    trust_code: bool,
    architecture: str | None,
    beside_adapter: bool,
    dtype: str = "float32",
    notes: list[str] | None = None,
):
    """The model the folder holds, as the class its config names (else the task's Auto class), with every weight the
    class has loaded from the folder and every weight of the folder used: transformers' load report is a refusal
    where it names a weight dropped, missing (freshly initialised) or of another shape. A checkpoint saved without the
    class's pooler (``BertModel(config, add_pooling_layer=False)``) is built without it, as it was saved, and ``notes``
    says so."""
    model_class = getattr(transformers, architecture, None) if architecture else None
    model_class = model_class or getattr(transformers, task.auto_class)
    safetensors = any(p.suffix == ".safetensors" for p in folder.iterdir())
    with offline():
        try:
            config = transformers.AutoConfig.from_pretrained(str(folder), local_files_only=True, trust_remote_code=trust_code)
        except (OSError, ValueError, KeyError) as exc:
            raise ConvertError(
                f"transformers cannot read the config of {folder}: {first_line(exc)}",
                "Check that the folder was written by save_pretrained with a transformers version that knows this model type.",
            ) from exc
        torch = require_torch()
        # transformers 5 loads a checkpoint in its own dtype by default, and 4 in float32: the dtype is always given
        options = {
            "config": config,
            "trust_remote_code": trust_code,
            "output_loading_info": True,
            "dtype": "auto" if dtype == "source" else getattr(torch, dtype),
        }

        def load(model_class, **built):
            if beside_adapter:
                # with peft installed, from_pretrained would load the adapter beside the weights itself (and, before
                # transformers 5, the base its config names instead of this folder's): the base's weights go in as a
                # state dict, and the adapter is merged by merge_adapter
                return model_class.from_pretrained(None, state_dict=_state_dict(folder), **options, **built)
            return model_class.from_pretrained(str(folder), local_files_only=True, use_safetensors=safetensors, **options, **built)

        try:
            model, report = load(model_class)
            if _saved_without_pooler(model, report):
                # transformers builds the class's pooler and initialises it afresh (its load report names it missing):
                # the model is built as it was saved instead, and every other weight is still held to the checkpoint
                model, report = load(type(model), add_pooling_layer=False)
                if notes is not None:
                    notes.append(
                        f"the checkpoint holds no pooler weights: {type(model).__name__} is built without its pooler "
                        "(add_pooling_layer=False), as it was saved, so it gives no pooler_output"
                    )
        except ValueError as exc:
            if "Unrecognized configuration class" not in str(exc):
                raise ConvertError(f"transformers cannot load {folder}: {first_line(exc)}", "Check that the folder is complete.") from exc
            try:
                inferred = f"fit --task {infer_task(config)[0]}"
            except ConvertError:
                inferred = "fit no task of this tool"
            raise ConvertError(
                f"a {type(config).__name__} model has no {task.auto_class} head, so it cannot be exported for the task {task.name}",
                f"Its architectures ({', '.join(config.architectures or ['none'])}) {inferred}. {TASK_HINT}",
            ) from exc
        except OSError as exc:
            raise ConvertError(
                f"transformers cannot load the weights of {folder}: {first_line(exc)}",
                "Check that the folder is complete (every shard its index names).",
            ) from exc
    check_load_report(report, f"{type(model).__name__} from {folder}", task)
    if task.name == "feature-extraction" and getattr(model, "base_model", model) is not model:
        return model.base_model
    return model


def _saved_without_pooler(model, report: dict) -> bool:
    """Whether the weights loading left out are a pooler's alone, of a class that may be built without one."""
    missing = [k if isinstance(k, str) else k[0] for k in report.get("missing_keys") or ()]
    return (
        bool(missing)
        and all("pooler" in name.split(".") for name in missing)
        and "add_pooling_layer" in inspect.signature(type(model).__init__).parameters
    )


def check_load_report(report: dict, what: str, task: Task | None = None) -> None:
    """Refuse a model whose loading dropped weights of the checkpoint, initialised some afresh, or resized some: it is
    not the model that was saved."""
    problems = []
    for key, said in (
        ("missing_keys", "not in the checkpoint, so freshly initialised"),
        ("unexpected_keys", "in the checkpoint but not used by the class"),
        ("mismatched_keys", "of another shape in the checkpoint"),
    ):
        names = sorted(k if isinstance(k, str) else k[0] for k in report.get(key) or ())
        if names:
            problems.append(f"{len(names)} weight(s) {said}: {', '.join(names[:6])}{' ...' if len(names) > 6 else ''}")
    problems += [first_line(Exception(message)) for message in report.get("error_msgs") or ()]
    if problems:
        raise ConvertError(
            f"loading {what} does not give the model that was saved ({'; '.join(problems)})",
            "Give the task whose class holds exactly these weights"
            + (f" (this run used {task.name})" if task else "")
            + ", or save the model again with save_pretrained from the class you trained.",
        )


def _state_dict(folder: Path) -> dict:
    """Every tensor of a folder's safetensors files (the shards an index names, or model.safetensors)."""
    from safetensors.torch import load_file

    tensors: dict = {}
    for path in sorted(folder.glob("*.safetensors")):
        if not path.name.startswith("adapter_"):
            tensors.update(load_file(str(path)))
    return tensors


ADAPTER_CONFIG = "adapter_config.json"


def read_adapter_config(folder: Path) -> dict | None:
    """The PEFT adapter config a folder holds, or None."""
    path = folder / ADAPTER_CONFIG
    if not path.is_file():
        return None
    try:
        config = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConvertError(f"cannot read {path}: {exc}", "Save the adapter again with PeftModel.save_pretrained.") from exc
    if not isinstance(config, dict):
        raise ConvertError(f"{path} is not a JSON object", "Save the adapter again with PeftModel.save_pretrained.")
    return config


def base_folder(folder: Path, adapter: dict) -> Path:
    """The folder of the model an adapter adapts: its own folder where the base's weights lie beside the adapter, else
    the local folder ``base_model_name_or_path`` names (relative to the adapter's folder, then to the working folder).
    Nothing is downloaded."""
    if (folder / "config.json").is_file():
        return folder
    named = adapter.get("base_model_name_or_path")
    candidates = [folder / str(named), Path(str(named))] if named else []
    for candidate in candidates:
        if (candidate / "config.json").is_file():
            return candidate.resolve()
    raise ConvertError(
        f"{folder} holds a PEFT adapter without its base model: its {ADAPTER_CONFIG} names the base "
        + (f"'{named}', which is not a local model folder" if named else "as nothing")
        + " (this tool downloads nothing)",
        "Save the base model with save_pretrained, and give its folder as base_model_name_or_path in "
        f"{ADAPTER_CONFIG}, or save the adapter into the base model's folder.",
    )


def merge_adapter(model, folder: Path, adapter: dict, trust_code: bool):
    """The base model with the folder's PEFT adapter loaded (every adapter weight used) and merged into its weights
    (``merge_and_unload``), and a sentence naming the adapter."""
    peft = require("peft", f"Loading the PEFT adapter in {folder}")
    names = {p.name for p in folder.iterdir()}
    if "adapter_model.safetensors" not in names:
        if "adapter_model.bin" not in names:
            raise ConvertError(
                f"{folder} holds {ADAPTER_CONFIG} but no adapter weights", "Save the adapter again with PeftModel.save_pretrained."
            )
        if not trust_code:
            raise ConvertError(
                f"{folder} holds its adapter weights only as adapter_model.bin, a pickle: unpickling it runs code from the file",
                TRUST_HINT + " Or save the adapter again with PeftModel.save_pretrained (safetensors is its default).",
            )
    with offline():
        try:
            config = peft.PeftConfig.from_pretrained(str(folder))
            config.inference_mode = True
            adapted = peft.PeftModel(model, config)
            result = adapted.load_adapter(str(folder), adapter_name="default", is_trainable=False)
        except (ValueError, KeyError, OSError, RuntimeError) as exc:
            raise ConvertError(
                f"peft cannot load the adapter in {folder} onto {type(model).__name__}: {first_line(exc)}",
                "Check that the adapter was trained on this base model (its target modules and shapes).",
            ) from exc
    missing = sorted(k for k in result.missing_keys if "default" in k)
    unused = sorted(result.unexpected_keys)
    if missing or unused:
        check_load_report({"missing_keys": missing, "unexpected_keys": unused}, f"the PEFT adapter in {folder} onto {type(model).__name__}")
    kind = getattr(config.peft_type, "value", config.peft_type)
    rank = f", r={config.r}" if getattr(config, "r", None) else ""
    return adapted.merge_and_unload().eval(), f"the PEFT adapter ({kind}{rank}) in {folder} merged into its base model"


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _text_config(config):
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _model_inputs(
    config, parameters: list[str], request: SourceRequest, task: Task | None = None
) -> tuple[tuple[InputSpec, ...], dict[str, tuple[int, int | None]]]:
    """The task model's inputs from its config, as its forward names them: text and images together where it takes
    both (CLIP, SigLIP), else audio. A multiple-choice model takes each choice's tokens: [B, C, S]."""
    ranges: dict[str, tuple[int, int | None]] = {}
    specs: list[InputSpec] = []
    if "input_ids" in parameters:
        text = _text_config(config)
        lead = ("B", "C") if task is not None and task.name == "multiple-choice" else ("B",)
        specs.append(InputSpec("input_ids", "int64", (*lead, "S"), 0, text.vocab_size - 1))
        if "attention_mask" in parameters:
            specs.append(InputSpec("attention_mask", "int64", (*lead, "S")))
        type_vocab = getattr(text, "type_vocab_size", None)
        if "token_type_ids" in parameters and type_vocab:
            specs.append(InputSpec("token_type_ids", "int64", (*lead, "S"), 0, type_vocab - 1))
        specs += _layout_inputs(text, parameters, lead)
        positions = getattr(text, "max_position_embeddings", None)
        if positions:
            ranges["S"] = (1, positions - position_offset(text))
    if "pixel_values" in parameters:
        vision = getattr(config, "vision_config", None) or config
        size = getattr(vision, "image_size", None) or getattr(vision, "input_size", 224)  # LayoutLMv3: input_size
        height, width = (size, size) if isinstance(size, int) else tuple(size)
        channels = getattr(vision, "num_channels", 3)
        specs.append(InputSpec("pixel_values", "float32", ("B", channels, height, width), **image_domain(request.model)))
        if "pixel_mask" in parameters:
            # which pixels are image and which padding (DETR's batches of images of different sizes): a padding mask
            specs.append(InputSpec("pixel_mask", "int64", ("B", height, width), 0, 1))
    if specs:
        return tuple(specs), ranges
    if "input_features" in parameters:
        frames = 2 * config.max_source_positions if hasattr(config, "max_source_positions") else 3000
        return (InputSpec("input_features", "float32", ("B", config.num_mel_bins, frames)),), ranges
    if "input_values" in parameters:
        return (InputSpec("input_values", "float32", ("B", "T"), -1.0, 1.0),), {"T": (shortest_audio(config), None)}
    raise ConvertError(
        f"cannot tell the inputs of this model from its forward ({', '.join(parameters[:4])}...)",
        "Give every input with --input name:dtype[dims].",
    )


def _layout_inputs(text, parameters: list[str], lead: tuple[str, ...]) -> list[InputSpec]:
    """A layout model's word boxes (LayoutLM, LayoutLMv2/v3): one (x0, y0, x1, y1) per token, with x0 <= x1 and y0 <= y1,
    each coordinate below the config's ``max_2d_position_embeddings`` (the rows of its coordinate, width and height
    tables)."""
    positions = getattr(text, "max_2d_position_embeddings", None)
    if "bbox" not in parameters or not positions:
        return []
    why = f"the config's max_2d_position_embeddings ({positions})"
    return [InputSpec("bbox", "int64", (*lead, "S", 4), 0, positions - 1, domain_source=why, structure="boxes")]


# Which forward parameters take tensors, decided here alone: a parameter annotated with a tensor or cache type, or not
# annotated, unless this table names it as an option of the call (an int or a tensor, a flag the annotation leaves
# open). Flags annotated bool or int (return_dict, output_attentions, use_cache...) take no tensor by their annotation.
CALL_OPTIONS = frozenset(
    {
        "return_dict",
        "output_attentions",
        "output_hidden_states",
        "use_cache",
        "return_loss",
        "interpolate_pos_encoding",
        "logits_to_keep",
        "num_logits_to_keep",
        "return_legacy_cache",
    }
)
_TENSOR_ANNOTATION = re.compile(r"\b(\w*(Tensor|Cache)|ndarray)\b")

# Tensor parameters left at their default on purpose: why, and whether ``--input`` may add one (an alternative to
# another input, a training target or a cache is not added beside what the artifact takes).
LEFT_AT_DEFAULT: dict[str, tuple[str, bool]] = {
    "token_type_ids": ("the config gives no type_vocab_size, so every token is of type 0", True),
    "position_ids": ("its default counts 0, 1, 2... along each row, as a tokenizer's batch has them", True),
    "decoder_position_ids": ("its default counts 0, 1, 2... along each row", True),
    "head_mask": ("its default keeps every attention head", True),
    "decoder_head_mask": ("its default keeps every attention head", True),
    "cross_attn_head_mask": ("its default keeps every attention head", True),
    "inputs_embeds": ("an alternative to input_ids", False),
    "decoder_inputs_embeds": ("an alternative to decoder_input_ids", False),
    "labels": ("training targets: the artifact computes no loss", False),
    "cache": ("the key/value cache, which --task text-generation-with-past takes and returns", False),
    "past_key_values": ("the key/value cache, which --task text-generation-with-past takes and returns", False),
    "cache_position": ("its default counts from the cache's length", False),
    "encoder_hidden_states": ("cross-attention, which only a decoder built with add_cross_attention uses", False),
    "encoder_attention_mask": ("cross-attention, which only a decoder built with add_cross_attention uses", False),
    "encoder_outputs": ("its default is the encoder's outputs on the inputs", False),
    "decoder_attention_mask": ("its default lets each token attend to every token before it", True),
}


def forward_tensor_parameters(forward) -> dict[str, inspect.Parameter]:
    """The parameters of a forward that take tensors (the rule above), in the forward's order."""
    tensors = {}
    for name, parameter in inspect.signature(forward).parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or name in CALL_OPTIONS:
            continue
        if parameter.annotation is parameter.empty or _TENSOR_ANNOTATION.search(str(parameter.annotation)):
            tensors[name] = parameter
    return tensors


def left_at_default(forward, taken: set[str], config, specs, addable: bool) -> list[str]:
    """The notes naming every forward tensor parameter the artifact does not take (``taken``: the parameters its inputs
    feed), each with why and, where ``--input`` may add it (``addable``: the artifact's inputs are not fixed), the line
    that does; none where every one is taken."""
    named = []
    for name, parameter in forward_tensor_parameters(forward).items():
        if name in taken:
            continue
        why, may_add = LEFT_AT_DEFAULT.get(name, ("not an input this tool generates", True))
        if may_add and addable:
            why += f'; add it with --input "{_input_line(name, parameter, config, specs)}"'
        named.append(f"{name} ({why})")
    if not named:
        return []
    return ["forward inputs left at their defaults, not inputs of the artifact: " + "; ".join(named)]


def _input_line(name: str, parameter: inspect.Parameter, config, specs) -> str:
    """The ``--input`` spec that adds a parameter: from the config where this tool knows the parameter, else its dtype
    from the annotation and DIMS to fill in."""
    text = _text_config(config)
    lead = next((s.dims[:-1] for s in specs if s.name == "input_ids"), ("B",))
    known = {
        "position_ids": lambda: InputSpec(name, "int64", (*lead, "S"), 0, (getattr(text, "max_position_embeddings", 0) or 512) - 1),
        "token_type_ids": lambda: InputSpec(name, "int64", (*lead, "S"), 0, max((getattr(text, "type_vocab_size", 0) or 1) - 1, 0)),
        "bbox": lambda: InputSpec(name, "int64", (*lead, "S", 4), 0, 1000),
    }
    if name in known:
        return str(known[name]())
    annotation = str(parameter.annotation)
    if name.endswith("mask"):
        # a mask over the first input's positions, where those are all symbolic (tokens, audio samples)
        first = specs[0].dims if specs else ()
        dims = ",".join(map(str, first)) if first and all(isinstance(d, str) for d in first) else "DIMS"
        return f"{name}:int64[{dims}]"
    dtype = "int64" if "LongTensor" in annotation else "bool" if "BoolTensor" in annotation else "float32"
    return f"{name}:{dtype}[DIMS]"


def shortest_audio(config) -> int:
    """The fewest samples a raw-audio model's convolutional feature encoder turns into two frames (720 for wav2vec2's
    default kernels and strides): a shorter input fails inside its first convolutions, and at one frame an exporter
    specialises the frame axis to 1."""
    kernels, strides = getattr(config, "conv_kernel", None), getattr(config, "conv_stride", None)
    if not kernels or not strides:
        return 1
    length = 2
    for kernel, stride in zip(reversed(kernels), reversed(strides), strict=False):
        length = (length - 1) * stride + kernel
    return length


def cache_layout(model, position_ids: bool) -> CacheLayout:
    """The cache's layout, read from one step of the decoder on one token (the config's head counts vary by family)."""
    torch = require_torch()
    with torch.no_grad():
        out = model(input_ids=torch.zeros((1, 1), dtype=torch.int64), use_cache=True)
    return _layout_of(out, position_ids=position_ids, window=_attention_window(model.config))


# The config fields of a span a layer attends over instead of its whole past: Mistral's and Gemma's sliding window,
# Llama 4's attention chunk, GPT-Neo's local window, ModernBERT-decoder's local attention.
_WINDOW_FIELDS = ("sliding_window", "attention_chunk_size", "window_size", "local_attention")


def _attention_window(config) -> int:
    """The longest such span the decoder's config (or one of its layers' own, in a heterogeneous config) declares, below
    the positions it has; 0 when none."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    layers = getattr(text, "per_layer_config", None) or ()
    spans = [getattr(c, field, None) for c in (text, *layers) for field in _WINDOW_FIELDS]
    positions = getattr(text, "max_position_embeddings", None) or 0
    return max((s for s in spans if type(s) is int and 0 < s and (not positions or s < positions)), default=0)


def _layout_of(out, **facts) -> CacheLayout:
    """The layout of the cache a decoder step returned, every layer's key and value read (layers may differ in heads
    and head size), with the facts its inputs add."""
    layers = cache_layers(cache_of(out))
    shapes = tuple((int(part.shape[1]), int(part.shape[3])) for layer in layers for part in layer)
    return CacheLayout(
        layers=len(layers),
        kv_heads=shapes[0][0],
        head_dim=shapes[0][1],
        dtype=str(layers[0][0].dtype).removeprefix("torch."),
        vocab_size=int(out.logits.shape[-1]),
        shapes=shapes if len(set(shapes)) > 1 else (),
        **facts,
    )


def _cache_from(inputs: dict, layout: CacheLayout):
    """A DynamicCache of a flat feed's past keys and values, layer by layer, every layer at full length."""
    names = layout.past_names()
    return dynamic_cache((inputs[names[2 * i]], inputs[names[2 * i + 1]]) for i in range(layout.layers))


def _outputs(out, layout: CacheLayout) -> dict:
    """``logits`` and the cache a step returned, named ``present`` as its inputs are named ``past_key_values``."""
    outputs = {"logits": out.logits}
    names = [name.replace("past_key_values", "present", 1) for name in layout.past_names()]
    for i, (keys, values) in enumerate(cache_layers(cache_of(out))):
        outputs[names[2 * i]], outputs[names[2 * i + 1]] = keys, values
    return outputs


def _with_past_specs(specs: tuple[InputSpec, ...], layout: CacheLayout, ranges: dict) -> tuple[tuple[InputSpec, ...], dict]:
    by_name = {s.name: s for s in specs}
    text = [by_name["input_ids"], InputSpec("attention_mask", "int64", ("B", f"{PAST}+S"))]
    if layout.position_ids:
        high = ranges.get("S", (1, None))[1]
        text.append(InputSpec("position_ids", "int64", ("B", "S"), 0, (high or 2048) - 1))
    return (*text, *_past_specs(layout)), {**ranges, PAST: (0, None)}


def _past_specs(layout: CacheLayout) -> list[InputSpec]:
    """One input per layer's key and value, each with its own heads and head size, every one as long as the past."""
    return [InputSpec(name, layout.dtype, ("B", heads, PAST, dim)) for name, (heads, dim) in layout.past_shapes().items()]


def decoder_with_past(model, layout: CacheLayout):
    """The decoder as a module over flat tensors named as Optimum names them: ``input_ids, attention_mask,
    [position_ids,] past_key_values.N.key, past_key_values.N.value...`` in; ``logits, present.N.key,
    present.N.value...`` out."""
    names = ["input_ids", "attention_mask", *(["position_ids"] if layout.position_ids else []), *layout.past_names()]

    def step(inputs: dict) -> tuple[dict, Any]:
        return {name: inputs[name] for name in DECODER_ARGUMENTS if name in inputs}, _cache_from(inputs, layout)

    return with_past(model, names, step, lambda out: _outputs(out, layout), DECODER_ARGUMENTS)


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
    layout = _layout_of(out, position_ids=False, attention_mask=False, infix=".decoder", window=_attention_window(config))
    specs = [InputSpec("input_ids", "int64", ("B", "S"), 0, text.vocab_size - 1)]
    if not audio:
        specs.append(InputSpec("encoder_attention_mask", "int64", ("B", "E")))
    specs.append(InputSpec("encoder_hidden_states", layout.dtype, ("B", frames or "E", config.d_model)))
    specs += _past_specs(layout)
    ranges: dict[str, tuple[int, int | None]] = {PAST: (0, None)}
    if getattr(config, "max_target_positions", None):
        ranges["S"] = (1, config.max_target_positions)
    return layout, tuple(specs), ranges


def seq2seq_decoder_with_past(model, layout: CacheLayout, specs: tuple[InputSpec, ...]):
    """An encoder-decoder's decoder over flat tensors: ``input_ids, [encoder_attention_mask,] encoder_hidden_states,
    past_key_values.N.decoder.key/value...`` in, ``logits, present.N.decoder.key/value...`` out. The cross-attention is
    computed from the encoder's outputs at every step (its cache is not an input)."""
    from transformers import DynamicCache, EncoderDecoderCache

    names = [s.name for s in specs]

    def step(inputs: dict) -> tuple[dict, Any]:
        cache = EncoderDecoderCache(_cache_from(inputs, layout), DynamicCache(config=model.config))
        return seq2seq_arguments(inputs, inputs["encoder_hidden_states"]), cache

    module = with_past(model, names, step, lambda out: _outputs(out, layout), SEQ2SEQ_ARGUMENTS)
    # the prompts and encoder outputs the generation check decodes from (TorchSource reads them from its module)
    module.generation_inputs = functools.partial(_seq2seq_generation_inputs, model, layout, "encoder_attention_mask" not in names)
    return module


def _seq2seq_generation_inputs(model, layout: CacheLayout, audio: bool, seed: int):
    """The start token for 2 prompts, and the encoder's outputs for 2 seeded encoder inputs (5 tokens, or audio features
    at the encoder's length)."""
    torch = require_torch()
    import numpy as np

    config = model.config
    encoder = model.get_encoder()
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
    return np.full((2, 1), decoder_start(model) or 0, dtype=np.int64), context
