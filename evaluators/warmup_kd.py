"""The warm-up-KD proxy with weight inheritance (EfficientBERT, Dong et al. 2021;
docs/reference.md#efficientbert).

A candidate inherits its weights from a warmed-up supernet (:func:`nas.builder.
extract_child`: for EfficientBERT the first N stacked FFNs and the leading r·H inner
units), gets a short distillation (a few hundred steps of hidden/attention KD on
unlabeled text, then task KD on a training subset) and is scored on a validation split
carved from train. The paper's public code: 1 epoch of KD on 2% of Wikipedia, 3 epochs
of task KD on 10% of MNLI, score = the *best* accuracy on a 1% held-out split of train.

The recipe supplies what is method-specific through :class:`WarmupKDTask` (the warmed-up
supernet, the batches and the two losses; :mod:`nas.distill.warmup` has EfficientBERT's).
This evaluator writes only the training: a seed per candidate, the two phases in the
shared training loop, a validation score every ``eval_every`` task steps and at the end;
:class:`~evaluators.training.TrainingEvaluator` does the rest (the trial reports, so a
pruner can stop a weak candidate, and the costs: parameters and FLOPs from the graph,
latency measured on the built child).

A candidate whose loss becomes NaN or infinite, or whose training crashes, gets a
``failed`` result with the reason: the paper scores it 0; the evaluator contract keeps
failure a state, and a searcher reads a failed trial as the worst one.
Without a supernet (``WarmupKDTask.supernet`` is ``None``) the candidate starts from its
own random initialisation: the "no warm-up" arm of the ranking audit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evaluators.base import EVALUATORS, EvalResult, ScoringData, Trial
from evaluators.training import Trained, TrainingEvaluator
from nas.architecture import Architecture

if TYPE_CHECKING:  # the space machinery imports torch: listing evaluators must not
    from nas.space import SearchSpace

Batch = Mapping[str, Any]
BatchSource = Callable[[int, int], Iterable[Batch]]
LossFn = Callable[[Any, Batch], Any]


@dataclass(kw_only=True)
class WarmupKDTask(ScoringData):
    """What a recipe provides to score a candidate by warm-up KD (with
    :class:`ScoringData`'s validation and latency batches; the validation split is the
    held-out part carved from train).

    supernet: ``() -> GraphNet`` giving the warmed-up supernet (called once, then kept),
        or ``None``: no inheritance (each candidate starts from its own initialisation).
    task_batches(epoch, start), task_steps_per_epoch, task_loss(model, batch): the task
        KD phase on the training subset (e.g. hidden MSE + soft cross-entropy).
    text_batches, text_steps_per_epoch, text_loss: the KD phase on unlabeled text
        (hidden/attention MSE), run first; ``None`` skips it.
    """

    supernet: Callable[[], Any] | None
    task_batches: BatchSource
    task_steps_per_epoch: int
    task_loss: LossFn
    text_batches: BatchSource | None = None
    text_steps_per_epoch: int = 0
    text_loss: LossFn | None = None


@EVALUATORS.register("warmup-kd")
class WarmupKDEvaluator(TrainingEvaluator):
    """Inherit from the warmed-up supernet, distil briefly, score on validation.

    ``text_settings`` and ``task_settings``: the training loop's
    :class:`~nas.train.TrainSettings` of the two phases (``max_steps`` keeps them short);
    ``text_settings=None`` skips the text phase. ``eval_every``: task steps between
    intermediate validation scores (``None``: after each epoch only). ``seed``: the
    run's seed; each candidate's stage seed comes from it and the architecture id, so a
    candidate scores the same whichever order it comes in. ``record_curve``: put the
    text phase's loss after every step into ``metrics["text_kd_curve"]`` (a list; the
    ranking audit compares inherited and scratch curves).
    """

    task_type = WarmupKDTask
    run_options = ("seed", "latency_repeats", "progress")

    def __init__(self, space: SearchSpace, task: WarmupKDTask, task_settings: Any,
                 text_settings: Any = None, *, seed: int = 0, eval_every: int | None = None,
                 latency_repeats: int = 5, progress: bool = False,
                 record_curve: bool = False) -> None:
        if text_settings is not None and (task.text_batches is None or task.text_loss is None
                                          or task.text_steps_per_epoch < 1):
            raise ValueError("text_settings given, but the task has no text batches or loss")
        if eval_every is not None and eval_every < 1:
            raise ValueError(f"eval_every must be None or >= 1, got {eval_every!r}")
        super().__init__(space, task, seed=seed, latency_repeats=latency_repeats,
                         progress=progress)
        self.task: WarmupKDTask = task
        self.task_settings, self.text_settings = task_settings, text_settings
        self.eval_every, self.record_curve = eval_every, record_curve
        self._supernet: Any = None

    def supernet(self) -> Any:
        if self._supernet is None and self.task.supernet is not None:
            self._supernet = self.task.supernet()
        return self._supernet

    def child(self, arch: Architecture) -> Any:
        """The candidate's network: inherited from the supernet, or freshly built."""
        from nas.builder import build_child, extract_child

        supernet = self.supernet()
        if supernet is None:
            return build_child(self.space, arch)
        return extract_child(supernet, self.space, arch)

    def train(self, arch: Architecture, trial: Trial, folder: Path | None
              ) -> Trained | EvalResult:
        from nas.seeding import seed_stage
        from nas.teacher import metric_score
        from nas.train import NonFiniteLossError, Trainer

        task = self.task
        # load the supernet first: building it draws from the global RNG, which would
        # otherwise shift the first candidate's dropout stream and not the others'
        self.supernet()
        seed_stage(self.seed, f"warmup-kd:{arch.id}")
        child = self.child(arch)
        scores: list[float] = []
        last: dict[str, Any] = {}

        def score(step: int) -> None:
            last.update(step=step, val=self.validate(child, trial, step, f"{step} task steps"))
            scores.append(metric_score(last["val"], task.metric))

        def after_step(step: int, info: dict[str, float]) -> None:
            if self.eval_every is not None and step % self.eval_every == 0:
                score(step)

        def after_epoch(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            if last.get("step") != trainer.step:  # not scored at this very step already
                score(trainer.step)
            return {"val": last["val"]}

        text_curve: list[float] = []
        text_losses: list[float] | None = None  # per epoch, when the text phase ran
        text_steps = 0
        try:
            if self.text_settings is not None:
                text = Trainer(child, self.text_settings, task.text_batches,  # type: ignore[arg-type]  # __init__ checked both
                               task.text_steps_per_epoch, task.text_loss,  # type: ignore[arg-type]  # set with text_settings
                               after_step=lambda step, info: text_curve.append(info["loss"]),
                               progress=self.progress, desc=f"text KD {arch.id}").fit()
                text_losses, text_steps = [round(h["loss"], 6) for h in text.history], text.steps
            trainer = Trainer(child, self.task_settings, task.task_batches,
                              task.task_steps_per_epoch, task.task_loss, after_step=after_step,
                              on_epoch_end=after_epoch, progress=self.progress,
                              desc=f"task KD {arch.id}")
            result = trainer.fit()
        except NonFiniteLossError as err:  # the paper scores a NaN candidate 0: a failure here
            return EvalResult.failed(f"diverged: {err}")
        metrics: dict[str, Any] = {"val_best": max(scores), "val_final": scores[-1],
                                   "task_kd_loss": round(result.history[-1]["loss"], 6)}
        if text_losses is not None:
            metrics["text_kd_loss"] = text_losses[-1]
        if self.record_curve:
            metrics["text_kd_curve"] = [round(v, 6) for v in text_curve]
        # the score is the best validation value seen (the public code's choice); the
        # text phase's steps count, its seconds do not (as recorded so far)
        return Trained(model=child, val=last["val"], score=max(scores), seconds=result.seconds,
                       steps=result.steps + text_steps, metrics=metrics,
                       costs={"inherited": self.task.supernet is not None})

    @classmethod
    def settings_type(cls) -> type:
        from evaluators.settings import WarmupKDSettings

        return WarmupKDSettings

    @classmethod
    def settings_arguments(cls, settings: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        return ((settings.task, settings.text),
                {"eval_every": settings.eval_every, "record_curve": settings.record_curve})


__all__ = ["WarmupKDEvaluator", "WarmupKDTask"]
