"""The blockwise table, its knapsack and its proxy evaluator (docs/compress.md#blockwise; Puzzle,
Bercovich et al. 2025; evaluators/blockwise.py, evaluators/blockwise_knapsack.py).

On a small random BERT teacher (2 layers, width 32): a table entry is what the sliced
child computes from the teacher's block input, the costs add up to the cost model's and
the latency model's on whole children, the teacher's block states are cached as
safetensors by their settings, and the knapsack finds the brute-force optimum.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from evaluators.base import EvaluatorError
from evaluators.blockwise import (
    CACHE_KIND,
    SKIP,
    BlockwiseError,
    BlockwiseEvaluator,
    block_table,
)
from evaluators.blockwise_knapsack import (
    knapsack,
    knapsack_front,
    knapsack_sweep,
    max_ratio,
    ratio_range,
)
from nas.builder import build_supernet
from nas.cost import batch_for, count_costs
from nas.errors import ArchitectureError
from nas.latency import Fit, LatencyModel, LatencyTable, Setting, op_keys, space_key
from nas.space import get_space, small_config
from spaces.bert_subnet import bert_subnet_space


def _batches(space, n=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        b = batch_for(space, 4, 10)
        b["input_ids"] = torch.randint(0, space.config["vocab_size"], (4, 10), generator=g)
        b["attention_mask"][1, 5:] = 0
        out.append(b)
    return out


def fake_latency(space, seed=0):
    """A latency model of the space from made-up op times (no timing): what it predicts
    is as additive over op calls as a calibrated one."""
    rng = np.random.default_rng(seed)
    setting = Setting(1, 128, 1)
    table = LatencyTable.new()
    keys = op_keys(space, pool=30)
    table.ops[setting.key] = {k: float(rng.uniform(0.01, 1.0)) for k in keys}
    table.fits[space_key(space)] = {setting.key: Fit(1.3, 0.02, 0.5)}
    return LatencyModel(table).predictor(space)


@pytest.fixture(scope="module")
def teacher():
    """A random teacher of the small shape (2 layers, width 32, 4 heads), built as the
    bert-subnet supernet directly: no transformers import in this file's setup."""
    torch.manual_seed(0)
    space = get_space("bert-subnet", **small_config("bert-subnet"))
    supernet = build_supernet(space).eval()
    with torch.no_grad():
        for p in supernet.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return space, supernet, _batches(space)


@pytest.fixture(scope="module")
def table(teacher):
    space, supernet, batches = teacher
    return block_table(space, supernet, batches, seq_len=16, latency_fn=fake_latency(space))


def _nmse(out, y, mask):
    m = mask[..., None].float()
    return float(((out - y).pow(2) * m).sum() / (y.pow(2) * m).sum())


def test_a_table_entry_is_what_the_sliced_child_computes(teacher, table):
    """At the teacher's width the layers before ``i`` are the teacher's, so the child's
    state after layer ``i`` is the sliced block applied to the teacher's block input."""
    space, supernet, batches = teacher
    full = dict(space.default())
    assert table.widths == (32, 24, 16, 8) and len(table.options) == 26
    assert np.all(table.error[0, :, table.options.index(("1", "1"))] < 1e-10)
    for i, option in [(0, ("1/2", "1/4")), (1, ("0", "3/4")), (1, SKIP)]:
        arch = {**full, f"L{i}_keep": int(option != SKIP)}
        if option != SKIP:
            arch.update({f"L{i}_heads": option[0], f"L{i}_ffn": option[1]})
        with torch.no_grad():
            want, got = [], []
            for b in batches:
                teacher_states = supernet(b, arch=full, record=("hidden_states",)).records
                child = supernet(b, arch=arch, record=("embeddings", "hidden_states")).records
                states = [*child["embeddings"], *child["hidden_states"]]
                # a skipped layer records nothing; its output is its input
                want.append(teacher_states["hidden_states"][i])
                got.append(states[i + 1] if option != SKIP else states[i])
        expected = _nmse(torch.cat(got), torch.cat(want),
                         torch.cat([b["attention_mask"] for b in batches]))
        assert table.error[0, i, table.options.index(option)] == pytest.approx(expected,
                                                                               rel=1e-5)
    # a narrower width counts the channels it drops as zeros: its error is at least their
    # share of the teacher's output energy
    for w, h in enumerate(table.widths):
        for i in range(table.layers):
            with torch.no_grad():
                y = torch.cat([supernet(b, arch=full, record=("hidden_states",))
                               .records["hidden_states"][i] for b in batches])
            m = torch.cat([b["attention_mask"] for b in batches])[..., None].float()
            lost = float((y[..., h:].pow(2) * m).sum() / (y.pow(2) * m).sum())
            assert np.all(table.error[w, i] >= lost - 1e-6) and (h == 32 or lost > 0)


