"""MobileBERT's bottleneck-block primitives (Sun et al., 2020; docs/reference.md#mobilebert).

A MobileBERT block is declared in the graph from small ops (see ``spaces/mobilebert.py``):
linear edges (:class:`nas.ops.basic.Linear`), normalisation nodes that add their inputs
(``layer_norm`` / ``no_norm``: the residual connections), the attention core ``mha``
whose query/key and value inputs may differ in width, and three *attention-input*
selectors that say where queries, keys and values come from:

* ``shared_bottleneck`` -- queries and keys from a separate shared key/query bottleneck,
  values from the inter-block feature map (HF ``key_query_shared_bottleneck=True``; the
  released MobileBERT);
* ``input_bottleneck`` -- queries, keys and values from the input bottleneck
  (HF ``use_bottleneck_attention=True``; MobileBERT-tiny);
* ``feature_map`` -- queries, keys and values from the inter-block feature map (the
  paper's Table 1 MHA with h_input = 512, and the IB-BERT teacher).

Sub-module names follow Hugging Face's ``modeling_mobilebert`` (``query``, ``key``,
``value``) so that :mod:`nas.hf` maps weights by name.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from nas.ops.base import Op, linear_slice, register_op
from nas.ops.basic import make_norm, norm_params
from nas.ops.transformer import AttentionMatmul, PoolerClassifier, pool

# ---------------------------------------------------------------------------
# normalisation nodes: Norm(sum of inputs)
# ---------------------------------------------------------------------------


class _NormNode(Op):
    """``Norm(x_0 + x_1 + ...)``: a residual connection followed by a normalisation.

    The inputs (a sub-layer's output and its residual) must have equal widths. ``p["eps"]``
    is LayerNorm's epsilon (HF MobileBERT uses 1e-12 in most places and PyTorch's default
    1e-5 for the embeddings, which the spaces pass explicitly).
    """

    kind: str = "layer_norm"

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        self.norm = make_norm(self.kind, out_width, float(p.get("eps", 1e-12)))

    @classmethod
    def out_width(cls, in_widths, p):
        return max(in_widths)

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        return norm_params(out_width)

    def forward(self, xs, out_width, p, ctx):
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return self.norm(total)


@register_op("layer_norm")
class LayerNormNode(_NormNode):
    """LayerNorm of the sum of the inputs (``normalization_type="layer_norm"``)."""

    kind = "layer_norm"


@register_op("no_norm")
class NoNormNode(_NormNode):
    """MobileBERT's NoNorm ``x·γ + β`` of the sum of the inputs (docs/reference.md#mobilebert)."""

    kind = "no_norm"


#: The values of a normalisation choice (docs/reference.md#mobilebert: NoNorm instead of LayerNorm).
NORM_OPS = ("layer_norm", "no_norm")

# ---------------------------------------------------------------------------
# attention-input selectors
# ---------------------------------------------------------------------------


class _PickInput(Op):
    """Pass on one input; which one is the op's identity (see the module docstring).

    Inputs are wired as arg 0 = input bottleneck, arg 1 = shared key/query bottleneck (on
    the query/key node) or the feature map (on the value node), arg 2 = the feature map.
    Only the picked argument survives into a child (``used_args``). Under a relaxed
    (mixture) supernet every input arrives; the picked one is zero-padded on the right to
    the node's width so that candidates of different widths can be summed (prefix slicing
    keeps the padding inert).
    """

    pick: int = 0

    @classmethod
    def out_width(cls, in_widths, p):
        return max(in_widths)

    def forward(self, xs, out_width, p, ctx):
        x = xs[0] if len(xs) == 1 else xs[self.pick]
        if x.shape[-1] < out_width:  # (B, L, w) -> (B, L, out_width)
            x = F.pad(x, (0, out_width - x.shape[-1]))
        return x


@register_op("input_bottleneck")
class InputBottleneck(_PickInput):
    """Attention on the input bottleneck's output (HF ``use_bottleneck_attention``)."""

    pick = 0
    used_args = (0,)


@register_op("shared_bottleneck")
class SharedBottleneck(_PickInput):
    """Queries/keys from the shared key-query bottleneck, values from the feature map."""

    pick = 1
    used_args = (1,)


@register_op("feature_map")
class FeatureMap(_PickInput):
    """Queries, keys and values from the inter-block feature map (paper Table 1, IB-BERT)."""

    pick = 2
    used_args = (2,)


#: The values of the attention-input choice that Hugging Face's MobileBERT can express.
ATTENTION_INPUTS = ("shared_bottleneck", "input_bottleneck")

# ---------------------------------------------------------------------------
# the attention core
# ---------------------------------------------------------------------------


@register_op("mha")
class MultiHeadAttention(Op):
    """Multi-head attention without output projection: inputs (query/key source, value source).

    ``p``: ``heads`` A and ``out`` (all heads together, the intra-block width); the head
    size is ``out // heads``, as HF computes it (``true_hidden_size / num_attention_heads``).
    Elastic widths slice every projection to ``W[:out, :in]``, so a child with fewer heads
    or a narrower bottleneck runs exactly the leading slice of the supernet's weights.
    Records the pre-softmax scores under ``attention_scores`` (TinyBERT,
    docs/reference.md#tinybert).
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        qk_in, v_in = in_widths
        self.query = nn.Linear(qk_in, out_width)
        self.key = nn.Linear(qk_in, out_width)
        self.value = nn.Linear(v_in, out_width)
        self.matmul = AttentionMatmul()

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["out"])

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        qk_in, v_in = in_widths
        return 2 * (qk_in * out_width + out_width) + v_in * out_width + out_width

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        qk_in, v_in = in_widths
        projections = seq_len * (2 * qk_in + v_in) * out_width
        return projections + 2 * seq_len * seq_len * out_width  # QKᵀ and probs·V

    def forward(self, xs, out_width, p, ctx):
        qk, v_in = xs  # (B, L, C_qk), (B, L, C_v)
        b, length, _ = qk.shape
        heads = int(p["heads"])
        size = out_width // heads

        def split(t: torch.Tensor) -> torch.Tensor:  # (B, L, A·d) -> (B, A, L, d)
            return t.view(b, length, heads, size).transpose(1, 2)

        q = split(linear_slice(self.query, qk, out_width))
        k = split(linear_slice(self.key, qk, out_width))
        v = split(linear_slice(self.value, v_in, out_width))
        context, scores = self.matmul(q, k, v, ctx.attention_mask)
        if ctx.wants("attention_scores"):
            ctx.add("attention_scores", scores)
        return context.transpose(1, 2).reshape(b, length, out_width)  # (B, L, A·d)


# ---------------------------------------------------------------------------
# head with an elastic input width
# ---------------------------------------------------------------------------


@register_op("elastic_pooler_classifier")
class ElasticPoolerClassifier(PoolerClassifier):
    """BERT's pooler + classifier whose input width may shrink (elastic inter-block width).

    Same parameters and names as ``pooler_classifier``; the classifier weight is sliced
    to the active input width, which ``pooler_classifier`` does not do.
    """

    def forward(self, xs, out_width, p, ctx):
        cls_state = xs[0][:, 0]  # (B, C)
        if hasattr(self, "pooler"):
            cls_state = pool(self.pooler.dense, cls_state, p)
        return linear_slice(self.classifier, self.dropout(cls_state), out_width)


__all__ = ["ATTENTION_INPUTS", "NORM_OPS"]
