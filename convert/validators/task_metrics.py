"""Task metrics on labelled samples: what a model is for, measured the same way on the source and on an artifact.

The labels say which output is scored: the first floating-point output whose shape is the labels' shape plus one
class axis. Labels of one value per row make a classification (top-1, and top-5 over more than 5 classes); labels of
one value per token (a last axis) make a token task (token accuracy over the positions not labelled -100, exact match:
the rows whose every labelled token is right, and perplexity: the exponent of the labelled tokens' mean cross-entropy).
A user's metric takes the outputs and labels of every sample. Perplexity is the one metric where lower is better: its
drop is the relative rise (metric_drop).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

IGNORED_LABEL = -100  # the label of a position no metric scores (padding), as Hugging Face's losses ignore it
TOP_K = 5
LOWER_IS_BETTER = ("perplexity",)


class TaskMetricError(ValueError):
    """The labels and the outputs do not make a task this module can score."""


def scored_output(outputs: dict[str, np.ndarray], labels: np.ndarray) -> str:
    """The output the labels score: floating point, shaped as the labels plus one class axis; one named like logits
    first (a pooled embedding can have that shape too)."""
    fitting = [
        name
        for name, value in outputs.items()
        if np.issubdtype(np.asarray(value).dtype, np.floating)
        and np.ndim(value) == labels.ndim + 1
        and np.shape(value)[:-1] == labels.shape
    ]
    if fitting:
        return next((name for name in fitting if "logit" in name.lower()), fitting[0])
    shapes = ", ".join(f"{n} {list(np.shape(v))}" for n, v in outputs.items())
    raise TaskMetricError(f"no output has the labels' shape {list(labels.shape)} plus a class axis (outputs: {shapes})")


def task_scores(
    outputs: list[dict[str, np.ndarray]], labels: list[np.ndarray], metric: Callable | None = None, output: str | None = None
) -> tuple[str, dict[str, float]]:
    """The scored output's name and every task metric that applies, over all samples (fractions, higher is better, and a
    token task's perplexity)."""
    if not outputs or len(outputs) != len(labels):
        raise TaskMetricError(f"{len(outputs)} outputs for {len(labels)} labelled samples")
    output = output or scored_output(outputs[0], labels[0])
    counts: dict[str, list[int]] = {}
    for sample, label in zip(outputs, labels):
        scores = np.asarray(sample[output])
        if scores.shape[:-1] != label.shape:
            raise TaskMetricError(f"output {output} has shape {list(scores.shape)} for labels of shape {list(label.shape)}")
        for name, (right, total) in _counts(scores.astype(np.float64), label).items():
            tally = counts.setdefault(name, [0, 0])
            tally[0] += right
            tally[1] += total
    found = {name: right / total for name, (right, total) in counts.items() if total and name != "nll"}
    if counts.get("nll", [0, 0])[1]:
        found["perplexity"] = float(np.exp(counts["nll"][0] / counts["nll"][1]))
    if metric is not None:
        value = metric(outputs, labels)
        try:
            found["metric"] = float(value)
        except (TypeError, ValueError):
            raise TaskMetricError(f"the metric returned {type(value).__name__} {value!r}, not a number") from None
    return output, found


def metric_drop(name: str, source: float, artifact: float) -> float:
    """How much worse the artifact is than the source on a metric: points lost (source - artifact), or for perplexity
    the relative rise (artifact / source - 1: 0.05 is 5% more perplexed)."""
    return artifact / source - 1.0 if name in LOWER_IS_BETTER else source - artifact


def describe_drop(name: str, drop: float) -> str:
    return f"rises {drop * 100:.2f}%" if name in LOWER_IS_BETTER else f"drops {drop * 100:.2f} points"


def drop_unit(name: str) -> str:
    """What a drop's hundredths are: points of a fraction, or percent of perplexity's rise."""
    return "%" if name in LOWER_IS_BETTER else " points"


def _counts(scores: np.ndarray, labels: np.ndarray) -> dict[str, tuple[float, int]]:
    predicted = scores.argmax(-1)
    if labels.ndim <= 1:  # one class per row
        found = {"top1": (int((predicted == labels).sum()), labels.size)}
        if scores.shape[-1] > TOP_K:
            top = np.argpartition(-scores, TOP_K, axis=-1)[..., :TOP_K]
            found["top5"] = (int((top == labels[..., None]).any(-1).sum()), labels.size)
        return found
    scored = labels != IGNORED_LABEL
    outside = labels[scored & ((labels < 0) | (labels >= scores.shape[-1]))]
    if outside.size:
        raise TaskMetricError(f"label {outside[0]} is not one of the {scores.shape[-1]} classes (or {IGNORED_LABEL}, not scored)")
    right = (predicted == labels) & scored
    rows = scored.reshape(-1, labels.shape[-1]).any(-1)
    exact = (right == scored).reshape(-1, labels.shape[-1]).all(-1) & rows
    logits = scores[scored]
    picked = np.take_along_axis(logits, labels[scored][:, None], axis=-1)[:, 0]
    top = logits.max(-1)
    log_partition = top + np.log(np.exp(logits - top[:, None]).sum(-1))
    return {
        "token_accuracy": (int(right.sum()), int(scored.sum())),
        "exact_match": (int(exact.sum()), int(rows.sum())),
        "nll": (float((log_partition - picked).sum()), int(scored.sum())),  # summed here, perplexity in task_scores
    }
