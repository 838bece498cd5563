"""Compare an artifact's outputs with the reference, output by output, by exact name.

No broadcasting, no fuzzy or positional matching, NaN never equals NaN, and an empty output never passes
vacuously. Each output gets metrics, not a bare boolean.

Three things fit the comparison to the output (docs/concepts/validation.md):

- The default atol scales with the output's RMS over a shape case (validators/tolerances.py).
- Positions a padding mask excludes are not compared: the values of a token-level output (its leading axes the
  mask's [batch, tokens]) at a masked token are the model's own garbage, which frameworks compute differently; no
  value at a real token depends on them. The report counts the values left out (``masked_values``).
- An output whose values spread over less than its tolerance (max - min over a shape case's samples, below the
  tolerance at its largest value) cannot fail an elementwise check whatever the artifact computes (a near-uniform
  softmax): it is also judged by the cosine similarity of the artifact's and the source's deviations from the
  source's mean, which must be at least DEVIATION_COSINE. Where the deviations are float32 rounding only (a constant
  output), there is nothing for a cosine to judge: the output is noted as constant and judged elementwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from convert.validators.tolerances import Tolerance, TolerancePolicy

TOP_K = 5  # top-k agreement: the reference's top-1 class is among the artifact's top 5
# the cosine of the deviations from the mean a low-spread output must reach: float32 noise on deviations well above
# rounding leaves it at 1 - 1e-8 or so, while a permuted, shifted or constant artifact's is far below
DEVIATION_COSINE = 0.9999
# deviations whose RMS is below this many float32 roundings of the largest value are rounding, not signal
ROUNDING_SPAN = 1000
# Lower edges of the absolute-error histogram: exactly 0, then one bin per decade from 1e-10 up, the last open-ended.
# Fixed edges let samples, shapes and runs be summed and compared bin by bin.
ERROR_HISTOGRAM_EDGES = [0.0, *(10.0**e for e in range(-10, 2))]


class OutputMetrics(BaseModel):
    """What the report keeps of one output's comparison (its schema is the report's)."""

    name: str
    status: Literal["passed", "failed"]
    reason: str = ""
    expected_shape: list[int] | None = None
    shape: list[int] | None = None
    expected_dtype: str | None = None
    dtype: str | None = None
    elements: int = 0
    max_abs_error: float | None = None
    max_rel_error: float | None = Field(None, description="max |a-e| / max(|e|, atol/rtol): sound near zero")
    mismatch_count: int = 0
    cosine_similarity: float | None = None
    rel_rms_error: float | None = Field(None, description="||a-e|| / ||e|| (float outputs)")
    top1_agreement: float | None = Field(None, description="fraction of rows whose argmax agrees (last axis of 2 or more)")
    top5_agreement: float | None = Field(
        None, description="fraction of rows whose reference argmax is in the artifact's top 5 (last axis over 5)"
    )
    nan_count: int = 0
    inf_count: int = 0
    atol: float | None = None
    rtol: float | None = None
    tolerance_source: str = ""
    budget: str = Field("", description="the accuracy budget that judged a reduced-precision output, e.g. 'cosine>=0.98,rel_rms<=0.2'")
    budget_source: str = ""
    samples: int = 0
    error_histogram: list[int] | None = Field(
        None, description="counts of |actual - expected| per bin of the report's error_histogram_edges"
    )
    atol_scale: float | None = Field(
        None,
        description="the RMS of the source's output over the shape case: atol is the default's times max(1, atol_scale); "
        "null where the atol is absolute (the user's --tolerance atol, or an output that is not float)",
    )
    masked_values: int = Field(0, description="values at positions the padding mask excludes, not compared (nor counted in elements)")
    masked_by: str = Field("", description="the padding mask input whose zeros left those positions out")
    spread: float | None = Field(None, description="max - min of the source's compared values over the shape case's samples")
    deviation_cosine: float | None = Field(
        None,
        description="cosine similarity of the artifact's and the source's deviations from the source's mean; judged "
        f"(>= {DEVIATION_COSINE}) where the spread is below the tolerance",
    )
    note: str = Field("", description="what the verdict cannot tell about this output (a constant or low-spread output)")


class OutputResult(OutputMetrics):
    """One output's comparison as it is made: the metrics, and what merging the samples needs besides (not reported)."""

    samples: int = 1
    bounds: tuple = Field((), exclude=True)  # the accuracy budget's (metric, op, bound) terms
    exact: bool = Field(False, exclude=True)  # compared exactly (integer and bool outputs)
    elementwise: bool = Field(True, exclude=True)  # False: judged by a task metric's drop, not by these values
    by_deviation: bool = Field(False, exclude=True)  # a low-spread output: its deviation_cosine is judged too
    reasons: list[str] = Field([], exclude=True)

    def metrics(self) -> OutputMetrics:
        return OutputMetrics(**self.model_dump())


