"""The Optuna side of the partition samplers (LaNAS, :mod:`searchers.lanas`; LaMOO,
:mod:`searchers.lamoo`): what they share around their trees (:mod:`searchers.partition`).

:class:`PartitionSampler` proposes all of a trial's parameters at once (relative
sampling). Every ``rebuild_every`` finished trials it rebuilds its tree from the complete
trials; a subclass says how (:meth:`~PartitionSampler.build`) and how it proposes inside
the tree (:meth:`~PartitionSampler.propose`). Properties that matter for a shared study
and for exact resume:

* the tree is a pure function of the first ``n_startup_trials + k·rebuild_every`` complete
  trials (ordered by completion time, then number) and the seed, so workers sharing a
  study build the same tree;
* a trial's random draws come from a generator seeded by ``(seed, proposal index)``
  (:func:`searchers.resume.proposal_index`: the trial number, except that a killed
  trial's retry takes the killed trial's), so a resumed search proposes what the
  uninterrupted one did, and workers with the same seed do not collide;
* the first ``n_startup_trials`` trials are unseen uniform random samples, and so is a
  proposal the tree cannot make (every candidate seen or refused by ``constraint``).

Parameters outside the relative search space are sampled independently (uniformly).
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from searchers.partition import Encoding, PartitionError, PartitionTree
from searchers.resume import proposal_index

#: a setting's check: (name, value, whether it is good, the rule it breaks)
Check = tuple[str, Any, bool, str]


class PartitionSampler(BaseSampler):
    """Base class of the partition samplers (module docstring).

    Parameters (shared)
    -------------------
    search_space: the relative search space (e.g. :attr:`SpaceBridge.distributions`);
        default: the intersection of the finished trials' distributions.
    seed: the base seed of every trial's generator (``None``: a random one).
    n_startup_trials: complete trials before the first tree (random samples until then).
    rebuild_every: complete trials between two rebuilds (k).
    leaf_size: a node with at most this many samples is not split.
    max_draws, batch_size: random candidates tried per proposal (in batches) by rejection
        sampling and by the unseen random fallback.
    encodings: per categorical parameter, a row per choice (the space's encoding).
    constraint: ``params -> bool``; only accepted parameter sets are proposed.
    l2: the classifiers' L2 regularisation.
    """

    #: the error class of the sampler's one-line refusals
    error: ClassVar[type[PartitionError]] = PartitionError

    def __init__(self, *, search_space: Mapping[str, BaseDistribution] | None,
                 seed: int | None, n_startup_trials: int, rebuild_every: int, leaf_size: int,
                 max_draws: int, batch_size: int, encodings: Mapping[str, np.ndarray] | None,
                 constraint: Callable[[dict[str, Any]], bool] | None, l2: float,
                 checks: Sequence[Check] = ()) -> None:
        shared = [("n_startup_trials", n_startup_trials, n_startup_trials >= 0, ">= 0"),
                  ("rebuild_every", rebuild_every, rebuild_every >= 1, ">= 1"),
                  ("leaf_size", leaf_size, leaf_size >= 1, ">= 1"),
                  ("max_draws", max_draws, max_draws >= 1, ">= 1"),
                  ("batch_size", batch_size, batch_size >= 1, ">= 1"),
                  ("l2", l2, l2 > 0, "> 0")]
        for name, value, ok, rule in [*shared, *checks]:
            if not ok:
                raise self.error(f"{type(self).__name__}: {name} must be {rule}, got "
                                 f"{value!r}")
        self._fixed_space = dict(search_space) if search_space is not None else None
        self._seed = seed if seed is not None else \
            int(cast(int, np.random.SeedSequence().entropy) % 2**32)  # an int when unseeded
        self.n_startup_trials = n_startup_trials
        self.rebuild_every = rebuild_every
        self.leaf_size = leaf_size
        self.max_draws = max_draws
        self.batch_size = batch_size
        self.encodings = encodings
        self.constraint = constraint
        self.l2 = l2
        self._lock = threading.Lock()
        self._cache: tuple[Hashable, PartitionTree | None] | None = None
        self._encoding_cache: tuple[Hashable, Encoding] | None = None
        self._intersection = IntersectionSearchSpace()
        #: how the last proposal was made: "startup", "leaf" or "region" (from the tree),
        #: "fallback" (for logs, tests)
        self.last_proposal: dict[str, Any] = {}

    # -- what a subclass says ---------------------------------------------------
    def check_study(self, study: Study) -> None:
        """Refuse, in one line, a study the sampler cannot serve (default: none)."""

    def build(self, study: Study, x: np.ndarray, used: Sequence[FrozenTrial]) -> PartitionTree:
        """The tree of the complete trials ``used`` (encoded as the rows of ``x``)."""
        raise NotImplementedError

    def propose(self, study: Study, encoding: Encoding, tree: PartitionTree,
                rng: np.random.Generator, seen: set[Hashable],
                trials: Sequence[FrozenTrial]) -> dict[str, Any] | None:
        """A parameter set from the tree, unseen and accepted (:meth:`accept`); ``None``
        (after setting :attr:`last_proposal`) for the random fallback."""
        raise NotImplementedError

    # -- BaseSampler -------------------------------------------------------------
    def reseed_rng(self) -> None:
        self._seed = int(cast(int, np.random.SeedSequence().entropy) % 2**32)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        self.check_study(study)
        if self._fixed_space is not None:
            return dict(self._fixed_space)
        return {n: d for n, d in self._intersection.calculate(study).items() if not d.single()}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        self.check_study(study)
        if not search_space:
            return {}
        fixed = trial.system_attrs.get("fixed_params", {})
        if set(search_space) <= set(fixed):  # an enqueued trial: nothing to propose
            return {}
        encoding = self._encoding(search_space)
        trials = study.get_trials(deepcopy=False)
        rng = np.random.default_rng([self._seed, proposal_index(trials, trial.number,
                                                                trial.system_attrs)])
        seen = {self.key(encoding, t.params) for t in trials
                if t.number != trial.number and t.state != TrialState.WAITING
                and encoding.covers(t)}
        tree = self.tree(study, encoding, trials)
        if tree is None:
            self.last_proposal = {"how": "startup"}
            return self._unseen(encoding, rng, seen)
        params = self.propose(study, encoding, tree, rng, seen, trials)
        return params if params is not None else self._unseen(encoding, rng, seen)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        self.check_study(study)
        index = proposal_index(study.get_trials(deepcopy=False), trial.number,
                               trial.system_attrs)
        seed = zlib.crc32(f"{self._seed}:{index}:{param_name}".encode())
        return RandomSampler(seed=seed).sample_independent(study, trial, param_name,
                                                           param_distribution)

    # -- the tree ----------------------------------------------------------------
    def tree(self, study: Study, encoding: Encoding | None = None,
             trials: Sequence[FrozenTrial] | None = None) -> PartitionTree | None:
        """The current tree (``None`` before ``n_startup_trials`` complete trials)."""
        if encoding is None:
            self.check_study(study)
            encoding = self._encoding(self._fixed_space if self._fixed_space is not None
                                      else self._intersection.calculate(study))
        if trials is None:
            trials = study.get_trials(deepcopy=False)
        done = sorted((t for t in trials if t.state == TrialState.COMPLETE
                       and encoding.covers(t)),
                      key=lambda t: (t.datetime_complete, t.number))
        start = max(self.n_startup_trials, 2)
        if len(done) < start:
            return None
        m = start + (len(done) - start) // self.rebuild_every * self.rebuild_every
        used = done[:m]
        key = (tuple(t.number for t in used), self._seed, tuple(encoding.names))
        with self._lock:
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
        x = np.stack([encoding.encode(t.params) for t in used])
        tree = self.build(study, x, used)
        with self._lock:
            self._cache = (key, tree)
        return tree

    # -- proposals ---------------------------------------------------------------
    def _encoding(self, space: Mapping[str, BaseDistribution]) -> Encoding:
        key = tuple(sorted((n, repr(d)) for n, d in space.items()))
        with self._lock:
            if self._encoding_cache is None or self._encoding_cache[0] != key:
                self._encoding_cache = (key, Encoding(space, self.encodings))
            return self._encoding_cache[1]

    @staticmethod
    def key(encoding: Encoding, params: Mapping[str, Any]) -> Hashable:
        """What makes two parameter sets the same proposal."""
        return tuple((n, params.get(n)) for n in encoding.names)

    def accept(self, encoding: Encoding, params: dict[str, Any], seen: set[Hashable]) -> bool:
        """Unseen and feasible (``constraint``)."""
        return (self.key(encoding, params) not in seen
                and (self.constraint is None or self.constraint(params)))

    def _unseen(self, encoding: Encoding, rng: np.random.Generator,
                seen: set[Hashable]) -> dict[str, Any]:
        """A uniform random unseen feasible candidate; a seen feasible one when every draw
        was seen (an exhausted space); the first draw when none is feasible (the caller's
        constraint then rejects it, visibly)."""
        first: dict[str, Any] | None = None
        repeat: dict[str, Any] | None = None
        drawn_total = 0
        while drawn_total < self.max_draws:
            n = min(self.batch_size, self.max_draws - drawn_total)
            drawn = encoding.draw(rng, n)
            drawn_total += n
            for row in range(n):
                params = encoding.params(drawn, row)
                first = first or params
                if self.key(encoding, params) in seen:
                    if repeat is None and (self.constraint is None or self.constraint(params)):
                        repeat = params
                    continue
                if self.constraint is None or self.constraint(params):
                    return params
        return repeat or first  # type: ignore[return-value]  # max_draws >= 1: first is set
