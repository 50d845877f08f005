"""FFN expressions: EfficientBERT's searched feed-forward blocks (docs/reference.md#efficientbert;
Dong et al., 2021, §3.1 and Table 1).

An expression is a small DAG over the layer input ``x`` built from the math ops of
docs/reference.md#efficientbert -- the seven activations (unary), ``add``, ``mul`` and ``max``
(binary; operands of unequal widths are cut to the narrower, :func:`nas.ops.basic.cut`) -- and the
two linear maps ``linear1`` (hidden → inner) and ``linear2`` (inner → hidden). It is written
as text in prefix form::

    linear2(gelu(linear1(x)))                      the standard FFN (the seed)
    linear2(gelu(linear1(max(x, tanh(x)))))       layer 4 of the published model

and parsed by :func:`parse` (a small grammar, never ``eval``). A subexpression that occurs
twice, such as ``x`` in ``max(x, tanh(x))``, is one node of the DAG and is computed once.
:func:`canonical` orders the arguments of the (commutative) binary ops, so that one
function has one text.

The op ``ffn_expression`` runs an expression with its own two elastic linear layers: the
supernet allocates them at the largest inner width, and every expression of a stack slot
shares them, sliced left to right by the expansion ratio (docs/reference.md#efficientbert "weight
inheritance"; the math ops have no weights). Which expressions a search may use (the validity rules,
the functional de-duplication) is the space's business: ``spaces/efficientbert.py``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
from torch import nn

from nas.errors import ArchitectureError, SpaceDefinitionError
from nas.ops.base import Op, linear_slice, register_op
from nas.ops.basic import ACTIVATIONS, BINARY_FUNCTIONS, cut

INPUT = "x"
LINEARS = ("linear1", "linear2")
#: Ops by arity: activations and linears take one argument, the binary ops two.
ARITY: dict[str, int] = {**{op: 1 for op in ACTIVATIONS}, **{op: 1 for op in LINEARS},
                         **{op: 2 for op in BINARY_FUNCTIONS}}


@dataclass(frozen=True)
class Expr:
    """One node of an expression: ``op`` applied to ``args`` (a leaf has no args)."""

    op: str
    args: tuple[Expr, ...] = ()

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.op, self.args))

    def __hash__(self) -> int:  # memoised: expressions key the DAG's node tables
        return self._hash

    @functools.cached_property
    def text(self) -> str:
        if not self.args:
            return self.op
        return f"{self.op}({', '.join(a.text for a in self.args)})"

    def __str__(self) -> str:
        return self.text

    @functools.cached_property
    def height(self) -> int:
        """Ops on the longest path from the output to a leaf (``x`` is 0; the standard
        FFN is 3): the height of the expression tree, as in the public code's GP trees."""
        return 1 + max(a.height for a in self.args) if self.args else 0

    @functools.cached_property
    def math_ops(self) -> int:
        """Activations and binary ops in the tree (repeated subtrees counted again)."""
        own = 1 if self.args and self.op not in LINEARS else 0
        return own + sum(a.math_ops for a in self.args)

    @functools.cached_property
    def has_linear(self) -> bool:
        return self.op in LINEARS or any(a.has_linear for a in self.args)

    def walk(self) -> Iterator[Expr]:
        """Every node of the tree, parents first (repeated subtrees repeated)."""
        yield self
        for a in self.args:
            yield from a.walk()

    def count(self, op: str) -> int:
        """How often ``op`` occurs in the tree."""
        return sum(1 for e in self.walk() if e.op == op)

    def dag(self) -> list[Expr]:
        """The DAG's nodes, each distinct subexpression once, inputs before their users."""
        seen: dict[Expr, None] = {}

        def visit(e: Expr) -> None:
            if e in seen:
                return
            for a in e.args:
                visit(a)
            seen[e] = None

        visit(self)
        return list(seen)


def x() -> Expr:
    return Expr(INPUT)


def _order_key(e: Expr) -> tuple[bool, int, str]:
    # the argument carrying the linear maps first, then the shallower, then by text:
    # mul(linear1(x), x), max(x, tanh(x))
    return (not e.has_linear, e.height, e.text)


@functools.lru_cache(maxsize=65536)
def canonical(e: Expr) -> Expr:
    """``e`` with the arguments of every binary op in a fixed order (they commute)."""
    args = tuple(canonical(a) for a in e.args)
    if e.op in BINARY_FUNCTIONS:
        args = tuple(sorted(args, key=_order_key))
    return Expr(e.op, args)


_TOKEN = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)|(\()|(\))|(,))")


def parse(text: str) -> Expr:
    """The expression written as ``text`` (prefix form, e.g. ``linear2(gelu(linear1(x)))``).

    Raises :class:`ArchitectureError` naming the problem: an unknown op, a wrong number of
    arguments, unbalanced brackets. Leaves are names (``x``; any other name parses, and
    the rules reject it).
    """
    if not isinstance(text, str):
        raise ArchitectureError(f"an FFN expression is text, got {text!r}")
    tokens: list[str] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ArchitectureError(f"expression {text!r}: unexpected {text[pos:].strip()[:10]!r}"
                                    f" at character {pos}; write ops as op(arg, ...)")
        tokens.append(next(g for g in m.groups() if g is not None))
        pos = m.end()
    expr, end = _parse_at(tokens, 0, text)
    if end != len(tokens):
        raise ArchitectureError(f"expression {text!r}: unexpected {tokens[end]!r} after the "
                                "end of the expression")
    return expr


