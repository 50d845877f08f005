"""The multi-trial searchers: ``random``, ``tpe`` (multivariate), ``nsga2``, ``gp``,
``lanas`` (:class:`searchers.lanas.LaNASSampler`) and ``lamoo``
(:class:`searchers.lamoo.LaMOOSampler`), each a sampler factory
(:class:`~searchers.base.MultiTrialSearcher`, docs/reference.md#optuna).

A searcher builds the Optuna sampler of a study; :class:`searchers.proposals.StudySearch`
asks that study for architectures and tells it their results, and
:func:`searchers.loop.run_study` drives it in one process or several.

Each Optuna sampler is rebuilt for every trial with a seed derived from ``(seed, trial
number)`` (:class:`PerTrialSeed`), so a proposal is a pure function of the seed, the trial
number and the study's contents: the same seed gives the same trials, a resumed search
continues as the uninterrupted one would, and workers that share a seed still draw
different trials. LaNAS and LaMOO seed each trial's draws the same way themselves.

Constraints: TPE, NSGA-II and GP take the budget as Optuna's
``constraints_func`` (:meth:`~searchers.optuna_bridge.Budget.constraints_func`), so an
infeasible architecture is a trial they learn from (ranked below every feasible one:
TPE ranks infeasible trials by their summed violation, below the feasible ones, a
variant of c-TPE, Watanabe & Hutter, 2023; NSGA-II's constrained domination,
Deb et al., 2002; GP's probability of feasibility, Gardner et al., 2014), not a pruned
one, which would bias TPE toward the smallest models. Random search, LaNAS and LaMOO reject
infeasible proposals instead: random search learns nothing, so rejection samples the
feasible set uniformly, and LaNAS and LaMOO sample inside their partitions under the budget
already (Wang et al., 2021; Zhao et al., 2022). Optuna 5.0 deprecates ``constraints_func`` (to be
removed in 7.0) for ``Trial.set_constraint``; both end in the trial constraint values
that the samplers read, so the move is one line in :meth:`PerTrialSearcher.constraint_options`.
"""

from __future__ import annotations

import abc
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, cast

import numpy as np
import optuna
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from searchers.base import SEARCHERS, MultiTrialSearcher, SearcherError
from searchers.lamoo import LaMOOSampler
from searchers.lanas import LaNASSampler
from searchers.optuna_bridge import SpaceBridge
from searchers.partition_sampler import PartitionSampler
from searchers.resume import proposal_index

optuna.logging.set_verbosity(optuna.logging.WARNING)


def derived_seed(seed: int, number: int) -> int:
    """A 32-bit seed for trial ``number`` of a search seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


class PerTrialSeed(BaseSampler):
    """Runs ``factory(seed')`` for each trial, ``seed' = derived_seed(seed, index)``, where
    ``index`` is the trial's proposal index (:func:`searchers.resume.proposal_index`: the
    trial number, except after a killed trial's retry, which takes the killed trial's).

    Optuna's samplers keep one generator for the whole study, so what trial n gets
    depends on how many draws came before it in *this process*; rebuilding the sampler
    per trial makes it depend on the study alone, and seeding it by the proposal index
    rather than the number makes a resumed study propose what the uninterrupted one did.
    The samplers here keep no other state that matters (NSGA-II's generations live in the
    trials' system attributes, which a retry inherits).
    """

    def __init__(self, factory: Callable[[int], BaseSampler], seed: int) -> None:
        self.factory = factory
        self.seed = seed
        self._live: dict[int, BaseSampler] = {}
        self._lock = threading.Lock()

    def _for(self, study: optuna.Study, trial: FrozenTrial) -> BaseSampler:
        with self._lock:
            if trial.number not in self._live:
                index = proposal_index(study.get_trials(deepcopy=False), trial.number,
                                       trial.system_attrs)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    # Optuna 5.0 deprecates constraints_func (module docstring)
                    warnings.simplefilter("ignore", FutureWarning)
                    self._live[trial.number] = self.factory(derived_seed(self.seed, index))
            return self._live[trial.number]

    def reseed_rng(self) -> None:
        self.seed = int(cast(int, np.random.SeedSequence().entropy) % 2**32)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict:
        return self._for(study, trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict
                        ) -> dict[str, Any]:
        return self._for(study, trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        with warnings.catch_warnings():  # TPE/GP warn when a parameter is sampled alone
            warnings.simplefilter("ignore", UserWarning)
            return self._for(study, trial).sample_independent(study, trial, param_name,
                                                       param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._for(study, trial).before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        sampler = self._for(study, trial)
        with self._lock:
            self._live.pop(trial.number, None)
        sampler.after_trial(study, trial, state, values)


class PerTrialSearcher(MultiTrialSearcher):
    """A searcher whose Optuna sampler is rebuilt per trial (:class:`PerTrialSeed`);
    subclasses say how to build it for one seed (:meth:`build`)."""

    def constraint_options(self, bridge: SpaceBridge | None) -> dict[str, Any]:
        """``{"constraints_func": ...}`` for a constraint-aware searcher whose bridge has an
        active budget, else nothing (the sampler then behaves as without constraints)."""
        if not self.constraint_aware or bridge is None or not bridge.budget.active:
            return {}
        return {"constraints_func": bridge.budget.constraints_func()}

    @abc.abstractmethod
    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        """The Optuna sampler for one trial's seed."""

    def sampler(self, seed: int, bridge: SpaceBridge | None = None) -> BaseSampler:
        def factory(s: int) -> BaseSampler:
            return self.build(s, bridge)

        try:  # the options are checked now, not at the first trial
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                warnings.simplefilter("ignore", FutureWarning)  # constraints_func (above)
                factory(seed)
        except TypeError as err:  # an unknown option
            raise SearcherError(f"searcher {self.name!r}: bad sampler option ({err}); "
                                f"options given: {sorted(self.options)}") from None
        return PerTrialSeed(factory, seed)


# ---------------------------------------------------------------------------
# the searchers
# ---------------------------------------------------------------------------


class PoolRandomSampler(BaseSampler):
    """Random search on a tabular benchmark (:mod:`nas.pool`): a uniformly random
    unevaluated recorded row within the budget. Uniform parameters mapped to their
    nearest row would favour the rows in sparse regions of the encoding."""

    def __init__(self, seed: int, bridge: SpaceBridge) -> None:
        self.rng = np.random.default_rng(seed)
        self.bridge = bridge
        self.fallback = optuna.samplers.RandomSampler(seed=seed)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict:
        return dict(self.bridge.distributions)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict
                        ) -> dict[str, Any]:
        from searchers.moves import free_mask
        from searchers.proposals import evaluated_ids

        pool = self.bridge.pool
        if not search_space or pool is None:
            return {}
        allowed = self.bridge.pool_allowed
        free = free_mask(self.bridge, evaluated_ids(study.get_trials(deepcopy=False),
                                                    trial.number))
        rows = np.flatnonzero(free if free.any() or allowed is None else allowed)
        if not len(rows):
            return {}
        row = int(rows[self.rng.integers(len(rows))])
        return self.bridge.params_of(pool.archs[row])

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        return self.fallback.sample_independent(study, trial, param_name, param_distribution)


