"""What every recipe measures the same way: the teacher's row of the report, latency at the
report split's median length, and how much the evaluation texts overlap training.

A recipe's numbers are compared across methods (AdaBERT, TinyBERT...) in ``nas report``,
so they must be measured identically: FLOPs from the cost model at the run's sequence
length (docs/reference.md#costs), latency as the median forward pass of batches of 1 and 32
report-split examples closest to the split's median token length (the ratios then hold for typical
inputs, not for the shortest one), on the threads the process was given.

The teacher is timed as an engine graph (loaded into the ``bert`` design, like every
student) in the run itself, never read from the ``teacher-costs`` cache, and a speed-up is
the teacher and the student timed in interleaved rounds in one process
(:func:`paired_speedups`, :func:`nas.timing.time_pair`;
docs/latency.md#speed-ups-one-timing-protocol).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import torch

from nas.timing import TORCH_FP32

log = logging.getLogger("nas.measure")

#: The batch sizes latency is measured at.
LATENCY_BATCH_SIZES = (1, 32)

Batches = Callable[[Any, int], Iterator[dict[str, Any]]]


def median_length_batches(report: Any, tokenizer: Any, max_seq_len: int,
                          batches: Batches) -> tuple[int, dict[int, dict[str, Any]]]:
    """``(median tokens, {batch size: batch})``: batches of 1 and 32 examples of ``report``
    (a :class:`~nas.data.TaskData`) closest to its median token length.

    ``batches(data, batch_size)`` turns a subset into the recipe's model batches (its
    tokenisation: joint or separate pairs); its first batch is taken.
    """
    from nas.tokenization import encode

    texts_b = report.texts_b
    lengths = encode(tokenizer, list(report.texts_a), list(texts_b) if texts_b else None,
                     max_seq_len, separate_b=False)["attention_mask"].sum(1).numpy()
    median = float(np.median(lengths))
    closest = np.argsort(np.abs(lengths - median), kind="stable")
    return int(round(median)), {
        bs: next(batches(report.subset(sorted(closest[:bs].tolist())), bs))
        for bs in LATENCY_BATCH_SIZES}


def teacher_costs(model_dir: str, num_labels: int, *, dev_metrics: Mapping[str, float],
                  report_split: str, report: Any, tokenizer: Any, max_seq_len: int
                  ) -> dict[str, Any]:
    """The fine-tuned teacher's row without its latency: dev metrics (from its fine-tune),
    report-split metrics, parameters and FLOPs per example at ``max_seq_len`` (what may be
    cached; latency is timed in each run: :func:`teacher_latency`)."""
    from nas.cost import count_costs, count_model_params
    from nas.hf import space_kwargs_from_hf
    from nas.space import get_space
    from nas.teacher import evaluate, load_teacher

    model = load_teacher(model_dir, num_labels=num_labels).eval()
    name, kwargs = space_kwargs_from_hf(model.config)
    flops = count_costs(get_space(name, **kwargs), None, max_seq_len).flops
    costs: dict[str, Any] = {"dev": dict(dev_metrics)}
    if report_split != "dev":
        costs[report_split] = evaluate(model, report, tokenizer, max_seq_len=max_seq_len)
    else:
        costs["dev"] = evaluate(model, report, tokenizer, max_seq_len=max_seq_len)
    costs.update({"params": count_model_params(model), "flops": flops, "seq_len": max_seq_len,
                  "model_dir": model_dir})
    return costs


def teacher_latency(model: torch.nn.Module, latency_batches: Mapping[int, Mapping[str, Any]],
                    repeats: int) -> dict[str, Any]:
    """``{"batchN": latency}`` of the teacher as an engine graph (``model``: the ``bert``
    design, :func:`nas.hf.load_teacher_as_design`), timed now, as a student is."""
    from nas.cost import measure_latency

    return {f"batch{bs}": measure_latency(model, batch, repeats=repeats).to_dict()
            for bs, batch in latency_batches.items()}


#: Calls of each model per interleaved round, by batch size: a batch-1 call of a small
#: int8 graph takes under a millisecond, where one call's time is mostly timer and cache
#: noise (the quickstart's int8 pair at one call a round: interquartile ranges of the
#: ratio 1.3-2.4 on an idle machine); ten calls a round time ten times as much work.
CALLS_PER_ROUND = {1: 10}


def paired_speedups(teacher: Callable[[Any], object], student: Callable[[Any], object],
                    latency_batches: Mapping[int, Any], repeats: int, *,
                    runtime: str = TORCH_FP32, device: Any = None,
                    what: str = "student") -> dict[str, Any]:
    """The speed-up of ``student`` over ``teacher`` per batch size, both timed by
    :func:`nas.timing.time_pair` (interleaved rounds, the same batches) in ``runtime``,
    on the CPU at one torch thread (:data:`nas.timing.TIMING_THREADS`), each round
    :data:`CALLS_PER_ROUND` calls of each model: ``{"runtime", "protocol", "noisy",
    "threads", "batchN": TimingResult.to_dict()}`` in milliseconds per call. A batch size
    whose spread is larger than the difference is logged as a warning and marked
    ``noisy`` (the report repeats it).

    ``latency_batches`` maps a batch size to what both callables take (a batch, or a
    pair of the teacher's and the student's batches when their tokenisers differ)."""
    import contextlib

    from nas.timing import TIMING_THREADS, time_pair, torch_threads

    on_cpu = device is None or getattr(device, "type", "cpu") == "cpu"
    out: dict[str, Any] = {"runtime": runtime, "protocol": "interleaved", "noisy": False}
    if on_cpu:
        out["threads"] = TIMING_THREADS
    with torch_threads(TIMING_THREADS) if on_cpu else contextlib.nullcontext():
        for bs, batch in sorted(latency_batches.items()):
            calls = CALLS_PER_ROUND.get(bs, 1)
            result = time_pair(teacher, student, [batch] * calls, repeats, runtime=runtime,
                               device=device).per_call(calls)
            out[f"batch{bs}"] = {**result.to_dict(), "calls_per_round": calls}
            message = result.warning(f"{what} vs teacher at batch {bs}")
            if message:
                log.warning("%s", message)
                out["noisy"] = True
    return out


def cached_teacher_costs(run: Any, teacher: Any, num_labels: int, *, report_split: str,
                         report: Any, tokenizer: Any, max_seq_len: int,
                         latency_batches: Mapping[int, Mapping[str, Any]],
                         latency_repeats: int,
                         engine_teacher: Callable[[], torch.nn.Module]) -> dict[str, Any]:
    """:func:`teacher_costs` of a run's fine-tuned ``teacher`` (a
    :class:`~nas.teacher.FinetuneResult`) with its latency timed in this run, kept in the
    run's ``teacher.json`` (a resumed run reports the same row).

    A new run folder reuses the scores, parameters and FLOPs of an earlier run of the same
    teacher, report split and length on this machine and thread count (the cache's
    ``teacher-costs`` kind; scoring the teacher on SST-2's 1,821 test sentences takes most
    of a smoke run), never its latency: a latency in a cached row (written before this
    rule) is dropped, and ``engine_teacher()`` (the teacher in the ``bert`` design the
    students are timed as) is timed now (:func:`teacher_latency`)."""
    from nas.cache import cache_root, json_key
    from nas.checkpoint import atomic_write_json
    from nas.latency import machine

    known = run.load_json("teacher.json")
    if known is not None and "runtime" in known:
        return known  # a resumed run: the row timed in this run folder
    key = json_key({"model": teacher.model_dir, "model_key": getattr(teacher, "key", None),
                    "dev": teacher.metrics, "split": report_split,
                    "report": getattr(report, "fingerprint", None), "num_labels": num_labels,
                    "max_seq_len": max_seq_len, "machine": machine(),
                    "threads": torch.get_num_threads()})
    path = cache_root() / "teacher-costs" / f"{key}.json"
    costs = None
    if getattr(report, "fingerprint", None):
        try:
            costs = {**json.loads(path.read_text()), "from_cache": str(path)}
        except (OSError, ValueError):
            costs = None  # absent or unreadable: measure again and rewrite it
    if costs is None:
        costs = teacher_costs(teacher.model_dir, num_labels, dev_metrics=teacher.metrics,
                              report_split=report_split, report=report, tokenizer=tokenizer,
                              max_seq_len=max_seq_len)
        if getattr(report, "fingerprint", None):
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(path, costs)
    # timed now: a latency in a cached row (written before this rule) is replaced
    costs.update(latency=teacher_latency(engine_teacher(), latency_batches, latency_repeats),
                 runtime=TORCH_FP32)
    run.save_json("teacher.json", costs)
    return costs


def _cached_overlap(train: Any, data: Any, count: Any) -> Any:
    """:func:`~nas.data.overlap.text_overlap` of two splits, cached by their content
    fingerprints (the n-grams of a 67k-sentence training set take seconds, and every
    run of a task counts the same pair again)."""
    from nas.cache import cache_root, json_key
    from nas.checkpoint import atomic_write_json
    from nas.data.overlap import Overlap

    if not (train.fingerprint and data.fingerprint):
        return count()
    path = cache_root() / "overlap" / f"{json_key([train.fingerprint, data.fingerprint])}.json"
    try:
        return Overlap(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        pass  # absent or unreadable: count again and rewrite it
    overlap = count()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, dataclasses.asdict(overlap))
    return overlap


def overlap_counts(task: str, train: Any, evaluated: Mapping[str, Any]) -> dict[str, Any]:
    """For each ``name → TaskData`` of ``evaluated``: how many of its texts overlap the
    training texts (exactly, or by a shared phrase); warns when more than 5% do."""
    from nas.data.overlap import text_overlap

    def texts(data: Any) -> list[str]:
        return list(data.texts_a) + list(data.texts_b or ())

    found = {}
    for name, data in evaluated.items():
        overlap = _cached_overlap(train, data, lambda d=data: text_overlap(
            texts(train), texts(d), train_key=train.fingerprint or None))
        found[name] = {"examples": overlap.examples, "exact": overlap.exact,
                       "shared_phrase": overlap.shared_phrase, "min_words": overlap.min_words}
        if overlap.fraction > 0.05:
            log.warning(overlap.message(f"{task}/{name}"))
    return found


__all__ = ["CALLS_PER_ROUND", "LATENCY_BATCH_SIZES", "cached_teacher_costs",
           "median_length_batches", "overlap_counts", "paired_speedups",
           "teacher_costs", "teacher_latency"]
