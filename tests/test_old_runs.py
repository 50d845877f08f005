"""Run folders made before the Optuna study became the only store of trials (842c8f5)
still open: ``nas report`` reads their study, and ``--resume`` continues it exactly as the
uninterrupted search did.

The folders in tests/data/old_study were made by the code of commit 43a4924 (searchers
with their own history and a JSON copy of the study) with
tests/data/old_study/build_fixture.py: a TPE study on the default journal file and an
NSGA-II study in SQLite, 4 evaluations each of the cost evaluator on AdaBERT's small
space. That code kept its searcher state only in memory: a run folder held the study (its
storage) and ``study.json`` (the pointer), the two things read here.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from nas.errors import NasError
from nas.report import write_report
from nas.rundir import RunDir
from searchers.loop import evaluations
from searchers.results import open_run_study

FIXTURE = Path(__file__).parent / "data" / "old_study"
STUDY_FILES = {"journal": "study.journal", "sqlite": "study.db"}


def _builder():
    """tests/data/old_study/build_fixture.py, the script that made the fixture."""
    spec = importlib.util.spec_from_file_location("build_fixture",
                                                  FIXTURE / "build_fixture.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _model(acc: float, params: int, ms: float) -> dict:
    latency = {f"batch{b}": {"median_ms": ms * b, "seq_len": 16} for b in (1, 32)}
    return {"dev": {"accuracy": acc}, "params": params, "flops": 2_000_000, "latency": latency}


def old_run(tmp_path: Path, kind: str) -> Path:
    """A copy of the old run folder ``kind`` whose pointer names the copied storage (the
    fixture's pointer holds the absolute path it was made at), as an adabert run with a
    finished metrics.json."""
    run = RunDir(tmp_path / kind, {"method": "adabert", "name": "old"})
    run.save_json("metrics.json", {"metric": "accuracy", "teacher": _model(0.8, 10**7, 4.0),
                                   "searched": _model(0.7, 10**6, 1.0)})
    run.close()
    for name in ("study.json", STUDY_FILES[kind]):
        shutil.copy(FIXTURE / kind / name, run.path / name)
    pointer = json.loads((run.path / "study.json").read_text())
    copied = run.path / STUDY_FILES[kind]
    pointer["storage"] = str(copied) if kind == "journal" else f"sqlite:///{copied}"
    (run.path / "study.json").write_text(json.dumps(pointer))
    return run.path


@pytest.mark.parametrize("kind", sorted(STUDY_FILES))
def test_nas_report_reads_an_old_run_folders_study(tmp_path, kind):
    run = old_run(tmp_path, kind)
    text, data = write_report(run)
    searcher = {"journal": "tpe", "sqlite": "nsga2"}[kind]
    assert f"## Multi-trial search: {searcher} (study `old-{searcher}`)" in text
    assert "4 evaluations of 4: 4 complete, 0 pruned, 0 failed." in text
    study = open_run_study(run)
    if kind == "journal":
        assert f"Best: trial {study.best_trial.number}, params " in text
    else:  # two objectives: Optuna's front
        front = ", ".join(str(t.number) for t in sorted(study.best_trials,
                                                         key=lambda t: t.number))
        assert f"Pareto front: trials {front} " in text
    assert {Path(p).name for p in data["pictures"]} >= {"pareto.png", "history.png"}


@pytest.mark.parametrize("kind", sorted(STUDY_FILES))
def test_resume_continues_an_old_study_as_the_uninterrupted_search(tmp_path, kind):
    run = old_run(tmp_path, kind)
    expected = json.loads((FIXTURE / "expected.json").read_text())[kind]
    params = _builder().build(run, kind, 7, resume=True)
    assert params == expected  # the old trials kept, the new ones as the old code drew them
    study = open_run_study(run)
    assert evaluations(study) == 7
    assert len(list(run.glob("trials/*/result.json"))) == 3  # only the new trials ran


def test_an_old_run_whose_storage_is_gone_is_refused_in_one_line(tmp_path):
    run = old_run(tmp_path, "journal")
    pointer = json.loads((run / "study.json").read_text())
    (run / pointer["storage"]).unlink()
    with pytest.raises(NasError, match="no study 'old-tpe'.*moved or deleted") as err:
        open_run_study(run)
    assert "\n" not in str(err.value)
