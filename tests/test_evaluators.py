"""Evaluators: the result and trial contract over every registered evaluator, then the
cost evaluator and the penalty wrapper worked out by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from evaluators.base import (
    EVALUATORS,
    EvalResult,
    Evaluator,
    EvaluatorError,
    NullTrial,
    Objective,
    OptunaTrial,
    Status,
    Trial,
    TrialPruned,
    run_evaluation,
)
from evaluators.costs import CostEvaluator
from evaluators.penalty import PenaltyEvaluator
from evaluators.tabular import TabularEvaluator
from nas.cost import count_costs
from nas.errors import NasError
from nas.space import get_space, small_config

SEQ = 16


@pytest.fixture(scope="module")
def space():
    return get_space("adabert", **small_config("adabert"))


@pytest.fixture(scope="module")
def arch(space):
    return space.sample(0)


class FakeTraining(Evaluator):
    """Reports three "epochs" of accuracy, honours pruning, then returns the accuracy and
    a measured latency; can crash or diverge on request."""

    objectives = (Objective("accuracy", "maximize"),)

    def __init__(self, accuracy=0.8, latency_ms=30.0, crash=None, intermediate_step=True):
        self.accuracy, self.latency_ms, self.crash = accuracy, latency_ms, crash
        self.calls = 0

    def evaluate(self, arch, trial=None):
        self.calls += 1
        for epoch in range(3):
            if self.crash is not None and epoch == 1:
                raise self.crash
            trial.report(epoch, self.accuracy * (epoch + 1) / 3)
            if trial.should_prune():
                raise TrialPruned(f"pruned at epoch {epoch}")
        return EvalResult((self.accuracy,), metrics={"f1": 0.7},
                          costs={"latency_ms": self.latency_ms})


class PruneAfter(NullTrial):
    """A trial whose pruner stops the evaluation after ``n`` reports."""

    def __init__(self, n=1):
        super().__init__(number=3)
        self.n = n

    def should_prune(self):
        return len(self.reports) >= self.n


def _batch(space, seed, n=4):
    import torch

    from nas.cost import batch_for

    g = torch.Generator().manual_seed(seed)
    batch = batch_for(space, n, 8)
    ids = torch.randint(0, space.config["vocab_size"], batch["input_ids"].shape, generator=g)
    return {**batch, "input_ids": ids, "labels": torch.randint(0, 2, (n,), generator=g)}


def _retrain(space, inner, workdir=None):
    """The distilled-retrain evaluator on random token batches (2 epochs of 2 steps)."""
    import torch

    from evaluators.retrain import DistilledRetrainEvaluator, RetrainTask
    from nas.train import TrainSettings

    task = RetrainTask(
        train_batches=lambda epoch, start: [_batch(space, 100 * epoch + i)
                                            for i in range(start, 2)],
        steps_per_epoch=2,
        loss=lambda model, b: torch.nn.functional.cross_entropy(model(b).logits, b["labels"]),
        val_batches=[_batch(space, 7)], test_batches=[_batch(space, 8)],
        latency_batches={1: _batch(space, 9, n=1)}, seq_len=SEQ)
    return DistilledRetrainEvaluator(space, task, TrainSettings(epochs=2, lr=1e-2), seed=0,
                                     workdir=workdir, latency_repeats=1)


def _warmup_kd(space, inner, inherit=True, text=True):
    """The warm-up-KD proxy on random token batches: inherits from a supernet of the test
    space (random weights stand in for a warmed-up one), 2 steps of a stand-in text loss,
    then 2 task steps scored after each step."""
    import torch

    from evaluators.warmup_kd import WarmupKDEvaluator, WarmupKDTask
    from nas.builder import build_supernet
    from nas.train import TrainSettings

    def ce(model, b):
        return torch.nn.functional.cross_entropy(model(b).logits, b["labels"])

    task = WarmupKDTask(
        supernet=(lambda: build_supernet(space)) if inherit else None,
        task_batches=lambda epoch, start: [_batch(space, 10 + i) for i in range(start, 2)],
        task_steps_per_epoch=2, task_loss=ce, val_batches=[_batch(space, 7)],
        text_batches=lambda epoch, start: [_batch(space, 20 + i) for i in range(start, 2)],
        text_steps_per_epoch=2, text_loss=lambda model, b: model(b).logits.pow(2).mean(),
        latency_batches={1: _batch(space, 9, n=1)}, seq_len=SEQ)
    return WarmupKDEvaluator(space, task, TrainSettings(epochs=1, lr=1e-2),
                             TrainSettings(epochs=1, lr=1e-2) if text else None, seed=0,
                             eval_every=1, latency_repeats=1)


def _transfer_space():
    return get_space("mobilebert-grid", vocab_size=60, embedding_size=8, hidden_size=16,
                     num_hidden_layers=2, intra_bottleneck_size=(8, 16),
                     num_attention_heads=(2, 4), num_feedforward_networks=(1, 2),
                     intermediate_size=16)


def _transfer(space):
    """The progressive-transfer evaluator: a 2-layer student of width 16 learning a random
    bert teacher of its depth and width (4 heads) on random batches."""
    import torch

    from evaluators.transfer import TransferEvaluator, TransferTask
    from nas.builder import build_child
    from nas.train import TrainSettings

    torch.manual_seed(0)
    teacher = build_child(get_space("bert", vocab_size=60, hidden_size=16, num_hidden_layers=2,
                                    num_attention_heads=4, intermediate_size=24)).eval()

    def batch(seed, n=4):
        return {**_batch(space, seed, n), "index": torch.arange(n)}

    task = TransferTask(
        teacher=teacher, batches=lambda stage: (lambda epoch, start: [batch(epoch)][start:]),
        steps_per_epoch=1, logits=np.zeros((4, 2), dtype=np.float32),
        val_batches=[batch(7)], test_batches=[batch(8)], latency_batches={1: batch(9, 1)},
        seq_len=SEQ)
    return TransferEvaluator(space, task, TrainSettings(lr=1e-3),
                             TrainSettings(epochs=2, lr=1e-3), latency_repeats=1)


def _inherited(space):
    """The inherited-weights scorer on a supernet of the test space (random weights stand
    in for a trained one)."""
    import torch

    from evaluators.inherited import InheritedEvaluator, InheritedTask
    from nas.builder import build_supernet

    torch.manual_seed(0)
    return InheritedEvaluator(space, InheritedTask(supernet=build_supernet(space),
                                                   val_batches=[_batch(space, 7)], seq_len=SEQ))


def _blockwise(space):
    """The blockwise proxy on a table of a random bert-subnet supernet (the teacher)."""
    import torch

    from evaluators.blockwise import BlockwiseEvaluator, block_table
    from nas.builder import build_supernet

    torch.manual_seed(0)
    supernet = build_supernet(space).eval()
    return BlockwiseEvaluator(space, block_table(space, supernet, [_batch(space, 7)],
                                                 seq_len=SEQ))


def _subnet_space():
    return get_space("bert-subnet", **small_config("bert-subnet"))


def _inherited_kd(space, hidden_weight=1.0, score="metric"):
    """The inherited-kd evaluator on a random bert-subnet supernet (random weights stand
    in for a sorted teacher): 2 epochs of 2 steps of logits CE plus the hidden-state MSE."""
    import torch

    from evaluators.inherited_kd import InheritedKDEvaluator, InheritedKDTask
    from evaluators.settings import InheritedKDSettings
    from nas.builder import build_supernet

    torch.manual_seed(0)
    task = InheritedKDTask(
        supernet=build_supernet(space),
        train_batches=lambda epoch, start: [_batch(space, 30 + 10 * epoch + i)
                                            for i in range(start, 2)],
        steps_per_epoch=2,
        logits_loss=lambda logits, b: torch.nn.functional.cross_entropy(logits, b["labels"]),
        val_batches=[_batch(space, 7)], test_batches=[_batch(space, 8)],
        latency_batches={1: _batch(space, 9, n=1)}, seq_len=SEQ)
    return InheritedKDEvaluator(space, task, InheritedKDSettings(epochs=2, lr=1e-2),
                                hidden_weight=hidden_weight, score=score, seed=0,
                                latency_repeats=1)


OWN_SPACES = {"mobilebert": _transfer_space, "bert-subnet": _subnet_space}


# Every registered evaluator needs an entry here: a small instance on the test space,
# and whether it wraps an inner evaluator (then ``inner`` is passed in); a third item
# names the case's own space ("mobilebert": :func:`_transfer_space`).
CASES = {
    "costs": (lambda space, inner: CostEvaluator(space, ("params", "flops"), seq_len=SEQ),
              False),
    "penalty": (lambda space, inner: PenaltyEvaluator(
        inner or CostEvaluator(space, ("params",), seq_len=SEQ), space, seq_len=SEQ,
        max_params=1e9, targets={"params": 1e3}, penalty_weight=1e-3,
        extra_objectives=("flops",)), True),
    "distilled-retrain": (lambda space, inner: _retrain(space, inner), False),
    "warmup-kd": (lambda space, inner: _warmup_kd(space, inner), False),
    "inherited": (lambda space, inner: _inherited(space), False),
    # inherits from a teacher-shaped supernet: the bert-subnet space of a tiny teacher
    "inherited-kd": (lambda space, inner: _inherited_kd(space), False, "bert-subnet"),
    # needs a MobileBERT-family student and a teacher of its depth and width: own space
    "progressive-transfer": (lambda space, inner: _transfer(space), False, "mobilebert"),
    # scores bert-subnet children from a table of its teacher: own space
    "blockwise": (lambda space, inner: _blockwise(space), False, "bert-subnet"),
    # looks up recorded rows: a tabular benchmark's space
    "tabular": (lambda space, inner: TabularEvaluator(space, ("sst", "params"), noise_sd=0.4,
                                                      seed=3), False, "nas-bench-bert"),
}

def test_every_registered_evaluator_has_a_contract_case():
    assert set(EVALUATORS.names()) == set(CASES)


@pytest.fixture(params=sorted(CASES))
def case(request, space, arch):
    """``(factory, wraps, space, arch)``: the case's own space and an architecture of it,
    or the module's."""
    factory, wraps, *own = CASES[request.param]
    assert issubclass(EVALUATORS.get(request.param), Evaluator)
    if own:
        space = OWN_SPACES[own[0]]() if own[0] in OWN_SPACES else get_space(own[0])
        arch = space.sample(0)
    return factory, wraps, space, arch


