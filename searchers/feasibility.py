"""Whether a search's hard constraints can be met at all, answered before anything trains
(since 0107f43): :func:`check_feasible` draws a few thousand architectures of the space, costs
each with the cost model (parameters and FLOPs counted from the graph, docs/reference.md#costs;
batch-1 latency predicted by this machine's latency model, :mod:`nas.latency`), and stops at the
first one that meets every constraint. When none does, the search would only ever see
rejected or infeasible proposals, so it is refused in one line that names the smallest
parameters, FLOPs and latency found and the fix.

Sampling, not enumeration, so that a space of 10¹⁵ architectures costs the same as one
of 27: uniform draws find the smallest architectures of a small space and come near
them in a large one (the message says how many were drawn).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.errors import NasError
from nas.units import human
from searchers.optuna_bridge import Budget

if TYPE_CHECKING:
    from nas.space import SearchSpace
    from searchers.settings import StudySettings


class InfeasibleConstraintError(NasError):
    """No architecture of the space meets the search's hard constraints."""


def check_feasible(space: SearchSpace, budget: Budget | StudySettings, *, seq_len: int | None,
                   samples: int = 2000, seed: int = 0,
                   latency_fn: Callable[[Mapping[str, Any]], float] | None = None) -> None:
    """Raise :class:`InfeasibleConstraintError` (a :class:`~nas.errors.NasError`) when none
    of the space's default architecture and ``samples`` seeded draws meets every
    constraint of ``budget``.

    ``budget``: a :class:`~searchers.optuna_bridge.Budget`, or the study settings whose
    ``max_params``, ``max_flops`` and ``max_latency_ms`` it holds (the latter predicted by
    ``latency_fn``, else by this machine's latency model, calibrated once for the space
    and cached when its table has none, :func:`nas.latency.space_predictor`).
    ``seq_len``: the length the FLOPs and latency are counted at (``None``: the
    budget's).
    """
    budget = _as_budget(space, budget, seq_len, latency_fn)
    if not budget.active:
        return
    rng = np.random.default_rng(seed)
    smallest: dict[str, float] = {}
    seen: set[str] = set()
    size = space.size()
    for k in range(samples + 1):
        arch = space.default() if k == 0 else space.sample(rng)
        if arch.id in seen:
            if len(seen) >= size:  # a small space: every architecture was costed
                break
            continue
        seen.add(arch.id)
        costs = budget.costs(space, arch)
        if not budget.violations(costs):
            return
        for name in budget.limits:
            value = Budget.cost(costs, name)
            smallest[name] = min(value, smallest.get(name, value))
    found = ", ".join(f"{_label(n)} {_show(n, v)} (max_{n} {_show(n, budget.limits[n])})"
                      for n, v in smallest.items())
    broken = [n for n, v in smallest.items() if v > budget.limits[n]]
    fix = (", ".join(f"raise constraints.max_{n} to at least {_at_least(n, smallest[n])}"
                     for n in broken) if broken else
           "each limit alone is met, but no architecture meets them together; loosen one")
    what = (f"all {len(seen)} architectures" if len(seen) >= size
            else f"{len(seen)} sampled architectures")
    raise InfeasibleConstraintError(
        f"constraints: no architecture of space {space.name!r} meets them; the smallest of "
        f"{what}: {found}; {fix}, or search a smaller space_config")


def _as_budget(space: SearchSpace, budget: Any, seq_len: int | None,
               latency_fn: Callable[[Mapping[str, Any]], float] | None) -> Budget:
    """The :class:`Budget` of the study settings (or the budget) at ``seq_len``."""
    if isinstance(budget, Budget):
        if seq_len is None or seq_len == budget.seq_len:
            return budget
        return Budget(max_params=budget.max_params, max_flops=budget.max_flops,
                      max_latency_ms=budget.max_latency_ms, seq_len=seq_len,
                      latency_fn=latency_fn or budget.latency_fn)
    limits = budget.budget_kwargs
    if limits.get("max_latency_ms") is not None and latency_fn is None:
        import logging

        from nas.latency import space_predictor

        latency_fn = space_predictor(space, seq_len=seq_len or 128,
                                     log=logging.getLogger("nas.study").info,
                                     runtime=getattr(budget, "latency_runtime", "torch"))
    return Budget(seq_len=seq_len, latency_fn=latency_fn, **limits)


def _label(name: str) -> str:
    return {"params": "params", "flops": "FLOPs", "latency_ms": "latency"}[name]


def _at_least(name: str, value: float) -> str:
    """``value`` rounded up, so that the limit the message suggests is met."""
    if name == "latency_ms":
        return f"{math.ceil(value * 1000) / 1000:g} ms"
    return f"{math.ceil(value):,}"


def _show(name: str, value: float) -> str:
    return f"{value:.3g} ms" if name == "latency_ms" else human(value)
