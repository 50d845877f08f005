"""A search space as Optuna parameters, and back (docs/reference.md#optuna).

:class:`SpaceBridge` turns every choice of a registered space into an Optuna
distribution, and a trial's parameters back into a validated
:class:`~nas.architecture.Architecture`:

* a choice whose values are evenly spaced integers (depth, stack number) becomes an
  ``IntDistribution`` (ordered, so TPE and GP can use the order); any other choice a
  ``CategoricalDistribution`` over its values;
* choices tied by a validity constraint (e.g. MobileBERT's heads dividing the bottleneck
  width) become **one** categorical parameter over their *valid* combinations, named
  ``"a+b"`` with values such as ``'["tanh","max"]'``. A sampler can then only propose
  valid architectures (EfficientBERT's former op-slot template with its rule across two
  slots made nine proposals in ten invalid when sampled separately). A group with more
  than ``max_joint`` combinations stays separate, and an invalid proposal is rejected;
* a choice with numeric ``features`` (EfficientBERT's FFN expressions,
  docs/reference.md#efficientbert) is one categorical whose encoding (:meth:`encoding_tables`, what
  LaNAS's classifiers see) is those features, not a one-hot over its values.

The mapping is one-to-one (each architecture has exactly one parameter set), so a
sampler that deduplicates by parameters deduplicates by architecture id.

:class:`Budget` holds the hard constraints (parameters and FLOPs counted from the graph,
:func:`nas.cost.count_costs`; batch-1 latency predicted by the latency model,
:mod:`nas.latency`): no model is built and nothing is trained to check them. An invalid
proposal is never silently changed: :meth:`SpaceBridge.propose` returns it with the
reason. An architecture over a limit is *infeasible*: its :attr:`Proposal.violations`
say by how much, and :meth:`Budget.constraint_values` are the values Optuna's
``constraints_func`` reads (≤ 0 feasible). What a search does with it depends on its
sampler (:mod:`searchers.proposals`): a constraint-aware one (TPE, NSGA-II, GP) learns
from it, the others have it rejected and ask again.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import numpy as np
from optuna.distributions import BaseDistribution, CategoricalDistribution, IntDistribution

from nas.architecture import Architecture
from nas.choices import Categorical, Scalar
from nas.errors import ArchitectureError, NasError
from nas.pool import PoolSpace

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from nas.space import SearchSpace

#: A constraint group with more valid combinations than this stays separate parameters.
MAX_JOINT = 100_000
JOINT_SEPARATOR = "+"


@dataclass(frozen=True)
class Param:
    """One Optuna parameter: the choices it sets and its distribution.

    ``combos`` (joint parameters only): the valid value tuples, in the order of the
    distribution's choices (their JSON labels).
    """

    name: str
    choices: tuple[Categorical, ...]
    distribution: BaseDistribution
    combos: tuple[tuple[Scalar, ...], ...] = ()
    _index: dict[Any, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.joint:  # label -> combination, for decoding without a linear search
            labels = cast(CategoricalDistribution, self.distribution).choices  # a joint one
            object.__setattr__(self, "_index", {v: i for i, v in enumerate(labels)})

    @property
    def joint(self) -> bool:
        return len(self.choices) > 1

    def values_of(self, value: Any) -> dict[str, Scalar]:
        """``{choice: value}`` for a parameter value (raises ArchitectureError if unknown)."""
        if not self.joint:
            return {self.choices[0].name: self.choices[0].validate(value)}
        try:
            combo = self.combos[self._index[value]]
        except (KeyError, TypeError):
            raise ArchitectureError(
                f"parameter {self.name!r}: {value!r} is not a valid combination") from None
        return {c.name: v for c, v in zip(self.choices, combo, strict=True)}

    def value_of(self, arch: Mapping[str, Any]) -> Any:
        """The parameter value that sets ``arch``'s values of this parameter's choices."""
        if not self.joint:
            value = arch[self.choices[0].name]
            return int(value) if isinstance(self.distribution, IntDistribution) else value
        return joint_label(tuple(arch[c.name] for c in self.choices))

    def encoding_table(self) -> np.ndarray:
        """One row per value of a categorical parameter (in the distribution's order): the
        concatenated :meth:`Categorical.encode` of its choices (LaNAS's encoding,
        docs/reference.md#lanas)."""
        if isinstance(self.distribution, IntDistribution):
            raise ValueError("integer parameters are encoded by their value")
        combos = self.combos or tuple((v,) for v in self.choices[0].values)
        return np.array([[x for c, v in zip(self.choices, combo, strict=True)
                          for x in c.encode(v)] for combo in combos], dtype=np.float64)


def joint_label(combo: Sequence[Scalar]) -> str:
    """The categorical value naming a combination: its compact JSON (``'["tanh","max"]'``)."""
    return json.dumps(list(combo), separators=(",", ":"))


def _int_range(values: Sequence[Scalar]) -> tuple[int, int, int] | None:
    """``(low, high, step)`` when ``values`` are ≥ 2 evenly spaced increasing integers."""
    if len(values) < 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    step = int(values[1]) - int(values[0])
    if step <= 0 or any(int(b) - int(a) != step for a, b in itertools.pairwise(values)):
        return None
    return int(values[0]), int(values[-1]), step


def _groups(space: SearchSpace) -> list[list[str]]:
    """Choices connected by constraints (union-find), each group in the space's order."""
    order = [c.name for c in space.choices()]
    parent = {n: n for n in order}

    def find(n: str) -> str:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for rule in space.constraints:
        for other in rule.choices[1:]:
            parent[find(other)] = find(rule.choices[0])
    groups: dict[str, list[str]] = {}
    for n in order:
        groups.setdefault(find(n), []).append(n)
    return list(groups.values())


#: The costs a constraint may limit, in the order of the constraint values.
LIMITED = ("params", "flops", "latency_ms")


@dataclass(frozen=True)
class Budget:
    """Hard constraints checked before any training: ``max_params`` and ``max_flops``
    (counted at ``seq_len`` tokens, docs/reference.md#costs; ``None``: 128, or the space's position
    limit when it is shorter) and ``max_latency_ms``, batch-1 latency predicted by
    ``latency_fn`` (``arch -> ms``, the latency model of this machine,
    :func:`searchers.study.study_budget`)."""

    max_params: float | None = None
    max_flops: float | None = None
    seq_len: int | None = None
    max_latency_ms: float | None = None
    latency_fn: Callable[[Mapping[str, Any]], float] | None = field(
        default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("max_params", "max_flops", "max_latency_ms"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise NasError(f"budget: {name} must be positive, got {value}")
        if self.seq_len is not None and self.seq_len < 1:
            raise NasError(f"budget: seq_len must be a positive integer, got {self.seq_len}")
        if self.max_latency_ms is not None and self.latency_fn is None:
            raise NasError("budget: max_latency_ms needs a latency_fn (the latency model's "
                           "predictor; searchers.study.study_budget builds one)")

    @property
    def active(self) -> bool:
        return bool(self.limits)

    @property
    def limits(self) -> dict[str, float]:
        """``{cost: limit}`` of the active constraints, in :data:`LIMITED` order."""
        given = (self.max_params, self.max_flops, self.max_latency_ms)
        return {n: float(v) for n, v in zip(LIMITED, given, strict=True) if v is not None}

    def costs(self, space: SearchSpace, arch: Architecture) -> dict[str, Any]:
        """Parameters and FLOPs counted from the graph and, with a ``latency_fn``, the
        predicted latency (``latency_ms_predicted``; ``latency_ms`` is what an
        evaluation measures); a tabular benchmark's recorded ones
        (:meth:`nas.pool.PoolSpace.costs_of`)."""
        if isinstance(space, PoolSpace):
            return space.costs_of(arch)
        from nas.cost import count_costs
        from nas.graph import position_limit

        seq_len = self.seq_len or min(128, position_limit(space.graph) or 128)
        c = count_costs(space, arch, seq_len)
        costs: dict[str, Any] = {"params": c.params, "flops": c.flops, "seq_len": seq_len}
        if self.latency_fn is not None:
            costs["latency_ms_predicted"] = float(self.latency_fn(arch))
        return costs

    @staticmethod
    def cost(costs: Mapping[str, Any], name: str) -> float:
        """Cost ``name`` of :meth:`costs` (``latency_ms``: the predicted one)."""
        if name == "latency_ms" and "latency_ms_predicted" in costs:
            return float(costs["latency_ms_predicted"])
        return float(costs[name])  # a tabular benchmark records its latency_ms

    def constraint_values(self, costs: Mapping[str, Any]) -> dict[str, float]:
        """Per active constraint, ``cost / limit − 1``: ≤ 0 when it is met (Optuna's
        convention). Relative, so that parameters (millions) and milliseconds weigh
        alike in the summed violation by which TPE and NSGA-II rank infeasible trials."""
        return {n: self.cost(costs, n) / limit - 1.0 for n, limit in self.limits.items()}

    def violations(self, costs: Mapping[str, Any]) -> dict[str, float]:
        """``{cost: amount over its limit}`` for the broken constraints (empty: feasible)."""
        return {n: self.cost(costs, n) - limit for n, limit in self.limits.items()
                if self.cost(costs, n) > limit}

    def violation(self, costs: Mapping[str, Any]) -> str | None:
        """Why ``costs`` break the budget, or ``None``."""
        for name in self.violations(costs):
            return (f"over budget: {name} {self.cost(costs, name):g} > max_{name} "
                    f"{self.limits[name]:g}")
        return None

    def constraints_func(self) -> Callable[[FrozenTrial], list[float]]:
        """Optuna's ``constraints_func`` (TPE, NSGA-II, GP): a trial's constraint values,
        which :class:`searchers.proposals.StudySearch` records as the user attribute
        ``constraints`` when it is asked. A trial without them (an invalid architecture,
        rejected before any cost was counted) is given zeros: no constraint is known to
        be broken."""
        names = list(self.limits)

        def values(trial: FrozenTrial) -> list[float]:
            found = trial.user_attrs.get("constraints") or {}
            return [float(found.get(n, 0.0)) for n in names]

        return values


@dataclass
class Proposal:
    """What a trial's parameters stand for: the architecture (``None`` if invalid), the
    counted costs, the constraint values and, for a proposal to reject or record as
    infeasible, the reason and the amounts over each limit (``violations``)."""

    params: dict[str, Any]
    arch: Architecture | None
    costs: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None
    constraints: dict[str, float] = field(default_factory=dict)
    violations: dict[str, float] = field(default_factory=dict)
    #: on a tabular benchmark, the unrecorded (or taken) architecture the parameters gave,
    #: which ``arch``, the nearest free recorded row, replaces
    mapped_from: Architecture | None = None

    @property
    def ok(self) -> bool:
        return self.reason is None

    @property
    def infeasible(self) -> bool:
        """A valid architecture that breaks a constraint."""
        return self.arch is not None and bool(self.violations)


class SpaceBridge:
    """The parameters of ``space`` for Optuna (module docstring)."""

    def __init__(self, space: SearchSpace, budget: Budget | None = None,
                 max_joint: int = MAX_JOINT) -> None:
        self.space = space
        self.budget = budget or Budget()
        self.params: list[Param] = []
        rules = space.constraints
        for group in _groups(space):
            choices = [space.choice(n) for n in group]
            combos = math.prod(len(c) for c in choices)
            if len(group) > 1 and combos <= max_joint:
                self.params.append(self._joint(choices, [r for r in rules
                                                         if set(r.choices) <= set(group)]))
            else:
                self.params.extend(self._single(c) for c in choices)
        self._by_name = {p.name: p for p in self.params}
        #: a tabular benchmark's rows within the budget (:meth:`propose` maps into them)
        self.pool_allowed = (space.within({"params": self.budget.max_params,
                                           "flops": self.budget.max_flops})
                             if isinstance(space, PoolSpace) else None)

    @property
    def pool(self) -> PoolSpace | None:
        """The space if it is a tabular benchmark (:mod:`nas.pool`), else ``None``."""
        return self.space if isinstance(self.space, PoolSpace) else None

    @staticmethod
    def _single(choice: Categorical) -> Param:
        ints = _int_range(choice.values)
        dist: BaseDistribution = (IntDistribution(ints[0], ints[1], step=ints[2]) if ints
                                  else CategoricalDistribution(choice.values))
        return Param(choice.name, (choice,), dist)

    @staticmethod
    def _joint(choices: list[Categorical], rules: list[Any]) -> Param:
        names = [c.name for c in choices]
        valid = tuple(combo for combo in itertools.product(*(c.values for c in choices))
                      if all(r.check(dict(zip(names, combo, strict=True))) is None
                             for r in rules))
        if not valid:
            raise NasError(f"space: no valid combination of the choices {names}; "
                           "the space's constraints exclude each other")
        dist = CategoricalDistribution([joint_label(c) for c in valid])
        return Param(JOINT_SEPARATOR.join(names), tuple(choices), dist, valid)

    # -- parameters -----------------------------------------------------------
    @property
    def distributions(self) -> dict[str, BaseDistribution]:
        return {p.name: p.distribution for p in self.params}

    def encoding_tables(self) -> dict[str, np.ndarray]:
        """Per categorical parameter, the space's encoding of each of its values."""
        return {p.name: p.encoding_table() for p in self.params
                if isinstance(p.distribution, CategoricalDistribution)}

    def suggest(self, trial: optuna.trial.Trial) -> dict[str, Any]:
        """Ask ``trial`` for every parameter (its sampler decides, or fixed values win)."""
        values: dict[str, Any] = {}
        for p in self.params:
            d = p.distribution
            if isinstance(d, IntDistribution):
                values[p.name] = trial.suggest_int(p.name, d.low, d.high, step=d.step)
            else:  # the one other kind a parameter has
                choices = cast(CategoricalDistribution, d).choices
                values[p.name] = trial.suggest_categorical(p.name, choices)
        return values

    def architecture(self, params: Mapping[str, Any]) -> Architecture:
        """The validated architecture of a full parameter set (ArchitectureError if not)."""
        missing = [p.name for p in self.params if p.name not in params]
        if missing:
            raise ArchitectureError(f"parameters for space {self.space.name!r} lack "
                                    f"{', '.join(missing)}")
        values: dict[str, Scalar] = {}
        for p in self.params:
            values.update(p.values_of(params[p.name]))
        return self.space.validate(values)

    def params_of(self, arch: Mapping[str, Any]) -> dict[str, Any]:
        """The parameters that give ``arch`` (for ``study.enqueue_trial``)."""
        arch = self.space.validate(arch)
        return {p.name: p.value_of(arch) for p in self.params}

    # -- proposals ------------------------------------------------------------
    def propose(self, params: Mapping[str, Any], taken: Sequence[str] | set[str] = ()
                ) -> Proposal:
        """Decode ``params`` and check the space's rules and the budget; never repairs.

        On a tabular benchmark (:class:`nas.pool.PoolSpace`) the architecture is the
        nearest recorded row within the budget whose id is not ``taken`` (the benchmark's
        mapping, the same for every searcher; once every row is taken, the nearest row,
        a repeat); rejected only when no row lies within the budget."""
        params = dict(params)
        try:
            arch = self.architecture(params)
        except ArchitectureError as err:
            return Proposal(params, None, reason=f"invalid architecture: {err}")
        pool = self.pool
        if pool is not None:
            row = pool.nearest(arch, taken, self.pool_allowed)
            if row is None and taken:  # every row evaluated: a repeat, as on any space
                row = pool.nearest(arch, (), self.pool_allowed)
            if row is None:
                return Proposal(params, arch, reason="no recorded architecture lies within "
                                "the budget")
            mapped = pool.archs[row]
            return Proposal(params, mapped, pool.costs_of(mapped),
                            mapped_from=None if mapped == arch else arch)
        costs: dict[str, Any] = {}
        if self.budget.active:
            costs = self.budget.costs(self.space, arch)
            constraints = self.budget.constraint_values(costs)
            violations = self.budget.violations(costs)
            return Proposal(params, arch, costs, self.budget.violation(costs), constraints,
                            violations)
        return Proposal(params, arch, costs)

    def feasible(self, params: Mapping[str, Any]) -> bool:
        """Whether a proposal would be accepted (a LaNAS rejection-sampling constraint)."""
        return self.propose(params).ok
