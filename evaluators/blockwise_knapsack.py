"""The blockwise knapsack: one option per layer, least summed block error under a budget
(Puzzle, Bercovich et al. 2025, §4: a mixed-integer program over the block library).

For one hidden width ``w`` of a :class:`~evaluators.blockwise.BlockTable`, a
multiple-choice knapsack over binary ``x[i, c]`` (layer ``i`` takes option ``c``)::

    minimise    Σ_i,c error[w, i, c] · x[i, c]
    subject to  Σ_c x[i, c] = 1                                  for every layer i
                Σ_i,c cost[w, i, c] · x[i, c] ≤ budget − base[w]  for each limited cost

solved exactly by :func:`scipy.optimize.milp` (HiGHS branch and bound); an outer loop over
the widths keeps the best feasible one. Costs are the table's (parameters, predicted
batch-1 latency), which add up over layers exactly (:mod:`evaluators.blockwise`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evaluators.blockwise import COSTS, BlockTable, BlockwiseError
from nas.architecture import Architecture

#: The speed-up ratios over the teacher the compress method reports.
RATIOS = (2, 5, 15)


@dataclass(frozen=True)
class Pick:
    """The knapsack's answer: the architecture, its summed block error and its costs."""

    arch: Architecture
    error: float
    costs: dict[str, float]


def _check_limits(table: BlockTable, limits: Mapping[str, float]) -> None:
    if not limits:
        raise BlockwiseError("blockwise knapsack: give a budget (max params or max "
                             "latency_ms)")
    for name, value in limits.items():
        if name not in COSTS:
            raise BlockwiseError(f"blockwise knapsack: unknown cost {name!r}; use one of "
                                 f"{', '.join(COSTS)}")
        if name not in table.costs:
            raise BlockwiseError(f"blockwise knapsack: the table has no {name!r} cost; "
                                 "build it with a latency_fn")
        if not value > 0:
            raise BlockwiseError(f"blockwise knapsack: the {name} budget must be positive, "
                                 f"got {value}")


def _solve_width(table: BlockTable, w: int, limits: Mapping[str, float]
                 ) -> tuple[float, list[int]] | None:
    """``(summed error, option per layer)`` at width ``widths[w]``, or None if none fits."""
    from scipy.optimize import Bounds, LinearConstraint, milp

    layers, options = table.layers, len(table.options)
    n = layers * options
    one_each = np.kron(np.eye(layers), np.ones(options))  # Σ_c x[i, c] = 1
    room = {name: limit - table.base[name][w] for name, limit in limits.items()}
    if any(r < 0 for r in room.values()):
        return None
    # HiGHS may return a pick over the budget by up to its feasibility tolerance (seen:
    # 2e-6 ms over a budget set just below an architecture's latency); such a pick is
    # not the answer, and dropping the width would skip its true best: ask again with
    # that much less room, a few times at most
    for _ in range(4):
        rows = [LinearConstraint(one_each, 1, 1)]
        rows += [LinearConstraint(table.costs[name][w].reshape(1, n), -np.inf, room[name])
                 for name in limits]
        res = milp(table.error[w].ravel(), constraints=rows, integrality=np.ones(n),
                   bounds=Bounds(0, 1))
        if res.status != 0 or res.x is None:  # 2: infeasible
            return None
        picked = [int(c) for c in np.argmax(res.x.reshape(layers, options), axis=1)]
        over = {name: table.base[name][w] + sum(table.costs[name][w, i, c]
                                                for i, c in enumerate(picked)) - limit
                for name, limit in limits.items()}
        if all(over[name] <= limit * 1e-9 for name, limit in limits.items()):
            return float(sum(table.error[w, i, c] for i, c in enumerate(picked))), picked
        for name, limit in limits.items():
            if over[name] > limit * 1e-9:
                room[name] -= 2 * over[name]
                if room[name] < 0:
                    return None
    return None


def knapsack(table: BlockTable, *, max_params: float | None = None,
             max_latency_ms: float | None = None) -> Pick | None:
    """The least-error architecture of the table's space within the budget (the module
    docstring's program, over every width); None when no architecture fits."""
    limits = {n: float(v) for n, v in (("params", max_params),
                                       ("latency_ms", max_latency_ms)) if v is not None}
    _check_limits(table, limits)
    best: tuple[float, float, int, list[int]] | None = None
    for w in range(len(table.widths)):
        solved = _solve_width(table, w, limits)
        if solved is None:
            continue
        error, picked = solved
        tie = table.base["params"][w] + sum(table.costs["params"][w, i, c]
                                            for i, c in enumerate(picked))
        if best is None or (error, tie) < best[:2]:
            best = (error, tie, w, picked)
    if best is None:
        return None
    arch = table.architecture(best[2], best[3])
    return Pick(arch, best[0], {n: table.cost_of(arch, n) for n in table.costs})


