"""Tolerances live with the precision, not as magic numbers at call sites.

Full-precision artifacts are judged element by element: an element passes when
``|actual - expected| <= atol + rtol * |expected|``. The fp32 defaults sit close to what ONNX Runtime
achieves on CPU for float32 graphs.

The default atol scales with the output: it is ``atol x max(1, RMS)``, the RMS of the source's output over the
values compared in one shape case (every sample). A float32 graph that sums in another order than the source errs
in proportion to the magnitudes it sums, not to the value it lands on, so a value near zero inside an output whose
values run to hundreds (a detector's box coordinates) errs far beyond 1e-4. An output of unit scale or less keeps the
absolute atol, and the elementwise rtol is kept for every output. An atol the user gives (``--tolerance atol=...``)
is taken as it is, absolute: the report records the scale (``atol_scale``) only where it applied.

Reduced-precision artifacts (fp16, int8, int4) are judged by an accuracy budget of metrics that fit them:
cosine similarity and relative RMS error by default. Top-1 agreement (last axis of 2 or more), top-5
agreement (last axis over 5) and max abs error are reported, and budgeted only where a user asks: only
they know which outputs are class scores (the argmax of a hidden state means nothing). A user may override
tolerances (``--tolerance``) and budgets (``--accuracy``) for every output or one, and the report records
which applied and where it came from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from convert.errors import ConvertError

PRECISION_DEFAULTS = {
    "fp32": (1e-4, 1e-3),
    "fp16": (1e-2, 1e-2),
    "bf16": (5e-2, 5e-2),
}


# precisions from the strictest judged to the loosest (an artifact of two is judged as the looser)
PRECISION_LOOSENESS = {"fp32": 0, "fp16": 1, "bf16": 2, "int8": 3, "int4": 4}


def loosest(precisions) -> str:
    """The loosest-judged of some precisions (an unknown one counts as looser than any known)."""
    return max(precisions, key=lambda p: PRECISION_LOOSENESS.get(p, len(PRECISION_LOOSENESS)))


BUDGET_DEFAULTS = {
    "fp16": {"cosine": (">=", 0.999), "rel_rms": ("<=", 0.02)},
    # a source that computes in bfloat16 (8 bits of mantissa, 8x coarser than float16) rounds every activation, and an
    # artifact that rounds elsewhere (OpenVINO's f32 over bfloat16 weights) drifts from it with depth: 0.6 in a logit
    # of a 32-layer model, every greedy token the same
    "bf16": {"cosine": (">=", 0.995), "rel_rms": ("<=", 0.1)},
    "int8": {"cosine": (">=", 0.98), "rel_rms": ("<=", 0.2)},
    # weights in 4 bits (activations in float): a coarser grid on every weight, most of which averages out
    "int4": {"cosine": (">=", 0.97), "rel_rms": ("<=", 0.25)},
}
# token_agreement: the share of a decoder's greedy steps that pick the source's token (its generation check)
BUDGET_METRICS = {"cosine": ">=", "rel_rms": "<=", "top1": ">=", "top5": ">=", "max_abs": "<=", "token_agreement": ">="}
# a task metric's drop from the source to the artifact on the user's labelled data (a fraction; "0.5%" reads 0.005)
TASK_BUDGET_METRICS = {f"task_{metric}_drop": "<=" for metric in ("top1", "top5", "token_accuracy", "exact_match", "perplexity", "metric")}


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    source: str  # e.g. "default fp32" or "--tolerance logits:atol=1e-3"
    budget: tuple[tuple[str, str, float], ...] = ()  # (metric, ">=" or "<=", bound): set for fp16 / int8 / int4
    budget_source: str = ""
    elementwise: bool = True  # False: a reduced-precision output judged by a task metric's drop instead (no default budget)
    scales: bool = True  # the atol is the default's, scaled by the output's RMS; False: the user's, taken as absolute
    scale: float | None = None  # the RMS the atol was scaled by (None: not scaled yet, or absolute)

    def scaled(self, rms: float) -> Tolerance:
        """This tolerance for an output whose reference values have this RMS: the default atol times max(1, RMS)."""
        if not self.scales or self.scale is not None:
            return self
        return replace(self, atol=self.atol * max(1.0, rms), scale=rms)

    def describe_budget(self) -> str:
        return ",".join(f"{metric}{op}{bound:.10g}" for metric, op, bound in self.budget)

    def recorded(self) -> dict:
        """What an output's result records of the tolerance it was judged by."""
        return {
            "atol": self.atol,
            "rtol": self.rtol,
            "bounds": self.budget,
            "budget": self.describe_budget(),
            "budget_source": self.budget_source,
            "elementwise": self.elementwise,
        }


def default_tolerance(precision: str) -> Tolerance:
    atol, rtol = PRECISION_DEFAULTS.get(precision, PRECISION_DEFAULTS["fp32"])
    return Tolerance(atol, rtol, f"default {precision}")


class _Overrides:
    """Values given for every output or for one output by name, and the option text that gave them."""

    def __init__(self, texts, parse, flag: str):
        self.all: dict = {}
        self.per_output: dict[str, dict] = {}
        self._texts: dict[str | None, str] = {}
        self._flag = flag
        for text in texts:
            output, values = parse(text)
            (self.per_output.setdefault(output, {}) if output else self.all).update(values)
            self._texts[output] = text

    def for_output(self, name: str) -> dict:
        return {**self.all, **self.per_output.get(name, {})}

    def source(self, name: str, default: str) -> str:
        """Which option set the values of this output ("" key: every output), else the default."""
        key = name if name in self.per_output else None if self.all else ""
        return default if key == "" else f"{self._flag} {self._texts[key]}"


