"""The ``sampled-supernet`` searcher and the ``inherited`` evaluator (EfficientBERT's
stage 3, docs/reference.md#efficientbert) on a small EfficientBERT space with random token batches:
what is sampled, what is scored and in which order, and that a seed gives one result."""

from __future__ import annotations

import pytest
import torch

from evaluators.inherited import InheritedEvaluator, InheritedTask
from nas.builder import build_supernet, extract_child
from nas.cost import batch_for, count_costs
from nas.evaluate import classify
from nas.space import get_space
from nas.teacher import metric_score
from nas.train import TrainSettings
from searchers.base import SEARCHERS, run_steps
from searchers.sampled_supernet import SHAPE_KINDS, SampledSupernetSearch

SEQ = 8


@pytest.fixture(scope="module")
def space():
    return get_space("efficientbert", vocab_size=100, layers=2, hidden=24, heads=2,
                     embedding_size=8, max_positions=16, fit_size=32)


def _batch(space, seed, n=4):
    g = torch.Generator().manual_seed(seed)
    batch = batch_for(space, n, SEQ)
    ids = torch.randint(0, space.config["vocab_size"], batch["input_ids"].shape, generator=g)
    return {**batch, "input_ids": ids, "labels": torch.randint(0, 2, (n,), generator=g)}


class Trainer:
    """Cross-entropy on random batches; records the sub-network of every step."""

    def __init__(self, space, steps=3):
        torch.manual_seed(0)
        self.supernet = build_supernet(space)
        self.space, self.epochs, self.steps_per_epoch = space, 1, steps
        self.sampled = []

    def task_loss(self, out, batch):
        return torch.nn.functional.cross_entropy(out.logits, batch["labels"])

    def train_batches(self, epoch, start_batch=0):
        return [_batch(self.space, i) for i in range(start_batch, self.steps_per_epoch)]

    def val_batches(self, epoch):
        return [_batch(self.space, 100), _batch(self.space, 101)]

    def fit(self, search):
        run_steps(self, search, after_step=lambda step, info: self.sampled.append(search.arch))


def _budget(space):
    """A budget between the smallest and the largest (N, r): some draws are rejected."""
    sizes = sorted(count_costs(space, space.sample(s), SEQ).params for s in range(40))
    return sizes[len(sizes) // 2]


def _search(space, seed=0, stage="stage3", **options):
    trainer = Trainer(space)
    incumbent = space.sample(7)
    searcher = SEARCHERS.get("sampled-supernet")(
        seed=seed, stage=stage, candidates=5, incumbent=incumbent, max_params=_budget(space),
        seq_len=SEQ, settings=TrainSettings(lr=1e-3), **options)
    return searcher.search(space, trainer), trainer, incumbent


def test_samples_and_candidates_fit_the_budget_and_keep_the_incumbents_other_choices(space):
    best, trainer, incumbent = _search(space)
    budget = _budget(space)
    others = {c.name for c in space.choices() if c.kind not in SHAPE_KINDS}
    assert len(trainer.sampled) == 3 and not trainer.supernet.training
    for arch in trainer.sampled:
        assert count_costs(space, arch, SEQ).params <= budget
        assert all(arch[n] == incumbent[n] for n in others)
    rows = best.params["candidates"]
    assert len({r["arch_id"] for r in rows}) == len(rows) == 5
    assert all(r["params"] <= budget for r in rows)
    assert count_costs(space, incumbent, SEQ).params <= budget  # so it is scored first
    assert rows[0]["arch_id"] == incumbent.id
    top = max(r["value"] for r in rows)
    assert best.params["value"] == top
    assert best.arch.id == next(r["arch_id"] for r in rows if r["value"] == top)
    assert all(best.arch[n] == incumbent[n] for n in others)


def test_a_seed_gives_one_search_and_another_stage_name_another(space):
    first, a, _ = _search(space)
    again, b, _ = _search(space)
    assert first == again and first.params == again.params
    assert [x.id for x in a.sampled] == [x.id for x in b.sampled]
    assert all(torch.equal(p, q) for p, q in zip(a.supernet.state_dict().values(),
                                                 b.supernet.state_dict().values(),
                                                 strict=True))
    other, c, _ = _search(space, stage="other")
    assert [x.id for x in c.sampled] + [r["arch_id"] for r in other.params["candidates"]] != \
        [x.id for x in a.sampled] + [r["arch_id"] for r in first.params["candidates"]]


def test_the_samplers_state_resumes_the_same_draws(space):
    fixed = {c.name: space.default()[c.name] for c in space.choices()
             if c.kind not in SHAPE_KINDS}

    def search():
        return SampledSupernetSearch(space, fixed, TrainSettings(), lambda o, b: 0.0, seed=3,
                                     max_params=_budget(space), seq_len=SEQ)

    straight = search()
    first = [straight.sample().id for _ in range(2)]
    state = straight.state_dict()
    rest = [straight.sample().id for _ in range(3)]
    resumed = search()
    resumed.load_state_dict(state)
    assert [resumed.sample().id for _ in range(3)] == rest and len(set(first + rest)) > 1


def test_the_inherited_evaluator_scores_the_child_without_training_it(space):
    torch.manual_seed(0)
    supernet = build_supernet(space)
    before = {k: v.clone() for k, v in supernet.state_dict().items()}
    batches = [_batch(space, 5), _batch(space, 6)]
    evaluator = InheritedEvaluator(space, InheritedTask(
        supernet=supernet, val_batches=batches, metric="accuracy+f1", seq_len=SEQ))
    assert evaluator.objective_names == ("val_accuracy+f1",)
    arch = space.sample(2)
    result = evaluator(arch)
    expected = classify(extract_child(supernet, space, arch), batches, "accuracy+f1")
    assert result.values == (metric_score(expected, "accuracy+f1"),)
    assert result.metrics == {f"val_{k}": v for k, v in expected.items()}
    assert result.costs["params"] == count_costs(space, arch, SEQ).params
    assert all(torch.equal(v, before[k]) for k, v in supernet.state_dict().items())
