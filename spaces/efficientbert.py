"""EfficientBERT: per-layer FFN expressions, stack number and expansion ratio
(Dong et al., 2021; docs/reference.md#efficientbert).

The base model is 6 Transformer layers of hidden 540 with 12 heads and a MobileBERT
style embedding (128-dim table, trigram concatenation, linear to 540); a 540→768 fit
layer serves distillation only. Per layer ``i`` the space has three choices:

* ``L{i}.expr`` (kind ``op``): the FFN as an expression DAG over the layer input ``x``
  (:mod:`nas.ops.expression`), built from the activations of docs/reference.md#efficientbert
  (unary), ``add``, ``mul`` and ``max`` (binary; unequal widths cut to the narrower) and the two
  linear maps ``linear1`` (H → int(r·H)) and ``linear2`` (int(r·H) → H). Default: the seed
  expression ``linear2(gelu(linear1(x)))``, the standard FFN.
* ``L{i}.stack`` (kind ``depth``): N ∈ {1..4} FFNs ``LayerNorm(h + expr(h))`` in a row,
  each with its own weights and the layer's expression;
* ``L{i}.ratio`` (kind ``width``): r ∈ {1, 1/2, 1/3, 1/4}.

**Validity** (docs/reference.md#efficientbert; the public code's ``check_individual``): an
expression reads ``x`` and only ``x``; it has exactly one ``linear1`` and one ``linear2`` in its
tree (so, as in the public code, which counts them in the text, a linear's output is not reused
elsewhere; ``x`` and the sub-expressions of ``x`` alone may be), and ``linear1`` feeds
``linear2``; no activation is applied directly to an activation; no linear directly to a
linear (the public code's rule: two linears in a row are one low-rank linear map); no
binary op has two identical arguments; its height (ops on the longest path from the
output to ``x``; the standard FFN has 3) is at most ``max_height``, and it has at most
``max_ops`` math ops (activations and binary ops, counted in the tree).

**Functional de-duplication** (docs/reference.md#lanas, the public code's ``get_hash_key_acc``):
every expression runs on one fixed seeded random input with fixed seeded random linear weights,
at an inner width equal to and half the hidden width, and the rounded output is hashed.
Expressions with the same hash compute the same function (``mul(x, linear1(x))`` and
``mul(linear1(x), x)``; ``max(x, relu(x))`` and ``relu(x)``); only the simplest (fewest
ops, then lowest, then first by text) is kept.

**Representation: one categorical choice per layer over the enumerated expressions.**
The valid expressions within the bounds are enumerated once, de-duplicated, and become
the values of ``L{i}.expr``. Why a categorical rather than a template of op slots (what
this space was before): every value is valid and distinct, so a sampler draws uniformly
over *functions* and never proposes an invalid or duplicate expression (the template's
op-slot choices, drawn independently, broke a rule in nine six-layer draws in ten, and
different slot values could be one function: ``max(x, relu(x))`` is ``relu(x)``); the
template could express only one shape of DAG, this space every DAG within the bounds;
every searcher, the Optuna bridge, the cost tables and the contract tests handle a
categorical already; an architecture stays plain JSON (the expression's text). For
model-based samplers (LaNAS, docs/reference.md#lanas) the choice carries a fixed-length numeric
encoding (:attr:`nas.choices.Categorical.features`) instead of a one-hot over thousands of names:
the expression tree laid out in heap order (the output in slot 0, the arguments of slot
``s`` in ``2s+1`` and ``2s+2``), each slot one-hot over the tokens (``x``, the linears, the
math ops), constant columns dropped. The public code encodes the tree's prefix order as
padded token ids; slots keep the same op at the same place of the tree in one column.

**Why the bounds (height 5, 3 math ops).** They are the smallest that express every
layer of the published architecture: its tallest expression, layer 4's
``linear2(gelu(linear1(max(x, tanh(x)))))``, has height 5 and 3 math ops. They give
3,645 distinct functions per layer (height 4 would give 1,211 and lose layer 4; height 6
with 3 ops adds nothing, since 3 math ops on the linear chain reach height 5 at most). The
public code bounds the height at 3–7 but never enumerates: it mutates the seed. Allowing
4 math ops gives 25,031 expressions at height 5 and 47,381 at height 6, seven and
thirteen times as many values for a search that scores a few hundred candidates. Both
bounds are space settings (``max_height``, ``max_ops``); the slot encoding is 103 numbers
per layer at the default bounds.

**Weights.** The math ops have no weights: one ``ffn_expression`` module per stack slot
holds ``linear1`` and ``linear2`` and every expression shares them (the expression is an
op parameter set by the choice, :class:`nas.graph.ChoiceValue`), sliced left to right by
r, as EfficientBERT's supernet does. Parameters and multiply-adds do not depend on the
expression (the cost model counts no element-wise op, docs/reference.md#costs), so the cost tables
ignore it.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import torch

from nas.choices import Categorical, IntChoice
from nas.errors import ArchitectureError, SpaceDefinitionError
from nas.graph import ActiveIf, ChoiceValue, Dim, GraphBuilder
from nas.ops.basic import ACTIVATIONS, BINARY_FUNCTIONS
from nas.ops.expression import (
    INPUT,
    LINEARS,
    Expr,
    canonical,
    evaluate,
    parse,
    parse_cached,
    structural_problem,
)
from nas.space import SearchSpace, check_hyperparameters, register_space

RATIOS = ("1", "1/2", "1/3", "1/4")
SEED_EXPRESSION = "linear2(gelu(linear1(x)))"
#: The bounds: the smallest that express the published architecture (module docstring).
MAX_HEIGHT = 5
MAX_OPS = 3
#: The tokens of the slot encoding, in column order.
TOKENS = (INPUT, *LINEARS, *ACTIVATIONS, *BINARY_FUNCTIONS)


# ---------------------------------------------------------------------------
# validity
# ---------------------------------------------------------------------------


def expression_problem(e: Expr, max_height: int = MAX_HEIGHT, max_ops: int = MAX_OPS
                       ) -> str | None:
    """The first validity rule ``e`` breaks (module docstring), as a message, or ``None``."""
    problem = structural_problem(e)
    if problem is not None:
        return problem
    for n in e.walk():
        if n.op in ACTIVATIONS and n.args[0].op in ACTIVATIONS:
            return f"{n} applies an activation directly to an activation"
        if n.op in LINEARS and n.args[0].op in LINEARS:
            return f"{n} applies a linear directly to a linear"
        if n.op in BINARY_FUNCTIONS and canonical(n.args[0]) == canonical(n.args[1]):
            return f"{n} applies a binary op to two identical arguments"
    if e.height > max_height:
        return f"{e} has height {e.height}, above the bound {max_height} (max_height)"
    if e.math_ops > max_ops:
        return f"{e} has {e.math_ops} math ops, above the bound {max_ops} (max_ops)"
    return None


# ---------------------------------------------------------------------------
# enumeration
# ---------------------------------------------------------------------------


@functools.cache
def _grow(kind: str, height: int, ops: int) -> frozenset[Expr]:
    """Canonical valid sub-expressions of height ≤ ``height`` with ≤ ``ops`` math ops.

    ``kind`` is what they contain: ``"pre"`` only ``x``; ``"mid"`` one ``linear1``;
    ``"post"`` ``linear1`` inside ``linear2`` (a whole FFN). A binary op joins a ``kind``
    expression with an ``x``-only one (a linear may occur once).
    """
    if height < 0 or ops < 0:
        return frozenset()
    out: set[Expr] = {Expr(INPUT)} if kind == "pre" else set()
    if height == 0:
        return frozenset(out)
    if kind == "mid":
        out |= {Expr("linear1", (p,)) for p in _grow("pre", height - 1, ops)}
    if kind == "post":
        out |= {Expr("linear2", (m,)) for m in _grow("mid", height - 1, ops)
                if m.op != "linear1"}
    if ops >= 1:
        for a in _grow(kind, height - 1, ops - 1):
            if a.op not in ACTIVATIONS:
                out |= {Expr(u, (a,)) for u in ACTIVATIONS}
        if kind == "pre":
            pool = sorted(_grow("pre", height - 1, ops - 1), key=lambda e: e.text)
            pairs: Any = ((a, b) for a, b in itertools.combinations(pool, 2)
                          if a.math_ops + b.math_ops <= ops - 1)
        else:
            pairs = ((a, p) for a in _grow(kind, height - 1, ops - 1)
                     for p in _grow("pre", height - 1, ops - 1 - a.math_ops))
        for a, b in pairs:
            out |= {canonical(Expr(op, (a, b))) for op in BINARY_FUNCTIONS}
    return frozenset(out)


def _affine(t: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``t·wᵀ + b``: a probe's linear map."""
    return t @ w.T + b


