"""sentence-transformers source: a folder as ``SentenceTransformer.save`` writes it (``modules.json`` naming the module
list: a Transformer, then Pooling, Dense, Normalize...), exported as the sentence embedding ``encode`` gives.

The exported graph takes the token ids the folder's tokenizer gives (``input_ids``, ``attention_mask``, and
``token_type_ids`` where the transformer takes them) and returns ``sentence_embedding``: the whole module list as the
library's own forward computes it, which also gives the reference outputs. The token states alone are the transformer's
features: ``--task feature-extraction`` loads the folder's transformer with the transformers source instead.

Nothing is downloaded, and nothing in the folder runs without ``trust_code``: every module is one of the library's
own classes (a ``type`` outside ``sentence_transformers.`` imports code), no config names code (``auto_map``, a Dense
activation outside torch), and weights load from safetensors only (``pytorch_model.bin`` is a pickle). transformers'
load report is read, never silenced: a weight it dropped or freshly initialised refuses the folder.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import pickle
import re
from pathlib import Path

from convert.backends.huggingface import offline, position_offset, stored_dtype
from convert.backends.torch import CallConvention, require_torch
from convert.errors import ConvertError, require
from convert.readers import loads_json
from convert.safety import sha256_files
from convert.sources.base import SourceInfo
from convert.sources.request import SourceRequest
from convert.sources.torch_model import TorchSource
from convert.specs import InputSpec

TRUST_HINT = "If you trust the folder and where it came from, pass --trust-code."
RESAVE_HINT = "Write the folder again with SentenceTransformer.save."
FEATURES_HINT = "The transformer's token states alone: --task feature-extraction on the folder that holds its config.json."
OWN_MODULES = "sentence_transformers."  # the library's namespace: a type outside it imports code the folder names
OUTPUT = "sentence_embedding"
# the rows of transformers' load report (5.x): "key | STATUS | details", a key's layers merged ("layer.{0, 1}.bias")
_REPORT_ROW = re.compile(r"^\s*([^|\n]+?)\s*\|\s*(MISSING|UNEXPECTED|MISMATCH|CONVERSION)\b", re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def load_sentence_transformers_source(request: SourceRequest) -> TorchSource:
    """A TorchSource whose module maps token ids to the folder's sentence embedding."""
    torch = require_torch()
    library = require("sentence_transformers", "Loading a sentence-transformers folder")
    folder = request.model
    if not isinstance(folder, Path) or not folder.is_dir():
        raise ConvertError(
            f"the sentence-transformers source loads a folder, and this model is a {type(folder).__name__}",
            "Give the folder SentenceTransformer.save wrote.",
        )
    entries = check_folder(folder, request.trust_code)
    model = _load(library, folder, request.trust_code, request.dtype)
    transformer = _check_modules(model)
    config = transformer.auto_model.config
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    specs, ranges = _inputs(transformer, config, model.max_seq_length)
    if request.inputs:
        given = {s.name: s for s in request.inputs}
        unknown = sorted(set(given) - {s.name for s in specs})
        if unknown:
            raise ConvertError(
                f"--input names '{unknown[0]}', which the sentence-transformers model does not take",
                "Its inputs are: " + ", ".join(s.name for s in specs) + ".",
            )
        specs = tuple(given.get(s.name, s) for s in specs)
    module = sentence_embedding(model)
    with torch.no_grad():  # the module list must end in a sentence embedding (a token-level model does not)
        probe = model({s.name: torch.full((1, 2), int(s.name == "attention_mask")) for s in specs})
    if OUTPUT not in probe:
        raise ConvertError(
            f"the modules of {folder} give no {OUTPUT} (they give {', '.join(sorted(k for k in probe if isinstance(k, str)))})",
            FEATURES_HINT,
        )
    info = SourceInfo(framework="torch", kind="sentence-transformers", path=str(folder))
    info.sha256 = sha256_files(sorted(p for p in folder.rglob("*") if p.is_file()))
    info.description = f"SentenceTransformer: {' → '.join(_describe(m) for m in model)}; output {OUTPUT}"
    stored = _stored_dtype(folder / str(entries[0]["path"]))
    computed = str(next(model.parameters()).dtype).removeprefix("torch.")
    if stored and stored != computed:
        info.description += f"; weights stored as {stored}, computed in {computed} (--dtype {request.dtype})"
    return TorchSource(module, info, specs, {}, ranges, CallConvention(keywords=tuple(s.name for s in specs)))


