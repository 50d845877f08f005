"""Wall-clock timing of a call: warm-up runs, then the median, p90 and interquartile range
(the spread: on a shared machine repeated runs differ by tens of percent) of timed repeats.

Shared by the cost model (latency of a built child) and the standalone runtime
(``nas bench``); it imports nothing else from the engine.

A speed-up (teacher over student) is timed by one protocol, :func:`time_pair`: both models
in the same process and runtime, in interleaved rounds on the same batches (a busy
machine then slows both alike), each round's ratio kept, and the median ratio given with
its interquartile range; when the two models' timings spread more (their interquartile
ranges together) than their medians differ, the result is ``noisy``: the two cannot be
told apart on this machine now. A runtime is a
name (:data:`TORCH_FP32`; ONNX Runtime graphs plug in under their own names): the
callables decide what runs, the protocol how it is timed.

On a GPU the host clock would time the kernel launches, not the kernels, which run
asynchronously: a call on a CUDA device is timed with CUDA events recorded on its stream
around the call, after the warm-up, and read once the device has synchronised (the
method of NVIDIA's "How to Implement Performance Metrics in CUDA C/C++", Harris, 2012).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Timing:
    median_ms: float
    p90_ms: float
    repeats: int
    iqr_ms: float = 0.0  # third minus first quartile; 0 with fewer than two repeats


#: The runtime name of an eager PyTorch forward pass in float32 (the engine's graphs and
#: the teacher loaded into the engine's ``bert`` design both run this way).
TORCH_FP32 = "torch-fp32"

#: A latency's runtime as a run's ``latency:`` section names it → the name its timings
#: are recorded under: the engine's graph in torch, or its ONNX graph on ONNX Runtime in
#: fp32 or dynamic int8 (:mod:`nas.onnx_latency`).
LATENCY_RUNTIMES = {"torch": TORCH_FP32, "onnx": "onnx-fp32", "onnx-int8": "onnx-int8"}
#: The latency runtimes that time an ONNX graph.
ONNX_RUNTIMES = ("onnx", "onnx-int8")

#: The fewest interleaved rounds :func:`time_pair` runs: a quartile of fewer is not a spread.
MIN_ROUNDS = 5


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """PyTorch's intra-op threads set to ``n`` for the block, then restored: a speed-up is
    timed at one thread on both sides (the CPU serving setting the latency model and the
    int8 record use too; on a 2-core machine two threads per model also make the rounds
    several times noisier)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


#: The threads a speed-up is timed at, on the CPU (:func:`torch_threads`).
TIMING_THREADS = 1


def summarize(times: list[float], repeats: int | None = None) -> Timing:
    """Median, p90 and interquartile range of timings in milliseconds."""
    times = sorted(times)
    p90 = times[min(len(times) - 1, int(round(0.9 * (len(times) - 1))))]
    return Timing(statistics.median(times), p90, len(times) if repeats is None else repeats,
                  iqr(times))


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
    return summarize(times, repeats)


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


