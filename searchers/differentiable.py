"""Differentiable search: DARTS mixtures and GDAS/AdaBERT hard Gumbel samples
(docs/reference.md#adabert, #darts-and-gdas).

The pieces are small and separately tested:

* :class:`TemperatureSchedule` -- τ decays from 1 towards 0.2 in an exponential
  staircase every 100 steps, reaching 0.2 at 80% of the search (AdaBERT's published
  schedule); ``linear`` gives GDAS's 10 → 0.1.
* :func:`op_cost_table` and :func:`efficiency_loss` -- L_E = (K/K_max)·Σ_edges Σ_o
  y_o·(SIZE(o) + FLOPs(o)), over every op choice of the space (edges and nodes, each
  summed over its places in the supernet). Two scales (``op_costs``):

  - ``normalised`` (default): each op's SIZE and FLOPs are divided by the largest
    candidate's and averaged, and the edges are averaged, so L_E ∈ [0, 1]; an op's
    cost spans 0 (pools, skip, zero) to 1 (std conv 7), from the ops' own declarations.
  - ``published``: every op costs 0.1, zero and skip included, summed over the edges,
    as the published code's per-op costs are "near 0.1 for every op" (docs/reference.md#adabert).
    L_E then reaches 0.9 at K_max and hardly tells ops apart: it prices depth, and the task
    loss chooses the ops. The normalised scale prices a convolution up to 1 against 0
    for a pool, which is one cause of searches that end in pools and skips.
* :func:`derive_cell_architecture` -- K = argmax; per intermediate node keep the two
  strongest incoming edges ranked by their strongest non-zero op; each kept edge takes
  its arg-max non-zero op; the other edges become ``zero``.
* :func:`derive_argmax_architecture` -- any space: each relaxed (op, depth) choice takes
  its most probable value, widths their largest, ``other`` choices their default; the
  next most probable valid architecture when a constraint is broken.
* :func:`check_relaxable` -- a space without op or depth choices is refused in one line.
* :class:`DifferentiableSearch` -- the bilevel first-order step: an architecture step
  (Adam) on a validation batch before each weight step on a training batch. The weight
  steps themselves (SGD, cosine schedule, clipping, checkpoints, resume) are the shared
  training loop's (:mod:`nas.train`); this class supplies its hooks.
* :class:`DifferentiableSearcher` -- the same search behind the one-shot searcher
  contract (registered as ``differentiable``).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
from torch import nn

from nas.arch_params import ArchParameters
from nas.architecture import Architecture
from nas.choices import Categorical, Scalar, number
from nas.device import place
from nas.errors import NasError
from nas.graph import ChoiceRef, plan
from nas.network import GraphNet, ModelOutput
from nas.ops import OPS
from nas.space import SearchSpace
from nas.train import TrainSettings
from searchers.base import SEARCHERS, Candidate, OneShotSearcher, SearcherError, SupernetTrainer


@dataclass(frozen=True)
class TemperatureSchedule:
    """Gumbel-softmax temperature over ``total_steps``.

    ``staircase`` (AdaBERT): τ = max(τ_min, τ_0 · r^⌊t/every⌋) with r chosen so that τ_min is
    reached at ``reach`` × total steps. ``linear`` (GDAS): τ_0 → τ_min linearly.
    """

    total_steps: int
    start: float = 1.0
    end: float = 0.2
    kind: str = "staircase"
    every: int = 100
    reach: float = 0.8

    def __call__(self, step: int) -> float:
        if self.kind == "linear":
            frac = min(1.0, step / max(1, self.total_steps - 1))
            return self.start + (self.end - self.start) * frac
        if self.kind != "staircase":
            raise SearcherError(f"unknown temperature schedule {self.kind!r}; use staircase or "
                                "linear")
        every = max(1, min(self.every, max(1, self.total_steps // 10)))
        stairs = max(1, math.floor(self.reach * self.total_steps / every))
        ratio = (self.end / self.start) ** (1.0 / stairs)
        return max(self.end, self.start * ratio ** (step // every))


def op_choices(space: SearchSpace) -> list[Categorical]:
    return [c for c in space.choices() if c.kind == "op"]


#: The choice kinds the supernet relaxes (weighted or hard-Gumbel, :mod:`nas.network`).
RELAXED_KINDS = ("op", "depth")


def relaxed_choices(space: SearchSpace) -> list[Categorical]:
    """The choices the search puts architecture parameters α on: categorical op and depth
    choices, in the space's order. Widths stay at their largest in the supernet, ``other``
    choices at their default (:func:`search_values`)."""
    return [c for c in space.choices() if c.kind in RELAXED_KINDS]


def search_values(space: SearchSpace) -> dict[str, Any]:
    """The value each ``other`` choice keeps while the supernet trains: its default. (Widths
    need no value: the supernet takes them at their largest.) An ``other`` choice has no
    size order and no relaxation, so the search fixes it where the space's author did."""
    return {c.name: c.default for c in space.choices() if c.kind == "other"}


