"""Pareto dominance and hypervolume of objective vectors, all objectives *minimised*
(flip the sign of a maximised one first). Used by LaMOO (:mod:`searchers.lamoo`; Zhao et
al., ICLR 2022) and for judging multi-objective searches by the hypervolume of their
front (Zitzler & Thiele, 1998).
"""

from __future__ import annotations

import numpy as np


def dominance_numbers(points: np.ndarray) -> np.ndarray:
    """For each row of ``points`` (n × m), how many rows dominate it: are no worse in
    every objective and better in one (LaMOO's dominance number, Zhao et al., 2022, §4;
    0 on the Pareto front; equal rows do not dominate each other)."""
    f = np.asarray(points, dtype=np.float64)
    no_worse = (f[:, None, :] <= f[None, :, :]).all(-1)  # [i, j]: i is no worse than j
    better = (f[:, None, :] < f[None, :, :]).any(-1)
    return (no_worse & better).sum(0)


def hypervolume(points: np.ndarray, reference: np.ndarray) -> float:
    """The volume that ``points`` (n × m) dominate, bounded by ``reference`` (m): the
    Lebesgue measure of the union of the boxes ``[p, reference]``. Points not strictly
    below the reference in every objective add nothing. Exact: a sweep in two dimensions,
    slicing along the last objective above (HSO, While et al., 2006)."""
    ref = np.asarray(reference, dtype=np.float64)
    f = np.asarray(points, dtype=np.float64).reshape(-1, len(ref))
    f = f[(f < ref).all(1)]
    if len(f) == 0:
        return 0.0
    f = np.unique(f[dominance_numbers(f) == 0], axis=0)
    return _hv(f, ref)


def _hv(f: np.ndarray, ref: np.ndarray) -> float:
    """Hypervolume of mutually non-dominated points below ``ref`` (or any points, for the
    recursive slices)."""
    m = f.shape[1]
    if m == 1:
        return float(ref[0] - f[:, 0].min())
    if m == 2:
        order = np.lexsort((f[:, 1], f[:, 0]))
        x, y = f[order, 0], f[order, 1]
        best = np.minimum.accumulate(y)  # the staircase: the best second objective so far
        widths = np.diff(np.append(x, ref[0]))
        return float((widths * (ref[1] - best)).sum())
    order = np.argsort(f[:, -1], kind="stable")
    f = f[order]
    tops = np.append(f[1:, -1], ref[-1])
    total = 0.0
    for k in range(len(f)):
        depth = tops[k] - f[k, -1]
        if depth > 0:
            total += depth * _hv(f[:k + 1, :-1], ref[:-1])
    return total