class _Probe:
    """The fixed random input and linear weights of the functional hash (float64, seeded):
    hidden width 16, inner widths 16 and 8 (the cut of a binary op between the linears
    only shows when inner < hidden)."""

    HIDDEN, INNERS, TOKENS, SEED = 16, (16, 8), 4, 2021

    def __init__(self) -> None:
        g = torch.Generator().manual_seed(self.SEED)
        h = self.HIDDEN
        self.x = torch.randn(self.TOKENS, h, generator=g, dtype=torch.float64)
        self.linears = []
        for k in self.INNERS:
            w1 = torch.randn(k, h, generator=g, dtype=torch.float64) / h ** 0.5
            b1 = torch.randn(k, generator=g, dtype=torch.float64) * 0.5
            w2 = torch.randn(h, k, generator=g, dtype=torch.float64) / k ** 0.5
            b2 = torch.randn(h, generator=g, dtype=torch.float64) * 0.5
            self.linears.append((w1, b1, w2, b2))
        self.memos: list[dict[Expr, torch.Tensor]] = [{} for _ in self.INNERS]

    def __call__(self, e: Expr) -> str:
        outs = []
        with torch.no_grad():
            for (w1, b1, w2, b2), memo in zip(self.linears, self.memos, strict=True):
                outs.append(evaluate(e, self.x, functools.partial(_affine, w=w1, b=b1),
                                     functools.partial(_affine, w=w2, b=b2), memo=memo))
        # rounded, and -0.0 made 0.0, so that one function computed two ways hashes alike
        y = torch.round(torch.cat([o.reshape(-1) for o in outs]), decimals=6) + 0.0
        return hashlib.sha256(y.numpy().tobytes()).hexdigest()[:16]


