"""The ratio of two benchmarks' p50s with its 95% interval: round by round where both were timed in one session (a paired
comparison, which cancels what the rounds share), else from their two intervals (convert/timing.py)."""

from __future__ import annotations

import statistics

from convert.reports import model as rm
from convert.timing import median_interval


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