def check_relaxable(space: SearchSpace) -> None:
    """Refuse, in one line, a space the differentiable search cannot relax: one without a
    categorical op or depth choice of two values or more (widths and heads only, a fixed
    design). Such a space needs a multi-trial searcher, which samples any choice."""
    if any(len(c) > 1 for c in relaxed_choices(space)):
        return
    from collections import Counter

    from searchers.base import searcher_names

    kinds = Counter(c.kind for c in space.choices() if len(c) > 1)
    shown = ", ".join(f"{n} {k}" for k, n in kinds.items()) or "none"
    raise SearcherError(
        f"space {space.name!r} has no op or depth choice to relax (its choices: {shown}); the "
        "differentiable searcher relaxes only categorical op and depth choices (widths stay "
        "at their largest); use a multi-trial searcher: "
        f"{', '.join(searcher_names('multi-trial'))}")


OP_COST_SCALES = ("normalised", "published")
PUBLISHED_OP_COST = 0.1


def _positions(space: SearchSpace) -> dict[str, list[tuple[list[int], dict[str, Any]]]]:
    """Per op choice, every place of the supernet's plan where it picks an op (edges and
    nodes alike), as ``(input widths, op parameters)``: the relaxed op and depth choices
    open, widths at their largest, ``other`` choices at their search value."""
    relaxed = frozenset(c.name for c in relaxed_choices(space))
    steps = plan(space.graph, space.choice_map, search_values(space), relaxed)
    places: dict[str, list[tuple[list[int], dict[str, Any]]]] = {}
    for st in steps:
        for e in st.inputs:
            if e.choice is not None and e.op is None:
                places.setdefault(e.choice, []).append(([e.in_width], e.params))
        if st.choice is not None and st.op is None:
            places.setdefault(st.choice, []).append((list(st.in_widths), st.params))
    return places


def _ratios(counts: list[int]) -> torch.Tensor:
    """``counts / max(counts)`` (0 when every count is 0), each correctly rounded: the
    integer division is exact before the one rounding to float32, so a choice priced over
    n identical places gets the same bits as over one."""
    top = max(counts)
    return torch.tensor([c / top if top > 0 else 0.0 for c in counts], dtype=torch.float32)


def op_cost_table(space: SearchSpace, seq_len: int = 128, scale: str = "normalised"
                  ) -> dict[str, torch.Tensor]:
    """Per op choice, the cost of each candidate: ``normalised`` (params/max + MACs/max)/2,
    or ``published`` (0.1 for every op; see the module docstring).

    A candidate's params and MACs are its op's declared ``count_params``/``count_macs``
    summed over every place the choice picks an op -- edges and nodes (a node's combine
    op may be a choice, :class:`nas.graph.ChoiceRef`), in every layer of the supernet --
    at the widths the supernet gives each place; ``zero`` and ``skip`` cost nothing.
    (AdaBERT's edges all have one width, so its costs are one edge's ratios.) A choice
    that sets an op *parameter* (:class:`nas.graph.ChoiceValue`) is not priced: the cost
    model declares such values equally costly.
    """
    places = _positions(space)
    table = {}
    for c in op_choices(space):
        if c.name not in places:
            continue
        params, macs = [], []
        for v in c.values:
            op = OPS.get(str(v))
            p = m = 0
            for w_in, op_params in places[c.name]:
                w_out = op.out_width(w_in, op_params)
                p += int(op.count_params(w_in, w_out, op_params))
                m += int(op.count_macs(w_in, w_out, op_params, seq_len))
            params.append(p)
            macs.append(m)
        table[c.name] = 0.5 * (_ratios(params) + _ratios(macs))
        if scale == "published":
            table[c.name] = torch.full_like(table[c.name], PUBLISHED_OP_COST)
    return table


