"""The evaluator contract: how a candidate architecture is scored (as in NNI's
evaluator/strategy split: the evaluator owns every forward and backward pass).

Searchers propose, evaluators train and score. An :class:`Evaluator` declares its
:class:`Objective` s (a name and a direction each) and returns an :class:`EvalResult`
for an architecture. The result carries a :class:`Status`: ``complete`` results have one
value per objective; ``failed`` and ``pruned`` results have none, because failure is a
state, not a score of 0 (NNI's ``trial_end(id, success)``; Optuna's trial states).

While it trains, an evaluator reports intermediate values to a :class:`Trial`
(``report``/``should_prune``) and raises :class:`TrialPruned` when told to stop.
:func:`run_evaluation` (also ``evaluator(arch, trial)``) is the one place that turns an
evaluation into a result: it times it, records the reported curve, turns
:class:`TrialPruned` into ``pruned`` and a crash or a non-finite objective into
``failed`` with a one-line reason. Errors caused by the user's set-up
(:class:`~nas.errors.NasError`) are not swallowed: they would fail every candidate alike.

This module imports neither torch nor optuna, so listing evaluators stays cheap.
"""

from __future__ import annotations

import abc
import enum
import inspect
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

from nas.architecture import Architecture
from nas.errors import NasError
from nas.registry import Registry


class EvaluatorError(NasError):
    """An evaluator is set up wrongly (unknown cost, bad direction, missing latency...)."""


class Status(str, enum.Enum):
    """How an evaluation ended."""

    COMPLETE = "complete"
    FAILED = "failed"  # crashed, diverged (NaN) or violates a hard constraint
    PRUNED = "pruned"  # stopped early by the trial's pruner

    def __str__(self) -> str:
        return self.value


Direction = Literal["maximize", "minimize"]


@dataclass(frozen=True)
class Objective:
    """One objective of an evaluator: a name (``"accuracy"``, ``"latency_ms"``) and a
    direction, ``"maximize"`` or ``"minimize"``."""

    name: str
    direction: Direction = "maximize"

    def __post_init__(self) -> None:
        if self.direction not in ("maximize", "minimize"):
            raise EvaluatorError(
                f"objective {self.name!r}: direction must be 'maximize' or 'minimize', "
                f"got {self.direction!r}"
            )

    @property
    def sign(self) -> float:
        """+1 for maximize, −1 for minimize: ``sign·value`` is always "higher is better"."""
        return 1.0 if self.direction == "maximize" else -1.0

    def to_dict(self) -> dict[str, str]:
        return {"name": self.name, "direction": self.direction}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Objective:
        return cls(str(data["name"]), data["direction"])


