"""Contract tests run over every registered searcher (Optuna's
``pytest_samplers``: one test suite run over every sampler).

Multi-trial searchers are sampler factories: their samplers pass Optuna's own sampler
test cases (those that apply to categorical and integer spaces, listed below), and each
runs studies on a tiny six-architecture space with the cost evaluator (milliseconds).
One-shot searchers search the small AdaBERT space with a synthetic trainer (random
tokens, cross-entropy) for a few steps. Planned searchers plan over the run parts of the
small ``bert-subnet`` space (its truncations, its blockwise table, a budget) that the
methods hand them. A new searcher of any kind gets these checks by registering itself.
"""

from __future__ import annotations

import json
import subprocess
import sys

import optuna
import pytest
import torch
from optuna.distributions import CategoricalDistribution, IntDistribution
from optuna.testing.pytest_samplers import (
    BasicSamplerTestCase,
    MultiObjectiveSamplerTestCase,
    RelativeSamplerTestCase,
    SingleOnlySamplerTestCase,
)
from optuna.trial import TrialState

from evaluators.base import EvalResult, Objective
from evaluators.costs import CostEvaluator
from nas.builder import build_supernet
from nas.choices import Categorical
from nas.cost import batch_for
from nas.errors import NasError
from nas.graph import ChoiceRef, GraphBuilder
from nas.space import SearchSpace, get_space, small_config
from searchers.base import (
    SEARCHERS,
    Candidate,
    MultiTrialSearcher,
    OneShotSearcher,
    Plan,
    PlannedSearcher,
    SearcherError,
    resolve_searcher,
    run_steps,
    searcher_names,
)
from searchers.proposals import StudySearch
from searchers.results import best_trial, pareto_front

MULTI_TRIAL = searcher_names("multi-trial")
ONE_SHOT = searcher_names("one-shot")
PLANNED = searcher_names("planned")


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


def test_the_registry_lists_all_three_kinds():
    assert "random" in MULTI_TRIAL and "differentiable" in ONE_SHOT
    assert {"knapsack", "truncation"} <= set(PLANNED)
    assert set(MULTI_TRIAL) | set(ONE_SHOT) | set(PLANNED) == set(searcher_names())
    for name in MULTI_TRIAL:
        assert issubclass(SEARCHERS.get(name), MultiTrialSearcher)
        assert SEARCHERS.get(name).kind == "multi-trial"
    for name in ONE_SHOT:
        assert issubclass(SEARCHERS.get(name), OneShotSearcher)
        assert SEARCHERS.get(name).kind == "one-shot"
    for name in PLANNED:
        assert issubclass(SEARCHERS.get(name), PlannedSearcher)
        assert SEARCHERS.get(name).kind == "planned"
    with pytest.raises(SearcherError, match="unknown searcher kind"):
        searcher_names("grid")


def test_declared_searchers_register_themselves_with_the_declared_kind():
    for name, (module, kind) in SEARCHERS._declared.items():
        __import__(module)
        assert SEARCHERS.get(name).kind == kind == SEARCHERS.kind_of(name)


