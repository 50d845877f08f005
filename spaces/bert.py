"""BERT-shaped fixed designs: spaces with no choices and one architecture (the pattern of
Optuna's ``FixedTrial``: a fixed design runs the searched designs' code path, without choices).

``bert`` takes its shape as factory keyword arguments with Hugging Face's names
(``hidden_size``, ``num_hidden_layers``, ``num_attention_heads``, ``intermediate_size``...),
so that a ``transformers.BertConfig`` maps onto it one to one. Presets (their published
counts: docs/reference.md#costs):

======================  =====================================  ==================
name                    shape                                  params (HF)
======================  =====================================  ==================
``bert-base``           L12 H768 A12 FFN3072, vocab 30522      109.5M
``bert-large``          L24 H1024 A16 FFN4096                  335.1M
``minilm-l6-h384``      L6 H384 A12 FFN1536 (default teacher)  22.7M
``tinybert``            L4 H312 A12 FFN1200 (TinyBERT-4)       14.35M
``mixedvocab-l6``       L6 H256 A4 FFN1024, vocab 4928         6.20M
``mixedvocab-l12``      L12 H256 A4 FFN1024, vocab 4928        10.94M
======================  =====================================  ==================

Every preset accepts the ``bert`` keyword arguments as overrides (``num_labels``,
``vocab_size``...). The mixed-vocabulary students' 4,928 is the paper's vocabulary size,
for the published parameter count only: ``mixedvocab`` takes the size of the student vocabulary
actually built (``vocab_size=len(vocab.txt)``, what ``recipes/mixedvocab.py`` passes).

``model_type`` (a teacher's ``config.json`` value, :data:`MODEL_TYPES`) takes in the
BERT-family teachers that compute what BERT does but for these differences (their weight
names are :mod:`nas.hf`'s business):

* ``roberta``, ``xlm-roberta``, ``camembert``: positions numbered from ``pad_token_id + 1``
  over the non-pad tokens (a 514-row table reads 512 tokens), one token type, and a
  ``dense`` + tanh + ``out_proj`` head on ``<s>`` with no pooler, which is BERT's pooler +
  classifier under other names;
* ``electra`` (the discriminator): word, position and type tables and the embeddings'
  LayerNorm at ``embedding_size`` E, then ``embeddings_project`` E → H when E ≠ H; a
  ``dense`` + GELU + ``out_proj`` head;
* ``distilbert``: no token types, no pooler; ``pre_classifier`` + ReLU + ``classifier``.

``head="joint"`` (with ``num_tags``) replaces the classifier by a joint intent + slot head
(``joint_intent_slot``: intent logits from the pooled ``[CLS]``, IOB tag logits per token,
one output of width ``num_labels + num_tags``; the SNIPS task of Zhao et al. 2021).

The graph, with the node names that :mod:`nas.hf` maps to HF's::

    emb                       embedding (word+position+type, LN)   embeddings.*
    L{i}_attn                 bert_attention: LN(x + W_o·MHA(x))   layer.{i}.attention.*
    L{i}_attn -> L{i}_ffn_h   linear H → FFN                       layer.{i}.intermediate.dense
    L{i}_ffn_h -> L{i}_ffn_a  activation (gelu)
    L{i}_ffn_a -> L{i}_out    linear FFN → H; LN(attn + ·)         layer.{i}.output.*
    head                      pooler (tanh) + classifier           pooler.dense, classifier
    fit (aux, optional)       linear H → fit_size, TinyBERT's W_h (docs/reference.md#tinybert)

States recorded for distillation: ``embeddings`` (the embedding output),
``hidden_states`` (each layer's output) and ``attention_scores`` (pre-softmax, per layer).
"""

from __future__ import annotations

from functools import partial
from typing import Any

from nas.errors import SpaceDefinitionError
from nas.graph import GraphBuilder
from nas.space import SearchSpace, check_hyperparameters, register_space

HEADS = ("classifier", "joint")

#: The shape of ``transformers.BertConfig()`` (BERT-base), with HF's hyperparameter names.
BERT_BASE: dict[str, Any] = dict(
    vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
    intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512, type_vocab_size=2,
    layer_norm_eps=1e-12,
)

#: The teacher types a ``bert`` design takes, and what each computes differently from
#: BERT: ``positions`` (``absolute`` 0..L-1, or ``padding``: RoBERTa's numbering from the pad
#: id + 1) and the head's ``pooler_act`` (the module docstring).
MODEL_TYPES: dict[str, dict[str, str]] = {
    "bert": dict(positions="absolute", pooler_act="tanh"),
    "roberta": dict(positions="padding", pooler_act="tanh"),
    "xlm-roberta": dict(positions="padding", pooler_act="tanh"),
    "camembert": dict(positions="padding", pooler_act="tanh"),
    "electra": dict(positions="absolute", pooler_act="gelu"),
    "distilbert": dict(positions="absolute", pooler_act="relu"),
}

