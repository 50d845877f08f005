"""The multi-trial loop: ask → evaluate → tell on an Optuna study, in one process or in
several (issue 14, SPEC §9).

:func:`run_study` drives any registered multi-trial searcher (:mod:`searchers.
optuna_searchers`) and any evaluator:

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

:class:`StudySettings` is the experiment file's ``multi_trial:`` section and
:class:`StudyOptions` the command line's part; :func:`study_evaluator` decides the
objectives (one scalarised objective, or several for nsga2/tpe/gp).
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState

from evaluators.base import EvalResult, Evaluator, Objective, run_evaluation
from evaluators.penalty import COSTS, PenaltyEvaluator
from nas.checkpoint import atomic_write_json
from nas.errors import NasError
from nas.units import human
from searchers.base import SEARCHERS, Candidate, SearcherError
from searchers.optuna_bridge import Budget
from searchers.optuna_searchers import EVALUATED, OptunaSearcher
from searchers.seeds import seed_architectures
from searchers.storage import (
    StorageError,
    abandon_trial,
    heartbeat,
    open_storage,
    recover_stale_trials,
    storage_url,
    worker_info,
)

if TYPE_CHECKING:
    from nas.space import SearchSpace

log = logging.getLogger("nas.study")

POINTER = "study.json"
PRUNERS = ("none", "median", "halving")

#: What a worker process needs besides the spec: ``() -> (space, evaluator)``, picklable
#: (a module-level function, or ``functools.partial`` of one).
PartsFactory = Callable[[], "tuple[SearchSpace, Evaluator]"]


# ---------------------------------------------------------------------------
# settings
# ---------------------------------------------------------------------------


@dataclass
class StudySettings:
    """A multi-trial search, as an experiment file's ``multi_trial:`` section.

    n_trials: evaluations in the study (``None``: the method's default).
    targets, penalty_weight: soft cost targets that scalarise the objective (single-
        objective searchers: lanas, random), e.g. ``{latency_ms: 2.0}``:
        ``score − λ·max(0, cost/target − 1)`` (:class:`~evaluators.penalty.PenaltyEvaluator`).
    extra_objectives: costs added as minimised objectives for searchers that handle
        several (nsga2, tpe, gp, random), e.g. ``[latency_ms]``: a Pareto front.
    max_params, max_flops: a hard budget, checked from the graph before any training;
        over-budget proposals are rejected (recorded, never evaluated).
    seeds: architectures evaluated first: ``default``, ``largest``, ``smallest`` or a
        JSON file (a published architecture); none by default (a random baseline stays
        random).
    pruner: ``none``, ``median`` or ``halving`` (Optuna's MedianPruner,
        SuccessiveHalvingPruner) with ``pruner_options``.
    samplers: per searcher name, keyword options of its sampler (``{lanas:
        {n_startup_trials: 4}, nsga2: {population_size: 4}}``).
    retries: how often a trial whose worker died is run again.
    heartbeat_interval, grace_period: seconds, for RDB storage (Optuna's heartbeat).
    """

    n_trials: int | None = None
    targets: dict = field(default_factory=dict)
    penalty_weight: float = 1.0
    extra_objectives: list = field(default_factory=list)
    max_params: float | None = None
    max_flops: float | None = None
    seeds: list = field(default_factory=list)
    pruner: str = "none"
    pruner_options: dict = field(default_factory=dict)
    samplers: dict = field(default_factory=dict)
    retries: int = 2
    heartbeat_interval: int = 10
    grace_period: int = 30

    def __post_init__(self) -> None:
        def need(ok: bool, what: str) -> None:
            if not ok:
                raise ValueError(what)

        need(self.n_trials is None or self.n_trials >= 1,
             f"n_trials must be None or >= 1, got {self.n_trials!r}")
        for name, value in self.targets.items():
            need(name in COSTS and isinstance(value, int | float) and value > 0,
                 f"targets: {name}: {value!r}; targets are positive numbers for {list(COSTS)}")
        need(self.penalty_weight >= 0, f"penalty_weight must be >= 0, got {self.penalty_weight}")
        need(isinstance(self.extra_objectives, list)
             and all(n in COSTS for n in self.extra_objectives),
             f"extra_objectives must be among {list(COSTS)}, got {self.extra_objectives!r}")
        for name in ("max_params", "max_flops"):
            value = getattr(self, name)
            need(value is None or value > 0, f"{name} must be None or > 0, got {value!r}")
        need(isinstance(self.seeds, list) and all(isinstance(s, str) for s in self.seeds),
             f"seeds must be a list of names or file paths, got {self.seeds!r}")
        need(self.pruner in PRUNERS, f"pruner must be one of {PRUNERS}, got {self.pruner!r}")
        make_pruner(self)  # its options, checked now
        need(all(isinstance(v, dict) for v in self.samplers.values()),
             f"samplers maps searcher names to option mappings, got {self.samplers!r}")
        known = [n for n in SEARCHERS.names() if SEARCHERS.kind_of(n) == "multi-trial"]
        unknown = sorted(set(self.samplers) - set(known))
        need(not unknown, f"samplers: unknown searcher {unknown[0] if unknown else ''!r}; "
                          f"known: {', '.join(known)}")
        need(self.retries >= 0, f"retries must be >= 0, got {self.retries}")
        need(self.heartbeat_interval >= 1 and self.grace_period > self.heartbeat_interval,
             "heartbeat_interval must be >= 1 and grace_period larger, got "
             f"{self.heartbeat_interval} and {self.grace_period}")

    @property
    def budget_kwargs(self) -> dict[str, float | None]:
        return {"max_params": self.max_params, "max_flops": self.max_flops}


@dataclass
class StudyOptions:
    """The command line's part of a multi-trial run (none of it changes a trial's result).

    n_trials: overrides the experiment's (and extends a finished study on ``--resume``).
    timeout: seconds after which a worker starts no new trial.
    storage: an RDB URL or a journal file path (default ``RUN_DIR/study.journal``).
    workers: processes evaluating trials in parallel, one torch thread each.
    attach: join an existing study (``storage``) instead of creating one.
    """

    n_trials: int | None = None
    timeout: float | None = None
    storage: str | None = None
    workers: int = 1
    attach: bool = False

    def __post_init__(self) -> None:
        if self.n_trials is not None and self.n_trials < 1:
            raise NasError(f"--n-trials must be a positive integer, got {self.n_trials}")
        if self.timeout is not None and not self.timeout > 0:
            raise NasError(f"--timeout must be a positive number of seconds, got {self.timeout}")
        if self.workers < 1:
            raise NasError(f"--workers must be a positive integer, got {self.workers}")
        if self.attach and self.storage is None:
            raise NasError("--attach needs --storage: the first worker's study.journal file "
                           "or database URL")
        if self.storage is not None:
            storage_url(self.storage, ".")  # a bad scheme fails now, before any stage


def study_evaluator(inner: Evaluator, space: SearchSpace, settings: StudySettings,
                    searcher: str, seq_len: int = 128) -> Evaluator:
    """The evaluator a study optimises: ``inner`` plus the cost objectives that
    ``settings`` asks for and the searcher can take.

    * a searcher that handles several objectives with ``extra_objectives``: the inner
      objective(s) and the costs, minimised (a Pareto front);
    * otherwise, with ``targets``: the inner objective with the soft penalty (one line in
      the log says that the extra objectives were scalarised);
    * a single-objective searcher with extra objectives and no targets: refused.
    """
    multi = SEARCHERS.get(searcher).multi_objective
    if settings.extra_objectives and multi:
        return PenaltyEvaluator(inner, space, seq_len=seq_len,
                                extra_objectives=settings.extra_objectives)
    if settings.extra_objectives and not settings.targets:
        raise SearcherError(
            f"searcher {searcher!r} is single-objective, and the experiment asks for the "
            f"objectives {[*inner.objective_names, *settings.extra_objectives]} with no "
            "multi_trial.targets to scalarise them; add targets (e.g. {latency_ms: 2.0}) "
            "or use --searcher nsga2, tpe or gp")
    if settings.targets:
        if settings.extra_objectives:
            log.info("%s is single-objective: optimising %s with a penalty past the "
                     "targets %s instead of the objectives %s", searcher,
                     inner.objective_names[0], settings.targets,
                     [*inner.objective_names, *settings.extra_objectives])
        return PenaltyEvaluator(inner, space, seq_len=seq_len, targets=settings.targets,
                                penalty_weight=settings.penalty_weight)
    return inner


def make_pruner(settings: StudySettings) -> optuna.pruners.BasePruner:
    kinds = {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
             "halving": optuna.pruners.SuccessiveHalvingPruner}
    try:
        return kinds[settings.pruner](**settings.pruner_options)
    except (TypeError, ValueError) as err:
        raise NasError(f"pruner_options for {settings.pruner!r}: {err}") from None


# ---------------------------------------------------------------------------
# the study
# ---------------------------------------------------------------------------


@dataclass
class StudySpec:
    """Everything that identifies a study and how a worker runs it (picklable)."""

    searcher: str
    study_name: str
    storage: str
    seed: int
    settings: StudySettings
    run_dir: str
    n_trials: int | None = None  # None: the study's own (an attached worker)
    timeout: float | None = None
    seq_len: int = 128
    progress: bool = False
    resume: bool = False  # continue the run folder's study
    attach: bool = False  # join an existing study (a worker of its own run folder)
    workers: int = 1
    #: how to export a trial's model (``nas export --run``): labels, tokenizer, task...
    export: dict = field(default_factory=dict)

    @classmethod
    def for_run(cls, *, searcher: str, name: str, run_dir: str | Path, seed: int,
                settings: StudySettings, options: StudyOptions | None, default_trials: int,
                resume: bool = False, seq_len: int = 128, progress: bool = False) -> StudySpec:
        """The spec of a method's multi-trial stage: the storage from the command line, or
        the one a resumed run used, or ``RUN_DIR/study.journal``."""
        options = options or StudyOptions()
        pointer = read_pointer(run_dir) if resume else None
        if pointer is not None and pointer["searcher"] != searcher:
            raise NasError(f"{Path(run_dir) / POINTER}: this run folder holds a "
                           f"{pointer['searcher']} study; resume it with --searcher "
                           f"{pointer['searcher']} or use another --run-dir")
        if options.storage is not None:
            url = storage_url(options.storage, run_dir)
        elif pointer is not None:
            url = pointer["storage"]
        else:
            url = storage_url(None, run_dir)
        n_trials = options.n_trials
        if n_trials is None and not options.attach:
            n_trials = settings.n_trials or default_trials
        return cls(searcher=searcher, study_name=f"{name}-{searcher}", storage=url, seed=seed,
                   settings=settings, run_dir=str(Path(run_dir).resolve()),
                   n_trials=n_trials, timeout=options.timeout, seq_len=seq_len,
                   progress=progress, resume=resume, attach=options.attach,
                   workers=options.workers)


def read_pointer(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN_DIR/study.json``: which storage and study a run folder's search uses."""
    path = Path(run_dir) / POINTER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not all(k in data for k in ("storage", "study_name", "searcher")):
            raise ValueError("missing keys")
    except (ValueError, OSError) as err:
        raise NasError(f"{path}: unreadable study pointer ({err}); delete it to start the "
                       "search again") from None
    return data


def _open_storage(spec: StudySpec) -> Any:
    s = spec.settings
    return open_storage(spec.storage, retries=s.retries, heartbeat_interval=s.heartbeat_interval,
                        grace_period=s.grace_period)


def open_searcher(spec: StudySpec, space: SearchSpace, objectives: tuple[Objective, ...],
                  storage: Any = None) -> OptunaSearcher:
    """The spec's searcher on its storage (the study is created if it does not exist)."""
    s = spec.settings
    storage = storage if storage is not None else _open_storage(spec)
    cls = SEARCHERS.get(spec.searcher)
    if not issubclass(cls, OptunaSearcher):
        raise NasError(f"searcher {spec.searcher!r} is not a multi-trial Optuna searcher")
    return cls(space, seed=spec.seed, objectives=objectives, storage=storage,
               study_name=spec.study_name,
               budget=Budget(seq_len=spec.seq_len, **s.budget_kwargs),
               sampler_options=s.samplers.get(spec.searcher, {}), pruner=make_pruner(s),
               trial_attrs={"worker": worker_info(spec.run_dir)})


def _check_study(searcher: OptunaSearcher, spec: StudySpec, space: SearchSpace) -> None:
    """A study made by another search (searcher, objectives, space) is refused."""
    attrs = searcher.study.user_attrs
    mine = {"searcher": spec.searcher, "space": space.name,
            "objectives": [o.to_dict() for o in searcher.objectives]}
    for key, value in mine.items():
        if key in attrs and attrs[key] != value:
            raise NasError(f"study {spec.study_name!r} in {spec.storage} has {key} "
                           f"{attrs[key]!r}, this run {value!r}; use the same experiment, "
                           "or another storage or run folder")


def run_study(spec: StudySpec, space: SearchSpace, evaluator: Evaluator, *,
              parts: PartsFactory | None = None) -> optuna.Study:
    """Run the study of ``spec`` until it holds ``n_trials`` evaluations (module docstring).

    ``evaluator`` runs the trials of this process; with ``spec.workers > 1``, ``parts()``
    builds the space and the evaluator in each worker process instead. Returns the study.
    """
    Path(spec.run_dir).mkdir(parents=True, exist_ok=True)
    storage = _open_storage(spec)
    exists = spec.study_name in optuna.get_all_study_names(storage)
    if spec.attach and not exists:
        raise StorageError(f"no study {spec.study_name!r} in {spec.storage}; start the first "
                           "worker without --attach")
    if exists and not (spec.attach or spec.resume):
        raise NasError(f"study {spec.study_name!r} already exists in {spec.storage}; pass "
                       "--resume to continue it or --attach to add a worker to it")
    searcher = open_searcher(spec, space, evaluator.objectives, storage)
    study = searcher.study
    _check_study(searcher, spec, space)
    if not exists:
        _create(searcher, spec, space)
    if spec.n_trials is None:
        spec.n_trials = int(study.user_attrs.get("n_trials", 1))
    elif spec.n_trials != study.user_attrs.get("n_trials"):
        study.set_user_attr("n_trials", spec.n_trials)
    atomic_write_json(Path(spec.run_dir) / POINTER, {
        "storage": spec.storage, "study_name": spec.study_name, "searcher": spec.searcher,
        "objectives": [o.to_dict() for o in searcher.objectives], "space": space.name})
    log.info("study %s in %s: %s, %d trials, objectives %s", spec.study_name, spec.storage,
             spec.searcher, spec.n_trials, [o.name for o in searcher.objectives])
    if spec.workers <= 1:
        with _progress(spec) as bar:
            work(searcher, evaluator, spec, on_trial=lambda: bar(evaluations(study)))
    else:
        if parts is None:
            raise NasError("several workers need the method's parts factory")
        _run_workers(spec, parts, spec.workers)
    recovered = recover_stale_trials(study, spec.settings.retries)
    if recovered:
        log.warning("trial(s) %s: their worker is gone; failed, and queued again for a "
                    "--resume", recovered)
    return study


def _create(searcher: OptunaSearcher, spec: StudySpec, space: SearchSpace) -> None:
    study = searcher.study
    with warnings.catch_warnings():  # so that optuna-dashboard names the objectives
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o.name for o in searcher.objectives])
    for key, value in {"searcher": spec.searcher, "space": space.name,
                       "space_config": space.config, "seed": spec.seed, "export": spec.export,
                       "objectives": [o.to_dict() for o in searcher.objectives],
                       "settings": asdict(spec.settings)}.items():
        study.set_user_attr(key, value)
    budget = searcher.bridge.budget
    for tag, arch in seed_architectures(space, spec.settings.seeds, budget):
        searcher.enqueue(arch, tag)
        log.info("seed %s: %s queued", tag, arch.id)


