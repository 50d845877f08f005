"""Inherited-weights scoring: a candidate is scored with the weights it inherits from a
trained weight-sharing supernet, without any training of its own (EfficientBERT's stage
3, Dong et al. 2021: sub-networks are scored with the weights they inherit;
docs/reference.md#efficientbert).

The candidate's child is cut out of the supernet (:func:`nas.builder.extract_child`: the
child's layers and widths take the supernet's leading slices) and classifies the
validation batches once, in eval mode. Its costs are counted from the graph; nothing is
measured, so a candidate costs one pass over the validation batches. The score is only
as good as the supernet's training (:mod:`searchers.sampled_supernet` trains one for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    Objective,
    ScoringData,
    Trial,
    TrialPruned,
)
from nas.architecture import Architecture

if TYPE_CHECKING:  # the space machinery imports torch: listing evaluators must not
    from nas.space import SearchSpace


@dataclass(kw_only=True)
class InheritedTask(ScoringData):
    """:class:`~evaluators.base.ScoringData` plus ``supernet``: the trained weight-sharing
    network of the evaluator's space (:func:`nas.builder.build_supernet`). The evaluator
    reads it at each call, so it may be trained after the evaluator is built."""

    supernet: Any


@EVALUATORS.register("inherited")
class InheritedEvaluator(Evaluator):
    """Objective ``val_<metric>`` (maximised): the child's score on ``task.val_batches``
    with its inherited weights. The score is reported to the trial as step 0, and the
    trial may prune there. Costs: ``params``, ``flops`` and ``macs`` from the graph."""

    def __init__(self, space: SearchSpace, task: InheritedTask) -> None:
        from nas.teacher import metric_parts

        self.space, self.task = space, task
        self.objectives = (Objective(f"val_{'+'.join(metric_parts(task.metric))}",
                                     "maximize"),)

    @classmethod
    def from_settings(cls, settings: Any, data: ScoringData, *, space: SearchSpace,  # type: ignore[override]  # takes the parts it names; build_evaluator checks them
                      supernet: Any) -> InheritedEvaluator:
        """Built by name (:func:`evaluators.build.build_evaluator`): no settings; the
        parts are the space and its trained ``supernet``."""
        return cls(space, InheritedTask(supernet=supernet, val_batches=data.val_batches,
                                        metric=data.metric,
                                        latency_batches=data.latency_batches,
                                        seq_len=data.seq_len))

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        from evaluators.costs import counted_costs
        from nas.builder import extract_child
        from nas.evaluate import classify
        from nas.teacher import metric_score

        task = self.task
        arch = self.space.validate(arch)
        child = extract_child(task.supernet, self.space, arch)
        val = classify(child, task.val_batches, task.metric)
        score = metric_score(val, task.metric)
        if trial is not None:
            trial.report(0, score)
            if trial.should_prune():
                raise TrialPruned(f"pruned at validation {score:.4f}")
        return EvalResult((score,), metrics={f"val_{k}": v for k, v in val.items()},
                          costs=counted_costs(self.space, arch, task.seq_len))
