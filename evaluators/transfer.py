"""Progressive knowledge transfer as an evaluator: each candidate of a MobileBERT grid is
trained by the MobileBERT recipe's own transfer (:mod:`nas.distill.mobilebert`: the
layer-wise stages, then prediction-layer distillation), usually on a reduced budget, and
scored on the validation split (SPEC §4: the grid search under a budget).

The recipe supplies the teacher, the batches and the teacher's logits through
:class:`TransferTask`; this evaluator owns the rest, as the distilled retrain does: a seed
per candidate (from the run's seed and the architecture id, so a candidate trains the
same in any order), resumable stages in ``<workdir>/<arch id>/``, a validation score after
every prediction epoch (reported to the trial: a pruner may stop a weak candidate), the
report-split metrics when given, and the costs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    FullTrainingData,
    NullTrial,
    Objective,
    Trial,
    TrialPruned,
)
from evaluators.retrain import measured_costs
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
class TransferEvaluator(Evaluator):
    """Train each candidate by MobileBERT's transfer and score it on validation.

    ``transfer``: ``progressive``, ``all_at_once`` or ``prediction_only``
    (:data:`nas.distill.mobilebert.TRANSFERS`); ``transfer_settings``: each transfer
    stage's :class:`~nas.train.TrainSettings` (``epochs`` per stage);
    ``prediction_settings``: the prediction stage's; ``weights``: (λ, μ, β, γ) as a
    :class:`~nas.distill.mobilebert.PktWeights`; ``lower_lr_scale``: 0 freezes the lower
    blocks (the paper), 0.1 is the published code's.
    """

    def __init__(self, space: SearchSpace, task: TransferTask, transfer_settings: Any,
                 prediction_settings: Any, *, transfer: str = "progressive",
                 weights: Any = None, lower_lr_scale: float = 0.0, temperature: float = 1.0,
                 seed: int = 0, workdir: str | Path | None = None, latency_repeats: int = 10,
                 progress: bool = False) -> None:
        from nas.distill.mobilebert import TRANSFERS
        from nas.errors import NasError
        from nas.teacher import metric_parts

        if transfer not in TRANSFERS:
            raise NasError(f"transfer must be one of {', '.join(TRANSFERS)}, got {transfer!r}")
        self.space, self.task = space, task
        self.transfer_settings, self.prediction_settings = transfer_settings, prediction_settings
        self.transfer, self.weights, self.lower_lr_scale = transfer, weights, lower_lr_scale
        self.temperature, self.seed = temperature, seed
        self.workdir = Path(workdir) if workdir is not None else None
        self.latency_repeats, self.progress = latency_repeats, progress
        self.objectives = (Objective(f"val_{'+'.join(metric_parts(task.metric))}", "maximize"),)

    def weights_path(self, arch: Architecture) -> Path | None:
        """Where the trained weights of ``arch`` are written (``None`` without a workdir)."""
        return None if self.workdir is None else self.workdir / arch.id / "model.safetensors"

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        from nas.builder import build_child
        from nas.cache import save_weights
        from nas.distill.mobilebert import (
            remove_stage_weights,
            run_prediction,
            run_transfer,
            transfer_stages,
        )
        from nas.evaluate import classify
        from nas.seeding import seed_stage, stage_seed
        from nas.teacher import metric_score

        trial = trial or NullTrial()
        task = self.task
        arch = self.space.validate(arch)
        seed = stage_seed(self.seed, f"candidate:{arch.id}")
        seed_stage(seed, "student-init")
        child = build_child(self.space, arch)
        if task.init is not None:
            task.init(child)
        folder = None if self.workdir is None else self.workdir / arch.id
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
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

        def after_epoch(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            metrics = classify(child, task.val_batches, task.metric)
            trial.report(epoch + 1, metric_score(metrics, task.metric))
            if trial.should_prune():
                raise TrialPruned(f"pruned after prediction epoch {epoch + 1} at validation "
                                  f"{metric_score(metrics, task.metric):.4f}")
            return {"val": metrics}

        result = run_prediction(
            child, task.logits, self.prediction_settings, task.batches("prediction"),
            task.steps_per_epoch, temperature=self.temperature, seed=seed,
            checkpoint=None if folder is None else folder / "prediction.checkpoint.safetensors",
            progress=self.progress, on_epoch_end=after_epoch)
        val = result.history[-1]["val"]
        metrics: dict[str, Any] = {f"val_{k}": v for k, v in val.items()}
        if task.test_batches:
            metrics.update({f"test_{k}": v for k, v in
                            classify(child, task.test_batches, task.metric).items()})
        if folder is not None:
            save_weights(child, folder / "model.safetensors")
            (folder / "prediction.checkpoint.safetensors").unlink(missing_ok=True)
            remove_stage_weights(folder, stages)
        costs = measured_costs(self.space, arch, child, task.seq_len, task.latency_batches,
                                self.latency_repeats)
        costs["train_seconds"] = round(seconds[0] + result.seconds, 1)
        costs["train_steps"] = sum(steps.values()) + result.steps
        metrics["transfer"] = self.transfer
        return EvalResult(values=(metric_score(val, task.metric),), metrics=metrics,
                          costs=costs)
