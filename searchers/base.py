"""The searcher contract: small base classes with documented hooks (Optuna's sampler
pattern: a documented hook order and a seeded RNG of its own; NNI's strategies: propose,
and let the evaluator train and score).

Three kinds of searcher exist, registered the same way in :data:`SEARCHERS`:

* :class:`MultiTrialSearcher` (``kind = "multi-trial"``): a sampler factory, building the
  Optuna sampler that proposes the trials of a study (random search, TPE, NSGA-II, GP,
  LaNAS). The Optuna study is the only store of trials; every trial carries a state, and
  a failed or pruned trial is never a best one (failure is a state, not a score of 0).
* :class:`OneShotSearcher` (``kind = "one-shot"``): trains a weight-sharing supernet
  through a :class:`SupernetTrainer` and derives one candidate: GDAS/AdaBERT.
* :class:`PlannedSearcher` (``kind = "planned"``): proposes a fixed list of architectures
  from what the run hands it (a table, the teacher's shape, a user's list): compress's
  ``knapsack`` and ``truncation``. The method queues the list on its study, so the picks
  are trials like any searcher's.

Each declares its settings (``settings_type()``, a dataclass checked like an evaluator's;
a multi-trial searcher's are its sampler's keyword options) and a planned searcher the
run parts it needs (``parts()``, read from :meth:`PlannedSearcher.plan`'s keywords).
:func:`resolve_searcher` is the one lookup every method, the command line and
:func:`nas.search` use; :func:`searcher_names` lists the names (for the CLI's help)
without importing torch.
"""

from __future__ import annotations

import abc
import copy
import fnmatch
import importlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from evaluators.base import Objective
from nas.architecture import Architecture
from nas.errors import NasError
from nas.registry import Registry

if TYPE_CHECKING:  # the space machinery imports torch, and Optuna is slow to import;
    # listing searchers imports neither
    import torch
    from optuna.samplers import BaseSampler

    from nas.network import GraphNet
    from nas.space import SearchSpace
    from searchers.optuna_bridge import SpaceBridge

KINDS = ("multi-trial", "one-shot", "planned")

#: The objective a searcher optimises when none is given: one score, higher is better.
DEFAULT_OBJECTIVES = (Objective("score", "maximize"),)


class SearcherError(NasError):
    """A searcher is used wrongly (unknown candidate, told twice, wrong state file...)."""


@dataclass(frozen=True)
class Candidate:
    """One proposal: ``id`` is its trial number in the study (0 for a one-shot search's
    derivation), ``arch`` the validated architecture and ``params`` the searcher's raw,
    JSON-safe parameters (the trial's Optuna parameters, a derivation's probabilities),
    possibly empty."""

    id: int
    arch: Architecture
    params: dict[str, Any] = field(default_factory=dict, hash=False)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "arch": self.arch.to_dict(), "params": copy.deepcopy(self.params)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Candidate:
        return cls(int(data["id"]), Architecture.from_dict(data["arch"], "candidate"),
                   dict(data.get("params", {})))


# ---------------------------------------------------------------------------
# multi-trial searchers
# ---------------------------------------------------------------------------


class MultiTrialSearcher(abc.ABC):
    """Base class of multi-trial searchers: a searcher is a *sampler factory*.

    It builds the Optuna sampler (``optuna.samplers.BaseSampler``) that proposes the
    trials of a study over a space; the study is the only store of trials (asked,
    running, complete, pruned or failed), of the best trial (``study.best_trial``) and of
    the Pareto front (``study.best_trials``). A search loop uses it through
    :class:`searchers.proposals.StudySearch`::

        search = StudySearch.open(space, "tpe", seed=0, objectives=evaluator.objectives)
        while budget_left:
            candidate = search.ask()                    # a trial of the study
            search.tell(candidate, evaluator(candidate.arch))
        search.study.best_trial   # single objective; study.best_trials: the front

    Constructors take the sampler's keyword options only (``n_startup_trials``,
    ``population_size``...); :meth:`sampler` builds the sampler for a seed and the
    space's parameters. Random decisions come from the seed, never a global generator.
    """

    kind: ClassVar[str] = "multi-trial"
    #: whether the sampler handles several objectives (a Pareto front); a search with
    #: several objectives and a searcher that does not is refused in one line
    multi_objective: ClassVar[bool] = True
    #: whether the sampler learns from constraint values (Optuna's ``constraints_func``):
    #: then an infeasible proposal is recorded as a complete trial with its constraint
    #: values and placeholder objective values; otherwise it is rejected and asked again
    #: (:mod:`searchers.proposals`)
    constraint_aware: ClassVar[bool] = False
    #: the registered name (in messages)
    name: ClassVar[str] = ""

    def __init__(self, **options: Any) -> None:
        self.options = dict(options)

    @classmethod
    def settings_type(cls) -> type | None:
        """``None``: a multi-trial searcher's settings are its sampler's keyword options
        (``n_startup_trials``, ``population_size``...), checked when :meth:`sampler`
        builds the sampler (a bad one is a one-line :class:`SearcherError`)."""
        return None

    @abc.abstractmethod
    def sampler(self, seed: int, bridge: SpaceBridge | None = None) -> BaseSampler:
        """The sampler of a study seeded with ``seed``. ``bridge`` gives the space's
        parameters, encoding and budget (:class:`~searchers.optuna_bridge.SpaceBridge`);
        without it the sampler works on whatever distributions the trials suggest (a bare
        Optuna study, as in Optuna's sampler tests). A bad option is a one-line
        :class:`SearcherError`."""