def efficiency_loss(weights: Mapping[str, torch.Tensor], costs: Mapping[str, torch.Tensor],
                    depth_choice: Categorical | Sequence[Categorical] | None = None,
                    edges: str = "mean") -> torch.Tensor:
    """L_E = (K/K_max)·Σ_edges Σ_o y_o·cost(o) (docs/reference.md#adabert), differentiable in the
    weights y.

    ``edges``: ``"mean"`` averages the priced choices (the normalised scale), ``"sum"``
    adds them (the published scale). K/K_max is the expectation of K under the depth
    weights (with a hard sample it is the sampled depth, and its straight-through gradient
    reaches the depth logits). With several depth choices (a space of several stacks,
    layers and FFNs per layer) the factor is the mean of their K/K_max; a space with depth
    choices and no priced op choice pays the depth factor alone (so depth is still priced).
    """
    depths = ([] if depth_choice is None else [depth_choice]
              if isinstance(depth_choice, Categorical) else list(depth_choice))
    depths = [d for d in depths if d.name in weights]
    if not costs and depths:
        edge_cost: torch.Tensor | float = 1.0
    else:
        # the cost table lives on the CPU; the weights on the run's device (nas.device)
        edge_cost = sum((weights[name] * cost.to(weights[name].device)).sum()
                        for name, cost in costs.items())
        if edges == "mean":
            edge_cost = edge_cost / max(1, len(costs))
    if not depths:
        return torch.as_tensor(edge_cost, dtype=torch.float32)
    fractions = []
    for d in depths:
        ks = torch.tensor([float(v) for v in d.values], device=weights[d.name].device)
        fractions.append((weights[d.name] * ks).sum() / float(max(d.values)))
    depth_frac = fractions[0] if len(fractions) == 1 else sum(fractions) / len(fractions)
    return torch.as_tensor(depth_frac * edge_cost)  # a tensor already: as_tensor keeps it


def derive_cell_architecture(space: SearchSpace, alphas: ArchParameters,
                             keep: int = 2) -> Architecture:
    """DARTS/AdaBERT discretisation (docs/reference.md#adabert, #darts-and-gdas): depth = argmax;
    per node the ``keep`` strongest incoming edges by their best non-zero op, each with that op;
    others zero."""
    values: dict[str, Any] = {}
    by_node: dict[str, list[tuple[float, str, str | None]]] = {}
    for _, v, e in space.graph.edges(data=True):
        ref = e["op"]
        if not isinstance(ref, ChoiceRef) or ref.choice in values:
            continue
        choice = space.choice(ref.choice)
        probs = torch.softmax(alphas.logits(ref.choice).detach(), dim=-1)
        best, best_op = -1.0, None
        for i, op in enumerate(choice.values):
            if not OPS.get(str(op)).is_zero and float(probs[i]) > best:
                best, best_op = float(probs[i]), str(op)
        target = space.graph.nodes[v].get("label", v)
        by_node.setdefault(target, []).append((best, ref.choice, best_op))
        values[ref.choice] = None
    for candidates in by_node.values():
        candidates.sort(key=lambda t: -t[0])
        for rank, (_, name, strongest) in enumerate(candidates):
            values[name] = strongest if rank < keep else "zero"
    for c in space.choices():
        if c.kind == "depth":
            values[c.name] = c.values[int(torch.argmax(alphas.logits(c.name).detach()))]
        elif values.get(c.name) is None:
            values[c.name] = c.default
    return space.validate(values)


