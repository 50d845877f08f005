"""``wl-bo``: Bayesian optimisation with a Gaussian process whose kernel is the
Weisfeiler-Lehman subtree kernel over each candidate's graph (Ru, Wan, Dong & Osborne,
"Interpretable neural architecture search via Bayesian optimisation with
Weisfeiler-Lehman kernels", ICLR 2021, §3; Shervashidze et al., 2011, for the kernel).

* **The graph** of a candidate is the space's own ``networkx`` graph with its choices
  resolved (:meth:`nas.space.SearchSpace.resolve`; each node labelled with its op and
  settings, each edge that carries an op turned into a node labelled with it), a
  tabular benchmark's row graph (:meth:`nas.pool.PoolSpace.row_graph`: by default a
  chain: a node per choice outside the layers, then the layer nodes labelled with the
  row's choices), or, in a bare Optuna study, a chain of ``name=value`` nodes.
* **The kernel**: the features of a graph are the counts of its node labels and of the
  subtree hashes of ``h`` WL iterations (``networkx.weisfeiler_lehman_subgraph_hashes``);
  the kernel is their normalised dot product (1 on the diagonal). ``h`` ∈ {1, 2, 3}
  and the noise variance are chosen by the GP's log marginal likelihood on the
  standardised observations, as the paper selects ``h``.
* **The acquisition**: expected improvement with one objective; with several, the
  expected hypervolume improvement over the observed front (Monte Carlo: ``ehvi_samples``
  joint draws of the independent posteriors, exact 2-D improvement per draw; objectives
  scaled to [0, 1] over the observations, reference point 1.1). A *known* objective, a
  cost the sampler can read without training (a tabular benchmark's recorded cost
  column, or ``params``/``flops`` counted from a space's graph), is taken as exact, not
  modelled.
* **The proposals** (the paper's §3.2): mutants (one choice changed;
  :mod:`searchers.moves`) of the ``n_incumbents`` best points (several objectives: the
  fewest dominating points) and ``n_random`` random points, scored by the acquisition;
  the best is proposed. Every candidate is valid, within the budget and unevaluated (on
  a tabular benchmark a recorded row itself, so no mapping biases the proposals).
  The first ``n_startup_trials`` trials are random.

The study is the whole state (resumable as every searcher here); the graph features are
cached per architecture by the searcher, a pure function of the architecture.
"""

from __future__ import annotations

import json
import math
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import networkx as nx
import numpy as np
import optuna
from optuna.samplers import BaseSampler
from scipy.stats import norm

from searchers.base import SEARCHERS
from searchers.moves import MoveSampler, Point, ranks
from searchers.optuna_bridge import SpaceBridge
from searchers.optuna_searchers import PerTrialSearcher
from searchers.pareto import dominance_numbers, hypervolume

#: defaults (module docstring)
STARTUP = 10
INCUMBENTS = 3
MUTANTS = 20
RANDOM = 50
EHVI_SAMPLES = 64
#: the WL iterations and noise variances the marginal likelihood chooses from
ITERATIONS = (1, 2, 3)
NOISES = (1e-4, 1e-3, 1e-2, 1e-1)
#: known costs counted from a graph space's graph
COUNTED = ("params", "flops")
REFERENCE = 1.1

Features = Counter[str]


def labelled(graph: nx.DiGraph) -> nx.DiGraph:
    """A space's resolved graph with a ``label`` on every node (op and settings), each
    edge op other than identity made a node of its own (module docstring)."""
    g = nx.DiGraph()
    for node, data in graph.nodes(data=True):
        g.add_node(node, label=f"{data.get('op')}:{_settings(data)}")
    for a, b, data in graph.edges(data=True):
        op = data.get("op")
        if op in (None, "identity"):
            g.add_edge(a, b)
            continue
        middle = f"{a}->{b}"
        g.add_node(middle, label=f"{op}:{json.dumps(data.get('params') or {}, sort_keys=True)}")
        g.add_edge(a, middle)
        g.add_edge(middle, b)
    return g


