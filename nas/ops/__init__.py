"""Ops: the primitives that graphs place on edges and nodes, with their costs."""

from nas.ops import basic, cnn, expression, mobilebert, transformer  # noqa: F401  (registration)
from nas.ops.base import OPS, Context, Op, SelectOp, register_op

__all__ = ["OPS", "Context", "Op", "SelectOp", "register_op"]
