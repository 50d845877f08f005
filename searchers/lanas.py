"""LaNAS as an Optuna sampler: a learned partition of the search space (SPEC §6; Wang et
al., 2019/2020; EfficientBERT's settings, Dong et al., 2021).

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

Properties that matter for a shared study:

* the tree is a pure function of the first ``n_startup_trials + k·rebuild_every`` finished
  trials (ordered by completion time, then number) and the seed, so workers sharing a
  study build the same tree;
* a trial's random draws come from a generator seeded by ``(seed, proposal index)``
  (:func:`searchers.resume.proposal_index`: the trial number, except that a killed
  trial's retry takes the killed trial's, so a resumed search proposes what the
  uninterrupted one did), so the same seed gives the same trials, and workers with the
  same seed do not collide;
* the first ``n_startup_trials`` trials are unseen random samples.

The encoding is the space's (numeric choices by value, others one-hot; SPEC §6) when the
caller passes ``encodings`` (:meth:`searchers.optuna_bridge.SpaceBridge.encoding_tables`);
otherwise categorical parameters are encoded by their numeric value when every choice
has one, else one-hot, and integers and floats by value (log value on a log scale).
Columns are standardised over the tree's samples before the classifiers are fitted.

Parameters outside the relative search space are sampled independently (uniformly).
The sampler is single-objective: a multi-objective study must scalarise (e.g. accuracy
with a latency penalty, :class:`evaluators.penalty.PenaltyEvaluator` ``targets``) and is
otherwise refused with one line.
"""

from __future__ import annotations

import math
import threading
import zlib
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from optuna.distributions import (
    BaseDistribution,
    CategoricalDistribution,
    FloatDistribution,
    IntDistribution,
)
from optuna.samplers import BaseSampler, RandomSampler
from optuna.search_space import IntersectionSearchSpace
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState
from scipy.optimize import minimize

from nas.choices import as_number
from nas.errors import NasError
from searchers.resume import proposal_index

#: EfficientBERT's settings (SPEC §6).
EFFICIENTBERT_STARTUP = 80
EFFICIENTBERT_REBUILD_EVERY = 10
EFFICIENTBERT_HEIGHT_THRESHOLDS = (400, 800, 1600, 3200)
EFFICIENTBERT_MAX_DRAWS = 20_000


class LaNASError(NasError):
    """The LaNAS sampler is used wrongly (a multi-objective study, bad settings)."""


def single_objective_only(study: Study) -> None:
    if len(study.directions) > 1:
        raise LaNASError(
            f"LaNASSampler is single-objective, but the study has {len(study.directions)} "
            "objectives; scalarise them (e.g. accuracy with a latency penalty) or use "
            "nsga2, tpe or gp")


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
                    raise LaNASError(f"encoding of {n!r}: {self.tables[n].shape[0]} rows for "
                                     f"{len(d.choices)} choices")
        self.width = sum(self.tables[n].shape[1] if n in self.tables else 1
                         for n in self.names)

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
        cols = []
        for n, d in self.space.items():
            if n in self.tables:
                cols.append(self.tables[n][drawn[n].astype(int)])
            else:
                values = drawn[n].astype(np.float64)
                cols.append((np.log(values) if d.log else values)[:, None])  # type: ignore[attr-defined]
        return np.concatenate(cols, axis=1)

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
        """Whether ``trial`` set every parameter, within this space's distributions."""
        for n, d in self.space.items():
            if n not in trial.params:
                return False
            try:
                if not d._contains(d.to_internal_repr(trial.params[n])):
                    return False
            except (ValueError, TypeError):
                return False
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
    """A region of the space: the samples routed to it, and its classifier once split."""

    rows: np.ndarray
    depth: int
    mean: float
    w: np.ndarray | None = None
    b: float = 0.0
    good: Node | None = None
    bad: Node | None = None

    @property
    def leaf(self) -> bool:
        return self.good is None

    @property
    def n(self) -> int:
        return len(self.rows)


