"""The differentiable searcher on spaces other than AdaBERT's cells:
the arg-max derivation, the refusal of spaces it cannot relax, the efficiency term on a
space's own op costs, and the generic supernet trainer with its checkpoint."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest
import torch

from nas.arch_params import ArchParameters
from nas.builder import build_supernet
from nas.cost import batch_for
from nas.distill.losses import kd_loss
from nas.graph import ChoiceRef
from nas.space import SPACES, Constraint, SearchSpace, fix_choices, get_space, small_config
from searchers.base import SEARCHERS, SearcherError
from searchers.differentiable import (
    DifferentiableSearch,
    check_relaxable,
    derive_argmax_architecture,
    op_cost_table,
    relaxed_choices,
    weight_settings,
)
from searchers.supernet_training import KDSupernetTrainer

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_space.py"


def tiny_cell() -> SearchSpace:
    """``tiny-cell`` of ``examples/custom_space.py``, loaded once as a plug-in file."""
    if "tiny-cell" not in SPACES.names():
        spec = importlib.util.spec_from_file_location("nas_example_custom_space", EXAMPLE)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return get_space("tiny-cell", **small_config("tiny-cell"))


def tiny_adabert() -> SearchSpace:
    return get_space("adabert", **{**small_config("adabert"), "max_depth": 2})


def trainer_for(space: SearchSpace, *, epochs=2, steps=3, checkpoint=None, after_step=None,
                seed=0) -> KDSupernetTrainer:
    """Random token batches with labels, an index, and random teacher logits per example:
    the shape of a real search's data (``kd_loss`` against cached teacher logits)."""
    torch.manual_seed(seed)
    supernet = build_supernet(space)
    n, bs, num_labels = 16, 4, 2
    teacher = torch.randn(n, num_labels, generator=torch.Generator().manual_seed(1))

    def batch(i: int) -> dict:
        rows = torch.arange(i * bs, (i + 1) * bs) % n
        b = batch_for(space, bs, 8)
        return {**b, "input_ids": (b["input_ids"] + i) % 300, "labels": rows % num_labels,
                "index": rows}

    def train_batches(epoch, start):
        return [batch(epoch * steps + i) for i in range(start, steps)]

    def val_batches(epoch):
        return [batch(100 + epoch)]

    def loss(out, b):
        assert b.get("split", "train") in ("train", "val")
        return kd_loss(out.logits, teacher[b["index"]], b["labels"])

    return KDSupernetTrainer(supernet, epochs=epochs, steps_per_epoch=steps,
                             train_batches=train_batches, val_batches=val_batches,
                             task_loss=loss, checkpoint=checkpoint, after_step=after_step)


@pytest.mark.parametrize("make", [tiny_cell, tiny_adabert], ids=["tiny-cell", "adabert"])
def test_argmax_search_runs_on_a_space_and_returns_a_valid_architecture(make):
    space = make()
    trainer = trainer_for(space, epochs=1, steps=2)
    epochs = []
    trainer.on_epoch = lambda epoch, means: epochs.append((epoch, trainer.search.derive()))
    searcher = SEARCHERS.get("differentiable")(seed=0, derive="argmax", checkpoint_every=50)
    candidate = searcher.search(space, trainer)
    assert candidate.arch == space.validate(candidate.arch) and candidate.arch.space == space.name
    assert set(candidate.params["probabilities"]) == {c.name for c in relaxed_choices(space)}
    assert trainer.result.steps == 2 and math.isfinite(trainer.result.history[-1]["loss"])
    assert epochs == [(0, candidate.arch)]
    # every relaxed choice took its most probable value
    for name, probs in candidate.params["probabilities"].items():
        best = max(range(len(probs)), key=lambda i: (probs[i], -i))
        assert candidate.arch[name] == space.choice(name).values[best]


def test_a_stopped_search_resumes_to_the_same_alphas(tmp_path):
    space = tiny_cell()
    straight = SEARCHERS.get("differentiable")(seed=0, derive="argmax", checkpoint_every=2)
    straight.search(space, trainer_for(space))

    class Stop(Exception):
        pass

    def stop_at_5(step, info):  # a kill after step 5: the last checkpoint is step 4
        if step == 5:
            raise Stop

    path = tmp_path / "search.safetensors"
    first = SEARCHERS.get("differentiable")(seed=0, derive="argmax", checkpoint_every=2)
    with pytest.raises(Stop):
        first.search(space, trainer_for(space, checkpoint=path, after_step=stop_at_5))
    assert path.is_file()
    resumed = SEARCHERS.get("differentiable")(seed=0, derive="argmax", checkpoint_every=2)
    trainer = trainer_for(space, checkpoint=path, seed=7)  # other initial weights: overwritten
    candidate = resumed.search(space, trainer)
    assert trainer.result.steps == 6
    for name in straight.engine.alphas.choices:
        assert torch.equal(straight.engine.alphas.logits(name), resumed.engine.alphas.logits(name))
    assert candidate == straight.best()
    fresh = SEARCHERS.get("differentiable")(seed=0, derive="argmax", checkpoint_every=2)
    fresh.search(space, trainer_for(space, seed=7))  # the same, without the checkpoint
    assert any(not torch.equal(straight.engine.alphas.logits(n), fresh.engine.alphas.logits(n))
               for n in straight.engine.alphas.choices)
    assert trainer.val_batches(0)[0]["split"] == "val"


