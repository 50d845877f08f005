"""The LaMOO sampler (docs/reference.md#lamoo; Zhao et al., ICLR 2022) and its Pareto helpers:
dominance numbers and hypervolume against independent computations, the dominance split, proposals
inside the selected region, the hypervolume it reaches on a two-objective problem, exact
continuation of a two-objective study, the ask cost at 100 trials, one-line refusals.
(Optuna's sampler cases, the study contract and the kill-and-resume test run it through
the searcher registry: tests/test_searcher_contract.py, tests/test_exact_resume.py.)"""

from __future__ import annotations

import itertools
import time

import numpy as np
import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState

from evaluators.base import EvalResult, Objective
from nas.space import get_space, small_config
from searchers.base import SearcherError
from searchers.lamoo import LaMOOError, LaMOOSampler, scaled_objectives
from searchers.pareto import dominance_numbers, hypervolume
from searchers.proposals import StudySearch

optuna.logging.set_verbosity(optuna.logging.WARNING)

DIMS = 5
#: the hypervolume's reference point for :func:`zdt` (both objectives minimised)
REFERENCE = np.array([1.1, 11.0])


def zdt(x: np.ndarray) -> tuple[float, float]:
    """A ZDT1-like problem on a grid (Zitzler, Deb & Thiele, 2000), both minimised: x0
    moves along the front, the other coordinates must reach 13 to be on it."""
    f1 = x[0] / 19
    g = 1 + 9 * float(((x[1:] - 13) ** 2).sum()) / (len(x) - 1) / 169
    return f1, g * (1 - np.sqrt(f1 / g))


def ask_zdt(trial) -> np.ndarray:
    return np.array([trial.suggest_int(f"x{i}", 0, 19) for i in range(DIMS)], dtype=float)


def zdt_study(sampler, n: int) -> optuna.Study:
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for _ in range(n):
        t = study.ask()
        study.tell(t, zdt(ask_zdt(t)))
    return study


def brute_hypervolume_2d(points: np.ndarray, ref: np.ndarray, grid: int = 400) -> float:
    """The dominated area counted on a fine grid (an independent check, approximate)."""
    xs = (np.arange(grid) + 0.5) / grid * ref[0]
    ys = (np.arange(grid) + 0.5) / grid * ref[1]
    gx, gy = np.meshgrid(xs, ys)
    covered = np.zeros_like(gx, dtype=bool)
    for p in points:
        covered |= (gx >= p[0]) & (gy >= p[1])
    return covered.mean() * ref[0] * ref[1]


def test_dominance_numbers_and_hypervolume():
    told = np.array([(1, 5), (2, 4), (3, 3), (2, 5), (4, 4), (1, 6), (3, 3)], dtype=float)
    # (2, 5) is dominated by (1, 5) (2, 4); (4, 4) by (2, 4) (3, 3) (3, 3); (1, 6) by (1, 5)
    assert dominance_numbers(told).tolist() == [0, 0, 0, 2, 3, 1, 0]
    ref = np.array([5.0, 7.0])
    # the staircase by hand: x in [1, 2) → 7-5, [2, 3) → 7-4, [3, 5) → 7-3
    assert hypervolume(told, ref) == 1 * 2 + 1 * 3 + 2 * 4
    assert hypervolume(told, ref) == pytest.approx(brute_hypervolume_2d(told, ref), rel=0.01)
    assert hypervolume(np.array([[6.0, 1.0]]), ref) == 0.0  # beyond the reference
    rng = np.random.default_rng(0)
    for m in (3, 4):  # the slicing algorithm against Optuna's (WFG) on random fronts
        from optuna._hypervolume import compute_hypervolume

        points = rng.uniform(size=(25, m))
        ref = np.full(m, 1.1)
        front = points[dominance_numbers(points) == 0]
        assert hypervolume(points, ref) == pytest.approx(compute_hypervolume(front, ref))


def test_a_split_puts_the_lower_dominance_numbers_on_the_good_side():
    sampler = LaMOOSampler(seed=0, n_startup_trials=40, leaf_size=5, height=1)
    study = zdt_study(sampler, 40)
    tree = sampler.tree(study)
    root = tree.root
    assert not root.leaf and root.good.n + root.bad.n == 40
    done = sorted(study.trials, key=lambda t: (t.datetime_complete, t.number))
    f = scaled_objectives(study, done)
    dominated = dominance_numbers(f)
    # the linear classifier learned the (non-linear) median split of the dominance
    # numbers far better than chance (0.5)
    good_side = np.zeros(40, dtype=bool)
    good_side[root.good.rows] = True
    assert (good_side == (dominated <= np.median(dominated))).mean() >= 0.7
    assert dominated[root.good.rows].mean() < dominated[root.bad.rows].mean()
    assert root.good.value > root.bad.value  # the hypervolume UCB ranks them by
    assert root.value == pytest.approx(hypervolume(f, np.full(2, 1.1)))