PRESETS: dict[str, dict[str, Any]] = {
    "bert-base": {},
    "bert-large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                       intermediate_size=4096),
    "minilm-l6-h384": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                           intermediate_size=1536),
    "tinybert": dict(hidden_size=312, num_hidden_layers=4, num_attention_heads=12,
                     intermediate_size=1200),
    "mixedvocab-l6": dict(vocab_size=4928, hidden_size=256, num_hidden_layers=6,
                          num_attention_heads=4, intermediate_size=1024),
    "mixedvocab-l12": dict(vocab_size=4928, hidden_size=256, num_hidden_layers=12,
                           num_attention_heads=4, intermediate_size=1024),
}

DESCRIPTIONS = {
    "bert": "BERT encoder of any shape (HF BertConfig names as keyword arguments)",
    "bert-base": "BERT-base, L12 H768 A12 FFN3072 (Devlin et al. 2019)",
    "bert-large": "BERT-large, L24 H1024 A16 FFN4096 (Devlin et al. 2019)",
    "minilm-l6-h384": "MiniLM-L6-H384, the default teacher's shape (Wang et al. 2020)",
    "tinybert": "TinyBERT-4, L4 H312 A12 FFN1200 (Jiao et al. 2020)",
    "mixedvocab": "mixed-vocabulary student, H256 A4 FFN1024, vocab of the built student "
                  "vocabulary (default 4928, Zhao et al. 2021)",
    "mixedvocab-l6": "mixed-vocabulary student L6 H256 A4, vocab 4928 (Zhao et al. 2021)",
    "mixedvocab-l12": "mixed-vocabulary student L12 H256 A4, vocab 4928 (Zhao et al. 2021)",
}


