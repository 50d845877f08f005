"""Exact parameter and MAC counts at search speed: a space compiled into lookup tables.

:func:`nas.cost.count_costs_reference` resolves the whole graph of an architecture
(:func:`nas.graph.plan`) and sums its ops: milliseconds for a 24-block MobileBERT. Yet
each *cost element* (the combine op of a node, the op of an edge) contributes an amount
that depends on a few choices only: its own op, the widths that reach it, and whether it
exists (its gate, whether a combine reads it, whether anything reads its node).

:class:`CostTables` works those dependencies out once per space and sequence length:
every quantity of the graph (a node's width, whether it exists, an edge's output width,
an element's costs) becomes a :class:`_Fn`, a table over the few choices it depends on,
built from the tables of the quantities it is computed from and the ops' declared
``out_width``/``count_*`` (:class:`nas.ops.base.Op`). Elements that depend on the same
choices are summed into one table, so counting an architecture is one dictionary lookup
per group of elements.

Why it stays exact: each table is computed by plan()'s own rules over every combination
of its choices, and a choice is left out of a table only when changing it never changes
the value. Where there are too many combinations to list (more than
:data:`ENUMERATION_LIMIT`), a quantity keeps every choice it could depend on and no table;
the elements it reaches are then computed from each architecture by :class:`_Child`
(plan()'s rules again, node by node) and their group's table fills as a search draws.
``tests/test_cost_speed.py`` checks the counts against the reference on random
architectures of every registered space.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import networkx as nx

from nas.architecture import Architecture
from nas.choices import Scalar
from nas.errors import SpaceDefinitionError
from nas.graph import ActiveIf, ChoiceRef, ChoiceValue, Dim, check_seq_len, position_limit
from nas.ops import OPS
from nas.space import SearchSpace

#: Most combinations one table lists; a quantity with more keeps no table.
ENUMERATION_LIMIT = 4096

_ERROR = object()  # the value of an op function on a combination it rejects


def _resolve(params: Mapping[str, Any], values: Mapping[str, Scalar]) -> dict[str, Any]:
    """``params`` with their widths resolved; :class:`ChoiceValue` parameters are left out
    (they never change widths or costs, so no table depends on their choice)."""
    return {k: v.resolve(values[v.choice]) if isinstance(v, Dim) else v
            for k, v in params.items() if not isinstance(v, ChoiceValue)}


def _dims(params: Mapping[str, Any]) -> list[str]:
    """The choices that set some of ``params`` (through :class:`Dim`), in a stable order."""
    return sorted({v.choice for v in params.values() if isinstance(v, Dim)})


@dataclass(frozen=True)
class _Fn:
    """A quantity as a function of the choices ``deps``.

    Values of a choice that the quantity cannot tell apart share a *class* (``classes``,
    one ``value -> class`` map per choice: the ten AdaBERT ops are "zero" and "not zero"
    for whether an edge is kept), and ``table`` maps class tuples to the quantity;
    ``table`` is ``None`` when there are too many combinations to list.
    """

    deps: tuple[str, ...]
    classes: tuple[Mapping[Scalar, int], ...]
    table: Mapping[tuple[int, ...], Any] | None

    @classmethod
    def const(cls, value: Any) -> _Fn:
        return cls((), (), {(): value})

    @classmethod
    def of(cls, choice: str, domain: Sequence[Scalar], fn: Callable[[Scalar], Any]) -> _Fn:
        """``fn`` of one choice's value."""
        return _minimal(cls((choice,), ({v: i for i, v in enumerate(domain)},),
                            {(i,): fn(v) for i, v in enumerate(domain)}))

    @property
    def listed(self) -> Mapping[tuple[int, ...], Any]:
        """``table``, where the caller has a listed one (a ``None`` table is a bug there)."""
        if self.table is None:
            raise ValueError(f"a quantity of {', '.join(self.deps)} has no listed table")
        return self.table

    def at(self, values: Mapping[str, Scalar]) -> Any:
        return self.listed[tuple(
            cl[values[c]] for c, cl in zip(self.deps, self.classes, strict=True))]

    def is_const(self, value: Any) -> bool:
        return self.table is not None and not self.deps and self.table[()] == value

    @functools.cached_property
    def fingerprint(self) -> tuple:
        """Equal for equal functions built the same way (a memo key, see ``study``)."""
        if self.table is None:
            return (self.deps, None)
        return (self.deps, tuple(tuple(sorted(cl.items(), key=repr)) for cl in self.classes),
                tuple(sorted(self.table.items())))


