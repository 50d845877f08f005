"""Builds tests/data/old_study/: two multi-trial run folders made by the code before 842c8f5
(commit 43a4924, whose searchers kept their own history and a JSON copy of the study).

Run on that commit: ``git -C REPO archive 43a4924 | tar -x -C /tmp/orig; cd /tmp/orig;
PYTHONPATH=. python build_fixture.py OUT``. It writes ``OUT/journal`` (a TPE study on the
default journal file, one objective) and ``OUT/sqlite`` (an NSGA-II study in SQLite, two
objectives), each with 4 evaluations of the cost evaluator on AdaBERT's small space, and
``OUT/expected.json``: the parameters of the same two searches run to 7 evaluations
without a stop, which a resumed run must reproduce. tests/test_old_runs.py keeps of OUT
only ``expected.json`` and each folder's ``study.json`` and study file, and continues the
studies with :func:`build` (``resume=True``) on the current code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from evaluators.costs import CostEvaluator
from nas.space import get_space, small_config
from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study

STUDIES = {"journal": ("tpe", ("params",), None),
           "sqlite": ("nsga2", ("params", "flops"), "sqlite:///{run}/study.db")}
SAMPLERS = {"tpe": {"n_startup_trials": 2}, "nsga2": {"population_size": 4}}


def build(run: Path, kind: str, n_trials: int, resume: bool = False) -> list[dict]:
    """The study of ``kind`` in the run folder ``run``, run (or, with ``resume``,
    continued) to ``n_trials`` evaluations; returns its trials' parameters."""
    searcher, objectives, storage = STUDIES[kind]
    space = get_space("adabert", **small_config("adabert"))
    spec = StudySpec.for_run(
        searcher=searcher, name="old", run_dir=run, seed=0,
        settings=StudySettings(seeds=["default"], samplers=SAMPLERS),
        options=StudyOptions(n_trials=n_trials, storage=None if resume or not storage
                             else storage.format(run=run.resolve())),
        default_trials=n_trials, resume=resume, seq_len=16)
    study = run_study(spec, space, CostEvaluator(space, objectives, seq_len=16))
    return [t.params for t in study.trials]


if __name__ == "__main__":
    out = Path(sys.argv[1])
    expected = {}
    for kind in STUDIES:
        build(out / kind, kind, 4)
        expected[kind] = build(out / "straight" / kind, kind, 7)
    (out / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")
