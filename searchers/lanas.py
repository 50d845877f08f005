"""LaNAS as an Optuna sampler: a learned partition of the search space (docs/reference.md#lanas;
Wang et al., 2019/2020; EfficientBERT's settings, Dong et al., 2021).

Every ``rebuild_every`` finished trials the sampler rebuilds a tree over the encoded
architectures of the finished trials:

1. **split**: a node's samples are labelled good or bad, above/below the median score
   (``split="median"``, EfficientBERT) or by 2-means on (x, f) (``"kmeans"``, LA-MCTS);
2. **classify**: a linear classifier (L2-regularised logistic regression, fitted with
   ``scipy.optimize``) learns good vs bad on x; the node's samples go to its *good* and
   *bad* children by the classifier's prediction, so each child is a region of the space
   (a half-space intersection), not just a set of points;
3. a node splits while it holds more than ``leaf_size`` samples, its depth is below the
   height and the classifier separates the samples (both children non-empty). The height
   is ``height`` when given, else EfficientBERT's schedule: 1 + the number of
   ``height_thresholds`` (400, 800, 1600, 3200) that the sample count exceeds. Height
   counts split levels: height 1 is a root split once into a good and a bad leaf.

A proposal descends from the root by **UCB**, ``x̄ + 2·Cp·sqrt(2·ln n_parent / n)``
(``cp=0``, EfficientBERT's choice, always takes the better child; LaNAS uses
Cp ≈ 0.1·max f), then **rejection-samples** the chosen leaf: uniform random candidates
are drawn (up to ``max_draws`` = 20,000) and the first one that *every* classifier on the
path routes the way the path went, that no trial has used yet and that ``constraint``
accepts is proposed. (LaNAS's one-shot code accepts a candidate when *any* classifier
agrees; that is a bug and is not copied.) When none passes, any unseen feasible random
candidate is proposed.

The tree, its classifiers and the encoding are shared with LaMOO
(:mod:`searchers.partition`), and so is the sampler's plumbing
(:class:`searchers.partition_sampler.PartitionSampler`: a tree that is a pure function of
the trials and the seed, draws seeded by ``(seed, proposal index)`` for exact resume,
``n_startup_trials`` random samples first).

The encoding is the space's (numeric choices by value, others one-hot; docs/reference.md#lanas) when
the caller passes ``encodings`` (:meth:`searchers.optuna_bridge.SpaceBridge.encoding_tables`);
otherwise categorical parameters are encoded by their numeric value when every choice
has one, else one-hot, and integers and floats by value (log value on a log scale).
Columns are standardised over the tree's samples before the classifiers are fitted.

Parameters outside the relative search space are sampled independently (uniformly).
The sampler is single-objective: a multi-objective study must scalarise (e.g. accuracy
with a latency penalty, :class:`evaluators.penalty.PenaltyEvaluator` ``targets``) and is
otherwise refused with one line.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial

from searchers.partition import (
    Encoding,
    PartitionError,
    PartitionTree,
    Path,
    fit_linear_classifier,
    grow_tree,
    kmeans_seed,
    two_means,
)
from searchers.partition_sampler import PartitionSampler

__all__ = ["LaNASError", "LaNASSampler", "build_tree", "fit_linear_classifier"]

#: EfficientBERT's settings (docs/reference.md#lanas).
EFFICIENTBERT_STARTUP = 80
EFFICIENTBERT_REBUILD_EVERY = 10
EFFICIENTBERT_HEIGHT_THRESHOLDS = (400, 800, 1600, 3200)
EFFICIENTBERT_MAX_DRAWS = 20_000


class LaNASError(PartitionError):
    """The LaNAS sampler is used wrongly (a multi-objective study, bad settings)."""


def single_objective_only(study: Study) -> None:
    if len(study.directions) > 1:
        raise LaNASError(
            f"LaNASSampler is single-objective, but the study has {len(study.directions)} "
            "objectives; scalarise them (e.g. accuracy with a latency penalty) or use "
            "lamoo, nsga2, tpe or gp")


def build_tree(x: np.ndarray, y: np.ndarray, trials: Sequence[int], *, height: int,
               leaf_size: int, split: str, seed: int, l2: float = 1.0) -> PartitionTree:
    """LaNAS's partition tree of samples ``x`` (rows) with scores ``y`` (higher is
    better): a node's samples are good above the median score (``split="median"``) or in
    the better of two 2-means clusters of (x, f) (``"kmeans"``); a node's value is its
    mean score. A pure function of its arguments (module docstring, steps 1–3)."""
    sigma = x.std(0)
    sigma[sigma < 1e-12] = 1.0
    xs = (x - x.mean(0)) / sigma
    ys = (y - y.mean()) / (y.std() or 1.0)

    def label(rows: np.ndarray, depth: int) -> np.ndarray | None:
        if np.ptp(y[rows]) == 0:
            return None
        if split == "median":
            return y[rows] >= np.median(y[rows])
        return two_means(np.hstack([xs[rows], ys[rows, None]]), y[rows],
                         seed=kmeans_seed(seed, depth, rows))

    return grow_tree(x, trials, label=label, value=lambda rows: float(y[rows].mean()),
                     height=height, leaf_size=leaf_size, l2=l2)


class LaNASSampler(PartitionSampler):
    """LaNAS / LA-MCTS learned space partition as an Optuna sampler (module docstring).

    Parameters
    ----------
    split: ``"median"`` (EfficientBERT) or ``"kmeans"`` (LA-MCTS).
    cp: the UCB exploration constant (EfficientBERT: 0; LaNAS ≈ 0.1·max f).
    height: a fixed tree height; ``None`` uses ``height_thresholds`` (EfficientBERT).
    max_draws: random candidates tried in the selected leaf per proposal.
    The others: :class:`~searchers.partition_sampler.PartitionSampler`.
    """

    error = LaNASError

    def __init__(self, *, search_space: Mapping[str, BaseDistribution] | None = None,
                 seed: int | None = None, n_startup_trials: int = EFFICIENTBERT_STARTUP,
                 rebuild_every: int = EFFICIENTBERT_REBUILD_EVERY,
                 split: Literal["median", "kmeans"] = "median", cp: float = 0.0,
                 height: int | None = None,
                 height_thresholds: Sequence[int] = EFFICIENTBERT_HEIGHT_THRESHOLDS,
                 leaf_size: int = 20, max_draws: int = EFFICIENTBERT_MAX_DRAWS,
                 batch_size: int = 1000, encodings: Mapping[str, np.ndarray] | None = None,
                 constraint: Callable[[dict[str, Any]], bool] | None = None,
                 l2: float = 1.0) -> None:
        super().__init__(
            search_space=search_space, seed=seed, n_startup_trials=n_startup_trials,
            rebuild_every=rebuild_every, leaf_size=leaf_size, max_draws=max_draws,
            batch_size=batch_size, encodings=encodings, constraint=constraint, l2=l2,
            checks=[("split", split, split in ("median", "kmeans"), "'median' or 'kmeans'"),
                    ("cp", cp, cp >= 0, ">= 0"),
                    ("height", height, height is None or height >= 1, ">= 1")])
        self.split = split
        self.cp = cp
        self.height = height
        self.height_thresholds = tuple(sorted(height_thresholds))

    def check_study(self, study: Study) -> None:
        single_objective_only(study)

    def build(self, study: Study, x: np.ndarray, used: Sequence[FrozenTrial]) -> PartitionTree:
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        y = np.array([sign * float(t.value) for t in used])  # type: ignore[arg-type]  # complete trials have a value
        m = len(used)
        height = self.height or 1 + sum(m > t for t in self.height_thresholds)
        return build_tree(x, y, [t.number for t in used], height=height,
                          leaf_size=self.leaf_size, split=self.split, seed=self._seed,
                          l2=self.l2)

    def propose(self, study: Study, encoding: Encoding, tree: PartitionTree,
                rng: np.random.Generator, seen: set[Hashable],
                trials: Sequence[FrozenTrial]) -> dict[str, Any] | None:
        path = tree.select(self.cp)
        params = self._in_leaf(encoding, tree, path, rng, seen)
        if params is None:
            self.last_proposal = {"how": "fallback", "depth": len(path)}
        return params

    def _in_leaf(self, encoding: Encoding, tree: PartitionTree, path: Path,
                 rng: np.random.Generator, seen: set[Hashable]) -> dict[str, Any] | None:
        """Rejection sampling: the first draw that every classifier on ``path`` routes
        along the path, unseen and feasible."""
        drawn_total = 0
        while drawn_total < self.max_draws:
            n = min(self.batch_size, self.max_draws - drawn_total)
            drawn = encoding.draw(rng, n)
            drawn_total += n
            inside = tree.inside(path, tree.standardise(encoding.vectors(drawn)))
            for row in np.flatnonzero(inside):
                params = encoding.params(drawn, int(row))
                if self.accept(encoding, params, seen):
                    self.last_proposal = {"how": "leaf", "depth": len(path),
                                          "draws": drawn_total - n + int(row) + 1}
                    return params
        return None
