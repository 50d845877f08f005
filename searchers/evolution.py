"""Local search and regularized evolution as Optuna samplers over a space's choices
(:mod:`searchers.moves`: points, mutants, random points; the study is their only state).

* ``local-search`` (White, Nolen & Savani, "Exploring the loss landscape in neural
  architecture search", UAI 2021, §3): from a random architecture, evaluate its
  neighbours (one choice changed) in a random order and move to the first that is
  better (first improvement); when every neighbour of the current one is evaluated and
  none is better (a local optimum), restart from a random architecture. The current
  architecture is re-derived from the trials each time: walking the complete trials in
  order, a trial that is a neighbour of the current one replaces it when better, and a
  trial that is not a neighbour (a restart, or a trial queued by hand) becomes the
  current one. With several objectives it is Pareto local search (Paquete, Chiarandini &
  Stützle, 2004): an unevaluated neighbour of a random member of the observed front that
  has one, else a random architecture.
* ``regularized-evolution`` (Real, Aggarwal, Huang & Le, "Regularized evolution for image
  classifier architecture search", AAAI 2019, §2, Algorithm 1): the population is the
  last ``population_size`` complete trials (so the oldest leaves first: age-based
  removal); each trial samples ``sample_size`` members at random, takes the best (several
  objectives: the fewest dominating members of the sample) and proposes an unevaluated
  mutant of it (one choice changed). The first ``population_size`` trials are random.
  The paper's P = 100, S = 25 serve 20,000 evaluations; the defaults here (P = 10,
  S = 3) are scaled to searches of 40-100 evaluations.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import optuna
from optuna.samplers import BaseSampler

from searchers.base import SEARCHERS
from searchers.moves import MoveSampler, Point, ranks
from searchers.optuna_bridge import SpaceBridge
from searchers.optuna_searchers import PerTrialSearcher

#: regularized evolution's defaults (module docstring)
POPULATION = 10
SAMPLE = 3


class LocalSearchSampler(MoveSampler):
    """Local search with restarts (module docstring). ``n_startup_trials``: random
    architectures before the first move (default 1, the paper's)."""

    def __init__(self, seed: int | None = None, bridge: SpaceBridge | None = None, *,
                 n_startup_trials: int = 1) -> None:
        super().__init__(seed, bridge, n_startup_trials)

    def pick(self, study: optuna.Study, history: list[Point]) -> dict[str, Any] | None:
        if len(history[0].loss) > 1:
            return self.pareto_step(history)
        current = self.current(history)
        found = self.mutants(current.params, limit=1)
        return found[0] if found else None  # a local optimum: restart at random

    def current(self, history: list[Point]) -> Point:
        """The architecture the search stands on now (module docstring)."""
        current = history[0]
        for point in history[1:]:
            if self.is_neighbour(current, point):
                if point.loss[0] < current.loss[0]:
                    current = point
            else:
                current = point
        return current

    def is_neighbour(self, a: Point, b: Point) -> bool:
        """Whether ``b`` is one of ``a``'s mutants (on a tabular benchmark: one of its
        nearest rows)."""
        pool = self.bridge.pool if self.bridge is not None else None
        if pool is not None and self.bridge is not None:
            row_a = pool.row_of(self.bridge.architecture(a.params))
            row_b = pool.row_of(self.bridge.architecture(b.params))
            return row_a is not None and row_b in set(pool.neighbours(row_a).tolist())
        return sum(a.params[n] != b.params.get(n) for n in a.params) == 1

    def pareto_step(self, history: list[Point]) -> dict[str, Any] | None:
        front = [p for p, r in zip(history, ranks(history), strict=True) if r == 0]
        for i in self.rng.permutation(len(front)):
            found = self.mutants(front[int(i)].params, limit=1)
            if found:
                return found[0]
        return None


class RegularizedEvolutionSampler(MoveSampler):
    """Regularized evolution (module docstring)."""

    def __init__(self, seed: int | None = None, bridge: SpaceBridge | None = None, *,
                 population_size: int = POPULATION, sample_size: int = SAMPLE) -> None:
        if not 1 <= sample_size <= population_size:
            raise ValueError(f"sample_size must be between 1 and population_size "
                             f"({population_size}), got {sample_size}")
        super().__init__(seed, bridge, population_size)
        self.population_size = population_size
        self.sample_size = sample_size

    def pick(self, study: optuna.Study, history: list[Point]) -> dict[str, Any] | None:
        population = history[-self.population_size:]
        sample = [population[int(i)] for i in
                  self.rng.choice(len(population), self.sample_size, replace=False)]
        parent = sample[int(np.argmin(ranks(sample)))]
        found = self.mutants(parent.params, limit=1)
        return found[0] if found else None


@SEARCHERS.register("local-search")
class LocalSearchSearcher(PerTrialSearcher):
    """Local search with restarts; Pareto local search with several objectives
    (:class:`LocalSearchSampler`). Options: ``n_startup_trials``."""

    name = "local-search"

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        return LocalSearchSampler(seed, bridge, **self.options)


@SEARCHERS.register("regularized-evolution")
class RegularizedEvolutionSearcher(PerTrialSearcher):
    """Regularized evolution (:class:`RegularizedEvolutionSampler`). Options:
    ``population_size``, ``sample_size``."""

    name = "regularized-evolution"

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        return RegularizedEvolutionSampler(seed, bridge, **self.options)