# ---------------------------------------------------------------------------
# workers
# ---------------------------------------------------------------------------


def evaluations(study: optuna.Study) -> int:
    """Evaluations in the study: finished ones and those running now (rejected and
    repeated proposals, and the trials of dead workers, do not count)."""
    count = 0
    for t in study.get_trials(deepcopy=False):
        outcome = t.user_attrs.get("outcome")
        if outcome in EVALUATED or (t.state == TrialState.RUNNING
                                    and t.user_attrs.get("evaluating")):
            count += 1
    return count


def claims_before(study: optuna.Study, number: int) -> int:
    """Evaluations that trials numbered below ``number`` have finished or may still be
    doing (RUNNING ones, evaluating or still being proposed). Trial numbers come from
    the storage, so of two workers racing for the last evaluation the lower number wins
    and the other withdraws: a study never runs more than ``n_trials``."""
    return sum(1 for t in study.get_trials(deepcopy=False) if t.number < number and (
        t.user_attrs.get("outcome") in EVALUATED or t.state == TrialState.RUNNING))


def work(searcher: OptunaSearcher, evaluator: Evaluator, spec: StudySpec,
         on_trial: Callable[[], None] | None = None) -> int:
    """This process's share of the study; returns how many trials it evaluated."""
    study = searcher.study
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
        candidate = searcher.ask()
        number = searcher.trial_number(candidate)
        if claims_before(study, number) >= spec.n_trials:  # another worker took the last
            searcher.withdraw(candidate, "surplus", f"the study had its {spec.n_trials} "
                                                    "trials when this one was asked")
            break
        searcher.set_trial_attr(candidate, "evaluating", True)
        try:
            with heartbeat(study, number):
                result = run_evaluation(evaluator, candidate.arch,
                                        searcher.evaluation_trial(candidate))
        except BaseException:  # Ctrl-C, a kill signal: the trial is run again on --resume
            abandon_trial(study, number, spec.settings.retries)
            log.warning("trial %d interrupted; it runs again on --resume", number)
            raise
        weights = _weights_path(evaluator, candidate.arch)
        if weights is not None:
            searcher.set_trial_attr(candidate, "weights", weights)
        _write_record(spec, searcher, candidate, result, weights)
        searcher.tell(candidate, result)
        done += 1
        log.info(trial_line(number, candidate, result, searcher.objectives))
        if on_trial is not None:
            on_trial()
    return done