def test_listing_searchers_does_not_import_torch():
    code = ("import sys; from searchers.base import searcher_names; "
            "print(searcher_names('one-shot'), searcher_names('multi-trial'), "
            "searcher_names('planned'), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{ONE_SHOT} {MULTI_TRIAL} {PLANNED} False"


def test_every_kind_resolves_through_one_function_with_its_settings():
    """``resolve_searcher`` serves the three kinds: a multi-trial searcher's settings are
    its sampler's options, a planned one's its typed settings (defaults filled in), and
    a wrong name, kind, setting or a missing run part is one line."""
    tpe = resolve_searcher({"name": "tpe", "settings": {"n_startup_trials": 3}})
    assert tpe.kind == "multi-trial" and tpe.build().options == {"n_startup_trials": 3}
    knapsack = resolve_searcher("knapsack", settings={"cost": "params"})
    assert knapsack.kind == "planned" and knapsack.build().settings.cost == "params"
    assert knapsack.settings.ratios == []
    assert resolve_searcher("differentiable").kind == "one-shot"
    cases = [(dict(choice="tpee"), r"searcher: unknown searcher 'tpee'; did you mean 'tpe'"),
             (dict(choice="knapsack", settings={"cost": "flops"}),
              r"searcher knapsack settings: cost must be latency_ms or params"),
             (dict(choice="differentiable", kinds=("multi-trial",)),
              r"searcher: differentiable is a one-shot searcher, and this run takes "
              r"multi-trial ones"),
             (dict(choice={"name": "differentiable", "settings": {"betta": 1}}),
              r"searcher differentiable settings: unknown key 'betta'"),
             (dict(choice="knapsack", provided=("space", "budget"), where="--searcher"),
              r"--searcher knapsack needs the sorted teacher's blockwise table .* which only "
              r"method compress makes"),
             (dict(choice={"name": "tpe", "size": 3}), r"is neither a searcher's name")]
    for keywords, message in cases:
        with pytest.raises(NasError, match=message) as err:
            resolve_searcher(keywords.pop("choice"), **keywords)
        assert "\n" not in str(err.value)


# ---------------------------------------------------------------------------
# multi-trial: Optuna's sampler test cases
# ---------------------------------------------------------------------------
#
# A multi-trial searcher is a sampler factory, so its sampler must pass the sampler
# contract Optuna ships (optuna.testing.pytest_samplers), with the cases that apply to our
# spaces: a SpaceBridge makes every choice a CategoricalDistribution or an
# IntDistribution (evenly spaced integers, step >= 1), never a float one. Used:
#
# * BasicSamplerTestCase: test_int, test_categorical, test_conditional_sample_independent
#   as written; test_single_parameter_objective and
#   test_combination_of_different_distributions_objective with the integer and
#   categorical suggest methods only;
# * RelativeSamplerTestCase (samplers that propose all parameters together: RELATIVE):
#   test_sample_relative_categorical as written; test_sample_relative_numerical and
#   test_sample_relative_mixed with integer distributions only;
# * MultiObjectiveSamplerTestCase (searchers with multi_objective): its integer and
#   categorical distributions;
# * SingleOnlySamplerTestCase (searchers without multi_objective): as written (its float
#   distribution is never sampled: the sampler must refuse the two objectives first).
#
# Not used, because they need float distributions our spaces never produce: test_float,
# test_nan_objective_value, test_partial_fixed_sampling, test_sample_single_distribution
# (its d, e, f), test_conditional_parameter_objective, test_dynamic_range_objective and
# test_trial_relative_params (suggest_float throughout), and the float and log-float
# parametrisations of the cases above.

#: options that take each sampler past its start-up phase, so that the cases exercise its
#: model, not only its random start (Optuna's own tests use n_startup_trials=0)
MODEL_OPTIONS = {"tpe": {"n_startup_trials": 0}, "gp": {"n_startup_trials": 0},
                 "nsga2": {"population_size": 4},
                 "lanas": {"n_startup_trials": 1, "rebuild_every": 1, "leaf_size": 1},
                 "lamoo": {"n_startup_trials": 1, "rebuild_every": 1, "leaf_size": 1},
                 "wl-bo": {"n_startup_trials": 1}, "local-search": {"n_startup_trials": 1},
                 "regularized-evolution": {"population_size": 2, "sample_size": 2}}
#: searchers whose sampler proposes all of a trial's parameters at once (sample_relative);
#: random draws each alone, NSGA-II's first generation too. A new searcher that samples
#: relatively belongs here.
#: GP's cases run in the slow suite: its ask is the slowest (about 1 s each, 10 s in all);
#: its basic cases and the study-level contract stay in the default run
RELATIVE = [pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n
            for n in ("tpe", "gp", "lanas", "lamoo", "wl-bo", "local-search",
                      "regularized-evolution") if n in MULTI_TRIAL]
MULTI_OBJECTIVE = [n for n in MULTI_TRIAL if SEARCHERS.get(n).multi_objective]
SINGLE_ONLY = [n for n in MULTI_TRIAL if not SEARCHERS.get(n).multi_objective]
INTEGERS = [IntDistribution(3, 10), IntDistribution(1, 100, log=True),
            IntDistribution(3, 9, step=2)]
CATEGORICALS = [CategoricalDistribution((1, 2, 3)), CategoricalDistribution(("a", "b", "c")),
                CategoricalDistribution((1, "a"))]


def suggest_methods(name):
    """Optuna's parametrize_suggest_method, integer and categorical methods only."""
    return pytest.mark.parametrize(f"suggest_method_{name}", [
        lambda t: t.suggest_int(name, 0, 10), lambda t: t.suggest_categorical(name, [0, 1, 2]),
        lambda t: t.suggest_int(name, 1, 10, log=True)], ids=["int", "categorical", "int-log"])


def sampler_of(name):
    """Optuna's ``sampler`` fixture: a callable building the searcher's sampler (what a
    study of ours runs, without a space bridge: the cases bring their distributions)."""
    return lambda: SEARCHERS.get(name)(**MODEL_OPTIONS.get(name, {})).sampler(seed=0)


class TestOptunaBasicCases(BasicSamplerTestCase):
    @pytest.fixture(params=MULTI_TRIAL)
    def sampler(self, request):
        return sampler_of(request.param)

    test_float = None
    test_nan_objective_value = None
    test_partial_fixed_sampling = None
    test_sample_single_distribution = None
    test_conditional_parameter_objective = None
    test_dynamic_range_objective = None

    @suggest_methods("x")
    def test_single_parameter_objective(self, sampler, suggest_method_x):
        super().test_single_parameter_objective(sampler, suggest_method_x)

    @suggest_methods("x")
    @suggest_methods("y")
    def test_combination_of_different_distributions_objective(self, sampler, suggest_method_x,
                                                              suggest_method_y):
        super().test_combination_of_different_distributions_objective(
            sampler, suggest_method_x, suggest_method_y)


class TestOptunaRelativeCases(RelativeSamplerTestCase):
    @pytest.fixture(params=RELATIVE)
    def sampler(self, request):
        return sampler_of(request.param)

    test_trial_relative_params = None

    @pytest.mark.parametrize("x_distribution", INTEGERS)
    @pytest.mark.parametrize("y_distribution", INTEGERS)
    def test_sample_relative_numerical(self, sampler, x_distribution, y_distribution):
        super().test_sample_relative_numerical(sampler, x_distribution, y_distribution)

    @pytest.mark.parametrize("x_distribution", INTEGERS)
    def test_sample_relative_mixed(self, sampler, x_distribution):
        super().test_sample_relative_mixed(sampler, x_distribution)


class TestOptunaMultiObjectiveCases(MultiObjectiveSamplerTestCase):
    @pytest.fixture(params=MULTI_OBJECTIVE)
    def sampler(self, request):
        return sampler_of(request.param)

    @pytest.mark.parametrize("distribution", [*INTEGERS, IntDistribution(-10, 10),
                                              IntDistribution(-10, 0, step=2), *CATEGORICALS])
    def test_multi_objective_sample_independent(self, sampler, distribution):
        super().test_multi_objective_sample_independent(sampler, distribution)


@pytest.mark.skipif(not SINGLE_ONLY, reason="every registered searcher is multi-objective")
class TestOptunaSingleOnlyCases(SingleOnlySamplerTestCase):
    @pytest.fixture(params=SINGLE_ONLY)
    def sampler(self, request):
        return sampler_of(request.param)


# ---------------------------------------------------------------------------
# multi-trial: the study-level contract
# ---------------------------------------------------------------------------


PARAMS = (Objective("params", "minimize"),)
#: sampler options that leave the start-up phase within the tiny space's six trials
STUDY_OPTIONS = {"tpe": {"n_startup_trials": 3}, "gp": {"n_startup_trials": 4},  # 1 GP ask: 1-2 s
                 "nsga2": {"population_size": 4},
                 "lanas": {"n_startup_trials": 3, "rebuild_every": 1, "leaf_size": 2},
                 "lamoo": {"n_startup_trials": 3, "rebuild_every": 1, "leaf_size": 2},
                 "wl-bo": {"n_startup_trials": 2},
                 "regularized-evolution": {"population_size": 3, "sample_size": 2}}


def make(name, space, seed=0, objectives=PARAMS, **kwargs):
    return StudySearch.open(space, name, seed=seed, objectives=objectives, **kwargs)


def run(search, evaluator, n):
    for _ in range(n):
        c = search.ask()
        search.tell(c, evaluator(c.arch))


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_a_study_of_each_searcher_holds_n_complete_trials_of_valid_architectures(
        name, space, evaluator, tmp_path):
    """Through the study loop (journal storage, trial records), with the cost evaluator:
    N complete trials whose parameters decode to valid architectures of the space, the
    same for the same seed, and Optuna's best trial is the best evaluation."""
    from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study
    from searchers.optuna_bridge import SpaceBridge

    def study_in(folder, seed=0):
        spec = StudySpec.for_run(
            searcher=name, name="contract", run_dir=tmp_path / folder, seed=seed,
            settings=StudySettings(samplers={name: STUDY_OPTIONS.get(name, {})}),
            options=StudyOptions(n_trials=5), default_trials=5, seq_len=8)
        return run_study(spec, space, evaluator)

    study = study_in("a")
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 5 and all(t.user_attrs["outcome"] == "complete" for t in done)
    bridge = SpaceBridge(space)
    for t in done:
        arch = space.validate(dict(bridge.architecture(t.params)))
        assert arch.id == t.user_attrs["arch_id"] and dict(arch) == t.user_attrs["arch"]
        assert t.values == list(evaluator(arch).values)
    assert len({t.user_attrs["arch_id"] for t in done}) == 5  # no repeats in 6 architectures
    assert study.best_trial.value == min(t.value for t in done)
    again = study_in("b")
    assert [t.params for t in again.trials] == [t.params for t in study.trials]
    assert [t.params for t in study_in("c", seed=1).trials] != [t.params for t in study.trials]


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_ask_returns_valid_candidates_numbered_by_their_trials(name, space):
    search = make(name, space)
    candidates = [search.ask() for _ in range(5)]
    numbers = [c.id for c in candidates]
    assert numbers == sorted(set(numbers))
    trials = {t.number: t for t in search.study.trials}
    for c in candidates:
        assert isinstance(c, Candidate) and space.validate(dict(c.arch)) == c.arch
        assert c.arch.space == "tiny" and trials[c.id].user_attrs["arch_id"] == c.arch.id
        assert trials[c.id].params == c.params and trials[c.id].state == TrialState.RUNNING
        assert Candidate.from_dict(json.loads(json.dumps(c.to_dict()))) == c


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_failed_and_pruned_results_are_never_best(name, space, evaluator):
    search = make(name, space)
    candidates = [search.ask() for _ in range(6)]
    results = {c.id: evaluator(c.arch) for c in candidates}
    ranked = sorted(candidates, key=lambda c: (results[c.id].values[0], c.id))
    # the two smallest are told as failed and pruned: they must not win
    search.tell(ranked[0], EvalResult.failed("diverged", costs=results[ranked[0].id].costs))
    search.tell(ranked[1], EvalResult.pruned(intermediate=[(0, 1.0)]))
    for c in ranked[2:]:
        search.tell(c, results[c.id])
    study = search.study
    assert study.best_trial.number == ranked[2].id
    assert study.best_trial.values == list(results[ranked[2].id].values)
    states = {t.number: t.state for t in study.trials}
    assert [states[ranked[0].id], states[ranked[1].id]] == [TrialState.FAIL, TrialState.PRUNED]
    assert {t.number for t in study.best_trials}.isdisjoint({ranked[0].id, ranked[1].id})


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_best_follows_the_direction(name, space, evaluator):
    for direction, pick in (("minimize", min), ("maximize", max)):
        search = make(name, space, objectives=(Objective("params", direction),))
        run(search, evaluator, 6)
        done = search.study.get_trials(states=(TrialState.COMPLETE,))
        best = pick(t.value for t in done)
        assert search.study.best_trial.value == best
        # on a tie the earliest trial wins
        assert search.study.best_trial.number == min(t.number for t in done if t.value == best)


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_best_needs_a_complete_result_and_tell_checks_its_input(name, space):
    search = make(name, space)
    with pytest.raises(NasError, match="no complete trial"):
        best_trial(search.study)
    a, b = search.ask(), search.ask()
    search.tell(b, EvalResult.failed("out of memory"))  # any order
    with pytest.raises(NasError, match="no complete trial"):
        best_trial(search.study)
    with pytest.raises(SearcherError, match="already told"):
        search.tell(b, EvalResult.failed("again"))
    with pytest.raises(SearcherError, match="not asked"):
        search.tell(Candidate(99, a.arch), EvalResult((1.0,)))
    other = next(x for x in (space.default(), space.sample(1), space.sample(2))
                 if x.id != a.arch.id)
    with pytest.raises(SearcherError, match="architecture differs"):
        search.tell(Candidate(a.id, other), EvalResult((1.0,)))
    with pytest.raises(SearcherError, match="objectives"):
        search.tell(a, EvalResult((1.0, 2.0)))
    search.tell(a, EvalResult((3.0,)))
    assert best_trial(search.study).number == a.id
    assert not search.study.get_trials(states=(TrialState.RUNNING,))


@pytest.mark.parametrize("name", MULTI_TRIAL)
def test_same_seed_same_candidates(name, space):
    first, second = make(name, space, seed=5), make(name, space, seed=5)
    assert [first.ask() for _ in range(8)] == [second.ask() for _ in range(8)]


# GP's reopened study runs in the slow suite (its ask is the slowest, ~2 s here); its study
# contract above stays in the default run
@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n for n in MULTI_TRIAL])
def test_a_search_reopened_on_its_storage_continues_like_the_uninterrupted_one(
        name, space, evaluator):
    """The study is the whole state: a new search (new sampler, new process) on the same
    stored study proposes what the uninterrupted search did."""
    options = STUDY_OPTIONS.get(name, {})
    straight = make(name, space, seed=1, sampler_options=options)
    run(straight, evaluator, 6)
    storage = optuna.storages.InMemoryStorage()
    first = make(name, space, seed=1, sampler_options=options, storage=storage,
                 study_name="s")
    run(first, evaluator, 3)
    pending = first.ask()  # asked, not told when the first search goes away
    reopened = make(name, space, seed=1, sampler_options=options, storage=storage,
                    study_name="s")
    reopened.tell(pending, evaluator(pending.arch))
    run(reopened, evaluator, 2)
    assert [t.params for t in reopened.study.trials] == [t.params for t in straight.study.trials]
    with pytest.raises(SearcherError, match="optimises"):
        make(name, space, objectives=(Objective("params", "maximize"),), storage=storage,
             study_name="s")


