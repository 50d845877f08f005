"""The settings of a multi-trial search: the experiment file's ``multi_trial:`` section
(:class:`StudySettings`) and the command line's part (:class:`StudyOptions`), both
checked when they are read (docs/reference.md#optuna)."""

from __future__ import annotations

from dataclasses import dataclass, field

import optuna

from evaluators.penalty import COSTS
from nas.errors import NasError
from nas.timing import LATENCY_RUNTIMES
from searchers.base import searcher_names
from searchers.storage import storage_url

PRUNERS = ("none", "median", "halving")


@dataclass
class StudySettings:
    """A multi-trial search, as an experiment file's ``multi_trial:`` section.

    n_trials: evaluations in the study (``None``: the method's default).
    targets, penalty_weight: soft cost targets that scalarise the objective (single-
        objective searchers: lanas, random), e.g. ``{latency_ms: 2.0}``:
        ``score − λ·max(0, cost/target − 1)`` (:class:`~evaluators.penalty.PenaltyEvaluator`).
    extra_objectives: costs added as minimised objectives for searchers that handle
        several (lamoo, nsga2, tpe, gp, random), e.g. ``[latency_ms]``: a Pareto front.
    max_params, max_flops, max_latency_ms: hard constraints, checked before any training
        (parameters and FLOPs counted from the graph, batch-1 latency predicted by this
        machine's latency model, calibrated once for the space if its table has none).
        An infeasible proposal is never evaluated: a constraint-aware sampler (tpe,
        nsga2, gp) gets it as a complete trial with placeholder values and its
        constraint values (Optuna's ``constraints_func``), the others have it rejected
        and ask again (:mod:`searchers.proposals`).
    latency_runtime: what ``max_latency_ms`` is predicted on: ``torch`` (default), or the
        ONNX graph of ``onnx``/``onnx-int8`` (its own latency table; method search sets it
        from its ``latency:`` section).
    seeds: architectures evaluated first: ``default``, ``largest``, ``smallest`` or a
        JSON file (a published architecture); none by default (a random baseline stays
        random).
    pruner: ``none``, ``median`` or ``halving`` (Optuna's MedianPruner,
        SuccessiveHalvingPruner) with ``pruner_options``.
    samplers: per searcher name, keyword options of its sampler (``{lanas:
        {n_startup_trials: 4}, nsga2: {population_size: 4}, lamoo: {cp: 0.1}}``; LaMOO's
        options and defaults: :class:`searchers.lamoo.LaMOOSampler`, docs/optuna.md);
        method search also takes them as ``searcher: {name: lanas, settings: {...}}``.
    retries: how often a trial whose worker died is run again.
    heartbeat_interval, grace_period: seconds, for RDB storage (Optuna's heartbeat).
    """

    n_trials: int | None = None
    targets: dict = field(default_factory=dict)
    penalty_weight: float = 1.0
    extra_objectives: list = field(default_factory=list)
    max_params: float | None = None
    max_flops: float | None = None
    max_latency_ms: float | None = None
    latency_runtime: str = "torch"
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
        need(self.latency_runtime in LATENCY_RUNTIMES,
             f"latency_runtime must be {' or '.join(LATENCY_RUNTIMES)}, got "
             f"{self.latency_runtime!r}")
        for name in ("max_params", "max_flops", "max_latency_ms"):
            value = getattr(self, name)
            need(value is None or value > 0, f"{name} must be None or > 0, got {value!r}")
        need(isinstance(self.seeds, list) and all(isinstance(s, str) for s in self.seeds),
             f"seeds must be a list of names or file paths, got {self.seeds!r}")
        need(self.pruner in PRUNERS, f"pruner must be one of {PRUNERS}, got {self.pruner!r}")
        make_pruner(self)  # its options, checked now
        need(all(isinstance(v, dict) for v in self.samplers.values()),
             f"samplers maps searcher names to option mappings, got {self.samplers!r}")
        known = searcher_names("multi-trial")
        unknown = sorted(set(self.samplers) - set(known))
        need(not unknown, f"samplers: unknown searcher {unknown[0] if unknown else ''!r}; "
                          f"known: {', '.join(known)}")
        need(self.retries >= 0, f"retries must be >= 0, got {self.retries}")
        need(self.heartbeat_interval >= 1 and self.grace_period > self.heartbeat_interval,
             "heartbeat_interval must be >= 1 and grace_period larger, got "
             f"{self.heartbeat_interval} and {self.grace_period}")

    @property
    def budget_kwargs(self) -> dict[str, float | None]:
        """The :class:`~searchers.optuna_bridge.Budget` limits (``max_latency_ms`` also
        needs the latency model: :func:`searchers.study.study_budget`)."""
        return {"max_params": self.max_params, "max_flops": self.max_flops,
                "max_latency_ms": self.max_latency_ms}


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


def make_pruner(settings: StudySettings) -> optuna.pruners.BasePruner:
    kinds = {"none": optuna.pruners.NopPruner, "median": optuna.pruners.MedianPruner,
             "halving": optuna.pruners.SuccessiveHalvingPruner}
    try:
        return kinds[settings.pruner](**settings.pruner_options)
    except (TypeError, ValueError) as err:
        raise NasError(f"pruner_options for {settings.pruner!r}: {err}") from None