def test_proposals_stay_inside_the_selected_region():
    """Each proposal lies in the leaf that UCB selected (every classifier on the path
    agrees), made by the walk inside it, not by the random fallback."""
    sampler = LaMOOSampler(seed=1, n_startup_trials=30, leaf_size=6, height=3)
    space = {f"x{i}": IntDistribution(0, 19) for i in range(DIMS)}
    space["noise"] = FloatDistribution(0.0, 1.0)  # floats walk by random values
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    depths = []
    for _ in range(45):
        tree = sampler.tree(study)
        chosen = None
        if tree is not None:
            path = tree.select(sampler.cp * tree.root.value)
            chosen = tree.end(path)
            depths.append(len(path))
        t = study.ask(space)
        x = np.array([t.params[f"x{i}"] for i in range(DIMS)], dtype=float)
        if chosen is not None:
            assert sampler.last_proposal["how"] == "region"
            vector = sampler._encoding(space).encode(t.params)
            assert tree.route(vector) is chosen
        study.tell(t, zdt(x))
    assert len(depths) == 15 and min(depths) >= 1  # a region smaller than the space


def test_hypervolume_after_40_trials_beats_random_search():
    """On the ZDT-like problem, 40 trials (10 random, then the tree), three seeds."""
    def front_volume(sampler) -> float:
        study = zdt_study(sampler, 40)
        return hypervolume(np.array([t.values for t in study.trials]), REFERENCE)

    lamoo = [front_volume(LaMOOSampler(seed=s)) for s in range(3)]
    random = [front_volume(optuna.samplers.RandomSampler(seed=s)) for s in range(3)]
    print(f"hypervolume after 40 trials: LaMOO {np.round(lamoo, 3)}, "
          f"random {np.round(random, 3)}")
    assert np.mean(lamoo) > np.mean(random)


def test_a_two_objective_study_reopened_continues_like_the_uninterrupted_one():
    """Accuracy-like score against parameters on the small AdaBERT space: a new search on
    the stored study (new sampler, as after a restart) proposes what the uninterrupted
    search did, past the start-up trials."""
    space = get_space("adabert", **small_config("adabert"))
    objectives = (Objective("score", "maximize"), Objective("params", "minimize"))
    options = {"n_startup_trials": 3, "leaf_size": 2}
    weights = np.random.default_rng(0).normal(size=space.encoded_width)

    def make(storage=None):
        return StudySearch.open(space, "lamoo", seed=3, objectives=objectives,
                                sampler_options=options, storage=storage,
                                study_name=None if storage is None else "s")

    def step(search):
        c = search.ask()
        encoded = space.encode(c.arch)
        search.tell(c, EvalResult((float(encoded @ weights), float(encoded.sum()))))

    straight = make()
    for _ in range(10):
        step(straight)
    storage = optuna.storages.InMemoryStorage()
    first = make(storage)
    for _ in range(6):
        step(first)
    reopened = make(storage)
    for _ in range(4):
        step(reopened)
    assert [t.params for t in reopened.study.trials] == [t.params for t in straight.study.trials]
    assert len({t.user_attrs["arch_id"] for t in straight.study.trials}) == 10


def test_ask_cost_at_100_trials():
    """The issue's target: an ask at 100 trials costs at most 50 ms (the tree is rebuilt
    at every trial, as by default). Printed for docs/optuna.md; the bound here is looser
    (a shared, loaded test machine)."""
    rng = np.random.default_rng(0)
    sampler = LaMOOSampler(seed=0)
    space = {f"x{i}": IntDistribution(0, 19) for i in range(DIMS)}
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    for _ in range(100):
        params = {n: int(rng.integers(20)) for n in space}
        study.add_trial(optuna.create_trial(
            params=params, distributions=space,
            values=list(zdt(np.array([params[f"x{i}"] for i in range(DIMS)], float)))))
    costs = []
    for _ in range(5):
        start = time.perf_counter()
        t = study.ask(space)
        costs.append(time.perf_counter() - start)
        study.tell(t, zdt(np.array([t.params[f"x{i}"] for i in range(DIMS)], float)))
    assert sampler.last_proposal["how"] == "region"
    print(f"LaMOO ask at 100 trials: {1000 * np.median(costs):.1f} ms")
    assert np.median(costs) < 0.25


def test_repeats_only_when_the_space_is_exhausted_and_refusals_are_one_line():
    sampler = LaMOOSampler(seed=0, n_startup_trials=3, leaf_size=2)
    study = optuna.create_study(directions=["minimize", "maximize"], sampler=sampler)
    seen = []
    for _ in range(12):
        t = study.ask()
        seen.append((t.suggest_int("a", 0, 2), t.suggest_categorical("b", ["x", "y", "z"])))
        study.tell(t, (float(seen[-1][0]), float(seen[-1][1] == "y")))
    assert len(set(seen[:9])) == 9 and set(seen[9:]) <= set(seen[:9])
    failed = [t for t in study.trials if t.state != TrialState.COMPLETE]
    assert not failed
    for options, message in (({"max_sweeps": 1}, "max_sweeps must be >= min_sweeps"),
                             ({"cp": -1}, "cp must be >= 0"),
                             ({"reference_margin": 0}, "reference_margin must be > 0")):
        with pytest.raises(LaMOOError, match=message) as err:
            LaMOOSampler(**options)
        assert "\n" not in str(err.value) and "LaMOOSampler" in str(err.value)
    space = get_space("adabert", **small_config("adabert"))
    with pytest.raises(SearcherError, match="searcher 'lamoo': bad sampler option"):
        StudySearch.open(space, "lamoo", seed=0, sampler_options={"split": "median"})


def test_same_seed_same_trials_other_seed_other_trials():
    def params(seed):
        return [t.params for t in zdt_study(LaMOOSampler(seed=seed, n_startup_trials=5), 15).trials]

    first, again, other = params(2), params(2), params(3)
    assert first == again and first != other
    assert all(a != b for a, b in itertools.pairwise(first))  # no immediate repeats