def dominates(a, b, signs):
    a = [s * x for s, x in zip(signs, a, strict=True)]
    b = [s * x for s, x in zip(signs, b, strict=True)]
    return all(x >= y for x, y in zip(a, b, strict=True)) and a != b


@pytest.mark.parametrize("name", MULTI_TRIAL)
@pytest.mark.parametrize("directions", [("minimize", "minimize"), ("maximize", "minimize")])
def test_two_objectives_give_optunas_non_dominated_front(name, directions, space):
    objectives = (Objective("a", directions[0]), Objective("b", directions[1]))
    if not SEARCHERS.get(name).multi_objective:  # it refuses them, in one line
        with pytest.raises(SearcherError, match="single-objective") as err:
            make(name, space, objectives=objectives)
        assert "\n" not in str(err.value)
        return
    search = make(name, space, objectives=objectives)
    told = [(1, 5), (2, 4), (3, 3), (2, 5), (4, 4), (1, 6), (3, 3)]
    for values in told:
        search.tell(search.ask(), EvalResult(values))
    search.tell(search.ask(), EvalResult.failed("crashed"))  # failures have no values
    with pytest.raises(NasError, match="no single best trial"):
        best_trial(search.study)
    signs = [o.sign for o in objectives]
    front = pareto_front(search.study)
    front_values = [tuple(t.values) for t in front]
    assert [t.number for t in front] == sorted(t.number for t in front)
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
    search = make("random", space)
    first = [search.ask().arch for _ in range(6)]
    assert len({a.id for a in first}) == space.size() == 6
    assert search.ask().arch in first  # exhausted: repeats are allowed, not an error
    fixed = get_space("bert", **small_config("bert"))
    only = make("random", fixed)
    assert only.ask().arch == only.ask().arch == fixed.default()


