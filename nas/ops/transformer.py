"""Transformer ops: embeddings, self-attention, pooled heads, AdaBERT's readout.

Sub-module names follow Hugging Face's BERT/MobileBERT (``word_embeddings``,
``query``, ``output.dense``, ``LayerNorm``...) so weight conversion is a name map
(transformers' ``modeling_bert.py`` and ``modeling_mobilebert.py``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from nas.ops.base import Context, Op, SelectOp, linear_slice, register_op
from nas.ops.basic import ACTIVATIONS, make_norm, norm_params

#: Added to the scores of padded keys before the softmax (BERT's convention).
MASK_VALUE = -10000.0


def pair_mask(ctx: Context) -> torch.Tensor | None:
    """The token mask of a state: for separately embedded pairs, the union of both masks."""
    mask = ctx.batch.get("attention_mask")
    mask_b = ctx.batch.get("attention_mask_b")
    if mask is not None and mask_b is not None:
        return torch.maximum(mask, mask_b)
    return mask


@register_op("embedding")
class Embedding(Op):
    """Token (+ position, + token type) embeddings, optionally factorised.

    ``p``: ``vocab_size``, ``embedding_size`` E, ``out`` (hidden H), ``max_positions``,
    ``type_vocab_size`` (0: none), ``trigram`` (MobileBERT: concatenate the embeddings
    of tokens t+1, t, t-1 and map 3E → H, docs/reference.md#mobilebert), ``norm`` (layer_norm,
    no_norm or none), ``key`` (which batch entry holds the ids: ``input_ids`` or ``input_ids_b``).
    A plain factorised embedding (E < H, no trigram) maps E → H with a linear layer.

    Two teacher conventions (``spaces/bert.py``, ``model_type``): ``padding_idx`` (RoBERTa,
    XLM-R, CamemBERT) numbers the positions from ``padding_idx + 1`` over the non-pad tokens,
    a pad token taking position ``padding_idx`` (``transformers``'
    ``create_position_ids_from_input_ids``); ``project="after_norm"`` (ELECTRA) keeps the
    position and type tables and the norm at E and maps E → H afterwards
    (``embeddings_project``), where MobileBERT's factorisation maps before adding them. A
    one-row type table (RoBERTa's) reads type 0 for every token, whatever the tokenizer says.
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        e = int(p["embedding_size"])
        self.word_embeddings = nn.Embedding(int(p["vocab_size"]), e)
        if self._projects_after(p):
            self.embeddings_project = nn.Linear(e, out_width)
        elif self._projects(p):
            self.embedding_transformation = nn.Linear(e * (3 if p.get("trigram") else 1), out_width)
        table = self._table_width(p, out_width)
        if p.get("max_positions", 0):
            self.position_embeddings = nn.Embedding(int(p["max_positions"]), table)
        if p.get("type_vocab_size", 0):
            self.token_type_embeddings = nn.Embedding(int(p["type_vocab_size"]), table)
        if p.get("norm", "layer_norm") != "none":
            self.LayerNorm = make_norm(p.get("norm", "layer_norm"), table, p.get("eps", 1e-12))

    @staticmethod
    def _projects(p: Mapping[str, Any]) -> bool:
        return bool(p.get("trigram")) or int(p["embedding_size"]) != int(p["out"])

    @classmethod
    def _projects_after(cls, p: Mapping[str, Any]) -> bool:
        """ELECTRA's order: the sum and the norm at E, then E → H."""
        return p.get("project") == "after_norm" and cls._projects(p)

    @classmethod
    def _table_width(cls, p: Mapping[str, Any], out_width: int) -> int:
        """The width of the position and type tables and of the norm."""
        return int(p["embedding_size"]) if cls._projects_after(p) else out_width

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["out"])

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        e = int(p["embedding_size"])
        n = int(p["vocab_size"]) * e
        if cls._projects(p):
            n += e * (3 if p.get("trigram") else 1) * out_width + out_width
        table = cls._table_width(p, out_width)
        n += int(p.get("max_positions", 0)) * table
        n += int(p.get("type_vocab_size", 0)) * table
        if p.get("norm", "layer_norm") != "none":
            n += norm_params(table)
        return n

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        if not cls._projects(p):
            return 0
        return seq_len * int(p["embedding_size"]) * (3 if p.get("trigram") else 1) * out_width

    def forward(self, xs, out_width, p, ctx):
        key = p.get("key", "input_ids")
        ids = ctx.batch[key]  # (B, L)
        given = ctx.batch.get("inputs_embeds") if key == "input_ids" else None
        # ``inputs_embeds`` (B, L, E) replaces the word lookup (HF's argument of that name):
        # mixed-vocabulary training feeds some words through another vocabulary
        # (docs/reference.md#mixed-vocabulary)
        x = self.word_embeddings(ids) if given is None else given  # (B, L, E)
        # an elastic E (a teacher's narrower hidden width, spaces/bert_subnet.py) keeps the
        # leading channels of the table allocated at the largest E
        x = x[..., : int(p["embedding_size"])]
        if p.get("trigram"):
            # [e(t+1), e(t), e(t-1)], zero-padded at the ends (MobileBERT)
            nxt = F.pad(x[:, 1:], (0, 0, 0, 1))
            prv = F.pad(x[:, :-1], (0, 0, 1, 0))
            x = torch.cat([nxt, x, prv], dim=-1)
        after = self._projects_after(p)
        if self._projects(p) and not after:
            x = linear_slice(self.embedding_transformation, x, out_width)
        width = x.shape[-1]
        if hasattr(self, "position_embeddings"):
            x = x + self._positions(ids, p, width)
        if hasattr(self, "token_type_embeddings"):
            type_key = "token_type_ids" if key == "input_ids" else f"token_type_ids{key[9:]}"
            types = ctx.batch.get(type_key)
            if types is None or self.token_type_embeddings.num_embeddings == 1:
                types = torch.zeros_like(ids)
            x = x + F.embedding(types, self.token_type_embeddings.weight[:, :width])
        if hasattr(self, "LayerNorm"):
            x = self.LayerNorm(x)
        if after:
            x = linear_slice(self.embeddings_project, x, out_width)
        return x

    def _positions(self, ids: torch.Tensor, p: Mapping[str, Any], width: int) -> torch.Tensor:
        """The position embeddings: 0..L-1, or RoBERTa's numbering from ``padding_idx + 1``
        over the non-pad tokens (pads at ``padding_idx``)."""
        table = self.position_embeddings.weight[:, :width]
        pad = p.get("padding_idx")
        if pad is None:
            return table[: ids.shape[1]]
        real = ids.ne(int(pad)).int()
        return F.embedding(torch.cumsum(real, dim=1) * real + int(pad), table)