def _minimal(fn: _Fn) -> _Fn:
    """``fn`` with the classes it cannot tell apart merged, and the choices it does not
    depend on dropped."""
    values = set(fn.listed.values())
    if len(values) == 1:
        return _Fn.const(values.pop())
    deps, classes, table = list(fn.deps), list(fn.classes), dict(fn.listed)
    k = 0
    while k < len(deps):
        width = 1 + max(combo[k] for combo in table)
        rests = sorted({combo[:k] + combo[k + 1:] for combo in table})
        signature = {j: tuple(table[r[:k] + (j,) + r[k:]] for r in rests) for j in range(width)}
        merged: dict[tuple, int] = {}
        remap = {j: merged.setdefault(signature[j], len(merged)) for j in range(width)}
        if len(merged) == 1:  # no effect: drop the choice
            table = {r: table[r[:k] + (0,) + r[k:]] for r in rests}
            del deps[k], classes[k]
            continue
        table = {c[:k] + (remap[c[k]],) + c[k + 1:]: v for c, v in table.items()}
        classes[k] = {v: remap[j] for v, j in classes[k].items()}
        k += 1
    return _Fn(tuple(deps), tuple(classes), table)


def _varies(table: Mapping[tuple, Any], k: int) -> bool:
    """Whether changing position ``k`` of the key alone changes a value of ``table``."""
    seen: dict[tuple, Any] = {}
    for combo, value in table.items():
        if seen.setdefault(combo[:k] + combo[k + 1:], value) != value:
            return True
    return False


def _representatives(classes: Mapping[Scalar, int]) -> list[Scalar]:
    """One value per class, in class order."""
    reps: dict[int, Scalar] = {}
    for v, j in classes.items():
        reps.setdefault(j, v)
    return [reps[j] for j in range(len(reps))]


def _call(fn: Callable[..., Any], args: Sequence[Any]) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - a rejected combination is a value of its own
        return _ERROR


class _Structure:
    """The supernet graph in the shape both the analysis and :class:`_Child` read."""

    def __init__(self, space: SearchSpace) -> None:
        g = space.graph
        self.space = space
        self.order: list[str] = list(nx.topological_sort(g))
        self.nodes: dict[str, dict[str, Any]] = {n: g.nodes[n] for n in self.order}
        # in-edges sorted by argument position, as plan() orders a combine's inputs
        self.in_edges: dict[str, list[tuple[str, dict[str, Any]]]] = {
            n: sorted(((u, a) for u, _, a in g.in_edges(n, data=True)), key=lambda e: e[1]["arg"])
            for n in self.order}
        self.out_edges: dict[str, list[tuple[str, dict[str, Any]]]] = {
            n: [(v, a) for _, v, a in g.out_edges(n, data=True)] for n in self.order}
        self.sharers: dict[str, list[str]] = {n: [] for n in self.order}
        for n, attrs in self.nodes.items():
            if attrs.get("share") is not None and attrs["share"] in self.sharers:
                self.sharers[attrs["share"]].append(n)
        self.in_degree = {n: g.in_degree(n) for n in self.order}
        self.domains = {c.name: tuple(c.values) for c in space.choices()}

    def ops(self, ref: Any) -> list[str]:
        """The ops a position may hold: the choice's values, or the fixed op."""
        if isinstance(ref, ChoiceRef):
            return [str(v) for v in self.space.choice(ref.choice).values]
        return [ref]

    def domain(self, choice: str) -> tuple[Scalar, ...]:
        return self.domains[choice]

    def gate(self, n: str) -> ActiveIf | None:
        """The node's gate, or ``None`` when every value of its choice passes it."""
        cond: ActiveIf | None = self.nodes[n].get("active")
        if cond is None or all(int(v) >= cond.at_least for v in self.domain(cond.choice)):
            return None
        return cond

    def inference(self, n: str) -> bool:
        """Aux nodes (a distillation fit layer) count parameters, not inference MACs."""
        return self.nodes[n].get("role") != "aux"

    def group(self, n: str) -> str:
        """The node's component in cost breakdowns."""
        return self.nodes[n].get("group", "other")


