"""The multi-trial loop: ask → evaluate → tell, every finished trial kept on disk.

Each trial's candidate and result are written to ``<folder>/<id>.json`` as soon as the
trial ends, so an interrupted search loses nothing finished: on a re-run the searcher
asks again (same seed, same candidates), finished trials are told their stored results
instead of being evaluated again, and only the rest run. ``only=i`` evaluates trial
``i`` alone, so that separate processes can share one set of trials.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path

from evaluators.base import EvalResult, Evaluator, NullTrial, run_evaluation
from nas.checkpoint import atomic_write_json
from nas.errors import NasError
from searchers.base import Candidate, MultiTrialSearcher

log = logging.getLogger("nas.trials")


def trial_path(folder: Path, number: int) -> Path:
    return folder / f"{number}.json"


def read_trial(folder: Path, number: int) -> tuple[Candidate, EvalResult] | None:
    """A finished trial from disk, or ``None``; a corrupt file is one line naming it."""
    path = trial_path(folder, number)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        return Candidate.from_dict(data["candidate"]), EvalResult.from_dict(data["result"])
    except (ValueError, KeyError, TypeError) as err:
        raise NasError(f"{path}: unreadable trial record ({type(err).__name__}: {err}); "
                       "delete it to run the trial again") from None


def run_trials(searcher: MultiTrialSearcher, evaluator: Evaluator, n_trials: int,
               folder: str | Path, *, only: int | None = None,
               on_result: Callable[[Candidate, EvalResult], None] | None = None
               ) -> list[tuple[Candidate, EvalResult]]:
    """Run ``n_trials`` trials (those on disk are replayed, not re-run); returns every
    finished ``(candidate, result)``, in trial order."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    finished = []
    for _ in range(n_trials):
        candidate = searcher.ask()
        stored = read_trial(folder, candidate.id)
        if stored is not None:
            if stored[0].arch != candidate.arch:
                raise NasError(f"{trial_path(folder, candidate.id)}: trial {candidate.id} was "
                               f"{stored[0].arch.id}, the searcher now proposes "
                               f"{candidate.arch.id} (another seed or space?); use a new run "
                               "directory")
            result = stored[1]
        elif only is None or only == candidate.id:
            log.info("trial %d: evaluating %s", candidate.id, candidate.arch.id)
            result = run_evaluation(evaluator, candidate.arch, NullTrial(number=candidate.id))
            atomic_write_json(trial_path(folder, candidate.id),
                              {"candidate": candidate.to_dict(), "result": result.to_dict()})
            log.info("trial %d: %s %s (%.0f s)", candidate.id, result.status,
                     list(result.values) or result.reason, result.seconds)
            if on_result is not None:
                on_result(candidate, result)
        else:
            continue  # another process evaluates this one
        searcher.tell(candidate, result)
        finished.append((candidate, result))
    return finished
