"""The searcher contract: small base classes with documented hooks (Optuna's sampler
pattern, STYLE.md patterns 5 and 15).

Two kinds of searcher exist:

* :class:`MultiTrialSearcher` (``kind = "multi-trial"``): proposes candidates one at a
  time (``ask``) and learns from their evaluations (``tell``): random search, LaNAS,
  Optuna samplers. Every candidate carries an id; every result carries a status, and a
  failed or pruned candidate is never a best one (failure is a state, not a score of 0).
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

import numpy as np

from evaluators.base import EvalResult, Objective, check_objectives
from nas.architecture import Architecture
from nas.errors import NasError
from nas.registry import Registry

if TYPE_CHECKING:  # the space machinery imports torch; listing searchers must not
    import torch

    from nas.space import SearchSpace

KINDS = ("multi-trial", "one-shot")

#: The objective a searcher optimises when none is given: one score, higher is better.
DEFAULT_OBJECTIVES = (Objective("score", "maximize"),)


class SearcherError(NasError):
    """A searcher is used wrongly (unknown candidate, told twice, wrong state file...)."""


@dataclass(frozen=True)
class Candidate:
    """One proposal: ``id`` is its trial number (0, 1, 2... per searcher), ``arch`` the
    validated architecture and ``params`` the searcher's raw, JSON-safe parameters (an
    Optuna sampler's values, a derivation's probabilities), possibly empty."""

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
    """Base class of ask/tell searchers. A search loop calls, in this order::

        searcher = SEARCHERS.get(name)(space, seed=0, objectives=evaluator.objectives)
        while budget_left:
            candidate = searcher.ask()                  # calls propose()
            result = evaluator(candidate.arch, trial)   # EvalResult with a status
            searcher.tell(candidate, result)            # calls observe(candidate, result)
        searcher.best()          # single objective: (candidate, result)
        searcher.pareto_front()  # any number of objectives

    Several candidates may be asked before any is told (parallel evaluation); each is
    told exactly once, in any order. ``state_dict()`` (which calls ``extra_state()``)
    and ``load_state_dict()`` (which calls ``load_extra_state()``) save and restore the
    whole search as JSON: the generator, the asked-but-untold candidates and the history.

    Subclasses implement :meth:`propose`, and may override :meth:`observe` (learn from a
    result), :meth:`extra_state` and :meth:`load_extra_state`. Random decisions use
    ``self.rng``, a ``numpy`` generator seeded with ``seed``, never a global RNG.
    """

    kind: ClassVar[str] = "multi-trial"
    #: whether the searcher handles several objectives (a Pareto front); one that does
    #: not refuses them in its constructor with a one-line :class:`SearcherError`
    multi_objective: ClassVar[bool] = True

    def __init__(self, space: SearchSpace, seed: int = 0,
                 objectives: Sequence[Objective] = DEFAULT_OBJECTIVES) -> None:
        self.space = space
        self.seed = seed
        self.objectives = check_objectives(objectives, type(self).__name__)
        self.rng = np.random.default_rng(seed)
        self.history: list[tuple[Candidate, EvalResult]] = []
        self.pending: dict[int, Candidate] = {}
        self._next_id = 0
        self.asked_ids: set[str] = set()  # arch ids of every candidate asked (told or not)

    # -- hooks ---------------------------------------------------------------
    @abc.abstractmethod
    def propose(self) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """The next architecture (any mapping; :meth:`ask` validates it) and the raw
        parameters that produced it (``{}`` if none)."""

    def observe(self, candidate: Candidate, result: EvalResult) -> None:  # noqa: B027 (optional)
        """Learn from a told result (called by :meth:`tell` after it is recorded)."""

    def extra_state(self) -> dict[str, Any]:
        """A subclass's own JSON-safe state (a tree, a population...)."""
        return {}

    def load_extra_state(self, state: Mapping[str, Any]) -> None:  # noqa: B027 (optional)
        """Restore what :meth:`extra_state` returned."""

    # -- the loop ------------------------------------------------------------
    def ask(self) -> Candidate:
        arch, params = self.propose()
        candidate = Candidate(self._next_id, self.space.validate(arch), dict(params))
        self._next_id += 1
        self.pending[candidate.id] = candidate
        self.asked_ids.add(candidate.arch.id)
        return candidate

    def tell(self, candidate: Candidate, result: EvalResult) -> None:
        """Record ``result`` for an asked candidate (complete, failed or pruned)."""
        asked = self.pending.get(candidate.id)
        if asked is None:
            done = any(c.id == candidate.id for c, _ in self.history)
            raise SearcherError(
                f"candidate {candidate.id} was already told; tell each candidate once"
                if done else
                f"candidate {candidate.id} was not asked of this searcher; tell only "
                "candidates that ask() returned")
        if asked.arch != candidate.arch:
            raise SearcherError(f"candidate {candidate.id}: the architecture differs from "
                                "the one asked; tell the candidate ask() returned")
        if not isinstance(result, EvalResult):
            raise SearcherError(f"tell() takes an EvalResult, got {type(result).__name__}")
        if result.ok and len(result.values) != len(self.objectives):
            raise SearcherError(
                f"candidate {candidate.id}: {len(result.values)} value(s) told for the "
                f"objectives {[o.name for o in self.objectives]}; build the searcher with "
                "the evaluator's objectives")
        del self.pending[candidate.id]
        self.history.append((asked, result))
        self.observe(asked, result)

    def seen(self, arch: Mapping[str, Any]) -> bool:
        """Whether an architecture was asked already (told or pending)."""
        if not (isinstance(arch, Architecture) and arch.space == self.space.name):
            arch = self.space.validate(arch)
        return arch.id in self.asked_ids

    def complete(self) -> list[tuple[Candidate, EvalResult]]:
        return [(c, r) for c, r in self.history if r.ok]

    def best(self) -> tuple[Candidate, EvalResult]:
        """The complete result with the best value (the earliest on a tie)."""
        if len(self.objectives) > 1:
            raise SearcherError(
                f"{len(self.objectives)} objectives {[o.name for o in self.objectives]} have "
                "no single best; use pareto_front()")
        done = self.complete()
        if not done:
            raise SearcherError(
                f"no complete result yet ({len(self.history)} told, none complete); "
                "evaluate more candidates before asking for the best")
        sign = self.objectives[0].sign
        return max(done, key=lambda cr: (sign * cr[1].values[0], -cr[0].id))

    def pareto_front(self) -> list[tuple[Candidate, EvalResult]]:
        """The complete results no other complete result dominates, by candidate id."""
        signs = [o.sign for o in self.objectives]
        done = self.complete()
        scored = [[s * v for s, v in zip(signs, r.values, strict=True)] for _, r in done]

        def dominated(i: int) -> bool:
            a = scored[i]
            return any(all(x >= y for x, y in zip(b, a, strict=True)) and b != a
                       for b in scored)

        return sorted((cr for i, cr in enumerate(done) if not dominated(i)),
                      key=lambda cr: cr[0].id)

    # -- state ---------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The whole search state as JSON-safe data (``json.dumps`` works on it)."""
        return {
            "searcher": type(self).__name__,
            "space": self.space.name,
            "seed": self.seed,
            "objectives": [o.to_dict() for o in self.objectives],
            "rng": copy.deepcopy(self.rng.bit_generator.state),
            "next_id": self._next_id,
            "pending": [c.to_dict() for c in self.pending.values()],
            "history": [{"candidate": c.to_dict(), "result": r.to_dict()}
                        for c, r in self.history],
            "extra": self.extra_state(),
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict`'s output (on a searcher built the same way)."""
        mine = {"searcher": type(self).__name__, "space": self.space.name,
                "objectives": [o.to_dict() for o in self.objectives]}
        for key, value in mine.items():
            if state.get(key) != value:
                raise SearcherError(
                    f"searcher state has {key} {state.get(key)!r}, this searcher has "
                    f"{value!r}; resume with the same searcher, space and objectives")
        try:
            rng, next_id = copy.deepcopy(state["rng"]), int(state["next_id"])
            pending = [self._candidate(data) for data in state["pending"]]
            history = [(self._candidate(entry["candidate"]), EvalResult.from_dict(entry["result"]))
                       for entry in state["history"]]
        except (KeyError, TypeError) as err:
            raise SearcherError(f"searcher state is malformed ({type(err).__name__}: {err}); "
                                "pass what state_dict() returned") from None
        self.rng.bit_generator.state = rng
        self._next_id = next_id
        self.pending = {c.id: c for c in pending}
        self.history = history
        self.asked_ids = {c.arch.id for c in pending} | {c.arch.id for c, _ in history}
        self.load_extra_state(state.get("extra", {}))

    def _candidate(self, data: Mapping[str, Any]) -> Candidate:
        c = Candidate.from_dict(data)
        return Candidate(c.id, self.space.validate(c.arch), c.params)


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

    supernet: torch.nn.Module
    epochs: int
    steps_per_epoch: int

    def task_loss(self, output: Any, batch: Batch) -> torch.Tensor: ...

    def train_batches(self, epoch: int, start_batch: int = 0) -> Iterable[Batch]: ...

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


def searcher_names(kind: str | None = None) -> list[str]:
    """Registered searcher names, of one ``kind`` ("multi-trial" or "one-shot") or all."""
    import searchers  # noqa: F401  (registers and declares the built-in searchers)

    if kind is not None and kind not in KINDS:
        raise SearcherError(f"unknown searcher kind {kind!r}; use one of {KINDS}")
    return [n for n in SEARCHERS.names() if kind is None or SEARCHERS.kind_of(n) == kind]
