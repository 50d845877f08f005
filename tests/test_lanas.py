"""The LaNAS sampler (docs/reference.md#lanas): Optuna's own sampler test cases, the tree on a
synthetic objective, the path rule (every classifier), determinism and its refusals."""

from __future__ import annotations

import warnings

import numpy as np
import optuna
import pytest
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    RelativeSamplerTestCase,
    SingleOnlySamplerTestCase,
)

from nas.space import get_space, small_config
from searchers.lanas import LaNASError, LaNASSampler, build_tree, fit_linear_classifier
from searchers.optuna_bridge import SpaceBridge

optuna.logging.set_verbosity(optuna.logging.WARNING)


class _LaNAS:
    """Optuna's shared sampler checks, once with the defaults (random start-up) and once
    with a tree from the second finished trial on."""

    @pytest.fixture(params=["defaults", "tree-early"])
    def sampler(self, request):
        if request.param == "defaults":
            return lambda: LaNASSampler(seed=0)
        return lambda: LaNASSampler(seed=0, n_startup_trials=2, rebuild_every=1, leaf_size=1,
                                    max_draws=500)


class TestBasic(_LaNAS, BasicSamplerTestCase):
    pass


class TestRelative(_LaNAS, RelativeSamplerTestCase):
    pass


class TestSingleOnly(_LaNAS, SingleOnlySamplerTestCase):
    pass


# ---------------------------------------------------------------------------


def synthetic(x: np.ndarray) -> float:
    """Higher is better: a smooth bowl with its optimum at (7, 7)."""
    return -float(((x - 7.0) ** 2).sum())


def grid_study(sampler, n, direction="maximize"):
    study = optuna.create_study(sampler=sampler, direction=direction)
    sign = 1.0 if direction == "maximize" else -1.0
    for _ in range(n):
        t = study.ask()
        x = np.array([t.suggest_int("a", 0, 9), t.suggest_int("b", 0, 9)], dtype=float)
        study.tell(t, sign * synthetic(x))
    return study


@pytest.mark.parametrize("split", ["median", "kmeans"])
def test_leaves_separate_good_from_bad_regions(split):
    sampler = LaNASSampler(seed=1, n_startup_trials=40, rebuild_every=10, height=2,
                           leaf_size=5, split=split)
    study = grid_study(sampler, 40)
    tree = sampler.tree(study)
    leaves = tree.leaves()
    assert len(leaves) >= 3 and sum(leaf.n for leaf in leaves) == 40
    means = [leaf.value for leaf in leaves]
    assert max(means) > min(means) + 5.0  # best leaf's mean score exceeds the worst's
    assert leaves[0].value == max(means)  # the all-good path leads to the best region
    if split == "median":  # the chosen path (Cp = 0) goes to the good side every time
        assert all(went_good for _, went_good in tree.select(cp=0.0))
    # proposals from the tree land in the best leaf, by every classifier on the path
    # proposals from the tree land in the leaf that UCB chose, by every classifier on
    # the path
    study2 = grid_study(sampler, 40)
    for _ in range(10):
        tree = sampler.tree(study2)
        node, went_good = tree.select(cp=0.0)[-1]
        chosen = node.good if went_good else node.bad
        t = study2.ask()
        x = np.array([t.suggest_int("a", 0, 9), t.suggest_int("b", 0, 9)], dtype=float)
        assert sampler.last_proposal["how"] == "leaf"
        assert tree.route(x) is chosen
        study2.tell(t, synthetic(x))


def test_minimised_studies_partition_by_the_same_rule():
    up = LaNASSampler(seed=1, n_startup_trials=30, leaf_size=5, height=1)
    down = LaNASSampler(seed=1, n_startup_trials=30, leaf_size=5, height=1)
    tree_up = up.tree(grid_study(up, 30, "maximize"))
    tree_down = down.tree(grid_study(down, 30, "minimize"))
    assert [leaf.n for leaf in tree_up.leaves()] == [leaf.n for leaf in tree_down.leaves()]
    assert tree_down.leaves()[0].value > tree_down.leaves()[-1].value  # good = low value


def test_a_proposal_must_satisfy_every_classifier_on_the_path():
    """Two splits: 'good' = x0 > 0 and then x1 > 0. A point with x0 > 0 but x1 < 0 passes
    the root's classifier and fails the second: it must never be proposed."""
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(400, 2))
    y = ((x[:, 0] > 0).astype(float) + (x[:, 1] > 0)) + 0.01 * x[:, 0]
    tree = build_tree(x, y, range(400), height=2, leaf_size=10, split="median", seed=0)
    path = tree.select(cp=0.0)
    assert len(path) == 2 and all(g for _, g in path)
    sampler = LaNASSampler(seed=0, n_startup_trials=2, leaf_size=10, height=2)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    space = {"a": optuna.distributions.FloatDistribution(-1, 1),
             "b": optuna.distributions.FloatDistribution(-1, 1)}
    for (a, b), v in zip(x, y, strict=True):
        study.add_trial(optuna.create_trial(params={"a": a, "b": b}, distributions=space,
                                            value=v))
    for _ in range(20):
        t = study.ask(space)
        assert t.params["a"] > -0.1 and t.params["b"] > -0.1, t.params
        study.tell(t, 0.0)


