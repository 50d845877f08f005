"""What the task-distillation recipes share beyond the run skeleton (TinyBERT and
MobileBERT): the prediction layer's settings, and the student's evaluation row and
export, measured the same way for every recipe so that ``nas report`` compares like
with like. ``ctx`` is the recipe's :class:`recipes.common.TaskContext` (the core reads
its batches, splits, run folder and teacher, and never imports the recipes)."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from nas.config import check_fields
from nas.train import TrainSettings

if TYPE_CHECKING:
    from nas.network import GraphNet

log = logging.getLogger("nas.distill")


@dataclass
class PredictionSettings(TrainSettings):
    """Prediction-layer distillation (TinyBERT §3.1 eq. 10, MobileBERT §3.4): soft
    cross-entropy against the teacher's logits at ``temperature``. A recipe subclasses it
    for its own defaults or switches."""

    temperature: float = 1.0
    lr: float = 5e-5
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("temperature", 0.0 < self.temperature < math.inf, "a number > 0")], self)


# ------------------------------------------------------------ evaluation and export


def evaluate_student(ctx: Any, space: Any, arch: Any, model: torch.nn.Module,
                     ) -> dict[str, Any]:
    """The student's row of ``metrics.json``: ``dev`` and report-split metrics, parameters
    and FLOPs from the cost model at the run's length, batch-1 and batch-32 latency at the
    report split's median length (:mod:`nas.measure`)."""
    from nas.architecture import Architecture
    from nas.cost import count_costs, measure_latency
    from nas.evaluate import classify

    arch = arch if arch is not None else Architecture({}, space.name)
    model.eval()
    counted = count_costs(space, arch if len(arch) else None, ctx.max_seq_len)
    row: dict[str, Any] = {
        "arch": dict(arch), "arch_id": arch.id, "space": space.name,
        "dev": classify(model, ctx.dev_batches, ctx.dev.metric),
        "params": counted.params, "flops": counted.flops, "seq_len": counted.seq_len,
        "latency": {f"batch{bs}": measure_latency(model, batch,
                                                  repeats=ctx.latency_repeats).to_dict()
                    for bs, batch in ctx.latency_batches.items()},
    }
    if ctx.report_split != "dev":
        row[ctx.report_split] = classify(model, ctx.report_batches, ctx.dev.metric)
    return row


def export_student(ctx: Any, space: Any, arch: Any, model: GraphNet,
                   folders: Mapping[str, str]) -> None:
    """Export the student into ``RUN/<folder>`` for each ``folder → format`` (``native``,
    ``hf``: a stock ``transformers`` model where the family allows), with the teacher's
    tokenizer and the run's labels and length."""
    from nas.export import export

    labels = list(ctx.train.label_names)
    for folder, fmt in folders.items():
        export(space, arch if arch else None, ctx.run.path / folder, model=model, fmt=fmt,
               labels=labels, tokenizer=ctx.teacher.model_dir, max_length=ctx.max_seq_len,
               task=ctx.task, overwrite=True)


__all__ = ["PredictionSettings", "evaluate_student", "export_student"]