def max_ratio(table: BlockTable, cost: str = "latency_ms") -> float:
    """The largest speed-up (or size) ratio over the teacher's ``cost`` that some
    architecture of the table's space reaches: the teacher's cost over the cheapest
    child's (every layer at its cheapest option, at the cheapest width)."""
    if cost not in table.costs:
        raise BlockwiseError(f"blockwise knapsack: the table has no {cost!r} cost; build it "
                             "with a latency_fn")
    smallest = min(table.base[cost][w] + table.costs[cost][w].min(axis=1).sum()
                   for w in range(len(table.widths)))
    return float(table.teacher[cost] / smallest)


def knapsack_front(table: BlockTable, budgets: Sequence[float] = RATIOS,
                   cost: str = "latency_ms") -> list[Architecture]:
    """One architecture per speed-up ratio in ``budgets``: the knapsack's pick within the
    teacher's ``cost`` divided by the ratio (``[2, 5, 15]``: the compress method's latency ratios;
    ``cost="params"`` for a size budget). A ratio no architecture meets is a
    :class:`BlockwiseError` naming the largest ratio the space reaches."""
    return [pick.arch for _, pick in knapsack_sweep(table, budgets, cost, distinct=False)]


def knapsack_sweep(table: BlockTable, ratios: Sequence[float], cost: str = "latency_ms", *,
                   limits: Mapping[str, float] | None = None, distinct: bool = True
                   ) -> list[tuple[float, Pick]]:
    """``(ratio, pick)`` per ratio in ``ratios`` (the knapsack within the teacher's ``cost``
    divided by the ratio, and within ``limits``, e.g. ``{"params": 10e6}``, the hard
    constraints of a run); with ``distinct``, a pick equal to an earlier one is dropped,
    so a sweep over a budget range gives the front's distinct points. A ratio no
    architecture meets is a :class:`BlockwiseError` naming the largest one reachable."""
    if cost not in COSTS:
        raise BlockwiseError(f"blockwise knapsack: unknown cost {cost!r}; use one of "
                             f"{', '.join(COSTS)}")
    extra = dict(limits or {})
    out: list[tuple[float, Pick]] = []
    seen: set[str] = set()
    for ratio in ratios:
        if not ratio > 0:
            raise BlockwiseError(f"blockwise knapsack: a ratio must be positive, got {ratio}")
        limit = table.teacher.get(cost, float("nan")) / float(ratio)
        if cost in extra:
            limit = min(limit, extra[cost])
        given = {**extra, cost: limit}
        pick = knapsack(table, max_params=given.get("params"),
                        max_latency_ms=given.get("latency_ms"))
        if pick is None:
            raise BlockwiseError(
                f"blockwise knapsack: no architecture is {ratio:g}x below the teacher's "
                f"{cost} ({table.teacher[cost]:g})"
                + (f" within {extra}" if extra else "")
                + f"; the space reaches {max_ratio(table, cost):.3g}x at most; ask for a "
                  "smaller ratio" + (" or loosen the constraints" if extra else ""))
        if distinct and pick.arch.id in seen:
            continue
        seen.add(pick.arch.id)
        out.append((float(ratio), pick))
    return out


def ratio_range(table: BlockTable, points: int, cost: str = "latency_ms",
                lowest: float = 1.0) -> list[float]:
    """``points`` ratios log-spaced from ``lowest`` (1: the teacher's own cost) to just
    under the largest one the space reaches (:func:`max_ratio`): a sweep's budget range."""
    if points < 1:
        raise BlockwiseError(f"blockwise knapsack: a range needs at least 1 point, got {points}")
    top = max_ratio(table, cost) / (1 + 1e-6)  # the cheapest child itself, within rounding
    if top <= lowest:
        return [top]
    return [float(r) for r in np.geomspace(lowest, top, points)]


def truncations(table: BlockTable, all_widths: bool = False) -> list[Architecture]:
    """Uniform truncation: the first k layers (k = 1..L) with all their heads and FFN
    neurons, at the teacher's width, or at each of the space's widths (``all_widths``)."""
    from spaces.bert_subnet import truncation

    teacher = int(table.space.config["hidden_size"])
    return [truncation(table.space, k, width) for width in table.widths
            if all_widths or width == teacher for k in range(1, table.layers + 1)]


__all__ = ["RATIOS", "Pick", "knapsack", "knapsack_front", "knapsack_sweep", "max_ratio",
           "ratio_range", "truncations"]
