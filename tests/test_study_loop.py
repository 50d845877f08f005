"""The Optuna-driven multi-trial loop (searchers/loop.py and its modules): storage
(journal file, SQLite), resume without re-running, several worker processes, a killed
worker's trial failed and retried (our lease on the journal, Optuna's heartbeat on RDB),
budgets, pruning, seeds and multi-objective studies. The evaluator is synthetic (milliseconds)."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import socket
import time

import numpy as np
import optuna
import pytest
from optuna.trial import TrialState

from evaluators.base import EvalResult, Evaluator, Objective, TrialPruned
from nas.errors import NasError
from nas.space import get_space, small_config
from searchers.base import SearcherError
from searchers.loop import (
    StudyOptions,
    StudySettings,
    StudySpec,
    evaluations,
    open_search,
    run_study,
    study_evaluator,
    work,
)
from searchers.storage import StorageError, recover_stale_trials


def space():
    return get_space("adabert", **small_config("adabert"))


class Synthetic(Evaluator):
    """A deterministic score of the encoding, reported over ``steps`` steps; counts calls."""

    objectives = (Objective("score", "maximize"),)

    def __init__(self, space, steps: int = 1, sleep: float = 0.0) -> None:
        self.space, self.steps, self.sleep = space, steps, sleep
        self.calls: list[str] = []
        rng = np.random.default_rng(0)
        self.w = rng.normal(size=space.encoded_width)

    def score(self, arch) -> float:
        return float(self.space.encode(arch) @ self.w)

    def evaluate(self, arch, trial=None):
        self.calls.append(arch.id)
        final = self.score(arch)
        for step in range(self.steps):
            time.sleep(self.sleep)
            trial.report(step + 1, final * (step + 1) / self.steps)
            if trial.should_prune():
                raise TrialPruned(f"pruned at step {step + 1}")
        return EvalResult((final,), costs={"latency_ms": 1.0 + abs(final)})


def parts(sleep: float = 0.0):
    """The worker processes' factory (module level, so that spawn can import it)."""
    s = space()
    return s, Synthetic(s, sleep=sleep)


def spec_for(tmp_path, searcher="tpe", n_trials=6, storage=None, resume=False, workers=1,
             **settings):
    settings = StudySettings(**{"samplers": {"tpe": {"n_startup_trials": 3}}, **settings})
    return StudySpec.for_run(searcher=searcher, name="t", run_dir=tmp_path, seed=0,
                             settings=settings,
                             options=StudyOptions(n_trials=n_trials, storage=storage,
                                                  workers=workers),
                             default_trials=3, resume=resume, seq_len=16)


def outcomes(study):
    return [t.user_attrs.get("outcome") for t in study.trials]


@pytest.mark.parametrize("storage", [None, "sqlite:///{tmp}/study.db"])
def test_a_study_resumes_without_running_finished_trials_again(tmp_path, storage):
    if storage is not None:
        storage = storage.format(tmp=tmp_path)
    s = space()
    first = Synthetic(s)
    study = run_study(spec_for(tmp_path, storage=storage, n_trials=4, seeds=["default"]), s,
                      first)
    assert evaluations(study) == 4 and len(first.calls) == 4
    pointer = json.loads((tmp_path / "study.json").read_text())
    # the run folder's own file, recorded relative to it (a copied folder opens its own)
    assert pointer["storage"] == ("sqlite:///study.db" if storage else "study.journal")
    # the space default was queued as a seed and ran first
    assert study.trials[0].user_attrs["seed"] == "default"
    assert study.trials[0].user_attrs["arch_id"] == s.default().id
    records = sorted(tmp_path.glob("trials/*/result.json"))
    assert len(records) == 4
    record = json.loads(records[0].read_text())
    assert record["arch_id"] == study.trials[0].user_attrs["arch_id"]
    assert record["result"]["status"] == "complete"

    with pytest.raises(NasError, match="already exists.*--resume"):
        run_study(spec_for(tmp_path, storage=storage, n_trials=4), s, Synthetic(s))
    second = Synthetic(s)  # resumed with a larger budget: only the new trials run
    study = run_study(spec_for(tmp_path, n_trials=6, resume=True), s, second)
    assert evaluations(study) == 6 and len(second.calls) == 2
    assert not set(second.calls) & set(first.calls)
    done = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(done) == 6 and all(t.user_attrs["arch_id"] for t in done)
    assert len({t.user_attrs["arch_id"] for t in done}) == 6  # no repeats