def test_values_match_the_objectives(case):
    _, _, space, arch = case
    evaluator = case[0](space, None)
    assert evaluator.objectives and all(isinstance(o, Objective) for o in evaluator.objectives)
    result = evaluator(arch)
    assert result.status is Status.COMPLETE and result.reason is None
    assert len(result.values) == len(evaluator.objectives)
    assert all(math.isfinite(v) for v in result.values)
    assert result.seconds > 0
    assert EvalResult.from_dict(json.loads(json.dumps(result.to_dict()))) == result


def test_reports_reach_the_trial_and_the_result(case):
    _, _, space, arch = case
    evaluator = case[0](space, None)
    trial = NullTrial(number=4)
    result = evaluator(arch, trial)
    assert trial.reports and result.intermediate == trial.reports
    assert isinstance(trial, Trial)


def test_a_pruning_trial_gives_a_pruned_result(case):
    _, _, space, arch = case
    evaluator = case[0](space, None)
    trial = PruneAfter(1)
    result = evaluator(arch, trial)
    assert result.status is Status.PRUNED and result.values == () and result.reason
    assert result.intermediate == trial.reports and len(trial.reports) == 1


def test_a_crash_inside_gives_a_failed_result(case):
    _, _, space, arch = case
    factory, wraps = case[:2]
    if not wraps:
        pytest.skip("wraps no inner evaluator (run_evaluation's own tests cover crashes)")
    inner = FakeTraining(crash=RuntimeError("CUDA out of memory.\nTried to allocate 2 GiB"))
    result = factory(space, inner)(arch)
    assert result.status is Status.FAILED and result.values == ()
    assert result.reason == "RuntimeError: CUDA out of memory. Tried to allocate 2 GiB"
    assert result.intermediate == [(0, pytest.approx(0.8 / 3))]


