"""How far timings taken on a shared, noisy machine can be trusted.

Benchmarks of one session are timed in interleaved rounds (convert/benchmark.py): within a round every contender
runs a block of runs in turn, so a slow moment of the machine falls on all of them alike. The median of each round
is one sample of a contender's speed; the p50's interval comes from those samples, and two contenders of one session
are compared by the ratio of their medians round by round (a paired comparison), which cancels what the rounds share.

The intervals are distribution-free: order statistics of the samples, chosen so that the median lies within them with
at least 95% confidence (fewer than 6 samples cannot give that, and their interval is their whole range).
"""

from __future__ import annotations

import math
import statistics

from convert.reports import model as rm

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


def paired_ratio(base: rm.Benchmark, other: rm.Benchmark, figure: str = "latency") -> rm.PairedRatio | None:
    """``other``'s p50 over ``base``'s with its interval: round by round where both were timed in one session, else
    from their two intervals (the widest ratio they allow). None where either has no p50. ``figure`` "decode" compares
    a decoder's decode time per token (the inverse of its decode_tokens_per_s) instead of the latency."""
    base_p50, base_interval, base_rounds = _timed(base, figure)
    other_p50, other_interval, other_rounds = _timed(other, figure)
    if not (base_p50 and other_p50):
        return None
    ratio = other_p50 / base_p50
    ratios = [b / a for a, b in zip(base_rounds, other_rounds) if a > 0]
    if base.session and base.session == other.session and len(base_rounds) == len(other_rounds) and len(ratios) >= 2:
        low, high = median_interval(ratios)
        return _ratio(statistics.median(ratios), low, high, len(ratios), paired=True)
    base_low, base_high = base_interval or (base_p50,) * 2
    other_low, other_high = other_interval or (other_p50,) * 2
    rounds = min(base.rounds, other.rounds) if figure == "latency" else min(len(base_rounds), len(other_rounds))
    return _ratio(ratio, other_low / base_high, other_high / base_low, rounds, paired=False)


def _timed(bench: rm.Benchmark, figure: str) -> tuple[float | None, list[float] | None, list[float]]:
    """(p50, its interval, the rounds' medians) of a benchmark's latency, or of its decode time per token (ms)."""
    if figure == "latency":
        return bench.latency_ms_p50, bench.latency_ms_interval, bench.round_ms
    if not bench.decode_tokens_per_s:
        return None, None, []
    interval = bench.decode_tokens_per_s_interval
    per_token = [1e3 / interval[1], 1e3 / interval[0]] if interval and min(interval) > 0 else None
    return 1e3 / bench.decode_tokens_per_s, per_token, bench.decode_round_ms


def _ratio(ratio: float, low: float, high: float, rounds: int, paired: bool) -> rm.PairedRatio:
    return rm.PairedRatio(
        ratio=round(ratio, 4),
        interval=[round(low, 4), round(high, 4)],
        rounds=rounds,
        paired=paired,
        within_noise=low <= 1.0 <= high,
    )


def describe_ratio(ratio: rm.PairedRatio) -> str:
    how = f"paired over {ratio.rounds} rounds" if ratio.paired else "from the two p50s' intervals"
    return f"{ratio.ratio:.2f}x (95% interval {ratio.interval[0]:.2f}–{ratio.interval[1]:.2f}, {how})"