def check_folder(folder: Path, trust_code: bool) -> list[dict]:
    """modules.json's entries, once the folder is known to describe a SentenceTransformer this tool may load: refuses
    another model type (which the library would rebuild from its defaults), code (a module class outside the library,
    an ``auto_map``, a Dense activation outside torch) and pickled weights without trust, and a transformer without
    weights."""
    settings = _json(folder / "config_sentence_transformers.json") if (folder / "config_sentence_transformers.json").is_file() else {}
    kind = settings.get("model_type", "SentenceTransformer") if isinstance(settings, dict) else "SentenceTransformer"
    if kind != "SentenceTransformer":
        raise ConvertError(
            f"{folder} is a {kind} folder, and this tool exports SentenceTransformer folders (sentence embeddings)",
            "Its transformer alone: --framework transformers (add --task, e.g. text-classification) on the folder that "
            "holds its config.json.",
        )
    entries = _json(folder / "modules.json")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) and {"type", "path"} <= set(e) for e in entries):
        raise ConvertError(f"{folder / 'modules.json'} is not a list of modules (each with its type and path)", RESAVE_HINT)
    root = folder.resolve()
    for entry in entries:
        kind, path = str(entry["type"]), folder / str(entry["path"])
        if not path.resolve().is_relative_to(root):
            raise ConvertError(f"{folder / 'modules.json'} names a module folder outside the folder ({entry['path']})", RESAVE_HINT)
        if not kind.startswith(OWN_MODULES) and not trust_code:
            raise ConvertError(
                f"{folder} names a module class that is not sentence-transformers' own ({kind}); loading it runs its code",
                TRUST_HINT,
            )
        _check_module_folder(path, kind, trust_code)
    return entries


def _check_module_folder(path: Path, kind: str, trust_code: bool) -> None:
    names = {p.name for p in path.iterdir()} if path.is_dir() else set()
    config = _json(path / "config.json") if "config.json" in names else {}
    config = config if isinstance(config, dict) else {}
    if config.get("auto_map") and not trust_code:
        named = ", ".join(sorted({str(v).split(".")[0] + ".py" for v in config["auto_map"].values() if isinstance(v, str)}))
        raise ConvertError(
            f"{path} is a model whose config names code in the folder (auto_map: {named}); loading it runs that code", TRUST_HINT
        )
    activation = config.get("activation_function") if kind.rsplit(".", 1)[-1] == "Dense" else None
    if isinstance(activation, str) and not activation.startswith("torch.") and not trust_code:
        # without trust the library replaces it with Tanh, a model other than the one the folder describes
        raise ConvertError(f"{path} names an activation function outside torch ({activation}); loading it runs its code", TRUST_HINT)
    safetensors = any(n.endswith(".safetensors") for n in names)
    pickled = sorted(n for n in names if n.endswith(".bin") and n.startswith("pytorch_model"))
    if pickled and not safetensors and not trust_code:
        raise ConvertError(
            f"{path} holds its weights only as {pickled[0]}, a pickle: unpickling it runs code from the file",
            TRUST_HINT + " Or write the folder again with SentenceTransformer.save (safetensors is its default).",
        )
    if "model_type" in config and not (safetensors or pickled):  # a transformers config: its model needs its weights
        raise ConvertError(f"{path} holds no PyTorch weights (model.safetensors) for its transformer", RESAVE_HINT)


def _json(path: Path):
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        raise ConvertError(f"cannot read {path}: {exc}", RESAVE_HINT) from exc
    return loads_json(text, str(path), RESAVE_HINT)


def _stored_dtype(path: Path) -> str | None:
    """The dtype the transformer's config says its weights were saved in (``dtype``, ``torch_dtype`` before transformers 5)."""
    return stored_dtype(_json(path / "config.json") if (path / "config.json").is_file() else {})


def _load(library, folder: Path, trust_code: bool, dtype: str):
    """The SentenceTransformer the folder describes, on the CPU, in the dtype asked (``source``: the checkpoint's), with
    transformers' load report read."""
    torch = require_torch()
    transformers = require("transformers", "Loading a sentence-transformers folder")
    transformers.utils.logging.disable_progress_bar()
    # transformers 5 loads a checkpoint in its own dtype by default: the dtype is always given (the library casts the
    # modules after the transformer to it); and never a pickle without trust, whichever file transformers would pick
    options = {"dtype": "auto" if dtype == "source" else getattr(torch, dtype), **({} if trust_code else {"use_safetensors": True})}
    with offline(), _load_report() as reports:
        try:
            model = library.SentenceTransformer(
                str(folder),
                device="cpu",
                local_files_only=True,
                trust_remote_code=trust_code,
                model_kwargs=options,
            )
        except (OSError, ValueError, KeyError, RuntimeError, ImportError, pickle.UnpicklingError) as exc:
            _refuse_reported(folder, reports)  # transformers raises after its report where weights changed shape
            raise ConvertError(
                f"sentence-transformers cannot load {folder}: {_first_line(exc)}",
                "Check that the folder is complete and was written by SentenceTransformer.save with a version that knows its modules.",
            ) from exc
    _refuse_reported(folder, reports)
    return model.eval()


def _refuse_reported(folder: Path, reports: list[str]) -> None:
    if reports:
        report = _ANSI.sub("", "\n".join(reports))
        raise ConvertError(
            f"transformers loaded the transformer of {folder} with weights dropped or freshly initialised "
            f"({_report_keys(report) or _first_line(report)}), so its embeddings are not the ones the folder was saved with",
            "Check that the folder's weights belong to its config (every shard its index names); if they are what you "
            "mean to export, write the folder again with SentenceTransformer.save, which keeps exactly the weights the model uses.",
        )


