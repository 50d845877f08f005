"""Finite-pool spaces: a benchmark's recorded architectures as a search space.

A tabular NAS benchmark (NAS-Bench-BERT, HW-GPT-Bench) records a *sample* of its space:
491 of about 1e7 encoders, 10,000 of about 2e12 GPT sub-networks. :class:`PoolSpace` is
a :class:`~nas.space.SearchSpace` whose choices are the benchmark's real dimensions (so
searchers see its structure, not a row index) and whose architectures that *count* are
exactly the recorded rows:

* ``size()`` is the number of distinct recorded architectures and ``sample(rng)`` a
  uniformly random row;
* per-layer choices beyond the depth do not exist in the network, so :meth:`validate`
  sets them to their defaults (the *canonical* form): one network, one id;
* a proposal that is not recorded is mapped to the **nearest unevaluated recorded row**
  (:meth:`PoolSpace.nearest`). The distance, on the canonical encoding, is the sum over
  choices of ``|a − b| / (max − min)`` for a numeric choice and ``[a ≠ b]`` for any
  other; ties go to the row that comes first in the benchmark's file. The mapping belongs
  to the benchmark: the study loop applies it to every searcher alike
  (:meth:`searchers.optuna_bridge.SpaceBridge.propose`);
* the recorded metrics and costs are looked up by :meth:`PoolSpace.record` (the
  ``tabular`` evaluator) and the costs by :meth:`PoolSpace.costs_of` (hard budgets).

A pool space has no model: its graph is empty, :meth:`PoolSpace.resolve` refuses with a
one-line error, and :meth:`PoolSpace.row_graph` gives each row a small labelled graph
instead (by default a chain: a node per choice outside the layers, then a node per
layer labelled with the row's choices of that layer), which graph-kernel searchers
compare (``wl-bo``). A search that moves by small steps finds a row's neighbours with
:meth:`PoolSpace.neighbours`: the recorded rows that differ from it in the fewest
choices (one where any does). It is registered with ``tabular=True`` so that the
model-building tests and tools leave it out
(``list_spaces(tabular=False)``). The loaders live in ``spaces/`` (one module per
benchmark); the data folder is :func:`benchmark_dir`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import networkx as nx
import numpy as np

from nas.architecture import Architecture
from nas.choices import Categorical, number
from nas.errors import NasError, SpaceDefinitionError
from nas.space import SearchSpace

#: the environment variable of the data folder, as for tasks (:mod:`nas.data.tasks`)
DATA_DIR_ENV = "NAS_DATA_DIR"
#: where the benchmarks lie inside the data folder
BENCHMARK_FOLDER = "nasbench"


class BenchmarkDataError(SpaceDefinitionError):
    """A benchmark's file is missing or malformed."""


def benchmark_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """The benchmarks' folder: ``data_dir`` if given, else ``$NAS_DATA_DIR/nasbench`` (read
    in place, never copied), else a one-line error. As for tasks (:mod:`nas.data.tasks`)
    there is no default folder, so a search never silently reads another copy."""
    if data_dir is not None:
        return Path(data_dir)
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env) / BENCHMARK_FOLDER
    raise BenchmarkDataError(
        f"no benchmark data folder: set {DATA_DIR_ENV} to the data folder (the one holding "
        f"{BENCHMARK_FOLDER}/), or pass data_dir")


def benchmark_file(space: str, folder: Path, relative: str) -> Path:
    """``folder/relative``, or a one-line error naming the file and the fix."""
    path = folder / relative
    if not path.is_file():
        raise BenchmarkDataError(
            f"{space}: benchmark file {path} not found; set {DATA_DIR_ENV} to the data folder "
            f"that holds {BENCHMARK_FOLDER}/{relative} (or pass data_dir)")
    return path


@dataclass(frozen=True)
class Metric:
    """A recorded quantity: its direction, its kind (``score``: what a search optimises,
    ``cost``: params, latency, ``proxy``: a training-free estimate) and, for a score, how
    evaluation noise applies to it (``absolute``: an sd in its own units, e.g. accuracy
    points; ``relative``: an sd as a fraction of the value, e.g. perplexity)."""

    direction: Literal["maximize", "minimize"]
    kind: Literal["score", "cost", "proxy"] = "score"
    noise: Literal["absolute", "relative"] = "absolute"
    doc: str = ""