def _training_parts(evaluator):
    """A training evaluator's parts, read back from an instance: ``space``, its task's
    own fields and the run options it was given."""
    required, optional = type(evaluator).parts()
    parts = {n: getattr(evaluator.task, n) for n in (*required, *optional)
             if hasattr(evaluator.task, n)}
    options = {n: getattr(evaluator, n) for n in type(evaluator).run_options}
    if parts.get("supernet") is not None:  # the same one: a new one has other random weights
        parts["supernet"] = evaluator.supernet
    return {**parts, **options, "space": evaluator.space}


# The settings mapping (as an experiment file gives it) and the parts that build each
# contract case by name; the built evaluator must score like the constructed one.
BY_NAME = {
    "costs": ({"objectives": ["params", "flops"]}, lambda ev: {"space": ev.space}),
    "penalty": ({"max_params": 1e9, "targets": {"params": 1e3}, "penalty_weight": 1e-3,
                 "extra_objectives": ["flops"]},
                lambda ev: {"space": ev.space, "inner": ev.inner}),
    "distilled-retrain": ({"epochs": 2, "lr": 1e-2}, _training_parts),
    "warmup-kd": ({"task": {"epochs": 1, "lr": 1e-2}, "text": {"epochs": 1, "lr": 1e-2},
                   "eval_every": 1}, _training_parts),
    "progressive-transfer": ({"transfer_settings": {"lr": 1e-3},
                              "prediction_settings": {"epochs": 2, "lr": 1e-3}},
                             _training_parts),
    "inherited": (None, lambda ev: {"space": ev.space, "supernet": ev.task.supernet}),
    "blockwise": (None, lambda ev: {"space": ev.space, "table": ev.table}),
    "inherited-kd": ({"epochs": 2, "lr": 1e-2, "hidden_weight": 1.0}, _training_parts),
    "tabular": ({"objectives": ["sst", "params"], "noise_sd": 0.4},
                lambda ev: {"space": ev.space, "seed": ev.seed}),
}


def test_every_registered_evaluator_builds_by_name_and_scores_like_its_case(case, request):
    from evaluators.base import ScoringData
    from evaluators.build import build_evaluator

    factory, _, space, arch = case
    made = factory(space, None)
    name = request.node.callspec.params["case"]
    settings, parts = BY_NAME[name]
    task = getattr(made, "task", None)  # a plain ScoringData: report batches, init as parts
    data = ScoringData(val_batches=task.val_batches, metric=task.metric,
                       latency_batches=task.latency_batches, seq_len=task.seq_len) \
        if task is not None else ScoringData(val_batches=[], seq_len=SEQ)
    built = build_evaluator(name, settings, data, **parts(made))
    assert type(built) is type(made) and built.objectives == made.objectives
    expected, got = made(arch), built(arch)
    assert got.ok and got.values == expected.values and got.metrics == expected.metrics
    assert got.intermediate == expected.intermediate


