"""An encoder-decoder's artifacts run together as Optimum's ORTModel classes run them: the encoder artifact's states drive
the decoder artifact's first step and the decoder-with-past artifact's later ones (each step's self-attention cache fed
back, the cross-attention cache of the first step kept), greedy, against transformers' own ``generate`` on the same
seeded encoder inputs. Each step is fed the library's token, so one divergence does not hide the next; the artifacts'
own greedy tokens must equal the library's (at full precision), and each step's logits are compared."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from convert.backends.huggingface import decoder_start
from convert.backends.torch import require_torch
from convert.reports import model as rm
from convert.sources.request import SourceRequest
from convert.sources.resolve import resolve_source
from convert.text import first_line

STEPS = 8
COMPONENTS = ("encoder", "decoder", "decoder_with_past")
# the least share of steps x samples whose greedy token must be the library's, by precision
TOKEN_BUDGET = {"fp32": 1.0, "fp16": 0.9, "bf16": 0.9, "int8": 0.75, "int4": 0.75}
LOGITS_TOLERANCE = 1e-3  # an fp32 step's largest absolute logits error, relative to the largest logit (and at least 1)

Step = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
NO_START = "its generation config names no decoder_start_token_id and no bos_token_id to start the decoder from"


def check_generation(folder: Path, artifacts: dict[str, Path], *, precision: str, seed: int, trust_code: bool) -> rm.AssembledCheck:
    started = time.perf_counter()
    import onnxruntime as ort

    torch = require_torch()

    from convert.sources.encoder_decoder import encoder_kind, encoder_specs, load_encoder_decoder_model

    if precision not in TOKEN_BUDGET:
        return _check("skipped", precision, reason=f"no generation budget for {precision} artifacts")
    model, _ = load_encoder_decoder_model(Path(folder), None, trust_code, "float32")
    kind = encoder_kind(model)
    feed = _encoder_feed(encoder_specs(model, kind)[0], seed, model)
    start = decoder_start(model)
    if start is None:
        return _check("failed", precision, reason=f"transformers cannot generate from {folder}: {NO_START}")
    reference_tokens, reference_logits = _library_greedy(model, feed, kind, torch)
    missing = [name for name in COMPONENTS if name not in artifacts]
    if missing:
        return _check("skipped", precision, reason=f"no artifact of {', '.join(missing)}")
    sessions = {}
    for name in COMPONENTS:
        try:
            sessions[name] = _session_step(ort.InferenceSession(str(artifacts[name]), providers=["CPUExecutionProvider"]))
        except Exception as exc:  # a file ONNX Runtime cannot load is the artifact's failure, named and blamed
            check = _check("failed", precision, reason=f"ONNX Runtime cannot load the {name} artifact: {first_line(str(exc))}")
            check.blamed = [name]
            return check
    budget = TOKEN_BUDGET[precision]
    said = (
        f"greedy tokens equal to transformers' generate at every one of {STEPS} steps x 2 samples"
        if budget == 1.0
        else (f"at least {budget:.0%} of {STEPS} steps x 2 samples pick transformers' greedy token")
    )
    result = _attempt(sessions, feed, kind, start, reference_tokens, reference_logits)
    passed = _holds(result, budget, precision)
    check = _check(
        "passed" if passed else "failed",
        precision,
        budget=said + (f"; logits within {LOGITS_TOLERANCE:g} of the largest" if precision == "fp32" else ""),
    )
    check.metrics = {"token_match": result["token_match"], "max_abs_logit_error": result["max_abs_logit_error"]}
    check.detail = (
        f"{STEPS} greedy steps from the decoder start token for 2 seeded {kind} inputs"
        + (" (the second padded)" if kind == "text" else "")
        + "; the reference is GenerationMixin.generate with do_sample=False, num_beams=1 and no logits processor"
    )
    if not passed:
        check.diverged_at = result["diverged_at"]
        check.reason = (
            f"the artifacts part from transformers at {result['diverged_at']}: {result['why']}" if result["diverged_at"] else result["why"]
        )
        # the library's own components, to tell an artifact's fault from this check's: loaded only where it failed
        sources = {name: resolve_source(SourceRequest(model=folder, component=name, trust_code=trust_code)).run for name in COMPONENTS}
        if not _holds(_decode(sources, feed, kind, start, reference_tokens, reference_logits), budget, precision):
            check.reason += "; the library's own components, run the same way, part from its generate too: no artifact is to blame"
            check.seconds = round(time.perf_counter() - started, 3)
            return check
        check.blamed = [
            name
            for name in COMPONENTS
            if not _holds(
                _attempt({**sources, name: sessions[name]}, feed, kind, start, reference_tokens, reference_logits), budget, precision
            )
        ]
    check.seconds = round(time.perf_counter() - started, 3)
    return check


def _check(status: str, precision: str, **fields) -> rm.AssembledCheck:
    return rm.AssembledCheck(name="generation", artifact="", precision=precision, status=status, **fields)


def _attempt(steps: dict[str, Step], *args) -> dict:
    """A decoding with these components, or where they cannot run together (an output the next one needs is missing, an
    input of another shape) a result that holds nothing, with why."""
    try:
        return _decode(steps, *args)
    except Exception as exc:
        why = f"the artifacts cannot run together: {type(exc).__name__}: {first_line(str(exc))}"
        return {"token_match": 0.0, "max_abs_logit_error": float("inf"), "logits_ok": False, "diverged_at": "", "why": why}


def _holds(result: dict, budget: float, precision: str) -> bool:
    return result["token_match"] >= budget and (precision != "fp32" or result["logits_ok"])


def _encoder_feed(spec_list, seed: int, model) -> dict[str, np.ndarray]:
    """Two seeded encoder inputs: token ids (the second row padded at its end), mel features, or pixels."""
    rng = np.random.default_rng(seed + 7919)
    specs = {s.name: s for s in spec_list}
    if "input_ids" in specs:
        vocab = specs["input_ids"].high + 1
        ids = rng.integers(3, vocab, size=(2, 7))
        mask = np.ones((2, 7), dtype=np.int64)
        mask[1, 5:] = 0
        pad = model.config.pad_token_id if getattr(model.config, "pad_token_id", None) is not None else 0
        ids[1, 5:] = pad
        return {"input_ids": ids.astype(np.int64), "attention_mask": mask}
    name, spec = next(iter(specs.items()))
    return {name: rng.standard_normal(spec.shape({"B": 2})).astype(np.float32)}


def _library_greedy(model, feed: dict[str, np.ndarray], kind: str, torch) -> tuple[np.ndarray, np.ndarray]:
    """transformers' greedy decoding of STEPS new tokens: generate with no logits processor the config would add (forced
    or suppressed tokens, a minimum length) and no stop at the end token, so that every step is the plain argmax."""
    from transformers import GenerationConfig, GenerationMixin

    # the model's own generation config replaced by one that asks for nothing but greedy steps: a config given to
    # generate() falls back to the model's for every value it leaves unset, forced end tokens included
    model.generation_config = GenerationConfig(
        decoder_start_token_id=decoder_start(model),
        pad_token_id=model.generation_config.pad_token_id,
        eos_token_id=-1,  # no token has it: no stop at the end token, every step decoded
    )
    inputs = {name: torch.from_numpy(value) for name, value in feed.items()}
    settings = dict(do_sample=False, num_beams=1, max_new_tokens=STEPS, return_dict_in_generate=True, output_logits=True)
    with torch.no_grad():
        # GenerationMixin's own generate: Whisper's overrides it with language detection and timestamps
        out = GenerationMixin.generate(model, **inputs, **settings)
    tokens = out.sequences[:, -STEPS:].numpy()
    logits = np.stack([step.float().numpy() for step in out.logits])  # [steps, batch, vocab]
    return tokens, logits


def _session_step(session) -> Step:
    names = [i.name for i in session.get_inputs()]
    outputs = [o.name for o in session.get_outputs()]

    def run(feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = session.run(None, {name: feed[name] for name in names})
        return dict(zip(outputs, values, strict=True))

    return run


def _decode(steps: dict[str, Step], feed: dict, kind: str, start: int, tokens: np.ndarray, logits: np.ndarray) -> dict:
    """Decode with the given components (an artifact's session, or the library's own step), each step fed the library's
    token; the share of steps whose own greedy token is the library's, the largest logits error, the first divergence."""
    states = steps["encoder"](feed)["last_hidden_state"]
    mask = {"encoder_attention_mask": feed["attention_mask"]} if kind == "text" else {}
    batch = states.shape[0]
    token = np.full((batch, 1), start, dtype=np.int64)
    out = steps["decoder"]({"input_ids": token, "encoder_hidden_states": states, **mask})
    cross = {n.replace("present", "past_key_values"): v for n, v in out.items() if ".encoder." in n}
    agree, worst, diverged, why = [], 0.0, "", ""
    logits_ok = True
    for step in range(tokens.shape[1]):
        step_logits = out["logits"][:, -1, :]
        picked = step_logits.argmax(-1)
        error = float(np.max(np.abs(step_logits - logits[step])))
        worst = max(worst, error)
        if error > LOGITS_TOLERANCE * max(1.0, float(np.max(np.abs(logits[step])))):
            logits_ok = False
            if not diverged:
                diverged, why = f"token {step + 1} of {tokens.shape[1]}", f"its logits are {error:.3g} off"
        logits_part_here = diverged == f"token {step + 1} of {tokens.shape[1]}"
        for sample in range(batch):
            agree.append(picked[sample] == tokens[sample, step])
            # the first step that parts names its first wrong token, where it has one, rather than its logits alone
            if picked[sample] != tokens[sample, step] and (not diverged or logits_part_here):
                logits_part_here = False
                diverged = f"token {step + 1} of {tokens.shape[1]}, sample {sample + 1}"
                why = f"the artifacts pick token {picked[sample]} where transformers picks {tokens[sample, step]}"
        own = {n.replace("present", "past_key_values"): v for n, v in out.items() if ".decoder." in n}
        out = steps["decoder_with_past"]({"input_ids": tokens[:, step : step + 1].astype(np.int64), **mask, **own, **cross})
    return {
        "token_match": float(np.mean(agree)),
        "max_abs_logit_error": worst,
        "logits_ok": logits_ok,
        "diverged_at": diverged,
        "why": why,
    }
