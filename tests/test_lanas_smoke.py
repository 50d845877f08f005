"""experiments/lanas_smoke.yaml end to end through the command line on SST-2: a small
LaNAS search (dev accuracy with a FLOPs penalty, the distilled retrain, median pruning)
stopped and continued, its report (trial table, Pareto front, history) and the best trial
exported and served; the same file as a two-objective NSGA-II search in two worker
processes, with a third worker attached from a run folder of its own."""

from __future__ import annotations

import importlib.util
import json

import pytest
from smokes import lookup, read_expected, smoke_file

from nas.cli import main
from searchers.loop import evaluations
from searchers.results import open_run_study, pareto_front

SMOKE = "experiments/lanas_smoke.yaml"


def _run(*argv) -> int:
    return main(["run", SMOKE, "--no-progress", *map(str, argv)])


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The LaNAS search stopped after 5 of the file's 8 trials."""
    run_dir = tmp_path_factory.mktemp("lanas") / "run"
    assert _run("--run-dir", run_dir, "--n-trials", 5) == 0
    return run_dir


def _records(run_dir):
    return {p.parent.name: p.read_text() for p in run_dir.glob("trials/*/result.json")}


def test_lanas_search_continues_reports_and_exports_the_best_trial(stopped, capsys):
    run_dir = stopped
    study = open_run_study(run_dir)
    assert study.user_attrs["searcher"] == "lanas" and evaluations(study) == 5
    assert [o["name"] for o in study.user_attrs["objectives"]] == ["penalized_val_accuracy"]
    assert [t.user_attrs.get("seed") for t in study.trials[:3]] == ["default", "largest",
                                                                     "smallest"]
    before = _records(run_dir)
    assert len(before) == 5

    assert _run("--run-dir", run_dir, "--resume") == 0  # on to the file's 8 trials
    study = open_run_study(run_dir)
    assert evaluations(study) == 8
    after = _records(run_dir)
    assert len(after) == 8 and all(after[k] == v for k, v in before.items())  # not re-run
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["lanas"]["n_trials"] == 8 and metrics["lanas"]["runs"]
    row = metrics["lanas"]["runs"][0]
    assert {"dev", "test", "params", "latency"} <= set(row)
    # stopped and continued, the search gives the file's recorded results (a straight run
    # from an empty cache); its penalty is on counted FLOPs, so load on the machine cannot
    # move them
    expected = read_expected(smoke_file("lanas"))
    assert {key: lookup(metrics, key) for key in expected} == expected

    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    text = (run_dir / "report.md").read_text()
    assert "## Multi-trial search: lanas" in text and "| trial | outcome | seed |" in text
    assert "8 evaluations of 8" in text and "optuna-dashboard" in text
    for name in ("pareto.png", "history.png"):
        assert (run_dir / name).stat().st_size > 5000

    capsys.readouterr()
    assert main(["export", "--run", str(run_dir), "--trial", "best", "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    best = max((t for t in study.trials if t.user_attrs.get("outcome") == "complete"),
               key=lambda t: (t.values[0], -t.number))
    assert exported["trial"] == best.number and exported["arch_id"] == best.user_attrs["arch_id"]
    assert {"config.json", "model.safetensors"} <= set(exported["files"])
    assert main(["predict", exported["directory"], "a charming and funny film", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in ("negative", "positive", "0", "1")


@pytest.mark.slow
def test_nsga2_with_two_workers_an_attached_worker_and_its_pareto_front(tmp_path, capsys):
    run_dir = tmp_path / "nsga2"
    assert _run("--run-dir", run_dir, "--searcher", "nsga2", "--workers", 2,
                "--n-trials", 6) == 0
    study = open_run_study(run_dir)
    assert [o["name"] for o in study.user_attrs["objectives"]] == ["val_accuracy", "latency_ms"]
    assert evaluations(study) == 6
    pids = {t.user_attrs["worker"]["pid"] for t in study.trials
            if t.user_attrs.get("outcome") in ("complete", "pruned", "failed")}
    assert len(pids) == 2

    other = tmp_path / "attached"
    assert _run("--run-dir", other, "--searcher", "nsga2", "--attach",
                "--storage", run_dir / "study.journal", "--n-trials", 8) == 0
    study = open_run_study(run_dir)
    assert evaluations(study) == 8 and len(_records(other)) == 2

    capsys.readouterr()
    assert main(["report", str(run_dir)]) == 0
    assert "Pareto front: trials" in (run_dir / "report.md").read_text()
    assert (run_dir / "pareto.png").stat().st_size > 5000
    assert main(["export", "--run", str(run_dir), "--trial", "best"]) == 2
    assert "no single best trial" in capsys.readouterr().err
    front = pareto_front(study)[0].number
    assert main(["export", "--run", str(run_dir), "--trial", str(front)]) == 0
    assert (run_dir / "exports" / f"trial{front}" / "model.safetensors").is_file()


_HAVE_PSYCOPG = importlib.util.find_spec("psycopg") is not None


@pytest.mark.parametrize("argv, message", [
    (["--storage", "redis://host/0"], "--storage redis://host/0: unknown scheme 'redis'"),
    # Without the driver the one line says to install it; with it, that the server is unreachable.
    (["--storage", "postgresql+psycopg://nobody@127.0.0.1:1/db"],
     "cannot open the storage (OperationalError" if _HAVE_PSYCOPG
     else "the database driver is missing"),
    (["--attach"], "--attach needs --storage"),
    (["--searcher", "differentiable", "--workers", "2"], "--workers needs a multi-trial"),
])
def test_study_flags_fail_in_one_line_before_any_stage(argv, message, tmp_path, capsys):
    assert _run("--run-dir", tmp_path / "run", *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "run").exists()


def _evaluated(study) -> list[tuple[str, list[float]]]:
    """(architecture id, values) of the complete trials, in the order they finished."""
    from optuna.trial import TrialState

    done = sorted((t for t in study.trials if t.state == TrialState.COMPLETE),
                  key=lambda t: (t.datetime_complete, t.number))
    return [(t.user_attrs["arch_id"], t.values) for t in done]


@pytest.mark.slow
def test_lanas_smoke_killed_during_a_trial_resumes_exactly(tmp_path):
    """``kill -9`` of ``nas run`` during the search's sixth evaluation (past the seeds and
    the start-up, so the tree proposes it), then ``--resume``: the same architectures with
    the same values as a straight run (docs/optuna.md, "Exact resume")."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from optuna.trial import TrialState

    seven = ("--n-trials", "7")
    straight = tmp_path / "straight"
    assert _run("--run-dir", straight, *seven) == 0
    run_dir = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "nas.cli", "run", SMOKE, "--no-progress",
                             "--run-dir", str(run_dir), *seven],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        while proc.poll() is None and time.monotonic() < deadline:
            if (run_dir / "study.json").is_file():
                study = open_run_study(run_dir)
                running = [t for t in study.get_trials(states=(TrialState.RUNNING,))
                           if t.user_attrs.get("evaluating")]
                if running and evaluations(study) >= 6:
                    os.kill(proc.pid, signal.SIGKILL)
                    break
            time.sleep(0.5)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert _run("--run-dir", run_dir, "--resume", *seven) == 0
    resumed = open_run_study(run_dir)
    assert any(t.system_attrs.get("failed_trial") is not None for t in resumed.trials)
    assert _evaluated(resumed) == _evaluated(open_run_study(straight))
