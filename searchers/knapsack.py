"""``knapsack``: Puzzle's multiple-choice knapsack (Bercovich et al. 2025, §4) as a planned
searcher. It reads the sorted teacher's blockwise table (:mod:`evaluators.blockwise`,
which method compress builds) and proposes, for each budget of a range, the architecture
of least summed block error within it (:func:`evaluators.blockwise_knapsack.
knapsack_sweep`); equal picks are proposed once. The method queues the picks on its
study, each scored by the run's evaluator.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from nas.config import are_ratios, check_fields
from searchers.base import SEARCHERS, Plan, PlannedSearcher

#: what a knapsack budget limits
KNAPSACK_COSTS = ("latency_ms", "params")


@dataclass
class KnapsackSettings:
    """``searcher: knapsack`` (Puzzle, Bercovich et al. 2025, §4): the ``cost`` each
    budget limits (``latency_ms``, predicted batch 1 by the latency model, or ``params``)
    and the budgets, as ratios of the teacher's cost: ``ratios`` given, else ``n_trials``
    ratios log-spaced from 1 (the teacher) to the largest the space reaches; with
    ``final.select: latency_ratios`` and a latency cost, the final ratios are added. Equal
    picks are run once."""

    cost: str = "latency_ms"
    ratios: list = field(default_factory=list)

    def __post_init__(self) -> None:
        check_fields([("cost", self.cost in KNAPSACK_COSTS, " or ".join(KNAPSACK_COSTS)),
                      ("ratios", are_ratios(self.ratios, above_one=False),
                       "ratios >= 1 of the teacher's cost, e.g. [2, 5, 15]")], self)


@SEARCHERS.register("knapsack")
class KnapsackSearcher(PlannedSearcher):
    """The knapsack at each budget over the sorted teacher's blockwise table (module
    docstring), within the run's hard limits on parameters and latency."""

    name = "knapsack"
    needs = ("the sorted teacher's blockwise table (Puzzle's knapsack over the bert-subnet "
             "space)")
    settings: KnapsackSettings

    @classmethod
    def settings_type(cls) -> type:
        return KnapsackSettings

    def plan(self, table: Any, n_trials: int, constraints: Mapping[str, float | None],
             final_ratios: Sequence[float] = ()) -> Plan:
        """``table``: the :class:`~evaluators.blockwise.BlockTable`; ``n_trials``: how many
        budgets when no ``ratios`` are set; ``constraints``: the run's ``max_params`` and
        ``max_latency_ms`` (a FLOPs limit the table cannot cost); ``final_ratios``: the
        speed-ups the final selection asks for, added to a latency range."""
        from evaluators.blockwise_knapsack import knapsack_sweep, ratio_range

        k = self.settings
        ratios = set(k.ratios or ratio_range(table, n_trials, k.cost))
        if k.cost == "latency_ms":
            ratios |= set(final_ratios)
        limits = {n: float(v) for n, v in (("params", constraints.get("max_params")),
                                           ("latency_ms", constraints.get("max_latency_ms")))
                  if v is not None}
        sweep = knapsack_sweep(table, sorted(float(r) for r in ratios), k.cost, limits=limits)
        picks = [{"ratio": ratio, "arch_id": pick.arch.id, "block_error": pick.error,
                  **{f"table_{n}": v for n, v in pick.costs.items()}} for ratio, pick in sweep]
        return Plan([(f"knapsack-{ratio:.4g}x", pick.arch) for ratio, pick in sweep],
                    {"cost": k.cost, "ratios": sorted(ratios), "picks": picks,
                     "table_seconds": dict(table.seconds)})


__all__ = ["KNAPSACK_COSTS", "KnapsackSearcher", "KnapsackSettings"]
