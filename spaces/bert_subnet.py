"""``bert-subnet``: the sub-networks of a BERT-family teacher, whose supernet is the teacher.

Built from the teacher's shape (factory keyword arguments with Hugging Face's names, as
:mod:`spaces.bert`; default MiniLM-L6-H384's), on the graph of ``spaces/bert.py`` with
the same node names, so that :func:`nas.hf.load_from_hf` (and
:func:`nas.hf.load_teacher_as_design`'s mapping) load the teacher's weights into the
supernet unchanged, and the child of the full architecture computes what the teacher does.
The choices (docs/reference.md#teacher-compression: DynaBERT, Hou et al. 2020; Minitron,
Muralidharan et al. 2024; Puzzle, Bercovich et al. 2025):

* ``hidden_size``: the teacher's H and 3 narrower widths, each a whole number of heads
  of the teacher's head size (H·3/4, 1/2, 1/4 rounded to heads); slices the leading
  channels of every hidden state (embeddings, LayerNorms, projections);
* ``L{i}_keep`` (depth kind): 1 or 0, layer i kept or skipped (its input passes
  through); with ``layers="first"`` one ``num_hidden_layers`` choice 1..L instead;
* ``L{i}_heads``: 1, 3/4, 1/2, 1/4 or 0 of layer i's heads, the leading ones;
* ``L{i}_ffn``: 1, 3/4, 1/2, 1/4 or 0 of layer i's FFN neurons, the leading ones.

Layers: a keep flag per layer (``layers="any"``, the default: any subset, first-k
included), or one depth choice (``layers="first"``: the first k, a space of L instead of
2^L layer sets, as DynaBERT's depth multiplier and the compress method's truncation baseline). The
head size stays the teacher's, so a narrower hidden width holds fewer heads (H'/d), and
a layer's head share applies to those: ``⌊share · H'/d⌋`` heads
(:func:`nas.ops.transformer.active_heads`). A share of 0 prunes every head or neuron:
what is left is the output bias and the LayerNorm, as ``transformers``' pruning leaves
it. Leading slices hold the most important weights once the teacher is sorted
(:mod:`nas.compress.importance`).

The graph (nodes of ``spaces/bert.py`` plus a selector per layer)::

    emb                    embedding, width hidden_size                 embeddings.*
    L{i}_attn              bert_attention, heads kept: L{i}_heads       layer.{i}.attention.*
    L{i}_ffn_h / _ffn_a    linear H → FFN·L{i}_ffn, activation          layer.{i}.intermediate
    L{i}_out               LN(attn + linear FFN → H)                    layer.{i}.output.*
    L{i}_x                 select_last on L{i}_keep: arg 1 the layer, arg 0 its input
    enc                    (layers="first") select_last: arg k is L{k-1}_out
    head                   elastic pooler + classifier                  pooler, classifier
"""

from __future__ import annotations

import inspect
from fractions import Fraction
from typing import Any

from nas.architecture import Architecture
from nas.choices import Categorical, IntChoice
from nas.errors import SpaceDefinitionError
from nas.graph import ActiveIf, Dim, GraphBuilder
from nas.space import SearchSpace, check_hyperparameters, register_space
from spaces.bert import BERT_BASE, PRESETS, SMALL, teacher_type

#: The shares of a layer's heads and FFN neurons a child keeps.
SHARES = ("1", "3/4", "1/2", "1/4", "0")
#: The hidden widths, as shares of the teacher's heads (rounded to whole heads).
WIDTH_SHARES = ("1", "3/4", "1/2", "1/4")
#: How layers are kept: ``any`` subset (a flag per layer) or the ``first`` k.
LAYER_MODES = ("any", "first")


def hidden_widths(hidden_size: int, num_attention_heads: int) -> tuple[int, ...]:
    """The teacher's width and the narrower ones, each a whole number of heads of the
    teacher's head size (at least one head), widest first, without repeats."""
    d = hidden_size // num_attention_heads
    heads = [max(1, round(Fraction(s) * num_attention_heads)) for s in WIDTH_SHARES]
    return tuple(dict.fromkeys(h * d for h in heads))