def test_the_classifier_separates_a_linear_rule():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    good = x[:, 0] - 2 * x[:, 2] > 0
    w, b = fit_linear_classifier(x, good, l2=0.01)
    assert ((x @ w + b > 0) == good).mean() > 0.97


def test_same_seed_same_trials_and_a_tree_that_is_a_function_of_the_trials():
    def trials(seed):
        s = LaNASSampler(seed=seed, n_startup_trials=10, rebuild_every=5, leaf_size=4)
        study = grid_study(s, 30)
        return [t.params for t in study.trials], s, study

    first, s1, study1 = trials(3)
    again, s2, _ = trials(3)
    other, _, _ = trials(4)
    assert first == again and first != other
    # a second sampler (another worker) reading the same study builds the same tree
    fresh = LaNASSampler(seed=3, n_startup_trials=10, rebuild_every=5, leaf_size=4)
    t1, t2 = s1.tree(study1), fresh.tree(study1)
    assert t1.trials == t2.trials and len(t1.trials) == 30
    assert [leaf.rows.tolist() for leaf in t1.leaves()] == \
        [leaf.rows.tolist() for leaf in t2.leaves()]


def test_no_trial_repeats_until_the_space_is_exhausted():
    sampler = LaNASSampler(seed=0, n_startup_trials=4, rebuild_every=2, leaf_size=2)
    study = optuna.create_study(sampler=sampler)
    seen = []
    for _ in range(12):
        t = study.ask()
        seen.append((t.suggest_int("a", 0, 2), t.suggest_categorical("b", ["x", "y", "z"])))
        study.tell(t, float(seen[-1][0]))
    assert len(set(seen[:9])) == 9  # 3 × 3 architectures, each once
    assert set(seen[9:]) <= set(seen[:9])  # then repeats, not errors


def test_constraint_is_honoured_and_enqueued_trials_are_kept():
    sampler = LaNASSampler(seed=0, n_startup_trials=3, leaf_size=2,
                           constraint=lambda p: p["a"] + p["b"] <= 5)
    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({"a": 9, "b": 9})  # an enqueued seed is proposed as it is
    for i in range(15):
        t = study.ask()
        a, b = t.suggest_int("a", 0, 9), t.suggest_int("b", 0, 9)
        assert (a, b) == (9, 9) if i == 0 else a + b <= 5
        study.tell(t, float(a * b))


def test_refusals_are_one_line():
    study = optuna.create_study(directions=["maximize", "minimize"],
                                sampler=LaNASSampler(seed=0))
    with pytest.raises(LaNASError, match="single-objective.*nsga2") as err:
        study.ask().suggest_int("a", 0, 3)
    assert "\n" not in str(err.value)
    with pytest.raises(LaNASError, match="rebuild_every must be >= 1"):
        LaNASSampler(rebuild_every=0)
    with pytest.raises(LaNASError, match="split must be"):
        LaNASSampler(split="svm")


def test_the_space_encoding_through_the_bridge():
    """With the bridge's tables, a parameter set encodes as the space encodes its
    architecture (same numbers, columns in parameter order)."""
    space = get_space("adabert", **small_config("adabert"))
    bridge = SpaceBridge(space)
    sampler = LaNASSampler(search_space=bridge.distributions, encodings=bridge.encoding_tables(),
                           seed=0)
    encoding = sampler._encoding(bridge.distributions)
    arch = space.sample(0)
    params = bridge.params_of(arch)
    assert sorted(encoding.encode(params)) == sorted(space.encode(arch))
    assert encoding.width == space.encoded_width
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no independent-sampling fallbacks
        study = optuna.create_study(sampler=sampler)
        t = study.ask()
        assert space.validate(bridge.architecture(bridge.suggest(t))).space == "adabert"


def test_int_and_categorical_draws_stay_in_range():
    sampler = LaNASSampler(seed=0, n_startup_trials=0, leaf_size=1)
    space = {"a": IntDistribution(2, 10, step=4), "c": CategoricalDistribution([True, False])}
    study = optuna.create_study(sampler=sampler)
    for _ in range(6):
        t = study.ask(space)
        assert t.params["a"] in (2, 6, 10) and t.params["c"] in (True, False)
        study.tell(t, 1.0)