@dataclass
class PartitionTree:
    """The tree built from ``trials`` (numbers), ``y`` = sign·value (higher is better)."""

    root: Node
    mu: np.ndarray
    sigma: np.ndarray
    y: np.ndarray
    trials: tuple[int, ...]
    height: int
    _leaves: list[Node] = field(default_factory=list, repr=False)

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
                stack += [node.bad, node.good]  # type: ignore[list-item]
        return out

    def select(self, cp: float) -> list[tuple[Node, bool]]:
        """The UCB path from the root: ``(node, went_good)`` per split node."""
        path, node = [], self.root
        while not node.leaf:
            good, bad = node.good, node.bad
            assert good is not None and bad is not None  # noqa: S101 (split nodes have both)

            def ucb(child: Node, parent: Node = node) -> float:
                return child.mean + 2.0 * cp * math.sqrt(2.0 * math.log(parent.n) / child.n)

            went_good = ucb(good) >= ucb(bad)
            path.append((node, went_good))
            node = good if went_good else bad
        return path

    def route(self, x: np.ndarray) -> Node:
        """The leaf a raw encoded vector falls into by the classifiers."""
        xs, node = self.standardise(x), self.root
        while not node.leaf:
            node = node.good if float(xs @ node.w + node.b) > 0 else node.bad  # type: ignore[operator,assignment]
        return node


def build_tree(x: np.ndarray, y: np.ndarray, trials: Sequence[int], *, height: int,
               leaf_size: int, split: str, seed: int, l2: float = 1.0) -> PartitionTree:
    """The partition tree of samples ``x`` (rows) with scores ``y`` (higher is better):
    a pure function of its arguments (module docstring, steps 1–3)."""
    mu = x.mean(0)
    sigma = x.std(0)
    sigma[sigma < 1e-12] = 1.0
    xs = (x - mu) / sigma
    ys = (y - y.mean()) / (y.std() or 1.0)

    def grow(rows: np.ndarray, depth: int) -> Node:
        node = Node(rows, depth, float(y[rows].mean()))
        if depth >= height or len(rows) <= leaf_size or np.ptp(y[rows]) == 0:
            return node
        if split == "median":
            labels = y[rows] >= np.median(y[rows])
        else:
            labels = two_means(np.hstack([xs[rows], ys[rows, None]]), y[rows],
                               seed=zlib.crc32(f"{seed}:{depth}:{rows[0]}".encode()))
        if labels.all() or not labels.any():
            return node
        w, b = fit_linear_classifier(xs[rows], labels, l2)
        predicted = xs[rows] @ w + b > 0
        if predicted.all() or not predicted.any():  # the classifier does not separate them
            return node
        node.w, node.b = w, b
        node.good = grow(rows[predicted], depth + 1)
        node.bad = grow(rows[~predicted], depth + 1)
        return node

    root = grow(np.arange(len(y)), 0)
    return PartitionTree(root, mu, sigma, y, tuple(trials), height)


# ---------------------------------------------------------------------------
# the sampler
# ---------------------------------------------------------------------------


