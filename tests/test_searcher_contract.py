"""Contract tests run over every registered searcher (STYLE.md patterns 9 and 16).

Multi-trial searchers run on a tiny six-architecture space with the cost evaluator
(milliseconds); one-shot searchers search the small AdaBERT space with a synthetic
trainer (random tokens, cross-entropy) for a few steps. A new searcher gets these checks
by registering itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from evaluators.base import EvalResult, Objective
from evaluators.costs import CostEvaluator
from nas.builder import build_supernet
from nas.choices import Categorical
from nas.cost import batch_for
from nas.graph import ChoiceRef, GraphBuilder
from nas.space import SearchSpace, get_space, small_config
from searchers.base import (
    SEARCHERS,
    Candidate,
    MultiTrialSearcher,
    OneShotSearcher,
    SearcherError,
    run_steps,
    searcher_names,
)

MULTI_TRIAL = searcher_names("multi-trial")
ONE_SHOT = searcher_names("one-shot")


def tiny_space() -> SearchSpace:
    """3 edge ops × 2 activations = 6 architectures; the activation does not change
    the costs, so cost ties exist."""
    g = GraphBuilder()
    g.node("emb", "embedding", params=dict(vocab_size=50, embedding_size=8, out=8,
                                           max_positions=16, type_vocab_size=0,
                                           norm="layer_norm", key="input_ids"))
    g.node("h", "sum", params={"width": 8})
    g.edge("emb", "h", ChoiceRef("op"))
    g.node("out", "sum", params={"width": 8}, role="output")
    g.edge("h", "out", ChoiceRef("act"))
    return SearchSpace("tiny", [Categorical("op", ("std_conv_3", "std_conv_5", "skip")),
                                Categorical("act", ("relu", "gelu"), kind="other")], g.graph)


@pytest.fixture(scope="module")
def space():
    return tiny_space()


@pytest.fixture(scope="module")
def evaluator(space):
    return CostEvaluator(space, ("params",), seq_len=8)


def test_the_registry_lists_both_kinds():
    assert "random" in MULTI_TRIAL and "differentiable" in ONE_SHOT
    assert set(MULTI_TRIAL) | set(ONE_SHOT) == set(searcher_names())
    for name in MULTI_TRIAL:
        assert issubclass(SEARCHERS.get(name), MultiTrialSearcher)
        assert SEARCHERS.get(name).kind == "multi-trial"
    for name in ONE_SHOT:
        assert issubclass(SEARCHERS.get(name), OneShotSearcher)
        assert SEARCHERS.get(name).kind == "one-shot"
    with pytest.raises(SearcherError, match="unknown searcher kind"):
        searcher_names("grid")


def test_declared_searchers_register_themselves_with_the_declared_kind():
    for name, (module, kind) in SEARCHERS._declared.items():
        __import__(module)
        assert SEARCHERS.get(name).kind == kind == SEARCHERS.kind_of(name)


def test_listing_searchers_does_not_import_torch():
    code = ("import sys; from searchers.base import searcher_names; "
            "print(searcher_names('one-shot'), searcher_names('multi-trial'), "
            "'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{ONE_SHOT} {MULTI_TRIAL} False"


# ---------------------------------------------------------------------------
# multi-trial
# ---------------------------------------------------------------------------


PARAMS = (Objective("params", "minimize"),)


def make(name, space, seed=0, objectives=PARAMS):
    return SEARCHERS.get(name)(space, seed=seed, objectives=objectives)


def run(searcher, evaluator, n):
    for _ in range(n):
        c = searcher.ask()
        searcher.tell(c, evaluator(c.arch))


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_ask_returns_valid_candidates_with_consecutive_ids(name, space):
    searcher = make(name, space)
    candidates = [searcher.ask() for _ in range(5)]
    assert [c.id for c in candidates] == list(range(5))
    for c in candidates:
        assert isinstance(c, Candidate) and space.validate(dict(c.arch)) == c.arch
        assert c.arch.space == "tiny"
        json.dumps(c.to_dict())
        assert Candidate.from_dict(json.loads(json.dumps(c.to_dict()))) == c


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_failed_and_pruned_results_are_never_best(name, space, evaluator):
    searcher = make(name, space)
    candidates = [searcher.ask() for _ in range(6)]
    results = {c.id: evaluator(c.arch) for c in candidates}
    ranked = sorted(candidates, key=lambda c: (results[c.id].values[0], c.id))
    # the two smallest are told as failed and pruned: they must not win
    searcher.tell(ranked[0], EvalResult.failed("diverged", costs=results[ranked[0].id].costs))
    searcher.tell(ranked[1], EvalResult.pruned(intermediate=[(0, 1.0)]))
    for c in ranked[2:]:
        searcher.tell(c, results[c.id])
    best, result = searcher.best()
    assert best == ranked[2] and result.values == results[ranked[2].id].values
    assert [r.status.value for _, r in searcher.history[:2]] == ["failed", "pruned"]
    assert searcher.pareto_front()[0][0] == ranked[2]


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_best_follows_the_direction(name, space, evaluator):
    for direction, pick in (("minimize", min), ("maximize", max)):
        searcher = make(name, space, objectives=(Objective("params", direction),))
        run(searcher, evaluator, 6)
        values = [r.values[0] for _, r in searcher.history]
        candidate, result = searcher.best()
        assert result.values[0] == pick(values)
        # on a tie the earliest candidate wins
        assert candidate.id == min(c.id for c, r in searcher.history
                                   if r.values[0] == pick(values))


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_best_needs_a_complete_result_and_tell_checks_its_input(name, space):
    searcher = make(name, space)
    with pytest.raises(SearcherError, match="no complete result"):
        searcher.best()
    a, b = searcher.ask(), searcher.ask()
    searcher.tell(b, EvalResult.failed("out of memory"))  # any order
    with pytest.raises(SearcherError, match="no complete result"):
        searcher.best()
    with pytest.raises(SearcherError, match="already told"):
        searcher.tell(b, EvalResult.failed("again"))
    with pytest.raises(SearcherError, match="not asked"):
        searcher.tell(Candidate(99, a.arch), EvalResult((1.0,)))
    with pytest.raises(SearcherError, match="objectives"):
        searcher.tell(a, EvalResult((1.0, 2.0)))
    searcher.tell(a, EvalResult((3.0,)))
    assert searcher.best()[0] == a and not searcher.pending


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_same_seed_same_candidates(name, space):
    first, second = make(name, space, seed=5), make(name, space, seed=5)
    assert [first.ask() for _ in range(8)] == [second.ask() for _ in range(8)]


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_state_survives_json_and_the_search_continues_identically(name, space, evaluator):
    straight = make(name, space, seed=1)
    run(straight, evaluator, 3)
    pending = straight.ask()  # asked, not told when the state is saved
    state = json.loads(json.dumps(straight.state_dict()))

    resumed = make(name, space, seed=123)  # the state's generator wins over the seed
    resumed.load_state_dict(state)
    assert list(resumed.pending.values()) == [pending]
    for s in (straight, resumed):
        s.tell(pending, evaluator(pending.arch))
        run(s, evaluator, 4)
    assert [c for c, _ in resumed.history] == [c for c, _ in straight.history]
    assert [r.values for _, r in resumed.history] == [r.values for _, r in straight.history]
    assert resumed.best()[0] == straight.best()[0]

    other = make(name, space, objectives=(Objective("flops", "minimize"),))
    with pytest.raises(SearcherError, match="objectives"):
        other.load_state_dict(state)
    with pytest.raises(SearcherError, match="malformed"):
        make(name, space).load_state_dict({k: v for k, v in state.items() if k != "history"})


def dominates(a, b, signs):
    a = [s * x for s, x in zip(signs, a, strict=True)]
    b = [s * x for s, x in zip(signs, b, strict=True)]
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b


@pytest.mark.parametrize("name", MULTI_TRIAL)
@pytest.mark.parametrize("directions", [("minimize", "minimize"), ("maximize", "minimize")])
def test_two_objectives_give_a_non_dominated_front(name, directions, space):
    objectives = (Objective("a", directions[0]), Objective("b", directions[1]))
    if not SEARCHERS.get(name).multi_objective:  # it refuses them, in one line
        with pytest.raises(SearcherError, match="single-objective") as err:
            make(name, space, objectives=objectives)
        assert "\n" not in str(err.value)
        return
    searcher = make(name, space, objectives=objectives)
    told = [(1, 5), (2, 4), (3, 3), (2, 5), (4, 4), (1, 6), (3, 3)]
    for values in told:
        searcher.tell(searcher.ask(), EvalResult(values))
    searcher.tell(searcher.ask(), EvalResult.failed("crashed"))  # failures have no values
    with pytest.raises(SearcherError, match="pareto_front"):
        searcher.best()
    signs = [o.sign for o in objectives]
    front = searcher.pareto_front()
    front_values = [r.values for _, r in front]
    assert [c.id for c, _ in front] == sorted(c.id for c, _ in front)
    for v in front_values:
        assert not any(dominates(w, v, signs) for w in map(tuple, told))
    for v in map(tuple, told):  # everything off the front is dominated by the front
        if v not in front_values:
            assert any(dominates(w, v, signs) for w in front_values)
    expected = {("minimize", "minimize"): {(1, 5), (2, 4), (3, 3)},
                ("maximize", "minimize"): {(3, 3), (4, 4)}}[directions]
    assert set(front_values) == expected
    assert front_values.count((3.0, 3.0)) == 2  # equal points do not dominate each other


def test_random_searcher_never_repeats_until_the_space_is_exhausted(space):
    searcher = SEARCHERS.get("random")(space, seed=0)
    first = [searcher.ask().arch for _ in range(6)]
    assert len({a.id for a in first}) == space.size() == 6
    assert searcher.ask().arch in first  # exhausted: repeats are allowed, not an error
    fixed = get_space("bert", **small_config("bert"))
    only = SEARCHERS.get("random")(fixed, seed=0)
    assert only.ask().arch == only.ask().arch == fixed.default()


# ---------------------------------------------------------------------------
# one-shot
# ---------------------------------------------------------------------------


class SyntheticTrainer:
    """Random token batches and cross-entropy on random labels: enough to drive a
    one-shot search for a few steps."""

    def __init__(self, space, epochs=2, steps_per_epoch=2, batch_size=4, seq_len=8):
        torch.manual_seed(0)
        self.supernet = build_supernet(space)
        self.epochs, self.steps_per_epoch = epochs, steps_per_epoch
        self.space, self.batch_size, self.seq_len = space, batch_size, seq_len
        self.fits, self.result = 0, None

    def _batch(self, seed):
        g = torch.Generator().manual_seed(seed)
        batch = batch_for(self.space, self.batch_size, self.seq_len)
        ids = torch.randint(0, self.space.config["vocab_size"], batch["input_ids"].shape,
                            generator=g)
        labels = torch.randint(0, self.space.config["num_labels"], (self.batch_size,),
                               generator=g)
        return {**batch, "input_ids": ids, "labels": labels}

    def task_loss(self, output, batch):
        return torch.nn.functional.cross_entropy(output.logits, batch["labels"])

    def train_batches(self, epoch, start_batch=0):
        for i in range(start_batch, self.steps_per_epoch):
            yield self._batch(1000 * epoch + i)

    def val_batches(self, epoch):
        return [self._batch(10_000 + epoch)]

    def fit(self, search):
        self.fits += 1
        assert callable(search.state_dict) and callable(search.load_state_dict)
        self.result = run_steps(self, search)


@pytest.fixture(scope="module")
def adabert():
    return get_space("adabert", **small_config("adabert"))


@pytest.mark.parametrize("name", ONE_SHOT)
def test_one_shot_search_returns_a_valid_candidate(name, adabert):
    searcher = SEARCHERS.get(name)(seed=0)
    with pytest.raises(SearcherError, match="search"):
        searcher.best()
    trainer = SyntheticTrainer(adabert)
    candidate = searcher.search(adabert, trainer)
    assert trainer.fits == 1 and trainer.result.steps == trainer.epochs * trainer.steps_per_epoch
    assert isinstance(candidate, Candidate) and candidate.id == 0
    assert adabert.validate(dict(candidate.arch)) == candidate.arch
    assert searcher.best() == candidate

    state = json.loads(json.dumps(searcher.state_dict()))
    restored = SEARCHERS.get(name)(seed=7)
    restored.load_state_dict(state)
    assert restored.best() == candidate