class PoolSpace(SearchSpace):
    """A space whose architectures are a benchmark's recorded rows (module docstring).

    Parameters
    ----------
    name, choices, description, config: as for :class:`~nas.space.SearchSpace`.
    rows: one mapping ``choice -> value`` per recorded architecture (distinct after
        canonicalisation), in the file's order.
    metrics: per row, the recorded quantities (``{"sst": array, "params": array}``).
    metric_info: each quantity's :class:`Metric`.
    depth: the depth choice (``None``: every row has every choice), and
        ``layer_choices``: per layer ``k`` (1-based), the choices that exist only when
        ``depth >= k``.
    graph: ``arch -> networkx.DiGraph``, a row's graph (:meth:`row_graph`); by default
        the chain of :func:`layer_chain`.
    """

    has_model = False

    def __init__(self, name: str, choices: Sequence[Categorical],
                 rows: Sequence[Mapping[str, Any]], metrics: Mapping[str, Sequence[float]],
                 metric_info: Mapping[str, Metric], *, depth: str | None = None,
                 layer_choices: Mapping[int, Sequence[str]] | None = None,
                 config: Mapping[str, Any] | None = None, description: str = "",
                 graph: Callable[[Architecture], nx.DiGraph] | None = None) -> None:
        self.depth_choice = depth
        self._row_graph = graph
        self.layer_choices = {int(k): tuple(v) for k, v in (layer_choices or {}).items()}
        super().__init__(name, choices, nx.DiGraph(), config=config, description=description)
        self.metric_info = dict(metric_info)
        self.archs: list[Architecture] = [self.validate(r) for r in rows]
        self._index = {a.id: i for i, a in enumerate(self.archs)}
        if len(self._index) != len(self.archs):
            raise BenchmarkDataError(f"{name}: two rows are the same architecture; "
                                     "merge them in the loader")
        self.metrics = {k: np.asarray(v, dtype=np.float64) for k, v in metrics.items()}
        for key, values in self.metrics.items():
            if key not in self.metric_info or values.shape != (len(self.archs),):
                raise BenchmarkDataError(f"{name}: metric {key!r} needs one value per row "
                                         "and a Metric description")
        self._numeric = np.array([c.numeric for c in self.choices()])
        self._codes = np.array([self._code(a) for a in self.archs])
        #: per row, the index of each choice's value (for :meth:`neighbours`)
        self._values = np.array([[c.index(a[c.name]) for c in self.choices()]
                                 for a in self.archs])

    # -- the canonical form ------------------------------------------------------
    def inactive(self, values: Mapping[str, Any]) -> set[str]:
        """The choices that do not exist in the network of ``values`` (layers past its
        depth; none without a depth choice)."""
        if self.depth_choice is None:
            return set()
        depth = int(values[self.depth_choice])
        return {n for k, names in self.layer_choices.items() if k > depth for n in names}

    def validate(self, arch: Mapping[str, Any] | Architecture) -> Architecture:
        """The canonical architecture: checked, with absent layers' choices at their
        defaults (they may be left out)."""
        if isinstance(arch, Architecture) and arch.space not in (None, self.name):
            return super().validate(arch)  # its error
        values = dict(arch)
        if self.depth_choice is not None and self.depth_choice in values:
            depth = self.choice(self.depth_choice).validate(values[self.depth_choice])
            off = self.inactive({self.depth_choice: depth})
            values = {**{n: self.choice(n).default for n in off}, **values}
        choices = self.choice_map
        if values.keys() != choices.keys():
            return super().validate(values)  # its error names the choice
        values = {k: choices[k].validate(v) for k, v in values.items()}
        off = self.inactive(values)
        return Architecture({k: (choices[k].default if k in off else v)
                             for k, v in values.items()}, self.name)

    def _check_graph(self) -> None:
        """A pool space has no graph: nothing to check."""

    def resolve(self, arch: Mapping[str, Any]) -> nx.DiGraph:
        raise NasError(f"space {self.name!r} is a tabular benchmark (recorded rows, no "
                       "model); score it with the 'tabular' evaluator")

    # -- the pool ----------------------------------------------------------------
    def size(self) -> int:
        return len(self.archs)

    def sample(self, rng: np.random.Generator | int | None = None, tries: int = 0
               ) -> Architecture:
        """A uniformly random recorded architecture."""
        rng = np.random.default_rng(rng)
        return self.archs[int(rng.integers(len(self.archs)))]

    def row_of_id(self, arch_id: str) -> int | None:
        """The row of the recorded architecture with id ``arch_id`` (``None``: none)."""
        return self._index.get(arch_id)

    def row_of(self, arch: Mapping[str, Any]) -> int | None:
        """The row of ``arch`` (validated first), or ``None`` if it is not recorded."""
        return self._index.get(self.validate(arch).id)

    def _code(self, arch: Architecture) -> list[float]:
        if not hasattr(self, "_coders"):  # value -> code, per choice, made once
            self._coders = []
            for c in self.choices():
                if c.numeric:
                    values = [number(v) for v in c.values]
                    low, span = min(values), (max(values) - min(values)) or 1.0
                    self._coders.append((c, [(v - low) / span for v in values]))
                else:
                    self._coders.append((c, [float(i) for i in range(len(c.values))]))
        return [codes[c.index(arch[c.name])] for c, codes in self._coders]

    def distances(self, arch: Mapping[str, Any]) -> np.ndarray:
        """The distance (module docstring) from ``arch`` to every recorded row."""
        code = np.asarray(self._code(self.validate(arch)))
        diff = self._codes - code
        return (np.abs(diff[:, self._numeric]).sum(axis=1)
                + (diff[:, ~self._numeric] != 0).sum(axis=1))

    def nearest(self, arch: Mapping[str, Any], taken: Iterable[str] = (),
                allowed: np.ndarray | None = None) -> int | None:
        """The row of ``arch`` if it is recorded, not ``taken`` (ids already evaluated) and
        ``allowed`` (a boolean mask over rows, e.g. within a budget); else the nearest
        such row (ties: the first in the file); ``None`` if no row is left."""
        free = np.ones(len(self.archs), dtype=bool) if allowed is None else allowed.copy()
        for arch_id in taken:
            i = self._index.get(arch_id)
            if i is not None:
                free[i] = False
        row = self.row_of(arch)
        if row is not None and free[row]:
            return row
        if not free.any():
            return None
        d = np.where(free, self.distances(arch), np.inf)
        return int(np.argmin(d))

    def neighbours(self, row: int) -> np.ndarray:
        """The rows that differ from ``row`` in the fewest choices (canonical form): the
        rows one choice away when any is recorded, else those two away, and so on. A
        table records a sample of its space, so one-choice neighbours are rare
        (NAS-Bench-BERT: 26% of its rows have one, HW-GPT-Bench: none); the fewest
        differing choices keeps a local move local without leaving the table."""
        diff = (self._values != self._values[row]).sum(axis=1)
        diff[row] = 0
        others = diff[diff > 0]
        if not len(others):
            return np.zeros(0, dtype=int)
        return np.flatnonzero(diff == others.min())

    def row_graph(self, arch: Mapping[str, Any]) -> nx.DiGraph:
        """The labelled graph of ``arch`` (validated first): the space's ``graph``
        callable's, else :func:`layer_chain`'s. Nodes carry a ``label`` attribute."""
        arch = self.validate(arch)
        if self._row_graph is not None:
            return self._row_graph(arch)
        return layer_chain(arch, sorted(self.inactive(arch)))

    def within(self, limits: Mapping[str, float | None]) -> np.ndarray:
        """Rows whose recorded costs are at most ``limits`` (``{"params": 1e7}``; a
        ``None`` limit is no limit); an unrecorded cost is a one-line error."""
        mask = np.ones(len(self.archs), dtype=bool)
        for key, limit in limits.items():
            if limit is None:
                continue
            if key not in self.metrics:
                raise NasError(f"space {self.name!r} records no {key!r}; budget one of "
                               f"{', '.join(self.cost_names)}")
            mask &= self.metrics[key] <= limit
        return mask

    @property
    def cost_names(self) -> list[str]:
        return self.names("cost")

    def names(self, kind: str) -> list[str]:
        """The recorded quantities of one kind (``score``, ``cost``, ``proxy``)."""
        return [k for k, m in self.metric_info.items() if m.kind == kind]

    def record(self, row: int) -> dict[str, float]:
        """Every recorded quantity of ``row``."""
        return {k: float(v[row]) for k, v in self.metrics.items()}

    def costs_of(self, arch: Mapping[str, Any]) -> dict[str, float]:
        """The recorded costs of ``arch``'s row (of its nearest row if not recorded)."""
        row = self.nearest(arch)
        assert row is not None  # noqa: S101 (a pool is never empty)
        return {k: float(self.metrics[k][row]) for k in self.cost_names}

    def best(self, metric: str, allowed: np.ndarray | None = None) -> float:
        """The table's optimum of ``metric`` over the ``allowed`` rows (regret's anchor)."""
        values = self.metrics[metric] if allowed is None else self.metrics[metric][allowed]
        return float(values.max() if self.metric_info[metric].direction == "maximize"
                     else values.min())


