"""The space ↔ Optuna bridge over every registered space, and the study search's
bookkeeping: user attributes, rejections, repeats, fallbacks, and a search reopened on
its stored study that continues exactly as the uninterrupted one past the samplers'
start-up phase."""

from __future__ import annotations

import json

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution

from evaluators.base import EvalResult, Objective
from nas.errors import NasError
from nas.space import Constraint, SearchSpace, get_space, list_spaces, small_config
from searchers.optuna_bridge import Budget, SpaceBridge
from searchers.proposals import StudySearch

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.mark.parametrize("name", list_spaces())
def test_every_space_becomes_optuna_parameters_and_back(name):
    space = get_space(name, **small_config(name))
    bridge = SpaceBridge(space)
    covered = [c.name for p in bridge.params for c in p.choices]
    assert sorted(covered) == sorted(c.name for c in space.choices())  # each choice once
    assert sum(t.shape[1] for t in bridge.encoding_tables().values()) + sum(
        isinstance(p.distribution, IntDistribution) for p in bridge.params) == \
        space.encoded_width
    for seed in range(5):
        arch = space.sample(seed)
        params = bridge.params_of(arch)
        for p in bridge.params:  # every value lies in its distribution
            d = p.distribution
            assert d._contains(d.to_internal_repr(params[p.name]))
        assert bridge.architecture(params) == arch
        json.dumps(params)
    if space.is_fixed:
        assert bridge.distributions == {} and bridge.architecture({}) == space.default()


def constrained_space():
    """AdaBERT's small space with a rule tying two of its op choices: they must differ
    (no registered space has a constraint since EfficientBERT's expressions became one
    categorical of valid expressions)."""
    base = get_space("adabert", **small_config("adabert"))
    a, b = [c.name for c in base.choices() if c.kind == "op"][:2]

    def differ(values):
        if values[a] == values[b]:
            return f"{a} and {b} are both {values[a]!r}; choose different ops"
        return None

    rule = Constraint((a, b), differ, f"{a} differs from {b}")
    space = SearchSpace(base.name, base.choices(), base.graph, constraints=[rule],
                        config=base.config)
    return space, a, b


def test_constraint_tied_choices_become_one_parameter_of_valid_combinations():
    space, a, b = constrained_space()
    bridge = SpaceBridge(space)
    joint = bridge._by_name[f"{a}+{b}"]
    n = len(space.choice(a))
    assert isinstance(joint.distribution, CategoricalDistribution)
    assert len(joint.distribution.choices) == n * (n - 1)  # every pair of different ops
    assert '["skip","zero"]' in joint.distribution.choices
    assert '["skip","skip"]' not in joint.distribution.choices  # equal: invalid
    assert isinstance(bridge._by_name["depth"].distribution, IntDistribution)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(30):  # a sampler cannot propose an invalid architecture
        assert bridge.propose(bridge.suggest(study.ask())).ok


def test_an_expression_choice_is_one_categorical_with_its_slot_encoding():
    space = get_space("efficientbert", **small_config("efficientbert"))
    bridge = SpaceBridge(space)
    expr = bridge._by_name["L0.expr"]
    choice = space.choice("L0.expr")
    assert isinstance(expr.distribution, CategoricalDistribution)
    assert len(expr.distribution.choices) == len(choice)
    table = bridge.encoding_tables()["L0.expr"]  # what LaNAS's classifiers see
    assert table.shape == (len(choice), choice.encoded_width) and table.shape[1] < 200
    assert len({tuple(row) for row in table}) == len(choice)  # tells every value apart


def test_invalid_or_over_budget_proposals_are_reported_never_repaired():
    space = get_space("efficientbert", **small_config("efficientbert"))
    bridge = SpaceBridge(space)
    params = bridge.params_of(space.default())
    params["L0.expr"] = "linear2(gelu(linear1(add(x, x))))"  # x + x: not a value
    proposal = bridge.propose(params)
    assert not proposal.ok and proposal.arch is None
    assert proposal.reason.startswith("invalid architecture:") and "L0.expr" in \
        proposal.reason and "identical arguments" in proposal.reason
    assert proposal.params["L0.expr"] == "linear2(gelu(linear1(add(x, x))))"  # as proposed

    tied, a, b = constrained_space()
    separate = SpaceBridge(tied, max_joint=1)  # tied choices as separate parameters
    params = separate.params_of(tied.sample(0))
    params[b] = params[a]
    proposal = separate.propose(params)
    assert not proposal.ok and proposal.arch is None
    assert proposal.reason.startswith("invalid architecture:") and b in proposal.reason
    assert proposal.params[b] == params[a]  # kept as proposed

    budget = Budget(max_params=1000, seq_len=16)
    bridge = SpaceBridge(space, budget)
    proposal = bridge.propose(bridge.params_of(space.default()))
    assert not proposal.ok and proposal.arch == space.default()
    assert proposal.reason == f"over budget: params {proposal.costs['params']:g} > " \
                              "max_params 1000"
    with pytest.raises(NasError, match="max_params must be positive"):
        Budget(max_params=0)


