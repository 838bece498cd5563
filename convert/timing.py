"""How far timings taken on a shared, noisy machine can be trusted.

Benchmarks of one session are timed in interleaved rounds (convert/benchmark.py): within a round every contender
runs a block of runs in turn, so a slow moment of the machine falls on all of them alike. The median of each round
is one sample of a contender's speed; the p50's interval comes from those samples, and two contenders of one session
are compared by the ratio of their medians round by round (a paired comparison, convert/reports/ratios.py), which cancels
what the rounds share.

The intervals are distribution-free: order statistics of the samples, chosen so that the median lies within them with
at least 95% confidence (fewer than 6 samples cannot give that, and their interval is their whole range).
"""

from __future__ import annotations

import math
import statistics

CONFIDENCE = 0.95
# a p50 whose interval is wider than this share of it cannot be ranked against a figure that close: it is "unstable"
UNSTABLE_WIDTH = 0.2


def median_interval(samples: list[float]) -> tuple[float, float]:
    """[low, high] holding the samples' population median with ≥ 95% confidence (binomial order statistics)."""
    ordered = sorted(samples)
    n = len(ordered)
    tail = (1 - CONFIDENCE) / 2
    k = 0  # number of samples cut from each end
    while k + 1 < n / 2 and _binomial_tail(n, k + 2) <= tail:
        k += 1
    return ordered[k], ordered[n - 1 - k]


def p50_interval(round_ms: list[float], p50: float) -> tuple[float, float]:
    """The interval of the rounds' medians, widened to hold ``p50``: the p50 pools every run while the interval comes
    from the rounds' medians, and a lopsided spread of runs within rounds can put the one outside the other."""
    low, high = median_interval(round_ms)
    return min(low, p50), max(high, p50)


def _binomial_tail(n: int, k: int) -> float:
    """P(X < k) for X ~ Binomial(n, 1/2): the chance that fewer than k samples fall below the median (cutting k - 1
    samples from each end leaves an interval that misses the median with twice this chance)."""
    return sum(math.comb(n, i) for i in range(k)) / 2**n


def is_unstable(p50: float, interval: tuple[float, float] | list[float] | None) -> bool:
    return interval is not None and p50 > 0 and (interval[1] - interval[0]) / p50 > UNSTABLE_WIDTH


def coefficient_of_variation(samples: list[float]) -> float | None:
    if len(samples) < 2 or statistics.fmean(samples) <= 0:
        return None
    return statistics.stdev(samples) / statistics.fmean(samples)
