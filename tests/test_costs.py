"""Cost counts worked out by hand (fvcore style) and against docs/reference.md#costs."""

from __future__ import annotations

import pytest

from nas.architecture import load_architecture
from nas.cost import count_costs, dummy_batch, measure_latency
from nas.ops import OPS
from nas.space import get_space

REPO_ARCHS = "experiments/archs"


def test_linear_conv_and_attention_counts_by_hand():
    linear = OPS.get("linear")
    assert linear.count_params([540], 270, {"out": 270}) == 540 * 270 + 270
    assert linear.count_macs([540], 270, {"out": 270}, 128) == 128 * 540 * 270
    conv = OPS.get("dil_conv_5")
    assert conv.count_params([128], 128, {}) == 128 * 128 * 5 + 2 * 128
    assert conv.count_macs([128], 128, {}, 64) == 64 * 128 * 128 * 5
    attn = OPS.get("bert_attention")
    p = {"heads": 12, "head_size": 64}
    assert attn.count_params([768], 768, p) == 4 * (768 * 768 + 768) + 2 * 768
    # Q, K, V, O projections + QKᵀ + AV at 128 tokens
    assert attn.count_macs([768], 768, p, 128) == 128 * 4 * 768 * 768 + 2 * 128 * 128 * 768
    for name in ("skip", "zero", "max_pool_3", "avg_pool_3", "gelu", "add"):
        assert OPS.get(name).count_params([128], 128, {}) == 0


def test_adabert_all_skip_depth_one_by_hand():
    space = get_space("adabert")
    arch = space.default().replace(
        depth=1, **{c.name: "skip" for c in space.choices() if c.name != "depth"})
    costs = count_costs(space, arch, 128)
    embedding = 30522 * 128 + 512 * 128 + 2 * 128  # words, positions, LayerNorm
    cell = 3  # attention weights of the cell output
    readout = 1 + 128 * 2 + 2  # one layer weight + classifier
    assert costs.params == embedding + cell + readout
    assert costs.macs == 128 * 2  # only the classifier multiplies


def test_adabert_students_are_in_the_published_size_range():
    """Chen et al. 2020 (docs/reference.md#costs): K = 3..7 cells at hidden 128 give 6.4M..9.5M; the
    published cells keep two edges per node, convolutions of kernel 3..7."""
    space = get_space("adabert")
    ops = {c.name: "zero" for c in space.choices() if c.name != "depth"}
    ops.update({"cell.n0.from_prev2": "std_conv_5", "cell.n0.from_prev1": "dil_conv_5",
                "cell.n1.from_prev1": "std_conv_7", "cell.n1.from_n0": "std_conv_3",
                "cell.n2.from_n0": "dil_conv_7", "cell.n2.from_n1": "std_conv_5"})
    small = count_costs(space, {**ops, "depth": 3}).params
    large = count_costs(space, {**ops, "depth": 7}).params
    assert 5.0e6 < small < large < 9.5e6


def test_efficientbert_published_architecture_is_15_7m_parameters():
    space = get_space("efficientbert")
    arch = load_architecture(f"{REPO_ARCHS}/efficientbert_paper.json")
    costs = count_costs(space, arch, 128)
    assert costs.params_paper == pytest.approx(15.7e6, rel=0.02)
    assert costs.params_by_group["distill"] == 540 * 768 + 768
    assert costs.params == sum(costs.params_by_group.values())
    assert costs.params == pytest.approx(15.7e6, rel=0.02)  # the head adds only 540·2 + 2


def test_efficientbert_standard_ffn_flops_by_hand():
    """Default architecture: one standard FFN of ratio 1 per layer."""
    space = get_space("efficientbert")
    L, H = 128, 540
    costs = count_costs(space, space.default(), L)
    per_layer = L * (4 * H * H) + 2 * L * L * H + L * (2 * H * H)
    embedding = L * 3 * 128 * H
    head = H * 2  # classifier on the [CLS] state, no pooler
    assert costs.macs == 6 * per_layer + embedding + head


def test_latency_is_measured_on_the_built_child():
    from nas.builder import build_child
    from nas.space import small_config

    space = get_space("adabert", **small_config("adabert"))
    lat = measure_latency(build_child(space), dummy_batch(1, 16, 500), warmup=1, repeats=3)
    assert lat.median_ms > 0 and lat.p90_ms >= lat.median_ms and lat.repeats == 3
    assert lat.throughput == pytest.approx(1000.0 / lat.median_ms)


def test_equal_cost_sample_draws_distinct_architectures_inside_the_window():
    """The like-for-like random baseline (docs/adabert.md): every draw is within ±window of the
    reference's FLOPs, none is the reference, none repeats, and the draw is seeded."""
    from nas.cost import equal_cost_sample
    from nas.errors import NasError

    space = get_space("adabert", hidden=32, max_depth=3)
    reference = space.validate({**space.default(), "depth": 1})
    target = count_costs(space, reference, 32).flops
    drawn = equal_cost_sample(space, reference, 3, window=0.25, seq_len=32, seed=7)
    assert len({a.id for a in drawn}) == 3 and reference.id not in {a.id for a in drawn}
    for arch in drawn:
        assert 0.75 * target <= count_costs(space, arch, 32).flops <= 1.25 * target
    assert [a.id for a in equal_cost_sample(space, reference, 3, 0.25, 32, seed=7)] == \
        [a.id for a in drawn]
    with pytest.raises(NasError, match="widen the window"):
        equal_cost_sample(space, reference, 1000, window=0.0, seq_len=32, max_draws=200)