def test_a_space_without_op_or_depth_choices_is_refused_in_one_line():
    grid = get_space("mobilebert-grid", **small_config("mobilebert-grid"))
    widths_and_heads = fix_choices(grid, {c.name: c.default for c in relaxed_choices(grid)})
    with pytest.raises(SearcherError) as err:
        check_relaxable(widths_and_heads)
    message = str(err.value)
    assert "\n" not in message and "'mobilebert-grid'" in message
    assert "3 width, 2 other" in message and "no op or depth choice" in message
    for name in ("tpe", "random", "nsga2", "gp", "lanas"):
        assert name in message

    class NeverTrained:
        supernet, epochs, steps_per_epoch = None, 1, 1

        def fit(self, search):
            raise AssertionError("refused spaces are refused before anything trains")

    with pytest.raises(SearcherError, match="no op or depth choice"):
        SEARCHERS.get("differentiable")(derive="argmax").search(widths_and_heads, NeverTrained())
    with pytest.raises(SearcherError, match="choices: none"):
        check_relaxable(get_space("bert", **small_config("bert")))
    check_relaxable(grid)  # its op and depth choices can be relaxed
    with pytest.raises(SearcherError, match="derive must be one of cell, argmax"):
        SEARCHERS.get("differentiable")(derive="top2")


def test_large_beta_and_no_task_loss_lower_the_most_expensive_op():
    space = tiny_cell()
    costs = op_cost_table(space)
    assert set(costs) == {"a", "b", "c"}
    for name in costs:  # the op's own declared costs: the convolution is the dearest
        by_op = dict(zip(space.choice(name).values, costs[name].tolist(), strict=True))
        assert by_op["std_conv_3"] == 1.0 and by_op["max_pool_3"] == by_op["skip"] == 0.0
    supernet = build_supernet(space)

    def no_task_loss(out, batch):
        return 0.0 * out.logits.sum()

    search = DifferentiableSearch(space, supernet, no_task_loss, total_steps=10, beta=100.0,
                                  arch_lr=0.05, settings=weight_settings(epochs=1),
                                  derive="argmax")
    with torch.no_grad():  # start from the convolution as the favourite everywhere
        for name in costs:
            search.alphas.logits(name)[space.choice(name).index("std_conv_3")] = 0.2
    assert set(search.derive().values()) == {"std_conv_3"}
    before = search.probabilities()
    batch = {"val": batch_for(space, 2, 8)}
    for step in range(10):
        search.before_step(step, batch)
    after = search.probabilities()
    conv = space.choice("a").index("std_conv_3")
    for name in costs:
        assert after[name][conv] < before[name][conv] - 0.1
    assert "std_conv_3" not in set(search.derive().values())


def test_argmax_falls_back_to_the_next_most_probable_valid_architecture():
    base = tiny_cell()
    rule = Constraint(("a", "b"), lambda v: "a and b may not both skip"
                      if v["a"] == v["b"] == "skip" else None)
    space = SearchSpace(base.name, base.choices(), base.graph, [rule], base.config)
    alphas = ArchParameters(relaxed_choices(space))
    with torch.no_grad():
        for name, (skip, pool) in {"a": (3.0, 0.0), "b": (2.0, 1.5), "c": (0.0, 1.0)}.items():
            logits = alphas.logits(name)
            logits.zero_()
            logits[space.choice(name).index("skip")] = skip
            logits[space.choice(name).index("max_pool_3")] = pool
    # the arg-max (skip, skip, max_pool_3) breaks the rule; b's runner-up costs the least
    arch = derive_argmax_architecture(space, alphas)
    assert dict(arch) == {"a": "skip", "b": "max_pool_3", "c": "max_pool_3"}
    never = Constraint(("a",), lambda v: "a is never valid")
    hopeless = SearchSpace(base.name, base.choices(), base.graph, [never], base.config)
    with pytest.raises(SearcherError, match="no valid architecture among the 27"):
        derive_argmax_architecture(hopeless, alphas)


def test_op_costs_price_op_choices_on_nodes_and_several_depths():
    grid = get_space("mobilebert-grid", **small_config("mobilebert-grid"))
    node_choices = {a["op"].choice for _, a in grid.graph.nodes(data=True)
                    if isinstance(a["op"], ChoiceRef)}
    assert node_choices == {"normalization_type", "attention_input"}
    table = op_cost_table(grid)
    assert node_choices <= set(table)
    # the ops' own declarations: both norms hold 2·width parameters and no MACs (the cost
    # model's convention), the attention inputs only route states
    assert table["normalization_type"].tolist() == [0.5, 0.5]
    assert table["attention_input"].tolist() == [0.0, 0.0, 0.0]
    trainer = trainer_for(grid, epochs=1, steps=1)
    search = DifferentiableSearch(grid, trainer.supernet, trainer.task_loss, total_steps=1,
                                  settings=weight_settings(epochs=1), derive="argmax")
    assert [c.name for c in search.depth_choice] == ["num_feedforward_networks",
                                                     "num_hidden_layers"]
    trainer.fit(search)  # other choices (heads, trigram input) fixed at their defaults
    arch = search.derive()
    assert arch["num_attention_heads"] == grid.choice("num_attention_heads").default
    assert arch["hidden_size"] == grid.choice("hidden_size").largest()
