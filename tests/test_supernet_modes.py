"""The supernet's three modes (docs/reference.md#adabert, #darts-and-gdas): fixed, DARTS mixture,
hard Gumbel (GDAS)."""

from __future__ import annotations

import pytest
import torch

from nas.arch_params import ArchParameters
from nas.builder import build_supernet
from nas.cost import batch_for
from nas.network import Candidates
from nas.space import get_space, small_config


@pytest.fixture(scope="module")
def adabert():
    torch.manual_seed(0)
    space = get_space("adabert", **small_config("adabert"))
    return space, build_supernet(space).eval(), batch_for(space, 2, 10)


def one_hot(space, arch):
    return {c.name: torch.nn.functional.one_hot(torch.tensor(c.index(arch[c.name])),
                                                len(c)).float()
            for c in space.choices()}


def test_mixture_with_one_hot_weights_equals_fixed_architecture(adabert):
    space, supernet, batch = adabert
    arch = space.sample(3)
    with torch.no_grad():
        fixed = supernet(batch, arch=arch).logits
        mixed = supernet(batch, weights=one_hot(space, arch), hard=False).logits
    assert torch.allclose(fixed, mixed, atol=1e-5)


def test_mixture_is_the_weighted_sum_of_candidates(adabert):
    """Every edge weighted 0.3 skip + 0.7 zero, depth 1: the cell is linear in the
    embedding e (both cell inputs are e for single sentences), worked out by hand:
    n0 = 0.3(e + e) = 0.6e; n1 = 0.6e + 0.3·n0 = 0.78e; n2 = 0.6e + 0.3·n0 + 0.3·n1 = 1.014e;
    out = mean(n0, n1, n2) = 0.798e (attention weights start equal).
    With all edges 'skip': n0 = 2e, n1 = 4e, n2 = 8e, out = 14e/3."""
    space, supernet, batch = adabert
    all_skip = space.default().replace(
        depth=1, **{c.name: "skip" for c in space.choices() if c.name != "depth"})
    weights = {}
    for c in space.choices():
        w = torch.zeros(len(c))
        if c.name == "depth":
            w[c.index(1)] = 1.0
        else:
            w[c.index("skip")] = 0.3
            w[c.index("zero")] = 0.7
        weights[c.name] = w
    with torch.no_grad():
        mixed = supernet(batch, weights=weights, record=("hidden_states",))
        skip = supernet(batch, arch=all_skip, record=("hidden_states",))
    h_mixed = mixed.records["hidden_states"][0]
    h_skip = skip.records["hidden_states"][0]
    assert torch.allclose(h_mixed, (0.798 / (14 / 3)) * h_skip, atol=1e-5)


def test_hard_gumbel_runs_only_the_sampled_op_and_passes_gradients(adabert):
    space, supernet, batch = adabert
    alphas = ArchParameters(space.choices(), generator=torch.Generator().manual_seed(0))
    weights = alphas.gumbel(tau=1.0, hard=True, generator=torch.Generator().manual_seed(1))
    sampled = {n: space.choice(n).values[int(w.argmax())] for n, w in weights.items()}

    calls: dict[str, int] = {}
    hooks = []
    for key, module in supernet.edges.items():
        if isinstance(module, Candidates):
            for op_name, op in module.items():
                def count(m, i, o, k=f"{key}/{op_name}"):
                    calls[k] = calls.get(k, 0) + 1
                hooks.append(op.register_forward_hook(count))
    out = supernet(batch, weights=weights, hard=True)
    for h in hooks:
        h.remove()
    per_edge: dict[str, list[str]] = {}
    for k in calls:
        edge, op = k.rsplit("/", 1)
        per_edge.setdefault(edge, []).append(op)
    assert per_edge and all(len(ops) == 1 for ops in per_edge.values())
    depth = int(sampled["depth"])
    assert all(int(edge.split("_")[0].removeprefix("c")) <= depth
               for e in per_edge for edge in [e.split("->")[1]])

    with torch.no_grad():
        fixed = supernet(batch, arch=sampled).logits
    assert torch.allclose(out.logits.detach(), fixed, atol=1e-5)
    out.logits.sum().backward()
    # Straight-through: every sampled op's weight carries a gradient to its logits; a
    # sampled 'zero' contributes w·0, so its choice legitimately gets none.
    live = [n for n in space.choice_map if sampled[n] != "zero"]
    assert live
    for n in live:
        g = alphas.logits(n).grad
        assert g is not None and g.abs().sum() > 0, n


def test_unspecified_op_choice_is_an_error(adabert):
    space, supernet, batch = adabert
    partial = {"depth": 2}
    with pytest.raises(ValueError, match="has no value"):
        supernet(batch, arch=partial)