@dataclass(frozen=True)
class ReferenceStats:
    """What judging an output takes from the source's values over a shape case's samples (compared positions only)."""

    rms: float
    mean: float
    spread: float  # max - min
    largest: float  # max |value|
    deviation_rms: float  # RMS of value - mean
    varies: bool | None  # whether the samples' outputs differ (None: a single sample)

    def low_spread(self, tolerance: Tolerance) -> str:
        """How an elementwise check falls short here: "cosine" where the values spread over less than the tolerance at
        the largest of them and their deviations are more than float32 rounding; "constant" where they are rounding
        only; "" where it can tell."""
        if self.spread > tolerance.atol + tolerance.rtol * self.largest:
            return ""
        return "constant" if self.deviation_rms <= ROUNDING_SPAN * np.finfo(np.float32).eps * self.largest else "cosine"


def shown_values(array: np.ndarray, shown: np.ndarray | None) -> np.ndarray:
    """The values at the positions ``shown`` (a boolean mask over the leading axes) keeps; all of them without one."""
    return array if shown is None else np.asarray(array)[np.asarray(shown, dtype=bool)]


def reference_stats(references: list[np.ndarray], shown: list[np.ndarray | None] | None = None) -> ReferenceStats | None:
    """The statistics of one output's reference values over samples (None for an output that is not float, or not
    finite, or empty: such outputs are judged on what they are)."""
    shown = shown or [None] * len(references)
    arrays = [np.asarray(r) for r in references]
    if not arrays or not all(_is_float(a) for a in arrays):
        return None
    values = np.concatenate([shown_values(a, m).astype(np.float64).ravel() for a, m in zip(arrays, shown)])
    if not values.size or not np.isfinite(values).all():
        return None
    mean = float(values.mean())
    same_shape = len(arrays) > 1 and all(a.shape == arrays[0].shape for a in arrays)
    return ReferenceStats(
        rms=float(np.sqrt(np.mean(values**2))),
        mean=mean,
        spread=float(values.max() - values.min()),
        largest=float(np.abs(values).max()),
        deviation_rms=float(np.sqrt(np.mean((values - mean) ** 2))),
        varies=any(not np.array_equal(a, arrays[0]) for a in arrays[1:]) if same_shape else None,
    )


def _is_float(array: np.ndarray) -> bool:
    return np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.complexfloating)


def compare_output(
    name: str,
    expected: np.ndarray,
    actual: np.ndarray,
    tolerance: Tolerance,
    shown: np.ndarray | None = None,
    stats: ReferenceStats | None = None,
    masked_by: str = "",
) -> OutputResult:
    """One output of one sample. ``shown``: the positions compared (a boolean mask over the leading axes, from the
    padding mask ``masked_by``); ``stats``: the reference's over the whole shape case (this sample's alone without)."""
    if shown is not None and (expected.shape[: np.ndim(shown)] != np.shape(shown) or actual.shape != expected.shape):
        shown = None  # not token-level here: compared everywhere (a shape mismatch fails below)
    if stats is None:
        stats = reference_stats([expected], [shown])
    if stats is not None:
        tolerance = tolerance.scaled(stats.rms)
    result = OutputResult(
        name=name,
        status="passed",
        expected_shape=list(expected.shape),
        shape=list(actual.shape),
        expected_dtype=str(expected.dtype),
        dtype=str(actual.dtype),
        elements=int(expected.size),
        atol_scale=tolerance.scale,
        tolerance_source=tolerance.source,
        **tolerance.recorded(),
    )
    if shown is not None:
        expected, actual = shown_values(expected, shown), shown_values(actual, shown)
        result.masked_values, result.masked_by = result.elements - int(expected.size), masked_by
        result.elements = int(expected.size)
    problems = []
    if _is_float(actual):
        result.nan_count = int(np.isnan(actual).sum())
        result.inf_count = int(np.isinf(actual).sum())
    if actual.dtype != expected.dtype:
        problems.append(f"dtype {actual.dtype} where the source gives {expected.dtype}")
    if actual.shape != expected.shape:
        problems.append(f"shape {list(actual.shape)} where the source gives {list(expected.shape)}")
    if result.masked_values and expected.size == 0:
        problems.append(f"every position is masked by '{masked_by}': there is nothing to compare")
    elif expected.size == 0 or actual.size == 0:
        problems.append("empty output: there is nothing to compare")
    if _is_float(expected) and not np.isfinite(expected).all():
        problems.append("the source model's own output has NaN or Inf on these inputs")
    if result.nan_count or result.inf_count:
        problems.append(f"{result.nan_count} NaN and {result.inf_count} Inf values")

    if actual.shape == expected.shape and expected.size:
        exp = expected.astype(np.float64)
        act = actual.astype(np.float64)
        diff = np.abs(act - exp)
        # NaN anywhere is a mismatch: comparisons with NaN are False, so count "not within bounds".
        within = diff <= tolerance.atol + tolerance.rtol * np.abs(exp)
        exact = not (_is_float(expected) or _is_float(actual))
        if exact:
            within = act == exp
        result.mismatch_count = int((~within).sum())
        finite = np.isfinite(diff)
        result.max_abs_error = float(diff[finite].max()) if finite.any() else float("nan")
        if not exact:
            result.error_histogram = error_histogram(diff[finite])
        # Relative error is measured against max(|expected|, atol/rtol) so values near zero do not blow it up.
        floor = tolerance.atol / tolerance.rtol if tolerance.rtol > 0 else max(tolerance.atol, 1e-12)
        rel = diff / np.maximum(np.abs(exp), floor)
        result.max_rel_error = float(rel[finite].max()) if finite.any() else float("nan")
        result.cosine_similarity = _cosine(exp, act)
        result.exact = exact
        if stats is not None and not exact:
            _judge_spread(result, stats, tolerance, exp, act)
        # measured for every float output, judged only where a budget bounds them (reduced precision, or a gate policy)
        if not exact and np.isfinite(act).all():
            norm = float(np.linalg.norm(exp))
            result.rel_rms_error = float(np.linalg.norm(act - exp) / norm) if norm else float(np.linalg.norm(act))
            if exp.ndim >= 2 and exp.shape[-1] >= 2:
                result.top1_agreement = float((exp.argmax(-1) == act.argmax(-1)).mean())
            if exp.ndim >= 2 and exp.shape[-1] > TOP_K:
                top_k = np.argpartition(-act, TOP_K, axis=-1)[..., :TOP_K]
                result.top5_agreement = float((top_k == exp.argmax(-1)[..., None]).any(-1).mean())
    result.reasons = problems
    _finish(result)
    return result


