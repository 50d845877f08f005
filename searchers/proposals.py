"""Asking an Optuna study for architectures and telling it their results (see
docs/reference.md#optuna): :class:`StudySearch`, whose only state is the study.

A multi-trial searcher (:mod:`searchers.optuna_searchers`) is the study's sampler;
:class:`StudySearch` turns each asked trial's parameters into an architecture through the
:class:`~searchers.optuna_bridge.SpaceBridge` and tells the study what became of it.
What a trial of the study can be (user attribute ``outcome``):

* ``rejected`` — the parameters give an invalid architecture, or, for a sampler that
  cannot learn from constraints (random, LaNAS), one over a constraint (the reason is in
  ``reason``); told as *pruned* and asked again. It costs no evaluation and does not
  count as a trial of the search;
* ``infeasible`` — for a constraint-aware sampler (TPE, NSGA-II, GP: Optuna's
  ``constraints_func``), a valid architecture over a constraint. It is not trained: its
  costs are counted (or predicted) from the graph, and the trial is told *complete* with
  placeholder values (:meth:`StudySearch.placeholder`), the amounts over each limit
  (``violations``) and its constraint values (``constraints``, ``cost / limit − 1``), so
  that the sampler ranks it below every feasible trial. Pruning it instead would bias TPE
  toward the smallest models. It does not count as a trial of the search, is
  never a best trial or on the front (Optuna leaves infeasible trials out), and is asked
  again;
* ``repeat`` — the architecture was evaluated (or is being evaluated) already; told as
  *failed*, which every sampler ignores, and asked again (up to ``max_repeats`` times,
  then the repeat is returned: once the space is exhausted, repeats are allowed);
* ``complete``, ``pruned``, ``failed`` — an evaluation's result;
* ``surplus`` — asked by a worker after the study had its trials (:meth:`StudySearch.
  withdraw`); a trial whose worker died is failed with no outcome and queued again
  (:mod:`searchers.storage`); :meth:`StudySearch.ask` runs that retry before anything
  queued behind the failed trial, and it is seeded as the failed trial was, so a resumed
  study proposes what the uninterrupted one did (:mod:`searchers.resume`).

Every proposal records ``arch_id``, ``arch`` (the choices as JSON) and ``costs``
(parameters and FLOPs counted from the graph, the predicted latency with a latency
constraint) as user attributes, and, under a budget, its ``constraints``. The best trial and the
Pareto front are Optuna's (``study.best_trial``, ``study.best_trials``): only complete
evaluations are COMPLETE trials.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna
from optuna.trial import FrozenTrial, TrialState

from evaluators.base import EvalResult, Objective, OptunaTrial, Trial, check_objectives
from nas.architecture import Architecture
from searchers.base import (
    DEFAULT_OBJECTIVES,
    SEARCHERS,
    Candidate,
    MultiTrialSearcher,
    SearcherError,
    searcher_names,
)
from searchers.optuna_bridge import Budget, Proposal, SpaceBridge
from searchers.resume import given_architecture, next_waiting, proposal_index
from searchers.storage import live_trial, propose_once, start_trial, system_attrs

if TYPE_CHECKING:
    from optuna.pruners import BasePruner
    from optuna.storages import BaseStorage

    from nas.space import SearchSpace

#: Trial outcomes that stand for an evaluation (finished or running).
EVALUATED = ("complete", "pruned", "failed")


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Ask/tell with an RDB heartbeat is what the study loop does on purpose (it records
    the heartbeat itself, :func:`searchers.storage.heartbeat`); Optuna warns about it on
    every call."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Heartbeat of storage is supposed to be used")
        yield


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


def evaluations(study: optuna.Study) -> int:
    """Evaluations in the study: finished ones and those running now (rejected and
    repeated proposals, and the trials of dead workers, do not count)."""
    count = 0
    for t in study.get_trials(deepcopy=False):
        outcome = t.user_attrs.get("outcome")
        if outcome in EVALUATED or (t.state == TrialState.RUNNING
                                    and t.user_attrs.get("evaluating")):
            count += 1
    return count


def evaluated_ids(trials: Sequence[FrozenTrial], exclude: int | None = None) -> set[str]:
    """Arch ids of ``trials`` that were or are being evaluated (but trial ``exclude``)."""
    ids = set()
    for t in trials:
        outcome = t.user_attrs.get("outcome")
        if t.number != exclude and "arch_id" in t.user_attrs and (
                outcome in EVALUATED or (outcome is None and not t.state.is_finished())):
            ids.add(t.user_attrs["arch_id"])
    return ids


def unanswered(trials: Sequence[FrozenTrial]) -> tuple[int, int]:
    """The proposals in a row that end the study, since its last evaluation: how many were
    rejected or infeasible, and how many were repeats (what :meth:`StudySearch.ask`
    counts towards a fallback and its limits). Read from the study, not counted per
    call, so that an ask killed after some of them goes on counting where it stopped.
    A running trial (a candidate asked and not told yet, or another worker's) ends the
    run as an evaluation does; queued trials and killed ones (failed with no outcome)
    are passed over."""
    rejected = repeated = 0
    for t in sorted(trials, key=lambda t: t.number, reverse=True):
        if t.state == TrialState.RUNNING:
            break
        outcome = t.user_attrs.get("outcome")
        if t.state == TrialState.WAITING or outcome is None:
            continue
        if outcome in ("rejected", "infeasible"):
            rejected += 1
        elif outcome == "repeat":
            repeated += 1
        else:
            break
    return rejected, repeated


def claims_before(study: optuna.Study, number: int) -> int:
    """Evaluations that trials numbered below ``number`` have finished or may still be
    doing (RUNNING ones, evaluating or still being proposed). Trial numbers come from
    the storage, so of two workers racing for the last evaluation the lower number wins
    and the other withdraws: a study never runs more than ``n_trials``."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.number < number and (
        t.user_attrs.get("outcome") in EVALUATED or t.state == TrialState.RUNNING))


