"""Speed-ups of an export in the runtime it ships in (docs/latency.md, the one protocol).

An export that ships an ONNX graph (``model.onnx``, fp32 or dynamic int8) is not run in
PyTorch by its users, so its speed-up is timed where it runs, by the one timing protocol
(:func:`nas.timing.time_pair`: one process, interleaved rounds, the same batches, the
same number of threads on both sides: one), three ways:

- against the teacher in the **same runtime**: the teacher exported as the students
  were (its ONNX graph, quantised alike; :func:`teacher_export`). The fair figure: ONNX
  Runtime and int8 make the teacher itself several times faster (4.3x for SST-2's MiniLM
  teacher, docs/exports.md), so a student is worth shipping only if it beats that;
- against the teacher in **PyTorch fp32** (``vs_torch_fp32``): what the user had, the
  teacher as every run times it (the engine's ``bert`` design);
- **structural** (``structural``): both in PyTorch fp32, the export's fp32 weights: what
  the smaller shape alone gives.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from nas.measure import paired_speedups
from nas.runtime import CONFIG_FILE, ONNX_FILE
from nas.timing import TORCH_FP32

#: Where a run exports its teacher in the runtime its students ship in.
TEACHER_EXPORT = "teacher_export"
#: The teacher's ``max_int8_drop``: more points than any metric has, so no layer search.
NO_FALLBACK = 100.0


def ships_onnx(folder: Path) -> bool:
    """Whether the export in ``folder`` ships an ONNX graph (a native export has none:
    a re-export removes a stale one)."""
    return (folder / CONFIG_FILE).is_file() and (folder / ONNX_FILE).is_file()


def teacher_export(export: Callable[..., Path], space: Any, model: torch.nn.Module,
                   folder: Path, keywords: Mapping[str, Any]) -> Path:
    """The teacher exported into ``folder`` in the runtime its students ship in
    (``keywords``: the run's export format and int8 settings, without the vocabulary
    trim, a step a user of the teacher would not take); an export already there (a
    resumed run) is reused. ``export`` is the run's one export function
    (:meth:`recipes.common.TaskContext.export_model`)."""
    if ships_onnx(folder):
        return folder
    kept = {k: v for k, v in keywords.items() if k != "trim"}
    if "quantize" in kept:
        # the reference is timed, not shipped: its int8 graph is compared with fp32 on dev
        # and recorded, but no layer is kept in fp32 to win points back (a greedy search
        # over a teacher's layers costs minutes, and fp32 layers would only slow it)
        kept["max_int8_drop"] = NO_FALLBACK
    # a copy: an export may convert or trim the model it is given
    return export(space, None, folder, model=copy.deepcopy(model).eval(), **kept)


def shipped_speedups(teacher_torch: Callable[[Any], object], teacher_folder: Path,
                     folder: Path, batches: Mapping[int, Any], repeats: int, *,
                     what: str = "student") -> dict[str, Any]:
    """The export in ``folder`` timed in its shipped ONNX graph against the teacher's
    export in ``teacher_folder`` (the same runtime: the record's ``batchN`` and
    ``runtime``), against ``teacher_torch`` (the teacher in PyTorch fp32:
    ``vs_torch_fp32``), and its fp32 weights in PyTorch against ``teacher_torch``
    (``structural``); both ONNX sessions at the protocol's one thread
    (:data:`nas.timing.TIMING_THREADS`), as PyTorch is timed, whatever the process's own
    thread count: sessions at the process's count (two on a 2-core machine) gave the
    shipped graphs a second core against the teacher in PyTorch, and their idle threads
    spun against each other between the interleaved calls."""
    from nas.runtime import load, load_fp32, runtime_name, timed_callable
    from nas.timing import TIMING_THREADS

    student = load(folder, runtime="onnx", threads=TIMING_THREADS)
    teacher = load(teacher_folder, runtime="onnx", threads=TIMING_THREADS)
    runtime = runtime_name(student)
    shipped, teacher_onnx = timed_callable(student), timed_callable(teacher)
    cpu = {bs: {k: v.cpu() for k, v in b.items()} for bs, b in batches.items()}
    with torch.no_grad():
        same = paired_speedups(teacher_onnx, shipped, cpu, repeats, runtime=runtime,
                               what=f"{what} ({runtime})")
        against_fp32 = paired_speedups(
            teacher_torch, shipped, cpu, repeats,
            runtime=f"student {runtime}, teacher {TORCH_FP32}",
            what=f"{what} ({runtime}) vs the teacher in {TORCH_FP32}")
        structural = paired_speedups(teacher_torch, timed_callable(load_fp32(folder)), cpu,
                                     repeats, what=f"{what} (fp32 weights, {TORCH_FP32})")
    return {**same, "vs_torch_fp32": against_fp32, "structural": structural}


__all__ = ["NO_FALLBACK", "TEACHER_EXPORT", "shipped_speedups", "ships_onnx", "teacher_export"]
