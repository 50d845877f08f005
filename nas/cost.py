"""Cost model: parameters and FLOPs from the graph, latency from the built child.

Counting convention (docs/reference.md#costs): multiply-adds (MACs) of linear layers, convolutions
and the two attention matmuls; element-wise ops, normalisation and pooling are not
counted (they are < 1% for every design here). **FLOPs = 2 × MACs**, so BERT-base
at 128 tokens is ≈ 22.5 GFLOPs. Parameter counts include every tensor of the model
as built; groups (embeddings, encoder, head, distill) are reported separately so a
paper's convention can be matched.

:func:`count_costs` needs no model: it sums each op's declared ``count_params`` and
``count_macs`` over the plan of the architecture. It reads them from tables compiled
once per space and sequence length (:mod:`nas.cost_tables`: tens of thousands of
architectures per second); :func:`count_costs_reference` walks the plan itself and is
what the tables are tested against. :func:`thop_macs` and :func:`measure_latency` work
on a built network and serve as cross-checks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from nas.architecture import Architecture
from nas.errors import NasError
from nas.graph import check_seq_len, plan, position_limit
from nas.ops import OPS
from nas.space import SearchSpace


@dataclass
class Costs:
    """Costs of one architecture at one sequence length (per example)."""

    params: int
    macs: int
    seq_len: int
    params_by_group: dict[str, int] = field(default_factory=dict)
    macs_by_group: dict[str, int] = field(default_factory=dict)
    params_paper: int | None = None

    @property
    def flops(self) -> int:
        """FLOPs = 2 × MACs (docs/reference.md#costs)."""
        return 2 * self.macs

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["flops"] = self.flops
        d["units"] = {"params": "count", "macs": "multiply-adds per example",
                      "flops": "2 x MACs per example"}
        return d


def count_costs(space: SearchSpace, arch: Mapping[str, Any] | None = None,
                seq_len: int = 128) -> Costs:
    """Parameters and MACs of ``arch`` (default: the space's default) from the graph alone.

    Aux nodes (e.g. EfficientBERT's distillation fit layer) count towards parameters
    but not towards inference MACs. Shared modules count once. Equal to
    :func:`count_costs_reference`, read from the space's cost tables (built on the first
    call for a space and length: 0.1-0.5 s for the searchable spaces). A ``seq_len``
    beyond the model's position embeddings is an error: such a model cannot run at that
    length (checked when a space's tables are built for that length).
    """
    from nas.cost_tables import tables_for

    tables = tables_for(space, seq_len)
    values = None if arch is None else tables.canonical_values(arch)
    if values is None:  # else validating would return it unchanged
        values = space.default() if arch is None else space.validate(arch)
    params, macs = tables.count(values)
    return _costs(space, seq_len, params, macs)


def equal_cost_sample(space: SearchSpace, reference: Mapping[str, Any], samples: int,
                      window: float = 0.25, seq_len: int = 128, seed: int = 0,
                      max_draws: int = 2_000_000) -> list[Architecture]:
    """``samples`` distinct uniformly random architectures of ``space`` whose FLOPs at
    ``seq_len`` tokens lie within ``±window`` of ``reference``'s (``reference`` itself
    excluded): the like-for-like random baseline for a searched architecture (docs/adabert.md).

    Rejection sampling from :meth:`SearchSpace.sample` with a generator seeded by ``seed``,
    so the draw is uniform over the architectures in the window and the same every time.
    """
    if samples < 1 or not 0.0 <= window < 1.0:
        raise NasError(f"equal-cost sampling needs samples >= 1 and 0 <= window < 1, got "
                       f"{samples} and {window}")
    ref = space.validate(dict(reference))
    target = count_costs(space, ref, seq_len).flops
    low, high = (1 - window) * target, (1 + window) * target
    rng = np.random.default_rng(seed)
    found: dict[str, Architecture] = {}
    for _ in range(max_draws):
        arch = space.sample(rng)
        if arch.id != ref.id and arch.id not in found and \
                low <= count_costs(space, arch, seq_len).flops <= high:
            found[arch.id] = arch
            if len(found) == samples:
                return list(found.values())
    raise NasError(f"only {len(found)} of {samples} architectures of {space.name!r} within "
                   f"±{window:.0%} of {target:,} FLOPs in {max_draws:,} draws; widen the window")


def count_costs_reference(space: SearchSpace, arch: Mapping[str, Any] | None = None,
                          seq_len: int = 128) -> Costs:
    """:func:`count_costs` by walking the architecture's plan (the slow, plain path)."""
    check_seq_len(seq_len, position_limit(space.graph), f"space {space.name!r}")
    arch = space.default() if arch is None else space.validate(arch)
    steps = plan(space.graph, space.choice_map, arch)
    params: dict[str, int] = {}
    macs: dict[str, int] = {}
    for st in steps:
        group = st.attrs.get("group", "other")
        inference = st.attrs.get("role") != "aux"
        n_params = 0 if st.attrs.get("share") else OPS.get(st.fixed_op).count_params(
            st.in_widths, st.width, st.params)
        n_macs = OPS.get(st.fixed_op).count_macs(st.in_widths, st.width, st.params, seq_len)
        for e in st.inputs:
            op = OPS.get(e.fixed_op)
            n_params += op.count_params([e.in_width], e.out_width, e.params)
            n_macs += op.count_macs([e.in_width], e.out_width, e.params, seq_len)
        params[group] = params.get(group, 0) + n_params
        if inference:
            macs[group] = macs.get(group, 0) + n_macs
    return _costs(space, seq_len, params, macs)


def _costs(space: SearchSpace, seq_len: int, params: dict[str, int],
           macs: dict[str, int]) -> Costs:
    paper_groups = space.config.get("paper_params_groups")
    paper = sum(params.get(g, 0) for g in paper_groups) if paper_groups else None
    return Costs(sum(params.values()), sum(macs.values()), seq_len, params, macs, paper)


def count_model_params(model: nn.Module) -> int:
    """Parameters of a built network (the exact count the graph count is checked against)."""
    return sum(p.numel() for p in model.parameters())


def dummy_batch(batch_size: int, seq_len: int, vocab_size: int = 1000, pair: bool = False,
                seed: int = 0) -> dict[str, torch.Tensor]:
    """Random token ids with a full attention mask (for costs and latency only)."""
    g = torch.Generator().manual_seed(seed)
    batch = {
        "input_ids": torch.randint(0, vocab_size, (batch_size, seq_len), generator=g),
        "attention_mask": torch.ones(batch_size, seq_len, dtype=torch.long),
        "token_type_ids": torch.zeros(batch_size, seq_len, dtype=torch.long),
    }
    if pair:
        batch["input_ids_b"] = torch.randint(0, vocab_size, (batch_size, seq_len), generator=g)
        batch["attention_mask_b"] = torch.ones(batch_size, seq_len, dtype=torch.long)
    return batch


def batch_for(space: SearchSpace, batch_size: int, seq_len: int) -> dict[str, torch.Tensor]:
    vocab = int(space.config.get("vocab_size", 1000))
    return dummy_batch(batch_size, seq_len, min(vocab, 1000), bool(space.config.get("pair")))


class _BatchForward(nn.Module):
    """Adapts a GraphNet to thop's positional calling convention."""

    def __init__(self, model: nn.Module, keys: list[str]) -> None:
        super().__init__()
        self.model = model
        self.keys = keys

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.model(dict(zip(self.keys, tensors, strict=True))).logits


def thop_macs(model: nn.Module, batch: Mapping[str, torch.Tensor]) -> int:
    """MACs of one forward pass counted by thop from the run-time shapes, per example.

    thop counts linear and convolution layers itself; the attention matmuls are counted
    by a hook on :class:`~nas.ops.transformer.AttentionMatmul`. Normalisation, pooling
    and activations are set to zero, matching the convention of :func:`count_costs`.
    """
    import thop

    from nas.ops.transformer import AttentionMatmul, count_attention_matmul

    def zero(module: Any, inputs: Any, output: Any) -> None:  # Any: thop's total_ops buffer
        module.total_ops += torch.DoubleTensor([0.0])

    custom: dict[type[nn.Module], Callable[[Any, Any, Any], None]] = {
        AttentionMatmul: count_attention_matmul}
    for cls in (nn.BatchNorm1d, nn.LayerNorm, nn.ReLU, nn.GELU, nn.Tanh, nn.Dropout,
                nn.MaxPool1d, nn.AvgPool1d, nn.Embedding, nn.Identity):
        custom[cls] = zero
    from nas.device import module_device, to_device

    batch = to_device(batch, module_device(model))
    keys = list(batch)
    wrapper = _BatchForward(model, keys).eval()
    with torch.no_grad():
        macs, _ = thop.profile(wrapper, inputs=tuple(batch[k] for k in keys), custom_ops=custom,
                               verbose=False)
    batch_size = next(iter(batch.values())).shape[0]
    return int(round(macs / batch_size))


@dataclass
class Latency:
    batch_size: int
    seq_len: int
    median_ms: float
    p90_ms: float
    repeats: int
    threads: int
    device: str = "cpu"  # where it was measured; a GPU's latency is recorded as such
    runtime: str = "torch-fp32"  # what ran the model (nas.timing.TORCH_FP32: eager float32)

    @property
    def throughput(self) -> float:
        """Examples per second at the median latency."""
        return self.batch_size / (self.median_ms / 1000.0)

    def to_dict(self) -> dict[str, Any]:
        row = {**asdict(self), "throughput_per_s": self.throughput}
        if self.device == "cpu":  # the CPU rows keep the fields they always had
            del row["device"]
        return row


@torch.no_grad()
def measure_latency(model: nn.Module, batch: Mapping[str, torch.Tensor], warmup: int = 3,
                    repeats: int = 10) -> Latency:
    """Latency of one forward pass on the model's device (the run's: the CPU unless a GPU
    was chosen, :mod:`nas.device`): ``warmup`` untimed runs, then the median of ``repeats``
    (timed with CUDA events on a GPU). The batch is moved there before the clock starts."""
    from nas.device import describe, module_device, to_device
    from nas.timing import time_call

    was_training = model.training
    model.eval()
    device = module_device(model)
    batch = to_device(batch, device)
    timing = time_call(lambda: model(batch), warmup, repeats, device=device)
    model.train(was_training)
    ids = next(iter(batch.values()))
    return Latency(ids.shape[0], ids.shape[1], timing.median_ms, timing.p90_ms, repeats,
                   torch.get_num_threads(), device.type if device.type != "cuda" else
                   describe(device))
