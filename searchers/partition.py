"""Learned space partitions (LaNAS, Wang et al., 2019/2020; LA-MCTS, Wang et al., 2020;
LaMOO, Zhao et al., ICLR 2022): the pieces the partition samplers share (docs/reference.md#lanas,
#lamoo).

* :class:`Encoding`: numeric vectors of an Optuna parameter set (the space's encoding),
  uniform random candidates drawn as whole batches, and the values one parameter can
  take (for walks inside a region);
* :func:`fit_linear_classifier`: the linear classifier of a split (L2-regularised
  logistic regression; the papers use an SVM or logistic regression);
* :func:`grow_tree` / :class:`PartitionTree`: the tree of regions. Each split labels a
  node's samples good or bad by a *labelling rule* (LaNAS: the score's median or 2-means;
  LaMOO: the dominance number), fits the classifier on x, and sends the samples to the
  good and bad children by the classifier's *prediction*, so every child is a region of
  the space (an intersection of half-spaces) and every sample of a leaf lies inside it;
  UCB down the tree picks a leaf;
* :func:`walk_in_region`: proposals *inside* a region, by a random walk that never
  leaves it (LaMOO samples inside the selected region rather than by rejection from the
  whole space; LaNAS's rejection sampling uses :meth:`PartitionTree.inside`).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.trial import FrozenTrial
from scipy.optimize import minimize

from nas.choices import as_number
from nas.errors import NasError


class PartitionError(NasError):
    """A partition sampler is used wrongly (bad settings, an encoding that does not fit)."""


# ---------------------------------------------------------------------------
# the encoding
# ---------------------------------------------------------------------------


class Encoding:
    """Numeric vectors for parameter sets of a search space, and uniform random candidates
    drawn directly as vectors (so rejection sampling runs on whole batches)."""

    def __init__(self, space: Mapping[str, BaseDistribution],
                 tables: Mapping[str, np.ndarray] | None = None) -> None:
        self.names = sorted(space)
        self.space = {n: space[n] for n in self.names}
        self.tables: dict[str, np.ndarray] = {}
        for n, d in self.space.items():
            if isinstance(d, CategoricalDistribution):
                table = None if tables is None else tables.get(n)
                self.tables[n] = (np.asarray(table, dtype=np.float64) if table is not None
                                  else _default_table(d.choices))
                if self.tables[n].shape[0] != len(d.choices):
                    raise PartitionError(f"encoding of {n!r}: {self.tables[n].shape[0]} rows for "
                                     f"{len(d.choices)} choices")
        #: each parameter's columns in the encoded vector
        self.blocks: dict[str, slice] = {}
        start = 0
        for n in self.names:
            width = self.tables[n].shape[1] if n in self.tables else 1
            self.blocks[n] = slice(start, start + width)
            start += width
        self.width = start
        self._covered: set[tuple[int, Any]] = set()

    def encode(self, params: Mapping[str, Any]) -> np.ndarray:
        """One parameter set as a vector."""
        parts = []
        for n, d in self.space.items():
            if n in self.tables:
                parts.append(self.tables[n][int(d.to_internal_repr(params[n]))])
            else:
                parts.append([_numeric(d, params[n])])
        return np.concatenate([np.asarray(p, dtype=np.float64) for p in parts])

    def draw(self, rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
        """``n`` uniform random candidates, column per parameter (categoricals by index)."""
        return {name: _draw(d, rng, n) for name, d in self.space.items()}

    def vectors(self, drawn: Mapping[str, np.ndarray]) -> np.ndarray:
        """The encoded matrix of drawn candidates (rows)."""
        return np.concatenate([self.block(n, drawn[n]) for n in self.names], axis=1)

    def block(self, name: str, values: np.ndarray) -> np.ndarray:
        """The columns of parameter ``name`` (its :attr:`blocks`) for drawn ``values``."""
        if name in self.tables:
            return self.tables[name][values.astype(int)]
        x = values.astype(np.float64)
        return (np.log(x) if self.space[name].log else x)[:, None]  # type: ignore[attr-defined]  # numeric: Int/FloatDistribution

    def as_drawn(self, params: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """One parameter set in :meth:`draw`'s form (one row; categoricals by index)."""
        out: dict[str, np.ndarray] = {}
        for n, d in self.space.items():
            if isinstance(d, CategoricalDistribution):
                out[n] = np.array([int(d.to_internal_repr(params[n]))])
            elif isinstance(d, IntDistribution):
                out[n] = np.array([int(params[n])], dtype=np.int64)
            else:
                out[n] = np.array([float(params[n])])
        return out

    def values(self, name: str, rng: np.random.Generator, limit: int) -> np.ndarray:
        """Values parameter ``name`` can take, in :meth:`draw`'s form: every one when at
        most ``limit`` exist (categoricals, short integer ranges), else ``limit`` random
        ones (long integer ranges, floats)."""
        d = self.space[name]
        if isinstance(d, CategoricalDistribution):
            return np.arange(len(d.choices))
        if isinstance(d, IntDistribution):
            step = 1 if d.log else d.step
            count = (d.high - d.low) // step + 1
            if count <= limit:
                return d.low + step * np.arange(count)
            return d.low + step * rng.choice(count, size=limit, replace=False)
        assert isinstance(d, FloatDistribution)  # noqa: S101 (the three kinds Optuna has)
        if d.step is not None:
            count = int(round((d.high - d.low) / d.step)) + 1
            if count <= limit:
                return np.clip(d.low + d.step * np.arange(count), d.low, d.high)
        return _draw(d, rng, limit)

    def params(self, drawn: Mapping[str, np.ndarray], row: int) -> dict[str, Any]:
        """Row ``row`` of drawn candidates as an Optuna parameter set (Python scalars)."""
        out: dict[str, Any] = {}
        for n, d in self.space.items():
            v = drawn[n][row]
            if isinstance(d, CategoricalDistribution):
                out[n] = d.choices[int(v)]
            elif isinstance(d, IntDistribution):
                out[n] = int(v)
            else:
                out[n] = float(v)
        return out

    def covers(self, trial: FrozenTrial) -> bool:
        """Whether ``trial`` set every parameter, within this space's distributions.
        A trial that does keeps doing so (parameters are never unset), so the answer is
        remembered: looking a value up among thousands of choices at every ask, for every
        trial, was most of the ask's cost in a large space."""
        key = (trial.number, trial.datetime_start)
        if key in self._covered:
            return True
        for n, d in self.space.items():
            if n not in trial.params:
                return False
            try:
                if not d._contains(d.to_internal_repr(trial.params[n])):
                    return False
            except (ValueError, TypeError):
                return False
        self._covered.add(key)
        return True


