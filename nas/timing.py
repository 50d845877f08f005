"""Wall-clock timing of a call: warm-up runs, then the median, p90 and interquartile range
(the spread: on a shared machine repeated runs differ by tens of percent) of timed repeats.

Shared by the cost model (latency of a built child) and the standalone runtime
(``nas bench``); it imports nothing else from the engine.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p90_ms: float
    repeats: int
    iqr_ms: float = 0.0  # third minus first quartile; 0 with fewer than two repeats


def time_call(fn: Callable[[], object], warmup: int = 3, repeats: int = 10) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    times.sort()
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    iqr = 0.0
    if len(times) >= 2:
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
        iqr = q3 - q1
    return Timing(statistics.median(times), p90, repeats, iqr)