# ---------------------------------------------------------------------------
# one architecture, resolved lazily (plan()'s rules, only where a table misses)
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# one architecture, resolved lazily (plan()'s rules, only where a table misses)
# ---------------------------------------------------------------------------


class _Child:
    """Which nodes and edges of the supernet an architecture keeps, and their widths.

    Follows :func:`nas.graph.plan` for a full architecture, but answers per node, so a
    table miss resolves only what the missing entry needs.
    """

    def __init__(self, s: _Structure, values: Mapping[str, Scalar]) -> None:
        self.s = s
        self.values = values
        self._kept: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        self._widths: dict[str, int] = {}
        self._needed: dict[str, bool] = {}

    def op(self, ref: Any) -> str:
        return str(self.values[ref.choice]) if isinstance(ref, ChoiceRef) else ref

    def live(self, n: str) -> bool:
        cond: ActiveIf | None = self.s.nodes[n].get("active")
        return cond is None or int(self.values[cond.choice]) >= cond.at_least

    def kept_in(self, v: str) -> list[tuple[str, dict[str, Any]]]:
        """The incoming edges ``v``'s combine reads (zero ops and unread arguments dropped)."""
        if v not in self._kept:
            used = OPS.get(self.op(self.s.nodes[v]["op"])).used_args
            self._kept[v] = [(u, a) for u, a in self.s.in_edges[v]
                             if self.live(u) and (used is None or a["arg"] in used)
                             and not OPS.get(self.op(a["op"])).is_zero]
        return self._kept[v]

    def present(self, n: str) -> bool:
        """Whether ``n`` is a step of the child: live, and an output or aux node reads it."""
        return self.live(n) and self._resolve(n, self._needed, self._readers, self._is_needed)

    def width(self, n: str) -> int:
        return self._resolve(n, self._widths, self._sources, self._width_of)

    def edge_width(self, u: str, attrs: Mapping[str, Any]) -> int:
        return OPS.get(self.op(attrs["op"])).out_width([self.width(u)],
                                                       _resolve(attrs["params"], self.values))

    # -- the two recursions, unrolled (a 24-block graph is deeper than Python's stack)
    @staticmethod
    def _resolve(n: str, memo: dict[str, Any], prereqs: Callable[[str], list[str]],
                 compute: Callable[[str], Any]) -> Any:
        stack = [n]
        while stack:
            x = stack[-1]
            if x in memo:
                stack.pop()
                continue
            missing = [p for p in prereqs(x) if p not in memo]
            if missing:
                stack.extend(missing)
                continue
            memo[x] = compute(x)
            stack.pop()
        return memo[n]

    def _readers(self, n: str) -> list[str]:
        """Live nodes whose being needed makes ``n`` needed."""
        readers = [v for v, _ in self.s.out_edges[n]
                   if self.live(v) and any(u == n for u, _ in self.kept_in(v))]
        return readers + [m for m in self.s.sharers[n] if self.live(m)]

    def _is_needed(self, n: str) -> bool:
        if self.live(n) and self.s.nodes[n].get("role") in ("output", "aux"):
            return True
        return any(self._needed[m] for m in self._readers(n))

    def _sources(self, n: str) -> list[str]:
        return [u for u, _ in self.kept_in(n)]

    def _width_of(self, n: str) -> int:
        attrs = self.s.nodes[n]
        params = _resolve(attrs["params"], self.values)
        in_widths = [self.edge_width(u, a) for u, a in self.kept_in(n)]
        if not (in_widths or "width" in params or not self.s.in_degree[n]):
            raise SpaceDefinitionError(
                f"node {n!r} can lose all its inputs (every edge 'zero'): give its combine a "
                "'width' parameter")
        return OPS.get(self.op(attrs["op"])).out_width(in_widths, params)

    # -- costs of one element
    def node_costs(self, n: str, seq_len: int) -> tuple[int, int]:
        if not self.present(n):
            return 0, 0
        attrs = self.s.nodes[n]
        op = OPS.get(self.op(attrs["op"]))
        params = _resolve(attrs["params"], self.values)
        in_widths = [self.edge_width(u, a) for u, a in self.kept_in(n)]
        width = self.width(n)
        n_params = 0 if attrs.get("share") else op.count_params(in_widths, width, params)
        n_macs = op.count_macs(in_widths, width, params, seq_len) if self.s.inference(n) else 0
        return n_params, n_macs

    def edge_costs(self, u: str, v: str, seq_len: int) -> tuple[int, int]:
        if not self.present(v):
            return 0, 0
        for src, attrs in self.kept_in(v):
            if src == u:
                op = OPS.get(self.op(attrs["op"]))
                params = _resolve(attrs["params"], self.values)
                w = self.width(u)
                out = op.out_width([w], params)
                macs = op.count_macs([w], out, params, seq_len) if self.s.inference(v) else 0
                return op.count_params([w], out, params), macs
        return 0, 0




