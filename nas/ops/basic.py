"""Element-wise, binary, combining and linear ops.

The unary activations and binary ops are EfficientBERT's math ops (docs/reference.md#efficientbert,
Table 1 of the paper); ``skip``/``zero`` and ``sum`` are the DARTS cell primitives
(docs/reference.md#adabert, #darts-and-gdas).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from nas.ops.base import Op, linear_slice, register_op

# ---------------------------------------------------------------------------
# unary, parameter-free
# ---------------------------------------------------------------------------


def _unary(name: str, fn: Callable[[torch.Tensor], torch.Tensor], doc: str) -> type[Op]:
    class _Unary(Op):
        __doc__ = doc

        def forward(self, xs, out_width, p, ctx):
            return fn(xs[0])

    _Unary.__name__ = _Unary.__qualname__ = f"{name.title().replace('_', '')}Op"
    return register_op(name)(_Unary)


#: EfficientBERT's activations as functions (docs/reference.md#efficientbert); also the bodies of
#: the unary ops.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu": F.gelu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "relu": F.relu,
    "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
    "elu": F.elu,
    "swish": F.silu,
}

Identity = _unary("identity", lambda x: x, "Identity ('no activation' in expressions).")
Skip = _unary("skip", lambda x: x, "Skip connection of a DARTS/AdaBERT cell (identity).")
Gelu = _unary("gelu", ACTIVATIONS["gelu"], "GeLU (exact, erf form, as BERT).")
Sigmoid = _unary("sigmoid", ACTIVATIONS["sigmoid"], "Logistic sigmoid.")
Tanh = _unary("tanh", ACTIVATIONS["tanh"], "Hyperbolic tangent.")
Relu = _unary("relu", ACTIVATIONS["relu"], "ReLU.")
LeakyRelu = _unary("leaky_relu", ACTIVATIONS["leaky_relu"], "LeakyReLU, slope 0.01.")
Elu = _unary("elu", ACTIVATIONS["elu"], "ELU, alpha 1.")
Swish = _unary("swish", ACTIVATIONS["swish"], "Swish / SiLU: x·sigmoid(x).")

#: EfficientBERT's unary ops (docs/reference.md#efficientbert).
UNARY_OPS = tuple(ACTIVATIONS)


@register_op("zero")
class Zero(Op):
    """DARTS 'none': the edge contributes nothing and is dropped from children."""

    is_zero = True

    def forward(self, xs, out_width, p, ctx):
        return torch.zeros_like(xs[0])


# ---------------------------------------------------------------------------
# node combines
# ---------------------------------------------------------------------------


def cut(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Binary ops on unequal widths cut both operands to the narrower width
    (docs/reference.md#efficientbert)."""
    w = min(a.shape[-1], b.shape[-1])
    return a[..., :w], b[..., :w]


class _Binary(Op):
    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    @classmethod
    def out_width(cls, in_widths, p):
        return min(in_widths)

    def forward(self, xs, out_width, p, ctx):
        a, b = cut(xs[0], xs[1])
        return type(self).fn(a, b)


@register_op("add")
class Add(_Binary):
    """a + b."""

    fn = staticmethod(torch.add)


@register_op("mul")
class Mul(_Binary):
    """a · b (element-wise)."""

    fn = staticmethod(torch.mul)


@register_op("max")
class Max(_Binary):
    """max(a, b) (element-wise)."""

    fn = staticmethod(torch.maximum)


@register_op("first")
class First(Op):
    """No binary op: pass the first input on (the other argument is unused)."""

    used_args = (0,)

    def forward(self, xs, out_width, p, ctx):
        return xs[0]


#: EfficientBERT's binary ops plus "none" (docs/reference.md#efficientbert).
BINARY_OPS = ("first", "add", "mul", "max")

#: EfficientBERT's binary ops as functions of two equally wide tensors
#: (docs/reference.md#efficientbert).
BINARY_FUNCTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "add": torch.add, "mul": torch.mul, "max": torch.maximum,
}


