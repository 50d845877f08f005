"""The workers of a study: this process's share of the trials (:func:`work`: ask →
evaluate → tell, with a trial record and a log line per evaluation) and the worker
processes of ``--workers N`` (:func:`run_workers`), with a progress bar over the study's
evaluations (docs/reference.md#optuna)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from evaluators.base import EvalResult, Evaluator, Objective, run_evaluation
from nas.checkpoint import atomic_write_json
from nas.units import human
from searchers.base import Candidate
from searchers.proposals import StudySearch, claims_before, evaluations
from searchers.storage import (
    abandon_trial,
    heartbeat,
    record_path,
    recover_stale_trials,
    worker_info,
)
from searchers.study import StudySpec, open_search, spec_storage

if TYPE_CHECKING:
    from nas.space import SearchSpace

log = logging.getLogger("nas.study")

#: What a worker process needs besides the spec: ``() -> (space, evaluator)``, picklable
#: (a module-level function, or ``functools.partial`` of one).
PartsFactory = Callable[[], "tuple[SearchSpace, Evaluator]"]


def work(search: StudySearch, evaluator: Evaluator, spec: StudySpec,
         on_trial: Callable[[], None] | None = None) -> int:
    """This process's share of the study; returns how many trials it evaluated."""
    study = search.study
    started = time.monotonic()
    done = 0
    assert spec.n_trials is not None  # noqa: S101 (run_study resolves it first)
    while True:
        recovered = recover_stale_trials(study, spec.settings.retries)
        if recovered:
            log.warning("trial(s) %s: their worker is gone; failed and queued again", recovered)
        if evaluations(study) >= spec.n_trials:
            break
        if spec.timeout is not None and time.monotonic() - started >= spec.timeout:
            log.info("timeout: %g s passed; no new trial started", spec.timeout)
            break
        candidate = search.ask()
        number = candidate.id
        if claims_before(study, number) >= spec.n_trials:  # another worker took the last
            search.withdraw(candidate, "surplus", f"the study had its {spec.n_trials} "
                                                  "trials when this one was asked")
            break
        search.set_trial_attr(candidate, "evaluating", True)
        try:
            with heartbeat(study, number):
                result = run_evaluation(evaluator, candidate.arch,
                                        search.evaluation_trial(candidate))
        except BaseException:  # Ctrl-C, a kill signal: the trial is run again on --resume
            abandon_trial(study, number, spec.settings.retries)
            log.warning("trial %d interrupted; it runs again on --resume", number)
            raise
        weights = _weights_path(evaluator, candidate.arch, spec.run_dir)
        if weights is not None:
            search.set_trial_attr(candidate, "weights", weights)
        _write_record(spec, search, candidate, result, weights)
        search.tell(candidate, result)
        done += 1
        log.info(trial_line(number, candidate, result, search.objectives))
        if on_trial is not None:
            on_trial()
    return done


def _weights_path(evaluator: Evaluator, arch: Any, run_dir: str | Path) -> str | None:
    """Where the evaluator (or one it wraps) wrote the trained weights of ``arch``:
    relative to the study's run folder when inside it (a copied or moved folder exports
    its own files), else absolute."""
    current: Evaluator | None = evaluator  # then the evaluators it wraps (``inner``)
    while current is not None:
        finder = getattr(current, "weights_path", None)
        if finder is not None:
            path = finder(arch)
            return record_path(path, run_dir) if path is not None and Path(path).is_file() \
                else None
        current = getattr(current, "inner", None)
    return None


def _write_record(spec: StudySpec, search: StudySearch, candidate: Candidate,
                  result: EvalResult, weights: str | None) -> None:
    """``RUN_DIR/trials/<number>/result.json``: what this worker ran and got (a copy for
    reading a run folder by hand; the study is what every command reads)."""
    number = candidate.id
    folder = Path(spec.run_dir) / "trials" / str(number)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "result.json", {
        "trial": number, "study": spec.study_name, "searcher": spec.searcher,
        "space": search.space.name, "arch_id": candidate.arch.id,
        "arch": dict(candidate.arch), "params": candidate.params,
        "objectives": [o.to_dict() for o in search.objectives],
        "result": result.to_dict(), "weights": weights, "worker": worker_info(spec.run_dir)})


def trial_line(number: int, candidate: Candidate, result: EvalResult,
               objectives: tuple[Objective, ...]) -> str:
    """One log line per trial: number, worker, architecture, values, costs, wall time."""
    if result.ok:
        what = ", ".join(f"{o.name} {v:.4g}" for o, v in zip(objectives, result.values,
                                                              strict=True))
    else:
        what = f"{result.status}: {result.reason}"
    costs = [f"{k} {human(result.costs[k])}" for k in ("params", "flops")
             if k in result.costs]
    if "latency_ms" in result.costs:
        costs.append(f"latency {result.costs['latency_ms']:.3g} ms")
    return (f"trial {number} [pid {os.getpid()}] arch {candidate.arch.id}: {what}"
            + (f" | {', '.join(costs)}" if costs else "") + f" | {result.seconds:.1f} s")


@contextlib.contextmanager
def progress(spec: StudySpec) -> Iterator[Callable[[int], None]]:
    """A progress bar over the study's evaluations (``update(count)``)."""
    if not spec.progress:
        yield lambda n: None
        return
    from tqdm.auto import tqdm

    bar = tqdm(total=spec.n_trials, desc=f"{spec.searcher} trials", unit="trial")

    def update(n: int) -> None:
        bar.n = min(n, bar.total)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()


def _worker_main(spec: StudySpec, parts: PartsFactory, index: int, device: str = "cpu",
                 precision: str = "fp32") -> None:
    """A worker process: one torch thread, its own search (and sampler) on the shared
    study, on the device and precision of the run that started it (:mod:`nas.device`)."""
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s worker {index}: %(message)s")
    import torch

    from nas.device import use_device

    torch.set_num_threads(1)
    with use_device(torch.device(device), precision):
        space, evaluator = parts()
        work(open_search(spec, space, evaluator.objectives), evaluator, spec)


def run_workers(spec: StudySpec, parts: PartsFactory, workers: int) -> None:
    """Start ``workers`` processes on the study and wait for them (progress meanwhile)."""
    from nas.device import current_device, current_precision

    context = multiprocessing.get_context("spawn")  # fork after torch threads can hang
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # read when the child imports torch
    worker_spec = StudySpec(**{**asdict(spec), "settings": spec.settings, "progress": False})
    try:
        placement = (str(current_device()), current_precision())  # the parent's, by value
        procs = [context.Process(target=_worker_main, args=(worker_spec, parts, i, *placement),
                                 name=f"nas-worker-{i}") for i in range(workers)]
        for p in procs:
            p.start()
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    log.info("%d workers started (pids %s)", workers, [p.pid for p in procs])
    study = optuna.load_study(study_name=spec.study_name, storage=spec_storage(spec))
    try:
        with progress(spec) as bar:
            while any(p.is_alive() for p in procs):
                bar(evaluations(study))
                for p in procs:
                    p.join(timeout=1.0 / len(procs))
            bar(evaluations(study))
    except BaseException:
        for p in procs:
            p.terminate()
        for p in procs:
            p.join()
        raise
    failed = [(p.name, p.exitcode) for p in procs if p.exitcode != 0]
    if failed:
        log.warning("worker(s) ended abnormally: %s", ", ".join(f"{n} (exit {c})"
                                                                 for n, c in failed))
