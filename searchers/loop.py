"""The multi-trial loop: ask → evaluate → tell on an Optuna study, in one process or in
several (docs/reference.md#optuna), and the public entry of the study modules.

A method's multi-trial stage needs only this module::

    from searchers.loop import StudySettings, StudySpec, run_study, study_evaluator

    spec = StudySpec.for_run(searcher=name, name=cfg.name, run_dir=run_dir, seed=cfg.seed,
                             settings=cfg.multi_trial, options=study_options,
                             default_trials=n, resume=resume, seq_len=seq_len,
                             progress=progress, export={...})
    study = run_study(spec, space, study_evaluator(inner, space, cfg.multi_trial, name,
                                                   seq_len=seq_len), parts=parts_factory)
    study.best_trial / study.best_trials / complete_trials(study)   # searchers.results

:func:`run_study` drives any registered multi-trial searcher (a sampler factory,
:mod:`searchers.optuna_searchers`) and any evaluator:

* the study lives in a storage (:mod:`searchers.storage`; by default the journal file
  ``RUN_DIR/study.journal``), and ``RUN_DIR/study.json`` says which, so that ``--resume``
  continues it: finished trials are never run again, and the search goes on until the
  study holds ``n_trials`` evaluations (rejected and repeated proposals do not count);
* ``workers=N`` starts N processes (one torch thread each) that share the study; a
  second ``nas run … --attach --storage URL`` on another shell or machine adds workers
  with a run folder of their own. Trial numbers come from the storage, so they never
  clash, and a worker that dies is recovered (its trial failed and retried);
* each evaluated trial writes ``RUN_DIR/trials/<number>/result.json`` (its architecture,
  parameters, result, worker and weights) and one log line;
* evaluators report intermediate values to the trial, so a pruner (``median``,
  ``halving``) can stop weak candidates early.

The pieces, one job per module: :mod:`searchers.settings` (:class:`StudySettings`, the
experiment file's ``multi_trial:`` section, and :class:`StudyOptions`, the command
line's part), :mod:`searchers.objectives` (:func:`study_evaluator`: one scalarised
objective, or several for nsga2/tpe/gp), :mod:`searchers.study` (:class:`StudySpec`, the
run folder's pointer, opening and creating the study), :mod:`searchers.proposals`
(:class:`~searchers.proposals.StudySearch`: ask/tell on the study), :mod:`searchers.worker`
(a worker's loop and the worker processes) and :mod:`searchers.results` (reading a study
back: complete trials, best trial, Pareto front, export).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from evaluators.base import Evaluator
from nas.errors import NasError
from searchers.objectives import study_evaluator
from searchers.proposals import StudySearch, evaluations
from searchers.settings import PRUNERS, StudyOptions, StudySettings, make_pruner
from searchers.storage import MEMORY, StorageError, recover_stale_trials
from searchers.study import (
    POINTER,
    StudySpec,
    check_study,
    create,
    open_search,
    read_pointer,
    spec_storage,
    unfinished,
    write_pointer,
)
from searchers.worker import PartsFactory, progress, run_workers, work

if TYPE_CHECKING:
    from nas.space import SearchSpace
    from searchers.base import MultiTrialSearcher

log = logging.getLogger("nas.study")

__all__ = ["POINTER", "PRUNERS", "PartsFactory", "StudyOptions", "StudySearch", "StudySettings",
           "StudySpec", "evaluations", "make_pruner", "open_search", "read_pointer",
           "run_study", "study_evaluator", "work"]


def run_study(spec: StudySpec, space: SearchSpace, evaluator: Evaluator, *,
              parts: PartsFactory | None = None, searcher: MultiTrialSearcher | None = None,
              queue: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> optuna.Study:
    """Run the study of ``spec`` until it holds ``n_trials`` evaluations (module docstring).

    ``evaluator`` runs the trials of this process; with ``spec.workers > 1``, ``parts()``
    builds the space and the evaluator in each worker process instead. ``searcher``: a
    built sampler factory instead of the registered ``spec.searcher`` (one process only:
    a worker process finds searchers by name); ``queue``: ``(tag, architecture)`` pairs
    queued on a new study after its seed architectures (a method's own picks,
    :mod:`searchers.queued`). Returns the study, the only store of the trials
    (``study.best_trial``, ``study.best_trials``).
    """
    if searcher is not None and (spec.workers > 1 or spec.attach):
        raise NasError(f"searcher {spec.searcher!r} runs its trials in one process; drop "
                       "--workers and --attach (workers: 1)")
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    if spec.storage == MEMORY and (spec.workers > 1 or spec.attach or spec.resume):
        raise NasError(f"study {spec.study_name!r}: an in-memory storage ({MEMORY}) has one "
                       "worker and no resume; name a journal file or a database")
    storage = spec_storage(spec)
    exists = spec.study_name in optuna.get_all_study_names(storage)
    if spec.attach and not exists:
        raise StorageError(f"no study {spec.study_name!r} in {spec.storage}; start the first "
                           "worker without --attach")
    if exists and not (spec.attach or spec.resume):
        raise NasError(f"study {spec.study_name!r} already exists in {spec.storage}; pass "
                       "--resume to continue it or --attach to add a worker to it")
    search = open_search(spec, space, evaluator.objectives, storage, searcher)
    study = search.study
    check_study(search, spec)
    if not exists or unfinished(study):
        create(search, spec, queue)
    if spec.n_trials is None:
        spec.n_trials = int(study.user_attrs.get("n_trials", 1))
    elif spec.n_trials != study.user_attrs.get("n_trials"):
        study.set_user_attr("n_trials", spec.n_trials)
    write_pointer(spec, search)
    log.info("study %s in %s: %s, %d trials, objectives %s", spec.study_name, spec.storage,
             spec.searcher, spec.n_trials, [o.name for o in search.objectives])
    if spec.workers <= 1:
        with progress(spec) as bar:
            work(search, evaluator, spec, on_trial=lambda: bar(evaluations(study)))
    else:
        if parts is None:
            raise NasError("several workers need the method's parts factory")
        run_workers(spec, parts, spec.workers)
    recovered = recover_stale_trials(study, spec.settings.retries)
    if recovered:
        log.warning("trial(s) %s: their worker is gone; failed, and queued again for a "
                    "--resume", recovered)
    return study