# ---------------------------------------------------------------------------
# one-shot searchers
# ---------------------------------------------------------------------------

Batch = Mapping[str, Any]


class Stateful(Protocol):
    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class SearchProcedure(Stateful, Protocol):
    """What a one-shot searcher hands to ``trainer.fit``: the hooks of one weight-sharing
    search inside the shared training loop (:class:`nas.train.Trainer`).

    settings: the weight optimiser and schedule (:class:`nas.train.TrainSettings`).
    before_step(step, batch): runs before each weight step on the paired batch
        ``{"train": …, "val": …}`` (e.g. an architecture step on ``"val"``); returns
        values to log.
    weight_loss(model, batch): the weight step's loss on the paired batch, or
        ``(loss, info)``.
    state_dict()/load_state_dict(): the search's own state (α, its optimiser, sampling
        generators), saved in the loop's checkpoint.
    """

    settings: Any

    def before_step(self, step: int, batch: Batch) -> Mapping[str, float]: ...

    def weight_loss(self, model: Any, batch: Batch) -> Any: ...


class SupernetTrainer(Protocol):
    """What a one-shot searcher needs from a recipe (data, loss and the training loop).

    supernet: the weight-sharing network (:func:`nas.builder.build_supernet`).
    epochs, steps_per_epoch: the length of the search (``steps_per_epoch`` training
        batches per epoch).
    task_loss(output, batch): the task part of the loss (e.g. CE plus probe KD); the
        searcher adds its own terms (an efficiency loss).
    train_batches(epoch, start_batch): the epoch's training batches from ``start_batch``
        on (deterministic per epoch, so a resumed run sees the same batches).
    val_batches(epoch): the epoch's validation batches (for architecture steps).
    fit(search): trains the supernet with the search's hooks; :func:`run_steps` does it
        with the shared training loop, and a recipe passes its checkpoint file, logging
        and progress bar through it.
    """

    epochs: int
    steps_per_epoch: int

    @property
    def supernet(self) -> GraphNet: ...  # read-only here: a recipe's own class may hold it

    def task_loss(self, output: Any, batch: Batch) -> torch.Tensor: ...

    def train_batches(self, epoch: int, start_batch: int, /) -> Iterable[Batch]: ...

    def val_batches(self, epoch: int) -> Sequence[Batch]: ...

    def fit(self, search: SearchProcedure) -> None: ...


def paired_batches(trainer: SupernetTrainer) -> Callable[[int, int], Iterable[Batch]]:
    """The loop's batch source: ``{"train": b_i, "val": val[i % n]}`` for batch i."""

    def batches(epoch: int, start_batch: int) -> Iterable[Batch]:
        val = list(trainer.val_batches(epoch))
        if not val:
            raise SearcherError(f"epoch {epoch}: no validation batches for the architecture "
                                "steps; give the search a validation split")
        for i, batch in enumerate(trainer.train_batches(epoch, start_batch), start=start_batch):
            yield {"train": batch, "val": val[i % len(val)]}

    return batches


def run_steps(trainer: SupernetTrainer, search: SearchProcedure, **loop_options: Any) -> Any:
    """Train ``trainer.supernet`` with ``search``'s hooks in the shared training loop.

    ``loop_options`` go to :class:`nas.train.Trainer` (``checkpoint``, ``after_step``,
    ``on_epoch_end``, ``progress``, ``desc``…); returns its :class:`~nas.train.TrainResult`.
    """
    from nas.train import Trainer  # torch: imported when a search runs, not when listing

    loop_options.setdefault("progress", False)
    return Trainer(trainer.supernet, search.settings, paired_batches(trainer),
                   trainer.steps_per_epoch, search.weight_loss,
                   before_step=search.before_step, stateful={"search": search},
                   **loop_options).fit()


