"""Progressive knowledge transfer as an evaluator: each candidate of a MobileBERT grid is
trained by the MobileBERT recipe's own transfer (:mod:`nas.distill.mobilebert`: the
layer-wise stages, then prediction-layer distillation), usually on a reduced budget, and
scored on the validation split (docs/reference.md#mobilebert: the grid search under a budget).

The recipe supplies the teacher, the batches and the teacher's logits through
:class:`TransferTask`. This evaluator writes only the training: a seed per candidate
(from the run's seed and the architecture id, so a candidate trains the same in any
order), resumable stages in ``<workdir>/<arch id>/`` and a validation score after every
prediction epoch; :class:`~evaluators.training.TrainingEvaluator` does the rest, as for
the distilled retrain (trial reports and pruning, report-split metrics, weights, costs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.base import EVALUATORS, FullTrainingData, Trial
from evaluators.training import Trained, TrainingEvaluator
from nas.architecture import Architecture

if TYPE_CHECKING:  # listing evaluators must not import torch
    from nas.space import SearchSpace

Batch = Mapping[str, Any]


@dataclass(kw_only=True)
class TransferTask(FullTrainingData):
    """What the recipe provides to train a candidate by transfer (with
    :class:`FullTrainingData`'s validation, report and latency batches and its ``init``:
    teacher embeddings, copied head).

    teacher: the frozen teacher in the engine's ``bert`` design (records pre-softmax
        attention scores, hidden states and embeddings).
    batches(stage): a stage's batch source ``(epoch, start_batch) → batches``; every batch
        has ``index`` (the row of ``logits``).
    steps_per_epoch: batches per epoch of every stage.
    logits: the teacher's logits on the training rows (N, C).
    """

    teacher: Any
    batches: Callable[[str], Callable[[int, int], Iterable[Batch]]]
    steps_per_epoch: int
    logits: Any


@EVALUATORS.register("progressive-transfer")
class TransferEvaluator(TrainingEvaluator):
    """Train each candidate by MobileBERT's transfer and score it on validation.

    ``transfer``: ``progressive``, ``all_at_once`` or ``prediction_only``
    (:data:`nas.distill.mobilebert.TRANSFERS`); ``transfer_settings``: each transfer
    stage's :class:`~nas.train.TrainSettings` (``epochs`` per stage);
    ``prediction_settings``: the prediction stage's; ``weights``: (λ, μ, β, γ) as a
    :class:`~nas.distill.mobilebert.PktWeights`; ``lower_lr_scale``: 0 freezes the lower
    blocks (the paper), 0.1 is the published code's.
    """

    task_type = TransferTask

    def __init__(self, space: SearchSpace, task: TransferTask, transfer_settings: Any,
                 prediction_settings: Any, *, transfer: str = "progressive",
                 weights: Any = None, lower_lr_scale: float = 0.0, temperature: float = 1.0,
                 seed: int = 0, workdir: str | Path | None = None, latency_repeats: int = 10,
                 progress: bool = False) -> None:
        from nas.distill.mobilebert import TRANSFERS
        from nas.errors import NasError

        if transfer not in TRANSFERS:
            raise NasError(f"transfer must be one of {', '.join(TRANSFERS)}, got {transfer!r}")
        super().__init__(space, task, seed=seed, workdir=workdir,
                         latency_repeats=latency_repeats, progress=progress)
        self.task: TransferTask = task
        self.transfer_settings, self.prediction_settings = transfer_settings, prediction_settings
        self.transfer, self.weights, self.lower_lr_scale = transfer, weights, lower_lr_scale
        self.temperature = temperature

    def train(self, arch: Architecture, trial: Trial, folder: Path | None) -> Trained:
        from nas.distill.mobilebert import (
            remove_stage_weights,
            run_prediction,
            run_transfer,
            transfer_stages,
        )
        from nas.seeding import seed_stage, stage_seed

        task = self.task
        seed = stage_seed(self.seed, f"candidate:{arch.id}")
        seed_stage(seed, "student-init")
        child = self.build(arch)
        depth = int({**self.space.config, **arch}["num_hidden_layers"])
        stages = transfer_stages(self.transfer, depth)
        steps: dict[str, int] = {}
        seconds = [0.0]

        def count(stage: Any, result: Any) -> None:
            steps[stage.name] = result.steps
            seconds[0] += result.seconds

        run_transfer(child, task.teacher, stages, self.transfer_settings, task.batches,
                     task.steps_per_epoch, weights=self.weights,
                     lower_lr_scale=self.lower_lr_scale, seed=seed, workdir=folder,
                     progress=self.progress, on_stage=count)
        checkpoint = None if folder is None else folder / "prediction.checkpoint.safetensors"
        result = run_prediction(
            child, task.logits, self.prediction_settings, task.batches("prediction"),
            task.steps_per_epoch, temperature=self.temperature, seed=seed,
            checkpoint=checkpoint, progress=self.progress,
            on_epoch_end=self.epoch_end(child, trial, "prediction epoch"))

        def cleanup() -> None:  # the finished stages and the checkpoint only served a resume
            if folder is not None and checkpoint is not None:
                checkpoint.unlink(missing_ok=True)
                remove_stage_weights(folder, stages)

        return Trained(model=child, val=result.history[-1]["val"],
                       seconds=seconds[0] + result.seconds,
                       steps=sum(steps.values()) + result.steps,
                       metrics={"transfer": self.transfer},
                       cleanup=cleanup)

    @classmethod
    def settings_type(cls) -> type:
        from evaluators.settings import TransferSettings

        return TransferSettings

    @classmethod
    def settings_arguments(cls, settings: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return ((settings.transfer_settings, settings.prediction_settings),
                {"transfer": settings.transfer, "weights": settings.weights,
                 "lower_lr_scale": settings.lower_lr_scale,
                 "temperature": settings.temperature})