class TolerancePolicy:
    """Default tolerance and accuracy budget per precision, with overrides for all outputs or for one by name."""

    def __init__(self, overrides: list[str] | tuple[str, ...] = (), accuracy: list[str] | tuple[str, ...] = ()):
        self.given = (tuple(overrides), tuple(accuracy))  # what the user asked for (the stage cache keys on it)
        self._tolerances = _Overrides(overrides, _parse_override, "--tolerance")
        self.task_budget: dict[str, float] = {}  # task_METRIC_drop → the largest drop allowed, in the order given
        for text in accuracy:
            self.task_budget.update({m: bound for m, (_, bound) in parse_budget(text)[1].items() if m in TASK_BUDGET_METRICS})
        # the output budgets, from the texts without their task terms (a text of task terms only names no output's source)
        self._budgets = _Overrides(list(filter(None, map(_without_task_terms, accuracy))), parse_budget, "--accuracy")
        self.task_output: str | None = None  # the output the labels score (set once the data is read)

    def for_output(self, name: str, precision: str = "fp32") -> Tolerance:
        base = default_tolerance(precision)
        given = self._tolerances.for_output(name)
        values = {"atol": base.atol, "rtol": base.rtol, **given}
        source = self._tolerances.source(name, base.source)
        scales = "atol" not in given
        if precision not in BUDGET_DEFAULTS:
            return Tolerance(values["atol"], values["rtol"], source, scales=scales)
        # a task budget judges the scored output of reduced precision by what the task loses: its default budget no
        # longer applies (the other outputs keep theirs)
        by_task = bool(self.task_budget) and name == self.task_output
        bounds = {**({} if by_task else BUDGET_DEFAULTS[precision]), **self._budgets.for_output(name)}
        budget = tuple((metric, op, bound) for metric, (op, bound) in bounds.items())
        default = "the task metrics' drop" if by_task else f"default {precision}"
        return Tolerance(
            values["atol"], values["rtol"], source, budget, self._budgets.source(name, default), elementwise=bool(budget), scales=scales
        )

    def unknown_outputs(self, outputs: tuple[str, ...] | list[str]) -> list[str]:
        return [name for name in [*self._tolerances.per_output, *self._budgets.per_output] if name not in outputs]


def parse_budget(text: str) -> tuple[str | None, dict[str, tuple[str, float]]]:
    """``cosine>=0.995,top1>=0.98`` for every output, or ``logits:rel_rms<=0.05`` for one."""
    output, body = None, text
    if ":" in text:
        output, _, body = text.rpartition(":")
        output = output.strip() or None
    bounds: dict[str, tuple[str, float]] = {}
    for item in body.split(","):
        match = re.fullmatch(r"\s*([a-z_0-9]+)\s*(>=|<=)\s*([0-9.eE+-]+)(%?)\s*", item)
        metric, op = (match.group(1), match.group(2)) if match else ("", "")
        bound = _number(match.group(3)) if match else None
        if bound is not None and match.group(4):
            bound /= 100
        known = {**BUDGET_METRICS, **({} if output else TASK_BUDGET_METRICS)}
        if bound is None or known.get(metric) != op:
            raise ConvertError(
                f"cannot read the accuracy budget {text!r}",
                "Write it as cosine>=0.995,rel_rms<=0.05,top1>=0.98,top5>=0.99,max_abs<=0.1 for every output, or OUTPUT:cosine>=0.99 "
                "for one (cosine, top1, top5, token_agreement: >=; rel_rms, max_abs: <=); a task metric's drop on labelled --data as "
                "task_top1_drop<=0.5% (task_top1, task_top5, task_token_accuracy, task_exact_match, task_metric; for every output), or a "
                "perplexity's relative rise as task_perplexity_drop<=5%.",
            )
        bounds[metric] = (op, bound)
    return output, bounds


def _without_task_terms(text: str) -> str:
    """A budget text without its task_..._drop terms ("" when it had only those); an output's budget has none."""
    if ":" in text:
        return text
    return ",".join(item for item in text.split(",") if item.split("<")[0].split(">")[0].strip() not in TASK_BUDGET_METRICS)


def _number(text: str) -> float | None:
    """A finite number, or None ('1e', '1.2.3', 'nan' and 'inf' are no bounds)."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _parse_override(text: str) -> tuple[str | None, dict[str, float]]:
    """``atol=1e-3,rtol=1e-2`` for every output, or ``logits:atol=1e-3`` for one."""
    output = None
    body = text
    if ":" in text:
        output, _, body = text.rpartition(":")
        output = output.strip() or None
    values: dict[str, float] = {}
    for item in body.split(","):
        key, sep, raw = item.partition("=")
        key = key.strip()
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if not sep or key not in ("atol", "rtol") or not value >= 0:
            raise ConvertError(
                f"cannot read the tolerance {text!r}",
                "Write it as atol=1e-3,rtol=1e-2 for every output, or OUTPUT:atol=1e-3 for one output.",
            )
        values[key] = value
    return output, values