#: a per-layer choice's name: ``layer3.heads``, ``L3.ffn`` (prefix, layer number, field)
LAYER_NAME = re.compile(r"^([A-Za-z_]*?)(\d+)[._](.+)$")


def layer_chain(arch: Mapping[str, Any], absent: Sequence[str] = ()) -> nx.DiGraph:
    """A row's default graph, a chain: one node per choice that belongs to no layer
    (``embed=768``; in name order, so that a graph kernel counts each such value on its
    own), then one node per layer (in order), labelled with that layer's choices by field
    (``heads=4,op=sa_sdp``; the same label at any depth, so a graph kernel sees two equal
    layers as equal), each joined to the next. A choice belongs to layer ``k`` when its
    name reads ``<prefix><k>.<field>`` (``layer3.heads``); ``absent`` choices (layers past
    the depth) are left out, and so are their layers."""
    skip = set(absent)
    glob: list[str] = []
    layers: dict[int, list[str]] = {}
    for name, value in arch.items():
        if name in skip:
            continue
        match = LAYER_NAME.match(name)
        if match:
            layers.setdefault(int(match.group(2)), []).append(f"{match.group(3)}={value}")
        else:
            glob.append(f"{name}={value}")
    g = nx.DiGraph()
    previous = None
    for label in sorted(glob):
        g.add_node(label, label=label)
        if previous is not None:
            g.add_edge(previous, label)
        previous = label
    for k in sorted(layers):
        node = f"layer{k}"
        g.add_node(node, label="layer:" + ",".join(sorted(layers[k])))
        if previous is not None:
            g.add_edge(previous, node)
        previous = node
    return g