@register_space("bert-subnet", test_config=SMALL)
def bert_subnet_space(
    *,
    num_labels: int = 2,
    vocab_size: int = BERT_BASE["vocab_size"],
    hidden_size: int = PRESETS["minilm-l6-h384"]["hidden_size"],
    num_hidden_layers: int = PRESETS["minilm-l6-h384"]["num_hidden_layers"],
    num_attention_heads: int = PRESETS["minilm-l6-h384"]["num_attention_heads"],
    intermediate_size: int = PRESETS["minilm-l6-h384"]["intermediate_size"],
    hidden_act: str = "gelu",
    max_position_embeddings: int = 512,
    type_vocab_size: int = 2,
    layer_norm_eps: float = 1e-12,
    layers: str = "any",
    model_type: str = "bert",
    embedding_size: int | None = None,
    pad_token_id: int = 1,
) -> SearchSpace:
    """The sub-networks of a BERT teacher of this shape (default MiniLM-L6-H384's; see the
    module docstring). :func:`nas.hf.load_from_hf` fills its supernet with the teacher.

    ``layers``: ``any`` (a keep flag per layer, any subset) or ``first`` (one depth
    choice ``num_hidden_layers``, 1..L: the first k layers, as the truncation baseline of
    method compress and DynaBERT's depth multiplier keep). ``model_type``, ``embedding_size``,
    ``pad_token_id``: the teacher's type, as in :func:`spaces.bert.bert_space` (ELECTRA's E
    stays whole: a narrower hidden width keeps the leading rows of ``embeddings_project``).
    """
    name = "bert-subnet"
    if layers not in LAYER_MODES:
        raise SpaceDefinitionError(f"space {name!r}: layers must be one of "
                                   f"{', '.join(LAYER_MODES)}, got {layers!r}")
    check_hyperparameters(name, locals(), positive=(
        "num_labels", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "max_position_embeddings"), non_negative=("type_vocab_size",))
    if hidden_size % num_attention_heads:
        raise SpaceDefinitionError(
            f"{name}: hidden_size ({hidden_size}) must be divisible by num_attention_heads "
            f"({num_attention_heads}), as in transformers.BertConfig")
    if not isinstance(layer_norm_eps, int | float) or not 0 < layer_norm_eps < 1:
        raise SpaceDefinitionError(f"space {name!r}: layer_norm_eps must be a small positive "
                                   f"number, got {layer_norm_eps!r}")
    eps = float(layer_norm_eps)
    kind = teacher_type(name, model_type, hidden_size, embedding_size, pad_token_id)
    widths = hidden_widths(hidden_size, num_attention_heads)
    choices: list[Any] = [Categorical(
        "hidden_size", widths, hidden_size, kind="width",
        doc="hidden width (whole heads of the teacher's head size)")]
    hidden = Dim("hidden_size")
    g = GraphBuilder()
    g.node("emb", "embedding", group="embeddings", record="embeddings", params=dict(
        vocab_size=vocab_size, embedding_size=embedding_size or hidden, out=hidden,
        max_positions=max_position_embeddings, type_vocab_size=type_vocab_size,
        norm="layer_norm", eps=eps, **kind["embedding"]))
    if layers == "first":
        choices.append(IntChoice("num_hidden_layers", 1, num_hidden_layers,
                                 default=num_hidden_layers, kind="depth",
                                 doc="the first k layers kept"))
    prev = "emb"
    for i in range(num_hidden_layers):
        p, layer_in = f"L{i}_", prev
        if layers == "any":
            choices.append(Categorical(p + "keep", (1, 0), 1, kind="depth",
                                       doc=f"layer {i} kept"))
        choices += [
            Categorical(p + "heads", SHARES, "1", kind="width",
                        doc=f"share of layer {i}'s heads kept"),
            Categorical(p + "ffn", SHARES, "1", kind="width",
                        doc=f"share of layer {i}'s FFN neurons kept"),
        ]
        gate = ActiveIf(p + "keep", 1) if layers == "any" else ActiveIf("num_hidden_layers",
                                                                         i + 1)
        kw: dict[str, Any] = dict(group="encoder", cell=f"L{i}", active=gate)
        attn = g.node(p + "attn", "bert_attention", **kw, params=dict(
            heads=num_attention_heads, head_size=hidden_size // num_attention_heads,
            kept=Dim(p + "heads", num_attention_heads), eps=eps))
        g.edge(layer_in, attn)
        g.node(p + "ffn_h", "sum", label="intermediate", **kw)
        g.edge(attn, p + "ffn_h", "linear", out=Dim(p + "ffn", intermediate_size))
        g.node(p + "ffn_a", "sum", label=hidden_act, **kw)
        g.edge(p + "ffn_h", p + "ffn_a", hidden_act)
        out = g.node(p + "out", "residual_norm", label="LN(x+·)", record="hidden_states",
                     **kw, params=dict(eps=eps))
        g.edge(attn, out, arg=0)  # the residual
        g.edge(p + "ffn_a", out, "linear", arg=1, out=hidden)
        prev = out
        if layers == "any":
            # kept: the layer's output (arg 1); skipped: its input passes through (arg 0)
            x = g.node(p + "x", "select_last", select=p + "keep", label=f"layer {i} or skip",
                       group="encoder")
            g.edge(layer_in, x, arg=0)
            g.edge(out, x, arg=1)
            prev = x
    if layers == "first":
        # the head reads the last kept layer's output (arg k)
        enc = g.node("enc", "select_last", select="num_hidden_layers", group="encoder")
        for i in range(num_hidden_layers):
            g.edge(f"L{i}_out", enc, arg=i + 1)
        prev = enc
    g.node("head", "elastic_pooler_classifier", role="output", group="head",
           params=dict(num_labels=num_labels, pooler=True, **kind["head"]))
    g.edge(prev, "head")
    # its own family: a child's shape is a BertConfig only when it keeps whole layers, all
    # heads and one FFN width at the teacher's width (nas.hf.stock_subnet); otherwise the
    # hf export falls back to the remote-code layout
    config = dict(
        family="bert-subnet", num_labels=num_labels, vocab_size=vocab_size,
        hidden_size=hidden_size, num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads, intermediate_size=intermediate_size,
        hidden_act=hidden_act,
        max_position_embeddings=max_position_embeddings, type_vocab_size=type_vocab_size,
        layer_norm_eps=eps, classifier_activation=True, fit_size=None, layers=layers,
        **kind["config"],
    )
    return SearchSpace(
        name, choices, g.graph, config=config, drawing=[("layer 0", "L0")],
        description=f"sub-networks of a BERT teacher L{num_hidden_layers} H{hidden_size} "
                    f"A{num_attention_heads} FFN{intermediate_size}: layers kept, per-layer "
                    f"heads and FFN shares, hidden width {'/'.join(map(str, widths))}",
    )


