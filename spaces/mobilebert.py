"""MobileBERT: bottleneck blocks, its grid space and its fixed designs (Sun et al., 2020;
docs/reference.md#mobilebert).

One graph builder serves the grid space and the fixed designs: every hyperparameter
(named as in ``transformers.MobileBertConfig``) is either a single value (fixed) or a
tuple of values (a choice whose default is the paper's value). Registered:

=====================  ===========================================================  ========
name                   what                                                         params
=====================  ===========================================================  ========
``mobilebert-grid``    the grid: widths, heads, stacked FFNs, depth, norm, act...   --
``mobilebert``         HF ``MobileBertConfig()`` defaults (the released model)      24.84M
``mobilebert-tiny``    2 stacked FFNs, bottleneck attention                         15.75M
``mobilebert-paper``   paper Table 1: MHA on the 512-wide feature map (FLOPs ref.)  25.6M
``ib-bert-large``      the IB-BERT-large teacher (intra 1024, FFN 4096, MHA on 512) 293M
=====================  ===========================================================  ========

Why two MobileBERTs: the released checkpoint (and HF's default config) computes queries
and keys from a shared 512→128 key/query bottleneck, while the paper's Table 1 feeds the
512-wide feature map to MHA. The paper's counts (25.3M, 5.7 GFLOPs at 128 tokens) are
those of Table 1's block; HF's count (24.84M) is that of the released one. ``mobilebert``
is the released one, for parity with ``transformers``.

One block (node names, and the HF module each maps to in :mod:`nas.hf`)::

    x                                          the inter-block feature map (h_inter)
    L{l}_bin  = Norm(linear(x))                bottleneck.input      (h_inter → h_intra)
    L{l}_kq   = Norm(linear(x))                bottleneck.attention  (shared key/query)
    L{l}_qk, L{l}_v                            attention-input selectors (nas.ops.mobilebert)
    L{l}_mha  = MHA(q,k ← qk; v ← v)           attention.self
    L{l}_attn = Norm(linear(mha) + bin)        attention.output
    L{l}_f{s}_out = Norm(linear(act(linear(·))) + ·)   ffn.{s} / intermediate+output (last)
    L{l}_out  = Norm(linear(ffn) + x)          output.bottleneck     (h_intra → h_inter)

Elastic widths are prefix slices of the largest weights; stacked FFNs and layers are
bottom-to-top (``ActiveIf``), so a child is exactly a slice of the supernet. Heads are
elastic with head size ``h_intra / A`` (as HF computes it), which every slice keeps valid
because each projection is sliced to ``A·d = h_intra`` outputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from nas.choices import Categorical
from nas.errors import SpaceDefinitionError
from nas.graph import ActiveIf, ChoiceRef, Dim, GraphBuilder
from nas.ops.mobilebert import ATTENTION_INPUTS, NORM_OPS
from nas.space import Constraint, SearchSpace, check_hyperparameters, register_space

#: ``transformers.MobileBertConfig()`` defaults (the released MobileBERT), HF names.
MOBILEBERT: dict[str, Any] = dict(
    vocab_size=30522, embedding_size=128, hidden_size=512, intra_bottleneck_size=128,
    num_attention_heads=4, num_feedforward_networks=4, intermediate_size=512,
    num_hidden_layers=24, normalization_type="no_norm", hidden_act="relu",
    attention_input="shared_bottleneck", trigram_input=True, max_position_embeddings=512,
    type_vocab_size=2, classifier_activation=True,
)

#: The grid (docs/reference.md#mobilebert): (h_intra, A, F) ∈ {(192,6,1), (160,5,2), (128,4,4),
#: (96,3,8)} and neighbours, h_inter, FFN width, depth and the operational options. Depth 6 and 12
#: heads (head sizes 8 at h_intra 96, 16 at 192) make the student of progressive knowledge
#: transfer from MiniLM-L6-H384 (6 layers, width 384, 12 heads) a point of the grid:
#: transfer needs the teacher's depth, feature-map width and head count.
GRID: dict[str, Any] = dict(
    hidden_size=(384, 512), intra_bottleneck_size=(96, 128, 160, 192),
    num_attention_heads=(3, 4, 5, 6, 12), num_feedforward_networks=(1, 2, 4, 8),
    intermediate_size=(256, 384, 512), num_hidden_layers=(6, 12, 18, 24),
    normalization_type=NORM_OPS, hidden_act=("gelu", "relu"),
    attention_input=ATTENTION_INPUTS, trigram_input=(False, True),
)

FIXED: dict[str, dict[str, Any]] = {
    "mobilebert": {},
    "mobilebert-tiny": dict(num_feedforward_networks=2, attention_input="input_bottleneck"),
    "mobilebert-paper": dict(attention_input="feature_map"),
    "ib-bert-large": dict(intra_bottleneck_size=1024, intermediate_size=4096,
                          num_feedforward_networks=1, normalization_type="layer_norm",
                          hidden_act="gelu", attention_input="feature_map"),
}

DESCRIPTIONS = {
    "mobilebert": "MobileBERT as released (HF MobileBertConfig() defaults): L24, inter 512, "
                  "intra 128, A4, 4 stacked FFNs of 512, NoNorm, relu, shared k/q bottleneck",
    "mobilebert-tiny": "MobileBERT-tiny: as MobileBERT with 2 stacked FFNs and bottleneck "
                       "attention",
    "mobilebert-paper": "MobileBERT as in the paper's Table 1: MHA on the 512-wide feature map "
                        "(the paper's 25.3M / 5.7 GFLOPs)",
    "ib-bert-large": "IB-BERT-large teacher: L24, inter 512, intra 1024, FFN 4096, A4, "
                     "LayerNorm, gelu",
}

#: Which kind each choosable hyperparameter is (nas.choices.Categorical.kind).
KINDS = dict(
    hidden_size="width", intra_bottleneck_size="width", intermediate_size="width",
    num_attention_heads="other", trigram_input="other", num_feedforward_networks="depth",
    num_hidden_layers="depth", normalization_type="op", hidden_act="op", attention_input="op",
)

DOCS = dict(
    hidden_size="inter-block width h_inter", intra_bottleneck_size="intra-block width h_intra",
    num_attention_heads="attention heads A (head size h_intra / A)",
    num_feedforward_networks="stacked FFNs F", intermediate_size="FFN inner width",
    num_hidden_layers="number of blocks", normalization_type="LayerNorm or NoNorm",
    hidden_act="FFN activation", attention_input="where queries/keys/values come from",
    trigram_input="trigram embedding (3 × 128 → h_inter) or plain 128 → h_inter",
)


class _Shape:
    """Hyperparameters that are either fixed values or choices (tuples of values)."""

    def __init__(self, values: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
        self.values = dict(values)
        self.choices: dict[str, Categorical] = {}
        for key, v in values.items():
            if isinstance(v, tuple | list) and key in KINDS:
                v = tuple(v)
                if len(v) == 1:
                    self.values[key] = v[0]
                    continue
                default = defaults.get(key, v[0])
                self.choices[key] = Categorical(key, v, default if default in v else v[0],
                                                kind=KINDS[key], doc=DOCS[key])
            elif isinstance(v, tuple | list):
                raise SpaceDefinitionError(f"mobilebert: {key} cannot be a choice")

    def dim(self, key: str) -> int | Dim:
        return Dim(key) if key in self.choices else int(self.values[key])

    def op(self, key: str) -> str | ChoiceRef:
        return ChoiceRef(key) if key in self.choices else str(self.values[key])

    def max(self, key: str) -> Any:
        return self.choices[key].largest() if key in self.choices else self.values[key]

    def options(self, key: str) -> tuple[Any, ...]:
        return self.choices[key].values if key in self.choices else (self.values[key],)

    def gate(self, key: str, at_least: int) -> ActiveIf | None:
        """``ActiveIf`` for the ``at_least``-th layer/stack, or None when it always exists."""
        if key not in self.choices or at_least <= min(self.options(key)):
            return None
        return ActiveIf(key, at_least)


def _heads_rule(shape: _Shape) -> Constraint | None:
    a, h = "num_attention_heads", "intra_bottleneck_size"
    if a not in shape.choices and h not in shape.choices:
        return None

    def check(values: Mapping[str, Any]) -> str | None:
        heads = values.get(a, shape.values.get(a))
        intra = values.get(h, shape.values.get(h))
        if int(intra) % int(heads):
            return (f"{h}={intra} is not divisible by {a}={heads}; the head size "
                    f"h_intra / A must be an integer")
        return None

    return Constraint(tuple(k for k in (a, h) if k in shape.choices), check,
                      "intra_bottleneck_size divisible by num_attention_heads")


def mobilebert_space(name: str, *, num_labels: int = 2, **hparams: Any) -> SearchSpace:
    """A MobileBERT space; a hyperparameter given as a tuple is a choice
    (docs/reference.md#mobilebert)."""
    unknown = set(hparams) - set(MOBILEBERT)
    if unknown:
        raise SpaceDefinitionError(
            f"{name}: unknown hyperparameter(s) {sorted(unknown)}; known: {sorted(MOBILEBERT)}"
        )
    values = {**MOBILEBERT, **hparams, "num_labels": num_labels}
    check_hyperparameters(
        name, values, flags=("trigram_input", "classifier_activation"), non_negative=(
            "type_vocab_size",), positive=(
            "num_labels", "vocab_size", "embedding_size", "hidden_size", "intra_bottleneck_size",
            "num_attention_heads", "num_feedforward_networks", "intermediate_size",
            "num_hidden_layers", "max_position_embeddings"))
    shape = _Shape({**MOBILEBERT, **hparams}, MOBILEBERT)
    for key in ("attention_input", "normalization_type"):
        for v in shape.options(key):
            if v not in ("feature_map", *ATTENTION_INPUTS, *NORM_OPS):
                raise SpaceDefinitionError(f"{name}: {key}={v!r} is not allowed")
    if not {"intra_bottleneck_size", "num_attention_heads"} & set(shape.choices) and \
            shape.values["intra_bottleneck_size"] % shape.values["num_attention_heads"]:
        # both fixed (other dimensions may still be choices): no architecture is valid
        raise SpaceDefinitionError(
            f"{name}: intra_bottleneck_size={shape.values['intra_bottleneck_size']} is not "
            f"divisible by num_attention_heads={shape.values['num_attention_heads']}")
    sv = shape.values
    eps = 1e-12
    inter, intra, norm = shape.dim("hidden_size"), shape.dim("intra_bottleneck_size"), \
        shape.op("normalization_type")
    inputs = shape.options("attention_input")

    g = GraphBuilder()
    g.node("emb", "embedding", group="embeddings", params=dict(
        vocab_size=sv["vocab_size"], embedding_size=sv["embedding_size"], out=inter,
        trigram=shape.dim("trigram_input"), max_positions=sv["max_position_embeddings"],
        type_vocab_size=sv["type_vocab_size"], norm="none"))
    # HF builds the embeddings' LayerNorm with PyTorch's default eps (1e-5), not config's.
    g.node("emb_norm", norm, group="embeddings", record="embeddings", params=dict(eps=1e-5))
    g.edge("emb", "emb_norm")
    layers = shape.max("num_hidden_layers")
    stacks = shape.max("num_feedforward_networks")
    prev = "emb_norm"
    for i in range(layers):
        x, p = prev, f"L{i}_"
        kw: dict[str, Any] = dict(group="encoder", cell=f"L{i}")
        lkw = dict(kw, active=shape.gate("num_hidden_layers", i + 1))
        g.node(p + "bin", norm, label="bottleneck.input", **lkw, params=dict(eps=eps))
        g.edge(x, p + "bin", "linear", out=intra)
        # attention inputs: arg 0 input bottleneck, 1 shared k/q bottleneck (qk) or x (v),
        # 2 the feature map; the selector op keeps one (nas.ops.mobilebert).
        g.node(p + "qk", shape.op("attention_input"), label="q,k input", **lkw)
        g.node(p + "v", shape.op("attention_input"), label="v input", **lkw)
        if "input_bottleneck" in inputs:
            g.edge(p + "bin", p + "qk", arg=0)
            g.edge(p + "bin", p + "v", arg=0)
        if "shared_bottleneck" in inputs:
            g.node(p + "kq", norm, label="bottleneck.attention", **lkw, params=dict(eps=eps))
            g.edge(x, p + "kq", "linear", out=intra)
            g.edge(p + "kq", p + "qk", arg=1)
            g.edge(x, p + "v", arg=1)
        if "feature_map" in inputs:
            g.edge(x, p + "qk", arg=2)
            if "shared_bottleneck" in inputs:  # x already feeds arg 1: pass x via an alias
                g.node(p + "fm", "sum", label="x", **lkw)
                g.edge(x, p + "fm")
                g.edge(p + "fm", p + "v", arg=2)
            else:
                g.edge(x, p + "v", arg=2)
        g.node(p + "mha", "mha", label="MHA", **lkw,
               params=dict(heads=shape.dim("num_attention_heads"), out=intra))
        g.edge(p + "qk", p + "mha", arg=0)
        g.edge(p + "v", p + "mha", arg=1)
        g.node(p + "attn", norm, label="attention.output", **lkw, params=dict(eps=eps))
        g.edge(p + "mha", p + "attn", "linear", arg=0, out=intra)
        g.edge(p + "bin", p + "attn", arg=1)  # residual from the input bottleneck
        src = p + "attn"
        ffn_outs = []
        for s in range(stacks):
            f = f"{p}f{s}_"
            # Blocks above the smallest depth are gated by F; lower ones by the layer.
            gate = shape.gate("num_feedforward_networks", s + 1) or lkw["active"]
            fkw = dict(group="encoder", cell=f"L{i}.ffn{s}", active=gate)
            g.node(f + "h", "sum", label="intermediate", **fkw)
            g.edge(src, f + "h", "linear", out=shape.dim("intermediate_size"))
            g.node(f + "a", "sum", label="act", **fkw)
            g.edge(f + "h", f + "a", shape.op("hidden_act"))
            g.node(f + "out", norm, label="ffn.output", **fkw, params=dict(eps=eps))
            g.edge(f + "a", f + "out", "linear", arg=0, out=intra)
            g.edge(src, f + "out", arg=1)
            ffn_outs.append(f + "out")
            src = f + "out"
        if "num_feedforward_networks" in shape.choices:
            last = g.node(p + "ffn", "select_last", select="num_feedforward_networks",
                          label="last FFN", **lkw)
            for s, node in enumerate(ffn_outs):
                g.edge(node, last, arg=s + 1)
        else:
            last = ffn_outs[-1]
        out = g.node(p + "out", norm, label="output.bottleneck", record="hidden_states",
                     **lkw, params=dict(eps=eps))
        g.edge(last, out, "linear", arg=0, out=inter)
        g.edge(x, out, arg=1)  # residual from the block input
        prev = out
    if "num_hidden_layers" in shape.choices:
        enc = g.node("enc", "select_last", select="num_hidden_layers", group="encoder")
        for i in range(layers):
            g.edge(f"L{i}_out", enc, arg=i + 1)
        prev = enc
    g.node("head", "elastic_pooler_classifier", role="output", group="head",
           params=dict(num_labels=num_labels, pooler=bool(sv["classifier_activation"])))
    g.edge(prev, "head")

    rule = _heads_rule(shape)
    config = {"family": "mobilebert", "num_labels": num_labels,
              **{k: (list(v) if isinstance(v, tuple) else v) for k, v in shape.values.items()}}
    fixed = not shape.choices
    return SearchSpace(
        name, list(shape.choices.values()), g.graph,
        constraints=[rule] if rule else [],
        config=config,
        drawing=[("block 0", "L0"), ("block 0, FFN 0", "L0.ffn0")],
        description=(f"fixed design: {DESCRIPTIONS.get(name, name)} (Sun et al. 2020)" if fixed else
                     "MobileBERT grid (Sun et al. 2020): h_inter, h_intra, heads, stacked FFNs, "
                     "FFN width, depth, LayerNorm/NoNorm, GeLU/ReLU, attention input, trigram"),
    )


#: Narrow shapes of the same family for the registry-wide contract tests; the grid's
#: includes the feature-map attention input so that all three selectors are exercised.
SMALL: dict[str, Any] = dict(vocab_size=500, embedding_size=16, hidden_size=32,
                             intra_bottleneck_size=16, num_attention_heads=4,
                             intermediate_size=32, num_hidden_layers=2)
SMALL_GRID: dict[str, Any] = dict(
    vocab_size=500, embedding_size=16, hidden_size=(24, 32), intra_bottleneck_size=(12, 16, 24),
    num_attention_heads=(2, 3, 4), num_feedforward_networks=(1, 2, 3),
    intermediate_size=(16, 32), num_hidden_layers=(1, 2, 3),
    attention_input=("shared_bottleneck", "input_bottleneck", "feature_map"),
)

register_space("mobilebert-grid", test_config=SMALL_GRID)(
    partial(mobilebert_space, "mobilebert-grid", **GRID))
for _name, _overrides in FIXED.items():
    register_space(_name, test_config=SMALL)(partial(mobilebert_space, _name, **_overrides))
