"""The template of every evaluator that trains a candidate before scoring it.

A training evaluator (the distilled retrain, the progressive transfer, the warm-up-KD
proxy) writes only its training, as :meth:`TrainingEvaluator.train`: seed, build (or
inherit) the candidate's network, run its loop(s) with :meth:`TrainingEvaluator.
epoch_end` or :meth:`TrainingEvaluator.validate` as the hook that scores, and return a
:class:`Trained`. This module does the rest, the same way for all of them:

* the objective: ``val_<metric>`` (``val_accuracy+f1`` for MRPC), maximised: a search
  never sees the report split, which is only measured;
* intermediate values: each validation score is reported to the trial, and the trial may
  prune the candidate there (:class:`~evaluators.base.TrialPruned`, with the point of
  training and the score in the reason);
* the metrics: ``val_*`` (the last validation), ``test_*`` on the report split when the
  task has ``test_batches`` (:class:`~evaluators.base.FullTrainingData`), then the
  training's own;
* the weights: with a ``workdir``, ``<workdir>/<arch id>/`` is the candidate's folder
  (its checkpoints while it trains, so an interrupted candidate resumes) and receives
  ``model.safetensors`` at the end, after which the files only a resume needed go;
* the costs: parameters and FLOPs counted from the graph, latency measured on the
  trained network (:func:`measured_costs`), then ``train_seconds`` and ``train_steps``.

This module imports neither torch nor optuna (listing evaluators stays cheap).
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from evaluators.base import (
    EvalResult,
    Evaluator,
    NullTrial,
    Objective,
    ScoringData,
    Trial,
    TrialPruned,
)
from nas.architecture import Architecture

if TYPE_CHECKING:  # the space machinery imports torch: listing evaluators must not
    from nas.space import SearchSpace

Batch = Mapping[str, Any]

#: The trained weights' file in a candidate's folder.
WEIGHTS_FILE = "model.safetensors"


@dataclass(kw_only=True)
class Trained:
    """What a training evaluator's :meth:`~TrainingEvaluator.train` returns.

    model: the trained network (scored on the report split, measured, saved).
    val: its last validation metrics (``{"accuracy": …, "f1": …}``): they become the
        ``val_*`` metrics.
    seconds, steps: what the training took (``train_seconds``, ``train_steps``).
    score: the objective value; ``None``: the metric score of ``val``.
    metrics: the training's own metrics, after ``val_*`` and ``test_*``.
    costs: the training's own costs, after ``train_seconds`` and ``train_steps``.
    cleanup: called once the weights are saved, to delete what only a resume needed
        (checkpoints, finished stages' weights).
    """

    model: Any
    val: dict[str, float]
    seconds: float
    steps: int
    score: float | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    costs: dict[str, Any] = field(default_factory=dict)
    cleanup: Callable[[], None] | None = None


class TrainingEvaluator(Evaluator):
    """Trains each candidate with :meth:`train`, then scores, saves and measures it.

    ``task``: the recipe's batches and losses, a :class:`~evaluators.base.ScoringData`
    (``val_batches``, ``metric``, ``latency_batches``, ``seq_len``) or a
    :class:`~evaluators.base.FullTrainingData` (adds ``test_batches`` and ``init``).
    ``seed``: the run's seed; each evaluator derives a candidate's seed from it and the
    architecture id, so a candidate trains the same whichever order it comes in.
    ``workdir``: a folder per candidate (``None``: nothing written).
    """

    #: The task dataclass this evaluator reads (used to build it by name).
    task_type: ClassVar[type[ScoringData]] = ScoringData

    def __init__(self, space: SearchSpace, task: ScoringData, *, seed: int = 0,
                 workdir: str | Path | None = None, latency_repeats: int = 10,
                 progress: bool = False) -> None:
        from nas.teacher import metric_parts

        self.space, self.task, self.seed = space, task, seed
        self.workdir = Path(workdir) if workdir is not None else None
        self.latency_repeats, self.progress = latency_repeats, progress
        self.objectives = (Objective(f"val_{'+'.join(metric_parts(task.metric))}", "maximize"),)

    @abc.abstractmethod
    def train(self, arch: Architecture, trial: Trial, folder: Path | None
              ) -> Trained | EvalResult:
        """Train ``arch`` (already validated) and return what came out; score on
        validation with :meth:`epoch_end` / :meth:`validate` (they report to ``trial`` and
        prune); keep checkpoints in ``folder`` when it is not ``None``. Return an
        :class:`EvalResult` (a failed one) to end the evaluation with it."""

    # -- the shared pieces a training uses ------------------------------------------------
    def build(self, arch: Architecture) -> Any:
        """The candidate's freshly built network, with the task's ``init`` applied."""
        from nas.builder import build_child

        child = build_child(self.space, arch)
        init = getattr(self.task, "init", None)
        if init is not None:
            init(child)
        return child

    def validate(self, model: Any, trial: Trial, step: int, after: str) -> dict[str, float]:
        """``model``'s validation metrics; their score is reported to ``trial`` as ``step``,
        and :class:`TrialPruned` is raised when the trial says so (``after`` names the
        point of training in the reason: ``"epoch 2"``)."""
        metrics = self.val_metrics(model)
        value = self.val_score(metrics)
        trial.report(step, value)
        if trial.should_prune():
            raise TrialPruned(f"pruned after {after} at validation {value:.4f}")
        return metrics

    def val_metrics(self, model: Any) -> dict[str, float]:
        """``model``'s metrics on the validation batches (an evaluator may add its own)."""
        from nas.evaluate import classify

        return classify(model, self.task.val_batches, self.task.metric)

    def val_score(self, metrics: Mapping[str, float]) -> float:
        """The objective value of validation ``metrics``: the task metric's score (an
        evaluator that scores otherwise names its objective accordingly)."""
        from nas.teacher import metric_score

        return metric_score(dict(metrics), self.task.metric)

    def epoch_end(self, model: Any, trial: Trial, what: str = "epoch"
                  ) -> Callable[[int, dict[str, float]], dict[str, Any]]:
        """A training loop's ``on_epoch_end``: validate after each epoch (reported as step
        epoch + 1) and keep the metrics in the history as ``"val"``."""

        def after_epoch(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            return {"val": self.validate(model, trial, epoch + 1, f"{what} {epoch + 1}")}

        return after_epoch

    def weights_path(self, arch: Architecture) -> Path | None:
        """Where the trained weights of ``arch`` are written (``None`` without a workdir)."""
        return None if self.workdir is None else self.workdir / arch.id / WEIGHTS_FILE

    # -- the template ---------------------------------------------------------------------
    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        trial = trial or NullTrial()
        task = self.task
        arch = self.space.validate(arch)
        folder = None if self.workdir is None else self.workdir / arch.id
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        trained = self.train(arch, trial, folder)
        if isinstance(trained, EvalResult):
            return trained
        metrics: dict[str, Any] = {f"val_{k}": v for k, v in trained.val.items()}
        test_batches = getattr(task, "test_batches", None)
        if test_batches:
            from nas.evaluate import classify

            metrics.update({f"test_{k}": v for k, v in
                            classify(trained.model, test_batches, task.metric).items()})
        metrics.update(trained.metrics)
        if folder is not None:
            from nas.cache import save_weights

            save_weights(trained.model, folder / WEIGHTS_FILE)
            if trained.cleanup is not None:
                trained.cleanup()
        costs = measured_costs(self.space, arch, trained.model, task.seq_len,
                               task.latency_batches, self.latency_repeats,
                               getattr(task, "latency_runtime", "torch"))
        costs["train_seconds"] = round(trained.seconds, 1)
        costs["train_steps"] = trained.steps
        costs.update(trained.costs)
        score = self.val_score(trained.val) if trained.score is None else trained.score
        return EvalResult(values=(score,), metrics=metrics, costs=costs)

    # -- building by name (evaluators.build.build_evaluator) -----------------------------
    #: The constructor's keyword options that come from the run, not the settings.
    run_options: ClassVar[tuple[str, ...]] = ("seed", "workdir", "latency_repeats", "progress")

    @classmethod
    def settings_arguments(cls, settings: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The constructor's arguments after ``space`` and ``task`` that come from the typed
        ``settings`` (positional, keyword)."""
        raise NotImplementedError(f"{cls.__name__} cannot be built from settings")

    @classmethod
    def from_settings(cls, settings: Any, data: ScoringData, **parts: Any) -> Evaluator:
        """``space`` and the run options (:attr:`run_options`) go to the constructor; every
        other part is a field of the task, which takes the rest from ``data``."""
        space = parts.pop("space")
        options = {k: parts.pop(k) for k in list(parts) if k in cls.run_options}
        args, kwargs = cls.settings_arguments(settings)
        return cls(space, cls.task_from(data, **parts), *args, **kwargs, **options)

    @classmethod
    def parts(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Required: ``space`` and the task's own fields without a default (its batches,
        loss…); optional: its other fields beyond :class:`ScoringData`'s (``init``,
        ``test_batches``…) and the run options the constructor has."""
        scoring = {f.name for f in dataclasses.fields(ScoringData)}
        own = [f for f in dataclasses.fields(cls.task_type) if f.name not in scoring]
        needed = [f.name for f in own if f.default is dataclasses.MISSING
                  and f.default_factory is dataclasses.MISSING]
        accepted = set(inspect.signature(cls).parameters)
        return (("space", *needed),
                (*[f.name for f in own if f.name not in needed],
                 *[o for o in cls.run_options if o in accepted]))

    @classmethod
    def task_from(cls, data: ScoringData, **fields: Any) -> ScoringData:
        """This evaluator's task: the fields of ``data`` that the task has (validation,
        report and latency batches, ``init``…), then the training's ``fields``."""
        names = {f.name for f in dataclasses.fields(cls.task_type)}
        shared = {f.name: getattr(data, f.name) for f in dataclasses.fields(data)
                  if f.name in names}
        return cls.task_type(**{**shared, **fields})

def measured_costs(space: SearchSpace, arch: Architecture, child: Any, seq_len: int,
                   latency_batches: Mapping[int, Batch], repeats: int,
                   runtime: str = "torch") -> dict[str, Any]:
    """Parameters and FLOPs counted from the graph, latency measured on the built child
    (per batch size; ``latency_ms`` is the smallest batch's median) in ``runtime``: the
    child itself in torch, or its ONNX graph (``onnx``, ``onnx-int8``: exported as the
    model ships, :func:`nas.onnx_latency.measure_onnx_latency`)."""
    from nas.cost import count_costs, measure_latency
    from nas.onnx_latency import measure_onnx_latency
    from nas.timing import ONNX_RUNTIMES

    counted = count_costs(space, arch, seq_len)
    costs: dict[str, Any] = {"params": counted.params, "flops": counted.flops,
                             "seq_len": counted.seq_len}
    latency = {}
    started = time.perf_counter()
    for bs, batch in sorted(latency_batches.items()):
        timed = (measure_onnx_latency(child, batch, runtime, repeats=repeats)
                 if runtime in ONNX_RUNTIMES else measure_latency(child, batch, repeats=repeats))
        latency[f"batch{bs}"] = timed.to_dict()
    if latency:
        costs["latency"] = latency
        first = latency[min(latency, key=lambda k: int(k[5:]))]
        costs["latency_ms"] = first["median_ms"]
        costs["latency_seconds"] = round(time.perf_counter() - started, 2)
    return costs


__all__ = ["WEIGHTS_FILE", "Trained", "TrainingEvaluator", "measured_costs"]