def _weights_path(evaluator: Evaluator, arch: Any) -> str | None:
    """Where the evaluator (or one it wraps) wrote the trained weights of ``arch``."""
    while evaluator is not None:
        finder = getattr(evaluator, "weights_path", None)
        if finder is not None:
            path = finder(arch)
            return str(Path(path).resolve()) if path is not None and Path(path).is_file() \
                else None
        evaluator = getattr(evaluator, "inner", None)
    return None


def _write_record(spec: StudySpec, searcher: OptunaSearcher, candidate: Candidate,
                  result: EvalResult, weights: str | None) -> None:
    number = searcher.trial_number(candidate)
    folder = Path(spec.run_dir) / "trials" / str(number)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "result.json", {
        "trial": number, "study": spec.study_name, "searcher": spec.searcher,
        "space": searcher.space.name, "arch_id": candidate.arch.id,
        "arch": dict(candidate.arch), "params": candidate.params["params"],
        "objectives": [o.to_dict() for o in searcher.objectives],
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
def _progress(spec: StudySpec) -> Iterator[Callable[[int], None]]:
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


def _worker_main(spec: StudySpec, parts: PartsFactory, index: int) -> None:
    """A worker process: one torch thread, its own searcher on the shared study."""
    logging.basicConfig(level=logging.INFO,
                        format=f"%(asctime)s worker {index}: %(message)s")
    import torch

    torch.set_num_threads(1)
    space, evaluator = parts()
    searcher = open_searcher(spec, space, evaluator.objectives)
    work(searcher, evaluator, spec)


def _run_workers(spec: StudySpec, parts: PartsFactory, workers: int) -> None:
    """Start ``workers`` processes on the study and wait for them (progress meanwhile)."""
    context = multiprocessing.get_context("spawn")  # fork after torch threads can hang
    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = "1"  # read when the child imports torch
    worker_spec = StudySpec(**{**asdict(spec), "settings": spec.settings, "progress": False})
    try:
        procs = [context.Process(target=_worker_main, args=(worker_spec, parts, i),
                                 name=f"nas-worker-{i}") for i in range(workers)]
        for p in procs:
            p.start()
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved
    log.info("%d workers started (pids %s)", workers, [p.pid for p in procs])
    study = optuna.load_study(study_name=spec.study_name, storage=_open_storage(spec))
    try:
        with _progress(spec) as bar:
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