def test_every_proposal_records_its_architecture_and_costs():
    space = get_space("adabert", **small_config("adabert"))
    search = StudySearch.open(space, "tpe", seed=0)
    candidate = search.ask()
    attrs = search.study.trials[candidate.id].user_attrs
    assert attrs["arch_id"] == candidate.arch.id and attrs["arch"] == dict(candidate.arch)
    assert attrs["costs"]["params"] > 0 and attrs["costs"]["seq_len"] == 128
    search.tell(candidate, EvalResult((0.5,), metrics={"acc": 0.5},
                                      costs={"latency_ms": 1.0}))
    attrs = search.study.trials[candidate.id].user_attrs
    assert attrs["outcome"] == "complete" and attrs["metrics"] == {"acc": 0.5}
    assert attrs["costs"]["latency_ms"] == 1.0 and attrs["costs"]["params"] > 0


def test_rejected_proposals_are_recorded_and_asked_again():
    space = get_space("adabert", **small_config("adabert"))
    from nas.cost import count_costs

    limit = count_costs(space, space.default(), 128).params
    search = StudySearch.open(space, "random", seed=0, budget=Budget(max_params=limit))
    candidates = [search.ask() for _ in range(5)]
    assert all(count_costs(space, c.arch, 128).params <= limit for c in candidates)
    rejected = [t for t in search.study.trials if t.user_attrs.get("outcome") == "rejected"]
    assert rejected and all(t.state.name == "PRUNED" for t in rejected)
    impossible = StudySearch.open(space, "random", seed=0, budget=Budget(max_params=10),
                                  max_rejections=5)
    with pytest.raises(NasError, match="5 proposals in a row were rejected.*over budget"):
        impossible.ask()


def test_a_constraint_aware_sampler_learns_from_infeasible_trials_it_never_trains():
    """TPE gets the budget as Optuna's constraints_func. An architecture over it
    is told as a complete ``infeasible`` trial (placeholder values, the violation amounts,
    its constraint values as Optuna's), never a best one; random search rejects it."""
    from nas.cost import count_costs

    space = get_space("adabert", **small_config("adabert"))
    limit = 0.8 * count_costs(space, space.default(), 128).params
    objectives = (Objective("accuracy", "maximize"), Objective("params", "minimize"))
    search = StudySearch.open(space, "tpe", seed=0, budget=Budget(max_params=limit),
                              objectives=objectives, sampler_options={"n_startup_trials": 2})
    assert search.record_infeasible
    for k in range(6):
        c = search.ask()
        search.tell(c, EvalResult((0.5 + 0.01 * k, float(search.study.trials[c.id].user_attrs[
            "costs"]["params"]))))
    trials = search.study.trials
    infeasible = [t for t in trials if t.user_attrs.get("outcome") == "infeasible"]
    complete = [t for t in trials if t.user_attrs.get("outcome") == "complete"]
    assert infeasible and len(complete) == 6
    for t in infeasible:
        params = t.user_attrs["costs"]["params"]
        assert t.state.name == "COMPLETE" and params > limit
        assert t.user_attrs["violations"] == {"params": pytest.approx(params - limit)}
        assert t.constraints == {"0": pytest.approx(params / limit - 1)}  # Optuna's record
        assert t.values[1] == params  # a cost objective's placeholder is the counted cost
        before = [c.values[0] for c in complete if c.number < t.number]
        assert t.values[0] == (min(before) if before else 0.0)  # the worst accuracy so far
    assert all(next(iter(t.constraints.values())) <= 0 for t in complete)
    front = {t.number for t in search.study.best_trials}
    assert front and not front & {t.number for t in infeasible}

    rejecting = StudySearch.open(space, "random", seed=0, budget=Budget(max_params=limit))
    assert not rejecting.record_infeasible
    for _ in range(4):
        c = rejecting.ask()
        rejecting.tell(c, EvalResult((0.5,)))
    outcomes = {t.user_attrs.get("outcome") for t in rejecting.study.trials}
    assert "infeasible" not in outcomes and not any(t.constraints
                                                    for t in rejecting.study.trials)


OPTIONS = {"tpe": {"n_startup_trials": 3}, "gp": {"n_startup_trials": 3},
           "nsga2": {"population_size": 4},
           "lanas": {"n_startup_trials": 3, "rebuild_every": 2, "leaf_size": 2},
           "lamoo": {"n_startup_trials": 3, "rebuild_every": 2, "leaf_size": 2},
           "random": {}, "wl-bo": {"n_startup_trials": 3}, "local-search": {},
           "regularized-evolution": {"population_size": 3, "sample_size": 2}}