class StudySearch:
    """Ask/tell over an Optuna study whose sampler a multi-trial searcher built (module
    docstring). Build one with :meth:`open`; several processes may each open one on the
    same stored study.

    Parameters
    ----------
    study: the study (in memory or in a storage shared by several processes).
    bridge: the space's parameters and the hard budget.
    objectives: what the evaluations return (the study's directions).
    seed: the search's seed (the fallback architectures' generator).
    max_rejections: consecutive rejected or infeasible proposals before giving up (an
        impossible budget).
    max_repeats: consecutive repeated architectures skipped before one is returned.
    fallback_after: proposals in a row that were rejected or repeats before a random
        feasible architecture is queued (:meth:`_fall_back`).
    trial_attrs: user attributes set on every trial as soon as it is asked (the worker).
    record_infeasible: tell infeasible proposals as complete ``infeasible`` trials (a
        constraint-aware sampler, :attr:`MultiTrialSearcher.constraint_aware`) instead of
        rejecting them.
    """

    def __init__(self, study: optuna.Study, bridge: SpaceBridge,
                 objectives: Sequence[Objective] = DEFAULT_OBJECTIVES, *, seed: int = 0,
                 max_rejections: int = 1000, max_repeats: int = 100, fallback_after: int = 20,
                 trial_attrs: Mapping[str, Any] | None = None,
                 record_infeasible: bool = False) -> None:
        self.study = study
        self.record_infeasible = record_infeasible
        self.bridge = bridge
        self.space = bridge.space
        self.objectives = check_objectives(objectives, "study search")
        self.seed = seed
        self.max_rejections = max_rejections
        self.max_repeats = max_repeats
        self.fallback_after = fallback_after
        self.trial_attrs = dict(trial_attrs or {})
        self._size: int | None = None
        #: handles of the trials this process asked and has not told (not a trial store:
        #: the trials live in the study; a handle saves rebuilding an optuna.Trial)
        self._live: dict[int, optuna.Trial] = {}

    @classmethod
    def open(cls, space: SearchSpace, searcher: str | MultiTrialSearcher = "random", *,
             seed: int = 0, objectives: Sequence[Objective] = DEFAULT_OBJECTIVES,
             storage: str | BaseStorage | None = None, study_name: str | None = None,
             budget: Budget | None = None, sampler_options: Mapping[str, Any] | None = None,
             pruner: BasePruner | None = None, **limits: Any) -> StudySearch:
        """Create or load the study (``storage``: default in memory) with the sampler of
        ``searcher`` (a registered name, built with ``sampler_options``, or a built one)
        and return the search on it. ``limits``: the constructor's keyword arguments."""
        factory = _searcher(searcher, sampler_options)
        objectives = check_objectives(objectives, factory.name or type(factory).__name__)
        if len(objectives) > 1 and not factory.multi_objective:
            raise SearcherError(
                f"searcher {factory.name!r} is single-objective, but the evaluator has "
                f"{len(objectives)} objectives {[o.name for o in objectives]}; scalarise "
                "them (e.g. a latency penalty target) or use lamoo, nsga2, tpe or gp")
        bridge = SpaceBridge(space, budget)
        directions = [o.direction for o in objectives]
        study = optuna.create_study(storage=storage, study_name=study_name,
                                    directions=directions,
                                    sampler=factory.sampler(seed, bridge), pruner=pruner,
                                    load_if_exists=True)
        found = [d.name.lower() for d in study.directions]
        if found != directions:
            raise SearcherError(
                f"study {study.study_name!r} optimises {found}, this search {directions} "
                f"({[o.name for o in objectives]}); use another study name or storage")
        limits.setdefault("record_infeasible",
                          factory.constraint_aware and bridge.budget.active)
        return cls(study, bridge, objectives, seed=seed, **limits)

    # -- asking ------------------------------------------------------------------
    def ask(self) -> Candidate:
        """The next architecture to evaluate, as a candidate whose id is its trial's
        number (rejected and repeated proposals are recorded and asked again)."""
        rejected, repeated = unanswered(self.study.get_trials(deepcopy=False))
        while True:
            trial = self._next_trial()
            # a queued architecture (a seed, a fallback) is always evaluated
            fixed = given_architecture(system_attrs(trial), trial.params)
            # a tabular benchmark maps a proposal to its nearest unevaluated recorded row
            taken = self.evaluated_ids(exclude=trial.number) if self.bridge.pool else ()
            proposal = self.bridge.propose(propose_once(trial, self.bridge.suggest), taken)
            if proposal.mapped_from is not None:
                trial.set_user_attr("proposed", dict(proposal.mapped_from))
            if proposal.arch is not None:
                if not proposal.costs:
                    proposal.costs = self.bridge.budget.costs(self.space, proposal.arch)
                trial.set_user_attr("arch_id", proposal.arch.id)
                trial.set_user_attr("arch", dict(proposal.arch))
                trial.set_user_attr("costs", proposal.costs)
                if proposal.constraints:  # what the constraints_func reads
                    trial.set_user_attr("constraints", proposal.constraints)
            if proposal.infeasible and self.record_infeasible:
                rejected += 1
                self._close(trial, "infeasible", TrialState.COMPLETE,
                            self.placeholder(proposal), reason=proposal.reason,
                            violations=proposal.violations)
            elif not proposal.ok:
                rejected += 1
                self._close(trial, "rejected", TrialState.PRUNED, reason=proposal.reason)
            if not proposal.ok:
                if rejected >= self.max_rejections:
                    raise SearcherError(
                        f"{rejected} proposals in a row were rejected or infeasible (last: "
                        f"{proposal.reason}); loosen the budget or check the space")
                self._fall_back(rejected + repeated, trial)
                continue
            assert proposal.arch is not None  # noqa: S101 (ok proposals have one)
            if not fixed and repeated < self.max_repeats and self._repeat(proposal.arch, trial):
                repeated += 1
                self._close(trial, "repeat", TrialState.FAIL,
                            reason=f"architecture {proposal.arch.id} was proposed before")
                self._fall_back(rejected + repeated, trial)
                continue
            self._live[trial.number] = trial
            return Candidate(trial.number, proposal.arch, dict(proposal.params))

    def placeholder(self, proposal: Proposal) -> list[float]:
        """The values an ``infeasible`` trial is told, one per objective: a cost objective
        takes the proposal's own cost (``params``, ``flops`` counted from the graph;
        ``latency_ms`` when a latency constraint predicted it), any other the worst
        value of that objective among the study's complete evaluations so far (0.0
        before the first). The constraint-aware samplers rank the trial by its constraint
        values, below every feasible trial, whatever these are; they are what GP's
        regression and the history see, and the worst value keeps them from looking good
        there. A function of the study's contents, so a resumed search tells the same."""
        done = [t.values for t in self.study.get_trials(deepcopy=False,
                                                        states=(TrialState.COMPLETE,))
                if t.user_attrs.get("outcome") == "complete"]
        values = []
        for k, objective in enumerate(self.objectives):
            key = "latency_ms_predicted" if objective.name == "latency_ms" else objective.name
            cost = proposal.costs.get(key) if key in ("params", "flops",
                                                      "latency_ms_predicted") else None
            if cost is not None:
                values.append(float(cost))
            elif done:
                values.append(float(min(objective.sign * v[k] for v in done) * objective.sign))
            else:
                values.append(0.0)
        return values

    def _next_trial(self) -> optuna.Trial:
        """The next trial, the worker named on it from the start: a queued retry that comes
        first in the uninterrupted sequence (:func:`searchers.resume.next_waiting`), else
        Optuna's (the first queued trial, or a new one)."""
        retry = next_waiting(self.study.get_trials(deepcopy=False))
        return start_trial(self.study, self.trial_attrs,
                           None if retry is None else retry.number)

    def _fall_back(self, free: int, trial: optuna.Trial) -> None:
        """After every ``fallback_after`` proposals in a row that were rejected or repeats,
        queue a random unseen feasible architecture (user attribute ``fallback``).

        GP and NSGA-II learn from complete trials only, so a GP whose optimum lies over
        the budget would propose it again and again; an evaluated feasible point moves
        it. TPE ranks rejected trials low and LaNAS never proposes them, so for them this
        hardly ever happens."""
        if free % self.fallback_after:
            return
        # seeded by the proposal index, not the trial number: the same after a resume
        index = proposal_index(self.study.get_trials(deepcopy=False), trial.number,
                               system_attrs(trial))
        rng = np.random.default_rng([self.seed, index, 1])
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
        return evaluated_ids(self.study.get_trials(deepcopy=False), exclude)

    def enqueue(self, arch: Mapping[str, Any], tag: str) -> None:
        """Queue ``arch`` as the next trial (a seed architecture: the space default, the
        largest, a published one), marked with user attribute ``seed = tag``."""
        self.study.enqueue_trial(self.bridge.params_of(arch), user_attrs={"seed": tag},
                                 skip_if_exists=True)

    # -- the asked trial -------------------------------------------------------------
    def _trial(self, number: int) -> optuna.Trial:
        """The live trial ``number`` (one asked here, or a handle made from the storage)."""
        if number not in self._live:
            self._live[number] = live_trial(self.study, number)
        return self._live[number]

    def set_trial_attr(self, candidate: Candidate, key: str, value: Any) -> None:
        """Set a user attribute of a candidate's (running) trial."""
        self._trial(candidate.id).set_user_attr(key, value)

    def evaluation_trial(self, candidate: Candidate) -> Trial:
        """The trial to pass to the evaluator for ``candidate`` (reports reach the pruner
        in single-objective studies)."""
        return _EvaluationTrial(self._trial(candidate.id), prune=len(self.objectives) == 1)

    # -- telling ---------------------------------------------------------------------
    def _asked(self, candidate: Candidate) -> FrozenTrial:
        """The running trial of ``candidate`` (one-line errors for anything else)."""
        found = next((t for t in self.study.get_trials(deepcopy=False)
                      if t.number == candidate.id), None)
        if found is None or "arch_id" not in found.user_attrs:
            raise SearcherError(f"candidate {candidate.id} was not asked of this study; "
                                "tell only candidates that ask() returned")
        if found.state.is_finished():
            raise SearcherError(f"candidate {candidate.id} was already told (its trial is "
                                f"{found.state.name.lower()}); tell each candidate once")
        if found.user_attrs["arch_id"] != candidate.arch.id:
            raise SearcherError(f"candidate {candidate.id}: the architecture differs from "
                                "the one asked; tell the candidate ask() returned")
        return found

    def tell(self, candidate: Candidate, result: EvalResult) -> None:
        """Tell the study ``result`` for an asked candidate (complete, failed or pruned),
        with its metrics, costs, reason, seconds and intermediate values."""
        if not isinstance(result, EvalResult):
            raise SearcherError(f"tell() takes an EvalResult, got {type(result).__name__}")
        asked = self._asked(candidate)
        if result.ok and len(result.values) != len(self.objectives):
            raise SearcherError(
                f"candidate {candidate.id}: {len(result.values)} value(s) told for the "
                f"objectives {[o.name for o in self.objectives]}; open the search with the "
                "evaluator's objectives")
        attrs: dict[str, Any] = {"metrics": result.metrics or None, "reason": result.reason,
                 "seconds": round(result.seconds, 3), "intermediate": result.intermediate or None}
        if result.costs:  # the counted costs, and what the evaluation measured
            attrs["costs"] = {**(asked.user_attrs.get("costs") or {}), **result.costs}
        if result.ok:
            self._close(candidate.id, "complete", TrialState.COMPLETE, list(result.values),
                        **attrs)
        else:
            state = TrialState.PRUNED if result.status.value == "pruned" else TrialState.FAIL
            self._close(candidate.id, result.status.value, state, **attrs)

    def withdraw(self, candidate: Candidate, outcome: str, reason: str) -> None:
        """Give up an asked candidate without evaluating it (its trial is failed with
        ``outcome``, which no sampler learns from and no count includes)."""
        self._asked(candidate)
        self._close(candidate.id, outcome, TrialState.FAIL, reason=reason)

    def _close(self, trial: optuna.Trial | int, outcome: str, state: TrialState,
               values: Sequence[float] | None = None, **attrs: Any) -> None:
        live = self._trial(trial) if isinstance(trial, int) else trial
        for key, value in {"outcome": outcome, **attrs}.items():
            if value is not None:
                live.set_user_attr(key, value)
        with _quiet():
            self.study.tell(live, values, state=state if values is None else None)
        self._live.pop(live.number, None)


def _searcher(searcher: str | MultiTrialSearcher,
              options: Mapping[str, Any] | None) -> MultiTrialSearcher:
    """The sampler factory: a built one, or the registered ``searcher`` with ``options``."""
    if isinstance(searcher, MultiTrialSearcher):
        return searcher
    cls = SEARCHERS.get(searcher)
    if not (isinstance(cls, type) and issubclass(cls, MultiTrialSearcher)):
        raise SearcherError(f"searcher {searcher!r} is not a multi-trial searcher; use one of "
                            f"{', '.join(searcher_names('multi-trial'))}")
    return cls(**dict(options or {}))