def test_building_by_name_names_a_bad_setting_or_part_in_one_line(space):
    from evaluators.base import ScoringData
    from evaluators.build import build_evaluator
    from nas.config import ConfigError
    from nas.errors import RegistryError

    data = ScoringData(val_batches=[], seq_len=SEQ)
    assert build_evaluator("costs", None, data, space=space).objectives[0].name == "params"
    with pytest.raises(ConfigError, match=r"^evaluator 'costs' settings: unknown key "
                                          r"'objective'; known keys: objectives$"):
        build_evaluator("costs", {"objective": ["flops"]}, data, space=space)
    with pytest.raises(ConfigError, match=r"settings\.task: unknown key 'lr_max'; known keys: "
                                          r"batch_size, .*warmup_fraction"):
        build_evaluator("warmup-kd", {"task": {"lr_max": 1.0}}, data, space=space)
    with pytest.raises(ConfigError, match=r"settings\.epochs: expected int, got 'two'"):
        build_evaluator("distilled-retrain", {"epochs": "two"}, data, space=space)
    with pytest.raises(EvaluatorError, match=r"^evaluator 'penalty': missing part 'inner'; "
                                             r"it takes space, inner \(optional: latency_fn\)$"):
        build_evaluator("penalty", {}, data, space=space)
    with pytest.raises(EvaluatorError, match=r"unknown part 'seq_len'"):
        build_evaluator("costs", {}, data, space=space, seq_len=8)
    with pytest.raises(EvaluatorError, match=r"missing part 'train_batches'"):
        build_evaluator("distilled-retrain", {}, data, space=space)
    with pytest.raises(RegistryError, match="did you mean 'costs'"):
        build_evaluator("cost", {}, data, space=space)


def test_an_evaluator_without_settings_is_built_from_its_parts(arch, monkeypatch):
    from evaluators.base import ScoringData
    from evaluators.build import build_evaluator
    from nas.config import ConfigError

    class Fake(FakeTraining):  # takes no settings: built as cls(**parts)
        pass

    assert Fake.parts() == ((), ("accuracy", "latency_ms", "crash", "intermediate_step"))
    monkeypatch.setitem(EVALUATORS._items, "fake-training", Fake)  # undone after the test
    data = ScoringData(val_batches=[])
    built = build_evaluator("fake-training", {}, data, accuracy=0.5)
    assert isinstance(built, Fake) and built(arch).values == (0.5,)
    with pytest.raises(ConfigError, match="unknown key 'lr'; 'fake-training' takes no settings"):
        build_evaluator("fake-training", {"lr": 1.0}, data)


# ---------------------------------------------------------------------------
# run_evaluation and EvalResult
# ---------------------------------------------------------------------------


def test_diverged_and_crashed_evaluations_fail_and_setup_errors_propagate(arch):
    assert FakeTraining(accuracy=float("nan"))(arch).reason == \
        "objective 'accuracy' is nan (diverged)"
    crashed = run_evaluation(FakeTraining(crash=ZeroDivisionError("division by zero")), arch)
    assert crashed.status is Status.FAILED and crashed.reason.startswith("ZeroDivisionError")
    with pytest.raises(NasError, match="no such task"):
        FakeTraining(crash=NasError("no such task 'sst3'"))(arch)

    class TwoValues(FakeTraining):
        def evaluate(self, arch, trial=None):
            return EvalResult((1.0, 2.0))

    with pytest.raises(EvaluatorError, match="2 value"):
        TwoValues()(arch)


def test_results_are_states_not_scores():
    with pytest.raises(EvaluatorError, match="no objective values"):
        EvalResult((0.0,), status="failed")
    with pytest.raises(EvaluatorError, match="complete, failed or pruned"):
        EvalResult(status="crashed")
    with pytest.raises(EvaluatorError, match="direction"):
        Objective("accuracy", "up")
    failed = EvalResult.failed("loss is NaN\n  at step 3 ", costs={"params": 5})
    assert failed.reason == "loss is NaN at step 3" and not failed.ok
    assert len(EvalResult.failed("x" * 1000).reason) == 300
    assert EvalResult.from_dict(failed.to_dict()) == failed
    pruned = EvalResult.pruned(intermediate=[(0, 0.5)])
    assert EvalResult.from_dict(json.loads(json.dumps(pruned.to_dict()))) == pruned
    numpy = EvalResult((np.float32(0.5),), metrics={"acc": np.float64(0.5)},
                       costs={"params": np.int64(7), "by": {"a": np.int64(1)}})
    assert json.loads(json.dumps(numpy.to_dict()))["costs"] == {"params": 7, "by": {"a": 1}}
    with pytest.raises(EvaluatorError, match="unexpected"):
        EvalResult.from_dict({"status": "complete", "score": 1})