def functional_hash(e: Expr) -> str:
    """The hash of ``e``'s rounded output on the fixed probe (module docstring)."""
    return _probe()(e)


@functools.lru_cache(maxsize=1)
def _probe() -> _Probe:
    return _Probe()


def _simplicity(e: Expr) -> tuple[int, int, str]:
    return (e.math_ops, e.height, e.text)


@functools.lru_cache(maxsize=8)
def _enumeration(max_height: int, max_ops: int) -> tuple[tuple[str, ...], dict[str, str]]:
    """The de-duplicated expressions (simplest first) and, per functional hash, the text of
    the expression kept for it."""
    found = sorted((e for e in _grow("post", max_height, max_ops)
                    if expression_problem(e, max_height, max_ops) is None), key=_simplicity)
    kept: dict[str, str] = {}
    for e in found:
        kept.setdefault(functional_hash(e), e.text)
    return tuple(kept.values()), kept


def enumerate_expressions(max_height: int = MAX_HEIGHT, max_ops: int = MAX_OPS
                          ) -> tuple[str, ...]:
    """Every valid expression within the bounds, one per function, simplest first."""
    return _enumeration(max_height, max_ops)[0]


def canonical_expression(text: str, max_height: int = MAX_HEIGHT, max_ops: int = MAX_OPS
                         ) -> str:
    """The enumerated expression computing what ``text`` computes (its canonical text, or
    the simpler expression kept for its function); :class:`ArchitectureError` naming the
    rule ``text`` breaks otherwise."""
    e = canonical(parse(text))
    problem = expression_problem(e, max_height, max_ops)
    if problem is not None:
        raise ArchitectureError(f"FFN expression {text!r} is invalid: {problem}")
    kept = _enumeration(max_height, max_ops)[1].get(functional_hash(e))
    if kept is None:  # the enumeration is complete, so this is a bug, not bad input
        raise AssertionError(f"valid expression {e} missing from the enumeration")
    return kept


