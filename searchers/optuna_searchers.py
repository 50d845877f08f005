"""Multi-trial searchers on Optuna: ``random``, ``tpe`` (multivariate), ``nsga2``, ``gp``
and ``lanas`` (:class:`searchers.lanas.LaNASSampler`), one class each behind
:class:`OptunaSearcher` (issue 14, SPEC §9).

An :class:`OptunaSearcher` is a :class:`~searchers.base.MultiTrialSearcher` whose
proposals come from an Optuna study: ``ask()`` asks the study for a trial, turns its
parameters into an architecture through the :class:`~searchers.optuna_bridge.SpaceBridge`
and returns it; ``tell()`` tells the study the result (complete, pruned or failed). The
study lives in memory, or in any Optuna storage (a journal file, SQLite, PostgreSQL)
shared by several processes: :func:`searchers.loop.run_study` drives it there.

What a trial of the study can be (user attribute ``outcome``):

* ``rejected`` — the parameters give an invalid or over-budget architecture (the reason
  is in ``reason``); told as *pruned*, so that TPE ranks the region low, and asked again.
  It costs no evaluation and does not count as a trial of the search;
* ``repeat`` — the architecture was evaluated (or is being evaluated) already; told as
  *failed*, which every sampler ignores, and asked again (up to ``max_repeats`` times,
  then the repeat is returned: once the space is exhausted, repeats are allowed);
* ``complete``, ``pruned``, ``failed`` — an evaluation's result;
* ``surplus`` — asked by a worker after the study had its trials (:meth:`withdraw`); a
  trial whose worker died is failed with no outcome and queued again
  (:mod:`searchers.storage`).

Every proposal records ``arch_id``, ``arch`` (the choices as JSON) and ``costs``
(parameters and FLOPs counted from the graph) as user attributes.

Each sampler is rebuilt for every trial with a seed derived from ``(seed, trial number)``
(:class:`PerTrialSeed`), so a proposal is a pure function of the seed, the trial number
and the study's contents: the same seed gives the same trials, a resumed or restored
search continues as the uninterrupted one would, and workers that share a seed still
draw different trials.
"""

from __future__ import annotations

import contextlib
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
import optuna
from optuna.distributions import distribution_to_json, json_to_distribution
from optuna.samplers import BaseSampler
from optuna.trial import FrozenTrial, TrialState

from evaluators.base import EvalResult, Objective, OptunaTrial, Trial
from nas.architecture import Architecture
from searchers.base import DEFAULT_OBJECTIVES, SEARCHERS, MultiTrialSearcher, SearcherError
from searchers.lanas import LaNASSampler
from searchers.optuna_bridge import Budget, SpaceBridge

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.storages import BaseStorage

    from nas.space import SearchSpace

optuna.logging.set_verbosity(optuna.logging.WARNING)

#: Trial outcomes that stand for an evaluation (finished or running).
EVALUATED = ("complete", "pruned", "failed")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Ask/tell with an RDB heartbeat is what searchers.loop does on purpose (it records
    the heartbeat itself); Optuna warns about it on every call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        yield


def derived_seed(seed: int, number: int) -> int:
    """A 32-bit seed for trial ``number`` of a search seeded with ``seed``."""
    return int(np.random.SeedSequence([seed, number]).generate_state(1)[0])


class PerTrialSeed(BaseSampler):
    """Runs ``factory(seed')`` for each trial, ``seed' = derived_seed(seed, trial.number)``.

    Optuna's samplers keep one generator for the whole study, so what trial n gets
    depends on how many draws came before it in *this process*; rebuilding the sampler
    per trial makes it depend on the study alone. The samplers here keep no other state
    that matters (NSGA-II's generations live in the trials' system attributes).
    """

    def __init__(self, factory: Callable[[int], BaseSampler], seed: int) -> None:
        self.factory = factory
        self.seed = seed
        self._live: dict[int, BaseSampler] = {}
        self._lock = threading.Lock()

    def _for(self, trial: FrozenTrial) -> BaseSampler:
        with self._lock:
            if trial.number not in self._live:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                    self._live[trial.number] = self.factory(derived_seed(self.seed,
                                                                         trial.number))
            return self._live[trial.number]

    def reseed_rng(self) -> None:
        self.seed = int(np.random.SeedSequence().entropy % 2**32)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict:
        return self._for(trial).infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict
                        ) -> dict[str, Any]:
        return self._for(trial).sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: Any) -> Any:
        with warnings.catch_warnings():  # TPE/GP warn when a parameter is sampled alone
            warnings.simplefilter("ignore", UserWarning)
            return self._for(trial).sample_independent(study, trial, param_name,
                                                       param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self._for(trial).before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Sequence[float] | None) -> None:
        sampler = self._for(trial)
        with self._lock:
            self._live.pop(trial.number, None)
        sampler.after_trial(study, trial, state, values)


