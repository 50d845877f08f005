"""A finished (or running) study read back from a run folder: its trials, the best one
or the Pareto front (Optuna's own: ``study.best_trial``, ``study.best_trials``), and the
export of a trial's model (``nas export --run RUN_DIR [--trial N|best]``).

The study is the source of truth (``RUN_DIR/study.json`` names its storage), so a run
folder of an attached worker sees the trials of every worker, and a trial trained by
another worker is exported from the weights that worker recorded.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nas.errors import NasError
from searchers.storage import open_storage, resolve_path
from searchers.study import POINTER, read_pointer


def open_run_study(run_dir: str | Path) -> optuna.Study:
    """The study of a run folder (one-line errors for a folder without one)."""
    if not Path(run_dir).is_dir():
        raise NasError(f"{run_dir}: the run folder does not exist; give the folder a "
                       "`nas run` wrote (runs/NAME, or its --run-dir)")
    pointer = read_pointer(run_dir)
    if pointer is None:
        raise NasError(f"{run_dir} holds no multi-trial study (no {POINTER}); run a search "
                       "with --searcher lanas, lamoo, tpe, nsga2, gp or random first")
    storage = open_storage(pointer["storage"])
    try:
        return optuna.load_study(study_name=pointer["study_name"], storage=storage)
    except KeyError:
        raise NasError(f"{Path(run_dir) / POINTER}: no study {pointer['study_name']!r} in "
                       f"{pointer['storage']}; was the storage moved or deleted?") from None


def complete_trials(study: optuna.Study) -> list[FrozenTrial]:
    """Evaluated trials with a result, by number (rejected and repeated proposals left
    out)."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get("outcome") == "complete"]


def signs(study: optuna.Study) -> list[float]:
    return [1.0 if d == optuna.study.StudyDirection.MAXIMIZE else -1.0
            for d in study.directions]


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """The complete trials no other complete trial dominates: Optuna's front
    (``study.best_trials``; only complete evaluations are COMPLETE trials), by number."""
    return sorted(study.best_trials, key=lambda t: t.number)


def best_trial(study: optuna.Study) -> FrozenTrial:
    """The best complete trial of a single-objective study (Optuna's ``best_trial``), with
    one-line errors for a study without one."""
    if not complete_trials(study):
        raise NasError(f"study {study.study_name!r} has no complete trial yet")
    if len(study.directions) > 1:
        front = ", ".join(str(t.number) for t in pareto_front(study))
        raise NasError(f"study {study.study_name!r} has {len(study.directions)} objectives and "
                       f"no single best trial; pick one of its Pareto front with --trial N "
                       f"(front: {front})")
    return study.best_trial


def pick_trial(study: optuna.Study, which: str | int) -> FrozenTrial:
    """Trial ``which``: ``"best"`` or a trial number with a complete result."""
    if which == "best":
        return best_trial(study)
    try:
        number = int(which)
    except ValueError:
        raise NasError(f"--trial expects a trial number or 'best', got {which!r}") from None
    trials = {t.number: t for t in study.get_trials(deepcopy=False)}
    if number not in trials:
        raise NasError(f"study {study.study_name!r} has no trial {number} (trials 0 to "
                       f"{len(trials) - 1})")
    trial = trials[number]
    if trial.user_attrs.get("outcome") != "complete":
        done = ", ".join(str(t.number) for t in complete_trials(study)[:20])
        raise NasError(f"trial {number} has no trained model (it is "
                       f"{trial.user_attrs.get('outcome') or trial.state.name.lower()}); "
                       f"complete trials: {done or 'none'}")
    return trial


def trial_weights(trial: FrozenTrial, run_dir: str | Path) -> str | None:
    """The trained weights a trial recorded: a relative path is inside the run folder
    of the worker that trained it, this one (``run_dir``) or, for a trial of another
    worker of a shared study, that worker's (``worker.run_dir``)."""
    weights = trial.user_attrs.get("weights")
    if not weights or Path(weights).is_absolute():
        return weights
    mine = resolve_path(weights, run_dir)
    theirs = (trial.user_attrs.get("worker") or {}).get("run_dir")
    if mine.is_file() or not theirs:
        return str(mine)
    return str(resolve_path(weights, theirs))


def export_trial(run_dir: str | Path, which: str | int, output: str | Path | None = None,
                 *, fmt: str = "native", overwrite: bool = False) -> tuple[Path, FrozenTrial]:
    """Export trial ``which`` of the run folder's study (default folder
    ``RUN_DIR/exports/trial<N>``); returns the folder and the trial."""
    from nas.export import export
    from nas.space import get_space

    study = open_run_study(run_dir)
    if which == "best" and len(study.directions) > 1:
        which = _chosen_trial(run_dir, which)
    trial = pick_trial(study, which)
    from nas.plugins import import_run_plugins

    import_run_plugins(run_dir)
    weights = trial_weights(trial, run_dir)
    if not weights or not Path(weights).is_file():
        raise NasError(f"trial {trial.number}: its trained weights are not here "
                       f"({weights or 'none recorded'}); export it on the machine of the "
                       "worker that trained it")
    attrs: Mapping[str, Any] = study.user_attrs
    # a transformer space's config names its family (bert, mobilebert) besides its
    # hyperparameters; the family is the space's, not an argument
    extra = attrs.get("export") or {}
    config = extra.get("space_kwargs")  # the factory's own arguments (method search)
    if config is None:
        config = {k: v for k, v in attrs.get("space_config", {}).items() if k != "family"}
    space = get_space(attrs["space"], **config)
    arch = space.validate(trial.user_attrs["arch"])
    out = Path(output) if output is not None else Path(run_dir) / "exports" / f"trial{trial.number}"
    export(space, arch, out, weights=weights, fmt=fmt, labels=extra.get("labels"),
           tokenizer=extra.get("tokenizer"), max_length=extra.get("max_length", 128),
           task=extra.get("task"), overwrite=overwrite)
    return out, trial


def _chosen_trial(run_dir: str | Path, which: str | int) -> str | int:
    """``best`` of a multi-objective study: the trial the run's final stage chose first
    (``method: search``'s ``final.select``), when it recorded one."""
    from nas.rundir import RunDir

    metrics = RunDir(run_dir).load_json("metrics.json") or {}
    chosen = (metrics.get("search") or {}).get("chosen") or []
    return chosen[0] if chosen else which