def truncation(space: SearchSpace, k: int, hidden_size: int | None = None) -> Architecture:
    """The first ``k`` whole layers (all their heads and FFN neurons) at ``hidden_size``
    (default: the teacher's): the compress method's uniform truncation baseline, the depth DynaBERT
    (Hou et al. 2020, §3.2) keeps. Works on both layer modes of the space."""
    layers = int(space.config["num_hidden_layers"])
    if not 1 <= k <= layers:
        raise SpaceDefinitionError(f"space {space.name!r}: a truncation keeps 1 to {layers} "
                                   f"layers, got {k}")
    values: dict[str, Any] = {"hidden_size": hidden_size or int(space.config["hidden_size"])}
    for i in range(layers):
        values.update({f"L{i}_heads": "1", f"L{i}_ffn": "1"})
    if space.config.get("layers") == "first":
        values["num_hidden_layers"] = k
    else:
        values.update({f"L{i}_keep": int(i < k) for i in range(layers)})
    return space.validate(values)


def from_teacher(hf_model: Any, layers: str = "any") -> tuple[SearchSpace, Any]:
    """``(space, supernet)`` for a ``transformers`` BERT model (a fine-tuned
    ``BertForSequenceClassification`` or a bare ``BertModel``): the space of its shape and
    the supernet holding its weights, loaded by the map that loads it into ``bert``
    (:func:`nas.hf.load_from_hf`; a bare encoder leaves the classifier fresh)."""
    from nas.builder import build_supernet
    from nas.hf import load_from_hf, space_kwargs_from_hf

    _, kwargs = space_kwargs_from_hf(hf_model.config)
    if not kwargs.pop("classifier_activation", True):
        raise SpaceDefinitionError("bert-subnet: the teacher must have BERT's pooler")
    space = bert_subnet_space(**kwargs, layers=layers)
    supernet = build_supernet(space)
    missing = load_from_hf(supernet, hf_model, "bert")
    unexpected = [m for m in missing if "classifier" not in m and "pooler" not in m]
    if unexpected:
        raise SpaceDefinitionError(f"bert-subnet: the teacher lacks tensors for {unexpected[:5]}")
    return space, supernet.eval()


def from_design(model: Any, space_config: dict[str, Any], layers: str = "any"
                ) -> tuple[SearchSpace, Any]:
    """``(space, supernet)`` for a teacher already in the ``bert`` design (what
    :func:`nas.hf.load_teacher_as_design` returns, sorted or not): the two share every
    parameter name, so the supernet takes the design's weights one to one (strict)."""
    from nas.builder import build_supernet

    if space_config.get("family") != "bert" or not space_config.get("classifier_activation",
                                                                     True):
        raise SpaceDefinitionError("bert-subnet: the teacher must be a `bert` design with "
                                   "BERT's pooler (nas.hf.load_teacher_as_design gives one)")
    names = inspect.signature(bert_subnet_space).parameters
    kwargs = {k: v for k, v in space_config.items() if k in names and k != "layers"}
    space = bert_subnet_space(**kwargs, layers=layers)
    supernet = build_supernet(space)
    supernet.load_state_dict(model.state_dict())
    return space, supernet.eval()