def _settings(data: Mapping[str, Any]) -> str:
    return json.dumps({"params": data.get("params") or {}, "width": data.get("width")},
                      sort_keys=True, default=str)


def param_chain(params: Mapping[str, Any]) -> nx.DiGraph:
    """A bare study's point as a chain of ``name=value`` nodes."""
    g = nx.DiGraph()
    previous = None
    for name in sorted(params):
        g.add_node(name, label=f"{name}={params[name]}")
        if previous is not None:
            g.add_edge(previous, name)
        previous = name
    return g


def wl_features(graph: nx.DiGraph, iterations: int = max(ITERATIONS)) -> Features:
    """Counts of the node labels (``0:label``) and of each WL iteration's subtree hashes
    (``i:hash``)."""
    counts: Features = Counter(f"0:{d['label']}" for _, d in graph.nodes(data=True))
    with warnings.catch_warnings():  # networkx 3.5 notes its directed hashes changed
        warnings.simplefilter("ignore", UserWarning)
        hashes = nx.weisfeiler_lehman_subgraph_hashes(graph, node_attr="label",
                                                      iterations=iterations)
    for per_node in hashes.values():
        counts.update(f"{i + 1}:{h}" for i, h in enumerate(per_node))
    return counts


def wl_kernel(features: list[Features], iterations: int) -> np.ndarray:
    """The normalised WL subtree kernel of ``iterations`` iterations (module docstring)."""
    vocab: dict[str, int] = {}
    for f in features:
        for k in f:
            if int(k.split(":", 1)[0]) <= iterations:
                vocab.setdefault(k, len(vocab))
    x = np.zeros((len(features), max(len(vocab), 1)))
    for i, f in enumerate(features):
        for k, count in f.items():
            j = vocab.get(k)
            if j is not None:
                x[i, j] = count
    x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return x @ x.T


class GP:
    """A zero-mean GP on standardised observations with a precomputed kernel over the
    training points and the candidates; ``h`` and the noise chosen by marginal
    likelihood (module docstring)."""

    def __init__(self, kernels: Mapping[int, np.ndarray], y: np.ndarray) -> None:
        n = len(y)
        self.mean, self.scale = float(y.mean()), float(y.std()) or 1.0
        z = (y - self.mean) / self.scale
        best = None
        for h, k in kernels.items():
            for noise in NOISES:
                try:
                    chol = np.linalg.cholesky(k[:n, :n] + noise * np.eye(n))
                except np.linalg.LinAlgError:
                    continue
                alpha = np.linalg.solve(chol.T, np.linalg.solve(chol, z))
                lml = -0.5 * z @ alpha - np.log(np.diag(chol)).sum() - 0.5 * n * math.log(
                    2 * math.pi)
                if best is None or lml > best[0]:
                    best = (lml, h, chol, alpha)
        assert best is not None  # noqa: S101 (the largest noise makes K positive definite)
        _, self.h, self.chol, self.alpha = best
        self.kernel = kernels[self.h]
        self.n = n

    def predict(self) -> tuple[np.ndarray, np.ndarray]:
        """Mean and standard deviation of the candidates (the kernel's rows after the
        training points), in the observations' units."""
        cross = self.kernel[self.n:, :self.n]
        mu = cross @ self.alpha
        v = np.linalg.solve(self.chol, cross.T)
        var = np.clip(1.0 - (v * v).sum(0), 1e-12, None)
        return self.mean + self.scale * mu, self.scale * np.sqrt(var)


def expected_improvement(mu: np.ndarray, sd: np.ndarray, best: float) -> np.ndarray:
    """EI of minimisation below ``best``."""
    z = (best - mu) / sd
    return sd * (z * norm.cdf(z) + norm.pdf(z))