def test_optuna_trial_reports_prunes_and_annotates(space, arch):
    optuna = pytest.importorskip("optuna")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    params = count_costs(space, arch, SEQ).params
    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=params - 1))
    trial = study.ask()
    wrapped = OptunaTrial(trial)
    wrapped.set_attr("arch_id", arch.id)
    result = CostEvaluator(space, seq_len=SEQ)(arch, wrapped)
    assert result.status is Status.PRUNED and result.reason == f"pruned on params = {params}"
    assert trial.user_attrs == {"arch_id": arch.id} and wrapped.number == trial.number
    assert study.trials[0].intermediate_values == {0: float(params)}

    study = optuna.create_study(pruner=optuna.pruners.ThresholdPruner(upper=params + 1))
    assert CostEvaluator(space, seq_len=SEQ)(arch, OptunaTrial(study.ask())).ok


# ---------------------------------------------------------------------------
# the cost evaluator
# ---------------------------------------------------------------------------


def test_cost_evaluator_counts_without_building_a_model(space, arch):
    counted = count_costs(space, arch, SEQ)
    result = CostEvaluator(space, ("flops", "params"), seq_len=SEQ)(arch)
    assert result.values == (counted.flops, counted.params)
    assert result.costs["macs"] == counted.macs and "latency_ms" not in result.costs
    timed = CostEvaluator(space, ("params", "latency_ms"), seq_len=SEQ,
                          latency_fn=lambda a: 2.5 * a["depth"])
    assert timed(arch).values == (counted.params, 2.5 * arch["depth"])
    assert timed(arch).costs["latency_ms_predicted"] == 2.5 * arch["depth"]
    assert all(o.direction == "minimize" for o in timed.objectives)
    with pytest.raises(EvaluatorError, match="latency_ms needs a latency_fn"):
        CostEvaluator(space, ("latency_ms",))
    with pytest.raises(EvaluatorError, match="repeat"):
        CostEvaluator(space, ("params", "params"))


# ---------------------------------------------------------------------------
# the penalty wrapper
# ---------------------------------------------------------------------------


def test_hard_ceilings_known_up_front_skip_the_inner_evaluator(space, arch):
    counted = count_costs(space, arch, SEQ)
    for ceiling in ({"max_params": counted.params - 1}, {"max_flops": counted.flops - 1},
                    {"max_latency_ms": 9.0}):
        inner = FakeTraining()
        result = PenaltyEvaluator(inner, space, seq_len=SEQ, latency_fn=lambda a: 10.0,
                                  **ceiling)(arch)
        assert result.status is Status.FAILED and result.reason.startswith("over budget")
        assert inner.calls == 0 and result.costs["params"] == counted.params
    inner = FakeTraining()
    fits = PenaltyEvaluator(inner, space, seq_len=SEQ, max_params=counted.params,
                            max_flops=counted.flops)(arch)
    assert fits.ok and fits.values == (0.8,) and inner.calls == 1


def test_a_measured_latency_is_checked_after_the_inner_run(space, arch):
    inner = FakeTraining(latency_ms=30.0)
    result = PenaltyEvaluator(inner, space, seq_len=SEQ, max_latency_ms=25.0)(arch)
    assert inner.calls == 1 and result.status is Status.FAILED
    assert result.reason == "over budget: latency_ms 30 > max_latency_ms 25"
    assert result.metrics == {"f1": 0.7, "accuracy": 0.8} and len(result.intermediate) == 3
    with pytest.raises(EvaluatorError, match="latency_fn"):
        PenaltyEvaluator(CostEvaluator(space), space, max_latency_ms=25.0)(arch)


def test_soft_penalty_by_hand(space, arch):
    params = count_costs(space, arch, SEQ).params
    # acc − λ·max(0, latency/target − 1): 0.8 − 0.5·(30/20 − 1) = 0.55
    soft = PenaltyEvaluator(FakeTraining(), space, seq_len=SEQ, targets={"latency_ms": 20.0},
                            penalty_weight=0.5)
    assert soft.objectives == (Objective("penalized_accuracy", "maximize"),)
    result = soft(arch)
    assert result.values == (pytest.approx(0.55),) and result.metrics["accuracy"] == 0.8
    under = PenaltyEvaluator(FakeTraining(), space, seq_len=SEQ,
                             targets={"latency_ms": 40.0, "params": params})(arch)
    assert under.values == (0.8,)  # at or under every target: no penalty
    both = PenaltyEvaluator(FakeTraining(), space, seq_len=SEQ,
                            targets={"latency_ms": 20.0, "params": params / 2},
                            penalty_weight={"latency_ms": 0.5, "params": 0.1})(arch)
    assert both.values == (pytest.approx(0.8 - 0.25 - 0.1),)
    # a minimised objective is pushed up: params + 1·(params/(params/2) − 1)
    smaller = PenaltyEvaluator(CostEvaluator(space, seq_len=SEQ), space, seq_len=SEQ,
                               targets={"params": params / 2})(arch)
    assert smaller.values == (pytest.approx(params + 1.0),)


