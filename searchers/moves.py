"""What the searchers that move by small steps share (``local-search``,
``regularized-evolution``, ``wl-bo``): the study's evaluated points, random points and
mutants of a point, on any space or a tabular benchmark.

:class:`MoveSampler` is an Optuna sampler whose whole state is the study: each trial it
reads the complete trials (:meth:`MoveSampler.history`), and a subclass picks the next
point from them (:meth:`MoveSampler.pick`). It is rebuilt per trial with a seed derived
from ``(seed, proposal index)`` (:class:`searchers.optuna_searchers.PerTrialSeed`), so
a resumed study proposes what the uninterrupted one did.

* **A point** is a full parameter set of the space's bridge
  (:class:`~searchers.optuna_bridge.SpaceBridge`); on a tabular benchmark, the
  parameters of the *evaluated* row (the trial's ``arch``, which the benchmark's
  mapping may have moved from the sampler's parameters). Without a bridge (a bare Optuna
  study) it is the trial's parameters over the intersection of the trials'
  distributions.
* **A mutant** changes one parameter to another of its values (a valid, feasible,
  unevaluated architecture); on a tabular benchmark it is a recorded row among the
  row's nearest (:meth:`nas.pool.PoolSpace.neighbours`: one choice away where any is
  recorded), within the budget and unevaluated, so every proposal is a row itself and
  no mapping favours rows in sparse regions of the encoding.
* **A random point** is uniform over the valid feasible unevaluated architectures
  (rejection, as random search); on a tabular benchmark a uniformly random free row
  within the budget (as :class:`searchers.optuna_searchers.PoolRandomSampler`).

The budget is known before any training (parameters and FLOPs are counted from the
graph, a benchmark's recorded), so these searchers propose feasible points only: they
are constraint-aware by construction rather than by learning a feasibility model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution
from optuna.search_space import IntersectionSearchSpace
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from searchers.optuna_bridge import SpaceBridge
from searchers.pareto import dominance_numbers
from searchers.resume import proposal_index

#: random draws before a random point gives up (a space whose valid feasible part is tiny)
MAX_DRAWS = 2000


@dataclass(frozen=True)
class Point:
    """An evaluated point: its key (the architecture id, or the parameters' JSON without a
    bridge), its parameters, its values in minimisation form and its trial number."""


    key: str
    params: dict[str, Any]
    loss: np.ndarray
    number: int


def values_of(distribution: BaseDistribution) -> list[Any]:
    """Every value of an integer or categorical distribution, in order."""
    if isinstance(distribution, CategoricalDistribution):
        return list(distribution.choices)
    if isinstance(distribution, IntDistribution):
        if distribution.log:
            return list(range(distribution.low, distribution.high + 1))
        return list(range(distribution.low, distribution.high + 1, distribution.step))
    raise ValueError(f"{distribution!r}: only integer and categorical parameters move")


class MoveSampler(optuna.samplers.BaseSampler):
    """The base of the step-wise samplers (module docstring); subclasses write
    :meth:`pick`. ``n_startup_trials`` random points come first."""

    def __init__(self, seed: int | None, bridge: SpaceBridge | None,
                 n_startup_trials: int) -> None:
        if n_startup_trials < 1:
            raise ValueError(f"n_startup_trials must be >= 1, got {n_startup_trials}")
        self.rng = np.random.default_rng(seed)
        self.bridge = bridge
        self.n_startup_trials = n_startup_trials
        self.fallback = optuna.samplers.RandomSampler(seed=seed)
        self._intersection = IntersectionSearchSpace()
        self._taken: set[str] = set()
        self._space: dict[str, BaseDistribution] = {}

    # -- Optuna's hooks ----------------------------------------------------------------
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        if self.bridge is not None:
            return dict(self.bridge.distributions)
        return {n: d for n, d in self._intersection.calculate(study).items()
                if not d.single() and isinstance(d, CategoricalDistribution | IntDistribution)}

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        if not search_space:
            return {}
        self._space = dict(search_space)
        trials = study.get_trials(deepcopy=False)
        self._taken = self.taken(trials, trial.number)
        history = self.history(study, trials)
        if len(history) < self.n_startup_trials:
            return self.random_point() or {}
        return self.pick(study, history) or self.random_point() or {}

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)

    # -- what subclasses write ---------------------------------------------------------
    def pick(self, study: optuna.Study, history: list[Point]) -> dict[str, Any] | None:
        """The next point's parameters (``None``: a random point)."""
        raise NotImplementedError

    # -- the study's points --------------------------------------------------------------
    def key(self, params: dict[str, Any]) -> str:
        if self.bridge is not None:
            return self.bridge.architecture(params).id
        return json.dumps(sorted(params.items()), default=str)

    def taken(self, trials: Sequence[FrozenTrial], exclude: int) -> set[str]:
        """Keys of the points evaluated or being evaluated (not trial ``exclude``)."""
        if self.bridge is not None:
            from searchers.proposals import evaluated_ids

            return evaluated_ids(trials, exclude)
        return {self.key(t.params) for t in trials if t.number != exclude
                and set(self._space) <= set(t.params)
                and t.state in (TrialState.COMPLETE, TrialState.RUNNING)}

    def history(self, study: optuna.Study, trials: Sequence[FrozenTrial]) -> list[Point]:
        """The complete trials as points, in the order of their proposal indices
        (:func:`searchers.resume.proposal_index`: a killed trial's retry takes the killed
        trial's place, so a resumed study sees the uninterrupted one's order)."""
        signs = np.array([-1.0 if d == StudyDirection.MAXIMIZE else 1.0
                          for d in study.directions])
        points = []
        for t in sorted(trials, key=lambda t: (proposal_index(trials, t.number,
                                                              t.system_attrs), t.number)):
            if t.state != TrialState.COMPLETE or t.values is None:
                continue
            if t.user_attrs.get("outcome") not in (None, "complete"):
                continue  # an infeasible placeholder or a rejected proposal
            params = self.point_params(t)
            if params is None:
                continue
            loss = np.asarray(t.values, dtype=np.float64) * signs
            points.append(Point(self.key(params), params, loss, t.number))
        return points

    def point_params(self, t: FrozenTrial) -> dict[str, Any] | None:
        if self.bridge is not None:
            arch = t.user_attrs.get("arch")
            if arch is not None:
                return self.bridge.params_of(arch)
            if all(n in t.params for n in self._space):
                return {n: t.params[n] for n in self._space}
            return None
        if not set(self._space) <= set(t.params):
            return None
        return {n: t.params[n] for n in self._space}

    # -- moves -------------------------------------------------------------------------
    def ok(self, params: dict[str, Any]) -> bool:
        """A valid, feasible, unevaluated point."""
        if self.bridge is None:
            return self.key(params) not in self._taken
        proposal = self.bridge.propose(params)
        return proposal.ok and proposal.arch is not None and proposal.mapped_from is None \
            and proposal.arch.id not in self._taken

    def random_point(self) -> dict[str, Any] | None:
        """A uniform random valid, feasible, unevaluated point (module docstring)."""
        return next(iter(self.random_points(1)), None)

    def random_points(self, n: int) -> list[dict[str, Any]]:
        """Up to ``n`` distinct random points (module docstring)."""
        pool = self.bridge.pool if self.bridge is not None else None
        if pool is not None and self.bridge is not None:
            rows = self.free_rows(np.arange(pool.size()))
            picked = self.rng.permutation(rows)[:n]
            return [self.bridge.params_of(pool.archs[int(r)]) for r in picked]
        found: dict[str, dict[str, Any]] = {}
        for _ in range(MAX_DRAWS):
            if len(found) >= n:
                break
            params = {name: self.draw(d) for name, d in self._space.items()}
            key = self.key_or_none(params)
            if key is not None and key not in found and self.ok(params):
                found[key] = params
        return list(found.values())

    def key_or_none(self, params: dict[str, Any]) -> str | None:
        try:
            return self.key(params)
        except Exception:  # noqa: BLE001 (an invalid architecture has no key)
            return None

    def draw(self, distribution: BaseDistribution) -> Any:
        values = values_of(distribution)
        return values[int(self.rng.integers(len(values)))]

    def free_rows(self, rows: np.ndarray) -> np.ndarray:
        """Those of a tabular benchmark's ``rows`` within the budget and unevaluated."""
        assert self.bridge is not None  # noqa: S101 (called on a tabular benchmark only)
        free = free_mask(self.bridge, self._taken)
        return np.array([int(r) for r in rows if free[int(r)]], dtype=int)

    def mutants(self, params: dict[str, Any], limit: int | None = None
                ) -> list[dict[str, Any]]:
        """Valid, feasible, unevaluated points one step from ``params`` (module docstring),
        in a random order; at most ``limit`` of them."""
        pool = self.bridge.pool if self.bridge is not None else None
        if pool is not None and self.bridge is not None:
            row = pool.row_of(self.bridge.architecture(params))
            if row is None:
                return []
            rows = self.rng.permutation(self.free_rows(pool.neighbours(row)))[:limit]
            return [self.bridge.params_of(pool.archs[int(r)]) for r in rows]
        moves = [(name, value) for name, d in self._space.items()
                 for value in values_of(d) if value != params[name]]
        found = []
        for i in self.rng.permutation(len(moves)):
            name, value = moves[int(i)]
            child = {**params, name: value}
            if self.ok(child):
                found.append(child)
                if limit is not None and len(found) >= limit:
                    break
        return found


def free_mask(bridge: SpaceBridge, taken: set[str]) -> np.ndarray:
    """Over a tabular benchmark's rows: within the budget and not ``taken`` (arch ids)."""
    pool = bridge.pool
    assert pool is not None  # noqa: S101 (a tabular benchmark's bridge)
    allowed = bridge.pool_allowed
    free = allowed.copy() if allowed is not None else np.ones(pool.size(), dtype=bool)
    for arch_id in taken:
        row = pool.row_of_id(arch_id)
        if row is not None:
            free[row] = False
    return free


def ranks(points: Sequence[Point]) -> np.ndarray:
    """Each point's rank, lower better: its loss with one objective, its dominance number
    (how many points dominate it) with several."""
    losses = np.array([p.loss for p in points])
    if losses.shape[1] == 1:
        return losses[:, 0]
    return dominance_numbers(losses).astype(np.float64)
