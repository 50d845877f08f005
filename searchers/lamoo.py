"""LaMOO as an Optuna sampler: multi-objective optimisation by learned space partitions
(Zhao, Wang, Yang, Zhang, Guo & Tian, "Multi-objective Optimization by Learning Space
Partitions", ICLR 2022; docs/reference.md#lamoo), LaNAS's multi-objective successor.

Every ``rebuild_every`` complete trials the sampler rebuilds a tree over the encoded
architectures of the complete trials (the LaNAS tree of :mod:`searchers.partition`):

1. **label** (paper §4, "learning to split"): a node's samples get their *dominance
   number* among the node's samples (how many of them dominate it, all objectives with
   the study's directions); the samples with a dominance number at most the node's
   median are *good* (closer to the Pareto front), the others bad. The public code ranks
   by dominance number and takes the better half; taking the median keeps equal
   dominance numbers on one side;
2. **classify**: a linear classifier (L2-regularised logistic regression, shared with
   LaNAS, for the paper's SVM) learns good vs bad on x; the node's samples go to the
   children by its prediction, so each child is a region of the space, and a node splits
   while it holds more than ``leaf_size`` samples, its depth is below ``height`` and the
   classifier separates them;
3. **select** (paper §4, "exploration"): from the root, UCB on the children's
   *hypervolume*: ``HV(child) + 2·cp·HV(root)·sqrt(2·ln n_parent / n_child)``, the
   hypervolume of the child's samples with the objectives scaled to [0, 1] over the
   tree's samples (minimised) and the reference point ``1 + reference_margin`` in every
   objective (the nadir of the samples, pushed out by 10% of each range). ``cp`` is
   relative to the root's hypervolume (the paper sets Cp to about 10% of the
   hypervolume), so it does not depend on the objectives' units;
4. **sample inside the region** (paper §4, "sampling"): a random walk that never leaves
   the selected leaf's region (:func:`searchers.partition.walk_in_region`) starts from a
   random sample of the leaf, re-draws each parameter in turn among the values that keep
   every classifier on the path satisfied, and proposes the first point after
   ``min_sweeps`` sweeps that no trial has used and that ``constraint`` accepts. This
   replaces the paper's inner optimiser (random sampling, CMA-ES or qEHVI restricted to
   the region) with its random variant, and LaNAS's rejection from the whole space,
   which finds few points once the region is small. When the walk finds none (the
   region is exhausted) an unseen random point of the whole space is proposed.

The first ``n_startup_trials`` trials are unseen uniform random samples. The sampler
handles one objective too (the dominance number is then the rank), but is meant for
Pareto searches: accuracy against latency or parameters. Exact resume, workers sharing a
study and the encoding are as for LaNAS (:mod:`searchers.partition_sampler`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial

from searchers.pareto import dominance_numbers, hypervolume
from searchers.partition import Encoding, PartitionError, PartitionTree, grow_tree, walk_in_region
from searchers.partition_sampler import PartitionSampler

#: Defaults (documented in docs/optuna.md, "LaMOO").
STARTUP = 10  # LaNAS's initial samples (docs/reference.md#lanas)
LEAF_SIZE = 10
HEIGHT = 5  # LaNAS's fixed height
CP = 0.1  # of the root's hypervolume (the paper: Cp ≈ 10% of the hypervolume)
REFERENCE_MARGIN = 0.1


class LaMOOError(PartitionError):
    """The LaMOO sampler is used wrongly (bad settings)."""


def scaled_objectives(study: Study, trials: Sequence[FrozenTrial]) -> np.ndarray:
    """The trials' values as a minimised matrix (n × objectives), each column scaled to
    [0, 1] over ``trials``; a non-finite value counts as the column's worst finite one."""
    signs = np.array([-1.0 if d == StudyDirection.MAXIMIZE else 1.0 for d in study.directions])
    f = np.array([t.values for t in trials], dtype=np.float64) * signs
    for j in range(f.shape[1]):
        finite = np.isfinite(f[:, j])
        worst = f[finite, j].max() if finite.any() else 0.0
        f[~finite, j] = worst
    low, high = f.min(0), f.max(0)
    span = np.where(high > low, high - low, 1.0)
    return (f - low) / span