# GP's reopened search runs in the slow suite (its ask is the slowest, ~2 s here)
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n for n in sorted(OPTIONS)])
def test_a_reopened_search_continues_like_the_uninterrupted_one(name):
    """Beyond the start-up phase, so the samplers' models are in play: a new search on
    the stored study (new samplers, as after a restart) needs nothing but the study."""
    space = get_space("adabert", **small_config("adabert"))
    objectives = (Objective("score", "maximize"),)

    def make(seed, storage=None):
        return StudySearch.open(space, name, seed=seed, objectives=objectives,
                                sampler_options=OPTIONS[name], storage=storage,
                                study_name=None if storage is None else "s")

    def score(arch):
        return float(sum(space.encode(arch)[:12]) + arch["depth"])

    def step(search):
        c = search.ask()
        search.tell(c, EvalResult((score(c.arch),)))

    straight = make(7)
    for _ in range(10):
        step(straight)
    storage = optuna.storages.InMemoryStorage()
    first = make(7, storage)
    for _ in range(6):
        step(first)
    reopened = make(7, storage)
    for _ in range(4):
        step(reopened)
    assert [t.params for t in reopened.study.trials] == [t.params for t in straight.study.trials]
    assert [t.user_attrs.get("arch_id") for t in reopened.study.trials] == [
        t.user_attrs.get("arch_id") for t in straight.study.trials]


def _stuck_over_the_budget():
    """``(space, params limit, searcher)``: a searcher that always proposes AdaBERT's
    largest cell, over a limit the default cell meets (the fallback tests' stuck GP)."""
    from nas.cost import count_costs
    from searchers.optuna_searchers import PerTrialSearcher

    space = get_space("adabert", **small_config("adabert"))
    big = space.default().replace(depth=4, **{c.name: "std_conv_7" for c in space.choices()
                                              if c.name != "depth"})
    limit = count_costs(space, space.default(), 128).params

    class Stuck(PerTrialSearcher):
        name = "stuck"

        def build(self, seed, bridge):
            return optuna.samplers.PartialFixedSampler(
                bridge.params_of(big), optuna.samplers.RandomSampler(seed=seed))

    return space, limit, Stuck()


def test_a_sampler_stuck_over_the_budget_gets_a_random_feasible_architecture():
    """GP learns from complete trials only: one whose optimum lies over the budget would
    propose it forever. After ``fallback_after`` rejections in a row, a random feasible
    architecture is queued and evaluated instead."""
    from nas.cost import count_costs

    space, limit, stuck = _stuck_over_the_budget()
    search = StudySearch.open(space, stuck, seed=0, budget=Budget(max_params=limit),
                              fallback_after=5)
    candidate = search.ask()
    trials = search.study.trials
    assert [t.user_attrs["outcome"] for t in trials[:5]] == ["rejected"] * 5
    chosen = trials[candidate.id]
    assert chosen.number == 5 and chosen.user_attrs["fallback"].startswith("random, after 5")
    assert count_costs(space, candidate.arch, 128).params <= limit


def test_a_fallback_counts_the_rejections_before_a_kill():
    """An ask killed after 3 of the 5 rejections in a row that queue a random feasible
    architecture goes on counting on resume: the fallback comes after the same 5, with the
    same architecture, as in the uninterrupted search (counted per ask, it came after 5
    more)."""
    import os
    import socket

    from searchers.storage import live_trial, recover_stale_trials, worker_info

    space, limit, stuck = _stuck_over_the_budget()

    class Killed(BaseException):
        pass

    def search(storage):
        return StudySearch.open(space, stuck, seed=0, budget=Budget(max_params=limit),
                                fallback_after=5, storage=storage, study_name="s",
                                trial_attrs={"worker": worker_info()})

    def finished(study):
        return [(t.user_attrs.get("outcome"), t.user_attrs.get("arch_id"))
                for t in study.trials if t.user_attrs.get("outcome") is not None]

    straight = search(optuna.storages.InMemoryStorage())
    expected = straight.ask().arch
    storage = optuna.storages.InMemoryStorage()
    killed = search(storage)
    propose, calls = killed.bridge.propose, []

    def dies_at_the_fourth(params, taken=()):
        calls.append(1)
        if len(calls) == 4:  # as kill -9: the trial stays running, its worker gone
            running = killed.study.trials[-1].number
            live_trial(killed.study, running).set_user_attr(
                "worker", {"host": socket.gethostname(), "pid": os.getpid(), "started": 1.0})
            raise Killed
        return propose(params, taken)

    killed.bridge.propose = dies_at_the_fourth
    with pytest.raises(Killed):
        killed.ask()
    resumed = search(storage)
    assert recover_stale_trials(resumed.study, 2) == [3]
    candidate = resumed.ask()
    assert candidate.arch == expected
    assert finished(resumed.study) == finished(straight.study)[:5]
    assert resumed.study.trials[candidate.id].user_attrs["fallback"].startswith(
        "random, after 5")