class AttentionMatmul(nn.Module):
    """The two attention matmuls, softmax(QKᵀ/√d + mask)·V, as a leaf module.

    Kept separate so that thop's cross-check can count its multiply-adds from the
    run-time shapes (it has no parameters, so thop would count zero otherwise).
    Returns the context and the pre-softmax scores (what TinyBERT distils,
    docs/reference.md#tinybert).
    """

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        # q, k, v: (B, A, L, d)
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, A, L, L)
        if mask is not None:
            scores = scores + (1.0 - mask[:, None, None, :].to(scores.dtype)) * MASK_VALUE
        probs = torch.softmax(scores, dim=-1)
        return probs @ v, scores  # (B, A, L, d), (B, A, L, L)


def count_attention_matmul(module: Any, inputs: tuple, output: Any) -> None:
    """thop hook: B·A·L·L·d for QKᵀ plus the same for the product with V. ``module``
    carries the ``total_ops`` buffer that thop registers (unknown to nn.Module's type)."""
    q, k = inputs[0], inputs[1]
    b, a, lq, d = q.shape
    module.total_ops += torch.DoubleTensor([2 * b * a * lq * k.shape[2] * d])


class SelfAttentionCore(nn.Module):
    """Multi-head self-attention without output projection, sliced to ``heads × head_size``."""

    def __init__(self, in_width: int, all_head: int) -> None:
        super().__init__()
        self.query = nn.Linear(in_width, all_head)
        self.key = nn.Linear(in_width, all_head)
        self.value = nn.Linear(in_width, all_head)
        self.matmul = AttentionMatmul()

    def forward(
        self, x: torch.Tensor, heads: int, head_size: int, ctx: Context,
        kv: torch.Tensor | None = None, v_in: torch.Tensor | None = None,
    ) -> torch.Tensor:
        b, length, _ = x.shape
        n = heads * head_size

        def split(t: torch.Tensor) -> torch.Tensor:  # (B, L, A·d) -> (B, A, L, d)
            return t.view(b, length, heads, head_size).transpose(1, 2)

        q = split(linear_slice(self.query, x, n))
        k = split(linear_slice(self.key, x if kv is None else kv, n))
        v = split(linear_slice(self.value, x if v_in is None else v_in, n))
        context, scores = self.matmul(q, k, v, ctx.attention_mask)
        if ctx.wants("attention_scores"):
            ctx.add("attention_scores", scores)
        return context.transpose(1, 2).reshape(b, length, n)  # (B, L, A·d)


