"""The pieces of ``benchmarks/compress_front.py``: the knapsack's exact
front of the blockwise proxy, the hypervolume plane, uniform truncation and a search
through the engine's loop, on the small random teacher of ``tests/test_blockwise.py``
(2 layers, width 32). The benchmark itself, on the real teacher, is not a test.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from benchmarks.compress_front import (
    Plane,
    front,
    knapsack_pareto,
    largest_error,
    proxy_points,
    search_points,
    truncations,
)
from evaluators.blockwise import SKIP, block_table
from evaluators.blockwise_knapsack import knapsack
from tests.test_blockwise import fake_latency, teacher  # noqa: F401 (teacher: a fixture)


@pytest.fixture(scope="module")
def table(teacher):  # noqa: F811
    space, supernet, batches = teacher
    return block_table(space, supernet, batches, seq_len=16, latency_fn=fake_latency(space))


def _every_point(table):
    """(summed error, latency) of every architecture of the space, from the arrays."""
    rows = []
    for w in range(len(table.widths)):
        for picked in itertools.product(range(len(table.options)), repeat=table.layers):
            rows.append([sum(table.error[w, i, c] for i, c in enumerate(picked)),
                         table.base["latency_ms"][w]
                         + sum(table.costs["latency_ms"][w, i, c] for i, c in enumerate(picked))])
    return np.array(rows)


def test_the_knapsack_walk_is_the_brute_force_front(table):
    picks = knapsack_pareto(table)
    got = proxy_points(table, [p.arch for p in picks])
    assert np.all(np.diff(got[:, 1]) > 0)  # fastest first, strictly slower after
    assert np.all(np.diff(got[:, 0]) < 0)  # and strictly better: none dominated
    # rounded: sums in another order differ in the last bits, which would keep a point
    # that another of the same latency dominates
    want = front(np.round(_every_point(table), 9))
    # the same staircase: each brute-force front point is matched by a pick at its latency
    assert len(got) == len(want)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-8)
    # and the slowest pick is the teacher itself (no error at the teacher's latency)
    assert got[-1, 1] == pytest.approx(table.teacher["latency_ms"])
    assert got[-1, 0] == pytest.approx(0.0, abs=1e-9)


def test_the_plane_measures_log_latency_within_its_range():
    log = Plane(error_ref=2.0, teacher_ms=10.0, log=True, max_speedup=4.0)
    assert log.hypervolume(np.array([[1.0, 5.0]])) == pytest.approx(math.log(2))
    # a point faster than 4x counts as 4x; one slower than the teacher adds nothing
    assert log.hypervolume(np.array([[1.5, 1.0]])) == pytest.approx(0.5 * math.log(4))
    assert log.hypervolume(np.array([[0.0, 12.0]])) == 0.0
    union = log.hypervolume(np.array([[1.0, 5.0], [1.5, 1.0]]))
    assert union == pytest.approx(math.log(2) + 0.5 * (math.log(4) - math.log(2)))
    linear = Plane(error_ref=2.0, teacher_ms=10.0, log=False, max_speedup=4.0)
    assert linear.hypervolume(np.array([[1.0, 5.0], [1.5, 1.0]])) == pytest.approx(
        1.0 * 5.0 + 0.5 * (5.0 - 2.5))
    assert log.hypervolume(np.empty((0, 2))) == 0.0


def test_truncation_keeps_the_first_k_whole_layers(table):
    teacher_width = table.space.config["hidden_size"]
    archs = truncations(table)
    assert len(archs) == table.layers
    for k, arch in enumerate(archs, start=1):
        assert arch["hidden_size"] == teacher_width
        for i in range(table.layers):
            assert arch[f"L{i}_keep"] == int(i < k)
            if i < k:
                assert (arch[f"L{i}_heads"], arch[f"L{i}_ffn"]) == ("1", "1")
    everywhere = truncations(table, all_widths=True)
    assert len(everywhere) == len(table.widths) * table.layers
    assert {a["hidden_size"] for a in everywhere} == set(table.widths)
    # the whole teacher is the last truncation: no error, the teacher's latency
    points = proxy_points(table, archs)
    assert points[-1, 0] == pytest.approx(0.0, abs=1e-9)
    assert points[-1, 1] == pytest.approx(table.teacher["latency_ms"])
    assert SKIP in table.options and largest_error(table) >= _every_point(table)[:, 0].max()


def test_a_search_through_the_engine_loop_scores_the_proxy(table):
    points = search_points(table, "random", seed=3, trials=6)
    assert points.shape == (6, 2)
    for error, ms in points:  # each is a sub-network's: never below the knapsack's optimum
        best = knapsack(table, max_latency_ms=ms * (1 + 1e-9))
        assert best is not None and best.error <= error + 1e-9
    np.testing.assert_array_equal(points, search_points(table, "random", seed=3, trials=6))
