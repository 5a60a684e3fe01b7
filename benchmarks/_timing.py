"""Timing shared by the benchmark scripts: the median of repeated calls and the last result."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[], object], repeats: int, warmup: bool = False) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls of ``fn`` (after one untimed call when ``warmup``) and the last result."""
    if warmup:
        fn()
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result