def test_seeds_budget_rejections_and_user_attributes(tmp_path):
    from nas.cost import count_costs

    s = space()
    default = count_costs(s, s.default(), 16).params
    study = run_study(spec_for(tmp_path / "a", searcher="random", n_trials=4,
                               seeds=["default", "largest", "smallest"],
                               max_params=2 * default), s, Synthetic(s))
    seeds = [t.user_attrs.get("seed") for t in study.trials[:3]]
    assert seeds == ["default", "largest", "smallest"]
    params = [t.user_attrs["costs"]["params"] for t in study.trials[:3]]
    assert params[2] < params[0] < params[1] <= 2 * default  # the largest within the budget

    evaluator = Synthetic(s)
    study = run_study(spec_for(tmp_path / "b", searcher="random", n_trials=6, seeds=[],
                               max_params=default), s, evaluator)
    rejected = [t for t in study.trials if t.user_attrs.get("outcome") == "rejected"]
    assert rejected and all(t.state == TrialState.PRUNED for t in rejected)
    assert all(t.user_attrs["reason"].startswith("over budget: params") for t in rejected)
    assert all(t.user_attrs["costs"]["params"] > default for t in rejected)
    evaluated = [t for t in study.trials if t.user_attrs.get("outcome") == "complete"]
    assert len(evaluated) == 6 == len(evaluator.calls)  # rejections cost no evaluation
    assert all(t.user_attrs["costs"]["params"] <= default for t in evaluated)
    for t in evaluated:
        assert s.validate(t.user_attrs["arch"]).id == t.user_attrs["arch_id"]
        assert set(t.user_attrs["costs"]) >= {"params", "flops", "latency_ms"}


# 5-10 s of process start-up: the slow suite (a killed worker's retry keeps workers in the
# default run)
@pytest.mark.slow
def test_two_worker_processes_share_one_study(tmp_path):
    s = space()
    spec = spec_for(tmp_path, searcher="random", n_trials=6, workers=2)
    # Each trial takes a second: with an instant objective the first worker could finish
    # all six before the second process had started (seen once in a fresh-clone run).
    study = run_study(spec, s, Synthetic(s), parts=functools.partial(parts, sleep=1.0))
    done = [t for t in study.trials if t.user_attrs.get("outcome") == "complete"]
    assert len(done) == 6 and evaluations(study) == 6
    pids = {t.user_attrs["worker"]["pid"] for t in done}
    assert len(pids) == 2 and os.getpid() not in pids  # both workers took trials
    numbers = [t.number for t in study.trials]
    assert numbers == sorted(set(numbers))
    records = {int(p.parent.name) for p in tmp_path.glob("trials/*/result.json")}
    assert records == {t.number for t in done}


def _slow_worker(spec: StudySpec) -> None:
    s, evaluator = parts(sleep=30.0)
    search = open_search(spec, s, evaluator.objectives)
    work(search, evaluator, spec)


