"""Distilled retrain from scratch: a candidate's child trained with the recipe's
distillation loss in the shared training loop, then scored (AdaBERT §3.3's final
stage; every random-baseline sample is scored the same way).

The recipe supplies what is method-specific through :class:`RetrainTask` (the batches,
the loss, the embedding initialisation). This evaluator writes only the training: a seed
per candidate, the child built and initialised, the loop with its checkpoint (an
interrupted retrain resumes) and a validation score after every epoch.
:class:`~evaluators.training.TrainingEvaluator` does the rest: the trial reports and
pruning, the metrics on the validation split and, when given, on the report split, the
trained weights and the costs (parameters and FLOPs from the graph, latency measured on
the built child).

The objective is the validation score: a search never sees the report split, which
is only measured.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.base import EVALUATORS, FullTrainingData, Trial
from evaluators.training import Trained, TrainingEvaluator
from nas.architecture import Architecture

if TYPE_CHECKING:  # the space machinery imports torch: listing evaluators must not
    from nas.space import SearchSpace

Batch = Mapping[str, Any]


@dataclass(kw_only=True)
class RetrainTask(FullTrainingData):
    """What a recipe provides to retrain a candidate (with :class:`FullTrainingData`'s
    validation, report and latency batches and its ``init``).

    train_batches(epoch, start_batch): the epoch's training batches (seeded by epoch).
    steps_per_epoch: how many batches ``train_batches`` yields per epoch.
    loss(model, batch): the training loss (e.g. (1−γ)·CE + γ·probe KD) on ``model``'s
        output, or ``(loss, info)``.
    """

    train_batches: Callable[[int, int], Iterable[Batch]]
    steps_per_epoch: int
    loss: Callable[[Any, Batch], Any]


@EVALUATORS.register("distilled-retrain")
class DistilledRetrainEvaluator(TrainingEvaluator):
    """Train each candidate from scratch with distillation and score it on validation.

    ``settings``: the training loop's :class:`~nas.train.TrainSettings`. ``workdir``: a
    folder per candidate (``<workdir>/<arch id>/``) holds its checkpoint while it trains
    (an interrupted retrain resumes there) and ``model.safetensors`` when done.
    ``seed``: the run's seed; each candidate's stage seed is derived from it and the
    architecture id, so a candidate trains the same whichever order it comes in.
    """

    task_type = RetrainTask

    def __init__(self, space: SearchSpace, task: RetrainTask, settings: Any, *, seed: int = 0,
                 workdir: str | Path | None = None, latency_repeats: int = 10,
                 progress: bool = False) -> None:
        super().__init__(space, task, seed=seed, workdir=workdir,
                         latency_repeats=latency_repeats, progress=progress)
        self.task: RetrainTask = task
        self.settings = settings

    def train(self, arch: Architecture, trial: Trial, folder: Path | None) -> Trained:
        from nas.seeding import seed_stage
        from nas.train import Trainer

        task = self.task
        seed_stage(self.seed, f"retrain:{arch.id}")
        child = self.build(arch)
        checkpoint = None if folder is None else folder / "checkpoint.safetensors"
        result = Trainer(child, self.settings, task.train_batches, task.steps_per_epoch,
                         task.loss, checkpoint=checkpoint,
                         on_epoch_end=self.epoch_end(child, trial), progress=self.progress,
                         desc=f"retrain {arch.id}").fit()
        return Trained(model=child, val=result.history[-1]["val"], seconds=result.seconds,
                       steps=result.steps, cleanup=None if checkpoint is None
                       else lambda: checkpoint.unlink(missing_ok=True))

    @classmethod
    def settings_type(cls) -> type:
        from nas.train import TrainSettings

        return TrainSettings

    @classmethod
    def settings_arguments(cls, settings: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return (settings,), {}


def report_row(tag: str, arch: Any, result: Any, report_split: str) -> dict[str, Any]:
    """One retrained model's line of a run's ``metrics.json`` (the report's table): its
    validation metrics (``dev``), those on ``report_split`` when that is another split,
    and its costs (with its training steps where the result has them). ``result``: this
    evaluator's :class:`EvalResult`, or a study trial's stored ``metrics`` and
    ``costs``."""

    def strip(prefix: str) -> dict[str, Any]:
        return {k[len(prefix):]: v for k, v in result.metrics.items() if k.startswith(prefix)}

    row = {"tag": tag, "arch": dict(arch), "arch_id": arch.id, "dev": strip("val_"),
           "params": result.costs["params"], "flops": result.costs["flops"],
           "seq_len": result.costs["seq_len"], "latency": result.costs["latency"],
           "train_seconds": result.costs["train_seconds"]}
    if "train_steps" in result.costs:  # what the training took (transfer rows add steps)
        row["train_steps"] = result.costs["train_steps"]
    if report_split != "dev":
        row[report_split] = strip(f"{report_split}_")
    return row

