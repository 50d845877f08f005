"""GraphNet: the one network class built from a graph, supernet and child alike.

* Built from a space's full graph it is the **supernet**: every candidate op of every
  choice, every layer up to the deepest, every width at its largest.
* Built from a resolved graph (:func:`nas.graph.resolve`) it is the **child**: only the
  chosen ops at exactly their widths, with the same parameter names as the supernet,
  so extraction is a copy of prefix slices (docs/reference.md#efficientbert; Once-for-All's
  elastic ops).

The supernet runs in three modes, chosen per call (the architecture is passed in,
never stored on the module):

* ``arch=A``: the fixed architecture A (what the child computes);
* ``weights=W, hard=False``: DARTS's weighted mixture Σ_o w_o·o(x)
  (docs/reference.md#darts-and-gdas);
* ``weights=W, hard=True``: a hard Gumbel-softmax sample (GDAS/AdaBERT, docs/reference.md#adabert):
  only the sampled op runs, its output multiplied by the one-hot weight so the
  straight-through gradient reaches the architecture parameters.

``W`` maps choice names to weight vectors over the choice's values (see
:class:`nas.arch_params.ArchParameters`). Choices given in neither are an error,
except width choices, which default to their largest value.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import torch
from torch import nn

from nas.choices import Categorical, Scalar
from nas.errors import ArchitectureError
from nas.graph import EdgeStep, NodeStep, plan, steps_from_resolved
from nas.ops import OPS, Context, Op, SelectOp


@dataclass
class ModelOutput:
    """What a forward pass returns: the logits and whatever was asked to be recorded."""

    logits: torch.Tensor
    records: dict[str, list[torch.Tensor]] = field(default_factory=dict)
    aux: dict[str, torch.Tensor] = field(default_factory=dict)


class Candidates(nn.ModuleDict):
    """The candidate ops at one choice position, keyed by op name."""


def _build_op(name: str, in_widths: list[int], out_width: int, params: Mapping) -> Op:
    with warnings.catch_warnings():
        # a child may keep none of a layer's heads or neurons (bert-subnet's zero shares):
        # its empty layers are right, and PyTorch's note on initialising them is noise
        warnings.filterwarnings("ignore", "Initializing zero-element tensors is a no-op")
        return OPS.get(name)(in_widths, out_width, params)


class GraphNet(nn.Module):
    """A network executing a graph; see the module docstring."""

    def __init__(
        self,
        graph: nx.DiGraph,
        choices: Mapping[str, Categorical] | None = None,
        *,
        resolved: bool = False,
    ) -> None:
        super().__init__()
        self.graph = graph
        self.choices: dict[str, Categorical] = dict(choices or {})
        self.resolved = resolved
        if resolved:
            steps = steps_from_resolved(graph)
        else:  # the supernet: all op and depth choices relaxed, widths at their largest
            open_choices = frozenset(n for n, c in self.choices.items() if c.kind != "width")
            steps = plan(graph, self.choices, {}, open_choices)
        self.nodes = nn.ModuleDict()
        self.edges = nn.ModuleDict()
        for st in steps:
            if st.attrs.get("share") is None:
                self.nodes[st.name] = self._make(st.op, st.choice, st.in_widths, st.width,
                                                 st.params, self.choices)
            for e in st.inputs:
                self.edges[e.key] = self._make(e.op, e.choice, [e.in_width], e.out_width,
                                               e.params, self.choices)
        self.outputs = [st.name for st in steps if st.attrs.get("role") == "output"]
        if len(self.outputs) != 1:
            raise ArchitectureError(f"a graph needs exactly one output node, has {self.outputs}")
        self._steps = steps if resolved else None
        self._plans: OrderedDict[tuple, list[NodeStep]] = OrderedDict()

    @staticmethod
    def _make(op: str | None, choice: str | None, in_widths: list[int], out_width: int,
              params: Mapping, choices: Mapping[str, Categorical]) -> nn.Module:
        if choice is None:
            return _build_op(op, in_widths, out_width, params)  # type: ignore[arg-type]  # no choice: op is named
        names = [op] if op is not None else [str(v) for v in choices[choice].values]
        cands = Candidates()
        for name in names:
            w = OPS.get(name).out_width(in_widths, params)
            cands[name] = _build_op(name, in_widths, w, params)
        return cands

    # ------------------------------------------------------------------ plans
    def _plan(self, fixed: Mapping[str, Scalar], relaxed: frozenset[str]) -> list[NodeStep]:
        if self._steps is not None:
            return self._steps
        key = (tuple(sorted(fixed.items())), relaxed)
        steps = self._plans.get(key)
        if steps is None:
            steps = plan(self.graph, self.choices, fixed, relaxed)
            self._plans[key] = steps
            if len(self._plans) > 256:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return steps

    # ---------------------------------------------------------------- forward
    def forward(
        self,
        batch: Mapping[str, torch.Tensor],
        arch: Mapping[str, Scalar] | None = None,
        weights: Mapping[str, torch.Tensor] | None = None,
        hard: bool = False,
        record: tuple[str, ...] | frozenset[str] = (),
    ) -> ModelOutput:
        batch = _on_device_of(self, batch)
        fixed: dict[str, Scalar] = dict(arch or {})
        scale: dict[str, torch.Tensor] = {}
        soft: dict[str, torch.Tensor] = {}
        for name, w in (weights or {}).items():
            if name in fixed:
                continue
            choice = self.choices[name]
            if hard:  # only the sampled value runs; scale by w[idx] for the ST gradient
                idx = int(torch.argmax(w.detach()))
                fixed[name] = choice.values[idx]
                scale[name] = w[idx]
            else:
                soft[name] = w
        steps = self._plan(fixed, frozenset(soft))
        ctx = Context(batch, frozenset(record))
        states: dict[str, torch.Tensor] = {}
        aux: dict[str, torch.Tensor] = {}
        for st in steps:
            if st.attrs.get("role") == "aux" and "aux" not in ctx.record:
                continue
            xs: list[torch.Tensor] = []
            args: list[int] = []
            for e in st.inputs:
                y = self._run_edge(e, states[e.src], soft, scale, ctx)
                if y is not None:
                    xs.append(y)
                    args.append(e.arg)
            state = self._run_node(st, xs, args, soft, scale, fixed, ctx)
            states[st.name] = state
            kind = st.attrs.get("record")
            if kind and ctx.wants(kind):
                ctx.add(kind, state)
            if st.attrs.get("role") == "aux":
                aux[st.name] = state
        return ModelOutput(states[self.outputs[0]], ctx.records, aux)

    def word_embeddings(self) -> torch.Tensor:
        """The token embedding table ``(vocab, width)``: the ``emb`` node's
        ``word_embeddings`` weight, which the embedding initialisations and the
        vocabulary distillation read and set."""
        emb: Any = self.nodes["emb"]  # an embedding op (ModuleDict items are nn.Module)
        return emb.word_embeddings.weight

    def run_nodes(self, batch: Mapping[str, torch.Tensor], arch: Mapping[str, Scalar],
                  states: Mapping[str, torch.Tensor], nodes: tuple[str, ...] | list[str]
                  ) -> dict[str, torch.Tensor]:
        """Run only ``nodes`` of the fixed architecture ``arch``'s plan, in plan order, on
        the given ``states`` (node name → its output, standing in for every input the
        nodes read): one block of a network on cached inputs, as blockwise distillation
        scores it (Puzzle, Bercovich et al. 2025; :mod:`evaluators.blockwise`). Returns the
        outputs of ``nodes``; an input missing from ``states`` is an error."""
        steps = [st for st in self._plan(dict(arch), frozenset()) if st.name in set(nodes)]
        missing = sorted(set(nodes) - {st.name for st in steps})
        if missing:
            raise ArchitectureError(f"run_nodes: {missing} are not in the architecture's plan")
        ctx = Context(batch)
        known = dict(states)
        out: dict[str, torch.Tensor] = {}
        for st in steps:
            xs: list[torch.Tensor] = []
            args: list[int] = []
            for e in st.inputs:
                if e.src not in known:
                    raise ArchitectureError(f"run_nodes: node {st.name!r} reads {e.src!r}, "
                                            "which is neither given nor run")
                y = self._run_edge(e, known[e.src], {}, {}, ctx)
                if y is not None:
                    xs.append(y)
                    args.append(e.arg)
            known[st.name] = out[st.name] = self._run_node(st, xs, args, {}, {}, dict(arch),
                                                           ctx)
        return out

    def _run_edge(self, e: EdgeStep, x: torch.Tensor, soft, scale, ctx) -> torch.Tensor | None:
        module: Any = self.edges[e.key]  # an op, or a ModuleDict of its choice's ops
        if e.choice is None:
            return module([x], e.out_width, e.params, ctx)
        if e.op is not None:
            y = module[e.op]([x], e.out_width, e.params, ctx)
            return y * scale[e.choice] if e.choice in scale else y
        w = soft[e.choice]  # DARTS mixture; 'zero' contributes nothing and is skipped
        total = None
        for i, value in enumerate(self.choices[e.choice].values):
            op = module[str(value)]
            if op.is_zero:
                continue
            y = w[i] * op([x], e.out_width, e.params, ctx)
            total = y if total is None else total + y
        return total

    def _run_node(self, st: NodeStep, xs, args, soft, scale, fixed, ctx) -> torch.Tensor:
        share = st.attrs.get("share")
        module: Any = self.nodes[share if share is not None else st.name]  # as in _run_edge
        if st.choice is not None:
            if st.op is not None:
                y = module[st.op](xs, st.width, st.params, ctx)
                return y * scale[st.choice] if st.choice in scale else y
            w = soft[st.choice]
            return sum(w[i] * module[str(v)](xs, st.width, st.params, ctx)
                       for i, v in enumerate(self.choices[st.choice].values))
        if isinstance(module, SelectOp):
            sel = st.select
            if sel is not None and sel in soft:  # mixture over depths
                values = self.choices[sel].values
                return sum(soft[sel][i] * module.forward_value(xs, args, int(v), st.width,
                                                               st.params, ctx)
                           for i, v in enumerate(values))
            value = st.select_value if st.select_value is not None else int(fixed[sel])
            y = module.forward_value(xs, args, value, st.width, st.params, ctx)
            return y * scale[sel] if sel in scale else y
        if st.settings:  # parameters set by choices (ChoiceValue): one module, many values
            return self._run_settings(module, st, xs, soft, scale, ctx)
        return module(xs, st.width, st.params, ctx)

    def _run_settings(self, module, st: NodeStep, xs, soft, scale, ctx) -> torch.Tensor:
        """A node whose parameters are choice values: relaxed, the module runs once per
        value and the results are mixed; sampled (GDAS), the result is scaled by the
        sample's weight for the straight-through gradient."""
        relaxed = [(key, name) for key, name in st.settings.items() if name in soft]
        if len(relaxed) > 1:
            raise ArchitectureError(
                f"node {st.name!r}: only one of its parameter choices can be relaxed at a time "
                f"({', '.join(n for _, n in relaxed)}); fix the others")
        if relaxed:
            ((key, name),) = relaxed
            w = soft[name]
            return sum(w[i] * module(xs, st.width, {**st.params, key: v}, ctx)
                       for i, v in enumerate(self.choices[name].values))
        y = module(xs, st.width, st.params, ctx)
        for name in st.settings.values():
            if name in scale:
                y = y * scale[name]
        return y


def _on_device_of(model: nn.Module, batch: Mapping[str, Any]) -> Mapping[str, Any]:
    """``batch`` with its tensors on ``model``'s device: every engine network takes its
    inputs where its weights are (the run's device, :mod:`nas.device`), so no caller can
    feed a CPU batch to a GPU model. A batch already there is returned as it is."""
    device = next(iter(model.parameters()), None)
    if device is None:
        return batch
    where = device.device
    if all(v.device == where for v in batch.values() if isinstance(v, torch.Tensor)):
        return batch
    return {k: v.to(where) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
