"""Architectures per second for parameters + FLOPs, per registered space: the plan walk
(:func:`nas.cost.count_costs_reference`, the path before 15bb29e) against the cost
tables (:func:`nas.cost.count_costs`), in one run, on one core.

Run: ``python benchmarks/cost_model.py [--archs 5000] [--reference-archs 200]``.
Architectures are drawn with a seeded generator before any timing; both paths count the
same ones (the reference a prefix of them) and must agree on every one. ``count_costs``
includes validating the architecture; "per CPU-s" is its rate per second of this
process's CPU time (on a machine shared with other jobs the wall clock also counts
their turns); "tables" is the lookup alone. The first call for a
space builds its tables; that time is printed separately and left out of the rate.
Record the output in ``benchmarks/RESULTS.md`` with the command.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from nas.cost import count_costs, count_costs_reference
from nas.cost_tables import tables_for
from nas.space import get_space, list_spaces


def rate(fn, items) -> float:
    """Items per second of ``fn`` over ``items``, wall clock."""
    return rates(fn, items)[0]


def rates(fn, items) -> tuple[float, float]:
    """Items per second of ``fn`` over ``items``: per wall-clock second, and per second of
    this process's CPU time (what one core does when other jobs share it)."""
    wall, cpu = time.perf_counter(), time.process_time()
    for item in items:
        fn(item)
    return (len(items) / (time.perf_counter() - wall),
            len(items) / max(time.process_time() - cpu, 1e-9))


def measure(space, archs, n_reference: int, seq_len: int) -> tuple[float, ...]:
    """Reference rate, table build time (ms), ``count_costs`` rate (wall, CPU), lookup-only
    rate."""
    ref_archs = archs[:n_reference]
    reference = rate(lambda a: count_costs_reference(space, a, seq_len), ref_archs)
    start = time.perf_counter()
    tables = tables_for(space, seq_len)
    build_ms = (time.perf_counter() - start) * 1000
    fast, fast_cpu = rates(lambda a: count_costs(space, a, seq_len), archs)
    lookup = rate(tables.count, archs)
    for a in ref_archs:  # the speed is worth nothing unless the counts are equal
        if count_costs(space, a, seq_len) != count_costs_reference(space, a, seq_len):
            raise SystemExit(f"{space.name}: the fast count differs from the reference for {a}")
    return reference, build_ms, fast, fast_cpu, lookup


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--archs", type=int, default=5000, help="architectures per space")
    parser.add_argument("--reference-archs", type=int, default=200)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--spaces", default="*", help="wildcard over registered spaces")
    args = parser.parse_args()
    L = args.seq_len
    print(f"seq_len {L}; {args.archs} architectures per space ({args.reference_archs} for the "
          "reference); one process, one core")
    print(f"{'space':<18} {'reference/s':>11} {'build ms':>9} {'count_costs/s':>14} "
          f"{'per CPU-s':>12} {'tables/s':>10} {'speed-up':>9}")
    worst = worst_cpu = float("inf")
    for name in list_spaces(args.spaces, tabular=False):
        space = get_space(name)
        rng = np.random.default_rng(0)
        archs = [space.sample(rng) for _ in range(args.archs)]
        reference, build_ms, fast, fast_cpu, lookup = measure(space, archs,
                                                              args.reference_archs, L)
        worst, worst_cpu = min(worst, fast), min(worst_cpu, fast_cpu)
        print(f"{name:<18} {reference:>11,.0f} {build_ms:>9.0f} {fast:>14,.0f} "
              f"{fast_cpu:>12,.0f} {lookup:>10,.0f} {fast / reference:>8.0f}x")
    print(f"slowest space: {worst:,.0f} architectures/s with count_costs ({worst_cpu:,.0f} per "
          "second of CPU time; target 10,000)")


if __name__ == "__main__":
    main()
