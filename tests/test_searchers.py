"""Searchers: the random baseline and the differentiable (GDAS/AdaBERT) search pieces."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nas.arch_params import ArchParameters
from nas.builder import build_supernet
from nas.cost import batch_for
from nas.space import get_space, small_config
from searchers.base import SEARCHERS, SearcherError, run_steps
from searchers.differentiable import (
    DifferentiableSearch,
    TemperatureSchedule,
    derive_cell_architecture,
    efficiency_loss,
    op_cost_table,
    weight_settings,
)


@pytest.fixture(scope="module")
def space():
    return get_space("adabert", **small_config("adabert"))


def test_staircase_schedule_reaches_the_floor_at_80_percent():
    s = TemperatureSchedule(total_steps=1000, every=100)
    assert s(0) == 1.0 and s(99) == 1.0
    assert s(100) == pytest.approx(0.2 ** (1 / 8))  # 8 stairs before step 800
    assert s(799) > 0.2 and s(800) == pytest.approx(0.2) and s(999) == pytest.approx(0.2)
    lin = TemperatureSchedule(total_steps=11, start=10.0, end=0.1, kind="linear")
    assert lin(0) == 10.0 and lin(10) == pytest.approx(0.1) and lin(5) == pytest.approx(5.05)


def test_op_costs_are_normalised_and_free_for_parameterless_ops(space):
    table = op_cost_table(space)
    assert len(table) == 9
    costs = dict(zip(space.choice("cell.n0.from_prev2").values,
                     table["cell.n0.from_prev2"].tolist(), strict=True))
    assert costs["std_conv_7"] == pytest.approx(1.0)  # the largest op in both terms
    # k=3: params (3·C² + 2C)/(7·C² + 2C) with C = 16, MACs 3/7
    c = 16
    assert costs["std_conv_3"] == pytest.approx(0.5 * ((3 * c * c + 2 * c) / (7 * c * c + 2 * c)
                                                       + 3 / 7))
    for free in ("skip", "zero", "max_pool_3", "avg_pool_3"):
        assert costs[free] == 0.0


def test_efficiency_loss_by_hand(space):
    costs = {"a": torch.tensor([1.0, 0.5, 0.0]), "b": torch.tensor([0.2, 0.0, 1.0])}
    weights = {"a": torch.tensor([0.0, 1.0, 0.0]), "b": torch.tensor([0.5, 0.5, 0.0]),
               "depth": torch.tensor([0.0, 1.0, 0.0, 0.0])}
    # mean over edges of Σ_o y_o·cost: (0.5 + 0.1) / 2 = 0.3; K/K_max = 2/4
    depth = space.choice("depth")
    assert efficiency_loss(weights, costs, depth).item() == pytest.approx(0.3 * 2 / 4)
    assert efficiency_loss(weights, costs).item() == pytest.approx(0.3)


def test_derivation_keeps_two_strongest_edges_per_node_and_argmax_depth(space):
    alphas = ArchParameters([c for c in space.choices() if c.kind in ("op", "depth")])
    with torch.no_grad():
        for p in alphas.parameters():
            p.zero_()

        def favour(name, op, strength):
            alphas.logits(name)[space.choice(name).index(op)] = strength

        favour("cell.n0.from_prev2", "std_conv_5", 3.0)
        favour("cell.n0.from_prev1", "skip", 2.0)
        favour("cell.n1.from_prev2", "zero", 9.0)  # zero is ignored when ranking
        favour("cell.n1.from_prev2", "max_pool_3", 0.5)
        favour("cell.n1.from_prev1", "dil_conv_3", 1.0)
        favour("cell.n1.from_n0", "avg_pool_3", 2.0)
        favour("cell.n2.from_n1", "std_conv_7", 4.0)
        favour("cell.n2.from_prev1", "std_conv_3", 1.5)
        favour("depth", 3, 1.0)
    arch = derive_cell_architecture(space, alphas)
    assert arch["depth"] == 3
    assert arch["cell.n0.from_prev2"] == "std_conv_5" and arch["cell.n0.from_prev1"] == "skip"
    assert arch["cell.n1.from_n0"] == "avg_pool_3" and arch["cell.n1.from_prev1"] == "dil_conv_3"
    assert arch["cell.n1.from_prev2"] == "zero"
    assert arch["cell.n2.from_n1"] == "std_conv_7" and arch["cell.n2.from_prev1"] == "std_conv_3"
    assert arch["cell.n2.from_prev2"] == "zero" and arch["cell.n2.from_n0"] == "zero"


class FixedBatchTrainer:
    """One batch for training and validation, trained by the shared loop."""

    def __init__(self, supernet, batch, loss, epochs=2, steps_per_epoch=3, **loop):
        self.supernet, self.batch, self.task_loss = supernet, batch, loss
        self.epochs, self.steps_per_epoch, self.loop = epochs, steps_per_epoch, loop

    def train_batches(self, epoch, start_batch=0):
        return [self.batch] * (self.steps_per_epoch - start_batch)

    def val_batches(self, epoch):
        return [self.batch]

    def fit(self, search):
        self.result = run_steps(self, search, **self.loop)


def _search(space, seed=0, steps=6, warmup=0):
    torch.manual_seed(seed)
    supernet = build_supernet(space)
    batch = {**batch_for(space, 4, 10), "labels": torch.tensor([0, 1, 0, 1])}

    def loss(out, b):
        return torch.nn.functional.cross_entropy(out.logits, b["labels"])

    search = DifferentiableSearch(space, supernet, loss, total_steps=steps, seed=seed,
                                  settings=weight_settings(epochs=1), arch_warmup_steps=warmup)
    return search, FixedBatchTrainer(supernet, batch, loss, epochs=1, steps_per_epoch=steps)


def test_search_resumes_exactly_from_a_checkpoint(space, tmp_path):
    straight, trainer = _search(space)
    trainer.fit(straight)

    class Stop(Exception):
        pass

    def stop_after_3(step, info):
        if step == 3:
            raise Stop

    first, trainer = _search(space)
    trainer.loop = {"checkpoint": tmp_path / "search.safetensors", "after_step": stop_after_3}
    first.settings = weight_settings(epochs=1, checkpoint_every=3)
    with pytest.raises(Stop):
        trainer.fit(first)
    resumed, trainer = _search(space, seed=0)
    resumed.settings = weight_settings(epochs=1, checkpoint_every=3)
    trainer.loop = {"checkpoint": tmp_path / "search.safetensors"}
    trainer.fit(resumed)
    assert trainer.result.steps == 6 and math.isfinite(trainer.result.history[-1]["loss"])
    for name in straight.alphas.choices:
        assert torch.equal(straight.alphas.logits(name), resumed.alphas.logits(name))
    assert straight.derive() == resumed.derive()
    for a, b in zip(straight.supernet.parameters(), resumed.supernet.parameters(), strict=True):
        assert torch.equal(a, b)


def test_search_moves_the_architecture_parameters(space):
    search, trainer = _search(space, steps=1)
    before = {n: search.alphas.logits(n).detach().clone() for n in search.alphas.choices}
    trainer.fit(search)
    moved = [n for n in before if not torch.equal(before[n], search.alphas.logits(n))]
    assert "depth" in moved and len(moved) >= 5


def test_architecture_is_frozen_during_the_weight_warm_up(space):
    search, trainer = _search(space, steps=2, warmup=2)
    before = {n: search.alphas.logits(n).detach().clone() for n in search.alphas.choices}
    weights = {n: p.detach().clone() for n, p in search.supernet.named_parameters()}
    logged = []
    trainer.loop = {"after_step": lambda step, info: logged.append(info)}
    trainer.fit(search)
    assert all(math.isnan(info["arch_loss"]) for info in logged) and len(logged) == 2
    assert all(torch.equal(before[n], search.alphas.logits(n)) for n in before)
    assert any(not torch.equal(weights[n], p) for n, p in search.supernet.named_parameters())
    assert math.isfinite(search.before_step(2, {"val": trainer.batch})["arch_loss"])
    assert any(not torch.equal(before[n], search.alphas.logits(n)) for n in before)


def test_random_searcher_is_seeded_by_its_own_generator(space):
    from searchers.proposals import StudySearch

    searcher = StudySearch.open(space, "random", seed=3)
    np.random.seed(0)
    first = [searcher.ask().arch for _ in range(4)]
    again = StudySearch.open(space, "random", seed=3)
    np.random.seed(1)  # the global RNG plays no part
    assert [again.ask().arch for _ in range(4)] == first
    other = StudySearch.open(space, "random", seed=4)
    assert [other.ask().arch for _ in range(4)] != first


def test_differentiable_searcher_runs_the_search_it_wraps(space):
    manual, trainer = _search(space, steps=6)
    trainer.fit(manual)

    wrapped, trainer = _search(space, steps=6)  # same seed: same supernet initialisation
    searcher = SEARCHERS.get("differentiable")(seed=0)
    candidate = searcher.search(space, FixedBatchTrainer(wrapped.supernet, trainer.batch,
                                                         wrapped.task_loss, epochs=1,
                                                         steps_per_epoch=6))
    for name in manual.alphas.choices:
        assert torch.equal(manual.alphas.logits(name), searcher.engine.alphas.logits(name))
    assert candidate.arch == manual.derive() == searcher.best().arch
    probs = candidate.params["probabilities"]
    assert set(probs) == set(manual.alphas.choices)
    assert all(sum(p) == pytest.approx(1.0) for p in probs.values())


def test_differentiable_searcher_checks_its_options(space):
    with pytest.raises(SearcherError, match="arch_warmup"):
        SEARCHERS.get("differentiable")(arch_warmup=1.0)
    search, trainer = _search(space)
    empty = FixedBatchTrainer(search.supernet, trainer.batch, search.task_loss, epochs=0)
    with pytest.raises(SearcherError, match="at least one"):
        SEARCHERS.get("differentiable")().search(space, empty)


def test_published_op_costs_price_depth_not_ops(space):
    """The published scale (0.1 per op, edges summed) gives every op of an edge the same
    efficiency gradient; the normalised scale prices a convolution above a pool."""
    search, _ = _search(space)
    published = op_cost_table(space, scale="published")
    assert all(torch.all(c == 0.1) for c in published.values())
    depth = space.choice("depth")
    logits = {n: torch.zeros(len(space.choice(n).values), requires_grad=True)
              for n in [*published, "depth"]}
    weights = {n: torch.softmax(v, -1) for n, v in logits.items()}
    loss = efficiency_loss(weights, published, depth, edges="sum")
    mean_depth = sum(depth.values) / len(depth.values)  # uniform depth weights
    assert loss.item() == pytest.approx(0.1 * len(published) * mean_depth / max(depth.values))
    loss.backward()
    edge = next(iter(published))
    assert torch.allclose(logits[edge].grad, torch.zeros_like(logits[edge].grad), atol=1e-7)
    assert logits["depth"].grad.abs().sum() > 0
    normalised = op_cost_table(space)
    assert normalised[edge].max() == 1.0 and normalised[edge].min() == 0.0
    with pytest.raises(SearcherError, match="op_costs"):
        SEARCHERS.get("differentiable")(op_costs="paper")


# ------------------------------------------------------- a searcher's settings, every form


def _config(cls, **keys):
    from nas.config import from_dict

    return from_dict(cls, {"name": "x", "task": "sst2", **keys}, "test")


def test_a_searchers_settings_are_read_from_every_form_the_files_have_used():
    """``searcher: {name, settings}`` and the older homes of the same settings
    (``multi_trial.samplers``, compress's ``knapsack:``, ``one_shot:``) give the searcher
    the same settings; where both are written, ``searcher:``'s own win."""
    from recipes.compress import CompressConfig
    from recipes.search_config import SearchConfig
    from recipes.search_study import one_shot_options

    options = {"n_startup_trials": 2}
    new = _config(SearchConfig, space="adabert", searcher={"name": "tpe", "settings": options})
    old = _config(SearchConfig, space="adabert", multi_trial={"samplers": {"tpe": options}})
    for cfg in (new, old):
        assert cfg.searcher_name == "tpe"
        assert cfg.study_settings().samplers == {"tpe": options}
        assert cfg.resolve_searcher().build().options == options

    new = _config(CompressConfig, searcher={"name": "knapsack", "settings": {"cost": "params"}})
    old = _config(CompressConfig, searcher="knapsack", knapsack={"cost": "params"})
    both = _config(CompressConfig, knapsack={"cost": "params", "ratios": [2]},
                   searcher={"name": "knapsack", "settings": {"ratios": [3]}})
    assert new.resolve_searcher().settings == old.resolve_searcher().settings
    assert new.resolve_searcher().build().settings.cost == "params"
    assert (both.resolve_searcher().settings.cost, both.resolve_searcher().settings.ratios) == (
        "params", [3])

    cfg = _config(SearchConfig, space="adabert", one_shot={"beta": 0.5},
                  searcher={"name": "differentiable", "settings": {"derive": "argmax"}})
    resolved = cfg.resolve_searcher()
    built = resolved.build(**one_shot_options(resolved.cls, 0, cfg, cfg.build_space(2)[0]))
    assert (built.beta, built.derive) == (0.5, "argmax")


@pytest.mark.parametrize(("searcher", "message"), [
    ({"name": "tpe", "settings": {"n_startp": 3}}, r"searcher 'tpe': bad sampler option"),
    ({"name": "differentiable", "settings": {"betta": 1}},
     r"searcher differentiable settings: unknown key 'betta'"),
    ({"name": "tpe", "options": {}}, r"is neither a searcher's name nor"),
    ("tpee", r"searcher: unknown searcher 'tpee'; did you mean 'tpe'")])
def test_a_bad_searcher_is_refused_when_the_file_is_read(searcher, message):
    from nas.errors import NasError
    from recipes.search_config import SearchConfig

    with pytest.raises(NasError, match=message) as err:
        _config(SearchConfig, space="adabert", searcher=searcher)
    assert "\n" not in str(err.value)