DERIVATIONS = ("cell", "argmax")
#: How many architectures :func:`derive_argmax_architecture` tries before giving up.
DERIVE_TRIES = 10_000


def _preferences(space: SearchSpace, alphas: ArchParameters
                 ) -> list[tuple[Categorical, list[tuple[float, Any]]]]:
    """Per choice of two values or more, its values best first with the cost of taking
    each instead of the best: relaxed choices by probability (cost log p_best − log p),
    widths from the largest down and ``other`` choices from their default on (cost: one
    nat per step down the list)."""
    prefs = []
    for c in space.choices():
        if len(c) < 2:
            continue
        if c.name in alphas.choices:
            logp = torch.log_softmax(alphas.logits(c.name).detach().double(), dim=-1).tolist()
            order = sorted(range(len(c)), key=lambda i: (-logp[i], i))
            ranked = [(logp[order[0]] - logp[i], c.values[i]) for i in order]
        elif c.kind == "width" and c.numeric:
            values = sorted(c.values, key=lambda v: -number(v))
            ranked = [(float(r), v) for r, v in enumerate(values)]
        else:
            default = cast(Scalar, c.default)  # a Categorical sets it when constructed
            values = [default, *(v for v in c.values if v != default)]
            ranked = [(float(r), v) for r, v in enumerate(values)]
        prefs.append((c, ranked))
    return prefs


def derive_argmax_architecture(space: SearchSpace, alphas: ArchParameters,
                               tries: int = DERIVE_TRIES) -> Architecture:
    """The generic discretisation (DARTS's final arg-max, Liu et al., 2019, §2.4, without
    the cell's top-2 edges): each relaxed choice takes its most probable value, each width
    its largest (the size the supernet trained, so the derived network is the one whose
    shared weights the search scored) and each ``other`` choice its default (the value it
    kept during the search, :func:`search_values`).

    If that architecture breaks a constraint of the space (or leaves a node without
    inputs), the next ones are tried in increasing order of cost -- the summed costs of
    :func:`_preferences`, ties broken by the choices' order -- so the result is the most
    probable valid architecture, deterministically. After ``tries`` invalid ones it is a
    one-line :class:`SearcherError`.
    """
    prefs = _preferences(space, alphas)
    fixed = {c.name: c.values[0] for c in space.choices() if len(c) < 2}
    start = (0,) * len(prefs)
    heap: list[tuple[float, tuple[int, ...]]] = [(0.0, start)]
    seen = {start}
    first: str | None = None
    for _ in range(tries):
        if not heap:
            break
        cost, ranks = heapq.heappop(heap)
        values = {**fixed, **{c.name: ranked[r][1]
                              for (c, ranked), r in zip(prefs, ranks, strict=True)}}
        try:
            space.resolve(values)  # validates (constraints) and plans (every node fed)
            return space.validate(values)
        except NasError as err:
            first = first or str(err)
        for i, (_, ranked) in enumerate(prefs):
            if ranks[i] + 1 < len(ranked):
                nxt = ranks[:i] + (ranks[i] + 1,) + ranks[i + 1:]
                if nxt not in seen:
                    seen.add(nxt)
                    step = ranked[ranks[i] + 1][0] - ranked[ranks[i]][0]
                    heapq.heappush(heap, (cost + step, nxt))
    raise SearcherError(f"space {space.name!r}: no valid architecture among the {len(seen)} "
                        f"most probable ones (the arg-max: {first}); relax the space's "
                        "constraints or use derive='cell'")


