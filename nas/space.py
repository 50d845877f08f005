"""SearchSpace: the contract every space family fulfils (as NNI's mutables: list the
dimensions, check a sample, freeze a sample into a concrete object).

A space is a set of named choices, a graph whose ops and widths refer to them
(:mod:`nas.graph`), and validity constraints. From it come the supernet, the child of
any architecture, the costs and the drawings. A *fixed design* (MobileBERT, TinyBERT,
a mixed-vocabulary student) is a space with no choices and one architecture.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np

from nas.architecture import Architecture
from nas.choices import Categorical, Scalar, shown_values
from nas.errors import ArchitectureError, NasError, SpaceDefinitionError
from nas.graph import ActiveIf, ChoiceRef, ChoiceValue, Dim, resolve
from nas.ops import OPS
from nas.registry import Registry


@dataclass(frozen=True)
class Constraint:
    """A validity rule over some choices; ``check`` returns an error message or ``None``."""

    choices: tuple[str, ...]
    check: Callable[[Mapping[str, Scalar]], str | None]
    doc: str = ""


class SearchSpace:
    """A search space: choices + graph + constraints.

    Parameters
    ----------
    name: the registry name.
    choices: the choices, in a stable order (it fixes the encoding's layout).
    graph: the supernet graph (see :mod:`nas.graph`).
    constraints: validity rules beyond each choice's allowed values.
    config: the hyperparameters the space was built with (task, vocabulary...), kept so
        that an exported model can be rebuilt and described.
    drawing: groups to draw, as ``(title, cell attribute)`` pairs.
    """

    def __init__(
        self,
        name: str,
        choices: Sequence[Categorical],
        graph: nx.DiGraph,
        constraints: Sequence[Constraint] = (),
        config: Mapping[str, Any] | None = None,
        drawing: Sequence[tuple[str, str]] = (),
        description: str = "",
    ) -> None:
        self.name = name
        self._choices = {c.name: c for c in choices}
        if len(self._choices) != len(choices):
            raise SpaceDefinitionError(f"space {name!r}: two choices share a name")
        self.graph = graph
        self.constraints = tuple(constraints)
        self.config = dict(config or {})
        self.drawing = tuple(drawing)
        self.description = description
        self._check_graph()

    # ------------------------------------------------------------------ queries
    @property
    def is_fixed(self) -> bool:
        """True for a fixed design: no choices, one architecture."""
        return not self._choices

    def choices(self) -> list[Categorical]:
        return list(self._choices.values())

    def choice(self, name: str) -> Categorical:
        try:
            return self._choices[name]
        except KeyError:
            raise ArchitectureError(self._unknown_choice(name)) from None

    @property
    def choice_map(self) -> dict[str, Categorical]:
        return dict(self._choices)

    def default(self) -> Architecture:
        arch = {c.name: c.default for c in self._choices.values()}
        return self.validate(arch)

    def sample(self, rng: np.random.Generator | int | None = None, tries: int = 10_000
               ) -> Architecture:
        """A uniformly random *valid* architecture (rejection sampling on the constraints)."""
        rng = np.random.default_rng(rng)
        for _ in range(tries):
            arch = {c.name: c.sample(rng) for c in self._choices.values()}
            if not self._violations(arch):
                return Architecture(arch, self.name)
        raise SpaceDefinitionError(f"space {self.name!r}: no valid sample in {tries} tries")

    def size(self) -> int:
        """The number of valid architectures.

        Choices tied by a constraint are enumerated together; independent ones multiply.
        """
        groups = self._constraint_groups()
        total = 1
        for group in groups:
            cs = [self._choices[n] for n in group]
            if len(group) == 1 or not any(set(k.choices) & set(group) for k in self.constraints):
                total *= math.prod(len(c) for c in cs)
                continue
            rules = [k for k in self.constraints if set(k.choices) <= set(group)]
            count = 0
            for combo in itertools.product(*(c.values for c in cs)):
                values = dict(zip(group, combo, strict=True))
                if all(rule.check(values) is None for rule in rules):
                    count += 1
            total *= count
        return total

    # ------------------------------------------------------------------ checking
    def validate(self, arch: Mapping[str, Any] | Architecture) -> Architecture:
        """Check ``arch`` and return its canonical form; errors name the choice and the fix."""
        if isinstance(arch, Architecture) and arch.space not in (None, self.name):
            raise ArchitectureError(
                f"architecture is for space {arch.space!r}, not {self.name!r}"
            )
        unknown = [k for k in arch if k not in self._choices]
        if unknown:
            raise ArchitectureError(self._unknown_choice(unknown[0]))
        missing = [k for k in self._choices if k not in arch]
        if missing:
            raise ArchitectureError(
                f"architecture for {self.name!r} lacks choice(s) {', '.join(missing)}; "
                f"e.g. {missing[0]} = {self._choices[missing[0]].default!r} "
                f"(allowed: {shown_values(self._choices[missing[0]].values)})"
            )
        values = {k: self._choices[k].validate(v) for k, v in arch.items()}
        problems = self._violations(values)
        if problems:
            raise ArchitectureError(f"invalid architecture for {self.name!r}: {problems[0]}")
        return Architecture(values, self.name)

    def _violations(self, values: Mapping[str, Scalar]) -> list[str]:
        return [msg for rule in self.constraints if (msg := rule.check(values)) is not None]

    def _unknown_choice(self, name: str) -> str:
        import difflib

        close = difflib.get_close_matches(name, list(self._choices), n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        if self.is_fixed:
            return (f"space {self.name!r} is a fixed design with no choices, but the "
                    f"architecture names {name!r}; pass an empty architecture {{}}")
        return f"space {self.name!r} has no choice {name!r}{hint}"

    # ------------------------------------------------------------------ encoding
    @property
    def encoded_width(self) -> int:
        return sum(c.encoded_width for c in self._choices.values())

    def encode(self, arch: Mapping[str, Any]) -> np.ndarray:
        """A numeric vector: numeric choices as values, others one-hot (LaNAS,
        docs/reference.md#lanas)."""
        arch = self.validate(arch)
        return np.array([x for c in self._choices.values() for x in c.encode(arch[c.name])],
                        dtype=np.float64)

    def decode(self, vector: Iterable[float]) -> Architecture:
        """Inverse of :meth:`encode` (nearest value / arg-max); the result is validated."""
        vec = list(vector)
        if len(vec) != self.encoded_width:
            raise ArchitectureError(
                f"space {self.name!r} encodes to {self.encoded_width} numbers, got {len(vec)}"
            )
        values, i = {}, 0
        for c in self._choices.values():
            values[c.name] = c.decode(vec[i : i + c.encoded_width])
            i += c.encoded_width
        return self.validate(values)

    # ------------------------------------------------------------------ graphs
    def resolve(self, arch: Mapping[str, Any]) -> nx.DiGraph:
        """The child graph of ``arch`` (validated first)."""
        arch = self.validate(arch)
        return resolve(self.graph, self._choices, arch)

    # ------------------------------------------------------------------ internals
    def _constraint_groups(self) -> list[list[str]]:
        """Choices connected by constraints, as groups (union-find)."""
        parent = {n: n for n in self._choices}

        def find(n: str) -> str:
            while parent[n] != n:
                parent[n] = parent[parent[n]]
                n = parent[n]
            return n

        for rule in self.constraints:
            first = rule.choices[0]
            for other in rule.choices[1:]:
                parent[find(other)] = find(first)
        groups: dict[str, list[str]] = {}
        for n in self._choices:
            groups.setdefault(find(n), []).append(n)
        return list(groups.values())

    def _check_graph(self) -> None:
        g = self.graph
        if not nx.is_directed_acyclic_graph(g):
            raise SpaceDefinitionError(f"space {self.name!r}: the graph has a cycle")

        def check_ref(ref: Any, where: str) -> None:
            if isinstance(ref, ChoiceRef | Dim | ChoiceValue | ActiveIf):
                if ref.choice not in self._choices:
                    raise SpaceDefinitionError(
                        f"space {self.name!r}: {where} refers to unknown choice {ref.choice!r}"
                    )
                if isinstance(ref, ChoiceRef):
                    for v in self._choices[ref.choice].values:
                        OPS.get(str(v))
            elif where.endswith(".op"):
                OPS.get(ref)

        for n, attrs in g.nodes(data=True):
            check_ref(attrs["op"], f"node {n}.op")
            check_ref(attrs.get("active"), f"node {n}.active")
            for k, v in attrs.get("params", {}).items():
                check_ref(v, f"node {n}.params.{k}")
        for u, v, attrs in g.edges(data=True):
            check_ref(attrs["op"], f"edge {u}->{v}.op")
            for k, p in attrs.get("params", {}).items():
                check_ref(p, f"edge {u}->{v}.params.{k}")
        outputs = [n for n, a in g.nodes(data=True) if a.get("role") == "output"]
        if len(outputs) != 1:
            raise SpaceDefinitionError(
                f"space {self.name!r}: exactly one node needs role='output', found {outputs}"
            )

    def describe(self) -> dict[str, Any]:
        """A summary for ``nas spaces show``."""
        g = self.graph
        return {
            "name": self.name,
            "fixed": self.is_fixed,
            "description": self.description,
            "size": self.size(),
            "choices": [
                {"name": c.name, "kind": c.kind, "values": list(c.values), "default": c.default}
                for c in self._choices.values()
            ],
            "constraints": [k.doc for k in self.constraints],
            "graph": {
                "nodes": g.number_of_nodes(),
                "edges": g.number_of_edges(),
                "choice_edges": sum(isinstance(a["op"], ChoiceRef) for *_, a in g.edges(data=True)),
                "choice_nodes": sum(isinstance(a["op"], ChoiceRef) for _, a in g.nodes(data=True)),
                "ops": sorted({str(a["op"]) for *_, a in g.edges(data=True)
                               if not isinstance(a["op"], ChoiceRef)}
                              | {str(a["op"]) for _, a in g.nodes(data=True)
                                 if not isinstance(a["op"], ChoiceRef)}),
            },
            "config": self.config,
        }


# ---------------------------------------------------------------------------
# registry of space factories
# ---------------------------------------------------------------------------

#: Space factories by name. The built-in families (``spaces/``) and installed packages
#: register through the ``nas.spaces`` entry-point group, loaded on the first lookup
#: (:mod:`nas.registry`); the core never imports them.
SPACES: Registry[Callable[..., SearchSpace]] = Registry("space", entry_point_group="nas.spaces")

#: Per space, a small configuration (vocabulary, widths) for the registry-wide tests.
TEST_CONFIGS: dict[str, dict[str, Any]] = {}

#: The spaces registered as tabular benchmarks (:mod:`nas.pool`): recorded rows, no model.
TABULAR: set[str] = set()


def register_space(name: str, test_config: Mapping[str, Any] | None = None,
                   tabular: bool = False):
    """Decorator for a factory ``(**config) -> SearchSpace`` registered under ``name``.

    ``test_config`` is a small configuration of the same family (a short vocabulary,
    narrow widths) with which the contract tests build every space quickly.
    ``tabular``: the factory builds a :class:`nas.pool.PoolSpace` (a benchmark's recorded
    rows, no model), which the model-building tests and commands leave out.
    """

    def decorator(factory: Callable[..., SearchSpace]) -> Callable[..., SearchSpace]:
        SPACES.add(name, factory)
        TEST_CONFIGS[name] = dict(test_config or {})
        if tabular:
            TABULAR.add(name)
        return factory

    return decorator


def get_space(name: str, **config: Any) -> SearchSpace:
    """Build the registered space ``name`` with ``config`` overriding its defaults.

    A value of the wrong type for an annotated parameter of the factory (``hidden=abc``),
    or one the factory fails on, is a one-line :class:`SpaceDefinitionError`.
    """
    factory = SPACES.get(name)
    _check_types(name, factory, config)
    try:
        space = factory(**config)
    except SpaceDefinitionError:
        raise
    except NasError as err:
        raise SpaceDefinitionError(f"space {name!r}: {err}") from None
    except (TypeError, ValueError, ArithmeticError, KeyError, IndexError) as err:
        # a plug-in's factory without checks of its own
        message = " ".join(str(err).split())
        raise SpaceDefinitionError(f"space {name!r}: bad configuration ({type(err).__name__}: "
                                   f"{message}); see nas spaces show {name}") from None
    return space


_SCALARS = {"int": int, "float": float, "bool": bool, "str": str}


def _check_types(name: str, factory: Callable[..., SearchSpace], config: Mapping[str, Any]
                 ) -> None:
    """Check scalar-annotated parameters (``int``, ``float``, ``bool``, ``str``, or one of
    them ``| None``) of ``factory``'s signature; others are the factory's business."""
    import inspect

    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return
    open_ended = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key, value in config.items():
        param = params.get(key)
        if param is None and not open_ended:
            import difflib

            known = [k for k, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise SpaceDefinitionError(f"space {name!r} has no setting {key!r}; {hint}"
                                       f"settings: {', '.join(known)}")
        if param is None or param.annotation is inspect.Parameter.empty:
            continue
        ann = param.annotation  # a string under `from __future__ import annotations`
        hint = (ann if isinstance(ann, str) else getattr(ann, "__name__", str(ann))).replace(
            " ", "")
        optional = hint.endswith("|None")
        kind = _SCALARS.get(hint.removesuffix("|None"))
        if kind is None or (optional and value is None):
            continue
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok:
            what = {"int": "an integer", "float": "a number", "bool": "true or false",
                    "str": "a string"}[kind.__name__]
            raise SpaceDefinitionError(f"space {name!r}: {key} must be {what}, got {value!r}")


def check_hyperparameters(space: str, values: Mapping[str, Any], *,
                          positive: Iterable[str] = (), non_negative: Iterable[str] = (),
                          flags: Iterable[str] = ()) -> None:
    """One-line errors for a space's hyperparameters of the wrong type or range.

    ``positive`` names integers ≥ 1 (widths, depths, counts), ``non_negative`` integers
    ≥ 0 (``0``: none, e.g. no token types), ``flags`` booleans. A tuple or list (the values
    of a choice) is checked value by value; ``None`` passes (an optional setting unset).
    """
    rules = [(k, 1, "a positive integer") for k in positive] + \
        [(k, 0, "a non-negative integer") for k in non_negative]
    for key, low, what in rules:
        for v in _values(values.get(key)):
            if not isinstance(v, int) or isinstance(v, bool) or v < low:
                raise SpaceDefinitionError(f"space {space!r}: {key} must be {what}, got {v!r}")
    for key in flags:
        for v in _values(values.get(key)):
            if not isinstance(v, bool):
                raise SpaceDefinitionError(f"space {space!r}: {key} must be true or false, "
                                           f"got {v!r}")


def _values(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, tuple | list) else [value]


def small_config(name: str) -> dict[str, Any]:
    """The small configuration a space registered for tests (empty if none)."""
    SPACES.get(name)
    return dict(TEST_CONFIGS.get(name, {}))


def list_spaces(pattern: str = "*", tabular: bool | None = None) -> list[str]:
    """Registered space names matching a shell-style wildcard (plug-ins included), sorted;
    ``tabular=False``: only spaces with a model, ``True``: only tabular benchmarks."""
    names = SPACES.names(pattern)
    if tabular is None:
        return names
    return [n for n in names if (n in TABULAR) == tabular]


def fix_choices(space: SearchSpace, values: Mapping[str, Any]) -> SearchSpace:
    """``space`` with the choices in ``values`` fixed: each becomes a one-value choice of the
    same name and kind, so a searcher samples only the others (partially fixed sampling,
    as EfficientBERT's coarse-to-fine stages do, docs/reference.md#efficientbert). The graph, the
    constraints and the name are kept: an architecture of the result is one of ``space`` (same
    choices, same id), and the supernet and costs of ``space`` apply to it."""
    fixed = {}
    for name, value in values.items():
        fixed[name] = space.choice(name).validate(value)
    choices = [Categorical(c.name, (fixed[c.name],), fixed[c.name], c.kind, c.doc)
               if c.name in fixed else c for c in space.choices()]
    # the same config: a study records it, and ``nas export --run`` rebuilds the space
    restricted = SearchSpace(space.name, choices, space.graph, space.constraints,
                             space.config, space.drawing, space.description)
    if not restricted.size():
        raise ArchitectureError(f"space {space.name!r}: fixing {dict(fixed)} leaves no valid "
                                "architecture under the space's constraints")
    return restricted
