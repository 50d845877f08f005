"""The searcher contract: a small base class with documented hooks (Optuna's sampler
pattern, STYLE.md pattern 5).

Hooks are called in this order by a search loop::

    searcher = SomeSearcher(space, seed=0)
    while not done:
        arch = searcher.ask()          # propose one valid architecture
        score = evaluate(arch)          # higher is better; NaN scores count as 0 (SPEC §3)
        searcher.tell(arch, score)      # record the result
    searcher.best()                     # the best (architecture, score) seen

Every searcher owns a seeded ``numpy`` generator (never the global RNG) and can save and
restore its state (``state_dict``/``load_state_dict``) so an interrupted search resumes.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from nas.architecture import Architecture
from nas.registry import Registry
from nas.space import SearchSpace

SEARCHERS: Registry[type[Searcher]] = Registry("searcher")


class Searcher(abc.ABC):
    """Base class of the black-box searchers (random, LaNAS tree, Optuna)."""

    def __init__(self, space: SearchSpace, seed: int = 0) -> None:
        self.space = space
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.history: list[tuple[Architecture, float]] = []

    @abc.abstractmethod
    def ask(self) -> Architecture:
        """Propose the next architecture to evaluate."""

    def tell(self, arch: Architecture, score: float) -> None:
        """Record ``score`` (higher is better) for ``arch``; NaN counts as 0."""
        score = 0.0 if score is None or math.isnan(score) else float(score)
        self.history.append((self.space.validate(arch), score))

    def best(self) -> tuple[Architecture, float]:
        if not self.history:
            raise ValueError("no architecture has been evaluated yet")
        return max(self.history, key=lambda t: t[1])

    def seen(self, arch: Architecture) -> bool:
        return any(a == arch for a, _ in self.history)

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state,
                "history": [(a.to_dict(), s) for a, s in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.history = [(Architecture(a["choices"], a["space"]), s) for a, s in state["history"]]


@SEARCHERS.register("random")
class RandomSearcher(Searcher):
    """Uniform samples of valid architectures, without repeats when the space allows."""

    def ask(self) -> Architecture:
        for _ in range(100):
            arch = self.space.sample(self.rng)
            if not self.seen(arch):
                return arch
        return arch
