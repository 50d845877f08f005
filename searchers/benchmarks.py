"""Any table is a benchmark: register a tabular benchmark (its rows, choices, metrics,
budget and reference point) and judge the multi-trial searchers on it against the right
controls, on paired seeds (``benchmarks/searchers.py --plugin FILE --benchmark NAME``).

**Registering.** A plug-in file (or any module) calls :func:`register_benchmark` with a
:class:`TabularBenchmark`: its space (a registered tabular space's name, or a function
returning a :class:`~nas.pool.PoolSpace`; :func:`table_space` builds one from plain rows
and metric columns, each row's graph by default a chain of a node per choice outside the
layers and a node per layer labelled with its choices, :func:`nas.pool.layer_chain`),
the score a single-objective search maximises or minimises, the two metrics of the
Pareto front, the evaluation noise, the parameter budget and the hypervolume's
reference point. NAS-Bench-BERT and HW-GPT-Bench
are registered here the same way. ``tests/fixtures/tiny_table.py`` is a complete
plug-in.

**Judging** (:func:`compare`). Every searcher runs through the real study loop
(:func:`searchers.loop.run_study`: the bridge, the budget, the mapping of a proposal to
the nearest unevaluated recorded row, the trial records), scored by the ``tabular``
evaluator; seed ``s`` of every searcher sees the same evaluation noise.

* Single-objective (``so``): the best recorded score under the budget (default: the
  table's median parameter count); regret after ``n`` evaluations is the table's optimum
  under the budget against the *recorded* value of the best *observed* (noisy) trial.
* Multi-objective (``mo``): the two front metrics, no budget; the hypervolume of the
  recorded values of the observed front, relative to the table's own front's, up to the
  reference point (default: the table's worst value of each metric).

Every comparison holds two controls and two baselines besides the searchers asked for:
``random`` (uniform over the rows), ``random-params`` (uniform parameters mapped to the
nearest unevaluated row, what every model-based searcher's start-up does: a searcher
that beats ``random`` but not ``random-params`` gains from the mapping, not from
learning), ``largest`` (the largest model under the budget, evaluated once) and
``rank-params`` (the ``n`` largest under the budget; ``mo``: ``n`` models evenly spaced
in parameter count). Each searcher is compared with each control by the fraction of
paired seeds it wins (ties are not wins) and the paired Wilcoxon signed-rank test, one-
and two-sided (:func:`wilcoxon`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from nas.choices import Categorical
from nas.errors import NasError
from nas.pool import Metric, PoolSpace
from nas.registry import Registry

#: the evaluation counts reported
BUDGETS = (10, 20, 40, 100)
#: the controls and baselines of every comparison (module docstring)
CONTROLS = ("random", "random-params")
BASELINES = ("largest", "rank-params")
#: searchers that optimise one objective only
SINGLE_OBJECTIVE = {"lanas"}


class BenchmarkError(NasError):
    """A tabular benchmark is defined or asked for wrongly."""


@dataclass(frozen=True)
class TabularBenchmark:
    """A table as a benchmark (module docstring).

    name: the benchmark's name (``--benchmark NAME``).
    space: a registered tabular space's name, or a function returning the
        :class:`~nas.pool.PoolSpace` (called once per process).
    score: the metric a single-objective search optimises (its direction is the
        metric's).
    front: the two metrics of the multi-objective search.
    noise: the ``tabular`` evaluator's noise (``{"noise_sd": 0.4}``, ``{"noise_rel":
        0.01}``); nothing: noiseless only.
    max_params: the single-objective budget on the recorded ``budget_cost``; ``None``:
        the table's median.
    reference: per front metric, the hypervolume's reference value; a metric left out
        takes the table's worst value.
    budget_cost: the recorded cost the budget and the baselines rank by.
    """

    name: str
    space: str | Callable[[], PoolSpace]
    score: str
    front: tuple[str, str]
    noise: Mapping[str, float] = field(default_factory=dict)
    max_params: float | None = None
    reference: Mapping[str, float] = field(default_factory=dict)
    budget_cost: str = "params"

    def load(self) -> PoolSpace:
        """The space, checked against the metrics this benchmark names (one line each)."""
        if callable(self.space):
            space = self.space()
        else:
            from nas.space import get_space

            space = get_space(self.space)  # type: ignore[assignment]  # checked below
        if not isinstance(space, PoolSpace):
            raise BenchmarkError(f"benchmark {self.name}: its space is a "
                                 f"{type(space).__name__}, not a tabular PoolSpace; build it "
                                 "with searchers.benchmarks.table_space")
        for metric in (self.score, *self.front, self.budget_cost, *self.reference):
            if metric not in space.metrics:
                raise BenchmarkError(f"benchmark {self.name}: the table records no "
                                     f"{metric!r}; use one of {', '.join(space.metrics)}")
        return space


BENCHMARKS: Registry[TabularBenchmark] = Registry("benchmark")


def register_benchmark(benchmark: TabularBenchmark) -> TabularBenchmark:
    """Register ``benchmark`` under its name (a second one of that name is an error)."""
    if len(benchmark.front) != 2:
        raise BenchmarkError(f"benchmark {benchmark.name}: front must name two metrics, got "
                             f"{benchmark.front!r}")
    BENCHMARKS.add(benchmark.name, benchmark)
    return benchmark


def benchmark_names() -> list[str]:
    return BENCHMARKS.names()


def get_benchmark(name: str) -> TabularBenchmark:
    """The registered benchmark ``name`` (an unknown one is one line listing the known)."""
    if name not in BENCHMARKS.names():
        raise BenchmarkError(f"unknown benchmark {name!r}; registered: "
                             f"{', '.join(BENCHMARKS.names())}; a table of yours is "
                             "registered by a plug-in file (--plugin FILE)")
    return BENCHMARKS.get(name)


def table_space(name: str, rows: Sequence[Mapping[str, Any]],
                metrics: Mapping[str, Sequence[float]], metric_info: Mapping[str, Metric], *,
                choices: Sequence[Categorical] | None = None, depth: str | None = None,
                layer_choices: Mapping[int, Sequence[str]] | None = None,
                graph: Callable[..., Any] | None = None, description: str = "") -> PoolSpace:
    """A :class:`~nas.pool.PoolSpace` from plain rows: ``rows`` (``choice -> value``,
    one per architecture), ``metrics`` (a column per quantity, a value per row) and
    ``metric_info``. ``choices`` default to each column's recorded values, sorted, the
    first the default; ``depth``/``layer_choices``: as for ``PoolSpace`` (choices of
    layers past a row's depth are dropped); ``graph``: ``arch -> networkx.DiGraph``,
    default :func:`nas.pool.layer_chain`."""
    if not rows:
        raise BenchmarkError(f"table {name}: no rows")
    if choices is None:
        columns = list(rows[0])
        choices = []
        for column in columns:
            values = sorted({r[column] for r in rows if column in r}, key=_order)
            choices.append(Categorical(column, tuple(values), values[0], kind="other"))
    return PoolSpace(name, choices, rows, metrics, metric_info, depth=depth,
                     layer_choices=layer_choices, graph=graph,
                     description=description or f"table {name}: {len(rows)} rows")


def _order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int | float) else (1, str(value))


# ---------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------


def sign(space: PoolSpace, name: str) -> float:
    """−1 for a maximised quantity: ``sign·value`` is minimised (hypervolume's form)."""
    return -1.0 if space.metric_info[name].direction == "maximize" else 1.0


def front_mask(points: np.ndarray) -> np.ndarray:
    """The non-dominated points (minimisation form)."""
    from searchers.pareto import dominance_numbers

    return dominance_numbers(points) == 0 if len(points) else np.zeros(0, dtype=bool)


@dataclass
class Run:
    """One search: per evaluation, the observed and the recorded objective values, and
    the ask times (seconds)."""

    observed: np.ndarray
    recorded: np.ndarray
    asks: list[float]


class Bench:
    """One benchmark's space, optimum, budget and reference (module docstring)."""

    def __init__(self, benchmark: TabularBenchmark) -> None:
        from searchers.pareto import hypervolume

        self.name = benchmark.name
        self.setup = benchmark
        self.space = benchmark.load()
        costs = self.space.metrics[benchmark.budget_cost]
        self.max_params = float(benchmark.max_params if benchmark.max_params is not None
                                else np.median(costs))
        self.allowed = self.space.within({benchmark.budget_cost: self.max_params})
        self.optimum = self.space.best(benchmark.score, self.allowed)
        self.ref = np.array([sign(self.space, n) * self._reference(n)
                             for n in benchmark.front])
        table = np.column_stack([sign(self.space, n) * self.space.metrics[n]
                                 for n in benchmark.front])
        self.best_hv = hypervolume(table[front_mask(table)], self.ref)
        if not self.best_hv > 0:
            raise BenchmarkError(f"benchmark {self.name}: the table's front has no "
                                 f"hypervolume up to the reference {benchmark.reference}; "
                                 "set a reference worse than some rows")

    def _reference(self, name: str) -> float:
        if name in self.setup.reference:
            return float(self.setup.reference[name])
        values = self.space.metrics[name]
        return float(values.min() if self.space.metric_info[name].direction == "maximize"
                     else values.max())

    def objectives(self, mode: str) -> tuple[str, ...]:
        return (self.setup.score,) if mode == "so" else tuple(self.setup.front)

    def evaluator(self, mode: str, noisy: bool, seed: int) -> Any:
        from evaluators.tabular import TabularEvaluator

        return TabularEvaluator(self.space, self.objectives(mode),
                                **(dict(self.setup.noise) if noisy else {}), seed=seed)

    def search(self, searcher: str, mode: str, noisy: bool, seed: int, trials: int) -> Run:
        """A study of ``trials`` evaluations through the loop (in memory, its records in
        a temporary folder)."""
        from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study
        from searchers.results import complete_trials

        asks: list[float] = []
        limit = self.max_params if mode == "so" else None
        settings = StudySettings(max_params=limit if self.setup.budget_cost == "params"
                                 else None)
        shm = Path("/dev/shm")  # noqa: S108 (a private temporary folder inside it)
        with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder, \
                timed_asks(asks):
            spec = StudySpec.for_run(
                searcher=searcher, name=f"{self.name}-{mode}", run_dir=folder, seed=seed,
                settings=settings, options=StudyOptions(storage=":memory:"),
                default_trials=trials)
            study = run_study(spec, self.space, self.evaluator(mode, noisy, seed))
            done = sorted(complete_trials(study), key=lambda t: t.number)
        names = self.objectives(mode)
        observed = np.array([t.values for t in done])
        recorded = np.array([[{**t.user_attrs["costs"], **t.user_attrs["metrics"]}[n]
                              for n in names] for t in done])
        return Run(observed, recorded, asks)

    def baseline(self, name: str, mode: str, noisy: bool, seed: int, n: int) -> Run:
        """``largest`` or ``rank-params`` (module docstring) with ``n`` evaluations."""
        costs = self.space.metrics[self.setup.budget_cost]
        under = [int(i) for i in np.argsort(-costs, kind="stable") if self.allowed[i]]
        if name == "largest":
            rows = under[:1]
        elif mode == "so":
            rows = under[:n]
        else:
            order = np.argsort(costs, kind="stable")
            rows = [int(order[i]) for i in np.linspace(0, len(order) - 1, n).round().astype(int)]
        evaluator = self.evaluator(mode, noisy, seed)
        names = self.objectives(mode)
        results = [evaluator(self.space.archs[r]) for r in rows]
        return Run(np.array([r.values for r in results]),
                   np.array([[self.space.record(r)[k] for k in names] for r in rows]), [])

    def measure(self, run: Run, mode: str, n: int) -> float:
        """Regret (``so``) or relative hypervolume (``mo``) after ``n`` evaluations."""
        from searchers.pareto import hypervolume

        names = self.objectives(mode)
        observed, recorded = run.observed[:n], run.recorded[:n]
        signs = np.array([sign(self.space, k) for k in names])
        if mode == "so":
            best = int(np.argmin(signs[0] * observed[:, 0]))
            return float(signs[0] * (recorded[best, 0] - self.optimum)) + 0.0  # no -0.0
        mask = front_mask(observed * signs)
        return hypervolume(recorded[mask] * signs, self.ref) / self.best_hv


@contextmanager
def timed_asks(into: list[float]) -> Iterator[None]:
    """Times :meth:`searchers.proposals.StudySearch.ask` while active (seconds into
    ``into``)."""
    from searchers.base import Candidate
    from searchers.proposals import StudySearch

    original = StudySearch.ask

    def ask(search: StudySearch) -> Candidate:
        start = time.perf_counter()
        try:
            return original(search)
        finally:
            into.append(time.perf_counter() - start)

    StudySearch.ask = ask  # type: ignore[method-assign,assignment]  # patched for the run
    try:
        yield
    finally:
        StudySearch.ask = original  # type: ignore[method-assign]  # restored


Alternative = Literal["two-sided", "greater", "less"]


def wilcoxon(a: Sequence[float], b: Sequence[float],
             alternative: Alternative = "two-sided") -> float:
    """The paired Wilcoxon signed-rank p of ``a − b`` (scipy, ``zero_method="wilcox"``):
    ``alternative="greater"`` tests whether ``a`` tends to exceed ``b``; 1 when every
    pair ties."""
    from scipy.stats import wilcoxon as test

    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    if not np.any(diff):
        return 1.0
    return float(test(diff, zero_method="wilcox", alternative=alternative).pvalue)


@dataclass
class Comparison:
    """One searcher against one control at one budget: the fraction of seeds it wins,
    the one-sided p (that it is better) and the two-sided p."""

    won: float
    p_better: float
    p_two_sided: float


def compare_runs(x: np.ndarray, control: np.ndarray, mode: str) -> Comparison:
    """``x`` against ``control`` (paired per seed): better is lower regret (``so``) or
    higher hypervolume (``mo``)."""
    if mode == "so":
        won, better = float(np.mean(x < control)), "less"
    else:
        won, better = float(np.mean(x > control)), "greater"
    return Comparison(won, wilcoxon(x, control, better), wilcoxon(x, control))  # type: ignore[arg-type]  # "less" or "greater"


def searchers_with_controls(searchers: Sequence[str]) -> list[str]:
    """The controls first, then the other searchers asked for (each once)."""
    return list(dict.fromkeys([*CONTROLS, *searchers]))


def compare(benchmark: str | TabularBenchmark, seeds: Sequence[int], trials: int,
            searchers: Sequence[str], modes: Sequence[str] = ("so", "mo"),
            noise: Sequence[bool] = (False, True),
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Every searcher (the controls added) and baseline on ``benchmark``; returns the
    JSON-safe results: per mode and noise, per searcher, the measure after each
    evaluation for each seed, the comparisons with each control at each budget, and the
    ask times per mode (ms, median over trials 91-100 of the noiseless runs, the slowest
    seed)."""
    from searchers.base import SEARCHERS

    spec = benchmark if isinstance(benchmark, TabularBenchmark) else get_benchmark(benchmark)
    bench = Bench(spec)
    budgets = [b for b in BUDGETS if b <= trials] or [trials]
    unknown = [s for s in searchers if s not in SEARCHERS]
    if unknown:
        raise BenchmarkError(f"unknown searcher {unknown[0]!r}; registered: "
                             f"{', '.join(SEARCHERS.names())}")
    names = searchers_with_controls(searchers)
    out: dict[str, Any] = {
        "benchmark": spec.name, "rows": bench.space.size(), "seeds": list(seeds),
        "trials": trials, "budgets": budgets, "max_params": bench.max_params,
        "optimum": bench.optimum, "front": list(spec.front), "score": spec.score,
        "reference": dict(zip(spec.front, map(abs, bench.ref.tolist()), strict=True)),
        "table_hypervolume": bench.best_hv, "noise": dict(spec.noise), "results": {},
        "ask_ms": {}}
    for mode in modes:
        for noisy in (noise if spec.noise else (False,)):
            key = f"{mode}/noise-{'on' if noisy else 'off'}"
            values: dict[str, list[list[float]]] = {}
            for searcher in names:
                if mode == "mo" and searcher in SINGLE_OBJECTIVE:
                    continue
                started = time.perf_counter()
                per_seed = []
                for seed in seeds:
                    run = bench.search(searcher, mode, noisy, seed, trials)
                    per_seed.append([bench.measure(run, mode, n)
                                     for n in range(1, len(run.observed) + 1)])
                    if not noisy and len(run.asks) >= 100:
                        ms = 1000 * float(np.median(run.asks[90:100]))
                        slowest = out["ask_ms"].setdefault(mode, {})
                        slowest[searcher] = max(slowest.get(searcher, 0.0), ms)
                values[searcher] = per_seed
                if progress is not None:
                    progress(f"{spec.name} {key} {searcher}: {len(seeds)} seeds in "
                             f"{time.perf_counter() - started:.0f} s")
            for baseline in BASELINES:
                values[baseline] = [[bench.measure(bench.baseline(baseline, mode, noisy, seed,
                                                                  n), mode, n)
                                     if n in budgets else float("nan")
                                     for n in range(1, trials + 1)] for seed in seeds]
            out["results"][key] = {"values": values,
                                   "comparisons": comparisons(values, mode, budgets)}
    return out


def comparisons(values: Mapping[str, list[list[float]]], mode: str,
                budgets: Sequence[int]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{searcher: {control: {budget: Comparison as a dict}}}`` for every entry but the
    control itself."""
    from dataclasses import asdict

    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name, v in values.items():
        for control in CONTROLS:
            if name == control or control not in values:
                continue
            x, c = np.array(v, dtype=np.float64), np.array(values[control], dtype=np.float64)
            out.setdefault(name, {})[control] = {
                str(b): asdict(compare_runs(x[:, b - 1], c[:, b - 1], mode))
                for b in budgets if x.shape[1] >= b and c.shape[1] >= b}
    return out


# ---------------------------------------------------------------------------
# one run against the controls (``nas report``)
# ---------------------------------------------------------------------------

#: paired control seeds a run's report draws (each a few tens of milliseconds on a table)
REPORT_SEEDS = 10
#: a run is better than a control when the control reaches the run's hypervolume in at
#: most this share of the seeds: the run wins >= 80 % of them, docs/benchmarks.md's bar
REACHED_AT_MOST = 0.2


def benchmark_of_space(name: str) -> TabularBenchmark | None:
    """The benchmark whose space is the space named ``name``: a registered benchmark's,
    else a registered tabular space's own (its first score against its parameters, the
    defaults of :class:`TabularBenchmark`); ``None`` for a space that trains models."""
    for registered in BENCHMARKS.names():
        benchmark = BENCHMARKS.get(registered)
        space = benchmark.space
        if (space if isinstance(space, str) else benchmark.load().name) == name:
            return benchmark
    from nas.space import get_space, list_spaces

    if name not in list_spaces(tabular=True):
        return None
    pool = get_space(name)
    if not isinstance(pool, PoolSpace):
        return None
    scores = [m for m, info in pool.metric_info.items() if info.kind == "score"]
    if not scores or "params" not in pool.metrics:
        return None
    return TabularBenchmark(name, name, score=scores[0], front=(scores[0], "params"))


def run_against_controls(benchmark: TabularBenchmark, rows: Sequence[int], run_seed: int,
                         seeds: int = REPORT_SEEDS) -> dict[str, Any]:
    """A run's evaluated ``rows`` against the controls given as many evaluations: the
    hypervolume of the recorded values of its front on the benchmark's two front metrics
    (relative to the table's front, :meth:`Bench.measure`), and per control the same
    measure on ``seeds`` noiseless runs, their seeds derived from ``run_seed``. Computed
    anew each time: a few tens of milliseconds per control run."""
    from nas.seeding import MAX_SEED, stage_seed

    bench = Bench(benchmark)
    names = bench.objectives("mo")
    recorded = np.array([[bench.space.record(r)[k] for k in names] for r in rows])
    n = len(rows)
    hv = bench.measure(Run(recorded, recorded, []), "mo", n)
    drawn = [stage_seed(run_seed, f"report-controls-{k}") % (MAX_SEED + 1)
             for k in range(seeds)]
    out: dict[str, Any] = {"benchmark": benchmark.name, "front": list(names),
                           "evaluations": n, "hypervolume": hv, "seeds": drawn,
                           "controls": {}}
    for control in CONTROLS:
        values = []
        for seed in drawn:
            run = bench.search(control, "mo", False, seed, n)
            values.append(bench.measure(run, "mo", len(run.observed)))
        reached = sum(v >= hv for v in values)
        out["controls"][control] = {"hypervolumes": values, "reached": reached}
    out["better"] = all(c["reached"] <= REACHED_AT_MOST * seeds
                        for c in out["controls"].values())
    return out


# ---------------------------------------------------------------------------
# the built-in benchmarks
# ---------------------------------------------------------------------------

register_benchmark(TabularBenchmark(
    "nas-bench-bert", "nas-bench-bert", score="sst", front=("sst", "params"),
    noise={"noise_sd": 0.4}))
# 5 s: above every latency but those of the 447 ``embed = 192`` rows whose runs look
# recorded in milliseconds (spaces.hw_gpt_bench)
register_benchmark(TabularBenchmark(
    "hw-gpt-bench", "hw-gpt-bench", score="perplexity", front=("perplexity", "latency_s"),
    noise={"noise_rel": 0.01}, reference={"latency_s": 5.0}))
