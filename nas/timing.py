"""Wall-clock timing of a call: warm-up runs, then the median, p90 and interquartile range
(the spread: on a shared machine repeated runs differ by tens of percent) of timed repeats.

Shared by the cost model (latency of a built child) and the standalone runtime
(``nas bench``); it imports nothing else from the engine.

On a GPU the host clock would time the kernel launches, not the kernels, which run
asynchronously: a call on a CUDA device is timed with CUDA events recorded on its stream
around the call, after the warm-up, and read once the device has synchronised (the
method of NVIDIA's "How to Implement Performance Metrics in CUDA C/C++", Harris, 2012).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p90_ms: float
    repeats: int
    iqr_ms: float = 0.0  # third minus first quartile; 0 with fewer than two repeats


def time_call(fn: Callable[[], object], warmup: int = 3, repeats: int = 10,
              device: Any = None) -> Timing:
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times timed: on the host's
    wall clock, or with CUDA events when ``device`` (a ``torch.device``) is a GPU."""
    for _ in range(warmup):
        fn()
    if device is not None and getattr(device, "type", None) == "cuda":
        times = _cuda_times(fn, repeats, device)
    else:
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1000.0)
    times.sort()
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    return Timing(statistics.median(times), p90, repeats, iqr(times))


def iqr(times: Sequence[float]) -> float:
    """Third minus first quartile of ``times`` (inclusive method); 0 for fewer than two."""
    if len(times) < 2:
        return 0.0
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return q3 - q1


def relative_iqr(times: Sequence[float]) -> float:
    """The spread of repeated timings as a fraction of their median (``iqr / median``):
    0.05 means the middle half of the runs lie within 5 % of the median's size."""
    median = statistics.median(times) if times else 0.0
    return iqr(times) / median if median > 0 else 0.0


def _cuda_times(fn: Callable[[], object], repeats: int, device: Any) -> list[float]:
    """Milliseconds of each of ``repeats`` calls of ``fn`` between two CUDA events on
    ``device``'s current stream (``Event.elapsed_time``), read after one synchronisation."""
    import torch

    torch.cuda.synchronize(device)  # the warm-up's kernels are not part of the first run
    pairs = []
    with torch.cuda.device(device):
        for _ in range(repeats):
            start, end = (torch.cuda.Event(enable_timing=True),
                          torch.cuda.Event(enable_timing=True))
            start.record()
            fn()
            end.record()
            pairs.append((start, end))
        torch.cuda.synchronize(device)
    return [float(start.elapsed_time(end)) for start, end in pairs]