@register_op("sum")
class Sum(Op):
    """Sum of all incoming edges (a DARTS intermediate node). No input: zeros."""

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["width"]) if not in_widths else max(in_widths)

    def forward(self, xs, out_width, p, ctx):
        if not xs:  # every incoming edge is 'zero' in this architecture
            ref = ctx.reference()
            return ref.new_zeros((*ref.shape[:2], out_width), dtype=torch.get_default_dtype())
        total = xs[0]
        for x in xs[1:]:
            total = total + x
        return total


class ElasticLayerNorm(nn.Module):
    """LayerNorm allocated at the largest width and applied to the first ``w`` features."""

    def __init__(self, width: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = x.shape[-1]
        return F.layer_norm(x, (w,), self.weight[:w], self.bias[:w], self.eps)


class NoNorm(nn.Module):
    """MobileBERT's NoNorm: ``x·γ + β`` element-wise, no statistics
    (docs/reference.md#mobilebert)."""

    def __init__(self, width: int, eps: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = x.shape[-1]
        return x * self.weight[:w] + self.bias[:w]


def make_norm(kind: str, width: int, eps: float = 1e-12) -> nn.Module:
    if kind == "layer_norm":
        return ElasticLayerNorm(width, eps)
    if kind == "no_norm":
        return NoNorm(width)
    raise ValueError(f"unknown normalisation {kind!r}; use 'layer_norm' or 'no_norm'")


def norm_params(width: int) -> int:
    return 2 * width


@register_op("residual_norm")
class ResidualNorm(Op):
    """``Norm(x + f(x))``: inputs are (x, f(x)); the residual block of a Transformer FFN.

    ``p["norm"]`` is ``layer_norm`` (default) or ``no_norm``; ``p["eps"]`` the epsilon.
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        self.norm = make_norm(p.get("norm", "layer_norm"), out_width, p.get("eps", 1e-12))

    @classmethod
    def out_width(cls, in_widths, p):
        return in_widths[0]

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        return norm_params(out_width)

    def forward(self, xs, out_width, p, ctx):
        return self.norm(xs[0] + xs[1])


@register_op("attention_sum")
class AttentionSum(Op):
    """Softmax-weighted sum of the inputs with trainable weights (AdaBERT cell output,
    docs/reference.md#adabert).

    ``p["inputs"]`` is how many inputs the node has in the supernet.
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        self.weight = nn.Parameter(torch.zeros(int(p["inputs"])))

    @classmethod
    def out_width(cls, in_widths, p):
        return max(in_widths)

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        return int(p["inputs"])

    def forward(self, xs, out_width, p, ctx):
        w = torch.softmax(self.weight[: len(xs)], dim=0)
        return sum(wi * x for wi, x in zip(w, xs, strict=True))


# ---------------------------------------------------------------------------
# linear
# ---------------------------------------------------------------------------


@register_op("linear")
class Linear(Op):
    """An elastic linear layer ``in -> p["out"]`` (with bias).

    Inheritance slices ``W[:out, :in]`` and ``b[:out]`` (the first k inner
    units, left to right: docs/reference.md#efficientbert; PyTorch stores W as out × in).
    """

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        self.dense = nn.Linear(in_widths[0], out_width, bias=p.get("bias", True))

    @classmethod
    def out_width(cls, in_widths, p):
        return int(p["out"])

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        return in_widths[0] * out_width + (out_width if p.get("bias", True) else 0)

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        tokens = 1 if p.get("pooled") else seq_len
        return tokens * in_widths[0] * out_width

    def forward(self, xs, out_width, p, ctx):
        return linear_slice(self.dense, xs[0], out_width)


def scale_width(width: int, ratio: Any) -> int:
    """``int(r·H)`` for a ratio given as a number or a fraction string
    (docs/reference.md#efficientbert)."""
    from fractions import Fraction

    return int(Fraction(str(ratio)) * width)


__all__ = ["ACTIVATIONS", "BINARY_FUNCTIONS", "BINARY_OPS", "UNARY_OPS", "ElasticLayerNorm",
           "NoNorm", "cut", "make_norm", "scale_width"]
