"""An evaluator from the cost model alone: parameters and FLOPs, no model built.

Useful for budget sweeps (how small can a space go?) and as the millisecond evaluator of
the contract tests. The counts come from :func:`nas.cost.count_costs` (docs/reference.md#costs:
FLOPs = 2 × MACs, per example at ``seq_len`` tokens); a latency model can be plugged in as
``latency_fn(arch) -> ms`` to add a predicted ``latency_ms``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    EvaluatorError,
    Objective,
    ScoringData,
    Trial,
    TrialPruned,
    check_objectives,
)
from nas.architecture import Architecture

if TYPE_CHECKING:  # the space machinery imports torch; keep listing evaluators cheap
    from nas.space import SearchSpace

LatencyFn = Callable[[Architecture], float]

#: The costs :func:`count_costs` gives without building a model.
COUNTED = ("params", "flops", "macs")


def counted_costs(space: SearchSpace, arch: Architecture, seq_len: int) -> dict[str, Any]:
    """``params``, ``flops``, ``macs`` (per example) and their per-group split."""
    from nas.cost import count_costs

    c = count_costs(space, arch, seq_len)
    return {"params": c.params, "flops": c.flops, "macs": c.macs, "seq_len": seq_len,
            "params_by_group": dict(c.params_by_group), "macs_by_group": dict(c.macs_by_group)}


@EVALUATORS.register("costs")
class CostEvaluator(Evaluator):
    """Objectives ``params`` / ``flops`` / ``macs`` (and ``latency_ms`` with a
    ``latency_fn``), all minimised.

    Each objective value is reported to the trial as step 0, 1, ... in objective order,
    and the trial may prune after any of them (a pruner can cut a candidate on its size).
    """

    def __init__(self, space: SearchSpace, objectives: Sequence[str] = ("params",),
                 seq_len: int = 128, latency_fn: LatencyFn | None = None) -> None:
        known = COUNTED + (("latency_ms",) if latency_fn is not None else ())
        unknown = [n for n in objectives if n not in known]
        if unknown or not objectives:
            hint = "" if latency_fn is not None else " (latency_ms needs a latency_fn)"
            raise EvaluatorError(
                f"cost evaluator: unknown objective(s) {unknown or list(objectives)}; "
                f"choose from {list(known)}{hint}"
            )
        self.space = space
        self.seq_len = seq_len
        self.latency_fn = latency_fn
        self.objectives = check_objectives([Objective(n, "minimize") for n in objectives],
                                           "cost evaluator")

    @classmethod
    def settings_type(cls) -> type:
        from evaluators.settings import CostSettings

        return CostSettings

    @classmethod
    def from_settings(cls, settings: Any, data: ScoringData, *, space: SearchSpace,  # type: ignore[override]  # takes the parts it names; build_evaluator checks them
                      latency_fn: LatencyFn | None = None) -> CostEvaluator:
        """Counts at the task's ``seq_len``."""
        return cls(space, settings.objectives, seq_len=data.seq_len, latency_fn=latency_fn)

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        costs = counted_costs(self.space, arch, self.seq_len)
        quantities = {n: float(costs[n]) for n in COUNTED}
        if self.latency_fn is not None:  # a prediction, so it is not filed as measured
            costs["latency_ms_predicted"] = quantities["latency_ms"] = float(
                self.latency_fn(arch))
        values = tuple(quantities[o.name] for o in self.objectives)
        if trial is not None:
            for step, (o, value) in enumerate(zip(self.objectives, values, strict=True)):
                trial.report(step, value)
                if trial.should_prune():
                    raise TrialPruned(f"pruned on {o.name} = {value:g}")
        return EvalResult(values=values, costs=costs)