class _EvaluationTrial:
    """The :class:`evaluators.base.Trial` an evaluator sees: reports go to Optuna's pruner
    in single-objective studies; Optuna cannot prune multi-objective ones, so there the
    reports are only recorded by :func:`~evaluators.base.run_evaluation`."""

    def __init__(self, trial: optuna.Trial, prune: bool) -> None:
        self.inner = OptunaTrial(trial)
        self.prune = prune

    @property
    def number(self) -> int:
        return self.inner.number

    def report(self, step: int, value: float) -> None:
        if self.prune:
            self.inner.report(step, value)

    def should_prune(self) -> bool:
        return self.prune and self.inner.should_prune()

    def set_attr(self, key: str, value: Any) -> None:
        self.inner.set_attr(key, value)


class OptunaSearcher(MultiTrialSearcher):
    """A multi-trial searcher whose proposals come from an Optuna sampler (module docstring).

    Parameters (after the base class's ``space, seed, objectives``)
    ----------
    storage: an Optuna storage or URL (default: in memory).
    study_name: the study to create or load in ``storage``.
    budget: hard ceilings checked before evaluation (rejected proposals).
    sampler_options: keyword arguments for the sampler (``n_startup_trials``, ``cp``...).
    pruner: an Optuna pruner (evaluators report intermediate values to it).
    max_rejections: consecutive rejected proposals before giving up (an impossible budget).
    max_repeats: consecutive repeated architectures skipped before one is returned.
    fallback_after: proposals in a row that were rejected or repeats before a random
        feasible architecture is queued (:meth:`_fall_back`).
    trial_attrs: user attributes set on every trial as soon as it is asked (the worker).
    """

    #: the registered name (in messages and the study's attributes)
    name: ClassVar[str] = ""

    def __init__(self, space: SearchSpace, seed: int = 0,
                 objectives: Sequence[Objective] = DEFAULT_OBJECTIVES, *,
                 storage: str | BaseStorage | None = None, study_name: str | None = None,
                 budget: Budget | None = None, sampler_options: Mapping[str, Any] | None = None,
                 pruner: BasePruner | None = None, max_rejections: int = 1000,
                 max_repeats: int = 100, fallback_after: int = 20,
                 trial_attrs: Mapping[str, Any] | None = None) -> None:
        super().__init__(space, seed, objectives)
        if len(self.objectives) > 1 and not self.multi_objective:
            raise SearcherError(
                f"searcher {self.name!r} is single-objective, but the evaluator has "
                f"{len(self.objectives)} objectives {[o.name for o in self.objectives]}; "
                "scalarise them (e.g. a latency penalty target) or use nsga2, tpe or gp")
        self.bridge = SpaceBridge(space, budget)
        self.sampler_options = dict(sampler_options or {})
        self.pruner = pruner
        self.max_rejections = max_rejections
        self.max_repeats = max_repeats
        self.fallback_after = fallback_after
        self.trial_attrs = dict(trial_attrs or {})
        self._size: int | None = None
        self._live: dict[int, optuna.Trial] = {}  # asked, not yet told: number -> trial
        self.study = self._open_study(storage, study_name)

    # -- the sampler -------------------------------------------------------------
    def make_sampler(self, seed: int) -> BaseSampler:
        """The Optuna sampler of this searcher for ``seed``."""
        factory = self.sampler_factory()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                factory(seed)
        except TypeError as err:  # an unknown option
            raise SearcherError(f"searcher {self.name!r}: bad sampler option "
                                f"({err}); options given: {sorted(self.sampler_options)}"
                                ) from None
        return PerTrialSeed(factory, seed)

    def sampler_factory(self) -> Callable[[int], BaseSampler]:
        raise NotImplementedError

    @property
    def directions(self) -> list[str]:
        return [o.direction for o in self.objectives]

    def _open_study(self, storage: Any, study_name: str | None) -> optuna.Study:
        study = optuna.create_study(storage=storage, study_name=study_name,
                                    directions=self.directions,
                                    sampler=self.make_sampler(self.seed), pruner=self.pruner,
                                    load_if_exists=True)
        found = [d.name.lower() for d in study.directions]
        if found != self.directions:
            raise SearcherError(
                f"study {study.study_name!r} optimises {found}, this search "
                f"{self.directions} ({[o.name for o in self.objectives]}); use another "
                "study name or storage")
        return study

    # -- proposals -----------------------------------------------------------------
    def propose(self) -> tuple[Architecture, dict[str, Any]]:
        rejected = repeated = 0
        while True:
            with _quiet():
                trial = self.study.ask()
            for key, value in self.trial_attrs.items():
                trial.set_user_attr(key, value)
            proposal = self.bridge.propose(self.bridge.suggest(trial))
            # an enqueued trial (a seed, a retry, a fallback) is always evaluated
            system = self.study._storage.get_trial(trial._trial_id).system_attrs
            fixed = "fixed_params" in system or "failed_trial" in system
            if proposal.arch is not None:
                if not proposal.costs:
                    proposal.costs = self.bridge.budget.costs(self.space, proposal.arch)
                trial.set_user_attr("arch_id", proposal.arch.id)
                trial.set_user_attr("arch", dict(proposal.arch))
                trial.set_user_attr("costs", proposal.costs)
            if not proposal.ok:
                rejected += 1
                self._close(trial, "rejected", TrialState.PRUNED, reason=proposal.reason)
                if rejected >= self.max_rejections:
                    raise SearcherError(
                        f"{rejected} proposals in a row were rejected (last: "
                        f"{proposal.reason}); loosen the budget or check the space")
                self._fall_back(rejected + repeated, trial.number)
                continue
            assert proposal.arch is not None  # noqa: S101 (ok proposals have one)
            if not fixed and repeated < self.max_repeats and self._repeat(proposal.arch, trial):
                repeated += 1
                self._close(trial, "repeat", TrialState.FAIL,
                            reason=f"architecture {proposal.arch.id} was proposed before")
                self._fall_back(rejected + repeated, trial.number)
                continue
            self._live[trial.number] = trial
            return proposal.arch, {"trial": trial.number, "params": proposal.params}

    def _fall_back(self, free: int, number: int) -> None:
        """After every ``fallback_after`` proposals in a row that were rejected or repeats,
        queue a random unseen feasible architecture (user attribute ``fallback``).

        GP and NSGA-II learn from complete trials only, so a GP whose optimum lies over
        the budget would propose it again and again; an evaluated feasible point moves
        it. TPE ranks rejected trials low and LaNAS never proposes them, so for them this
        hardly ever happens."""
        if free % self.fallback_after:
            return
        rng = np.random.default_rng([self.seed, number, 1])
        seen = self.evaluated_ids()
        for _ in range(10_000):
            arch = self.space.sample(rng)
            if arch.id in seen:
                continue
            params = self.bridge.params_of(arch)
            if self.bridge.propose(params).ok:
                self.study.enqueue_trial(params, user_attrs={
                    "fallback": f"random, after {free} proposals in a row that were "
                                "rejected or repeats"})
                return

    def _repeat(self, arch: Architecture, trial: optuna.Trial) -> bool:
        """Whether ``arch`` was evaluated or is being evaluated (and the space still has
        architectures nobody asked for)."""
        seen = self.evaluated_ids(exclude=trial.number)
        if self._size is None:
            self._size = self.space.size()
        return arch.id in seen and len(seen) < self._size

    def evaluated_ids(self, exclude: int | None = None) -> set[str]:
        """Arch ids of the study's trials that were or are being evaluated."""
        ids = set()
        for t in self.study.get_trials(deepcopy=False):
            outcome = t.user_attrs.get("outcome")
            if t.number != exclude and "arch_id" in t.user_attrs and (
                    outcome in EVALUATED or (outcome is None and not t.state.is_finished())):
                ids.add(t.user_attrs["arch_id"])
        return ids

    def _close(self, trial: optuna.Trial | int, outcome: str, state: TrialState,
               values: Sequence[float] | None = None, **attrs: Any) -> None:
        live = self._trial(trial) if isinstance(trial, int) else trial
        for key, value in {"outcome": outcome, **attrs}.items():
            if value is not None:
                live.set_user_attr(key, value)
        with _quiet():
            self.study.tell(live, values, state=state if values is None else None)
        self._live.pop(live.number, None)

    def _trial(self, number: int) -> optuna.Trial:
        """The live trial ``number`` (one asked here; or, after a state was loaded, made
        once from the storage)."""
        if number not in self._live:
            storage = self.study._storage
            trial_id = storage.get_trial_id_from_study_id_trial_number(self.study._study_id,
                                                                       number)
            self._live[number] = optuna.Trial(self.study, trial_id)
        return self._live[number]

    def trial_number(self, candidate: Any) -> int:
        return int(candidate.params["trial"])

    def set_trial_attr(self, candidate: Any, key: str, value: Any) -> None:
        """Set a user attribute of a candidate's (running) trial."""
        self._trial(self.trial_number(candidate)).set_user_attr(key, value)

    def evaluation_trial(self, candidate: Any) -> Trial:
        """The trial to pass to the evaluator for ``candidate`` (reports reach the pruner
        in single-objective studies)."""
        return _EvaluationTrial(self._trial(self.trial_number(candidate)),
                                prune=len(self.objectives) == 1)

    def observe(self, candidate: Any, result: EvalResult) -> None:
        number = self.trial_number(candidate)
        attrs = {"metrics": result.metrics or None, "reason": result.reason,
                 "seconds": round(result.seconds, 3), "intermediate": result.intermediate or None}
        if result.costs:  # the counted costs, and what the evaluation measured
            counted = self.study._storage.get_trial(
                self._trial(number)._trial_id).user_attrs.get("costs") or {}
            attrs["costs"] = {**counted, **result.costs}
        if result.ok:
            self._close(number, "complete", TrialState.COMPLETE, list(result.values), **attrs)
        else:
            state = TrialState.PRUNED if result.status.value == "pruned" else TrialState.FAIL
            self._close(number, result.status.value, state, **attrs)

    def withdraw(self, candidate: Any, outcome: str, reason: str) -> None:
        """Give up an asked candidate without evaluating it (its trial is failed with
        ``outcome``, which no sampler learns from and no count includes)."""
        if self.pending.pop(candidate.id, None) is None:
            raise SearcherError(f"candidate {candidate.id} is not pending; withdraw only "
                                "what ask() returned and was not told")
        self._close(self.trial_number(candidate), outcome, TrialState.FAIL, reason=reason)

    # -- seeds -----------------------------------------------------------------------
    def enqueue(self, arch: Mapping[str, Any], tag: str) -> None:
        """Queue ``arch`` as the next trial (a seed architecture: the space default, the
        largest, a published one), marked with user attribute ``seed = tag``."""
        self.study.enqueue_trial(self.bridge.params_of(arch), user_attrs={"seed": tag},
                                 skip_if_exists=True)

    # -- state (in-memory studies) ----------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        # the study's system attributes hold samplers' caches (NSGA-II's parent
        # populations, fixed when first computed): a restored study needs them as they were
        system = self.study._storage.get_study_system_attrs(self.study._study_id)
        return {"seed": self.seed, "trials": [_trial_to_json(t) for t in self.study.trials],
                "study_system_attrs": system}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:
        try:
            self.seed = int(state["seed"])
            trials = [_trial_from_json(t) for t in state["trials"]]
            system = dict(state.get("study_system_attrs", {}))
        except (KeyError, TypeError, ValueError) as err:
            raise SearcherError(f"searcher state is malformed ({type(err).__name__}: "
                                f"{err}); pass what state_dict() returned") from None
        self.study = optuna.create_study(directions=self.directions,
                                         sampler=self.make_sampler(self.seed),
                                         pruner=self.pruner)
        for key, value in system.items():
            self.study._storage.set_study_system_attr(self.study._study_id, key, value)
        self.study.add_trials(trials)
        self._live = {}