def _default_table(choices: Sequence[Any]) -> np.ndarray:
    numbers = [as_number(c) if c is not None else None for c in choices]
    if all(x is not None for x in numbers):
        return np.array(numbers, dtype=np.float64)[:, None]
    return np.eye(len(choices))


def _numeric(d: BaseDistribution, value: Any) -> float:
    x = float(value)
    return math.log(x) if getattr(d, "log", False) else x


def _draw(d: BaseDistribution, rng: np.random.Generator, n: int) -> np.ndarray:
    if isinstance(d, CategoricalDistribution):
        return rng.integers(len(d.choices), size=n)
    if isinstance(d, IntDistribution):
        if d.log:  # as optuna's RandomSampler: log-uniform, then rounded into range
            u = rng.uniform(math.log(d.low - 0.5), math.log(d.high + 0.5), size=n)
            return np.clip(np.round(np.exp(u)), d.low, d.high).astype(np.int64)
        k = rng.integers((d.high - d.low) // d.step + 1, size=n)
        return d.low + k * d.step
    assert isinstance(d, FloatDistribution)  # noqa: S101 (the three kinds Optuna has)
    if d.log:
        return np.clip(np.exp(rng.uniform(math.log(d.low), math.log(d.high), size=n)),
                       d.low, d.high)
    if d.step is not None:
        k = rng.integers(int(round((d.high - d.low) / d.step)) + 1, size=n)
        return np.clip(d.low + k * d.step, d.low, d.high)
    return rng.uniform(d.low, d.high, size=n) if d.high > d.low else np.full(n, d.low)


# ---------------------------------------------------------------------------
# the partition tree
# ---------------------------------------------------------------------------


def fit_linear_classifier(x: np.ndarray, good: np.ndarray, l2: float = 1.0
                          ) -> tuple[np.ndarray, float]:
    """L2-regularised logistic regression (``good`` vs not) by L-BFGS; returns ``(w, b)``
    such that ``x·w + b > 0`` predicts good. Deterministic: it starts from zero."""
    s = np.where(good, 1.0, -1.0)
    n, d = x.shape

    def loss(theta: np.ndarray) -> tuple[float, np.ndarray]:
        w, b = theta[:d], theta[d]
        margin = s * (x @ w + b)
        value = np.logaddexp(0.0, -margin).sum() + 0.5 * l2 * (w @ w)
        g = -s * _sigmoid(-margin)  # d loss / d (x·w + b)
        return float(value), np.concatenate([x.T @ g + l2 * w, [g.sum()]])

    res = minimize(loss, np.zeros(d + 1), jac=True, method="L-BFGS-B",
                   options={"maxiter": 200})
    return res.x[:d], float(res.x[d])


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def two_means(points: np.ndarray, scores: np.ndarray, seed: int, iters: int = 50
              ) -> np.ndarray:
    """2-means on the rows of ``points`` (LA-MCTS clusters (x, f)); returns True for the
    cluster with the higher mean score. k-means++ start from a generator seeded by
    ``seed``, so the result is a pure function of the data and the seed."""
    rng = np.random.default_rng(seed)
    first = int(rng.integers(len(points)))
    dist = ((points - points[first]) ** 2).sum(1)
    total = dist.sum()
    second = int(rng.choice(len(points), p=dist / total)) if total > 0 else first
    centres = points[[first, second]].astype(np.float64)
    labels = np.zeros(len(points), dtype=bool)
    for _ in range(iters):
        d = ((points[:, None, :] - centres[None]) ** 2).sum(-1)
        new = d[:, 1] < d[:, 0]
        if _ > 0 and np.array_equal(new, labels):
            break
        labels = new
        for k, mask in ((0, ~labels), (1, labels)):
            if mask.any():
                centres[k] = points[mask].mean(0)
    if labels.all() or not labels.any():
        return labels
    return labels if scores[labels].mean() >= scores[~labels].mean() else ~labels


@dataclass
class Node:
    """A region of the space: the samples routed to it, its value (what UCB ranks: LaNAS's
    mean score, LaMOO's hypervolume) and its classifier once split."""

    rows: np.ndarray
    depth: int
    value: float
    w: np.ndarray | None = None
    b: float = 0.0
    good: Node | None = None
    bad: Node | None = None

    @property
    def leaf(self) -> bool:
        return self.good is None

    def children(self) -> tuple[Node, Node]:
        """``(good, bad)`` of a split node (a split sets both)."""
        if self.good is None or self.bad is None:
            raise ValueError("a leaf has no children")
        return self.good, self.bad

    @property
    def n(self) -> int:
        return len(self.rows)


#: a split node on a path, and whether the path went to its good child
Path = list[tuple[Node, bool]]


@dataclass
class PartitionTree:
    """The tree built from ``trials`` (numbers; a sample's row is its place here)."""

    root: Node
    mu: np.ndarray
    sigma: np.ndarray
    trials: tuple[int, ...]
    height: int

    def standardise(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mu) / self.sigma

    def leaves(self) -> list[Node]:
        """Leaves from good to bad (depth-first, good child first)."""
        out, stack = [], [self.root]
        while stack:
            node = stack.pop()
            if node.leaf:
                out.append(node)
            else:
                good, bad = node.children()
                stack += [bad, good]
        return out

    def select(self, cp: float) -> Path:
        """The UCB path from the root, ``value + 2·cp·sqrt(2·ln n_parent / n)`` at each
        split (LaNAS; LaMOO with the hypervolume as the value): ``(node, went_good)``."""
        path, node = [], self.root
        while not node.leaf:
            good, bad = node.children()

            def ucb(child: Node, parent: Node = node) -> float:
                return child.value + 2.0 * cp * math.sqrt(2.0 * math.log(parent.n) / child.n)

            went_good = ucb(good) >= ucb(bad)
            path.append((node, went_good))
            node = good if went_good else bad
        return path

    @staticmethod
    def end(path: Path) -> Node | None:
        """The node a path leads to (``None`` for the empty path: the root)."""
        if not path:
            return None
        node, went_good = path[-1]
        return node.good if went_good else node.bad

    @staticmethod
    def inside(path: Path, xs: np.ndarray) -> np.ndarray:
        """Which rows of standardised vectors ``xs`` lie in the region of ``path``: *every*
        classifier on the path routes them the way the path went. (LaNAS's one-shot code
        accepts a row when *any* classifier agrees; that is a bug, not copied.)"""
        ok = np.ones(len(xs), dtype=bool)
        for node, went_good in path:
            ok &= (xs @ node.w + node.b > 0) == went_good
        return ok

    def route(self, x: np.ndarray) -> Node:
        """The leaf a raw encoded vector falls into by the classifiers."""
        xs, node = self.standardise(x), self.root
        while not node.leaf:
            good, bad = node.children()
            node = good if float(xs @ node.w + node.b) > 0 else bad
        return node


#: a labelling rule: ``(rows, depth) -> good`` (a boolean per row) or ``None`` (no split)
Labels = Callable[[np.ndarray, int], "np.ndarray | None"]


def grow_tree(x: np.ndarray, trials: Sequence[int], *, label: Labels,
              value: Callable[[np.ndarray], float], height: int, leaf_size: int,
              l2: float = 1.0) -> PartitionTree:
    """The partition tree of samples ``x`` (rows; columns standardised first): a node
    splits while its depth is below ``height``, it holds more than ``leaf_size`` samples,
    ``label`` gives it both good and bad samples, and the classifier fitted on those
    labels predicts both; its children take the samples the classifier predicts good and
    bad. ``value(rows)`` is a node's value for UCB. A pure function of its arguments."""
    mu = x.mean(0)
    sigma = x.std(0)
    sigma[sigma < 1e-12] = 1.0
    xs = (x - mu) / sigma

    def grow(rows: np.ndarray, depth: int) -> Node:
        node = Node(rows, depth, value(rows))
        if depth >= height or len(rows) <= leaf_size:
            return node
        labels = label(rows, depth)
        if labels is None or labels.all() or not labels.any():
            return node
        w, b = fit_linear_classifier(xs[rows], labels, l2)
        predicted = xs[rows] @ w + b > 0
        if predicted.all() or not predicted.any():  # the classifier does not separate them
            return node
        node.w, node.b = w, b
        node.good = grow(rows[predicted], depth + 1)
        node.bad = grow(rows[~predicted], depth + 1)
        return node

    root = grow(np.arange(len(x)), 0)
    return PartitionTree(root, mu, sigma, tuple(trials), height)


def kmeans_seed(seed: int, depth: int, rows: np.ndarray) -> int:
    """The 2-means seed of a node: a function of the sampler's seed and the node."""
    return zlib.crc32(f"{seed}:{depth}:{rows[0]}".encode())


# ---------------------------------------------------------------------------
# proposals inside a region
# ---------------------------------------------------------------------------


def walk_in_region(encoding: Encoding, tree: PartitionTree, path: Path,
                   start: Mapping[str, Any], rng: np.random.Generator, *,
                   accept: Callable[[dict[str, Any]], bool], min_sweeps: int,
                   max_sweeps: int, max_values: int) -> tuple[dict[str, Any], int] | None:
    """A parameter set inside the region of ``path`` that ``accept`` takes, by a random
    walk from ``start`` (a parameter set inside the region: a sample of the leaf).

    Each sweep visits the parameters in a random order; each visit draws the parameter's
    new value uniformly among the values (all of a categorical's or a small integer
    range's, else ``max_values`` random ones) that keep the point inside the region with
    the others fixed, so the walk never leaves the region (coordinate-wise hit-and-run;
    its stationary distribution is uniform over the region's points that it can reach).
    After ``min_sweeps`` sweeps, the first point ``accept`` takes is returned with the
    number of sweeps; ``None`` after ``max_sweeps`` without one.
    """
    point = encoding.as_drawn(start)
    # the classifiers on the path with the standardisation folded in, so that a step
    # scores its candidates from the changed parameter's columns alone: the score of x
    # at a node is ((x − mu) / sigma)·w + b = x·(w / sigma) + (b − mu·(w / sigma))
    weights = np.stack([node.w / tree.sigma for node, _ in path], axis=1) if path \
        else np.zeros((encoding.width, 0))
    offsets = np.array([node.b for node, _ in path]) - tree.mu @ weights
    wanted = np.array([went_good for _, went_good in path], dtype=bool)
    x = encoding.vectors(point)[0]
    for sweep in range(1, max_sweeps + 1):
        for name in (encoding.names[i] for i in rng.permutation(len(encoding.names))):
            values = encoding.values(name, rng, max_values)
            columns, block = encoding.block(name, values), encoding.blocks[name]
            scores = (x @ weights + offsets) - x[block] @ weights[block] \
                + columns @ weights[block]
            ok = np.flatnonzero(((scores > 0) == wanted).all(1))
            if len(ok):  # empty only when the start was outside: then it stays
                pick = int(rng.choice(ok))
                point[name] = values[[pick]]
                x[block] = columns[pick]
        if sweep >= min_sweeps:
            params = encoding.params(point, 0)
            inside = tree.inside(path, tree.standardise(x[None]))[0]  # the exact test
            if inside and accept(params):
                return params, sweep
    return None