@SEARCHERS.register("random")
class RandomSearcher(PerTrialSearcher):
    """Uniform random architectures (Optuna's ``RandomSampler``), the baseline every
    searcher must beat (AdaBERT's random baseline, Chen et al. 2020, §4; Li & Talwalkar, 2019).
    Repeats are skipped while the space has unseen architectures (:mod:`searchers.proposals`). On a
    tabular benchmark, a uniformly random unevaluated recorded row
    (:class:`PoolRandomSampler`)."""

    name = "random"

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        if bridge is not None and bridge.pool is not None and not self.options:
            return PoolRandomSampler(seed, bridge)
        return optuna.samplers.RandomSampler(seed=seed, **self.options)


@SEARCHERS.register("random-params")
class RandomParamsSearcher(PerTrialSearcher):
    """Uniform random parameters (Optuna's ``RandomSampler``) with no pool sampler: on a
    tabular benchmark each draw is mapped to its nearest unevaluated recorded row
    (:meth:`nas.pool.PoolSpace.nearest`), as every model-based searcher's random start-up
    is. The control that tells a searcher's learning from that mapping: the mapping
    favours rows in sparse regions of the encoding (``random`` draws rows uniformly);
    on any other space it is ``random``."""

    name = "random-params"

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        return optuna.samplers.RandomSampler(seed=seed, **self.options)


@SEARCHERS.register("tpe")
class TPESearcher(PerTrialSearcher):
    """Multivariate TPE (``TPESampler(multivariate=True)``), with the constant liar so
    that parallel workers spread out; single- or multi-objective; constraint-aware."""

    name = "tpe"
    constraint_aware = True

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        options = {"multivariate": True, "constant_liar": True,
                   **self.constraint_options(bridge), **self.options}
        return optuna.samplers.TPESampler(seed=seed, **options)


@SEARCHERS.register("nsga2")
class NSGA2Searcher(PerTrialSearcher):
    """NSGA-II (``NSGAIISampler``): a genetic multi-objective search (Deb et al., 2002),
    constraint-aware (constrained domination)."""

    name = "nsga2"
    constraint_aware = True

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        return optuna.samplers.NSGAIISampler(seed=seed, **self.constraint_options(bridge),
                                             **self.options)


@SEARCHERS.register("gp")
class GPSearcher(PerTrialSearcher):
    """Gaussian-process Bayesian optimisation (``GPSampler``: log EI, or log EHVI with
    several objectives); constraint-aware."""

    name = "gp"
    constraint_aware = True

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        return optuna.samplers.GPSampler(seed=seed, **self.constraint_options(bridge),
                                         **self.options)


class PartitionSearcher(MultiTrialSearcher):
    """A learned-partition sampler (:class:`searchers.partition_sampler.PartitionSampler`)
    over the space's encoding, with the budget as its constraint. The sampler seeds each
    trial's draws by ``(seed, proposal index)`` itself, so it is built once per study."""

    sampler_class: ClassVar[type[PartitionSampler]]

    def sampler(self, seed: int, bridge: SpaceBridge | None = None) -> BaseSampler:
        space: dict[str, Any] = {} if bridge is None else {
            "search_space": bridge.distributions, "encodings": bridge.encoding_tables(),
            "constraint": bridge.feasible if bridge.budget.active else None}
        try:
            return self.sampler_class(seed=seed, **space, **self.options)
        except TypeError as err:
            raise SearcherError(f"searcher {self.name!r}: bad sampler option ({err}); "
                                f"options given: {sorted(self.options)}") from None


@SEARCHERS.register("lanas")
class LaNASSearcher(PartitionSearcher):
    """LaNAS (:class:`searchers.lanas.LaNASSampler`): rejection sampling in the leaf that
    UCB picks; single-objective (scalarise several objectives, e.g. accuracy with a
    latency penalty)."""

    name = "lanas"
    sampler_class = LaNASSampler
    multi_objective = False


@SEARCHERS.register("lamoo")
class LaMOOSearcher(PartitionSearcher):
    """LaMOO (:class:`searchers.lamoo.LaMOOSampler`; Zhao et al., ICLR 2022): the space
    split by dominance number, a leaf picked by UCB on hypervolume, proposals by a walk
    inside it; for Pareto searches (several objectives, the study's directions)."""

    name = "lamoo"
    sampler_class = LaMOOSampler