def _wait_for_running(study, pid, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            if t.user_attrs.get("evaluating") and t.user_attrs["worker"]["pid"] == pid:
                return t
        time.sleep(0.2)
    raise AssertionError("the worker never started a trial")


def test_a_worker_killed_with_sigkill_has_its_trial_failed_and_retried(tmp_path):
    s = space()
    spec = spec_for(tmp_path, searcher="tpe", n_trials=3, seeds=[])
    search = open_search(spec, s, Synthetic(s).objectives)  # creates the study
    search.study.set_user_attr("n_trials", 3)
    proc = multiprocessing.get_context("spawn").Process(target=_slow_worker, args=(spec,))
    proc.start()
    try:
        killed = _wait_for_running(search.study, proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
    finally:
        if proc.is_alive():
            proc.kill()
    evaluator = Synthetic(s)
    study = run_study(spec_for(tmp_path, searcher="tpe", n_trials=3, seeds=[], resume=True),
                      s, evaluator)
    stale = study.trials[killed.number]
    assert stale.state == TrialState.FAIL and stale.user_attrs.get("outcome") is None
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == killed.number]
    assert len(retry) == 1 and retry[0].params == killed.params
    assert retry[0].state == TrialState.COMPLETE
    assert evaluations(study) == 3 and len(evaluator.calls) == 3


@pytest.mark.slow  # 3-4 s of waiting for Optuna's heartbeat to expire
def test_rdb_heartbeat_fails_a_silent_trial_of_another_host(tmp_path):
    s = space()
    url = f"sqlite:///{tmp_path}/hb.db"
    spec = spec_for(tmp_path, searcher="random", storage=url, heartbeat_interval=1,
                    grace_period=2, seeds=[])
    search = open_search(spec, s, Synthetic(s).objectives)
    candidate = search.ask()
    number = candidate.id
    # a worker on another machine: its pid means nothing here, only its heartbeat counts
    search.set_trial_attr(candidate, "worker", {"host": "elsewhere", "pid": 1,
                                                  "started": 0.0})
    search.study._storage.record_heartbeat(search.study.trials[number]._trial_id)
    assert recover_stale_trials(search.study, retries=1) == []  # fresh heartbeat
    time.sleep(3.2)
    assert recover_stale_trials(search.study, retries=1) == [number]
    trials = search.study.trials
    assert trials[number].state == TrialState.FAIL
    assert trials[-1].state == TrialState.WAITING and trials[-1].params == trials[number].params


def test_a_process_id_lease_does_not_touch_live_or_foreign_workers(tmp_path):
    s = space()
    spec = spec_for(tmp_path, searcher="random", seeds=[])
    search = open_search(spec, s, Synthetic(s).objectives)
    mine, foreign, dead = search.ask(), search.ask(), search.ask()
    search.set_trial_attr(foreign, "worker", {"host": socket.gethostname() + "-other",
                                                "pid": 1, "started": 0.0})
    search.set_trial_attr(dead, "worker", {"host": socket.gethostname(), "pid": os.getpid(),
                                             "started": 1.0})  # our pid, reused since
    assert recover_stale_trials(search.study, retries=0) == [dead.id]
    states = {t.number: t.state for t in search.study.trials}
    assert states[mine.id] == TrialState.RUNNING
    assert states[foreign.id] == TrialState.RUNNING
    assert not any(t.state == TrialState.WAITING for t in search.study.trials)  # retries 0


def test_median_pruning_stops_weak_candidates_and_keeps_their_curves(tmp_path):
    s = space()
    evaluator = Synthetic(s, steps=4)
    study = run_study(spec_for(tmp_path, searcher="random", n_trials=12, seeds=[],
                               pruner="median",
                               pruner_options={"n_startup_trials": 3, "n_warmup_steps": 1}),
                      s, evaluator)
    pruned = [t for t in study.trials if t.user_attrs.get("outcome") == "pruned"]
    assert pruned and all(t.state == TrialState.PRUNED for t in pruned)
    assert all(len(t.intermediate_values) < 4 for t in pruned)
    assert all(t.user_attrs["reason"].startswith("pruned at step") for t in pruned)
    assert evaluations(study) == 12

    # the report counts what pruning saved, and draws the front and the history
    from searchers.report import pruning_savings, study_sections

    saving = pruning_savings(study)
    ran = sum(max(t.intermediate_values) for t in pruned)
    assert saving["planned"] == 4 and saving["pruned"] == len(pruned)
    assert saving["run"] == ran and saving["saved"] == 4 * len(pruned) - ran
    lines, pictures = study_sections(tmp_path, {"teacher": {"score": 5.0, "latency_ms": 2.0}})
    text = "\n".join(lines)
    assert f"Pruning (median): {len(pruned)} of 12 evaluations stopped early" in text
    assert f"saving {4 * len(pruned) - ran} steps" in text
    assert "| trial | outcome | seed | arch | score |" in text
    assert [p.name for p in pictures] == ["pareto.png", "history.png"]
    assert all(p.stat().st_size > 5000 for p in pictures)


def test_the_pareto_plot_labels_trial_numbers_and_rings_the_chosen_ones(tmp_path,
                                                                        monkeypatch):
    """Which point is which trial (for ``nas export --trial N``), and which the
    final stage retrained."""
    import matplotlib.figure

    from searchers.report import plot_pareto, study_sections

    s = space()
    study = run_study(spec_for(tmp_path, searcher="random", n_trials=4), s, Synthetic(s))
    done = [t.number for t in study.trials if t.user_attrs.get("outcome") == "complete"]
    drawn = {}

    def keep(fig, path, **kwargs):
        ax = fig.axes[0]
        drawn["labels"] = sorted(int(t.get_text()) for t in ax.texts if t.get_text().isdigit())
        drawn["legend"] = [t.get_text() for t in ax.get_legend().get_texts()]
        drawn["rings"] = [c.get_offsets().tolist() for c in ax.collections
                          if c.get_label() == "chosen (final retrain)"]

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", keep)
    plot_pareto(study, tmp_path / "p.png", chosen=[done[1]])
    assert drawn["labels"] == done and "chosen (final retrain)" in drawn["legend"]
    assert len(drawn["rings"]) == 1 and len(drawn["rings"][0]) == 1
    plot_pareto(study, tmp_path / "p.png")
    assert "chosen (final retrain)" not in drawn["legend"]
    lines, _ = study_sections(tmp_path, chosen=[done[1], done[2]])
    assert f"Chosen for the final retrain: trials {done[1]}, {done[2]} (ringed" in "\n".join(lines)


@pytest.mark.parametrize("name", ["nsga2", "tpe", "gp"])
def test_multi_objective_studies_give_a_pareto_front(tmp_path, name):
    s = space()
    settings = StudySettings(extra_objectives=["latency_ms"], targets={"latency_ms": 2.0})
    evaluator = study_evaluator(Synthetic(s), s, settings, name, seq_len=16)
    assert [o.name for o in evaluator.objectives] == ["score", "latency_ms"]
    spec = spec_for(tmp_path, searcher=name, n_trials=5, extra_objectives=["latency_ms"],
                    samplers={"nsga2": {"population_size": 4},
                              "gp": {"n_startup_trials": 4},
                              "tpe": {"n_startup_trials": 3}})
    study = run_study(spec, s, evaluator)
    assert [d.name for d in study.directions] == ["MAXIMIZE", "MINIMIZE"]
    front = study.best_trials
    assert front and all(len(t.values) == 2 for t in front)


def test_lanas_scalarises_with_targets_and_refuses_otherwise(tmp_path, caplog):
    s = space()
    inner = Synthetic(s)
    both = StudySettings(extra_objectives=["latency_ms"], targets={"latency_ms": 2.0})
    with caplog.at_level("INFO", logger="nas.study"):
        evaluator = study_evaluator(inner, s, both, "lanas", seq_len=16)
    assert [o.name for o in evaluator.objectives] == ["penalized_score"]
    assert "lanas is single-objective" in caplog.text
    with pytest.raises(SearcherError, match="single-objective.*nsga2") as err:
        study_evaluator(inner, s, StudySettings(extra_objectives=["latency_ms"]), "lanas")
    assert "\n" not in str(err.value)
    spec = spec_for(tmp_path, searcher="lanas", n_trials=5,
                    samplers={"lanas": {"n_startup_trials": 3, "rebuild_every": 1}})
    study = run_study(spec, s, evaluator)
    assert evaluations(study) == 5 and len(study.directions) == 1


def test_attach_needs_an_existing_study_and_timeouts_stop_new_trials(tmp_path):
    s = space()
    with pytest.raises(NasError, match="--attach needs --storage"):
        StudyOptions(attach=True)
    url = str(tmp_path / "shared.journal")
    spec = StudySpec.for_run(searcher="random", name="t", run_dir=tmp_path / "b", seed=0,
                             settings=StudySettings(), options=StudyOptions(
                                 storage=url, attach=True), default_trials=3)
    with pytest.raises(StorageError, match="no study 't-random'.*without --attach"):
        run_study(spec, s, Synthetic(s))
    first = spec_for(tmp_path / "a", searcher="random", storage=url, n_trials=4)
    run_study(first, s, Synthetic(s, sleep=0.0))
    # an attached worker with its own run folder adds trials to the same study
    spec = StudySpec.for_run(searcher="random", name="t", run_dir=tmp_path / "b", seed=0,
                             settings=StudySettings(),
                             options=StudyOptions(storage=url, attach=True, n_trials=6),
                             default_trials=3)
    study = run_study(spec, s, Synthetic(s))
    assert evaluations(study) == 6
    assert len(list((tmp_path / "b").glob("trials/*/result.json"))) == 2
    slow = StudySpec.for_run(searcher="random", name="t", run_dir=tmp_path / "c", seed=0,
                             settings=StudySettings(),
                             options=StudyOptions(storage=url, attach=True, n_trials=50,
                                                  timeout=0.5), default_trials=3)
    evaluator = Synthetic(s, sleep=0.2)
    run_study(slow, s, evaluator)
    assert 1 <= len(evaluator.calls) <= 4
    study = optuna.load_study(study_name="t-random", storage=optuna.storages.JournalStorage(
        optuna.storages.journal.JournalFileBackend(url)))
    assert study.user_attrs["n_trials"] == 50


def test_a_resumed_study_proposes_what_the_uninterrupted_one_did(tmp_path):
    """Each trial's sampler is seeded by (seed, proposal index): stopping and continuing
    gives the uninterrupted search's trials, past TPE's start-up phase (kills:
    tests/test_exact_resume.py)."""
    s = space()
    straight = run_study(spec_for(tmp_path / "a", n_trials=7), s, Synthetic(s))
    run_study(spec_for(tmp_path / "b", n_trials=4), s, Synthetic(s))
    resumed = run_study(spec_for(tmp_path / "b", n_trials=7, resume=True), s, Synthetic(s))
    assert [t.params for t in resumed.trials] == [t.params for t in straight.trials]


class Interrupted(Synthetic):
    """Ctrl-C during the evaluation of its ``at``-th architecture."""

    def __init__(self, space, at: int) -> None:
        super().__init__(space)
        self.at = at

    def evaluate(self, arch, trial=None):
        if len(self.calls) == self.at:
            raise KeyboardInterrupt
        return super().evaluate(arch, trial)


def test_an_interrupted_trial_runs_again_on_resume(tmp_path):
    s = space()
    with pytest.raises(KeyboardInterrupt):
        run_study(spec_for(tmp_path, n_trials=5), s, Interrupted(s, at=2))
    study = run_study(spec_for(tmp_path, n_trials=5, resume=True), s, Synthetic(s))
    cut = study.trials[2]
    assert cut.state == TrialState.FAIL and cut.user_attrs.get("outcome") is None
    retry = [t for t in study.trials if t.system_attrs.get("failed_trial") == 2]
    assert len(retry) == 1 and retry[0].params == cut.params
    assert retry[0].user_attrs["outcome"] == "complete" and evaluations(study) == 5


@pytest.mark.parametrize("settings, message", [
    ({"samplers": {"lanass": {}}}, "samplers: unknown searcher 'lanass'; known: gp, lamoo, lanas"),
    ({"pruner": "median", "pruner_options": {"bogus": 1}}, "pruner_options for 'median'"),
    ({"pruner": "hyperband"}, "pruner must be one of"),
    ({"targets": {"latency": 2}}, "targets: latency: 2"),
    ({"seeds": "default"}, "seeds must be a list"),
    ({"extra_objectives": ["accuracy"]}, "extra_objectives must be among"),
    ({"n_trials": 0}, "n_trials must be None or >= 1"),
])
def test_multi_trial_settings_are_checked_when_the_experiment_loads(tmp_path, settings,
                                                                     message):
    import yaml

    from nas.config import ConfigError
    from recipes.adabert import AdaBert
    from recipes.common import load_typed

    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"method": "adabert", "name": "x", "task": "sst2",
                                    "multi_trial": settings}))
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_typed(path, AdaBert)


