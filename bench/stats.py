"""Percentiles and small formatting helpers."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linearly interpolated between the two nearest ranks."""
    if not samples:
        return math.nan
    ordered = sorted(samples)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return ordered[low]
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(samples: Sequence[float]) -> dict[str, float]:
    """p50, p95, min, max and count of samples given in seconds, reported in milliseconds."""
    ms = [s * 1000.0 for s in samples]
    return {
        "p50_ms": percentile(ms, 50),
        "p95_ms": percentile(ms, 95),
        "min_ms": min(ms) if ms else math.nan,
        "max_ms": max(ms) if ms else math.nan,
        "n": float(len(ms)),
    }


def ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan
