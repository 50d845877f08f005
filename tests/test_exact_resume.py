"""Exact resume (searchers/resume.py): for every multi-trial searcher, a study killed (``kill -9``)
before its first evaluation, in the middle of a trial, or during its last trial, and
resumed, evaluates the same sequence of architectures with the same values as the
uninterrupted study (:mod:`searchers.resume`). The evaluator is synthetic (milliseconds);
the kill leaves what ``kill -9`` leaves: a RUNNING trial whose worker process is gone."""

from __future__ import annotations

import os
import socket

import pytest
from optuna.trial import TrialState

import searchers.worker
from benchmarks import kill_resume
from nas.cost import count_costs
from searchers.base import searcher_names
from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study
from tests.test_study_loop import Synthetic, space

N_TRIALS = 6
#: small start-up phases, so that every sampler's model is used within six trials
SAMPLERS = {"tpe": {"n_startup_trials": 2}, "gp": {"n_startup_trials": 2},
            "nsga2": {"population_size": 2},
            "lanas": {"n_startup_trials": 2, "rebuild_every": 1, "leaf_size": 1},
            "lamoo": {"n_startup_trials": 2, "rebuild_every": 1, "leaf_size": 1}}


class Killed(BaseException):
    """What the killed process would never see: it stands for ``kill -9``."""


class KilledAt(Synthetic):
    """Dies during its ``at``-th evaluation as ``kill -9`` would: the trial stays RUNNING,
    recorded as run by a process that no longer exists (our pid, with another start
    time: a reused pid)."""

    def __init__(self, space, at: int) -> None:
        super().__init__(space)
        self.at = at

    def evaluate(self, arch, trial=None):
        if len(self.calls) == self.at:
            trial.report(1, 0.5)  # a partial curve, as a killed training leaves
            trial.set_attr("worker", {"host": socket.gethostname(), "pid": os.getpid(),
                                      "started": 1.0})
            raise Killed
        return super().evaluate(arch, trial)


def spec_for(run_dir, searcher: str, resume: bool = False, n_trials: int = N_TRIALS,
             storage: str | None = None, budget: float = 1.5) -> StudySpec:
    """``budget``: ``max_params`` as a multiple of the default architecture's (1.5 is
    never reached in six trials; 0.8 makes TPE and NSGA-II propose infeasible ones)."""
    s = space()
    settings = StudySettings(seeds=["default", "smallest"], samplers=SAMPLERS,
                             max_params=budget * count_costs(s, s.default(), 16).params)
    return StudySpec.for_run(searcher=searcher, name="t", run_dir=run_dir, seed=0,
                             settings=settings,
                             options=StudyOptions(n_trials=n_trials, storage=storage),
                             default_trials=N_TRIALS, resume=resume, seq_len=16)


def evaluated(study) -> list[tuple[str, tuple[float, ...]]]:
    """(architecture id, values) of the complete trials, in the order they finished."""
    done = sorted((t for t in study.trials if t.state == TrialState.COMPLETE),
                  key=lambda t: (t.datetime_complete, t.number))
    return [(t.user_attrs["arch_id"], tuple(t.values)) for t in done]


# GP's ask is the slowest (about 3 s here); its kill-and-resume runs in the slow suite
@pytest.mark.parametrize("searcher", [
    pytest.param(n, marks=pytest.mark.slow) if n == "gp" else n
    for n in searcher_names("multi-trial")])
def test_a_killed_study_resumes_exactly(tmp_path, monkeypatch, searcher):
    s = space()
    straight_evaluator = Synthetic(s)
    straight = run_study(spec_for(tmp_path / "straight", searcher), s, straight_evaluator)
    expected = evaluated(straight)
    assert len(expected) == N_TRIALS
    assert expected == [(a, (straight_evaluator.score(_arch(straight, a)),))
                        for a, _ in expected]
    for at in (0, N_TRIALS // 2, N_TRIALS - 1):  # a seed, mid-study, the last trial
        run_dir = tmp_path / f"killed{at}"
        killed = KilledAt(s, at)
        with monkeypatch.context() as m:  # no clean-up runs in a killed process
            m.setattr(searchers.worker, "abandon_trial", lambda *a, **k: None)
            with pytest.raises(Killed):
                run_study(spec_for(run_dir, searcher), s, killed)
        resumed_evaluator = Synthetic(s)
        resumed = run_study(spec_for(run_dir, searcher, resume=True), s, resumed_evaluator)
        assert evaluated(resumed) == expected, f"killed during evaluation {at}"
        assert killed.calls + resumed_evaluator.calls == straight_evaluator.calls
        # the killed trial failed with no outcome; its retry (a new number) ran it
        stale = [t for t in resumed.trials if t.state == TrialState.FAIL
                 and t.user_attrs.get("outcome") is None]
        assert len(stale) == 1
        retry = [t for t in resumed.trials if t.system_attrs.get("failed_trial")
                 == stale[0].number]
        assert len(retry) == 1 and retry[0].params == stale[0].params
        assert retry[0].user_attrs["outcome"] == "complete"
    # stopped cleanly between trials (Ctrl-C between two, --n-trials, --timeout)
    first = Synthetic(s)
    run_study(spec_for(tmp_path / "stopped", searcher, n_trials=N_TRIALS - 2), s, first)
    rest = Synthetic(s)
    resumed = run_study(spec_for(tmp_path / "stopped", searcher, resume=True), s, rest)
    assert evaluated(resumed) == expected and first.calls + rest.calls == straight_evaluator.calls


# NSGA-II's and GP's cases (2 s and more) run in the slow suite: the default run has no
# time to spare
@pytest.mark.parametrize("searcher", [
    "tpe", pytest.param("nsga2", marks=pytest.mark.slow),
    pytest.param("gp", marks=pytest.mark.slow), "random", "wl-bo"])
def test_a_killed_study_with_an_active_constraint_resumes_exactly(tmp_path, monkeypatch,
                                                                  searcher):
    """Under a budget the default architecture breaks: TPE, NSGA-II and GP get infeasible
    trials (complete, with placeholder values and constraint values, never evaluated),
    random search rejected ones; killed mid-study and resumed, the whole sequence (the
    infeasible trials and their values included) is the uninterrupted one's. WL-BO, which
    proposes feasible architectures only, has the queued default rejected."""
    s = space()

    def sequence(study):
        done = sorted((t for t in study.trials if t.state.is_finished()
                       and t.user_attrs.get("outcome") in ("complete", "infeasible",
                                                           "rejected")),
                      key=lambda t: (t.datetime_complete, t.number))
        return [(t.user_attrs.get("arch_id"), t.user_attrs["outcome"],
                 tuple(t.values or ()), t.user_attrs.get("violations")) for t in done]

    straight_evaluator = Synthetic(s)
    straight = run_study(spec_for(tmp_path / "straight", searcher, budget=0.8), s,
                         straight_evaluator)
    expected = sequence(straight)
    outcomes = [o for _, o, _, _ in expected]
    skipped = "rejected" if searcher in ("random", "wl-bo") else "infeasible"
    assert outcomes.count("complete") == N_TRIALS and skipped in outcomes
    assert len(straight_evaluator.calls) == N_TRIALS  # never trained
    for _, outcome, _, violations in expected:
        if outcome == "infeasible":
            assert violations["params"] > 0
    killed = KilledAt(s, N_TRIALS // 2)
    with monkeypatch.context() as m:
        m.setattr(searchers.worker, "abandon_trial", lambda *a, **k: None)
        with pytest.raises(Killed):
            run_study(spec_for(tmp_path / "killed", searcher, budget=0.8), s, killed)
    resumed = run_study(spec_for(tmp_path / "killed", searcher, resume=True, budget=0.8), s,
                        Synthetic(s))
    assert sequence(resumed) == expected


@pytest.mark.slow
def test_a_killed_study_on_sqlite_resumes_exactly(tmp_path, monkeypatch):
    """The same on RDB storage (Optuna's heartbeat is there too; the pid lease acts first
    for a worker of this host)."""
    s = space()
    straight = run_study(spec_for(tmp_path / "a", "random", storage=f"sqlite:///{tmp_path}/a.db"),
                         s, Synthetic(s))
    storage = f"sqlite:///{tmp_path}/b.db"
    with monkeypatch.context() as m, pytest.raises(Killed):
        m.setattr(searchers.worker, "abandon_trial", lambda *a, **k: None)
        run_study(spec_for(tmp_path / "b", "random", storage=storage), s, KilledAt(s, 3))
    resumed = run_study(spec_for(tmp_path / "b", "random", resume=True, storage=storage), s,
                        Synthetic(s))
    assert evaluated(resumed) == evaluated(straight)


# Killed just before one storage write, in a process of its own that dies as kill -9 would
# (benchmarks/kill_resume.py), then resumed: (case, the write: method, trial or study id,
# attribute or parameter name or None for any, which of such writes).
KILLS = {
    # inside a trial's parameter writes (Optuna records them one each): a random start-up
    # trial of TPE (sampled one parameter at a time) with 3 of its 10 written, a LaMOO
    # trial of its tree, a random trial of the compress study (TPE, a budget, the
    # truncations queued) with 2 of its 7. The retry kept those and drew the others
    # again, from another search space: TPE and compress evaluated other architectures
    "tpe-params": ("tpe", ("set_trial_param", 3, None, 3)),
    "lamoo-params": ("lamoo", ("set_trial_param", 5, None, 5)),
    "compress-params": ("compress", ("set_trial_param", 3, None, 2)),
    # before the proposal was recorded (drawn again from the same proposal index; slow)
    "tpe-proposal": ("tpe", ("set_trial_system_attr", 3, "proposal", 0)),
    # during a tell: the trial said "complete" and was still running (the failed trial
    # and its retry both counted as evaluations: one architecture fewer was evaluated)
    "tpe-tell": ("tpe", ("set_trial_user_attr", 3, "seconds", 0)),
    # between the new study's two seeds (resumed without the second seed)
    "tpe-creation": ("tpe", ("create_new_trial", 0, None, 1)),
}


@pytest.fixture(scope="module")
def straight_runs(tmp_path_factory):
    """``case -> (sequence, writes)`` of the uninterrupted study, run once per case."""
    done = {}

    def get(case):
        if case not in done:
            done[case] = kill_resume.writes_of(case, kill_resume.WRITES,
                                               tmp_path_factory.mktemp(case))
        return done[case]

    return get


#: slow: before the proposal record, and LaMOO's (it draws a trial's parameters at once, so
#: it resumed exactly before the record too: the check cannot fail there)
SLOW_KILLS = ("tpe-proposal", "lamoo-params")


@pytest.mark.parametrize("kill", [pytest.param(k, marks=pytest.mark.slow)
                                  if k in SLOW_KILLS else k for k in KILLS])
def test_a_study_killed_between_two_storage_writes_resumes_exactly(tmp_path, straight_runs,
                                                                   kill):
    case, (method, where, key, occurrence) = KILLS[kill]
    straight, writes = straight_runs(case)
    assert [o for _, o, _ in straight].count("complete") == kill_resume.N_TRIALS
    at = [n for n, (m, w, k) in enumerate(writes)
          if (m, w) == (method, where) and key in (None, k)][occurrence]
    resumed = kill_resume.killed_then_resumed(case, tmp_path / "killed", at,
                                              kill_resume.WRITES)
    assert resumed == straight


@pytest.mark.slow
def test_a_dozen_kills_at_random_instants_all_resume_exactly(capsys):
    """The recorded script: 12 kills at random instants, before any storage write (a
    random write of the whole study), over the three studies."""
    assert kill_resume.report(list(kill_resume.CASES), 12, 0, kill_resume.WRITES) == 0
    assert "12/12 identical" in capsys.readouterr().out


def _arch(study, arch_id: str):
    """The architecture of the complete trial with ``arch_id``."""
    trial = next(t for t in study.trials if t.user_attrs.get("arch_id") == arch_id)
    return space().validate(trial.user_attrs["arch"])