def _judge_spread(result: OutputResult, stats: ReferenceStats, tolerance: Tolerance, exp: np.ndarray, act: np.ndarray) -> None:
    """Note what an elementwise check cannot tell about this output, and judge a low-spread one by its deviations."""
    result.spread = stats.spread
    kind = stats.low_spread(tolerance)
    notes = []
    if kind == "constant":
        notes.append(f"constant: every value is {stats.mean:.6g} up to float32 rounding, so it is judged elementwise only")
    elif kind == "cosine":
        result.deviation_cosine = _cosine(exp - stats.mean, act - stats.mean)
        result.by_deviation = not result.bounds  # a budget judges reduced precision by metrics of its own
        judged = f"judged by the cosine of its deviations from their mean too (>= {DEVIATION_COSINE})" if result.by_deviation else ""
        notes.append(f"its values spread over {stats.spread:.3g}, within its tolerance" + (f": {judged}" if judged else ""))
    if stats.varies is False:
        notes.append("the same for every sample: it does not depend on the generated inputs")
    result.note = "; ".join(notes)


def error_histogram(errors: np.ndarray) -> list[int]:
    """Counts of absolute errors per bin of ERROR_HISTOGRAM_EDGES (the first bin holds exact zeros and errors below 1e-10)."""
    bins = np.searchsorted(np.asarray(ERROR_HISTOGRAM_EDGES[1:]), errors.ravel(), side="right")
    return np.bincount(bins, minlength=len(ERROR_HISTOGRAM_EDGES)).astype(int).tolist()


def _finish(result: OutputResult) -> None:
    """Set status and the one-line reason from the problems and the (possibly summed) mismatch count."""
    problems = list(result.reasons)
    if result.bounds and not result.exact:
        problems += _budget_problems(result)
    else:
        if result.mismatch_count and (result.elementwise or result.exact):
            bound = "exactly" if result.exact else f"atol={result.atol:g}, rtol={result.rtol:g}"
            scaled = f" (atol scaled by the output's RMS {result.atol_scale:.3g})" if result.atol_scale and result.atol_scale > 1 else ""
            problems.append(
                f"{result.mismatch_count} of {result.elements} values differ beyond {bound}{scaled} "
                f"(max abs error {result.max_abs_error:.3g}, max rel error {result.max_rel_error:.3g})"
            )
        cosine = result.deviation_cosine
        if result.by_deviation and not result.exact and (cosine is None or not cosine >= DEVIATION_COSINE):
            shown = "unknown" if cosine is None else f"{cosine:.6g}"
            problems.append(
                f"its values spread over only {result.spread:.3g}, within its tolerance, and the artifact's deviations from "
                f"their mean have cosine {shown} with the source's, below {DEVIATION_COSINE}"
            )
    if problems or result.status == "failed":
        result.status = "failed"
        result.reason = "; ".join(problems) or result.reason