def test_extra_objectives_for_multi_objective_search(space, arch):
    counted = count_costs(space, arch, SEQ)
    multi = PenaltyEvaluator(FakeTraining(), space, seq_len=SEQ,
                             extra_objectives=("latency_ms", "flops"))
    assert [(o.name, o.direction) for o in multi.objectives] == [
        ("accuracy", "maximize"), ("latency_ms", "minimize"), ("flops", "minimize")]
    assert multi(arch).values == (0.8, 30.0, counted.flops)
    predicted = PenaltyEvaluator(FakeTraining(), space, seq_len=SEQ,
                                 extra_objectives=("latency_ms",), latency_fn=lambda a: 7.0)
    result = predicted(arch)
    assert result.values == (0.8, 7.0) and result.costs["latency_ms"] == 30.0
    assert result.costs["latency_ms_predicted"] == 7.0


def test_inner_failures_pass_through_with_costs(space, arch):
    result = PenaltyEvaluator(FakeTraining(accuracy=float("nan")), space, seq_len=SEQ,
                              extra_objectives=("params",))(arch)
    assert result.status is Status.FAILED and "diverged" in result.reason
    assert result.costs["params"] == count_costs(space, arch, SEQ).params
    pruned = PenaltyEvaluator(FakeTraining(), space, seq_len=SEQ)(arch, PruneAfter(2))
    assert pruned.status is Status.PRUNED and len(pruned.intermediate) == 2
    assert pruned.costs["params"] == result.costs["params"]


@pytest.mark.parametrize("kwargs, message", [
    ({"max_params": 0}, "must be positive"),
    ({"targets": {"memory": 1.0}}, "unknown cost 'memory'"),
    ({"extra_objectives": ("energy",)}, "unknown extra objective"),
    ({"targets": {"params": 1.0}, "penalty_weight": {"flops": 1.0}}, "without a target"),
    ({"targets": {"params": 1.0}, "penalty_weight": -1.0}, ">= 0"),
])
def test_penalty_configuration_errors(space, kwargs, message):
    with pytest.raises(EvaluatorError, match=message):
        PenaltyEvaluator(FakeTraining(), space, **kwargs)


def test_soft_targets_need_a_single_inner_objective(space):
    with pytest.raises(EvaluatorError, match="one objective"):
        PenaltyEvaluator(CostEvaluator(space, ("params", "flops")), space,
                         targets={"params": 1.0})
    with pytest.raises(EvaluatorError, match="repeat"):
        PenaltyEvaluator(CostEvaluator(space, ("params",)), space, extra_objectives=("params",))


def test_retrain_writes_weights_scores_test_and_resumes(space, arch, tmp_path):
    import torch
    from safetensors.torch import load_file

    straight = _retrain(space, None, tmp_path / "a")(arch)
    assert straight.ok and {"val_accuracy", "test_accuracy"} <= set(straight.metrics)
    assert straight.costs["params"] == count_costs(space, arch, SEQ).params
    assert straight.costs["latency"]["batch1"]["median_ms"] > 0
    weights = tmp_path / "a" / arch.id / "model.safetensors"
    assert weights.is_file() and not (tmp_path / "a" / arch.id / "checkpoint.safetensors").exists()

    class Stop(Exception):
        pass

    evaluator = _retrain(space, None, tmp_path / "b")
    real_loss = evaluator.task.loss
    calls = {"n": 0}

    def dying(model, batch):
        calls["n"] += 1
        if calls["n"] == 3:  # inside the second epoch, after the first epoch's checkpoint
            raise Stop
        return real_loss(model, batch)

    evaluator.task.loss = dying
    with pytest.raises(Stop):
        evaluator.evaluate(arch)
    evaluator.task.loss = real_loss
    resumed = evaluator(arch)
    assert resumed.values == straight.values and resumed.metrics == straight.metrics
    a, b = load_file(str(weights)), load_file(str(tmp_path / "b" / arch.id / "model.safetensors"))
    assert all(torch.equal(a[k], b[k]) for k in a)


# --------------------------------------------------------------------------- warmup-kd


def test_warmup_kd_inherits_the_supernet_weights_and_scores_its_best_value(space, arch):
    """The candidate starts from the supernet's slices (its first forward equals the
    supernet's at that architecture), is scored after every task step, keeps the best."""
    import torch

    from nas.builder import build_child

    evaluator = _warmup_kd(space, None, text=False)
    supernet = evaluator.supernet()
    child = evaluator.child(space.validate(arch))
    batch = _batch(space, 3)
    supernet.eval()
    child.eval()
    with torch.no_grad():
        assert torch.allclose(child(batch).logits, supernet(batch, arch=arch).logits, atol=1e-6)
    fresh = build_child(space, arch)
    assert any(not torch.equal(a, b) for a, b in zip(fresh.state_dict().values(),
                                                     child.state_dict().values(), strict=True))
    result = evaluator(arch, NullTrial())
    assert result.ok and [s for s, _ in result.intermediate] == [1, 2]
    assert result.values[0] == max(v for _, v in result.intermediate)
    assert result.metrics["val_best"] == result.values[0]
    assert result.costs["inherited"] and result.costs["params"] > 0
    assert result.costs["latency_ms"] > 0 and result.costs["train_steps"] == 2