def test_a_queued_study_runs_exactly_the_method_s_picks_and_resumes(tmp_path):
    """A method's own picks (compress's knapsack) as a study: queued on the new study,
    evaluated in order by the usual loop, recorded like any searcher's trials; the sampler
    draws nothing beyond the queue, and a resume runs nothing twice."""
    from searchers.queued import QueuedSearcher

    s = space()
    rng = np.random.default_rng(3)
    picks = list({a.id: a for a in (s.sample(rng) for _ in range(5))}.values())[:3]
    queue = [(f"knapsack-{i}x", a) for i, a in enumerate(picks, 1)]
    evaluator = Synthetic(s)
    spec = spec_for(tmp_path, searcher="knapsack", n_trials=3)
    study = run_study(spec, s, evaluator, searcher=QueuedSearcher("knapsack"), queue=queue)
    assert evaluator.calls == [a.id for a in picks] and outcomes(study) == ["complete"] * 3
    assert [t.user_attrs["seed"] for t in study.trials] == [tag for tag, _ in queue]
    assert json.loads((tmp_path / "study.json").read_text())["searcher"] == "knapsack"
    assert study.user_attrs["searcher"] == "knapsack"
    again = run_study(spec_for(tmp_path, searcher="knapsack", n_trials=3, resume=True), s,
                      evaluator, searcher=QueuedSearcher("knapsack"), queue=queue)
    assert len(evaluator.calls) == 3 and evaluations(again) == 3
    # a fourth trial has nothing queued: the sampler refuses to draw, in one line
    with pytest.raises(SearcherError, match="proposes only the architectures it queued"):
        run_study(spec_for(tmp_path, searcher="knapsack", n_trials=4, resume=True), s,
                  evaluator, searcher=QueuedSearcher("knapsack"), queue=queue)
    with pytest.raises(NasError, match="runs its trials in one process"):
        run_study(spec_for(tmp_path / "w", searcher="knapsack", workers=2), s, evaluator,
                  searcher=QueuedSearcher("knapsack"), queue=queue)