def hv_improvement_2d(front: np.ndarray, points: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """The exact hypervolume each of ``points`` (… × 2, minimised) adds to ``front``
    (k × 2), bounded by ``ref``: the area of ``[p, ref]`` above the front's staircase."""
    f = front[(front < ref).all(1)]
    f = f[np.argsort(f[:, 0])]
    # the staircase: on [x_j, x_{j+1}) the front reaches down to min(y_0..y_j)
    xs = np.concatenate([f[:, 0], [ref[0]]])
    heights = np.concatenate([[ref[1]], np.minimum.accumulate(f[:, 1])]) if len(f) \
        else np.array([ref[1]])
    starts = np.concatenate([[-np.inf], xs[:-1]]) if len(f) else np.array([-np.inf])
    ends = xs if len(f) else np.array([ref[0]])
    px, py = points[..., 0:1], points[..., 1:2]
    width = np.clip(np.minimum(ends, ref[0]) - np.maximum(starts, px), 0, None)
    height = np.clip(np.minimum(heights, ref[1]) - py, 0, None)
    return (width * height).sum(-1)


class WLBOSampler(MoveSampler):
    """GP-BO with the WL kernel (module docstring).

    Parameters
    ----------
    n_startup_trials: random trials before the first model (default 10).
    n_incumbents: points whose mutants are scored (default 3).
    n_mutants: mutants per incumbent (default 20).
    n_random: random candidates per trial (default 50).
    ehvi_samples: Monte Carlo draws of the expected hypervolume improvement (default 64).
    features: a cache of graph features per architecture, shared across trials.
    """

    def __init__(self, seed: int | None = None, bridge: SpaceBridge | None = None, *,
                 n_startup_trials: int = STARTUP, n_incumbents: int = INCUMBENTS,
                 n_mutants: int = MUTANTS, n_random: int = RANDOM,
                 ehvi_samples: int = EHVI_SAMPLES,
                 features: MutableMapping[str, Features] | None = None,
                 costs: MutableMapping[str, dict[str, float]] | None = None) -> None:
        for name, value in (("n_incumbents", n_incumbents), ("n_mutants", n_mutants),
                            ("ehvi_samples", ehvi_samples)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if n_random < 0:
            raise ValueError(f"n_random must be >= 0, got {n_random}")
        super().__init__(seed, bridge, n_startup_trials)
        self.n_incumbents, self.n_mutants = n_incumbents, n_mutants
        self.n_random, self.ehvi_samples = n_random, ehvi_samples
        self.features = features if features is not None else {}
        self.costs = costs if costs is not None else {}

    # -- candidates --------------------------------------------------------------------
    def candidates(self, history: list[Point]) -> list[dict[str, Any]]:
        order = np.lexsort((self.rng.random(len(history)), ranks(history)))
        found: dict[str, dict[str, Any]] = {}
        for i in order[:self.n_incumbents]:
            for child in self.mutants(history[int(i)].params, limit=self.n_mutants):
                found.setdefault(self.key(child), child)
        for params in self.random_points(self.n_random):
            found.setdefault(self.key(params), params)
        return list(found.values())

    def graph(self, params: dict[str, Any]) -> nx.DiGraph:
        if self.bridge is None:
            return param_chain(params)
        arch = self.bridge.architecture(params)
        pool = self.bridge.pool
        if pool is not None:
            return pool.row_graph(arch)
        return labelled(self.bridge.space.resolve(arch))

    def feature(self, key: str, params: dict[str, Any]) -> Features:
        if key not in self.features:
            self.features[key] = wl_features(self.graph(params))
        return self.features[key]

    # -- known objectives ---------------------------------------------------------------
    def known(self, study: optuna.Study) -> list[Callable[[dict[str, Any]], float] | None]:
        """Per objective, a function giving its exact value in minimisation form, or
        ``None`` (modelled)."""
        names: list[str | None] = [None] * len(study.directions)
        if study.metric_names:
            names = list(study.metric_names)
        out: list[Callable[[dict[str, Any]], float] | None] = []
        for name, direction in zip(names, study.directions, strict=True):
            sign = -1.0 if direction == optuna.study.StudyDirection.MAXIMIZE else 1.0
            out.append(self._cost_reader(name, sign) if name is not None else None)
        return out

    def _cost_reader(self, name: str, sign: float) -> Callable[[dict[str, Any]], float] | None:
        bridge = self.bridge
        if bridge is None:
            return None
        pool = bridge.pool
        if pool is not None and name not in pool.cost_names:
            return None
        if pool is None and name not in COUNTED:
            return None

        def read(params: dict[str, Any]) -> float:
            arch = bridge.architecture(params)
            if arch.id not in self.costs:
                self.costs[arch.id] = {k: float(v) for k, v in
                                       bridge.budget.costs(bridge.space, arch).items()
                                       if isinstance(v, int | float)}
            return sign * self.costs[arch.id][name]

        return read

    # -- the pick ----------------------------------------------------------------------
    def pick(self, study: optuna.Study, history: list[Point]) -> dict[str, Any] | None:
        candidates = self.candidates(history)
        if not candidates:
            return None
        score = self.acquisition(study, history, candidates)
        return candidates[int(np.argmax(score))]

    def acquisition(self, study: optuna.Study, history: list[Point],
                    candidates: list[dict[str, Any]]) -> np.ndarray:
        losses = np.array([p.loss for p in history])
        feats = [self.feature(p.key, p.params) for p in history] + [
            self.feature(self.key(c), c) for c in candidates]
        kernels = {h: wl_kernel(feats, h) for h in ITERATIONS}
        known = self.known(study)
        mus, sds = [], []
        for j, reader in enumerate(known):
            if reader is not None:
                mus.append(np.array([reader(c) for c in candidates]))
                sds.append(np.zeros(len(candidates)))
            else:
                mu, sd = GP(kernels, losses[:, j]).predict()
                mus.append(mu)
                sds.append(sd)
        mu, sd = np.column_stack(mus), np.column_stack(sds)
        if losses.shape[1] == 1:
            if sd[:, 0].max() == 0:  # a known objective: the exact best
                return -mu[:, 0]
            return expected_improvement(mu[:, 0], np.maximum(sd[:, 0], 1e-12),
                                        float(losses[:, 0].min()))
        return self.ehvi(losses, mu, sd)

    def ehvi(self, losses: np.ndarray, mu: np.ndarray, sd: np.ndarray) -> np.ndarray:
        """Monte Carlo expected hypervolume improvement (module docstring)."""
        low, high = losses.min(0), losses.max(0)
        span = np.where(high > low, high - low, 1.0)
        scaled = (losses - low) / span
        front = scaled[dominance_numbers(scaled) == 0]
        ref = np.full(losses.shape[1], REFERENCE)
        draws = self.rng.standard_normal((self.ehvi_samples, *mu.shape))
        samples = ((mu + sd * draws) - low) / span  # draws × candidates × objectives
        if losses.shape[1] == 2:
            gains = hv_improvement_2d(front, samples.reshape(-1, 2), ref)
            return gains.reshape(self.ehvi_samples, -1).mean(0)
        base = hypervolume(front, ref)
        gains = np.array([[hypervolume(np.vstack([front, s]), ref) - base for s in draw]
                          for draw in samples[:16]])
        return gains.mean(0)


@SEARCHERS.register("wl-bo")
class WLBOSearcher(PerTrialSearcher):
    """GP-BO with the Weisfeiler-Lehman kernel (:class:`WLBOSampler`). Options:
    ``n_startup_trials``, ``n_incumbents``, ``n_mutants``, ``n_random``,
    ``ehvi_samples``. The graph features and counted costs are cached here, per
    architecture, across the study's trials."""

    name = "wl-bo"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._features: dict[str, Features] = {}
        self._costs: dict[str, dict[str, float]] = {}

    def build(self, seed: int, bridge: SpaceBridge | None) -> BaseSampler:
        return WLBOSampler(seed, bridge, features=self._features, costs=self._costs,
                           **self.options)