def read_json(space: str, path: Path) -> Any:
    """A benchmark's JSON file, or a one-line error saying it is malformed."""
    import json

    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as err:
        reason = " ".join(str(err).split())[:120]
        raise BenchmarkDataError(f"{space}: {path} is not valid JSON ({reason}); restore the "
                                 "benchmark's file from its source (nasbench/README.md)") from None


def malformed(space: str, path: Path, what: str) -> BenchmarkDataError:
    """The one-line error for a file whose content is not what the loader expects."""
    return BenchmarkDataError(f"{space}: {path} is malformed ({what}); restore the "
                              "benchmark's file from its source (nasbench/README.md)")


def checked(space: str, path: Path, read: Callable[[], Any]) -> Any:
    """``read()``, with a missing key or a value of the wrong type in the file turned into
    a one-line :class:`BenchmarkDataError`."""
    try:
        return read()
    except KeyError as err:
        raise malformed(space, path, f"missing key {err}") from None
    except (TypeError, ValueError, IndexError, AttributeError) as err:
        raise malformed(space, path, " ".join(str(err).split())[:120]) from None


__all__ = ["BenchmarkDataError", "Metric", "PoolSpace", "benchmark_dir", "benchmark_file",
           "checked", "layer_chain", "malformed", "read_json"]