def test_warmup_kd_scores_a_candidate_the_same_whether_or_not_it_loaded_the_supernet(space,
                                                                                     arch):
    """The first candidate loads the supernet, which draws from the global RNG; its
    training must still start from its own seed, as every later candidate's does (found
    on SST-2: the same architecture scored 83.88 first and 81.38 later)."""
    import dataclasses

    import torch

    evaluator = _warmup_kd(space, None)
    ce = evaluator.task.task_loss
    # a loss that draws from the global RNG, as dropout does
    evaluator.task = dataclasses.replace(evaluator.task, task_loss=lambda model, b: ce(
        model, b) * (1 + torch.rand(())))
    first, again = evaluator(arch), evaluator(arch)
    assert first.metrics["task_kd_loss"] == again.metrics["task_kd_loss"]
    assert first.values == again.values


def test_warmup_kd_without_warm_up_and_a_diverging_candidate(space, arch):
    """No supernet: the candidate's own initialisation; a NaN loss: a failed result
    (the paper's score 0), not an exception."""
    import dataclasses

    import torch

    plain = _warmup_kd(space, None, inherit=False)
    assert plain.supernet() is None and plain(arch).costs["inherited"] is False
    assert plain(arch).costs["train_steps"] == 4  # 2 text + 2 task steps
    nan = _warmup_kd(space, None, text=False)
    nan.task = dataclasses.replace(nan.task, task_loss=lambda model, b: model(b).logits.sum()
                                   * torch.tensor(float("nan")))
    result = nan(arch)
    assert result.status is Status.FAILED and result.values == ()
    assert result.reason.startswith("diverged: loss is nan")


# ---------------------------------------------------------------------------
# inherited-kd: the slice it starts from and the hidden-state loss
# ---------------------------------------------------------------------------


def test_inherited_kd_starts_from_the_supernet_slice_and_reports_it_first(tmp_path):
    """Step 0 is the inherited-weights scorer's own score of the same slice; training then
    moves the weights (the final ones are not the slice's)."""
    import torch

    from evaluators.inherited import InheritedEvaluator, InheritedTask
    from nas.builder import extract_child

    space = _subnet_space()
    arch = space.validate({**space.default(), "L0_heads": "1/2", "L1_ffn": "1/4",
                           "hidden_size": space.choice_map["hidden_size"].values[1]})
    evaluator = _inherited_kd(space)
    evaluator.workdir = tmp_path
    trial = NullTrial()
    result = evaluator(arch, trial)
    task = evaluator.task
    plain = InheritedEvaluator(space, InheritedTask(supernet=task.supernet,
                                                    val_batches=task.val_batches, seq_len=SEQ))
    assert trial.reports[0] == (0, plain(arch).values[0])
    assert result.metrics["inherited_val_accuracy"] == plain(arch).metrics["val_accuracy"]
    assert [s for s, _ in trial.reports] == [0, 1, 2] and result.costs["train_steps"] == 4
    from safetensors.torch import load_file

    sliced = extract_child(task.supernet, space, arch).state_dict()
    trained = load_file(str(evaluator.weights_path(arch)))
    assert trained.keys() == sliced.keys()
    assert any(not torch.equal(trained[k], sliced[k]) for k in sliced)


def test_hidden_state_mse_compares_through_the_slice_and_by_layer_name():
    import torch

    from evaluators.inherited_kd import hidden_state_mse, recorded_nodes
    from nas.builder import build_child

    teacher = {"L0_out": torch.tensor([[[1.0, 2.0, 9.0, 9.0], [5.0, 5.0, 5.0, 5.0]]]),
               "L1_out": torch.zeros(1, 2, 4)}
    student = {"L0_out": torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])}  # 2 of the 4 channels
    mask = torch.tensor([[1, 0]])  # the second token is padding
    # L0 alone (the student keeps no L1), its first two channels, the first token: (0+4)/2
    assert hidden_state_mse(student, teacher, mask).item() == pytest.approx(2.0)
    assert hidden_state_mse({}, teacher, mask).item() == 0.0  # no layer kept: logits only
    space = _subnet_space()
    child = build_child(space, {**space.default(), "L0_keep": 0})
    assert recorded_nodes(child.graph) == ["L1_out"]
    assert recorded_nodes(build_child(space).graph) == ["L0_out", "L1_out"]


