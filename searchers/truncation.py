"""``truncation``: uniform truncation as a planned searcher, the baseline every compression
must beat (DynaBERT, Hou et al. 2020, §3.2, keeps layers the same way): the sorted
teacher's first k whole layers, k = 1..L, at its width, those within the run's budget.
Method compress hands the truncations of its teacher's shape
(:func:`spaces.bert_subnet.truncation`); the method queues them on its study, each scored
by the run's evaluator, so the final retrain treats them exactly as searched points.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from nas.architecture import Architecture
from searchers.base import SEARCHERS, Plan, PlannedSearcher, SearcherError


@SEARCHERS.register("truncation")
class TruncationSearcher(PlannedSearcher):
    """The first k whole layers within the budget (module docstring)."""

    name = "truncation"
    needs = ("the sorted teacher's shape (uniform truncation: its first k whole layers, "
             "the baseline of the bert-subnet space)")

    def plan(self, truncations: Sequence[Architecture], space: Any, budget: Any) -> Plan:
        """``truncations``: the first k whole layers for k = 1..L, in order; ``space``
        and ``budget`` (:class:`~searchers.optuna_bridge.Budget`): the run's hard limits,
        all of them (FLOPs included), costed as any proposal is."""
        queue = [(f"first-{k}", arch) for k, arch in enumerate(truncations, start=1)
                 if budget.violation(budget.costs(space, arch)) is None]
        if not queue:
            raise SearcherError("constraints: no truncation of the teacher (first k whole "
                                "layers) fits them; raise max_params, max_flops or "
                                "max_latency_ms")
        return Plan(queue)


__all__ = ["TruncationSearcher"]
