"""Contract tests run over the whole space registry (timm's
``test_models.py``: every registered model gets the same checks).

For every registered space, in its small test configuration: architectures validate,
sample and round-trip through the encoding; the child extracted from the supernet
computes exactly what the supernet computes for that architecture; every child
parameter gets a gradient; the graph's cost counts match the built child and thop.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nas.builder import build_child, build_supernet, extract_child
from nas.cost import batch_for, count_costs, count_model_params, thop_macs
from nas.space import get_space, list_spaces, small_config

SPACE_NAMES = list_spaces(tabular=False)  # tabular benchmarks have no model
SEEDS = (0, 1, 2)


def small_space(name: str, **extra):
    return get_space(name, **{**small_config(name), **extra})


def space_variants() -> list[tuple[str, dict]]:
    variants = [(n, {}) for n in SPACE_NAMES]
    variants.append(("adabert", {"pair": True}))
    return variants


@pytest.fixture(scope="module", params=space_variants(), ids=lambda v: f"{v[0]}{v[1] or ''}")
def space_and_supernet(request):
    name, extra = request.param
    torch.manual_seed(0)
    space = small_space(name, **extra)
    return space, build_supernet(space).eval()


def sampled(space, n: int = len(SEEDS)):
    archs = [space.default()] + [space.sample(s) for s in SEEDS]
    return list(dict.fromkeys(archs))[: n + 1]


def test_registry_has_the_searchable_families():
    assert {"adabert", "efficientbert"} <= set(SPACE_NAMES)


def test_default_and_samples_validate(space_and_supernet):
    space, _ = space_and_supernet
    for arch in sampled(space):
        assert space.validate(dict(arch)) == arch
        assert arch.space == space.name
    assert space.size() >= 1
    if space.is_fixed:
        assert space.size() == 1 and len(space.default()) == 0


def test_encode_decode_round_trip(space_and_supernet):
    space, _ = space_and_supernet
    for arch in sampled(space):
        vector = space.encode(arch)
        assert vector.shape == (space.encoded_width,)
        assert space.decode(vector) == arch


def test_sampling_is_seeded(space_and_supernet):
    space, _ = space_and_supernet
    assert space.sample(7) == space.sample(np.random.default_rng(7))


def test_child_equals_supernet_for_the_architecture(space_and_supernet):
    space, supernet = space_and_supernet
    batch = batch_for(space, batch_size=2, seq_len=12)
    with torch.no_grad():
        for arch in sampled(space):
            child = extract_child(supernet, space, arch).eval()
            expected = supernet(batch, arch=arch).logits
            got = child(batch).logits
            assert got.shape == expected.shape
            assert torch.isfinite(got).all()
            assert (got - expected).abs().max().item() <= 1e-5, arch


def test_child_holds_only_the_chosen_ops(space_and_supernet):
    space, supernet = space_and_supernet
    for arch in sampled(space):
        child = build_child(space, arch)
        assert count_model_params(child) <= count_model_params(supernet)
        names = set(dict(supernet.named_parameters()))
        assert set(dict(child.named_parameters())) <= names


def test_every_child_parameter_gets_a_gradient(space_and_supernet):
    space, _ = space_and_supernet
    batch = batch_for(space, batch_size=2, seq_len=12)
    for arch in sampled(space):
        torch.manual_seed(0)
        child = build_child(space, arch).train()
        out = child(batch, record=("aux",))
        loss = out.logits.pow(2).sum() + sum(a.pow(2).sum() for a in out.aux.values())
        loss.backward()
        missing = [n for n, p in child.named_parameters() if p.grad is None]
        assert not missing, f"{arch.id}: no gradient for {missing[:5]}"
        assert all(torch.isfinite(p.grad).all() for p in child.parameters())


def test_graph_counts_match_the_built_child_and_thop(space_and_supernet):
    space, _ = space_and_supernet
    seq_len = 12
    for arch in sampled(space):
        costs = count_costs(space, arch, seq_len)
        child = build_child(space, arch).eval()
        assert costs.params == count_model_params(child)
        measured = thop_macs(child, batch_for(space, batch_size=2, seq_len=seq_len))
        assert measured > 0
        assert abs(costs.macs - measured) <= 0.02 * measured, (costs.macs, measured)
        assert costs.flops == 2 * costs.macs