def _report_keys(report: str) -> str:
    """The keys of a load report by status: ``missing: a, b, c and 13 more; unexpected: d``."""
    by_status: dict[str, list[str]] = {}
    for key, status in _REPORT_ROW.findall(report):
        by_status.setdefault(status.lower(), []).append(key)
    return "; ".join(
        f"{status}: {', '.join(sorted(keys)[:3])}" + (f" and {len(keys) - 3} more" if len(keys) > 3 else "")
        for status, keys in by_status.items()
    )


@contextlib.contextmanager
def _load_report():
    """The load reports transformers logs while the block runs (at WARNING, whatever verbosity was set: a report that
    is not logged cannot be read)."""
    reports: list[str] = []

    class Reports(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if "LOAD REPORT" in message:
                reports.append(message)

    root = logging.getLogger("transformers")  # every transformers logger propagates to it
    handler, level = Reports(logging.WARNING), root.level
    root.addHandler(handler)
    root.setLevel(min(level or logging.WARNING, logging.WARNING))
    try:
        yield reports
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def _first_line(text: BaseException | str) -> str:
    return (str(text).strip().splitlines() or [type(text).__name__])[0]


def _check_modules(model):
    """The model's Transformer, once every module is known to run in one graph over token ids."""
    from sentence_transformers.base.modules import InputModule, Transformer

    named = [f"module {name} ({type(module).__name__})" for name, module in model.named_children()]
    modules = list(model)
    first = modules[0]
    if not isinstance(first, Transformer):
        raise ConvertError(
            f"the first {named[0]} is not a Transformer, and this tool exports one graph over a Transformer's token ids "
            "(a module that takes text through a tokenizer of its own, or routes it, cannot be part of it)",
            "Export sentence-transformers folders whose first module is a Transformer.",
        )
    if set(first.modality_config) != {"text"}:
        raise ConvertError(
            f"the first {named[0]} takes {', '.join(sorted(first.modality_config))}, and this tool exports a "
            "sentence-transformers model over text alone (the graph would drop the other inputs)",
            FEATURES_HINT,
        )
    for i, module in enumerate(modules[1:], start=1):
        if isinstance(module, InputModule):  # a Router too
            raise ConvertError(
                f"the {named[i]} takes inputs of its own (it routes them, or has a tokenizer of its own), which cannot be part "
                "of one graph over the first module's token ids",
                FEATURES_HINT,
            )
        if getattr(module, "include_prompt", True) is False and any(model.prompts.values()):
            raise ConvertError(
                f"the {named[i]} pools without the prompt's tokens (include_prompt=False), and the exported graph takes no prompt length",
                FEATURES_HINT,
            )
    return first


def _inputs(transformer, config, max_seq_length: int | None) -> tuple[tuple[InputSpec, ...], dict[str, tuple[int, int | None]]]:
    """The token inputs the transformer takes, with their domains from its config; the sequence is bounded by what
    encode feeds it (max_seq_length) and by its position table."""
    parameters = inspect.signature(transformer.auto_model.forward).parameters
    if "input_ids" not in parameters:
        raise ConvertError(f"the transformer {type(transformer.auto_model).__name__} takes no token ids", FEATURES_HINT)
    specs = [InputSpec("input_ids", "int64", ("B", "S"), 0, config.vocab_size - 1)]
    if "attention_mask" in parameters:
        specs.append(InputSpec("attention_mask", "int64", ("B", "S")))
    type_vocab = getattr(config, "type_vocab_size", None)
    if "token_type_ids" in parameters and type_vocab:
        specs.append(InputSpec("token_type_ids", "int64", ("B", "S"), 0, type_vocab - 1))
    bounds = [max_seq_length] if max_seq_length else []
    positions = getattr(config, "max_position_embeddings", None)
    if positions and positions > 0:
        bounds.append(positions - position_offset(config))
    return tuple(specs), ({"S": (1, min(bounds))} if bounds else {})


def _describe(module) -> str:
    kind = type(module).__name__
    if hasattr(module, "auto_model"):
        return type(module.auto_model).__name__
    if kind == "Pooling":
        mode = module.pooling_mode
        return f"Pooling({mode if isinstance(mode, str) else '+'.join(mode)})"
    if kind == "Dense":
        return f"Dense({module.in_features}→{module.out_features}, {type(module.activation_function).__name__})"
    return kind


def sentence_embedding(model):
    """The SentenceTransformer as a module over token ids, by keyword: ``{"sentence_embedding": ...}`` out, the whole
    module list run by the library's own forward."""
    torch = require_torch()

    class SentenceEmbedding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask=None, token_type_ids=None):
            given = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
            features = {key: value for key, value in given.items() if value is not None}
            return {OUTPUT: self.model(features)[OUTPUT]}

    return SentenceEmbedding().eval()