# ---------------------------------------------------------------------------
# the analysis: every quantity as a table over the choices it depends on
# ---------------------------------------------------------------------------


class _Analysis:
    """Widths and existence of every node of a space as :class:`_Fn` tables."""

    def __init__(self, s: _Structure) -> None:
        self.s = s
        self._rank = {c.name: i for i, c in enumerate(s.space.choices())}
        self._memo: dict[tuple, Any] = {}  # studies several quantities share
        self.width: dict[str, _Fn] = {}
        for n in s.order:
            attrs = s.nodes[n]
            self.width[n] = self.study(self.node_inputs(n), self._width_of(n, attrs),
                                       ("width", _frozen(attrs["params"]), s.in_degree[n] > 0))
        self.present: dict[str, _Fn] = {}
        for n in reversed(s.order):
            self.present[n] = self._presence(n)

    # -- the one operation: a function of some quantities, as a table over choices
    def study(self, inputs: Sequence[_Fn], fn: Callable[..., Any], what: tuple) -> _Fn:
        """``fn(*inputs)`` as a table over the fewest choices and classes it depends on.

        ``what`` names ``fn`` (everything it reads besides its arguments): the blocks of a
        deep model repeat the same studies over the same choices, so each is done once.
        """
        memo_key = (what, *(i.fingerprint for i in inputs))
        if memo_key not in self._memo:
            self._memo[memo_key] = self._study(inputs, fn)
        return self._memo[memo_key]

    def _study(self, inputs: Sequence[_Fn], fn: Callable[..., Any]) -> _Fn:
        deps = self._ordered({c for i in inputs for c in i.deps})
        if any(i.table is None for i in inputs):
            return _Fn(deps, (), None)
        fixed: dict[int, Any] = {}  # inputs that never matter, held at one of their values
        classes = self.refine(deps, inputs)
        if math.prod(1 + max(cl.values()) for cl in classes) > ENUMERATION_LIMIT:
            # Too many combinations: drop the inputs that never change the value (each
            # taken over the values it can have, as if independent), then try again.
            relevant = self._relevant_inputs(inputs, fn)
            if relevant is None:
                return _Fn(deps, (), None)
            if isinstance(relevant, _Fn):
                return relevant
            for k, i in enumerate(inputs):
                if k not in relevant:
                    fixed[k] = next(iter(i.listed.values()))
            deps = self._ordered({c for k in relevant for c in inputs[k].deps})
            classes = self.refine(deps, [inputs[k] for k in relevant])
            if math.prod(1 + max(cl.values()) for cl in classes) > ENUMERATION_LIMIT:
                return _Fn(deps, (), None)
        representatives = [_representatives(cl) for cl in classes]
        base = [fixed.get(k) for k in range(len(inputs))]
        lookups = []  # per varying input: its table and, per choice, study class -> its class
        for k, i in enumerate(inputs):
            if k in fixed or not i.deps:
                base[k] = fixed[k] if k in fixed else i.listed[()]
                continue
            cols = [(deps.index(d), [cl[r] for r in representatives[deps.index(d)]])
                    for d, cl in zip(i.deps, i.classes, strict=True)]
            lookups.append((k, i.listed, cols))
        table = {}
        for combo in itertools.product(*(range(len(r)) for r in representatives)):
            args = list(base)
            for k, t, cols in lookups:
                args[k] = t[tuple(m[combo[p]] for p, m in cols)]
            table[combo] = _call(fn, args)
        return _minimal(_Fn(deps, tuple(classes), table))

    def _relevant_inputs(self, inputs: Sequence[_Fn], fn: Callable[..., Any]
                         ) -> set[int] | _Fn | None:
        """Inputs whose change alone can change ``fn``'s value, over the product of each
        input's values (a superset of the combinations that occur); a constant ``_Fn`` if
        none can; ``None`` if that product is too large too."""
        values = [sorted(set(i.listed.values()), key=repr) for i in inputs]
        if math.prod(len(v) for v in values) > ENUMERATION_LIMIT:
            return None
        table = {combo: _call(fn, combo) for combo in itertools.product(*values)}
        relevant = {k for k in range(len(inputs)) if len(values[k]) > 1 and _varies(table, k)}
        if not relevant:
            (value,) = set(table.values())
            return _Fn.const(value)
        return relevant

    def refine(self, deps: Sequence[str], inputs: Sequence[_Fn]) -> list[dict[Scalar, int]]:
        """Per choice, the classes no input tells apart (the common refinement)."""
        out = []
        for c in deps:
            maps = [cl for i in inputs for d, cl in zip(i.deps, i.classes, strict=True)
                    if d == c]
            seen: dict[tuple, int] = {}
            out.append({v: seen.setdefault(tuple(m[v] for m in maps), len(seen))
                        for v in self.s.domain(c)})
        return out

    def _ordered(self, choices: set[str]) -> tuple[str, ...]:
        return tuple(sorted(choices, key=self._rank.__getitem__))

    def _size(self, deps: Sequence[str]) -> int:
        return math.prod(len(self.s.domain(c)) for c in deps)

    # -- the inputs
    def choice(self, name: str) -> _Fn:
        return self._once(("choice", name), lambda: _Fn.of(name, self.s.domain(name), _same))

    def op(self, ref: Any) -> _Fn:
        if isinstance(ref, ChoiceRef):
            return self._once(ref, lambda: _Fn.of(ref.choice, self.s.domain(ref.choice), str))
        return _Fn.const(ref)

    def live(self, n: str) -> _Fn:
        gate = self.s.gate(n)
        if gate is None:
            return _Fn.const(True)
        return self._once(gate, lambda: _Fn.of(gate.choice, self.s.domain(gate.choice),
                                                lambda v: int(v) >= gate.at_least))

    def _once(self, key: Any, make: Callable[[], _Fn]) -> _Fn:
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def read(self, v: str, attrs: Mapping[str, Any]) -> _Fn:
        """Whether ``v``'s combine keeps the edge from its argument ``attrs["arg"]`` (both
        ends live): the combine reads that argument and the edge's op is not zero."""
        arg = attrs["arg"]
        def reads(node_op: str, edge_op: str) -> bool:
            used = OPS.get(node_op).used_args
            return (used is None or arg in used) and not OPS.get(edge_op).is_zero

        return self.study([self.op(self.s.nodes[v]["op"]), self.op(attrs["op"])], reads,
                          ("read", arg))

    def kept(self, u: str, v: str, attrs: Mapping[str, Any]) -> _Fn:
        """Whether the edge ``u -> v`` is kept, given ``v`` live."""
        return self.study([self.live(u), self.read(v, attrs)], _both, ("and",))

    def edge_inputs(self, u: str, attrs: Mapping[str, Any]) -> list[_Fn]:
        """An edge op's op, input width and the choices that set its params."""
        return [self.op(attrs["op"]), self.width[u],
                *(self.choice(d) for d in _dims(attrs["params"]))]

    def node_inputs(self, n: str) -> list[_Fn]:
        """A combine's op, the choices that set its params, then per incoming edge the
        width it hands over (``None`` when dropped)."""
        attrs = self.s.nodes[n]
        inputs = [self.op(attrs["op"]), *(self.choice(d) for d in _dims(attrs["params"]))]
        for u, a in self.s.in_edges[n]:
            dims = _dims(a["params"])

            def handed(kept: bool, op: str, w: Any, *combo: Scalar, a=a, dims=dims) -> Any:
                if not kept:
                    return None
                params = _resolve(a["params"], dict(zip(dims, combo, strict=True)))
                return OPS.get(op).out_width([_checked(w)], params)

            inputs.append(self.study([self.kept(u, n, a), *self.edge_inputs(u, a)], handed,
                                     ("handed", _frozen(a["params"]))))
        self._memo["inputs", n] = inputs
        return inputs

    def _width_of(self, n: str, attrs: Mapping[str, Any]) -> Callable[..., int]:
        """plan()'s width rule for node ``n``, over :meth:`node_inputs`."""
        dims = _dims(attrs["params"])

        def width(op: str, *rest: Any) -> int:
            params = _resolve(attrs["params"], dict(zip(dims, rest[:len(dims)], strict=True)))
            widths = [_checked(w) for w in rest[len(dims):] if w is not None]
            if not (widths or "width" in params or not self.s.in_degree[n]):
                raise SpaceDefinitionError(f"node {n!r} lost all its inputs")
            return OPS.get(op).out_width(widths, params)

        return width

    def _presence(self, n: str) -> _Fn:
        """Whether ``n`` is a step of the child: live, and an output/aux node, or read by a
        present node, or sharing its module with one (plan()'s ``needed``)."""
        if self.s.nodes[n].get("role") in ("output", "aux"):
            return self.live(n)
        readers = [self.study([self.present[v], self.read(v, a)], _both, ("and",))
                   for v, a in self.s.out_edges[n]]
        readers += [self.present[m] for m in self.s.sharers[n]]
        if any(r.is_const(True) for r in readers):
            return self.live(n)
        return self.study([self.live(n), *readers], lambda live, *r: live and any(r),
                          ("live and any",))

    # -- the elements' costs
    def node_costs(self, n: str, seq_len: int) -> _Fn:
        attrs = self.s.nodes[n]
        width_of = self._width_of(n, attrs)
        dims = _dims(attrs["params"])
        shared, inference = bool(attrs.get("share")), self.s.inference(n)

        def costs(present: bool, op: str, *rest: Any) -> tuple[int, int]:
            if not present:
                return 0, 0
            params = _resolve(attrs["params"], dict(zip(dims, rest[:len(dims)], strict=True)))
            widths = [w for w in rest[len(dims):] if w is not None]
            width, o = width_of(op, *rest), OPS.get(op)
            return (0 if shared else o.count_params(widths, width, params),
                    o.count_macs(widths, width, params, seq_len) if inference else 0)

        return self.study([self.present[n], *self.node_inputs(n)], costs,
                          ("node costs", _frozen(attrs["params"]), self.s.in_degree[n] > 0,
                           shared, inference, seq_len))

    def edge_costs(self, u: str, v: str, attrs: Mapping[str, Any], seq_len: int) -> _Fn:
        dims, inference = _dims(attrs["params"]), self.s.inference(v)

        def costs(present: bool, kept: bool, op: str, w: Any, *combo: Scalar
                  ) -> tuple[int, int]:
            if not (present and kept):
                return 0, 0
            params = _resolve(attrs["params"], dict(zip(dims, combo, strict=True)))
            o = OPS.get(op)
            out = o.out_width([_checked(w)], params)
            return (o.count_params([w], out, params),
                    o.count_macs([w], out, params, seq_len) if inference else 0)

        return self.study([self.present[v], self.kept(u, v, attrs),
                           *self.edge_inputs(u, attrs)], costs,
                          ("edge costs", _frozen(attrs["params"]), inference, seq_len))

    def any_present(self, nodes: Sequence[str]) -> _Fn:
        """Whether any of ``nodes`` is present (a cost group appears in the counts)."""
        fns = [self.present[n] for n in nodes]
        if any(f.is_const(True) for f in fns):
            return _Fn.const(True)
        return self.study(fns, lambda *p: any(p), ("any",))