def test_costs_add_up_to_the_cost_and_latency_models(teacher, table):
    space, _, _ = teacher
    latency = fake_latency(space)
    rng = np.random.default_rng(1)
    for _ in range(20):
        arch = space.sample(rng)
        assert table.cost_of(arch, "params") == count_costs(space, arch, 16).params
        assert table.cost_of(arch, "latency_ms") == pytest.approx(latency(arch), rel=1e-9)
    assert table.teacher["params"] == count_costs(space, space.default(), 16).params


def test_teacher_states_are_cached_by_their_settings(teacher, tmp_path):
    space, supernet, batches = teacher
    first = block_table(space, supernet, batches, task="sst2", cache_dir=tmp_path)
    files = list((tmp_path / CACHE_KIND).glob("*/states.safetensors"))
    assert len(files) == 1 and not list(tmp_path.rglob("*.pt")) + list(tmp_path.rglob("*.pkl"))
    before = files[0].stat().st_mtime_ns
    again = block_table(space, supernet, batches, task="sst2", cache_dir=tmp_path)
    assert files[0].stat().st_mtime_ns == before
    np.testing.assert_array_equal(first.error, again.error)
    block_table(space, supernet, _batches(space, seed=1), task="sst2", cache_dir=tmp_path)
    block_table(space, supernet, batches, task="mrpc", cache_dir=tmp_path)
    assert len(list((tmp_path / CACHE_KIND).iterdir())) == 3


def _brute_force(table, limits):
    """The least summed error over every width and every option per layer."""
    best = None
    for w in range(len(table.widths)):
        for picked in itertools.product(range(len(table.options)), repeat=table.layers):
            cost = {n: table.base[n][w] + sum(table.costs[n][w, i, c]
                                              for i, c in enumerate(picked)) for n in limits}
            if all(cost[n] <= limits[n] for n in limits):
                error = sum(table.error[w, i, c] for i, c in enumerate(picked))
                best = error if best is None else min(best, error)
    return best


@pytest.mark.parametrize("cost,fractions", [("params", (0.9, 0.55, 0.3)),
                                            ("latency_ms", (0.8, 0.5, 0.25))])
def test_the_knapsack_finds_the_brute_force_optimum(table, cost, fractions):
    for fraction in fractions:
        limit = table.teacher[cost] * fraction
        pick = knapsack(table, **{f"max_{cost}": limit})
        assert pick is not None and pick.costs[cost] <= limit
        assert pick.error == pytest.approx(_brute_force(table, {cost: limit}), abs=1e-9)
        assert pick.error == pytest.approx(table.error_of(pick.arch))


def test_a_budget_just_below_an_architecture_still_finds_the_optimum(table):
    # HiGHS returned the teacher itself for a budget 2e-6 ms below its latency (its
    # feasibility tolerance); the knapsack must ask again, not drop the teacher's width
    limit = table.teacher["latency_ms"] * (1 - 1e-7)
    pick = knapsack(table, max_latency_ms=limit)
    assert pick.costs["latency_ms"] <= limit
    assert pick.error == pytest.approx(_brute_force(table, {"latency_ms": limit}), abs=1e-9)


def test_the_knapsack_honours_both_budgets_and_says_when_none_fits(table):
    limits = {"params": table.teacher["params"] * 0.6,
              "latency_ms": table.teacher["latency_ms"] * 0.7}
    pick = knapsack(table, max_params=limits["params"], max_latency_ms=limits["latency_ms"])
    assert pick.error == pytest.approx(_brute_force(table, limits), abs=1e-9)
    assert knapsack(table, max_params=10.0) is None
    with pytest.raises(BlockwiseError, match="give a budget"):
        knapsack(table)