def _json_safe(value: Any) -> Any:
    """Plain JSON types: numpy scalars become Python numbers, tuples become lists."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        return value.item()
    return value


@dataclass(frozen=True)
class EvalResult:
    """What one evaluation produced.

    values: objective values in the order of the evaluator's ``objectives`` (empty
        unless ``status`` is complete).
    metrics: other measurements (e.g. ``{"accuracy": 0.9, "f1": 0.88}``).
    costs: ``params``, ``flops``, ``latency_ms`` (measured) or ``latency_ms_predicted``...
    reason: why a result failed or was pruned (one line).
    seconds: wall time of the evaluation (set by :func:`run_evaluation`).
    intermediate: the ``(step, value)`` pairs reported to the trial.
    """

    values: tuple[float, ...] = ()
    metrics: dict[str, Any] = field(default_factory=dict)  # numbers, or a curve (a list)
    costs: dict[str, Any] = field(default_factory=dict)
    status: Status = Status.COMPLETE
    reason: str | None = None
    seconds: float = 0.0
    intermediate: list[tuple[int, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "status", Status(self.status))
        except ValueError:
            raise EvaluatorError(
                f"result status must be complete, failed or pruned, got {self.status!r}"
            ) from None
        object.__setattr__(self, "values", tuple(float(v) for v in self.values))
        object.__setattr__(self, "intermediate",
                           [(int(s), float(v)) for s, v in self.intermediate])
        if self.status is not Status.COMPLETE and self.values:
            raise EvaluatorError(
                f"a {self.status} result has no objective values, got {self.values}; "
                "failure is a state, not a score"
            )

    @property
    def ok(self) -> bool:
        return self.status is Status.COMPLETE

    @classmethod
    def failed(cls, reason: str, **fields: Any) -> EvalResult:
        return cls(status=Status.FAILED, reason=_one_line(reason), **fields)

    @classmethod
    def pruned(cls, reason: str = "pruned by the trial", **fields: Any) -> EvalResult:
        return cls(status=Status.PRUNED, reason=_one_line(reason), **fields)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (``json.dumps`` works on it)."""
        return {
            "status": self.status.value,
            "values": list(self.values),
            "metrics": _json_safe(self.metrics),
            "costs": _json_safe(self.costs),
            "reason": self.reason,
            "seconds": self.seconds,
            "intermediate": [[s, v] for s, v in self.intermediate],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EvalResult:
        known = {"status", "values", "metrics", "costs", "reason", "seconds", "intermediate"}
        if not isinstance(data, Mapping) or "status" not in data or set(data) - known:
            extra = sorted(set(data) - known) if isinstance(data, Mapping) else data
            raise EvaluatorError(
                f"an evaluation result is a JSON object with a 'status' and the keys "
                f"{sorted(known)}; got unexpected {extra!r}"
            )
        return cls(
            values=tuple(data.get("values", ())),
            metrics=dict(data.get("metrics", {})),
            costs=dict(data.get("costs", {})),
            status=data["status"],
            reason=data.get("reason"),
            seconds=float(data.get("seconds", 0.0)),
            intermediate=[(s, v) for s, v in data.get("intermediate", [])],
        )


def _one_line(text: str, limit: int = 300) -> str:
    """``text`` on one line (lines joined, whitespace collapsed), cut at ``limit`` chars."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


# ---------------------------------------------------------------------------
# trials: where intermediate values go and who decides to prune
# ---------------------------------------------------------------------------


@dataclass(kw_only=True)
class ScoringData:
    """What every training evaluator's task gives for scoring a candidate.

    val_batches: the batches the objective is measured on (the validation split).
    metric: ``"accuracy"`` or ``"accuracy+f1"``; the objective is their mean.
    latency_batches: batch size → batch for the latency measurement.
    seq_len: the length FLOPs are counted at.
    latency_runtime: what the latency is timed on (``torch``, or the ONNX graph of
    ``onnx``/``onnx-int8``: :data:`nas.timing.LATENCY_RUNTIMES`).
    """

    val_batches: Sequence[Mapping[str, Any]]
    metric: str = "accuracy"
    latency_batches: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    seq_len: int = 128
    latency_runtime: str = "torch"


@dataclass(kw_only=True)
class FullTrainingData(ScoringData):
    """A full (stand-alone) training evaluator's task adds:

    test_batches: batches of the report split (measured, never optimised), optional.
    init(model): called on the freshly built child (e.g. teacher embeddings), optional.
    """

    test_batches: Sequence[Mapping[str, Any]] | None = None
    init: Any = None  # Callable[[model], None]


class TrialPruned(Exception):  # noqa: N818  (named like optuna.TrialPruned on purpose)
    """Raised by an evaluator when its trial says to stop (``should_prune()``).

    Our own class, so evaluators need not import optuna; :func:`run_evaluation` turns it
    into a ``pruned`` result.
    """


@runtime_checkable
class Trial(Protocol):
    """What an evaluator may ask of the trial it runs in (Optuna's ``Trial`` subset)."""

    @property
    def number(self) -> int:
        """The trial's number in its study (read-only: a wrapper may forward it)."""

    def report(self, step: int, value: float) -> None:
        """Record an intermediate objective value (e.g. dev accuracy after epoch ``step``)."""

    def should_prune(self) -> bool:
        """Whether the pruner wants this evaluation stopped after the last report."""

    def set_attr(self, key: str, value: Any) -> None:
        """Attach a JSON-safe annotation to the trial."""


class NullTrial:
    """The trial used when none is given: it records reports and never prunes."""

    def __init__(self, number: int = 0) -> None:
        self.number = number
        self.reports: list[tuple[int, float]] = []
        self.attrs: dict[str, Any] = {}

    def report(self, step: int, value: float) -> None:
        self.reports.append((int(step), float(value)))

    def should_prune(self) -> bool:
        return False

    def set_attr(self, key: str, value: Any) -> None:
        self.attrs[key] = value


class OptunaTrial:
    """Adapts an ``optuna.trial.Trial`` to :class:`Trial` (reports go to Optuna's pruner).

    Only duck-typed calls are made, so this module never imports optuna.
    """

    def __init__(self, trial: Any) -> None:
        self.trial = trial

    @property
    def number(self) -> int:
        return int(self.trial.number)

    def report(self, step: int, value: float) -> None:
        self.trial.report(float(value), int(step))  # optuna's order: value, step

    def should_prune(self) -> bool:
        return bool(self.trial.should_prune())

    def set_attr(self, key: str, value: Any) -> None:
        self.trial.set_user_attr(key, _json_safe(value))


class _RecordingTrial:
    """Forwards to a trial and keeps the reported curve, so that every result (pruned and
    failed ones included) carries its intermediate values whatever the trial backend."""

    def __init__(self, trial: Trial) -> None:
        self.inner = trial
        self.reports: list[tuple[int, float]] = []

    @property
    def number(self) -> int:
        return self.inner.number

    def report(self, step: int, value: float) -> None:
        self.reports.append((int(step), float(value)))
        self.inner.report(step, value)

    def should_prune(self) -> bool:
        return self.inner.should_prune()

    def set_attr(self, key: str, value: Any) -> None:
        self.inner.set_attr(key, value)


# ---------------------------------------------------------------------------
# evaluators
# ---------------------------------------------------------------------------


class Evaluator(abc.ABC):
    """Scores architectures. Subclasses set ``objectives`` and implement :meth:`evaluate`.

    ``evaluate`` returns a result (complete, or failed/pruned when it decides so itself),
    reports intermediate values to ``trial`` where it has them and raises
    :class:`TrialPruned` when ``trial.should_prune()`` says so. Call the evaluator
    (``evaluator(arch, trial)``) rather than ``evaluate`` to get the guarded, timed result.
    """

    objectives: tuple[Objective, ...] = ()

    @abc.abstractmethod
    def evaluate(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        """Score ``arch``; ``trial`` is never ``None`` when called through
        :func:`run_evaluation`."""

    def __call__(self, arch: Architecture, trial: Trial | None = None) -> EvalResult:
        return run_evaluation(self, arch, trial)

    @property
    def objective_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.objectives)

    # -- building by name (evaluators.build.build_evaluator) -----------------------------
    @classmethod
    def settings_type(cls) -> type | None:
        """The dataclass of this evaluator's settings in an experiment file (``None``: it
        takes none). A method, so that a type whose module imports torch is imported only
        when an evaluator is built."""
        return None

    @classmethod
    def from_settings(cls, settings: Any, data: ScoringData, **parts: Any) -> Evaluator:
        """This evaluator from its typed ``settings`` (``None`` without a
        :meth:`settings_type`), the task's scoring ``data`` and the run's ``parts``
        (:meth:`parts` names them). Default: ``cls(**parts)``."""
        return cls(**parts)

    @classmethod
    def parts(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(required, optional)``: the names of the parts :meth:`from_settings` takes,
        read from its keyword parameters (from ``__init__``'s with the default one)."""
        own = cls.from_settings.__func__ is not Evaluator.from_settings.__func__  # type: ignore[attr-defined]  # bound classmethods
        params = list(inspect.signature(cls.from_settings if own else cls).parameters.values())
        named = [p for p in params[2 if own else 0:]
                 if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        return (tuple(p.name for p in named if p.default is p.empty),
                tuple(p.name for p in named if p.default is not p.empty))


def run_evaluation(evaluator: Evaluator, arch: Architecture,
                   trial: Trial | None = None) -> EvalResult:
    """Evaluate ``arch`` and always return a result (except for set-up errors).

    * :class:`TrialPruned` → ``pruned``;
    * any other exception (a crash, out of memory) → ``failed`` with the exception's
      last line as the reason; a :class:`~nas.errors.NasError` is re-raised because it
      names a set-up mistake that every candidate would hit;
    * a complete result with a NaN or infinite objective → ``failed`` (a diverged run);
    * a complete result with the wrong number of values → :class:`EvaluatorError`.

    The result's ``seconds`` is the wall time and ``intermediate`` what was reported.
    """
    recorder = _RecordingTrial(trial if trial is not None else NullTrial())
    start = time.perf_counter()
    try:
        result = evaluator.evaluate(arch, recorder)
    except TrialPruned as err:
        result = EvalResult.pruned(str(err) or f"pruned after {len(recorder.reports)} "
                                               "intermediate value(s)")
    except NasError:
        raise
    except Exception as err:  # a candidate's crash must not end the search
        result = EvalResult.failed(f"{type(err).__name__}: {err}")
    seconds = time.perf_counter() - start
    result = check_result(evaluator, result)
    return replace(result, seconds=seconds, intermediate=result.intermediate or recorder.reports)


def check_result(evaluator: Evaluator, result: EvalResult) -> EvalResult:
    """``result`` checked against ``evaluator``'s objectives: a complete result needs one
    value per objective (else :class:`EvaluatorError`), and a non-finite value turns it
    into a failed one."""
    if not isinstance(result, EvalResult):
        raise EvaluatorError(
            f"{type(evaluator).__name__}.evaluate returned {type(result).__name__}, "
            "not an EvalResult"
        )
    if not result.ok:
        return result
    names = evaluator.objective_names
    if len(result.values) != len(names):
        raise EvaluatorError(
            f"{type(evaluator).__name__} returned {len(result.values)} value(s) for its "
            f"{len(names)} objective(s) {list(names)}; return one value per objective"
        )
    bad = [(n, v) for n, v in zip(names, result.values, strict=True) if not math.isfinite(v)]
    if bad:
        return replace(result, values=(), status=Status.FAILED,
                       reason=f"objective {bad[0][0]!r} is {bad[0][1]} (diverged)")
    return result


def check_objectives(objectives: Sequence[Objective], owner: str) -> tuple[Objective, ...]:
    """Objectives as a tuple with unique names; ``owner`` names the holder in errors."""
    objectives = tuple(objectives)
    if not objectives:
        raise EvaluatorError(f"{owner}: needs at least one objective")
    for o in objectives:
        if not isinstance(o, Objective):
            raise EvaluatorError(
                f"{owner}: objectives are Objective(name, direction) values, got {o!r}"
            )
    names = [o.name for o in objectives]
    if len(set(names)) != len(names):
        raise EvaluatorError(f"{owner}: objective names repeat: {names}")
    return objectives


EVALUATORS: Registry[type[Evaluator]] = Registry("evaluator", entry_point_group="nas.evaluators")
