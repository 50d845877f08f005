"""The op contract: every op of every space declares its output width, parameter
count and multiply-add count as functions of its input widths, so that the cost
model can work from the graph alone, without building a model (docs/reference.md#costs).

Ops are ``nn.Module`` subclasses. A graph places them in two positions:

* on an **edge** ``u -> v``: one input, the state of ``u``;
* on a **node** (its *combine* op): the ordered list of its incoming edges' results
  (``sum`` for DARTS cells, a binary op for EfficientBERT expressions, a LayerNorm
  residual, an attention block...).

A module is built once at its largest widths (the supernet's) and sliced left to
right at run time to the widths the current architecture asks for (Once-for-All's
elastic ops). A child built for one architecture uses the same
class at exactly its widths, so the slicing is a no-op there and
``child == supernet[arch]`` holds by construction and by test.

Shapes: sequence states are ``(B, L, C)``, pooled states ``(B, C)``; the width of a
state is its last dimension.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn

from nas.registry import Registry

OPS: Registry[type[Op]] = Registry("op")


def register_op(name: str):
    """Class decorator: register an :class:`Op` subclass under ``name``."""

    def decorator(cls: type[Op]) -> type[Op]:
        cls.name = name
        OPS.add(name, cls)
        return cls

    return decorator


@dataclass
class Context:
    """What every op may read besides its inputs: the batch and what to record.

    ``batch`` holds the model inputs (``input_ids``, ``attention_mask``,
    ``token_type_ids``, ``input_ids_b``...). Ops that produce distillation targets
    (attention scores, hidden states) append to ``records`` when asked to.
    """

    batch: Mapping[str, torch.Tensor]
    record: frozenset[str] = frozenset()
    records: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def wants(self, kind: str) -> bool:
        return kind in self.record

    def add(self, kind: str, tensor: torch.Tensor) -> None:
        self.records.setdefault(kind, []).append(tensor)

    @property
    def attention_mask(self) -> torch.Tensor | None:
        return self.batch.get("attention_mask")

    def reference(self) -> torch.Tensor:
        """A ``(B, L)`` tensor giving batch size, length, device and dtype."""
        ids = self.batch.get("input_ids")
        if ids is None:
            ids = next(iter(self.batch.values()))
        return ids


class Op(nn.Module):
    """Base class of all ops. Subclasses override what differs from the defaults.

    Defaults describe a parameter-free, width-preserving op with no multiply-adds.
    ``p`` is the op's parameter dict with every width already resolved to an int.
    """

    name: ClassVar[str] = "?"
    #: Which input positions the op reads (``None``: all). ``first`` reads only 0,
    #: which lets the resolver drop the other incoming edges from a child.
    used_args: ClassVar[tuple[int, ...] | None] = None
    #: ``True`` for ops whose output is always zero (DARTS ``none``): edges with it are dropped.
    is_zero: ClassVar[bool] = False

    def __init__(self, in_widths: Sequence[int], out_width: int, p: Mapping[str, Any]) -> None:
        super().__init__()

    # -- declared costs (per example; ``seq_len`` tokens) ---------------------
    @classmethod
    def out_width(cls, in_widths: Sequence[int], p: Mapping[str, Any]) -> int:
        return in_widths[0]

    @classmethod
    def count_params(cls, in_widths: Sequence[int], out_width: int, p: Mapping[str, Any]) -> int:
        return 0

    @classmethod
    def count_macs(
        cls, in_widths: Sequence[int], out_width: int, p: Mapping[str, Any], seq_len: int
    ) -> int:
        """Multiply-adds for one example of ``seq_len`` tokens (docs/reference.md#costs: FLOPs = 2 ×
        MACs)."""
        return 0

    # -- computation -----------------------------------------------------------
    def forward(
        self, xs: list[torch.Tensor], out_width: int, p: Mapping[str, Any], ctx: Context
    ) -> torch.Tensor:
        raise NotImplementedError


class SelectOp(Op):
    """A node op whose result depends on the value of a *depth* choice.

    ``value`` is the choice's value (how many layers/stacks are active). The executor
    mixes ``forward_value`` over values when the choice is relaxed (DARTS/GDAS).
    Inputs come with their ``args`` (1-based layer or stack index).
    """

    def forward_value(  # noqa: D401
        self,
        xs: list[torch.Tensor],
        args: list[int],
        value: int,
        out_width: int,
        p: Mapping[str, Any],
        ctx: Context,
    ) -> torch.Tensor:
        raise NotImplementedError


def linear_slice(layer: nn.Linear, x: torch.Tensor, out: int) -> torch.Tensor:
    """``x @ W[:out, :in].T + b[:out]``: a linear layer sliced to the active widths.

    At full width (always the case in a child) the module itself is called, so that
    hooks (thop's counters) and exporters see an ordinary ``nn.Linear``.
    """
    if out == layer.out_features and x.shape[-1] == layer.in_features:
        return layer(x)
    w = layer.weight[:out, : x.shape[-1]]
    b = None if layer.bias is None else layer.bias[:out]
    return nn.functional.linear(x, w, b)
