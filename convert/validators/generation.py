"""Generation agreement: a decoder with a cache, judged over greedy decoding rather than one step.

The source decodes ``steps`` new tokens greedily from seeded prompts, feeding its cache back step by step. The
artifact then decodes from the same prompts with its own cache fed back, each step given the source's token (teacher
forcing): its greedy choice and its logits are compared with the source's at every step, so one wrong step does not
hide the steps after it. Where every step's choice agrees, free-running greedy decoding with the artifact gives the
source's tokens exactly.

Inputs and outputs are named as Optimum names them: ``input_ids``, ``attention_mask`` (over the cache and the new
tokens), ``position_ids`` where the decoder takes them, ``past_key_values.N.key``/``.value`` in (``[batch, kv_heads,
past, head_dim]``, empty on the first step) and ``logits``, ``present.N.key``/``.value`` out. Where a layer attends
over a window (a sliding window, an attention chunk), the prompts end a few steps before the longest window, so the
decoding crosses it. An encoder-decoder's decoder takes ``encoder_hidden_states`` (and ``encoder_attention_mask``) at
every step instead of a mask over its cache, and names its cache ``past_key_values.N.decoder.key``; its prompts are
its start token.

A full-precision artifact passes when every step picks the source's token (or one the source itself scores within
tolerance of its own choice: a tie) and every step's logits are within tolerance. A reduced-precision one passes when
its token agreement rate and its worst per-step logits cosine meet the budget (``GENERATION_AGREEMENT`` and the
precision's cosine bound).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, Field

from convert.validators.tolerances import Tolerance

GENERATION_STEPS = 16
GENERATION_BATCH = 2
PROMPT_LENGTH = 5
# the least share of steps whose greedy choice a reduced-precision artifact must share with the source
GENERATION_AGREEMENT = {"fp16": 0.9, "bf16": 0.9, "int8": 0.75, "int4": 0.75}
PAST = "P"  # the symbol of the cache's length in a decoder's input specs

Step = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class CacheLayout:
    """How a decoder's cache is laid out: one key and one value per layer, [batch, kv_heads, past, head_dim], every
    layer as long as the past (``PAST`` in the input specs)."""

    layers: int
    kv_heads: int  # the first layer's (each tensor's own in past_shapes())
    head_dim: int
    dtype: str
    vocab_size: int
    position_ids: bool  # the decoder takes position_ids
    attention_mask: bool = True  # the decoder takes a mask over its cache and new tokens (an encoder-decoder's does not)
    infix: str = ""  # ".decoder" in an encoder-decoder's cache names (past_key_values.0.decoder.key)
    # (kv_heads, head_dim) of each past_names() tensor where they are not all alike (Gemma 4's full-attention layers
    # have wider heads than its sliding ones); empty when every one is (kv_heads, head_dim)
    shapes: tuple[tuple[int, int], ...] = ()
    # the longest span a layer attends over (a sliding window, an attention chunk, a local window); 0 when every layer
    # attends over its whole past. Checks go past it: a cache that stops growing at a window is wrong only beyond it.
    window: int = 0

    def past_names(self) -> list[str]:
        return [f"past_key_values.{i}{self.infix}.{part}" for i in range(self.layers) for part in ("key", "value")]

    def past_shapes(self) -> dict[str, tuple[int, int]]:
        """(kv_heads, head_dim) of each cache input, by name."""
        names = self.past_names()
        return dict(zip(names, self.shapes or [(self.kv_heads, self.head_dim)] * len(names), strict=True))

    def prompt_length(self) -> int:
        """The generation check's prompt length: half its steps short of the window, so that decoding crosses it."""
        return max(PROMPT_LENGTH, self.window - GENERATION_STEPS // 2)

    def past_sizes(self) -> dict[str, tuple[int, ...]]:
        """Cache lengths every check of a decoder covers besides the planned ones: one past the window."""
        return {PAST: (self.window + 1,)} if self.window else {}


@dataclass
class GenerationTrace:
    """What one decoding gave: the prompts, each step's greedy token [batch, steps] and last-position logits
    [steps, batch, vocab]."""

    layout: CacheLayout
    prompts: np.ndarray
    tokens: np.ndarray
    logits: np.ndarray
    context: dict[str, np.ndarray]  # inputs every step takes as they are (an encoder's outputs and mask)


class GenerationMetrics(BaseModel):
    steps: int = Field(description="new tokens decoded per prompt")
    prompts: int = Field(description="prompts decoded side by side (the batch)")
    token_agreement: float = Field(
        description="share of steps x prompts where the artifact's greedy token is the source's (ties count as agreeing)"
    )
    first_divergent_step: int | None = Field(
        None, description="the first step (0-based) whose token or logits are out of tolerance; null when none"
    )
    max_abs_logits: float = Field(description="the largest absolute difference of any step's logits")
    min_cosine: float = Field(description="the lowest cosine similarity of one step's logits, over steps and prompts")
    judged_by: str = Field(description="what decided: the tolerance (full precision) or the budget (fp16, int8)")

    def describe(self) -> str:
        diverged = "none" if self.first_divergent_step is None else str(self.first_divergent_step)
        return (
            f"{self.steps} greedy steps x {self.prompts} prompts: token agreement {self.token_agreement:.1%}, first divergent "
            f"step {diverged}, max |logits error| {self.max_abs_logits:.2e}, min cosine {self.min_cosine:.6f}; judged by {self.judged_by}"
        )


def make_prompts(layout: CacheLayout, seed: int = 0, batch: int = GENERATION_BATCH, length: int | None = None) -> np.ndarray:
    """Seeded prompts, ``layout.prompt_length()`` tokens long unless ``length`` is given."""
    length = layout.prompt_length() if length is None else length
    return np.random.default_rng(seed + 7919).integers(0, layout.vocab_size, size=(batch, length), dtype=np.int64)


def empty_past(layout: CacheLayout, batch: int) -> dict[str, np.ndarray]:
    """The cache of a first step: every past_key_values input empty (past length 0)."""
    # NumPy has no bfloat16: a bfloat16 cache is fed as float32, as every generated bfloat16 input is
    dtype = np.float32 if layout.dtype == "bfloat16" else layout.dtype
    return {name: np.zeros((batch, heads, 0, dim), dtype=dtype) for name, (heads, dim) in layout.past_shapes().items()}


def step_feed(
    layout: CacheLayout, ids: np.ndarray, past: dict[str, np.ndarray], cached: int, context: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """One step's feed: the new tokens ``ids`` [batch, new] after ``cached`` tokens held in ``past``, with the mask
    over both and their positions where the decoder takes them, and ``context`` as it is."""
    batch, new = ids.shape
    feed = {"input_ids": ids, **(context or {}), **past}
    if layout.attention_mask:
        feed["attention_mask"] = np.ones((batch, cached + new), dtype=np.int64)
    if layout.position_ids:
        feed["position_ids"] = np.broadcast_to(np.arange(cached, cached + new, dtype=np.int64), (batch, new)).copy()
    return feed


def text_inputs(layout: CacheLayout) -> set[str]:
    """The inputs of a decoder that its text (input_ids and attention_mask) decides for a first step: its cache and its
    positions."""
    return {*layout.past_names(), "position_ids"}


def text_feed(layout: CacheLayout, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A first step's feed from the user's text (input_ids [batch, tokens] and the attention_mask where the decoder
    takes one): the cache empty and the positions counted over the mask, as transformers' generate counts them for
    left padding."""
    ids = np.asarray(feed["input_ids"])
    full = dict(feed)
    if layout.position_ids and "position_ids" not in full:
        mask = np.asarray(full.get("attention_mask", np.ones_like(ids)), dtype=np.int64)
        full["position_ids"] = np.clip(np.cumsum(mask, axis=-1) - 1, 0, None).astype(np.int64)
    return {**empty_past(layout, ids.shape[0]), **full}


def next_token_labels(feed: dict[str, np.ndarray], labels: np.ndarray | None = None, ignored: int = -100) -> np.ndarray:
    """The labels of a decoder's logits at each position: the next token. ``labels`` follow transformers' causal-LM
    convention (the text itself, ``ignored`` where not scored, shifted here as its loss shifts them); without them the
    text's own tokens. The last position predicts nothing, a position before padding predicts padding, and a position
    the attention mask hides sees no text (runtimes differ in what a query that attends to nothing gives): none of
    them is scored."""
    ids = np.asarray(feed["input_ids"])
    labels = ids if labels is None else np.asarray(labels)
    if labels.shape != ids.shape:
        raise ValueError(f"labels of shape {list(labels.shape)} for input_ids of shape {list(ids.shape)}")
    aligned = np.full(ids.shape, ignored, dtype=np.int64)
    aligned[..., :-1] = labels[..., 1:]
    mask = feed.get("attention_mask")
    if mask is None:
        return aligned
    hidden = np.asarray(mask) == 0
    aligned[..., :-1] = np.where(hidden[..., 1:], ignored, aligned[..., :-1])  # the next token is padding (right padding)
    return np.where(hidden, ignored, aligned)


def hide_padding(outputs: dict[str, np.ndarray], mask: np.ndarray) -> dict[str, np.ndarray]:
    """A first step's outputs with the positions its attention mask hides set to zero: the logits [batch, tokens, ...]
    and the cache [batch, heads, tokens, dim] there. A left-padding position attends to nothing, and frameworks differ
    in what a softmax over nothing gives (eager PyTorch and an exported graph disagree there by whole logits); no
    output of a real token depends on it, so it is not compared."""
    hidden = np.asarray(mask) == 0
    if not hidden.any():
        return outputs
    batch, tokens = hidden.shape
    shown = {}
    for name, value in outputs.items():
        value = np.asarray(value)
        if name.startswith("present"):
            if value.ndim == 4 and value.shape[0] == batch and value.shape[2] == tokens:
                value = np.where(hidden[:, None, :, None], 0, value).astype(value.dtype)
        elif value.shape[:2] == (batch, tokens):
            value = np.where(hidden.reshape(batch, tokens, *[1] * (value.ndim - 2)), 0, value).astype(value.dtype)
        shown[name] = value
    return shown


def fed_back(outputs: dict[str, np.ndarray], past: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The next step's cache: each ``present`` output of a step under its ``past_key_values`` name (a ValueError
    names the first output missing, logits included)."""
    missing = [name for name in ("logits", *(n.replace("past_key_values", "present") for n in past)) if name not in outputs]
    if missing:
        raise ValueError(f"the decoder gives no output '{missing[0]}'")
    return {name: np.asarray(outputs[name.replace("past_key_values", "present")]) for name in past}


def decode(
    step: Step,
    layout: CacheLayout,
    prompts: np.ndarray,
    steps: int,
    forced: np.ndarray | None = None,
    context: dict[str, np.ndarray] | None = None,
) -> GenerationTrace:
    """Greedy decoding with the cache fed back; with ``forced`` [batch, steps], each step after the first is given the
    forced token instead of its own choice (the choice is still recorded). ``context`` goes into every step as it is
    (an encoder-decoder's encoder outputs)."""
    context = dict(context or {})
    past = empty_past(layout, prompts.shape[0])
    ids, cached = prompts, 0
    tokens, logits = [], []
    for index in range(steps):
        outputs = step(step_feed(layout, ids, past, cached, context))
        past = fed_back(outputs, past)
        last = np.asarray(outputs["logits"], dtype=np.float64)[:, -1, :]
        logits.append(last)
        chosen = last.argmax(axis=-1)
        tokens.append(chosen)
        cached += ids.shape[1]
        following = forced[:, index] if forced is not None else chosen
        ids = following.astype(np.int64)[:, None]
    return GenerationTrace(layout=layout, prompts=prompts, tokens=np.stack(tokens, axis=1), logits=np.stack(logits), context=context)


def compare_generation(
    reference: GenerationTrace, actual: GenerationTrace, tolerance: Tolerance, precision: str
) -> tuple[GenerationMetrics, str]:
    """The metrics of an artifact's teacher-forced decoding against the source's, and why it fails ("" when it passes)."""
    steps, batch = reference.logits.shape[0], reference.logits.shape[1]
    diverged_at: int | None = None
    agree = 0
    worst_abs, worst_cos = 0.0, 1.0
    for index in range(steps):
        want, got = reference.logits[index], actual.logits[index]
        if not np.all(np.isfinite(got)):
            diverged_at = index if diverged_at is None else diverged_at
            worst_abs, worst_cos = float("inf"), min(worst_cos, -1.0)
            continue
        difference = np.abs(got - want)
        worst_abs = max(worst_abs, float(difference.max()))
        worst_cos = min(worst_cos, *(_cosine(want[row], got[row]) for row in range(batch)))
        chosen = actual.tokens[:, index]
        own = reference.tokens[:, index]
        scored = want[np.arange(batch), chosen]
        best = want[np.arange(batch), own]
        ties = best - scored <= tolerance.atol + tolerance.rtol * np.abs(best)
        agree += int(np.sum((chosen == own) | ties))
        within = bool(np.all(difference <= tolerance.atol + tolerance.rtol * np.abs(want)))
        if diverged_at is None and (not within or not np.all((chosen == own) | ties)):
            diverged_at = index
    rate = agree / (steps * batch)
    metrics = GenerationMetrics(
        steps=steps,
        prompts=batch,
        token_agreement=round(rate, 6),
        first_divergent_step=diverged_at,
        max_abs_logits=worst_abs,
        min_cosine=worst_cos,
        judged_by="",
    )
    if by_agreement(tolerance, precision):
        floor = agreement_floor(tolerance, precision)
        cosine = next((bound for metric, _, bound in tolerance.budget if metric == "cosine"), None)
        metrics.judged_by = f"token_agreement>={floor:g}" + (f",cosine>={cosine:g}" if cosine is not None else "")
        failing = []
        if rate < floor:
            failing.append(f"the greedy tokens agree at {rate:.1%} of steps, below {floor:.0%}")
        if cosine is not None and worst_cos < cosine:
            failing.append(f"a step's logits have cosine {worst_cos:.6f}, below {cosine:g}")
        return metrics, "; ".join(failing)
    metrics.judged_by = f"tolerance atol={tolerance.atol:g},rtol={tolerance.rtol:g} ({tolerance.source})"
    if diverged_at is None:
        return metrics, ""
    index = diverged_at
    tokens_differ = [row for row in range(batch) if actual.tokens[row, index] != reference.tokens[row, index]]
    what = (
        f"picks token {int(actual.tokens[tokens_differ[0], index])} where the source picks {int(reference.tokens[tokens_differ[0], index])}"
        if tokens_differ
        else f"has logits off by up to {float(np.abs(actual.logits[index] - reference.logits[index]).max()):.3g}"
    )
    return metrics, f"generation diverges at step {index} of {steps}: the artifact {what} (teacher-forced greedy decoding, cache fed back)"


def by_agreement(tolerance: Tolerance, precision: str) -> bool:
    """Whether a generation is judged by its token agreement (a budget, or a reduced precision whose logits a task
    budget judges instead of their default budget) rather than elementwise by the tolerance."""
    return bool(tolerance.budget) or precision in GENERATION_AGREEMENT


def agreement_floor(tolerance: Tolerance, precision: str) -> float:
    """The least token agreement a reduced-precision artifact's generation must reach: the budget's token_agreement
    where one is given, else the precision's."""
    given = (bound for metric, _, bound in tolerance.budget if metric == "token_agreement")
    return next(given, GENERATION_AGREEMENT.get(precision, 1.0))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    return 1.0 if norm == 0 else float(np.dot(a, b) / norm)
