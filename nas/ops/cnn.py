"""AdaBERT's convolution and pooling ops (docs/reference.md#adabert).

Convolutions are ReLU → Conv1d → BatchNorm over the sequence axis, stride 1 and
"same" padding. The "dilated" ops are dilated convolutions with dilation 2, as the
paper means; the published TensorFlow code's morphological dilation is not used.
"""

from __future__ import annotations

from torch import nn
from torch.nn import functional as F

from nas.ops.base import Op, register_op


class _ConvOp(Op):
    kernel: int = 3
    dilation: int = 1

    def __init__(self, in_widths, out_width, p):
        super().__init__(in_widths, out_width, p)
        self.conv = nn.Conv1d(in_widths[0], out_width, self.kernel, dilation=self.dilation,
                              padding=self.dilation * (self.kernel - 1) // 2, bias=False)
        self.bn = nn.BatchNorm1d(out_width)

    @classmethod
    def count_params(cls, in_widths, out_width, p):
        return in_widths[0] * out_width * cls.kernel + 2 * out_width

    @classmethod
    def count_macs(cls, in_widths, out_width, p, seq_len):
        return seq_len * in_widths[0] * out_width * cls.kernel

    def forward(self, xs, out_width, p, ctx):
        x = F.relu(xs[0]).transpose(1, 2)  # (B, C, L)
        c_in = x.shape[1]
        if out_width == self.conv.out_channels and c_in == self.conv.in_channels:
            return self.bn(self.conv(x)).transpose(1, 2)  # full width: plain modules
        w = self.conv.weight[:out_width, :c_in]
        y = F.conv1d(x, w, None, 1, self.conv.padding, self.conv.dilation)
        bn = self.bn
        y = F.batch_norm(
            y,
            None if bn.running_mean is None else bn.running_mean[:out_width],
            None if bn.running_var is None else bn.running_var[:out_width],
            bn.weight[:out_width], bn.bias[:out_width],
            self.training or bn.running_mean is None, bn.momentum or 0.0, bn.eps,
        )
        return y.transpose(1, 2)  # (B, L, C)


def _conv(name: str, kernel: int, dilation: int) -> type[Op]:
    cls = type(f"Conv{kernel}D{dilation}", (_ConvOp,), {
        "kernel": kernel, "dilation": dilation,
        "__doc__": f"ReLU → Conv1d(k={kernel}, dilation={dilation}) → BatchNorm.",
    })
    return register_op(name)(cls)


StdConv3 = _conv("std_conv_3", 3, 1)
StdConv5 = _conv("std_conv_5", 5, 1)
StdConv7 = _conv("std_conv_7", 7, 1)
DilConv3 = _conv("dil_conv_3", 3, 2)
DilConv5 = _conv("dil_conv_5", 5, 2)
DilConv7 = _conv("dil_conv_7", 7, 2)


@register_op("max_pool_3")
class MaxPool3(Op):
    """Max pooling over 3 positions, stride 1, same padding."""

    def forward(self, xs, out_width, p, ctx):
        x = xs[0].transpose(1, 2)
        return F.max_pool1d(x, 3, 1, 1).transpose(1, 2)


@register_op("avg_pool_3")
class AvgPool3(Op):
    """Average pooling over 3 positions, stride 1, same padding (padding not counted)."""

    def forward(self, xs, out_width, p, ctx):
        x = xs[0].transpose(1, 2)
        return F.avg_pool1d(x, 3, 1, 1, count_include_pad=False).transpose(1, 2)


#: AdaBERT's ten candidate ops (docs/reference.md#adabert), in the paper's order.
ADABERT_OPS = (
    "std_conv_3", "std_conv_5", "std_conv_7",
    "dil_conv_3", "dil_conv_5", "dil_conv_7",
    "max_pool_3", "avg_pool_3", "skip", "zero",
)