class AttentionOutput(nn.Module):
    def __init__(self, in_width: int, out_width: int, norm: str, eps: float) -> None:
        super().__init__()
        self.dense = nn.Linear(in_width, out_width)
        self.LayerNorm = make_norm(norm, out_width, eps)


def active_heads(in_width: int, p: Mapping[str, Any]) -> int:
    """The heads a ``bert_attention`` runs: ``p["heads"]``, or with ``p["kept"]`` (heads kept
    of ``heads`` at the full width ``heads · head_size``) the same share of the heads that
    the input width holds at this head size, rounded down (``spaces/bert_subnet.py``: a
    narrower hidden width keeps the head size and so has fewer heads, Hou et al. 2020 §3)."""
    heads = int(p["heads"])
    if "kept" not in p:
        return heads
    return int(p["kept"]) * (in_width // int(p["head_size"])) // heads


@register_op("bert_attention")
class BertAttention(Op):
    """BERT's attention block: ``Norm(x + W_o·MHA(x))`` (HF ``BertAttention``).

    ``p``: ``heads``, ``head_size``, ``norm`` (layer_norm | no_norm), ``eps``; optional
    ``kept`` (see :func:`active_heads`): the heads run, and allocated in a child, are then a
    leading share of ``heads``, zero included (``Norm(x + b_o)``: every head pruned, as
    ``transformers``' ``prune_heads`` leaves it).
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        n = active_heads(in_widths[0], p) * int(p["head_size"])
        self.self = SelfAttentionCore(in_widths[0], n)
        norm = p.get("norm", "layer_norm")
        self.output = AttentionOutput(n, out_width, norm, p.get("eps", 1e-12))

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        h, n = in_widths[0], active_heads(in_widths[0], p) * int(p["head_size"])
        return 3 * (h * n + n) + n * out_width + out_width + norm_params(out_width)

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        h, n = in_widths[0], active_heads(in_widths[0], p) * int(p["head_size"])
        projections = seq_len * (3 * h * n + n * out_width)
        return projections + 2 * seq_len * seq_len * n

    def forward(self, xs, out_width, p, ctx):
        x = xs[0]
        context = self.self(x, active_heads(x.shape[-1], p), int(p["head_size"]), ctx)
        o = self.output
        return o.LayerNorm(x + linear_slice(o.dense, context, out_width))


@register_op("pooler_classifier")
class PoolerClassifier(Op):
    """BERT's head: ``classifier(dropout(tanh(W_p·h_[CLS])))`` → ``(B, num_labels)``.

    ``p``: ``num_labels``, ``pooler`` (False: classify the [CLS] state directly),
    ``pooling``: ``cls`` (BERT's first-token state, the default) or ``mean`` (the mean over
    the unmasked tokens: for convolutional or pooling cells, whose first token sees only
    its neighbours), ``pooler_act``: the pooler's activation, ``tanh`` (BERT's; RoBERTa's
    ``dense`` + tanh + ``out_proj`` head is the same computation), ``gelu`` (ELECTRA's
    head) or ``relu`` (DistilBERT's ``pre_classifier`` + ReLU).
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        h = in_widths[0]
        if p.get("pooler", True):
            self.pooler = nn.Module()
            self.pooler.dense = nn.Linear(h, h)
        self.dropout = nn.Dropout(float(p.get("dropout", 0.1)))
        self.classifier = nn.Linear(h, int(p["num_labels"]))

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["num_labels"])

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        h = in_widths[0]
        return (h * h + h if p.get("pooler", True) else 0) + h * out_width + out_width

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        h = in_widths[0]
        return (h * h if p.get("pooler", True) else 0) + h * out_width

    def forward(self, xs, out_width, p, ctx):
        if p.get("pooling", "cls") == "mean":
            mask = pair_mask(ctx)
            x = xs[0]
            m = (torch.ones_like(x[..., 0]) if mask is None else mask.to(x.dtype))[..., None]
            cls_state = (x * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
        else:
            cls_state = xs[0][:, 0]
        if hasattr(self, "pooler"):
            cls_state = pool(self.pooler.dense, cls_state, p)
        return self.classifier(self.dropout(cls_state))


def pool(dense: nn.Linear, cls_state: torch.Tensor, p: Mapping[str, Any]) -> torch.Tensor:
    """The pooler: ``act(W_p·h)`` at the state's width, ``act`` the head's ``pooler_act``
    (tanh unless set; see :class:`PoolerClassifier`)."""
    return ACTIVATIONS[p.get("pooler_act", "tanh")](linear_slice(dense, cls_state,
                                                                 cls_state.shape[-1]))


@register_op("joint_intent_slot")
class JointIntentSlot(Op):
    """A joint intent + slot head (SNIPS, docs/reference.md#mixed-vocabulary): one output of width
    ``I + T``.

    The intent logits come from BERT's pooled ``[CLS]`` state (as :class:`PoolerClassifier`),
    the slot (IOB tag) logits from every token's state. Both are returned in one tensor
    ``(B, L, I + T)`` so that the graph keeps its single output (and ONNX its single
    ``logits``): ``[..., :I]`` holds the intent logits, the same at every position, and
    ``[..., I:]`` the tag logits of each token. :func:`split_joint` takes them apart.

    ``p``: ``num_labels`` (intents I), ``num_tags`` (T), ``pooler`` (False: classify the
    ``[CLS]`` state directly), ``dropout``.
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        h = in_widths[0]
        if p.get("pooler", True):
            self.pooler = nn.Module()
            self.pooler.dense = nn.Linear(h, h)
        self.dropout = nn.Dropout(float(p.get("dropout", 0.1)))
        self.classifier = nn.Linear(h, int(p["num_labels"]))
        self.tagger = nn.Linear(h, int(p["num_tags"]))

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["num_labels"]) + int(p["num_tags"])

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        h = in_widths[0]
        return (h * h + h if p.get("pooler", True) else 0) + h * out_width + out_width

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        h = in_widths[0]
        return ((h * h if p.get("pooler", True) else 0) + h * int(p["num_labels"])
                + seq_len * h * int(p["num_tags"]))

    def forward(self, xs, out_width, p, ctx):
        x = xs[0]  # (B, L, H)
        cls_state = x[:, 0]
        if hasattr(self, "pooler"):
            cls_state = torch.tanh(linear_slice(self.pooler.dense, cls_state, cls_state.shape[-1]))
        intent = self.classifier(self.dropout(cls_state))  # (B, I)
        tags = self.tagger(self.dropout(x))  # (B, L, T)
        return torch.cat([intent.unsqueeze(1).expand(-1, x.shape[1], -1), tags], dim=-1)


def split_joint(logits: torch.Tensor, num_intents: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The intent ``(B, I)`` and tag ``(B, L, T)`` logits of a :class:`JointIntentSlot` output."""
    return logits[:, 0, :num_intents], logits[:, :, num_intents:]


@register_op("attentive_readout")
class AttentiveReadout(SelectOp):
    """AdaBERT's readout (docs/reference.md#adabert): mean-pool each active cell's output over the
    tokens, combine them with softmax-normalised trainable layer weights, classify.

    Inputs are the cell outputs with args 1..K_max; with depth ``K`` the first ``K`` are
    used (the published code's per-depth readout with a shared classifier).
    ``p``: ``layers`` (K_max in the supernet, K in a child), ``num_labels``.
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        self.layer_weights = nn.Parameter(torch.zeros(int(p["layers"])))
        self.classifier = nn.Linear(in_widths[0], int(p["num_labels"]))

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["num_labels"])

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        return int(p["layers"]) + in_widths[0] * out_width + out_width

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        return in_widths[0] * out_width

    def forward_value(self, xs, args, value, out_width, p, ctx):
        used = [x for x, a in zip(xs, args, strict=True) if a <= value]
        mask = pair_mask(ctx)
        pooled = []
        for x in used:  # x: (B, L, C)
            if mask is None:
                pooled.append(x.mean(dim=1))
            else:
                m = mask[..., None].to(x.dtype)
                pooled.append((x * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0))
        w = torch.softmax(self.layer_weights[: len(used)], dim=0)
        features = sum(wi * h for wi, h in zip(w, pooled, strict=True))  # (B, C)
        if ctx.wants("layer_features"):
            for h in pooled:
                ctx.add("layer_features", h)
        return self.classifier(features)


@register_op("select_last")
class SelectLast(SelectOp):
    """The output of the last active block of a stack: input ``value`` of args 1..N_max."""

    def forward_value(self, xs, args, value, out_width, p, ctx):
        for x, a in zip(xs, args, strict=True):
            if a == value:
                return x
        raise RuntimeError(f"select_last: no input with arg {value} (have {args})")