def _budget_problems(result: OutputResult) -> list[str]:
    """The accuracy-budget bounds this output misses (metrics that do not apply to it are not judged)."""
    values = {
        "cosine": result.cosine_similarity,
        "rel_rms": result.rel_rms_error,
        "top1": result.top1_agreement,
        "top5": result.top5_agreement,
        "max_abs": result.max_abs_error,
    }
    problems = []
    for metric, op, bound in result.bounds:
        value = values.get(metric)  # token_agreement judges a decoder's generation check, not one output
        if value is None:
            continue
        if not (value >= bound if op == ">=" else value <= bound) or np.isnan(value):
            problems.append(f"{metric} {value:.8g} misses the budget {metric}{op}{bound:.10g} ({result.budget_source})")
    return problems


def _cosine(expected: np.ndarray, actual: np.ndarray) -> float | None:
    if not (np.isfinite(expected).all() and np.isfinite(actual).all()):
        return None
    e, a = expected.ravel(), actual.ravel()
    ne, na = float(np.linalg.norm(e)), float(np.linalg.norm(a))
    if ne == 0.0 and na == 0.0:
        return 1.0
    if ne == 0.0 or na == 0.0:
        return 0.0
    return float(np.dot(e, a) / (ne * na))


def compare_outputs(
    expected: dict[str, np.ndarray],
    actual: dict[str, np.ndarray],
    policy: TolerancePolicy,
    precision: str = "fp32",
    shown: dict[str, tuple[str, np.ndarray]] | None = None,
    stats: dict[str, ReferenceStats | None] | None = None,
) -> list[OutputResult]:
    """Every expected output must be present by its exact name; extra outputs fail too. ``shown``: output → (the
    padding mask input, the positions it keeps) for token-level outputs; ``stats``: output → its reference statistics
    over the shape case (each sample's own where not given)."""
    shown, stats = shown or {}, stats or {}
    results = []
    for name, reference in expected.items():
        if name not in actual:
            results.append(
                OutputResult(
                    name=name,
                    status="failed",
                    reason=f"missing: the artifact has no output named '{name}' (it has {sorted(actual) or 'none'})",
                    expected_shape=list(reference.shape),
                    expected_dtype=str(reference.dtype),
                )
            )
            continue
        mask_name, positions = shown.get(name, ("", None))
        results.append(
            compare_output(
                name,
                np.asarray(reference),
                np.asarray(actual[name]),
                policy.for_output(name, precision),
                positions,
                stats.get(name),
                mask_name,
            )
        )
    for name in actual:
        if name not in expected:
            results.append(
                OutputResult(
                    name=name,
                    status="failed",
                    reason=f"extra: the source model has no output named '{name}'",
                    shape=list(np.shape(actual[name])),
                )
            )
    return results


def merge_results(per_sample: list[list[OutputResult]]) -> list[OutputResult]:
    """Worst case over samples, per output name: max errors, summed counts, min cosine, every reason."""
    merged: dict[str, OutputResult] = {}
    for results in per_sample:
        for r in results:
            if r.name not in merged:
                merged[r.name] = r.model_copy(update={"reasons": list(r.reasons)})
                continue
            m = merged[r.name]
            m.samples += 1
            m.max_abs_error = _worst(m.max_abs_error, r.max_abs_error, max)
            m.max_rel_error = _worst(m.max_rel_error, r.max_rel_error, max)
            m.cosine_similarity = _worst(m.cosine_similarity, r.cosine_similarity, min)
            m.deviation_cosine = _worst(m.deviation_cosine, r.deviation_cosine, min)
            m.masked_values += r.masked_values
            m.by_deviation = m.by_deviation or r.by_deviation
            m.spread = _worst(m.spread, r.spread, max)
            m.rel_rms_error = _worst(m.rel_rms_error, r.rel_rms_error, max)
            m.top1_agreement = _worst(m.top1_agreement, r.top1_agreement, min)
            m.top5_agreement = _worst(m.top5_agreement, r.top5_agreement, min)
            m.mismatch_count += r.mismatch_count
            if m.error_histogram is not None and r.error_histogram is not None:
                m.error_histogram = [a + b for a, b in zip(m.error_histogram, r.error_histogram)]
            m.nan_count += r.nan_count
            m.inf_count += r.inf_count
            m.elements += r.elements
            m.status = "failed" if r.status == "failed" else m.status
            m.reasons.extend(reason for reason in r.reasons if reason not in m.reasons)
    for m in merged.values():
        _finish(m)
    return list(merged.values())


def _worst(a, b, pick):
    if a is None:
        return b
    if b is None:
        return a
    if np.isnan(a) or np.isnan(b):
        return float("nan")
    return pick(a, b)
