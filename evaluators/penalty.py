"""Efficiency-aware scoring: budgets, soft penalties and extra objectives around an
evaluator.

:class:`PenaltyEvaluator` wraps an inner evaluator (e.g. one that trains and returns
dev accuracy) and turns costs into one or more of

* **hard constraints** ``max_params``, ``max_flops``, ``max_latency_ms``: a candidate over
  a ceiling is ``failed`` with the reason. *Failed*, not *pruned*: it lies outside the
  feasible set, while ``pruned`` means a feasible candidate stopped early on its learning
  curve (a pruner compares pruned trials' curves; an over-budget candidate has none).
  Parameters and FLOPs are counted from the graph (:func:`nas.cost.count_costs`,
  docs/reference.md#costs) and a ``latency_fn`` predicts latency, so these ceilings are checked
  *before* the inner evaluator runs; a measured latency is checked after it;
* a **soft penalty** on the inner evaluator's single objective, MnasNet-style but linear
  past the target: ``value − sign·Σ_c λ_c·max(0, cost_c/target_c − 1)`` (for accuracy,
  ``acc − λ·max(0, latency/target − 1)``; a minimised objective is raised instead);
* **extra objectives** for multi-objective search: ``params``, ``flops`` and/or
  ``latency_ms``, minimised, after the inner objectives.

Latency is ``latency_fn(arch)`` (milliseconds) when one is given, so a latency model can
plug in; otherwise it is the inner result's measured ``costs["latency_ms"]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
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
    check_result,
)
from evaluators.costs import LatencyFn, counted_costs
from nas.architecture import Architecture

if TYPE_CHECKING:
    from nas.space import SearchSpace

#: The costs a penalty or a ceiling may name.
COSTS = ("params", "flops", "latency_ms")


@EVALUATORS.register("penalty")
class PenaltyEvaluator(Evaluator):
    """Wraps ``inner`` with budgets (``max_*``), soft ``targets`` and ``extra_objectives``.

    Parameters
    ----------
    inner: the evaluator whose objectives are kept (and penalised with ``targets``).
    space: the space the architectures belong to (for the cost counts).
    seq_len: tokens per example for the FLOPs count.
    max_params, max_flops, max_latency_ms: hard ceilings (``None``: no ceiling).
    targets: soft targets per cost, e.g. ``{"latency_ms": 20.0}``; needs an inner
        evaluator with one objective, which becomes ``penalized_<name>``.
    penalty_weight: λ, one number for every target or one per cost.
    extra_objectives: costs appended as minimised objectives.
    latency_fn: ``arch -> milliseconds``; default: the inner result's ``latency_ms``.
    """

    def __init__(self, inner: Evaluator, space: SearchSpace, *, seq_len: int = 128,
                 max_params: float | None = None, max_flops: float | None = None,
                 max_latency_ms: float | None = None,
                 targets: Mapping[str, float] | None = None,
                 penalty_weight: float | Mapping[str, float] = 1.0,
                 extra_objectives: Sequence[str] = (),
                 latency_fn: LatencyFn | None = None) -> None:
        self.inner = inner
        self.space = space
        self.seq_len = seq_len
        self.latency_fn = latency_fn
        self.ceilings = {name: float(limit) for name, limit in
                         (("params", max_params), ("flops", max_flops),
                          ("latency_ms", max_latency_ms)) if limit is not None}
        self.targets = {k: float(v) for k, v in (targets or {}).items()}
        for what, table in (("max_", self.ceilings), ("target ", self.targets)):
            for name, limit in table.items():
                if name not in COSTS:
                    raise EvaluatorError(
                        f"penalty evaluator: unknown cost {name!r}; use one of {list(COSTS)}")
                if not limit > 0:
                    raise EvaluatorError(
                        f"penalty evaluator: {what}{name} must be positive, got {limit}")
        if isinstance(penalty_weight, Mapping):
            self.weights = {k: float(penalty_weight.get(k, 0.0)) for k in self.targets}
            unused = sorted(set(penalty_weight) - set(self.targets))
            if unused:
                raise EvaluatorError(
                    f"penalty evaluator: penalty_weight names {unused} without a target; "
                    f"add targets for them or drop them")
        else:
            self.weights = {k: float(penalty_weight) for k in self.targets}
        if any(w < 0 for w in self.weights.values()):
            raise EvaluatorError(f"penalty evaluator: weights must be >= 0, got {self.weights}")
        unknown = [n for n in extra_objectives if n not in COSTS]
        if unknown:
            raise EvaluatorError(f"penalty evaluator: unknown extra objective(s) {unknown}; "
                                 f"use {list(COSTS)}")
        self.extra = tuple(extra_objectives)

        base = tuple(inner.objectives)
        if self.targets:
            if len(base) != 1:
                raise EvaluatorError(
                    f"penalty evaluator: soft targets need an inner evaluator with one "
                    f"objective, got {[o.name for o in base]}; use extra_objectives instead")
            base = (Objective(f"penalized_{base[0].name}", base[0].direction),)
        self.objectives = check_objectives(
            base + tuple(Objective(n, "minimize") for n in self.extra), "penalty evaluator")

    @classmethod
    def settings_type(cls) -> type:
        from evaluators.settings import PenaltySettings

        return PenaltySettings

    @classmethod
    def from_settings(cls, settings: Any, data: ScoringData, *, space: SearchSpace,  # type: ignore[override]  # takes the parts it names; build_evaluator checks them
                      inner: Evaluator, latency_fn: LatencyFn | None = None
                      ) -> PenaltyEvaluator:
        """Wraps the ``inner`` part; counts at the task's ``seq_len``."""
        return cls(inner, space, seq_len=data.seq_len, max_params=settings.max_params,
                   max_flops=settings.max_flops, max_latency_ms=settings.max_latency_ms,
                   targets=settings.targets, penalty_weight=settings.penalty_weight,
                   extra_objectives=settings.extra_objectives, latency_fn=latency_fn)

    def _needs_latency(self) -> bool:
        return "latency_ms" in {*self.ceilings, *self.targets, *self.extra}

    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        costs = counted_costs(self.space, arch, self.seq_len)
        known = {"params": float(costs["params"]), "flops": float(costs["flops"])}
        if self.latency_fn is not None and self._needs_latency():
            costs["latency_ms_predicted"] = known["latency_ms"] = float(self.latency_fn(arch))
        over = self._over_budget(known)
        if over:  # known up front: the inner evaluator is not run
            return EvalResult.failed(over, costs=costs)

        try:
            result = check_result(self.inner, self.inner.evaluate(arch, trial))
        except TrialPruned as err:  # keep the counted costs with the pruned result
            return EvalResult.pruned(str(err) or "pruned by the trial", costs=costs)
        costs = {**costs, **result.costs}
        if not result.ok:
            return replace(result, costs=costs)
        quantities = dict(known)
        if self._needs_latency() and "latency_ms" not in quantities:
            if "latency_ms" not in result.costs:
                raise EvaluatorError(
                    f"penalty evaluator: {type(self.inner).__name__} reports no "
                    "costs['latency_ms']; pass a latency_fn or measure latency in the inner "
                    "evaluator")
            quantities["latency_ms"] = float(result.costs["latency_ms"])
        inner_values = dict(zip(self.inner.objective_names, result.values, strict=True))
        metrics = {**result.metrics, **inner_values}
        over = self._over_budget(quantities)
        if over:  # a measured latency is known only now
            return EvalResult.failed(over, metrics=metrics, costs=costs,
                                     intermediate=result.intermediate)
        values = list(result.values)
        if self.targets:
            values[0] -= self.inner.objectives[0].sign * self.penalty(quantities)
        values += [quantities[n] for n in self.extra]
        return EvalResult(values=tuple(values), metrics=metrics, costs=costs,
                          intermediate=result.intermediate)

    def penalty(self, quantities: Mapping[str, float]) -> float:
        """Σ_c λ_c·max(0, cost_c/target_c − 1) over the soft targets."""
        return sum(self.weights[c] * max(0.0, quantities[c] / t - 1.0)
                   for c, t in self.targets.items())

    def _over_budget(self, quantities: Mapping[str, Any]) -> str | None:
        for name, limit in self.ceilings.items():
            if name in quantities and quantities[name] > limit:
                return f"over budget: {name} {quantities[name]:g} > max_{name} {limit:g}"
        return None
