"""EfficientBERT: per-layer FFN expressions, stack number and expansion ratio
(Dong et al., 2021; SPEC §3).

The base model is 6 Transformer layers of hidden 540 with 12 heads and a MobileBERT
style embedding (128-dim table, trigram concatenation, linear to 540); a 540→768 fit
layer serves distillation only.

Each layer's FFN is an expression over its input ``x`` with exactly two linear layers,
declared as a template DAG whose op positions are choices::

    pre  = B_pre(x, U_pre(x))          B ∈ {first, add, mul, max}, U ∈ {identity, 7 unary}
    h1   = linear1(pre)                 hidden → int(r·H)
    mid  = U_mid(B_mid(h1, x))          binary ops on unequal widths cut to the narrower
    out  = U_post(linear2(mid))         int(r·H) → hidden
    FFN(x) = LayerNorm(x + out)

``first`` means "no binary op". N ∈ {1..4} such FFNs run in a row, each with its own
weights and the layer's expression. The template expresses the standard FFN (the seed
``linear2(gelu(linear1(x)))``) and all six layers of the published architecture
(``experiments/archs/efficientbert_paper.json``). Validity (SPEC §3): ``x`` is used and
there are two linears by construction; a binary op on two identical arguments
(``B_pre`` with ``U_pre = identity``) is invalid, and so is an unused ``U_pre``
(``B_pre = first`` with ``U_pre ≠ identity``), which would only duplicate architectures.
"""

from __future__ import annotations

from collections.abc import Mapping

from nas.choices import Categorical, IntChoice
from nas.errors import SpaceDefinitionError
from nas.graph import ActiveIf, ChoiceRef, Dim, GraphBuilder
from nas.ops.basic import BINARY_OPS, UNARY_OPS
from nas.space import Constraint, SearchSpace, check_hyperparameters, register_space

UNARY = ("identity", *UNARY_OPS)
RATIOS = ("1", "1/2", "1/3", "1/4")
EXPRESSION_CHOICES = ("pre_unary", "pre_binary", "mid_binary", "mid_unary", "post_unary")


def layer_choices(layer: int, max_stack: int, ratios: tuple[str, ...]) -> list[Categorical]:
    p = f"L{layer}."
    return [
        Categorical(p + "pre_unary", UNARY, "identity", doc="U_pre applied to x"),
        Categorical(p + "pre_binary", BINARY_OPS, "first", doc="B_pre(x, U_pre(x))"),
        Categorical(p + "mid_binary", BINARY_OPS, "first", doc="B_mid(linear1(.), x)"),
        Categorical(p + "mid_unary", UNARY, "gelu", doc="U_mid after the binary"),
        Categorical(p + "post_unary", UNARY, "identity", doc="U_post after linear2"),
        IntChoice(p + "stack", 1, max_stack, default=1, kind="depth", doc="stacked FFNs N"),
        Categorical(p + "ratio", ratios, "1", kind="width", doc="expansion ratio r"),
    ]


def _pre_rule(layer: int) -> Constraint:
    pu, pb = f"L{layer}.pre_unary", f"L{layer}.pre_binary"

    def check(values: Mapping) -> str | None:
        if values[pb] != "first" and values[pu] == "identity":
            return (f"{pb}={values[pb]!r} with {pu}='identity' applies a binary op to two "
                    f"identical arguments; choose a unary op for {pu} or set {pb}='first'")
        if values[pb] == "first" and values[pu] != "identity":
            return (f"{pu}={values[pu]!r} is unused when {pb}='first'; set {pu}='identity'")
        return None

    return Constraint((pu, pb), check, f"L{layer}: B_pre needs a non-identity U_pre, and only then")