class LaNASSampler(BaseSampler):
    """LaNAS / LA-MCTS learned space partition as an Optuna sampler (module docstring).

    Parameters
    ----------
    search_space: the relative search space (e.g. :attr:`SpaceBridge.distributions`);
        default: the intersection of the finished trials' distributions.
    seed: the base seed of every trial's generator (``None``: a random one).
    n_startup_trials: finished trials before the first tree (random samples until then).
    rebuild_every: finished trials between two rebuilds (k).
    split: ``"median"`` (EfficientBERT) or ``"kmeans"`` (LA-MCTS).
    cp: the UCB exploration constant (EfficientBERT: 0; LaNAS ≈ 0.1·max f).
    height: a fixed tree height; ``None`` uses ``height_thresholds`` (EfficientBERT).
    leaf_size: a node with at most this many samples is not split.
    max_draws: random candidates tried in the selected leaf per proposal.
    encodings: per categorical parameter, a row per choice (the space's encoding).
    constraint: ``params -> bool``; only accepted parameter sets are proposed.
    l2: the classifiers' L2 regularisation.
    """

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
        checks = [("n_startup_trials", n_startup_trials >= 0, ">= 0"),
                  ("rebuild_every", rebuild_every >= 1, ">= 1"),
                  ("split", split in ("median", "kmeans"), "'median' or 'kmeans'"),
                  ("cp", cp >= 0, ">= 0"), ("height", height is None or height >= 1, ">= 1"),
                  ("leaf_size", leaf_size >= 1, ">= 1"), ("max_draws", max_draws >= 1, ">= 1"),
                  ("batch_size", batch_size >= 1, ">= 1"), ("l2", l2 > 0, "> 0")]
        for name, ok, rule in checks:
            if not ok:
                raise LaNASError(f"LaNASSampler: {name} must be {rule}, got "
                                 f"{locals()[name]!r}")
        self._fixed_space = dict(search_space) if search_space is not None else None
        self._seed = int(np.random.SeedSequence(seed).entropy % 2**32) if seed is None else seed
        self.n_startup_trials = n_startup_trials
        self.rebuild_every = rebuild_every
        self.split = split
        self.cp = cp
        self.height = height
        self.height_thresholds = tuple(sorted(height_thresholds))
        self.leaf_size = leaf_size
        self.max_draws = max_draws
        self.batch_size = batch_size
        self.encodings = encodings
        self.constraint = constraint
        self.l2 = l2
        self._lock = threading.Lock()
        self._cache: tuple[Hashable, PartitionTree | None] | None = None
        self._encoding_cache: tuple[Hashable, Encoding] | None = None
        self._intersection = IntersectionSearchSpace()
        #: how the last proposal was made: "startup", "leaf", "fallback" (for logs, tests)
        self.last_proposal: dict[str, Any] = {}

    # -- BaseSampler -------------------------------------------------------------
    def reseed_rng(self) -> None:
        self._seed = int(np.random.SeedSequence().entropy % 2**32)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial
                                    ) -> dict[str, BaseDistribution]:
        single_objective_only(study)
        if self._fixed_space is not None:
            return dict(self._fixed_space)
        return {n: d for n, d in self._intersection.calculate(study).items() if not d.single()}

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        single_objective_only(study)
        if not search_space:
            return {}
        fixed = trial.system_attrs.get("fixed_params", {})
        if set(search_space) <= set(fixed):  # an enqueued trial: nothing to propose
            return {}
        encoding = self._encoding(search_space)
        trials = study.get_trials(deepcopy=False)
        rng = np.random.default_rng([self._seed, proposal_index(trials, trial.number,
                                                                trial.system_attrs)])
        seen = {self._key(encoding, t.params) for t in trials
                if t.number != trial.number and t.state != TrialState.WAITING
                and encoding.covers(t)}
        tree = self.tree(study, encoding, trials)
        if tree is None:
            self.last_proposal = {"how": "startup"}
            return self._unseen(encoding, rng, seen)
        path = tree.select(self.cp)
        params = self._in_leaf(encoding, tree, path, rng, seen)
        if params is not None:
            return params
        self.last_proposal = {"how": "fallback", "depth": len(path)}
        return self._unseen(encoding, rng, seen)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        single_objective_only(study)
        index = proposal_index(study.get_trials(deepcopy=False), trial.number,
                               trial.system_attrs)
        seed = zlib.crc32(f"{self._seed}:{index}:{param_name}".encode())
        return RandomSampler(seed=seed).sample_independent(study, trial, param_name,
                                                           param_distribution)

    # -- the tree ----------------------------------------------------------------
    def tree(self, study: Study, encoding: Encoding | None = None,
             trials: Sequence[FrozenTrial] | None = None) -> PartitionTree | None:
        """The current tree (``None`` before ``n_startup_trials`` finished trials)."""
        if encoding is None:
            single_objective_only(study)
            encoding = self._encoding(self._fixed_space if self._fixed_space is not None
                                      else self._intersection.calculate(study))
        if trials is None:
            trials = study.get_trials(deepcopy=False)
        done = sorted((t for t in trials if t.state == TrialState.COMPLETE
                       and encoding.covers(t)),
                      key=lambda t: (t.datetime_complete, t.number))
        start = max(self.n_startup_trials, 2)
        if len(done) < start:
            return None
        m = start + (len(done) - start) // self.rebuild_every * self.rebuild_every
        used = done[:m]
        key = (tuple(t.number for t in used), self._seed, tuple(encoding.names))
        with self._lock:
            if self._cache is not None and self._cache[0] == key:
                return self._cache[1]
        sign = 1.0 if study.direction == StudyDirection.MAXIMIZE else -1.0
        x = np.stack([encoding.encode(t.params) for t in used])
        y = np.array([sign * float(t.value) for t in used])  # type: ignore[arg-type]
        height = self.height or 1 + sum(m > t for t in self.height_thresholds)
        tree = build_tree(x, y, key[0], height=height, leaf_size=self.leaf_size,
                          split=self.split, seed=self._seed, l2=self.l2)
        with self._lock:
            self._cache = (key, tree)
        return tree

    # -- proposals ---------------------------------------------------------------
    def _encoding(self, space: Mapping[str, BaseDistribution]) -> Encoding:
        key = tuple(sorted((n, repr(d)) for n, d in space.items()))
        with self._lock:
            if self._encoding_cache is None or self._encoding_cache[0] != key:
                self._encoding_cache = (key, Encoding(space, self.encodings))
            return self._encoding_cache[1]

    @staticmethod
    def _key(encoding: Encoding, params: Mapping[str, Any]) -> Hashable:
        return tuple((n, params.get(n)) for n in encoding.names)

    def _accept(self, encoding: Encoding, params: dict[str, Any], seen: set[Hashable]) -> bool:
        return (self._key(encoding, params) not in seen
                and (self.constraint is None or self.constraint(params)))

    def _in_leaf(self, encoding: Encoding, tree: PartitionTree,
                 path: list[tuple[Node, bool]], rng: np.random.Generator,
                 seen: set[Hashable]) -> dict[str, Any] | None:
        """Rejection sampling: the first draw that every classifier on ``path`` routes
        along the path, unseen and feasible."""
        drawn_total = 0
        while drawn_total < self.max_draws:
            n = min(self.batch_size, self.max_draws - drawn_total)
            drawn = encoding.draw(rng, n)
            drawn_total += n
            xs = tree.standardise(encoding.vectors(drawn))
            inside = np.ones(n, dtype=bool)
            for node, went_good in path:  # ALL classifiers on the path must agree
                inside &= (xs @ node.w + node.b > 0) == went_good
            for row in np.flatnonzero(inside):
                params = encoding.params(drawn, int(row))
                if self._accept(encoding, params, seen):
                    self.last_proposal = {"how": "leaf", "depth": len(path),
                                          "draws": drawn_total - n + int(row) + 1}
                    return params
        return None

    def _unseen(self, encoding: Encoding, rng: np.random.Generator,
                seen: set[Hashable]) -> dict[str, Any]:
        """A uniform random unseen feasible candidate; a seen feasible one when every draw
        was seen (an exhausted space); the first draw when none is feasible (the caller's
        constraint then rejects it, visibly)."""
        first: dict[str, Any] | None = None
        repeat: dict[str, Any] | None = None
        drawn_total = 0
        while drawn_total < self.max_draws:
            n = min(self.batch_size, self.max_draws - drawn_total)
            drawn = encoding.draw(rng, n)
            drawn_total += n
            for row in range(n):
                params = encoding.params(drawn, row)
                first = first or params
                if self._key(encoding, params) in seen:
                    if repeat is None and (self.constraint is None or self.constraint(params)):
                        repeat = params
                    continue
                if self.constraint is None or self.constraint(params):
                    return params
        return repeat or first  # type: ignore[return-value]