def derive_architecture(space: SearchSpace, alphas: ArchParameters, how: str = "cell"
                        ) -> Architecture:
    """``cell``: :func:`derive_cell_architecture` (DARTS/AdaBERT cells); ``argmax``:
    :func:`derive_argmax_architecture` (any space)."""
    if how == "argmax":
        return derive_argmax_architecture(space, alphas)
    if how == "cell":
        return derive_cell_architecture(space, alphas)
    raise SearcherError(f"derive must be one of {', '.join(DERIVATIONS)}, got {how!r}")


def _check_derive(derive: str) -> None:
    if derive not in DERIVATIONS:
        raise SearcherError(f"derive must be one of {', '.join(DERIVATIONS)} (cell: AdaBERT's "
                            f"two edges per node; argmax: any space), got {derive!r}")


LossFn = Callable[[ModelOutput, Mapping[str, torch.Tensor]], torch.Tensor]


def weight_settings(*, epochs: int, lr: float = 2e-2, lr_min: float = 5e-4,
                    checkpoint_every: int = 200, grad_clip: float = 5.0) -> TrainSettings:
    """The weight optimiser of the search (docs/reference.md#adabert, #darts-and-gdas): SGD momentum
    0.9, cosine from ``lr`` to ``lr_min``, no weight decay, gradients clipped at norm 5."""
    return TrainSettings(epochs=epochs, optimizer="sgd", momentum=0.9, lr=lr, lr_min=lr_min,
                         weight_decay=0.0, schedule="cosine", grad_clip=grad_clip,
                         checkpoint_every=checkpoint_every)


