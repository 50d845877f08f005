"""The graph IR: a search space is a ``networkx.DiGraph`` of states and ops.

Nodes are states (tensors); a node's **combine** op turns its incoming edges'
results into its state. Edges carry an op applied to the source state. Either may
be fixed (an op name) or a :class:`ChoiceRef` (the op is the value of a choice).
Widths may depend on choices through :class:`Dim`, other op parameters through
:class:`ChoiceValue` (an FFN expression, docs/reference.md#efficientbert), and whole nodes may exist
only above a depth through :class:`ActiveIf` (layers, stacked blocks).

Node attributes (all optional except ``op``):
    op        combine op name or ChoiceRef
    params    op parameters; values may be Dim or ChoiceValue
    active    ActiveIf: the node exists iff ``value(choice) >= at_least``
    select    name of a depth choice whose value the (SelectOp) combine reads
    role      "output" (the model's result) or "aux" (built and costed, run on demand)
    record    a kind name under which the state is recorded (e.g. "hidden_states")
    share     name of another node whose module this node reuses (shared weights)
    group     component for cost breakdowns ("embeddings", "encoder", "head", "distill")
    cell      drawing group (e.g. "cell1", "L0.ffn0")
Edge attributes: ``op`` (name or ChoiceRef), ``arg`` (input position), ``params``.

:func:`plan` resolves the graph against (possibly partial) choice values; the
supernet runs plans, :func:`resolve` turns a full plan into the child's graph, the
cost model sums the ops of a plan, and the drawings show a resolved graph.
:func:`position_limit` reads the longest input a graph's position tables allow, and
:func:`check_seq_len` refuses a longer one (cost counting, tables, exported models).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from nas.choices import Categorical, Scalar
from nas.errors import ArchitectureError, NasError, SpaceDefinitionError
from nas.ops import OPS
from nas.ops.basic import scale_width


@dataclass(frozen=True)
class ChoiceRef:
    """The op at this place is the value of choice ``choice``."""

    choice: str


@dataclass(frozen=True)
class Dim:
    """A width set by a choice: the value itself, or ``int(value · base)`` when ``base`` is set."""

    choice: str
    base: int | None = None

    def resolve(self, value: Scalar) -> int:
        return int(value) if self.base is None else scale_width(self.base, value)


@dataclass(frozen=True)
class ChoiceValue:
    """An op parameter that is the value of choice ``choice``, as is.

    It selects *how* an op computes (EfficientBERT's FFN expression,
    docs/reference.md#efficientbert), never how big it is: an op's widths and declared costs may not
    depend on such a parameter (the cost tables, :mod:`nas.cost_tables`, leave it out). Unlike a
    :class:`ChoiceRef` op position, every value shares the op's one module, so the supernet holds
    one set of weights for all of them. Relaxed (DARTS, GDAS), the op runs once per value and the
    results are mixed (:class:`nas.network.GraphNet`).
    """

    choice: str


@dataclass(frozen=True)
class ActiveIf:
    """The node exists iff ``value(choice) >= at_least`` (depth K, stack number N)."""

    choice: str
    at_least: int


class GraphBuilder:
    """A small helper to declare a space's graph readably."""

    def __init__(self) -> None:
        self.graph = nx.DiGraph()

    def node(self, name: str, op: str | ChoiceRef = "sum", **attrs: Any) -> str:
        if name in self.graph:
            raise SpaceDefinitionError(f"graph node {name!r} declared twice")
        if "." in name:
            raise SpaceDefinitionError(f"graph node {name!r}: names may not contain '.'")
        attrs.setdefault("params", {})
        self.graph.add_node(name, op=op, **attrs)
        return name

    def edge(self, src: str, dst: str, op: str | ChoiceRef = "identity", arg: int = 0,
             **params: Any) -> None:
        for n in (src, dst):
            if n not in self.graph:
                raise SpaceDefinitionError(f"edge {src}->{dst}: node {n!r} is not declared")
        self.graph.add_edge(src, dst, op=op, arg=arg, params=params)


# ---------------------------------------------------------------------------
# plans
# ---------------------------------------------------------------------------


@dataclass
class EdgeStep:
    src: str
    dst: str
    arg: int
    op: str | None  # None: relaxed (mixed over the choice's values)
    choice: str | None  # the choice that picked (or will pick) the op
    params: dict[str, Any]
    in_width: int
    out_width: int

    @property
    def key(self) -> str:
        return f"{self.src}->{self.dst}"

    @property
    def fixed_op(self) -> str:
        """The op of a step of a fixed plan (a relaxed step has none)."""
        return _fixed(self.op, self.key)


@dataclass
class NodeStep:
    name: str
    op: str | None
    choice: str | None
    params: dict[str, Any]
    inputs: list[EdgeStep]
    width: int
    in_widths: list[int]
    select: str | None = None
    select_value: int | None = None
    attrs: dict[str, Any] = field(default_factory=dict)
    #: parameters set through a :class:`ChoiceValue`: parameter name -> choice name
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def fixed_op(self) -> str:
        """The op of a step of a fixed plan (a relaxed step has none)."""
        return _fixed(self.op, self.name)


def _fixed(op: str | None, where: str) -> str:
    if op is None:
        raise ValueError(f"{where}: a relaxed step has no single op; plan a fixed architecture")
    return op


def _probe(op: str | None, choice: str | None, choices: Mapping[str, Categorical],
           pick: Callable[[Categorical], str]) -> str:
    """The op whose output width a position reports: its own, or (relaxed) ``pick`` of its
    choice's candidates."""
    if op is not None:
        return op
    if choice is None:
        raise ValueError("an op position names neither an op nor a choice")
    return pick(choices[choice])


def _value_of(ref: Any, values: Mapping[str, Scalar]) -> Any:
    if isinstance(ref, Dim):
        return ref.resolve(values[ref.choice])
    if isinstance(ref, ChoiceValue):
        return values[ref.choice]
    return ref


def _resolve_params(params: Mapping[str, Any], values: Mapping[str, Scalar]) -> dict[str, Any]:
    return {k: _value_of(v, values) for k, v in params.items()}


def plan(
    graph: nx.DiGraph,
    choices: Mapping[str, Categorical],
    fixed: Mapping[str, Scalar],
    relaxed: frozenset[str] = frozenset(),
) -> list[NodeStep]:
    """Resolve ``graph`` against choice values, in topological order.

    ``fixed`` gives the value of every choice whose value is known (an architecture,
    or a hard Gumbel sample). A choice in ``relaxed`` stays open: its op positions
    carry ``op=None`` and every candidate runs (weighted), and nodes gated by it are
    all active. A width choice with neither is taken at its largest value (the
    supernet's size). Edges with a zero op, edges a combine does not read, and
    nodes whose state reaches no output are left out, so a fixed plan has exactly
    the ops of the child network.
    """
    values: dict[str, Scalar] = {}
    for name, choice in choices.items():
        if name in fixed:
            values[name] = fixed[name]
        elif name in relaxed:
            values[name] = choice.largest()  # widths/activity seen by relaxed choices
        elif choice.kind == "width":
            values[name] = choice.largest()
        else:
            raise ArchitectureError(
                f"choice {name!r} has no value: give it in the architecture or relax it"
            )

    def op_of(ref: Any) -> tuple[str | None, str | None]:
        if isinstance(ref, ChoiceRef):
            if ref.choice in fixed:
                return str(fixed[ref.choice]), ref.choice
            return None, ref.choice
        return ref, None

    def active(attrs: Mapping[str, Any]) -> bool:
        cond = attrs.get("active")
        if cond is None or cond.choice not in fixed:
            return True
        return int(fixed[cond.choice]) >= cond.at_least

    live = [n for n in nx.topological_sort(graph) if active(graph.nodes[n])]
    live_set = set(live)

    # Which edges survive: zero ops and arguments a combine does not read are dropped.
    kept_in: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for n in live:
        attrs = graph.nodes[n]
        node_op, _ = op_of(attrs["op"])
        used = OPS.get(node_op).used_args if node_op is not None else None
        edges = []
        for src, _, eattrs in graph.in_edges(n, data=True):
            if src not in live_set:
                continue
            if used is not None and eattrs["arg"] not in used:
                continue
            edge_op, _ = op_of(eattrs["op"])
            if edge_op is not None and OPS.get(edge_op).is_zero:
                continue
            edges.append((src, eattrs))
        kept_in[n] = sorted(edges, key=lambda e: e[1]["arg"])

    # Keep only nodes from which an output or aux node is reachable.
    needed = {n for n in live if graph.nodes[n].get("role") in ("output", "aux")}
    for n in reversed(live):
        if n in needed:
            for src, _ in kept_in[n]:
                needed.add(src)
        share = graph.nodes[n].get("share")
        if n in needed and share is not None:
            needed.add(share)

    widths: dict[str, int] = {}
    steps: list[NodeStep] = []
    for n in live:
        if n not in needed:
            continue
        attrs = graph.nodes[n]
        node_op, node_choice = op_of(attrs["op"])
        inputs: list[EdgeStep] = []
        for src, eattrs in kept_in[n]:
            edge_op, edge_choice = op_of(eattrs["op"])
            eparams = _resolve_params(eattrs.get("params", {}), values)
            probe = _probe(edge_op, edge_choice, choices, _first_nonzero)
            out = OPS.get(probe).out_width([widths[src]], eparams)
            inputs.append(EdgeStep(src, n, eattrs["arg"], edge_op, edge_choice, eparams,
                                   widths[src], out))
        params = _resolve_params(attrs.get("params", {}), values)
        in_widths = [e.out_width for e in inputs]
        probe = _probe(node_op, node_choice, choices, lambda c: str(c.values[0]))
        widths[n] = OPS.get(probe).out_width(in_widths, params) if (
            in_widths or "width" in params or not graph.in_degree(n)
        ) else _missing_width(n)
        select = attrs.get("select")
        select_value = int(fixed[select]) if select is not None and select in fixed else None
        extra = {k: v for k, v in attrs.items()
                 if k not in ("op", "params", "active", "select")}
        settings = {k: v.choice for k, v in attrs.get("params", {}).items()
                    if isinstance(v, ChoiceValue)}
        steps.append(NodeStep(n, node_op, node_choice, params, inputs, widths[n], in_widths,
                              select, select_value, extra, settings))
    return steps


def _first_nonzero(choice: Categorical) -> str:
    for v in choice.values:
        if not OPS.get(str(v)).is_zero:
            return str(v)
    return str(choice.values[0])


def _missing_width(node: str) -> int:
    raise SpaceDefinitionError(
        f"node {node!r} can lose all its inputs (every edge 'zero'): give its combine a "
        "'width' parameter"
    )


def resolve(
    graph: nx.DiGraph, choices: Mapping[str, Categorical], arch: Mapping[str, Scalar]
) -> nx.DiGraph:
    """The child's graph: every choice fixed, widths as ints, unused parts removed.

    The result has no ChoiceRef, Dim or ActiveIf left and is JSON-serialisable
    (:func:`to_json`); the child builder and the standalone runtime build from it.
    Positions that were choices keep the choice's name (``choice``) so that the child's
    parameter names match the supernet's.
    """
    steps = plan(graph, choices, arch)
    return graph_from_steps(steps)


def graph_from_steps(steps: list[NodeStep]) -> nx.DiGraph:
    out = nx.DiGraph()
    for st in steps:
        attrs = dict(st.attrs)
        if st.select is not None:
            attrs["select"] = st.select
            attrs["select_value"] = st.select_value
        out.add_node(st.name, op=st.op, choice=st.choice, params=st.params, width=st.width,
                     **attrs)
        for e in st.inputs:
            out.add_edge(e.src, e.dst, op=e.op, choice=e.choice, arg=e.arg, params=e.params)
    return out


def steps_from_resolved(graph: nx.DiGraph) -> list[NodeStep]:
    """Plan steps of an already resolved graph (the child and the runtime use this)."""
    steps = []
    widths: dict[str, int] = {}
    for n in nx.topological_sort(graph):
        attrs = graph.nodes[n]
        inputs = []
        for src, _, e in sorted(graph.in_edges(n, data=True), key=lambda t: t[2]["arg"]):
            out = OPS.get(e["op"]).out_width([widths[src]], e["params"])
            inputs.append(EdgeStep(src, n, e["arg"], e["op"], e.get("choice"), dict(e["params"]),
                                   widths[src], out))
        widths[n] = int(attrs["width"])
        extra = {k: v for k, v in attrs.items()
                 if k not in ("op", "choice", "params", "width", "select", "select_value")}
        steps.append(NodeStep(n, attrs["op"], attrs.get("choice"), dict(attrs["params"]), inputs,
                              widths[n], [e.out_width for e in inputs], attrs.get("select"),
                              attrs.get("select_value"), extra))
    return steps


def to_json(graph: nx.DiGraph) -> dict[str, Any]:
    """A resolved graph as JSON data (networkx node-link form)."""
    for _, attrs in graph.nodes(data=True):
        for v in (*attrs.values(), *attrs.get("params", {}).values()):
            if isinstance(v, ChoiceRef | Dim | ChoiceValue | ActiveIf):
                raise SpaceDefinitionError("only resolved graphs can be serialised")
    return nx.node_link_data(graph, edges="edges")


def from_json(data: Mapping[str, Any]) -> nx.DiGraph:
    graph = nx.node_link_graph(dict(data), directed=True, edges="edges")
    for n, attrs in graph.nodes(data=True):
        for key in ("op", "params", "width"):
            if key not in attrs:
                raise SpaceDefinitionError(f"graph node {n!r} lacks {key!r}")
        if attrs["op"] not in OPS:
            raise SpaceDefinitionError(OPS._unknown_message(attrs["op"]) + f" (node {n!r})")
    for u, v, attrs in graph.edges(data=True):
        if attrs.get("op") not in OPS:
            raise SpaceDefinitionError(OPS._unknown_message(attrs.get("op")) + f" (edge {u}->{v})")
    return graph


# ------------------------------------------------------------------ positions


def position_limit(graph: nx.DiGraph) -> int | None:
    """The longest sequence a network of ``graph`` can read: the smallest position table of
    its embeddings (``None``: no position embeddings, any length). A table numbered from
    ``padding_idx + 1`` (RoBERTa's) holds that many positions fewer (514 rows: 512 tokens)."""
    sizes = []
    for _, attrs in graph.nodes(data=True):
        params = attrs.get("params", {})
        size, pad = params.get("max_positions"), params.get("padding_idx")
        if isinstance(size, int) and size > 0:
            sizes.append(size - (int(pad) + 1 if isinstance(pad, int) else 0))
    return min(sizes, default=None)


def check_seq_len(seq_len: int, limit: int | None, what: str) -> None:
    """A one-line error for a sequence length the model cannot read."""
    if not isinstance(seq_len, int) or isinstance(seq_len, bool) or seq_len < 1:
        raise NasError(f"sequence length must be a positive integer, got {seq_len!r}")
    if limit is not None and seq_len > limit:
        raise NasError(f"sequence length {seq_len} is beyond the {limit} positions of {what}; "
                       f"use --seq-len {limit} or less")