def expression(values: Mapping, layer: int) -> str:
    """The layer's FFN expression as text, e.g. ``linear2(gelu(linear1(x)))``."""
    v = {k: values[f"L{layer}.{k}"] for k in EXPRESSION_CHOICES}

    def unary(op: str, arg: str) -> str:
        return arg if op == "identity" else f"{op}({arg})"

    pre = "x"
    if v["pre_binary"] != "first":
        pre = f"{v['pre_binary']}(x, {unary(v['pre_unary'], 'x')})"
    h1 = f"linear1({pre})"
    mid = h1 if v["mid_binary"] == "first" else f"{v['mid_binary']}({h1}, x)"
    return unary(v["post_unary"], f"linear2({unary(v['mid_unary'], mid)})")


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
) -> SearchSpace:
    """EfficientBERT's space; ``hidden=360`` gives EfficientBERT-tiny's base."""
    check_hyperparameters("efficientbert", locals(), positive=(
        "num_labels", "layers", "hidden", "heads", "max_stack", "vocab_size", "embedding_size",
        "max_positions", "fit_size"), non_negative=("type_vocab_size",))
    if hidden % heads:
        raise SpaceDefinitionError(
            f"space 'efficientbert': hidden ({hidden}) must be divisible by heads ({heads}); "
            f"set hidden to a multiple of heads (e.g. {hidden - hidden % heads or heads})"
        )
    ratios = tuple(str(r) for r in ratios)
    choices = [c for i in range(layers) for c in layer_choices(i, max_stack, ratios)]

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
        x = attn
        for s in range(max_stack):
            n = f"L{layer}_f{s}_"
            kw = dict(active=ActiveIf(c + "stack", s + 1), group="encoder", cell=f"L{layer}.ffn{s}")
            g.node(n + "pu", "sum", label="U_pre", **kw)
            g.edge(x, n + "pu", ChoiceRef(c + "pre_unary"))
            g.node(n + "pre", ChoiceRef(c + "pre_binary"), label="B_pre", **kw)
            g.edge(x, n + "pre", arg=0)
            g.edge(n + "pu", n + "pre", arg=1)
            g.node(n + "h1", "sum", label="h1", **kw)
            g.edge(n + "pre", n + "h1", "linear", out=Dim(c + "ratio", hidden))
            g.node(n + "mb", ChoiceRef(c + "mid_binary"), label="B_mid", **kw)
            g.edge(n + "h1", n + "mb", arg=0)
            g.edge(x, n + "mb", arg=1)
            g.node(n + "m", "sum", label="U_mid", **kw)
            g.edge(n + "mb", n + "m", ChoiceRef(c + "mid_unary"))
            g.node(n + "h2", "sum", label="h2", **kw)
            g.edge(n + "m", n + "h2", "linear", out=hidden)
            g.node(n + "out", "residual_norm", label="LN(x+·)", **kw)
            g.edge(x, n + "out", arg=0)
            g.edge(n + "h2", n + "out", ChoiceRef(c + "post_unary"), arg=1)
            g.edge(n + "out", layer_out, arg=s + 1)
            x = n + "out"
        prev = layer_out
    # The classifier reads the [CLS] state directly (no BERT pooler): the paper's 15.7M
    # counts embeddings, encoder and the fit layer, and this head adds only H·labels.
    g.node("head", "pooler_classifier", params={"num_labels": num_labels, "pooler": False},
           role="output", group="head")
    g.edge(prev, "head")
    g.node("fit", "sum", role="aux", group="distill")
    g.edge(prev, "fit", "linear", out=fit_size)

    return SearchSpace(
        "efficientbert", choices, g.graph,
        constraints=[_pre_rule(i) for i in range(layers)],
        config=dict(num_labels=num_labels, layers=layers, hidden=hidden, heads=heads,
                    max_stack=max_stack, ratios=list(ratios), vocab_size=vocab_size,
                    embedding_size=embedding_size, max_positions=max_positions,
                    type_vocab_size=type_vocab_size, fit_size=fit_size,
                    paper_params_groups=["embeddings", "encoder", "distill"],
                    drawing_style="expression"),
        drawing=[(f"layer {i} FFN", f"L{i}.ffn0") for i in range(layers)],
        description=f"EfficientBERT FFN expressions, stack ≤ {max_stack}, ratio ∈ "
                    f"{{{', '.join(ratios)}}}; {layers} layers, hidden {hidden} (SPEC §3)",
    )