def test_the_front_meets_each_latency_ratio(table):
    front = knapsack_front(table, [1.5, 2, 3])
    latencies = [table.cost_of(a, "latency_ms") for a in front]
    for ratio, ms in zip([1.5, 2, 3], latencies, strict=True):
        assert ms <= table.teacher["latency_ms"] / ratio
    errors = [table.error_of(a) for a in front]
    assert errors == sorted(errors)  # a tighter budget never finds a better child
    with pytest.raises(BlockwiseError, match=r"no architecture is 1000x below the teacher's "
                                             r"latency_ms .*reaches [\d.]+x at most"):
        knapsack_front(table, [1000])


def test_a_sweep_over_the_budget_range_gives_distinct_picks_within_the_limits(table):
    top = max_ratio(table)
    cheapest = min(table.cost_of(a, "latency_ms") for a in [
        table.architecture(w, [0] * table.layers) for w in range(len(table.widths))])
    assert top == pytest.approx(table.teacher["latency_ms"] / cheapest)
    ratios = ratio_range(table, 6)
    assert ratios[0] == pytest.approx(1.0) and ratios[-1] < top and ratios == sorted(ratios)
    sweep = knapsack_sweep(table, ratios)
    ids = [p.arch.id for _, p in sweep]
    assert len(ids) == len(set(ids)) and 2 <= len(ids) <= 6
    assert sweep[0][1].error == pytest.approx(0.0, abs=1e-9)  # ratio 1: the teacher itself
    for ratio, pick in sweep:
        assert pick.costs["latency_ms"] <= table.teacher["latency_ms"] / ratio * (1 + 1e-9)
    # a run's constraint holds at every budget; the same ratios without dropping repeats
    cap = table.teacher["params"] * 0.5
    capped = knapsack_sweep(table, ratios[:3], limits={"params": cap}, distinct=False)
    assert len(capped) == 3 and all(p.costs["params"] <= cap for _, p in capped)
    with pytest.raises(BlockwiseError, match=r"within \{'params': 10.0\}.*loosen the "
                                             r"constraints"):
        knapsack_sweep(table, [1.0], limits={"params": 10.0})


def test_the_proxy_scores_a_first_k_twin_like_its_any_subset_arch(teacher, table):
    space, _, _ = teacher
    twin = bert_subnet_space(**{k: v for k, v in space.config.items()
                                if k in {"num_labels", "vocab_size", "hidden_size",
                                         "num_hidden_layers", "num_attention_heads",
                                         "intermediate_size"}}, layers="first")
    arch = {**dict(space.default()), "L1_keep": 0, "L0_heads": "1/2", "hidden_size": 24}
    first = {"hidden_size": 24, "num_hidden_layers": 1, "L0_heads": "1/2", "L0_ffn": "1",
             "L1_heads": "1/4", "L1_ffn": "0"}
    assert (BlockwiseEvaluator(twin, table)(twin.validate(first)).values
            == BlockwiseEvaluator(space, table)(space.validate(arch)).values)
    other = bert_subnet_space(hidden_size=64, num_attention_heads=4, vocab_size=500,
                              num_hidden_layers=2, intermediate_size=48)
    with pytest.raises(EvaluatorError, match="another teacher's space"):
        BlockwiseEvaluator(other, table)


def test_bad_inputs_are_refused_in_one_line(teacher, table):
    space, supernet, batches = teacher
    first = bert_subnet_space(**{k: space.config[k] for k in (
        "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
        "intermediate_size")}, layers="first")
    with pytest.raises(BlockwiseError, match=r"^blockwise: the table needs the bert-subnet "
                                             r"space with layers='any'"):
        block_table(first, supernet, batches)
    with pytest.raises(BlockwiseError, match="got no batch"):
        block_table(space, supernet, [])
    no_latency = block_table(space, supernet, batches[:1])
    with pytest.raises(BlockwiseError, match="the table has no 'latency_ms' cost"):
        knapsack_front(no_latency, [2])
    with pytest.raises(BlockwiseError, match="unknown cost 'flops'"):
        knapsack_front(table, [2], cost="flops")
    with pytest.raises(ArchitectureError, match=r"node 'L1_attn' reads 'L0_x', which is "
                                                r"neither given nor run"):
        supernet.run_nodes(batches[0], dict(space.default()), {}, ["L1_attn"])