def bert_space(
    name: str = "bert",
    *,
    num_labels: int = 2,
    vocab_size: int = 30522,
    hidden_size: int = 768,
    num_hidden_layers: int = 12,
    num_attention_heads: int = 12,
    intermediate_size: int = 3072,
    hidden_act: str = "gelu",
    max_position_embeddings: int = 512,
    type_vocab_size: int = 2,
    layer_norm_eps: float = 1e-12,
    classifier_activation: bool = True,
    fit_size: int | None = None,
    head: str = "classifier",
    num_tags: int = 0,
    model_type: str = "bert",
    embedding_size: int | None = None,
    pad_token_id: int = 1,
) -> SearchSpace:
    """A BERT encoder + sequence-classification head as a fixed design (zero choices).

    ``fit_size`` adds TinyBERT's hidden-state fit layer (student H → teacher H) as an
    auxiliary node of group ``distill``: built and costed, run only when asked for.
    ``head``: ``classifier`` (BERT's pooler + classifier) or ``joint`` (intent + slot
    tags, ``num_tags`` of them; see the module docstring). ``model_type``, with ELECTRA's
    ``embedding_size`` and RoBERTa's ``pad_token_id``: the teacher type (module docstring).
    """
    check_hyperparameters(name, locals(), flags=("classifier_activation",), positive=(
        "num_labels", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size", "max_position_embeddings"), non_negative=("type_vocab_size",
                                                                       "fit_size", "num_tags"))
    if head not in HEADS:
        raise SpaceDefinitionError(f"space {name!r}: head must be one of {', '.join(HEADS)}, "
                                   f"got {head!r}")
    if (head == "joint") != bool(num_tags):
        raise SpaceDefinitionError(f"space {name!r}: num_tags ({num_tags!r}) must be > 0 "
                                   f"exactly when head is 'joint' (head is {head!r})")
    if not isinstance(layer_norm_eps, int | float) or not 0 < layer_norm_eps < 1:
        raise SpaceDefinitionError(f"space {name!r}: layer_norm_eps must be a small positive "
                                   f"number, got {layer_norm_eps!r}")
    if hidden_size % num_attention_heads:
        raise SpaceDefinitionError(
            f"{name}: hidden_size ({hidden_size}) must be divisible by num_attention_heads "
            f"({num_attention_heads}), as in transformers.BertConfig"
        )
    eps = float(layer_norm_eps)
    kind = teacher_type(name, model_type, hidden_size, embedding_size, pad_token_id)
    g = GraphBuilder()
    g.node("emb", "embedding", group="embeddings", record="embeddings", params=dict(
        vocab_size=vocab_size, embedding_size=embedding_size or hidden_size, out=hidden_size,
        max_positions=max_position_embeddings, type_vocab_size=type_vocab_size,
        norm="layer_norm", eps=eps, **kind["embedding"]))
    prev = "emb"
    for i in range(num_hidden_layers):
        kw = dict(group="encoder", cell=f"L{i}")
        attn = g.node(f"L{i}_attn", "bert_attention", **kw, params=dict(
            heads=num_attention_heads, head_size=hidden_size // num_attention_heads, eps=eps))
        g.edge(prev, attn)
        g.node(f"L{i}_ffn_h", "sum", label="intermediate", **kw)
        g.edge(attn, f"L{i}_ffn_h", "linear", out=intermediate_size)
        g.node(f"L{i}_ffn_a", "sum", label=hidden_act, **kw)
        g.edge(f"L{i}_ffn_h", f"L{i}_ffn_a", hidden_act)
        out = g.node(f"L{i}_out", "residual_norm", label="LN(x+·)", record="hidden_states",
                     **kw, params=dict(eps=eps))
        g.edge(attn, out, arg=0)  # the residual
        g.edge(f"L{i}_ffn_a", out, "linear", arg=1, out=hidden_size)
        prev = out
    if head == "joint":
        g.node("head", "joint_intent_slot", role="output", group="head", params=dict(
            num_labels=num_labels, num_tags=num_tags, pooler=classifier_activation))
    else:
        g.node("head", "pooler_classifier", role="output", group="head",
               params=dict(num_labels=num_labels, pooler=classifier_activation, **kind["head"]))
    g.edge(prev, "head")
    if fit_size:
        g.node("fit", "sum", role="aux", group="distill")
        g.edge(prev, "fit", "linear", out=int(fit_size))

    config = dict(
        family="bert", num_labels=num_labels, vocab_size=vocab_size, hidden_size=hidden_size,
        num_hidden_layers=num_hidden_layers, num_attention_heads=num_attention_heads,
        intermediate_size=intermediate_size, hidden_act=hidden_act,
        max_position_embeddings=max_position_embeddings, type_vocab_size=type_vocab_size,
        layer_norm_eps=eps, classifier_activation=classifier_activation, fit_size=fit_size,
    )
    if head != "classifier":  # recorded only when set: older exports' configs stay equal
        config.update(head=head, num_tags=num_tags)
    config.update(kind["config"])
    desc = DESCRIPTIONS.get(name, DESCRIPTIONS["bert"])
    return SearchSpace(
        name, [], g.graph, config=config,
        drawing=[("layer 0", "L0")],
        description=f"fixed design: {desc}; L{num_hidden_layers} H{hidden_size} "
                    f"A{num_attention_heads} FFN{intermediate_size} vocab {vocab_size}",
    )


def teacher_type(name: str, model_type: str, hidden_size: int, embedding_size: int | None,
                 pad_token_id: int) -> dict[str, dict[str, Any]]:
    """What ``model_type`` changes (:data:`MODEL_TYPES`): the embedding op's and the head's
    extra parameters, and the space configuration's entries (none for ``bert``, so that
    older exports' configurations stay equal)."""
    if model_type not in MODEL_TYPES:
        raise SpaceDefinitionError(f"space {name!r}: model_type must be one of "
                                   f"{', '.join(MODEL_TYPES)}, got {model_type!r}")
    if embedding_size not in (None, hidden_size) and model_type != "electra":
        raise SpaceDefinitionError(f"space {name!r}: embedding_size ({embedding_size}) differs "
                                   f"from hidden_size ({hidden_size}) only in an electra "
                                   "design; leave it out")
    if embedding_size is not None and (not isinstance(embedding_size, int)
                                       or isinstance(embedding_size, bool) or embedding_size < 1):
        raise SpaceDefinitionError(f"space {name!r}: embedding_size must be a positive "
                                   f"integer, got {embedding_size!r}")
    kind = MODEL_TYPES[model_type]
    embedding: dict[str, Any] = {}
    config: dict[str, Any] = {}
    if model_type != "bert":
        config["model_type"] = model_type
    if kind["positions"] == "padding":
        if not isinstance(pad_token_id, int) or isinstance(pad_token_id, bool) \
                or pad_token_id < 0:
            raise SpaceDefinitionError(f"space {name!r}: pad_token_id must be a token id, "
                                       f"got {pad_token_id!r}")
        embedding["padding_idx"] = config["pad_token_id"] = pad_token_id
    if model_type == "electra":
        embedding["project"] = "after_norm"
        config["embedding_size"] = embedding_size or hidden_size
    head = {} if kind["pooler_act"] == "tanh" else {"pooler_act": kind["pooler_act"]}
    return {"embedding": embedding, "head": head, "config": config}


#: A narrow shape of the same family for the registry-wide contract tests.
SMALL: dict[str, Any] = dict(vocab_size=500, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=48)


def _preset(name: str, **overrides: Any) -> SearchSpace:
    return bert_space(name, **{**BERT_BASE, **PRESETS[name], **overrides})


register_space("bert", test_config=SMALL)(partial(bert_space, "bert"))
for _name in PRESETS:
    register_space(_name, test_config=SMALL)(partial(_preset, _name))


@register_space("mixedvocab", test_config=SMALL)
def mixedvocab_space(num_hidden_layers: int = 6, vocab_size: int = 4928,
                     **overrides: Any) -> SearchSpace:
    """The mixed-vocabulary student (Zhao et al. 2021; docs/reference.md#mixed-vocabulary):
    L6 (default) or L12, H256 A4.

    ``vocab_size``: the size of the student vocabulary it reads (the built ``vocab.txt``;
    4928 is the paper's, the default only for the published parameter count).
    """
    shape = {**BERT_BASE, **PRESETS["mixedvocab-l6"], "num_hidden_layers": num_hidden_layers,
             "vocab_size": vocab_size}
    return bert_space("mixedvocab", **{**shape, **overrides})