# ---------------------------------------------------------------------------
# the numeric encoding (LaNAS)
# ---------------------------------------------------------------------------


def _slots(e: Expr) -> dict[int, str]:
    """Heap layout of the tree: the output in slot 0, the arguments of ``s`` in 2s+1, 2s+2."""
    out: dict[int, str] = {}
    stack = [(0, e)]
    while stack:
        s, n = stack.pop()
        out[s] = n.op
        stack.extend((2 * s + 1 + k, a) for k, a in enumerate(n.args))
    return out


def slot_features(exprs: Sequence[str | Expr]) -> tuple[tuple[float, ...], ...]:
    """Per expression, the one-hot tokens of its tree slots; columns constant over all
    ``exprs`` dropped (module docstring)."""
    layouts = [_slots(e if isinstance(e, Expr) else parse(e)) for e in exprs]
    counts = Counter(item for layout in layouts for item in layout.items())
    varying = sorted((c for c, k in counts.items() if k < len(layouts)),
                     key=lambda c: (c[0], TOKENS.index(c[1])))
    return tuple(tuple(1.0 if lay.get(s) == op else 0.0 for s, op in varying)
                 for lay in layouts)


@functools.lru_cache(maxsize=8)
def _features(max_height: int, max_ops: int) -> tuple[tuple[float, ...], ...]:
    return slot_features([parse_cached(t) for t in enumerate_expressions(max_height, max_ops)])


@dataclass(frozen=True)
class ExpressionChoice(Categorical):
    """A layer's FFN expression: a categorical over the enumerated expressions that also
    accepts any valid expression computing one of them (in another argument order, or a
    more complex form of the same function) and names the rule an invalid one breaks."""

    max_height: int = MAX_HEIGHT
    max_ops: int = MAX_OPS

    def index(self, value: Any) -> int:
        try:
            return super().index(value)
        except ArchitectureError:
            if not isinstance(value, str):
                raise
        try:
            kept = canonical_expression(value, self.max_height, self.max_ops)
        except ArchitectureError as err:
            raise ArchitectureError(f"choice {self.name!r}: {err}") from None
        return super().index(kept)


def layer_choices(layer: int, max_stack: int, ratios: tuple[str, ...], max_height: int,
                  max_ops: int) -> list[Categorical]:
    p = f"L{layer}."
    values = enumerate_expressions(max_height, max_ops)
    return [
        ExpressionChoice(p + "expr", values, SEED_EXPRESSION, kind="op",
                         doc="FFN expression over x", features=_features(max_height, max_ops),
                         max_height=max_height, max_ops=max_ops),
        IntChoice(p + "stack", 1, max_stack, default=1, kind="depth", doc="stacked FFNs N"),
        Categorical(p + "ratio", ratios, "1", kind="width", doc="expansion ratio r"),
    ]


def expression(values: Any, layer: int) -> str:
    """The layer's FFN expression as text, e.g. ``linear2(gelu(linear1(x)))``."""
    return str(values[f"L{layer}.expr"])