class DifferentiableSearch:
    """First-order bilevel search over a supernet with hard Gumbel samples (GDAS/AdaBERT).

    It plugs into the shared training loop as its step hooks (:func:`searchers.base.
    run_steps` wires them): :meth:`before_step` takes the architecture step on the
    batch's ``"val"`` part (none during the weight warm-up), and :meth:`weight_loss` is
    the loss of the weight step on its ``"train"`` part. ``task_loss(output, batch)`` is
    the task part of the objective (e.g. (1−γ)·CE + γ·probe KD); the search adds β·L_E.
    Architecture optimiser: Adam lr 3e-4, betas (0.5, 0.999), weight decay 1e-3 (Liu et al.
    2019, §3; docs/reference.md#darts-and-gdas). Its state (α, their optimiser, the Gumbel
    generator) travels in the loop's checkpoint through :meth:`state_dict`.
    """

    def __init__(self, space: SearchSpace, supernet: GraphNet, task_loss: LossFn, *,
                 total_steps: int, settings: TrainSettings, beta: float = 4.0,
                 arch_lr: float = 3e-4, arch_weight_decay: float = 1e-3,
                 schedule: TemperatureSchedule | None = None, seed: int = 0,
                 record: tuple[str, ...] = (), arch_warmup_steps: int = 0,
                 op_costs: str = "normalised", derive: str = "cell") -> None:
        if op_costs not in OP_COST_SCALES:
            raise SearcherError(f"op_costs must be one of {', '.join(OP_COST_SCALES)}, got "
                                f"{op_costs!r}")
        _check_derive(derive)
        self.space = space
        self.derivation = derive
        self.supernet = supernet
        self.task_loss = task_loss
        self.settings = settings
        self.beta = beta
        self.total_steps = total_steps
        self.record = record
        # α is frozen while the shared weights warm up: on an untrained supernet the task
        # gradient w.r.t. α is mostly noise, and the (deterministic) efficiency gradient
        # would steer the distribution alone.
        self.arch_warmup_steps = arch_warmup_steps
        self.generator = torch.Generator().manual_seed(seed)
        relaxed = relaxed_choices(space)
        # ``other`` choices keep one value while the supernet trains (widths need none)
        self.fixed = search_values(space)
        # drawn on the CPU (the same α on every device), then on the run's device
        self.alphas = place(ArchParameters(relaxed,
                                           generator=torch.Generator().manual_seed(seed)))
        self.costs = op_cost_table(space, scale=op_costs)
        self.edge_reduction = "sum" if op_costs == "published" else "mean"
        depth = [c for c in relaxed if c.kind == "depth"]
        # one depth choice (AdaBERT's K) is priced as before; several by the mean K/K_max
        self.depth_choice: Categorical | list[Categorical] | None = (
            None if not depth else depth[0] if len(depth) == 1 else depth)
        self.schedule = schedule or TemperatureSchedule(total_steps - arch_warmup_steps)
        self.a_opt = torch.optim.Adam(self.alphas.parameters(), lr=arch_lr, betas=(0.5, 0.999),
                                      weight_decay=arch_weight_decay)
        self.step_count = 0  # weight steps done (set by the loop before each step)

    def tau(self) -> float:
        return self.schedule(max(0, self.step_count - self.arch_warmup_steps))

    def _loss(self, model: nn.Module, batch: Mapping[str, torch.Tensor]
              ) -> tuple[torch.Tensor, dict[str, float]]:
        tau = self.tau()
        weights = self.alphas.gumbel(tau, hard=True, generator=self.generator)
        out = model(batch, arch=self.fixed or None, weights=weights, hard=True,
                    record=self.record)
        task = self.task_loss(out, batch)
        eff = efficiency_loss(weights, self.costs, self.depth_choice, self.edge_reduction)
        info = {"task_loss": task.item(), "efficiency": eff.item(), "tau": tau}
        return task + self.beta * eff, info

    def before_step(self, step: int, batch: Mapping[str, Any]) -> dict[str, float]:
        """The architecture step on ``batch["val"]`` (NaN while α is frozen)."""
        self.step_count = step
        if step < self.arch_warmup_steps:
            return {"arch_loss": float("nan")}
        self.a_opt.zero_grad(set_to_none=True)
        arch_loss, _ = self._loss(self.supernet, batch["val"])
        # Only α's gradient is needed here: skipping the weight gradients saves about a
        # third of this backward pass (first-order DARTS/GDAS leaves the weights alone).
        alphas = [p for p in self.alphas.parameters() if p.requires_grad]
        grads = torch.autograd.grad(arch_loss, alphas, allow_unused=True)
        for p, g in zip(alphas, grads, strict=True):
            p.grad = g  # None (unused this step) is skipped by Adam, as after backward()
        self.a_opt.step()
        return {"arch_loss": arch_loss.item()}

    def weight_loss(self, model: nn.Module, batch: Mapping[str, Any]
                    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The weight step's loss on ``batch["train"]`` (``model``: the loop's network,
        the DDP wrapper under torchrun)."""
        return self._loss(model, batch["train"])

    def probabilities(self) -> dict[str, list[float]]:
        return {name: torch.softmax(self.alphas.logits(name).detach(), -1).tolist()
                for name in self.alphas.choices}

    def derive(self) -> Architecture:
        """The architecture the search found so far (``derive``: ``cell`` or ``argmax``)."""
        return derive_architecture(self.space, self.alphas, self.derivation)

    def state_dict(self) -> dict[str, Any]:
        return {"alphas": self.alphas.state_dict(), "a_opt": self.a_opt.state_dict(),
                "generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.alphas.load_state_dict(state["alphas"])
        self.a_opt.load_state_dict(state["a_opt"])
        self.generator.set_state(state["generator"])


@dataclass
class DifferentiableSettings:
    """``differentiable``'s settings (its keywords below): β, the weight optimiser (SGD
    at ``lr``, cosine to ``lr_min``), the architecture optimiser (Adam at ``arch_lr``,
    ``arch_weight_decay``), τ's staircase (``tau_every``), α's warm-up fraction, the
    checkpoint interval, the efficiency loss's scale and the derivation. Method search
    reads them from ``one_shot:`` (``derive: argmax``), AdaBERT from its ``search:``."""

    beta: float = 4.0
    lr: float = 2e-2
    lr_min: float = 5e-4
    arch_lr: float = 3e-4
    arch_weight_decay: float = 1e-3
    tau_every: int = 100
    arch_warmup: float = 0.0
    checkpoint_every: int = 200
    op_costs: str = "normalised"
    derive: str = "cell"

    def __post_init__(self) -> None:
        from nas.config import check_fields

        check_fields([("beta", self.beta >= 0, "a number >= 0"),
                      ("arch_warmup", 0.0 <= self.arch_warmup < 1.0, "in [0, 1)"),
                      ("op_costs", self.op_costs in OP_COST_SCALES, " or ".join(OP_COST_SCALES)),
                      ("derive", self.derive in DERIVATIONS, " or ".join(DERIVATIONS))], self)


@SEARCHERS.register("differentiable")
class DifferentiableSearcher(OneShotSearcher):
    """GDAS/AdaBERT search as a one-shot searcher (docs/reference.md#adabert, #darts-and-gdas).

    :meth:`search` builds a :class:`DifferentiableSearch` over ``trainer.supernet`` and
    ``trainer.task_loss`` for ``epochs × steps_per_epoch`` steps, hands it to
    ``trainer.fit`` (the shared training loop with the recipe's checkpoints and logging),
    and derives the architecture. α stays frozen for the first ``arch_warmup`` fraction
    of the steps, after which τ follows the staircase schedule over the remaining steps.
    The candidate's ``params`` hold the final choice probabilities.

    ``derive``: ``"cell"`` (the default; DARTS/AdaBERT cells, two edges per node) or
    ``"argmax"`` (any space whose choices include categorical op or depth choices; see
    :func:`derive_argmax_architecture`). A space without such choices is refused before
    anything trains (:func:`check_relaxable`).
    """

    def __init__(self, seed: int = 0, *, beta: float = 4.0, lr: float = 2e-2,
                 lr_min: float = 5e-4, arch_lr: float = 3e-4, arch_weight_decay: float = 1e-3,
                 tau_every: int = 100, arch_warmup: float = 0.0, checkpoint_every: int = 200,
                 record: tuple[str, ...] = (), op_costs: str = "normalised",
                 derive: str = "cell") -> None:
        super().__init__(seed)
        _check_derive(derive)
        self.derive = derive
        if op_costs not in OP_COST_SCALES:
            raise SearcherError(f"op_costs must be one of {', '.join(OP_COST_SCALES)}, got "
                                f"{op_costs!r}")
        self.op_costs = op_costs
        if not 0.0 <= arch_warmup < 1.0:
            raise SearcherError(f"arch_warmup is a fraction of the search in [0, 1), got "
                                f"{arch_warmup}")
        self.beta, self.arch_lr, self.arch_weight_decay = beta, arch_lr, arch_weight_decay
        self.lr, self.lr_min, self.checkpoint_every = lr, lr_min, checkpoint_every
        self.tau_every = tau_every
        self.arch_warmup = arch_warmup
        self.record = tuple(record)
        self.engine: DifferentiableSearch | None = None

    @classmethod
    def settings_type(cls) -> type:
        return DifferentiableSettings

    def search(self, space: SearchSpace, trainer: SupernetTrainer) -> Candidate:
        check_relaxable(space)
        total = trainer.epochs * trainer.steps_per_epoch
        if total < 1:
            raise SearcherError(f"the search has {trainer.epochs} epoch(s) of "
                                f"{trainer.steps_per_epoch} step(s); it needs at least one")
        warmup = int(self.arch_warmup * total)
        settings = weight_settings(epochs=trainer.epochs, lr=self.lr, lr_min=self.lr_min,
                                   checkpoint_every=self.checkpoint_every)
        self.engine = DifferentiableSearch(
            space, trainer.supernet, trainer.task_loss, total_steps=total, settings=settings,
            beta=self.beta, arch_lr=self.arch_lr, arch_weight_decay=self.arch_weight_decay,
            schedule=TemperatureSchedule(total - warmup, every=self.tau_every),
            seed=self.seed, record=self.record, arch_warmup_steps=warmup,
            op_costs=self.op_costs, derive=self.derive)
        trainer.fit(self.engine)
        self._best = Candidate(0, self.engine.derive(),
                               {"probabilities": self.engine.probabilities()})
        return self._best