def _parse_at(tokens: list[str], i: int, text: str) -> tuple[Expr, int]:
    if i >= len(tokens) or not re.fullmatch(r"[A-Za-z_]\w*", tokens[i]):
        got = repr(tokens[i]) if i < len(tokens) else "the end"
        raise ArchitectureError(f"expression {text!r}: expected an op or x, got {got}")
    name = tokens[i]
    if i + 1 >= len(tokens) or tokens[i + 1] != "(":
        if name in ARITY:
            raise ArchitectureError(f"expression {text!r}: {name} needs {ARITY[name]} "
                                    f"argument(s), as {name}(...)")
        return Expr(name), i + 1
    if name not in ARITY:
        raise ArchitectureError(f"expression {text!r}: unknown op {name!r}; ops: "
                                f"{', '.join(ARITY)}")
    args = []
    j = i + 2
    while True:
        arg, j = _parse_at(tokens, j, text)
        args.append(arg)
        if j < len(tokens) and tokens[j] == ",":
            j += 1
            continue
        if j < len(tokens) and tokens[j] == ")":
            j += 1
            break
        raise ArchitectureError(f"expression {text!r}: missing ')' after the arguments of "
                                f"{name}")
    if len(args) != ARITY[name]:
        raise ArchitectureError(f"expression {text!r}: {name} takes {ARITY[name]} "
                                f"argument(s), got {len(args)}")
    return Expr(name, tuple(args)), j


@functools.lru_cache(maxsize=65536)
def parse_cached(text: str) -> Expr:
    """:func:`parse`, memoised (an op parses its expression on every forward pass)."""
    return parse(text)


def structural_problem(e: Expr) -> str | None:
    """Why ``e`` cannot be an FFN at all, or ``None``: it must read only ``x`` (and read
    it), hold exactly one ``linear1`` and one ``linear2``, and feed ``linear1`` into
    ``linear2`` (exactly two linears, and ``x`` read: docs/reference.md#efficientbert)."""
    leaves = {n.op for n in e.walk() if not n.args}
    if INPUT not in leaves:
        return f"{e} does not use the input x"
    if leaves != {INPUT}:
        return f"{e} reads {', '.join(sorted(leaves - {INPUT}))}; x is the only input"
    n1, n2 = e.count("linear1"), e.count("linear2")
    if (n1, n2) != (1, 1):
        return f"{e} has {n1} linear1 and {n2} linear2; an FFN has exactly one of each"
    (l2,) = (n for n in e.walk() if n.op == "linear2")
    if l2.args[0].count("linear1") != 1:
        return f"{e} does not feed linear1 into linear2; linear2 must read linear1's output"
    return None


def evaluate(e: Expr, inp: torch.Tensor, linear1: Callable[[torch.Tensor], torch.Tensor],
             linear2: Callable[[torch.Tensor], torch.Tensor],
             unary: Mapping[str, Callable[[torch.Tensor], torch.Tensor]] = ACTIVATIONS,
             binary: Mapping[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]
             = BINARY_FUNCTIONS, memo: dict[Expr, torch.Tensor] | None = None
             ) -> torch.Tensor:
    """``e`` on ``inp`` (``(..., H)``), each DAG node computed once. ``memo`` (optional)
    keeps the values of subexpressions across calls with the same input and linears
    (evaluating many expressions that share parts)."""
    values: dict[Expr, torch.Tensor] = {} if memo is None else memo

    def value(n: Expr) -> torch.Tensor:
        if n in values:
            return values[n]
        if not n.args:
            y = inp
        elif n.op == "linear1":
            y = linear1(value(n.args[0]))  # (..., inner)
        elif n.op == "linear2":
            y = linear2(value(n.args[0]))  # (..., H)
        elif n.op in binary:
            a, b = cut(value(n.args[0]), value(n.args[1]))
            y = binary[n.op](a, b)
        else:
            y = unary[n.op](value(n.args[0]))
        values[n] = y
        return y

    return value(e)


@register_op("ffn_expression")
class FFNExpression(Op):
    """An FFN expression with its own ``linear1`` (width → ``inner``) and ``linear2``
    (``inner`` → width) (docs/reference.md#efficientbert).

    Parameters: ``expr`` (the expression's text; set by the layer's expression choice
    through :class:`nas.graph.ChoiceValue`, so it never changes widths or costs) and
    ``inner`` (int(r·H)). ``inner`` may not exceed the input width: binary ops with ``x``
    between the linears would cut the inner state, and ``linear2`` would have unused
    inputs. Parameters and multiply-adds are the two linears' whatever the expression
    (the math ops are element-wise, which the cost model does not count:
    docs/reference.md#costs).
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        inner = int(p["inner"])
        self.linear1 = nn.Linear(in_widths[0], inner)
        self.linear2 = nn.Linear(inner, out_width)

    @classmethod
    def out_width(cls, in_widths, p):
        if int(p["inner"]) > in_widths[0]:
            raise SpaceDefinitionError(
                f"ffn_expression: inner width {p['inner']} exceeds the input width "
                f"{in_widths[0]}; expansion ratios must be at most 1")
        return in_widths[0]

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        inner = int(p["inner"])
        return in_widths[0] * inner + inner + inner * out_width + out_width

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        inner = int(p["inner"])
        return seq_len * (in_widths[0] * inner + inner * out_width)

    def forward(self, xs, out_width, p, ctx):
        e = parse_cached(str(p["expr"]))
        inner = int(p["inner"])
        return evaluate(e, xs[0], lambda h: linear_slice(self.linear1, h, inner),
                        lambda h: linear_slice(self.linear2, h, out_width))


def dag_drawing(e: Expr) -> list[tuple[str, str, list[str]]]:
    """``(id, label, input ids)`` per DAG node, inputs first (for drawings)."""
    ids: dict[Expr, str] = {}
    out = []
    for k, n in enumerate(e.dag()):
        ids[n] = f"n{k}"
        out.append((ids[n], n.op, [ids[a] for a in n.args]))
    return out