class OneShotSearcher(abc.ABC):
    """Base class of weight-sharing searchers. A recipe calls, in this order::

        searcher = SEARCHERS.get(name)(seed=0, **options)
        candidate = searcher.search(space, trainer)   # builds the relaxation over
                                                      # trainer.supernet, then calls
                                                      # trainer.fit(search), then derives
        searcher.best()                               # the same candidate

    Constructors take ``seed`` and keyword options that all have defaults (the contract
    tests build ``cls(seed=0)``). ``state_dict()`` is JSON-safe and holds the derived
    candidate (a finished search is not redone); the state *during* the search (weights,
    α, optimisers) is what ``fit`` checkpoints (the search procedure's state travels in
    the training loop's checkpoint).
    """

    kind: ClassVar[str] = "one-shot"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._best: Candidate | None = None

    @classmethod
    def settings_type(cls) -> type | None:
        """The dataclass of this searcher's settings, whose fields are keywords of its
        constructor (``differentiable``: β, the optimisers, τ...); a recipe passes the
        rest (the seed, the budget, what to record) as keywords of its own. ``None``:
        the settings are any of the constructor's keywords, checked by name."""
        return None

    @abc.abstractmethod
    def search(self, space: SearchSpace, trainer: SupernetTrainer) -> Candidate:
        """Train over ``trainer`` and return the derived candidate (id 0)."""

    def best(self) -> Candidate:
        if self._best is None:
            raise SearcherError(f"{type(self).__name__} has not searched yet; call search() "
                                "first (or load a finished state)")
        return self._best

    def state_dict(self) -> dict[str, Any]:
        return {"searcher": type(self).__name__, "seed": self.seed,
                "best": None if self._best is None else self._best.to_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("searcher") != type(self).__name__:
            raise SearcherError(f"searcher state is for {state.get('searcher')!r}, not "
                                f"{type(self).__name__!r}")
        self.seed = int(state["seed"])
        self._best = None if state["best"] is None else Candidate.from_dict(state["best"])


# ---------------------------------------------------------------------------
# planned searchers
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """A planned searcher's answer: ``queue``, the architectures to evaluate in order,
    each with a tag (the trial's ``seed`` attribute: ``first-2``, ``knapsack-5x``), and
    ``info``, JSON-safe facts for the run log and the search summary (the knapsack's
    picks and budgets)."""

    queue: list[tuple[str, Architecture]]
    info: dict[str, Any] = field(default_factory=dict)


class PlannedSearcher(abc.ABC):
    """Base class of searchers that propose a fixed list (NNI's strategies that propose
    from a table; Puzzle's knapsack over its block library, Bercovich et al. 2025, §4).

    A method calls ``cls(settings).plan(**parts)``: ``settings`` is an instance of
    :meth:`settings_type` (its defaults when none is given), ``parts`` are the run's
    pieces that :meth:`plan` names as keyword parameters (:meth:`parts`: ``space``,
    ``budget``, the sorted teacher's ``table``...). A method that cannot hand a required
    part refuses the searcher in one line before any stage, with :attr:`needs` saying
    what is missing. The method queues the plan on its study, so each pick is a trial
    scored by the run's evaluator, and the front, the final selection, the report and
    ``--resume`` treat it as any searcher's. A plan is a pure function of the settings
    and the parts (a resumed run plans the same list again).
    """

    kind: ClassVar[str] = "planned"
    #: the registered name (in messages)
    name: ClassVar[str] = ""
    #: what the required parts are, in words, for the refusal of a method without them
    needs: ClassVar[str] = ""

    def __init__(self, settings: Any = None) -> None:
        typed = self.settings_type()
        self.settings = settings if settings is not None or typed is None else typed()

    @classmethod
    def settings_type(cls) -> type | None:
        """The dataclass of this searcher's settings (``None``: it takes none)."""
        return None

    @classmethod
    def parts(cls) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """``(required, optional)``: the run parts :meth:`plan` takes, read from its
        keyword parameters (as :meth:`evaluators.base.Evaluator.parts`)."""
        import inspect

        params = [p for p in list(inspect.signature(cls.plan).parameters.values())[1:]
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        return (tuple(p.name for p in params if p.default is p.empty),
                tuple(p.name for p in params if p.default is not p.empty))

    @abc.abstractmethod
    def plan(self, *args: Any, **parts: Any) -> Plan:
        """The architectures to evaluate, in order; an empty plan is a one-line
        :class:`SearcherError` saying what to loosen."""


# ---------------------------------------------------------------------------
# the registry
# ---------------------------------------------------------------------------

SearcherClass = type[MultiTrialSearcher] | type[OneShotSearcher] | type[PlannedSearcher]


class SearcherRegistry(Registry[SearcherClass]):
    """The searcher registry, with *declared* entries for modules that import torch.

    ``declare(name, module, kind)`` announces that importing ``module`` registers
    ``name``; the module is imported on the first ``get``. So :func:`searcher_names`
    lists every searcher and its kind while the CLI builds its parser without torch.
    """

    def __init__(self) -> None:
        super().__init__("searcher", entry_point_group="nas.searchers")
        self._declared: dict[str, tuple[str, str]] = {}

    def declare(self, name: str, module: str, kind: str) -> None:
        if kind not in KINDS:
            raise SearcherError(f"searcher {name!r}: kind must be one of {KINDS}, got {kind!r}")
        self._declared[name] = (module, kind)

    def _registered(self, name: object) -> bool:
        return Registry.__contains__(self, name)

    def get(self, name: str) -> SearcherClass:
        if not self._registered(name):
            # a declared name loads its module; an unknown one loads them all, so the
            # error lists every searcher
            modules = [self._declared[name][0]] if name in self._declared else [
                m for m, _ in self._declared.values()]
            for module in modules:
                importlib.import_module(module)
        return super().get(name)

    def kind_of(self, name: str) -> str:
        if not self._registered(name) and name in self._declared:
            return self._declared[name][1]
        return self.get(name).kind

    def names(self, pattern: str = "*") -> list[str]:
        registered = super().names(pattern)  # first: loading the plug-ins declares names
        declared = {n for n in self._declared if fnmatch.fnmatchcase(n, pattern)}
        return sorted(set(registered) | declared)

    def __contains__(self, name: object) -> bool:
        return self._registered(name) or name in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


SEARCHERS = SearcherRegistry()


#: how a method hands its run parts to a planned searcher, for the refusal of a method
#: that lacks some: the config class attribute listing the parts it provides
PARTS_ATTRIBUTE = "provided_searcher_parts"


@dataclass(frozen=True)
class ResolvedSearcher:
    """A searcher found by :func:`resolve_searcher`: its name, class and checked
    settings (an instance of the class's ``settings_type()``, or the mapping of keyword
    options when it has none)."""

    name: str
    cls: SearcherClass
    settings: Any

    @property
    def kind(self) -> str:
        return self.cls.kind

    def build(self, **keywords: Any) -> Any:
        """The searcher: a multi-trial one with its sampler options, a planned one with
        its typed settings; a one-shot one with its settings over ``keywords`` (the
        recipe's)."""
        if issubclass(self.cls, PlannedSearcher):
            return self.cls(self.settings)
        from dataclasses import asdict, is_dataclass

        typed = is_dataclass(self.settings) and not isinstance(self.settings, type)
        given = asdict(self.settings) if typed else dict(self.settings or {})
        return self.cls(**{**keywords, **given})


def searcher_choice(choice: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(name, settings)`` of an experiment's ``searcher:``: a bare name, or
    ``{name: NAME, settings: {...}}`` as an ``evaluator:`` is written."""
    if isinstance(choice, str):
        return choice, {}
    if isinstance(choice, Mapping) and set(choice) <= {"name", "settings"} \
            and isinstance(choice.get("name"), str):
        settings = choice.get("settings") or {}
        if isinstance(settings, Mapping):
            return choice["name"], dict(settings)
    raise SearcherError(f"searcher: {choice!r} is neither a searcher's name nor "
                        "{name: NAME, settings: {...}}; write e.g. searcher: tpe")


def resolve_searcher(choice: str | Mapping[str, Any], *,
                     settings: Mapping[str, Any] | None = None,
                     kinds: Sequence[str] = KINDS, provided: Iterable[str] | None = None,
                     where: str = "searcher:") -> ResolvedSearcher:
    """The searcher ``choice`` names (a name or ``{name, settings}``), checked in one
    line each: a registered name (a plug-in's included; an unknown one lists the close
    ones), of one of ``kinds``, whose required run parts are among ``provided`` (when
    given: the method's), with ``settings`` (defaults, e.g. a legacy section, under the
    choice's own) checked against its ``settings_type()``. ``where`` names the place it
    was asked for (``searcher:``, ``--searcher``)."""
    from nas.errors import RegistryError
    from nas.registry import DuplicateNameError

    name, own = searcher_choice(choice)
    try:
        cls = SEARCHERS.get(name)
    except DuplicateNameError:
        raise
    except RegistryError as err:
        raise SearcherError(f"{where} {err}; a searcher defined in a file of yours is found "
                            "with plugins: [my_searcher.py] (or --plugin my_searcher.py)"
                            ) from None
    if cls.kind not in kinds:
        usable = ", ".join(n for n in searcher_names() if SEARCHERS.kind_of(n) in kinds)
        raise SearcherError(f"{where} {name} is a {cls.kind} searcher, and this run takes "
                            f"{' or '.join(kinds)} ones: use one of {usable}")
    if provided is not None and issubclass(cls, PlannedSearcher):
        missing = [p for p in cls.parts()[0] if p not in set(provided)]
        if missing:
            raise SearcherError(_missing_parts(where, name, cls, missing, kinds))
    return ResolvedSearcher(name, cls, _checked_settings(name, cls, {**dict(settings or {}),
                                                                     **own}, where))


def _checked_settings(name: str, cls: SearcherClass, given: dict[str, Any], where: str) -> Any:
    """``given`` as searcher ``name``'s settings: its ``settings_type()`` built from them
    (checked as a file's section is), or, without one, the mapping checked by its kind: a
    planned searcher takes none, a one-shot one its constructor's keywords, a multi-trial
    one its sampler's options (the sampler is built once to check them)."""
    from nas.config import ConfigError, from_dict

    typed = cls.settings_type()
    if typed is not None:
        try:
            return from_dict(typed, given, f"searcher {name} settings")
        except ConfigError as err:
            raise SearcherError(str(err)) from None
    if issubclass(cls, PlannedSearcher) and given:
        raise SearcherError(f"{where} {name} takes no settings, got {sorted(given)[0]!r}")
    if issubclass(cls, OneShotSearcher):
        _check_keywords(name, cls, given)
    if issubclass(cls, MultiTrialSearcher) and given:
        cls(**given).sampler(seed=0)  # a bad sampler option is refused now, in one line
    return given


def _check_keywords(name: str, cls: type, given: Mapping[str, Any]) -> None:
    """A one-shot searcher's settings are its constructor's keywords: an unknown one is
    refused now, in one line, not when the search starts."""
    import inspect

    params = inspect.signature(cls).parameters.values()
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    known = sorted(p.name for p in params if p.name != "seed")
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise SearcherError(f"searcher {name} settings: unknown key {unknown[0]!r}; known "
                            f"keys: {', '.join(known)}")


def _missing_parts(where: str, name: str, cls: type[PlannedSearcher], missing: list[str],
                   kinds: Sequence[str]) -> str:
    """The one-line refusal of a planned searcher whose parts the method lacks, naming
    the methods that make them (their configs' ``provided_searcher_parts``)."""
    from nas.methods import METHODS

    makers = []
    for method in METHODS.names():
        config = getattr(METHODS.get(method), "config_class", None)
        if set(cls.parts()[0]) <= set(getattr(config, PARTS_ATTRIBUTE, ())):
            makers.append(method)
    needs = cls.needs or "the run parts " + ", ".join(missing)
    made = (f"which only method {' or '.join(makers)} makes; use method: {makers[0]}, or"
            if makers else "which no method makes; use")
    others = ", ".join(n for n in searcher_names() if SEARCHERS.kind_of(n) in kinds
                       and SEARCHERS.kind_of(n) != "planned")
    return f"{where} {name} needs {needs}, {made} a registered searcher ({others})"


def searcher_names(kind: str | None = None) -> list[str]:
    """Registered searcher names, of one ``kind`` ("multi-trial", "one-shot" or
    "planned") or all."""
    # the built-in searchers are declared by the package ``searchers``, loaded as the
    # ``nas.searchers`` entry point on the registry's first lookup (no import here: the
    # package imports this module)
    if kind is not None and kind not in KINDS:
        raise SearcherError(f"unknown searcher kind {kind!r}; use one of {KINDS}")
    return [n for n in SEARCHERS.names() if kind is None or SEARCHERS.kind_of(n) == kind]
