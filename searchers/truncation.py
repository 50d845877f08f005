"""``truncation``: uniform truncation as a planned searcher, the baseline every compression
must beat (DynaBERT, Hou et al. 2020, §3.2, keeps layers the same way): the sorted
teacher's first k whole layers, k = 1..L, at its width, those within the run's budget.
Method compress hands the truncations of its teacher's shape
(:func:`spaces.bert_subnet.truncation`); the method queues them on its study, each scored
by the run's evaluator, so the final retrain treats them exactly as searched points.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.architecture import Architecture
from nas.config import check_fields
from searchers.base import SEARCHERS, Plan, PlannedSearcher, SearcherError


@dataclass
class TruncationSettings:
    """``searcher: {name: truncation, settings: {layers: [3, 4]}}``: which k of the first
    k whole layers to queue (default: every k within the run's budget). A run that wants
    one known shape (the quickstart's first 4 layers) names it here, rather than leaving
    the pick to a short proxy that scores all of them at the majority answer."""

    layers: list = field(default_factory=list)

    def __post_init__(self) -> None:
        check_fields([("layers", isinstance(self.layers, list) and all(
            isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in self.layers),
            "a list of layer counts >= 1 (e.g. [3, 4]); leave it out for every count")], self)


@SEARCHERS.register("truncation")
class TruncationSearcher(PlannedSearcher):
    """The first k whole layers within the budget (module docstring)."""

    name = "truncation"
    needs = ("the sorted teacher's shape (uniform truncation: its first k whole layers, "
             "the baseline of the bert-subnet space)")

    @classmethod
    def settings_type(cls) -> type:
        return TruncationSettings

    def plan(self, truncations: Sequence[Architecture], space: Any, budget: Any) -> Plan:
        """``truncations``: the first k whole layers for k = 1..L, in order; ``space``
        and ``budget`` (:class:`~searchers.optuna_bridge.Budget`): the run's hard limits,
        all of them (FLOPs included), costed as any proposal is; the settings' ``layers``
        (when given) pick which k."""
        wanted = self.settings.layers
        beyond = [k for k in wanted if k > len(truncations)]
        if beyond:
            raise SearcherError(f"searcher truncation: layers {beyond[0]} is more than the "
                                f"teacher's {len(truncations)}; use 1..{len(truncations)}")
        costs = [budget.costs(space, arch) for arch in truncations]
        queue = [(f"first-{k}", arch) for k, (arch, c) in
                 enumerate(zip(truncations, costs, strict=True), start=1)
                 if (not wanted or k in wanted) and budget.violation(c) is None]
        if not queue:
            smallest = min(wanted) if wanted else 1
            raise SearcherError(_no_truncation_fits(budget, costs[smallest - 1], smallest))
        return Plan(queue)


def _no_truncation_fits(budget: Any, smallest: Mapping[str, Any], k: int = 1) -> str:
    """Why no truncation fits: what the smallest one (the first ``k`` layers) breaks, by how much,
    and, when the predicted latency is among it, the latency table behind the prediction
    (a table calibrated on a busy machine refuses what the limit was meant to allow)."""
    from nas.latency import latency_source

    broken = budget.violations(smallest)
    found = ", ".join(f"{name} {budget.cost(smallest, name):.4g} > max_{name} "
                      f"{budget.limits[name]:g}" for name in broken)
    message = ("constraints: no truncation of the teacher (first k whole layers) fits them "
               f"(the first {k} layer(s) alone: {found}); raise "
               + " or ".join(f"max_{name}" for name in broken))
    source = latency_source(budget.latency_fn) if "latency_ms" in broken else None
    return f"{message}; {source}" if source else message


__all__ = ["TruncationSearcher", "TruncationSettings"]
