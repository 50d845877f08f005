"""What the task-distillation recipes share (TinyBERT §5, MobileBERT §4): the fine-tuned
teacher and the data (stages 1–2), batches, the teacher's cached logits, the student's
evaluation row and its export.

A recipe makes one :class:`DistillContext`, calls :meth:`~DistillContext.prepare`, then
runs its own training stages with :class:`nas.train.Trainer` on :func:`seeded_batches`
batches; :func:`evaluate_student` and :func:`export_student` measure and export the
result the same way for every recipe, so that ``nas report`` compares like with like.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from nas.config import check_fields
from nas.distill.general import (
    cached_teacher_logits,
    seeded_batches,
    token_lengths,
)
from nas.seeding import seed_stage, stage_seed
from nas.train import TrainSettings

log = logging.getLogger("nas.distill")


@dataclass
class DataSettings:
    """The task data of a distillation recipe: a seeded random subset of train (``None``:
    all of it), the first ``max_dev_examples`` of dev, and the token length."""

    max_train_examples: int | None = None
    max_dev_examples: int | None = None
    max_seq_len: int = 64

    def __post_init__(self) -> None:
        for name, ok, allowed in (
                ("max_train_examples", (self.max_train_examples or 2) >= 2, "None or >= 2"),
                ("max_dev_examples", (self.max_dev_examples or 1) >= 1, "None or >= 1"),
                ("max_seq_len", 8 <= self.max_seq_len <= 512, "in [8, 512]")):
            if not ok:
                raise ValueError(f"{name} must be {allowed}, got {getattr(self, name)!r}")


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


# --------------------------------------------------------------------- the context


class DistillContext:
    """Stages 1–2 (the fine-tuned teacher, the data) and what the later stages share.

    ``data``: a :class:`DataSettings`; ``finetune``: the teacher's
    :class:`~nas.teacher.FinetuneConfig`; ``eval_batch_size``: the batch size of the dev,
    report-split and latency batches; ``stages``: how many stages the recipe logs.
    """

    def __init__(self, *, task: str, teacher: str | None, seed: int, data: DataSettings,
                 finetune: Any, run: Any, options: Any, eval_batch_size: int = 32,
                 latency_repeats: int = 10, stages: int = 8) -> None:
        self.task, self.teacher_name, self.seed = task, teacher, seed
        self.data_settings, self.finetune = data, finetune
        self.run, self.options = run, options
        self.eval_batch_size, self.latency_repeats, self.stages = (
            eval_batch_size, latency_repeats, stages)
        self.seconds: dict[str, float] = {}

    @property
    def max_seq_len(self) -> int:
        return self.data_settings.max_seq_len

    @property
    def evaluated_splits(self) -> str:
        """The splits a student is scored on, for log lines: "dev and test", or "dev" when
        the report split is dev (MRPC)."""
        return " and ".join(dict.fromkeys(["dev", self.report_split]))

    def prepare(self) -> DistillContext:
        from nas.data import load_task, report_split
        from nas.measure import median_length_batches, overlap_counts
        from nas.teacher import finetune_teacher
        from nas.tokenization import load_tokenizer

        progress, data_dir = self.options.progress, self.options.data_dir
        t0 = time.time()
        log.info("stage 1/%d: teacher (fine-tuned on %s; cached by its settings)", self.stages,
                 self.task)
        seed_stage(self.seed, "teacher")
        self.teacher = finetune_teacher(self.task, self.teacher_name, data_dir,
                                        config=self.finetune, progress=progress)
        self.run.log("teacher", model_dir=self.teacher.model_dir, metrics=self.teacher.metrics,
                     from_cache=self.teacher.from_cache)
        self.seconds["teacher"] = round(time.time() - t0, 1)

        log.info("stage 2/%d: data", self.stages)
        d = self.data_settings
        self.full_train = load_task(self.task, "train", data_dir)
        train = self.full_train
        if d.max_train_examples and d.max_train_examples < len(train):
            rng = np.random.default_rng(stage_seed(self.seed, "data"))
            train = train.subset(np.sort(rng.permutation(len(train))
                                         [: d.max_train_examples]).tolist())
        self.train = train
        self.dev = load_task(self.task, "dev", data_dir).head(d.max_dev_examples)
        self.report_split = report_split(self.task)
        self.report = (self.dev if self.report_split == "dev"
                       else load_task(self.task, self.report_split, data_dir))
        self.overlap = overlap_counts(self.task, self.full_train,
                                      {"dev": self.dev, self.report_split: self.report})
        self.run.log("overlap", **self.overlap)
        self.tokenizer = load_tokenizer(self.teacher.model_dir)
        bs = self.eval_batch_size
        self.dev_batches = list(self.batches(self.dev, bs))
        self.report_batches = list(self.batches(self.report, bs))
        self.median_tokens, self.latency_batches = median_length_batches(
            self.report, self.tokenizer, d.max_seq_len, self.batches)
        return self

    def batches(self, data: Any, batch_size: int) -> Iterator[dict[str, torch.Tensor]]:
        """Evaluation batches in data order; pairs joined as for the teacher."""
        from nas.data import iter_batches

        return iter_batches(data, self.tokenizer, batch_size, self.max_seq_len)

    def train_batches(self, data: Any, batch_size: int, stage: str
                      ) -> Callable[[int, int], Iterator[Any]]:
        """A stage's training batch source (:func:`seeded_batches` with this run's seed)."""
        return seeded_batches(data, self.tokenizer, batch_size, self.max_seq_len, self.seed, stage,
                          token_lengths(self.tokenizer, data, self.max_seq_len))

    def teacher_costs(self) -> dict[str, Any]:
        """The teacher's row of the report (kept in ``teacher.json``)."""
        from nas.measure import cached_teacher_costs

        return cached_teacher_costs(
            self.run, self.teacher, self.train.num_labels, report_split=self.report_split,
            report=self.report, tokenizer=self.tokenizer, max_seq_len=self.max_seq_len,
            latency_batches=self.latency_batches, latency_repeats=self.latency_repeats)

    def task_teacher(self) -> tuple[Any, Any]:
        """The fine-tuned teacher in the engine's ``bert`` design (records pre-softmax
        attention scores, which ``transformers`` 5.x does not return), frozen."""
        from nas.hf import load_teacher_as_design

        if not hasattr(self, "_task_teacher"):
            space, model = load_teacher_as_design(self.teacher.model_dir)
            for p in model.parameters():
                p.requires_grad_(False)
            model.eval()
            self._task_teacher = (space, model)
        return self._task_teacher

    def teacher_logits(self, data: Any) -> np.ndarray:
        """The fine-tuned teacher's logits on ``data`` (N, C), cached beside its other
        outputs (:func:`nas.distill.general.cached_teacher_logits`)."""
        return cached_teacher_logits(self.teacher.model_dir, lambda: self.task_teacher()[1],
                                     data, self.tokenizer, self.max_seq_len,
                                     self.options.progress)


# ------------------------------------------------------------ evaluation and export


def evaluate_student(ctx: DistillContext, space: Any, arch: Any, model: torch.nn.Module,
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


def export_student(ctx: DistillContext, space: Any, arch: Any, model: torch.nn.Module,
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


__all__ = ["DataSettings", "DistillContext", "PredictionSettings", "seeded_batches",
           "evaluate_student", "export_student", "token_lengths"]