def _trial_to_json(t: FrozenTrial) -> dict[str, Any]:
    return {"state": t.state.name, "values": t.values,
            "params": t.params,
            "distributions": {k: distribution_to_json(d) for k, d in t.distributions.items()},
            "user_attrs": t.user_attrs, "system_attrs": t.system_attrs,
            "intermediate_values": {str(k): v for k, v in t.intermediate_values.items()},
            "datetime_start": t.datetime_start and t.datetime_start.isoformat(),
            "datetime_complete": t.datetime_complete and t.datetime_complete.isoformat()}


def _trial_from_json(data: Mapping[str, Any]) -> FrozenTrial:
    def when(text: str | None) -> datetime | None:
        return None if text is None else datetime.fromisoformat(text)

    state = TrialState[data["state"]]
    values = data["values"]
    return FrozenTrial(
        number=0, trial_id=0, state=state, value=None, values=values,
        datetime_start=when(data["datetime_start"]),
        datetime_complete=when(data["datetime_complete"]), params=dict(data["params"]),
        distributions={k: json_to_distribution(v) for k, v in data["distributions"].items()},
        user_attrs=dict(data["user_attrs"]), system_attrs=dict(data["system_attrs"]),
        intermediate_values={int(k): v for k, v in data["intermediate_values"].items()})