def test_inherited_kd_hidden_loss_is_zero_for_the_whole_teacher_and_weighs_in(tmp_path):
    """The whole teacher's slice is the teacher: its hidden states equal the teacher's (the
    MSE starts at 0); a weight of 0 trains on the logits alone, so a cut child ends with
    other weights than with the hidden-state term."""
    import torch
    from safetensors.torch import load_file

    from nas.builder import extract_child

    space = _subnet_space()
    evaluator = _inherited_kd(space)
    full = extract_child(evaluator.supernet, space, space.default())
    batch = _batch(space, 3)
    with torch.no_grad():
        a = full(batch, record=("hidden_states",)).records["hidden_states"]
        b = evaluator.teacher()(batch, record=("hidden_states",)).records["hidden_states"]
    assert len(a) == 2 and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))
    arch = space.validate({**space.default(), "L1_heads": "1/4"})
    weights = {}
    for w in (1.0, 0.0):
        ev = _inherited_kd(space, hidden_weight=w)
        ev.workdir = tmp_path / str(w)
        assert ev(arch).ok
        weights[w] = load_file(str(ev.weights_path(arch)))
    assert weights[1.0].keys() == weights[0.0].keys()
    assert any(not torch.equal(weights[1.0][k], weights[0.0][k]) for k in weights[1.0])


def test_inherited_kd_can_score_by_the_kl_to_the_teacher():
    """``score: teacher-kl``: the objective is minus the mean KL(teacher || candidate) on
    the validation batches, named so; the whole teacher's slice scores 0 before training
    (it is the teacher) and a cut one less; every report uses the same score."""
    import torch

    from evaluators.settings import InheritedKDSettings
    from nas.builder import extract_child
    space = _subnet_space()
    evaluator = _inherited_kd(space, score="teacher-kl")
    assert [o.name for o in evaluator.objectives] == ["val_minus_teacher_kl"]
    assert evaluator.teacher_kl(extract_child(evaluator.supernet, space, space.default())) \
        == pytest.approx(0.0, abs=1e-6)
    arch = space.validate({**space.default(), "L0_keep": 0, "L1_heads": "1/4"})
    child = extract_child(evaluator.supernet, space, arch).eval()
    with torch.no_grad():  # the definition, by hand on the one validation batch
        t = torch.log_softmax(evaluator.teacher()(evaluator.task.val_batches[0]).logits, -1)
        c = torch.log_softmax(child(evaluator.task.val_batches[0]).logits, -1)
    by_hand = float((t.exp() * (t - c)).sum(-1).mean())
    assert by_hand > 0 and evaluator.teacher_kl(child) == pytest.approx(by_hand, rel=1e-5)
    trial = NullTrial()
    result = evaluator(arch, trial)
    assert trial.reports[0] == (0, pytest.approx(-by_hand, rel=1e-5))
    assert result.values[0] == -result.metrics["val_teacher_kl"] == trial.reports[-1][1]
    assert "val_accuracy" in result.metrics  # the metric is still reported
    with pytest.raises(ValueError, match="score must be metric or teacher-kl"):
        InheritedKDSettings(score="loss")


@pytest.mark.parametrize("mapping, expected", [
    # a truncation to the first layer of a 2-layer teacher: what its one layer learns
    ("sliced", {"L0": "L0"}), ("uniform", {"L0": "L1"}), ("last", {"L0": "L1"})])
def test_inherited_kd_layer_mapping_picks_the_teacher_layer(mapping, expected):
    """``layer_mapping`` changes which teacher layer a kept layer's hidden state is
    matched to: with the second layer dropped, ``sliced`` matches the first layer to the
    teacher's first, ``uniform`` and ``last`` to the teacher's last; the loss then
    equals the MSE against that layer's state, computed by hand."""
    import torch

    from evaluators.inherited_kd import HIDDEN, layer_pairs, recorded_nodes
    from nas.builder import extract_child

    space = _subnet_space()
    evaluator = _inherited_kd(space)
    arch = space.validate({**space.default(), "L1_keep": 0})
    child = extract_child(evaluator.supernet, space, arch)
    teacher = evaluator.teacher()
    names, t_names = recorded_nodes(child.graph), recorded_nodes(teacher.graph)
    assert len(names) == 1 and len(t_names) == 2
    pairs = layer_pairs(names, t_names, mapping)
    short = {t: f"L{i}" for i, t in enumerate(t_names)}
    assert {short[s]: short[t] for s, t in pairs.items()} == expected
    batch = _batch(space, 3)
    with torch.no_grad():
        s = child(batch, record=(HIDDEN,)).records[HIDDEN][0]
        t = teacher(batch, record=(HIDDEN,)).records[HIDDEN][t_names.index(pairs[names[0]])]
    m = batch["attention_mask"].float().unsqueeze(-1)
    by_hand = float(((s - t) ** 2 * m).sum() / (m.sum() * s.shape[-1]))
    from evaluators.inherited_kd import hidden_state_mse

    states = dict(zip(t_names, teacher(batch, record=(HIDDEN,)).records[HIDDEN], strict=True))
    got = hidden_state_mse({names[0]: s}, {k: states[v] for k, v in pairs.items()},
                           batch["attention_mask"])
    assert float(got) == pytest.approx(by_hand, rel=1e-6)


def test_layer_mapping_is_checked():
    """An unknown ``layer_mapping`` is refused naming the choices."""
    from evaluators.settings import InheritedKDSettings

    with pytest.raises(Exception, match="layer_mapping.*sliced or uniform or last"):
        InheritedKDSettings(layer_mapping="middle")
