"""Distilled retrain from scratch: a candidate's child trained with the recipe's
distillation loss in the shared training loop, then scored (AdaBERT §3.3's final
stage; every random-baseline sample is scored the same way).

The recipe supplies what is method-specific through :class:`RetrainTask` (the batches,
the loss, the embedding initialisation); this evaluator owns the rest: a seed per
candidate, checkpoints and resume, a validation score after every epoch (reported to
the trial, so a pruner can stop a weak candidate), the final metrics on the validation
split and, when given, on the report split, the costs (parameters and FLOPs from the
graph, latency measured on the built child) and the trained weights.

The objective is the validation score: a search never sees the report split, which
is only measured.
"""

from __future__ import annotations

import time
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
from nas.architecture import Architecture
from nas.evaluate import classify

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
class DistilledRetrainEvaluator(Evaluator):
    """Train each candidate from scratch with distillation and score it on validation.

    ``settings``: the training loop's :class:`~nas.train.TrainSettings`. ``workdir``: a
    folder per candidate (``<workdir>/<arch id>/``) holds its checkpoint while it trains
    (an interrupted retrain resumes there) and ``model.safetensors`` when done.
    ``seed``: the run's seed; each candidate's stage seed is derived from it and the
    architecture id, so a candidate trains the same whichever order it comes in.
    """

    def __init__(self, space: SearchSpace, task: RetrainTask, settings: Any, *, seed: int = 0,
                 workdir: str | Path | None = None, latency_repeats: int = 10,
                 progress: bool = False) -> None:
        from nas.teacher import metric_parts

        self.space, self.task, self.settings, self.seed = space, task, settings, seed
        self.workdir = Path(workdir) if workdir is not None else None
        self.latency_repeats = latency_repeats
        self.progress = progress
        name = "+".join(metric_parts(task.metric))
        self.objectives = (Objective(f"val_{name}", "maximize"),)

    def weights_path(self, arch: Architecture) -> Path | None:
        """Where the trained weights of ``arch`` are written (``None`` without a workdir)."""
        return None if self.workdir is None else self.workdir / arch.id / "model.safetensors"

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        from nas.builder import build_child
        from nas.checkpoint import atomic_target
        from nas.seeding import seed_stage
        from nas.teacher import metric_score
        from nas.train import Trainer

        trial = trial or NullTrial()
        task = self.task
        arch = self.space.validate(arch)
        seed_stage(self.seed, f"retrain:{arch.id}")
        child = build_child(self.space, arch)
        if task.init is not None:
            task.init(child)

        def after_epoch(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            metrics = classify(child, task.val_batches, task.metric)
            trial.report(epoch + 1, metric_score(metrics, task.metric))
            if trial.should_prune():
                raise TrialPruned(f"pruned after epoch {epoch + 1} at validation "
                                  f"{metric_score(metrics, task.metric):.4f}")
            return {"val": metrics}

        folder = None if self.workdir is None else self.workdir / arch.id
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        checkpoint = None if folder is None else folder / "checkpoint.safetensors"
        result = Trainer(child, self.settings, task.train_batches, task.steps_per_epoch,
                         task.loss, checkpoint=checkpoint, on_epoch_end=after_epoch,
                         progress=self.progress, desc=f"retrain {arch.id}").fit()
        val = result.history[-1]["val"]
        costs = self._costs(child, arch)
        metrics: dict[str, Any] = {f"val_{k}": v for k, v in val.items()}
        if task.test_batches:
            metrics.update({f"test_{k}": v for k, v in
                            classify(child, task.test_batches, task.metric).items()})
        if folder is not None:
            from safetensors.torch import save_file

            state = {k: v.detach().contiguous() for k, v in child.state_dict().items()}
            with atomic_target(folder / "model.safetensors") as tmp:
                save_file(state, str(tmp))
            checkpoint.unlink(missing_ok=True)
        costs["train_seconds"] = round(result.seconds, 1)
        costs["train_steps"] = result.steps
        return EvalResult(values=(metric_score(val, task.metric),), metrics=metrics,
                          costs=costs)

    def _costs(self, child: Any, arch: Architecture) -> dict[str, Any]:
        return measured_costs(self.space, arch, child, self.task.seq_len,
                              self.task.latency_batches, self.latency_repeats)


def measured_costs(space: SearchSpace, arch: Architecture, child: Any, seq_len: int,
                   latency_batches: Mapping[int, Batch], repeats: int) -> dict[str, Any]:
    """Parameters and FLOPs counted from the graph, latency measured on the built child
    (per batch size; ``latency_ms`` is the smallest batch's median)."""
    from nas.cost import count_costs, measure_latency

    counted = count_costs(space, arch, seq_len)
    costs: dict[str, Any] = {"params": counted.params, "flops": counted.flops,
                             "seq_len": counted.seq_len}
    latency = {}
    started = time.perf_counter()
    for bs, batch in sorted(latency_batches.items()):
        latency[f"batch{bs}"] = measure_latency(child, batch, repeats=repeats).to_dict()
    if latency:
        costs["latency"] = latency
        first = latency[min(latency, key=lambda k: int(k[5:]))]
        costs["latency_ms"] = first["median_ms"]
        costs["latency_seconds"] = round(time.perf_counter() - started, 2)
    return costs


def report_row(tag: str, arch: Any, result: Any, report_split: str) -> dict[str, Any]:
    """One retrained model's line of a run's ``metrics.json`` (the report's table): its
    validation metrics (``dev``), those on ``report_split`` when that is another split,
    and its costs. ``result``: this evaluator's :class:`EvalResult`, or a study trial's
    stored ``metrics`` and ``costs``."""

    def strip(prefix: str) -> dict[str, Any]:
        return {k[len(prefix):]: v for k, v in result.metrics.items() if k.startswith(prefix)}

    row = {"tag": tag, "arch": dict(arch), "arch_id": arch.id, "dev": strip("val_"),
           "params": result.costs["params"], "flops": result.costs["flops"],
           "seq_len": result.costs["seq_len"], "latency": result.costs["latency"],
           "train_seconds": result.costs["train_seconds"]}
    if report_split != "dev":
        row[report_split] = strip(f"{report_split}_")
    return row