@dataclass(frozen=True)
class TimingResult:
    """A teacher and a student timed by :func:`time_pair`.

    ``speedup`` is the median over rounds of teacher time / student time (each round's
    two calls ran back to back), ``speedup_q1``/``speedup_q3`` its quartiles; ``noisy``
    when the timings' spread (the two interquartile ranges together) is larger than the
    difference between the two medians."""

    runtime: str
    teacher: Timing
    student: Timing
    speedup: float
    speedup_q1: float
    speedup_q3: float
    rounds: int

    @property
    def spread_ms(self) -> float:
        return self.teacher.iqr_ms + self.student.iqr_ms

    @property
    def noisy(self) -> bool:
        return self.spread_ms > abs(self.teacher.median_ms - self.student.median_ms)

    def per_call(self, calls: int) -> TimingResult:
        """The same timing of rounds of ``calls`` calls per model, in milliseconds per call
        (the ratios and the noise test do not change with the scale)."""
        def scaled(t: Timing) -> Timing:
            return replace(t, median_ms=t.median_ms / calls, p90_ms=t.p90_ms / calls,
                           iqr_ms=t.iqr_ms / calls)

        return replace(self, teacher=scaled(self.teacher), student=scaled(self.student))

    def warning(self, what: str) -> str | None:
        """One log line when the spread is larger than the difference, else ``None``."""
        if not self.noisy:
            return None
        return (f"{what}: speed-up {self.speedup:.2f}x ({self.runtime}): teacher "
                f"{self.teacher.median_ms:.3g} ms and student {self.student.median_ms:.3g} ms a "
                f"call differ by less than their spread over {self.rounds} rounds (interquartile "
                f"ranges {self.teacher.iqr_ms:.3g} + {self.student.iqr_ms:.3g} ms): the "
                "machine was too busy to tell the two apart; time again with more "
                "latency_repeats on a quiet machine")

    def to_dict(self) -> dict[str, Any]:
        """The record in ``metrics.json``: runtime, protocol, both medians and the ratio."""
        return {"runtime": self.runtime, "protocol": "interleaved", "rounds": self.rounds,
                "teacher_ms": self.teacher.median_ms, "teacher_iqr_ms": self.teacher.iqr_ms,
                "student_ms": self.student.median_ms, "student_iqr_ms": self.student.iqr_ms,
                "speedup": self.speedup, "speedup_iqr": [self.speedup_q1, self.speedup_q3],
                "noisy": self.noisy}


def ratio_result(teacher_ms: list[float], student_ms: list[float],
                 runtime: str = TORCH_FP32) -> TimingResult:
    """The :class:`TimingResult` of paired per-round timings (round ``i`` of each list ran
    back to back)."""
    if len(teacher_ms) != len(student_ms) or not teacher_ms:
        raise ValueError("paired timings need the same number of rounds, at least one")
    ratios = [t / s for t, s in zip(teacher_ms, student_ms, strict=True)]
    q1 = q3 = ratios[0]
    if len(ratios) >= 2:
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return TimingResult(runtime, summarize(teacher_ms), summarize(student_ms),
                        statistics.median(ratios), q1, q3, len(ratios))


def time_pair(teacher: Callable[[Any], object], student: Callable[[Any], object],
              batches: Sequence[Any], repeats: int, *, warmup: int = 3,
              runtime: str = TORCH_FP32, device: Any = None,
              clock: Callable[[], float] = time.perf_counter) -> TimingResult:
    """Time ``teacher(batch)`` against ``student(batch)`` on the same ``batches`` in
    ``max(repeats, MIN_ROUNDS)`` interleaved rounds; a round times each model over all
    batches, the teacher first in even rounds and second in odd ones (neither always gets
    the warmer cache). ``warmup`` untimed rounds come first. On a CUDA ``device`` each call
    is synchronised before the clock reads (the kernels, not their launch)."""
    rounds = max(repeats, MIN_ROUNDS)
    models = {"teacher": teacher, "student": student}
    times: dict[str, list[float]] = {"teacher": [], "student": []}
    sync = _synchroniser(device)
    for r in range(warmup + rounds):
        for name in ("teacher", "student") if r % 2 == 0 else ("student", "teacher"):
            elapsed = 0.0
            for batch in batches:
                sync()
                start = clock()
                models[name](batch)
                sync()
                elapsed += (clock() - start) * 1000.0
            if r >= warmup:
                times[name].append(elapsed)
    return ratio_result(times["teacher"], times["student"], runtime)


def _synchroniser(device: Any) -> Callable[[], None]:
    """A call that waits for ``device``'s queued kernels (nothing to wait for off a GPU)."""
    if device is None or getattr(device, "type", None) != "cuda":
        return lambda: None
    import torch

    return lambda: torch.cuda.synchronize(device)