def _same(value: Scalar) -> Scalar:
    return value


def _both(a: bool, b: bool) -> bool:
    return a and b


def _frozen(params: Mapping[str, Any]) -> str:
    """A hashable stand-in for an op's params (their Dims included, ChoiceValues not: they
    never change costs)."""
    return repr(sorted((k, v) for k, v in params.items() if not isinstance(v, ChoiceValue)))


def _checked(width: Any) -> Any:
    if width is _ERROR:
        raise ValueError("an input width its op rejected")
    return width


# ---------------------------------------------------------------------------
# the tables
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Element:
    """One additive cost: a node's combine op (``src is None``), an edge's op, or the
    mark that a cost group appears in the counts (``marker``: "params" or "macs")."""

    node: str
    slot: int
    src: str | None = None
    marker: str | None = None


@dataclass
class _Group:
    """Elements that depend on the same choices, and their table."""

    choices: tuple[str, ...]
    key: Callable[[Mapping[str, Scalar]], Any]
    elements: list[_Element]
    table: dict[Any, tuple[int, ...]]


class CostTables:
    """Parameters and MACs of any architecture of ``space`` at ``seq_len`` tokens.

    Get one through :func:`tables_for` (cached per space and length). :meth:`count` takes
    a *validated* architecture (every choice at its canonical value).
    """

    def __init__(self, space: SearchSpace, seq_len: int, analysis: _Analysis) -> None:
        self.space = space
        self.seq_len = seq_len
        s = self._s = analysis.s
        self._analysis = analysis
        self._allowed = {c.name: {v: v for v in c.values} for c in space.choices()}
        self.cost_groups: list[str] = []
        for n in s.order:
            if s.group(n) not in self.cost_groups:
                self.cost_groups.append(s.group(n))
        k = len(self.cost_groups)
        slot = {g: i for i, g in enumerate(self.cost_groups)}
        self._members = {(g, m): [n for n in s.order if s.group(n) == g
                                  and (m == "params" or s.inference(n))]
                         for g in self.cost_groups for m in ("params", "macs")}
        found: list[tuple[_Element, _Fn]] = []
        for n in s.order:
            found.append((_Element(n, slot[s.group(n)]), analysis.node_costs(n, seq_len)))
            for u, attrs in s.in_edges[n]:
                found.append((_Element(n, slot[s.group(n)], src=u),
                              analysis.edge_costs(u, n, attrs, seq_len)))
        for (g, m), members in self._members.items():
            if members:
                found.append((_Element(g, (2 if m == "params" else 3) * k + slot[g], marker=m),
                              analysis.any_present(members)))
        by_deps: dict[tuple[str, ...], list[tuple[_Element, _Fn]]] = {}
        for element, fn in found:
            if not (fn.is_const((0, 0)) or fn.is_const(False)):  # never counts
                by_deps.setdefault(fn.deps, []).append((element, fn))
        self.groups = [self._group(deps, members) for deps, members in by_deps.items()]

    def _group(self, deps: tuple[str, ...], members: list[tuple[_Element, _Fn]]) -> _Group:
        """One table for elements that depend on the same choices, filled from theirs when
        they all have one; its key is the choices' values, or their classes where any
        choice has values no element tells apart."""
        known = [fn for _, fn in members if fn.table is not None]
        identity = [_Fn(deps, tuple({v: i for i, v in enumerate(self._s.domain(c))}
                                    for c in deps), {})]
        # Keyed by the plain values when they are few enough to list (a C-level key);
        # by classes only where the values are too many (AdaBERT's embedding is used
        # unless six edges are all 'zero': 2^6 classes of 10^6 values).
        plain = math.prod(len(self._s.domain(c)) for c in deps) <= ENUMERATION_LIMIT
        classes = self._analysis.refine(deps, known if len(known) == len(members) and
                                         not plain else identity)
        key: Callable[[Any], Any]
        if all(len(set(cl.values())) == len(cl) for cl in classes):  # plain values
            key = itemgetter(*deps) if deps else (lambda values: ())
        elif len(deps) == 1:
            (c,), (cl,) = deps, classes
            key = lambda values: cl[values[c]]
        else:
            pairs = tuple(zip(deps, classes, strict=True))
            key = lambda values: tuple(cl[values[c]] for c, cl in pairs)
        group = _Group(deps, key, [e for e, _ in members], {})
        if len(known) == len(members) and math.prod(
                1 + max(cl.values()) for cl in classes) <= ENUMERATION_LIMIT:
            self._fill(group, known, classes)
        return group

    def _fill(self, group: _Group, fns: list[_Fn], classes: list[dict[Scalar, int]]) -> None:
        """Sum the elements' tables into the group's (entries an op rejects stay out)."""
        k = len(self.cost_groups)
        for combo in itertools.product(*map(_representatives, classes)):
            values = dict(zip(group.choices, combo, strict=True))
            row = [0] * (4 * k)
            for e, fn in zip(group.elements, fns, strict=True):
                value = fn.at(values)
                if value is _ERROR:
                    break
                if e.marker is not None:
                    row[e.slot] += int(value)
                else:
                    row[e.slot] += value[0]
                    row[k + e.slot] += value[1]
            else:
                group.table[group.key(values)] = tuple(row)

    def canonical_values(self, arch: Mapping[str, Any]) -> Mapping[str, Scalar] | None:
        """``arch``'s values as a plain mapping if it is a valid architecture of the space
        in canonical form (every choice, each at an allowed value of the same type, no
        rule broken), which :meth:`SearchSpace.validate` would return unchanged, as a
        searcher's draws are; else ``None``."""
        if isinstance(arch, Architecture):
            if arch.space not in (None, self.space.name):
                return None
            arch = arch.to_dict()["choices"]  # a plain dict: lookups at C speed
        if len(arch) != len(self._allowed):
            return None
        for name, value in arch.items():
            allowed = self._allowed.get(name)
            if allowed is None:
                return None
            canonical = allowed.get(value, _ERROR) if value.__hash__ else _ERROR
            if type(canonical) is not type(value):  # 1.0 and True find 1: not canonical
                return None
        if any(rule.check(arch) is not None for rule in self.space.constraints):
            return None
        return arch

    @property
    def entries(self) -> int:
        """Table entries filled so far."""
        return sum(len(g.table) for g in self.groups)

    def count(self, values: Mapping[str, Scalar]) -> tuple[dict[str, int], dict[str, int]]:
        """``(params by group, MACs by group)``, equal to the reference count's."""
        rows = []
        child = None
        for group in self.groups:
            key = group.key(values)
            row = group.table.get(key)
            if row is None:  # not listed: compute it from this architecture, and keep it
                child = child or _Child(self._s, values)
                row = group.table[key] = self._evaluate(group.elements, child)
            rows.append(row)
        total = [sum(column) for column in zip(*rows, strict=True)]
        k = len(self.cost_groups)
        params = {g: total[i] for i, g in enumerate(self.cost_groups) if total[2 * k + i]}
        macs = {g: total[k + i] for i, g in enumerate(self.cost_groups) if total[3 * k + i]}
        return params, macs

    def _evaluate(self, elements: list[_Element], child: _Child) -> tuple[int, ...]:
        k = len(self.cost_groups)
        row = [0] * (4 * k)
        for e in elements:
            if e.marker is not None:
                row[e.slot] += any(child.present(n) for n in self._members[e.node, e.marker])
                continue
            if e.src is None:
                n_params, n_macs = child.node_costs(e.node, self.seq_len)
            else:
                n_params, n_macs = child.edge_costs(e.src, e.node, self.seq_len)
            row[e.slot] += n_params
            row[k + e.slot] += n_macs
        return tuple(row)


_CACHE: weakref.WeakKeyDictionary[SearchSpace, tuple[_Analysis, dict[int, CostTables]]] = (
    weakref.WeakKeyDictionary())


def tables_for(space: SearchSpace, seq_len: int) -> CostTables:
    """The cost tables of ``space`` at ``seq_len`` tokens, built on first use and cached
    with the space object (a space rebuilt with another configuration gets its own)."""
    entry = _CACHE.get(space)
    if entry is None:
        entry = _CACHE[space] = (_Analysis(_Structure(space)), {})
    analysis, by_len = entry
    if seq_len not in by_len:
        check_seq_len(seq_len, position_limit(space.graph), f"space {space.name!r}")
        by_len[seq_len] = CostTables(space, seq_len, analysis)
    return by_len[seq_len]