# ---------------------------------------------------------------------------
# the searchers
# ---------------------------------------------------------------------------


@SEARCHERS.register("random")
class RandomSearcher(OptunaSearcher):
    """Uniform random architectures (Optuna's ``RandomSampler``), the baseline every
    searcher must beat (SPEC §2's random baseline; Li & Talwalkar, 2019). Repeats are
    skipped while the space has unseen architectures."""

    name = "random"

    def sampler_factory(self) -> Callable[[int], BaseSampler]:
        return lambda seed: optuna.samplers.RandomSampler(seed=seed, **self.sampler_options)


@SEARCHERS.register("tpe")
class TPESearcher(OptunaSearcher):
    """Multivariate TPE (``TPESampler(multivariate=True)``), with the constant liar so
    that parallel workers spread out; single- or multi-objective."""

    name = "tpe"

    def sampler_factory(self) -> Callable[[int], BaseSampler]:
        options = {"multivariate": True, "constant_liar": True, **self.sampler_options}
        return lambda seed: optuna.samplers.TPESampler(seed=seed, **options)


@SEARCHERS.register("nsga2")
class NSGA2Searcher(OptunaSearcher):
    """NSGA-II (``NSGAIISampler``): a genetic multi-objective search (Deb et al., 2002)."""

    name = "nsga2"

    def sampler_factory(self) -> Callable[[int], BaseSampler]:
        return lambda seed: optuna.samplers.NSGAIISampler(seed=seed, **self.sampler_options)


@SEARCHERS.register("gp")
class GPSearcher(OptunaSearcher):
    """Gaussian-process Bayesian optimisation (``GPSampler``: log EI, or log EHVI with
    several objectives)."""

    name = "gp"

    def sampler_factory(self) -> Callable[[int], BaseSampler]:
        return lambda seed: optuna.samplers.GPSampler(seed=seed, **self.sampler_options)


@SEARCHERS.register("lanas")
class LaNASSearcher(OptunaSearcher):
    """LaNAS (:class:`searchers.lanas.LaNASSampler`) over the space's encoding, with the
    budget as its rejection-sampling constraint; single-objective (scalarise several
    objectives, e.g. accuracy with a latency penalty)."""

    name = "lanas"

    multi_objective = False

    def make_sampler(self, seed: int) -> BaseSampler:
        constraint = self.bridge.feasible if self.bridge.budget.active else None
        try:
            return LaNASSampler(search_space=self.bridge.distributions,
                                encodings=self.bridge.encoding_tables(), constraint=constraint,
                                seed=seed, **self.sampler_options)
        except TypeError as err:
            raise SearcherError(f"searcher 'lanas': bad sampler option ({err}); options "
                                f"given: {sorted(self.sampler_options)}") from None