def test_a_one_shot_searcher_or_a_bad_option_is_refused_in_one_line(space):
    with pytest.raises(SearcherError, match="not a multi-trial searcher; use one of"):
        make("differentiable", space)
    with pytest.raises(SearcherError, match="bad sampler option") as err:
        make("tpe", space, sampler_options={"n_startup": 3})
    assert "\n" not in str(err.value)


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


# ---------------------------------------------------------------------------
# planned
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_parts():
    return planned_run_parts()


def planned_run_parts():
    """The run parts the methods hand a planned searcher (``provided_searcher_parts``),
    for the small ``bert-subnet`` space: the space, a budget, the trial count, the
    constraints, the final ratios, its truncations and the blockwise table of a random
    teacher (with a made-up latency model: no timing)."""
    from evaluators.blockwise import block_table
    from searchers.optuna_bridge import Budget
    from spaces.bert_subnet import truncation
    from tests.test_blockwise import _batches, fake_latency

    bert = get_space("bert-subnet", **small_config("bert-subnet"))
    torch.manual_seed(0)
    supernet = build_supernet(bert).eval()
    layers = int(bert.config["num_hidden_layers"])
    return {"space": bert, "budget": Budget(seq_len=16), "n_trials": 3,
            "constraints": {"max_params": None, "max_flops": None, "max_latency_ms": None},
            "final_ratios": [], "truncations": [truncation(bert, k) for k in
                                                range(1, layers + 1)],
            "table": block_table(bert, supernet, _batches(bert), seq_len=16,
                                 latency_fn=fake_latency(bert))}