class LaMOOSampler(PartitionSampler):
    """LaMOO's learned partition as an Optuna sampler (module docstring).

    Parameters
    ----------
    n_startup_trials: random trials before the first tree (default 10).
    rebuild_every: complete trials between two rebuilds (default 1: every trial, as the
        paper's loop).
    cp: UCB exploration, relative to the root's hypervolume (default 0.1).
    height: the largest depth of the tree (default 5).
    leaf_size: a node with at most this many samples is not split (default 10).
    reference_margin: the reference point of the hypervolume, past the worst sample by
        this fraction of each objective's range (default 0.1).
    min_sweeps: sweeps of the walk before its first proposal (default 2).
    max_sweeps: sweeps of the walk before the random fallback (default 50).
    max_values: values tried per parameter and step of the walk when it has more
        (long integer ranges, floats; default 64).
    The others: :class:`~searchers.partition_sampler.PartitionSampler`.
    """

    error = LaMOOError

    def __init__(self, *, search_space: Mapping[str, BaseDistribution] | None = None,
                 seed: int | None = None, n_startup_trials: int = STARTUP,
                 rebuild_every: int = 1, cp: float = CP, height: int = HEIGHT,
                 leaf_size: int = LEAF_SIZE, reference_margin: float = REFERENCE_MARGIN,
                 min_sweeps: int = 2, max_sweeps: int = 50, max_values: int = 64,
                 max_draws: int = 20_000, batch_size: int = 1000,
                 encodings: Mapping[str, np.ndarray] | None = None,
                 constraint: Callable[[dict[str, Any]], bool] | None = None,
                 l2: float = 1.0) -> None:
        super().__init__(
            search_space=search_space, seed=seed, n_startup_trials=n_startup_trials,
            rebuild_every=rebuild_every, leaf_size=leaf_size, max_draws=max_draws,
            batch_size=batch_size, encodings=encodings, constraint=constraint, l2=l2,
            checks=[("cp", cp, cp >= 0, ">= 0"), ("height", height, height >= 1, ">= 1"),
                    ("reference_margin", reference_margin, reference_margin > 0, "> 0"),
                    ("min_sweeps", min_sweeps, min_sweeps >= 1, ">= 1"),
                    ("max_sweeps", max_sweeps, max_sweeps >= min_sweeps,
                     f">= min_sweeps ({min_sweeps})"),
                    ("max_values", max_values, max_values >= 2, ">= 2")])
        self.cp = cp
        self.height = height
        self.reference_margin = reference_margin
        self.min_sweeps = min_sweeps
        self.max_sweeps = max_sweeps
        self.max_values = max_values

    def build(self, study: Study, x: np.ndarray, used: Sequence[FrozenTrial]) -> PartitionTree:
        f = scaled_objectives(study, used)
        reference = np.full(f.shape[1], 1.0 + self.reference_margin)

        def label(rows: np.ndarray, depth: int) -> np.ndarray:
            dominated = dominance_numbers(f[rows])
            return dominated <= np.median(dominated)

        return grow_tree(x, [t.number for t in used], label=label,
                         value=lambda rows: hypervolume(f[rows], reference),
                         height=self.height, leaf_size=self.leaf_size, l2=self.l2)

    def propose(self, study: Study, encoding: Encoding, tree: PartitionTree,
                rng: np.random.Generator, seen: set[Hashable],
                trials: Sequence[FrozenTrial]) -> dict[str, Any] | None:
        path = tree.select(self.cp * tree.root.value)
        leaf = tree.end(path) or tree.root
        number = tree.trials[int(rng.choice(leaf.rows))]
        start = next(t for t in trials if t.number == number)
        found = walk_in_region(encoding, tree, path, start.params, rng,
                               accept=lambda p: self.accept(encoding, p, seen),
                               min_sweeps=self.min_sweeps, max_sweeps=self.max_sweeps,
                               max_values=self.max_values)
        if found is None:
            self.last_proposal = {"how": "fallback", "depth": len(path)}
            return None
        self.last_proposal = {"how": "region", "depth": len(path), "sweeps": found[1],
                              "start": number}
        return found[0]
