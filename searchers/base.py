"""The searcher contract: small base classes with documented hooks (Optuna's sampler
pattern: a documented hook order and a seeded RNG of its own; NNI's strategies: propose,
and let the evaluator train and score).

Two kinds of searcher exist:

* :class:`MultiTrialSearcher` (``kind = "multi-trial"``): a sampler factory, building the
  Optuna sampler that proposes the trials of a study (random search, TPE, NSGA-II, GP,
  LaNAS). The Optuna study is the only store of trials; every trial carries a state, and
  a failed or pruned trial is never a best one (failure is a state, not a score of 0).
* :class:`OneShotSearcher` (``kind = "one-shot"``): trains a weight-sharing supernet
  through a :class:`SupernetTrainer` and derives one candidate: GDAS/AdaBERT.

Both register in :data:`SEARCHERS`; ``SEARCHERS.get(name).kind`` tells which, and
:func:`searcher_names` lists them (for the CLI's ``--searcher`` choices) without
importing torch.
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

KINDS = ("multi-trial", "one-shot")

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
# the registry
# ---------------------------------------------------------------------------

SearcherClass = type[MultiTrialSearcher] | type[OneShotSearcher]


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

    def one_shot(self, name: str) -> Callable[..., OneShotSearcher]:
        """The one-shot searcher class ``name`` (its options are its own); a
        :class:`SearcherError` when ``name`` is a multi-trial searcher."""
        cls = self.get(name)
        if not issubclass(cls, OneShotSearcher):
            raise SearcherError(f"searcher {name!r} is {cls.kind}; a one-shot searcher is needed")
        return cls

    def kind_of(self, name: str) -> str:
        if not self._registered(name) and name in self._declared:
            return self._declared[name][1]
        return self.get(name).kind

    def names(self, pattern: str = "*") -> list[str]:
        declared = {n for n in self._declared if fnmatch.fnmatchcase(n, pattern)}
        return sorted(set(super().names(pattern)) | declared)

    def __contains__(self, name: object) -> bool:
        return self._registered(name) or name in self._declared

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())


SEARCHERS = SearcherRegistry()


#: searchers a method runs itself from what its own stages made (not registered: they
#: cannot sample an arbitrary space, so the registry's contract does not apply): name ->
#: (the method, what it needs). Listed here, torch-free, for the CLI's ``--searcher``.
METHOD_SEARCHERS = {
    "knapsack": ("compress", "the sorted teacher's blockwise table (Puzzle's knapsack over "
                             "the bert-subnet space)"),
    "truncation": ("compress", "the sorted teacher's shape (uniform truncation: its first "
                               "k whole layers, the baseline of the bert-subnet space)"),
}


def searcher_names(kind: str | None = None) -> list[str]:
    """Registered searcher names, of one ``kind`` ("multi-trial" or "one-shot") or all."""
    import searchers  # noqa: F401  (registers and declares the built-in searchers)

    if kind is not None and kind not in KINDS:
        raise SearcherError(f"unknown searcher kind {kind!r}; use one of {KINDS}")
    return [n for n in SEARCHERS.names() if kind is None or SEARCHERS.kind_of(n) == kind]