def _plan(name, parts):
    searcher = resolve_searcher(name, provided=parts).build()
    required, optional = searcher.parts()
    return searcher.plan(**{p: parts[p] for p in (*required, *optional) if p in parts})


@pytest.mark.parametrize("name", PLANNED)
def test_a_planned_searcher_proposes_valid_architectures_the_same_each_time(name, run_parts):
    """Its settings have defaults, the parts it needs are ones a method hands, and its
    plan is a non-empty list of valid architectures of the space, tagged uniquely, with
    JSON-safe facts, and the same plan when asked again (a resumed run re-plans)."""
    from recipes.compress import CompressConfig

    cls = SEARCHERS.get(name)
    required, optional = cls.parts()
    assert set(required) | set(optional) <= set(CompressConfig.provided_searcher_parts)
    assert cls.needs or not set(required) - {"space", "budget", "n_trials", "constraints"}
    plan = _plan(name, run_parts)
    assert isinstance(plan, Plan) and plan.queue
    tags = [tag for tag, _ in plan.queue]
    assert len(set(tags)) == len(tags) and all(isinstance(t, str) and t for t in tags)
    space = run_parts["space"]
    for _, arch in plan.queue:
        assert space.validate(dict(arch)) == arch
    assert json.loads(json.dumps(plan.info)) == plan.info
    assert [(t, a.id) for t, a in _plan(name, run_parts).queue] == [
        (t, a.id) for t, a in plan.queue]


@pytest.mark.parametrize("name", PLANNED)
def test_a_planned_searchers_list_runs_as_a_study_of_queued_trials(name, run_parts, tmp_path):
    """The list is queued on a study (:mod:`searchers.queued`), one complete trial per
    architecture, in the plan's order, tagged by the plan."""
    from searchers.queued import QueuedSearcher

    plan = _plan(name, run_parts)
    space = run_parts["space"]
    search = StudySearch.open(space, QueuedSearcher(name), seed=0,
                              objectives=(Objective("params", "minimize"),))
    costs = CostEvaluator(space, ("params",), seq_len=8)
    for tag, arch in plan.queue:
        search.enqueue(arch, tag)
    for _, arch in plan.queue:
        candidate = search.ask()
        assert candidate.arch == arch
        search.tell(candidate, costs(candidate.arch))
    trials = search.study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * len(plan.queue)
    assert [t.user_attrs["seed"] for t in trials] == [tag for tag, _ in plan.queue]