@register_space("efficientbert", test_config={
    "vocab_size": 500, "layers": 2, "hidden": 48, "heads": 4, "embedding_size": 16,
    "max_positions": 64, "fit_size": 32,
})
def efficientbert_space(
    num_labels: int = 2,
    layers: int = 6,
    hidden: int = 540,
    heads: int = 12,
    max_stack: int = 4,
    ratios: tuple[str, ...] = RATIOS,
    vocab_size: int = 30522,
    embedding_size: int = 128,
    max_positions: int = 512,
    type_vocab_size: int = 2,
    fit_size: int = 768,
    max_height: int = MAX_HEIGHT,
    max_ops: int = MAX_OPS,
) -> SearchSpace:
    """EfficientBERT's space; ``hidden=360`` gives EfficientBERT-tiny's base."""
    check_hyperparameters("efficientbert", locals(), positive=(
        "num_labels", "layers", "hidden", "heads", "max_stack", "vocab_size", "embedding_size",
        "max_positions", "fit_size", "max_ops"), non_negative=("type_vocab_size",))
    if hidden % heads:
        raise SpaceDefinitionError(
            f"space 'efficientbert': hidden ({hidden}) must be divisible by heads ({heads}); "
            f"set hidden to a multiple of heads (e.g. {hidden - hidden % heads or heads})"
        )
    if not isinstance(max_height, int) or isinstance(max_height, bool) or max_height < 3:
        raise SpaceDefinitionError(
            f"space 'efficientbert': max_height must be an integer of at least 3 (the "
            f"standard FFN's height), got {max_height!r}")
    ratios = tuple(str(r) for r in ratios)
    for r in ratios:
        try:
            bad = not 0 < Fraction(r) <= 1
        except (ValueError, ZeroDivisionError):
            bad = True
        if bad:
            raise SpaceDefinitionError(
                f"space 'efficientbert': expansion ratio {r!r} must be a number in (0, 1], "
                "e.g. 1/2 (the paper's ratios: 1, 1/2, 1/3, 1/4)")
    choices = [c for i in range(layers)
               for c in layer_choices(i, max_stack, ratios, max_height, max_ops)]

    g = GraphBuilder()
    g.node("emb", "embedding", group="embeddings", params=dict(
        vocab_size=vocab_size, embedding_size=embedding_size, out=hidden, trigram=True,
        max_positions=max_positions, type_vocab_size=type_vocab_size, norm="layer_norm"))
    prev = "emb"
    for layer in range(layers):
        c = f"L{layer}."
        attn = g.node(f"L{layer}_attn", "bert_attention", group="encoder", cell=f"L{layer}",
                      params={"heads": heads, "head_size": hidden // heads})
        g.edge(prev, attn)
        layer_out = g.node(f"L{layer}_out", "select_last", select=c + "stack", group="encoder",
                           record="hidden_states")
        h = attn
        for s in range(max_stack):
            n = f"L{layer}_f{s}_"
            kw = dict(active=ActiveIf(c + "stack", s + 1), group="encoder", cell=f"L{layer}.ffn{s}")
            # one module per stack slot: every expression shares its two linears
            # (docs/reference.md#efficientbert)
            g.node(n + "ffn", "ffn_expression", label="expr", **kw, params={
                "expr": ChoiceValue(c + "expr"), "inner": Dim(c + "ratio", hidden)})
            g.edge(h, n + "ffn")
            g.node(n + "out", "residual_norm", label="LN(x+·)", **kw)
            g.edge(h, n + "out", arg=0)
            g.edge(n + "ffn", n + "out", arg=1)
            g.edge(n + "out", layer_out, arg=s + 1)
            h = n + "out"
        prev = layer_out
    # The classifier reads the [CLS] state directly (no BERT pooler): the paper's 15.7M
    # counts embeddings, encoder and the fit layer, and this head adds only H·labels.
    g.node("head", "pooler_classifier", params={"num_labels": num_labels, "pooler": False},
           role="output", group="head")
    g.edge(prev, "head")
    g.node("fit", "sum", role="aux", group="distill")
    g.edge(prev, "fit", "linear", out=fit_size)

    n_expr = len(enumerate_expressions(max_height, max_ops))
    return SearchSpace(
        "efficientbert", choices, g.graph,
        config=dict(num_labels=num_labels, layers=layers, hidden=hidden, heads=heads,
                    max_stack=max_stack, ratios=list(ratios), vocab_size=vocab_size,
                    embedding_size=embedding_size, max_positions=max_positions,
                    type_vocab_size=type_vocab_size, fit_size=fit_size,
                    max_height=max_height, max_ops=max_ops,
                    paper_params_groups=["embeddings", "encoder", "distill"],
                    drawing_style="expression"),
        drawing=[(f"layer {i} FFN", f"L{i}.ffn0") for i in range(layers)],
        description=f"EfficientBERT FFN expression DAGs ({n_expr} per layer: height ≤ "
                    f"{max_height}, ≤ {max_ops} math ops), stack ≤ {max_stack}, ratio ∈ "
                    f"{{{', '.join(ratios)}}}; {layers} layers, hidden {hidden} (Dong et al. 2021)",
    )
