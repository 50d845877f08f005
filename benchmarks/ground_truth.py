"""The multi-trial searchers on tabular benchmarks with known answers (issue 29): NAS-Bench-
BERT (Serianni & Kalita, 2023) and HW-GPT-Bench's GPT-2 S space (Sukthanker et al., 2024),
run by ``benchmarks/searchers.py --benchmark NAME``.

Every searcher runs through the real study loop (:func:`searchers.loop.run_study`: the
bridge, the budget, the mapping of a proposal to the nearest unevaluated recorded row,
the trial records), scored by the ``tabular`` evaluator, on paired seeds: seed ``s`` of
every searcher sees the same evaluation noise (the evaluator's seed is ``s``).

Single-objective (``so``): the best recorded score (NAS-Bench-BERT: SST-2 dev accuracy;
HW-GPT-Bench: perplexity) under a parameter budget, the median parameter count of the
table (the study's ``max_params``: proposals map to rows within it). The incumbent after
``n`` evaluations is the best *observed* (noisy) value; its regret is the table's
optimum under the budget minus its *recorded* value (points; perplexity: recorded minus
optimum).

Multi-objective (``mo``): accuracy (SST-2) against params on NAS-Bench-BERT, perplexity
against CPU latency on HW-GPT-Bench, no budget. After ``n`` evaluations the front of the
observed values is taken and the hypervolume of its points' recorded values computed
(optuna's exact hypervolume), relative to the table's own front, with the reference
point: NAS-Bench-BERT (lowest SST-2 of the table, most params of the table); HW-GPT-Bench
(highest perplexity of the table, 5 s: above every latency but those of the 447
``embed = 192`` rows whose runs look recorded in milliseconds, see
:mod:`spaces.hw_gpt_bench`).

Baselines (no search): ``largest`` evaluates the largest model under the budget once
(``mo`` too: that one point on the front); ``rank-params`` evaluates the ``n`` largest
models under the budget (``mo``: ``n`` models evenly spaced in the table's order of
parameter count), the incumbent or front again chosen on observed values.

Against ``random`` at each budget: the fraction of paired seeds a searcher wins (strictly
lower regret or higher hypervolume; ties are not wins), and the two-sided Wilcoxon
signed-rank p-value (scipy; ``zero_method="wilcox"``, 1 when every pair ties). The ask
time is the wall time of :meth:`StudySearch.ask` (the sampler, the bridge and the
mapping) per trial, median over trials 91-100 of the noiseless single-objective runs.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from evaluators.tabular import TabularEvaluator
from nas.pool import PoolSpace
from nas.space import get_space
from searchers.base import SEARCHERS
from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study
from searchers.proposals import StudySearch
from searchers.results import complete_trials

optuna.logging.set_verbosity(optuna.logging.ERROR)

BUDGETS = (10, 20, 40, 100)
BASELINES = ("largest", "rank-params")
#: searchers that optimise one objective only
SINGLE_OBJECTIVE = {"lanas"}


@dataclass(frozen=True)
class Setup:
    """What is measured on one benchmark (module docstring)."""

    score: str
    front: tuple[str, str]
    noise: dict[str, float]
    latency_ref: float | None = None

    def reference(self, space: PoolSpace) -> np.ndarray:
        """The hypervolume's reference point in minimisation form (module docstring)."""
        ref = []
        for name in self.front:
            values = space.metrics[name]
            worst = values.min() if space.metric_info[name].direction == "maximize" \
                else values.max()
            if name == "latency_s" and self.latency_ref is not None:
                worst = self.latency_ref
            ref.append(float(worst) * sign(space, name))
        return np.array(ref)


SETUPS = {
    "nas-bench-bert": Setup("sst", ("sst", "params"), {"noise_sd": 0.4}),
    "hw-gpt-bench": Setup("perplexity", ("perplexity", "latency_s"), {"noise_rel": 0.01},
                          latency_ref=5.0),
}


def sign(space: PoolSpace, name: str) -> float:
    """−1 for a maximised quantity: ``sign·value`` is minimised (hypervolume's form)."""
    return -1.0 if space.metric_info[name].direction == "maximize" else 1.0


def hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """The exact hypervolume of ``points`` (minimisation form) up to ``ref``."""
    from optuna._hypervolume import compute_hypervolume

    inside = points[(points < ref).all(axis=1)] if len(points) else points
    return float(compute_hypervolume(inside, ref)) if len(inside) else 0.0


def front_mask(points: np.ndarray) -> np.ndarray:
    """The non-dominated points (minimisation form)."""
    keep = np.ones(len(points), dtype=bool)
    for i, p in enumerate(points):
        dominated = ((points <= p).all(axis=1) & (points < p).any(axis=1)).any()
        keep[i] = not dominated
    return keep


@dataclass
class Run:
    """One search: per evaluation, the observed and the recorded objective values, and
    the ask times."""

    observed: np.ndarray
    recorded: np.ndarray
    asks: list[float]


class Bench:
    """One benchmark's space, optimum, budget and reference (module docstring)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.setup = SETUPS[name]
        self.space: PoolSpace = get_space(name)  # type: ignore[assignment]  # a tabular space is a PoolSpace
        self.max_params = float(np.median(self.space.metrics["params"]))
        self.allowed = self.space.within({"params": self.max_params})
        self.optimum = self.space.best(self.setup.score, self.allowed)
        self.ref = self.setup.reference(self.space)
        table = np.column_stack([sign(self.space, n) * self.space.metrics[n]
                                 for n in self.setup.front])
        self.best_hv = hypervolume(table[front_mask(table)], self.ref)

    def objectives(self, mode: str) -> tuple[str, ...]:
        return (self.setup.score,) if mode == "so" else self.setup.front

    def evaluator(self, mode: str, noisy: bool, seed: int) -> TabularEvaluator:
        return TabularEvaluator(self.space, self.objectives(mode),
                                **(self.setup.noise if noisy else {}), seed=seed)

    # -- runs ------------------------------------------------------------------------
    def search(self, searcher: str, mode: str, noisy: bool, seed: int, trials: int) -> Run:
        """A study of ``trials`` evaluations through the loop (in memory, records on a
        temporary folder)."""
        asks: list[float] = []
        settings = StudySettings(max_params=self.max_params if mode == "so" else None)
        shm = Path("/dev/shm")  # noqa: S108 (a private temporary folder inside it)
        with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder, \
                _timed_asks(asks):
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
        params = self.space.metrics["params"]
        under = [int(i) for i in np.argsort(-params, kind="stable") if self.allowed[i]]
        if name == "largest":
            rows = under[:1]
        elif mode == "so":
            rows = under[:n]
        else:
            order = np.argsort(params, kind="stable")
            rows = [int(order[i]) for i in np.linspace(0, len(order) - 1, n).round().astype(int)]
        evaluator = self.evaluator(mode, noisy, seed)
        names = self.objectives(mode)
        results = [evaluator(self.space.archs[r]) for r in rows]
        return Run(np.array([r.values for r in results]),
                   np.array([[self.space.record(r)[k] for k in names] for r in rows]), [])

    # -- measures --------------------------------------------------------------------
    def measure(self, run: Run, mode: str, n: int) -> float:
        """Regret (``so``) or relative hypervolume (``mo``) after ``n`` evaluations."""
        names = self.objectives(mode)
        observed, recorded = run.observed[:n], run.recorded[:n]
        signs = np.array([sign(self.space, k) for k in names])
        if mode == "so":
            best = int(np.argmin(signs[0] * observed[:, 0]))
            return float(signs[0] * (recorded[best, 0] - self.optimum)) + 0.0  # no -0.0
        mask = front_mask(observed * signs)
        return hypervolume(recorded[mask] * signs, self.ref) / self.best_hv


class _timed_asks:  # noqa: N801  (used as a context manager)
    """Times :meth:`StudySearch.ask` while active (appends seconds to ``into``)."""

    def __init__(self, into: list[float]) -> None:
        self.into = into
        self.original: Callable[..., Any] | None = None

    def __enter__(self) -> None:
        self.original = original = StudySearch.ask
        into = self.into

        def ask(search: StudySearch) -> Any:
            start = time.perf_counter()
            try:
                return original(search)
            finally:
                into.append(time.perf_counter() - start)

        StudySearch.ask = ask  # type: ignore[method-assign]  # patched for the run

    def __exit__(self, *exc: object) -> None:
        StudySearch.ask = self.original  # type: ignore[method-assign]  # restored


def wilcoxon(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p of the paired differences (1 when all tie)."""
    from scipy.stats import wilcoxon as test

    diff = np.asarray(a) - np.asarray(b)
    if not np.any(diff):
        return 1.0
    return float(test(diff, zero_method="wilcox").pvalue)


def run_benchmark(name: str, seeds: Sequence[int], trials: int, searchers: Sequence[str],
                  plot_dir: Path | None, modes: Sequence[str] = ("so", "mo"),
                  noise: Sequence[bool] = (False, True), tag: str = "") -> str:
    """Every searcher and baseline on ``name`` (``modes``, with and without ``noise``);
    returns the markdown tables (and writes the plot ``ground_truth_<name><tag>.png``)."""
    bench = Bench(name)
    budgets = [b for b in BUDGETS if b <= trials]
    known = set(SEARCHERS.names())
    skipped = [s for s in searchers if s not in known]
    searchers = [s for s in searchers if s in known]
    lines = [f"### {name}: {bench.space.size()} recorded architectures; {len(seeds)} paired "
             f"seeds ({seeds[0]}–{seeds[-1]}), {trials} evaluations per run",
             "",
             f"- single-objective: {bench.setup.score} under params ≤ "
             f"{bench.max_params / 1e6:.2f}M (the table's median); optimum "
             f"{bench.optimum:.3f}; regret in the score's units (median [IQR])",
             f"- multi-objective: {bench.setup.front[0]} vs {bench.setup.front[1]}, "
             f"hypervolume / the table's ({bench.best_hv:.4g}), reference point "
             f"{dict(zip(bench.setup.front, map(abs, bench.ref.tolist()), strict=True))}",
             f"- noise: {bench.setup.noise}"]
    if skipped:
        lines.append(f"- not registered here, skipped: {', '.join(skipped)}")
    curves: dict[tuple[str, bool, str], np.ndarray] = {}
    asks: dict[str, float] = {}
    for mode in modes:
        for noisy in noise:
            values: dict[str, np.ndarray] = {}
            for searcher in searchers:
                if mode == "mo" and searcher in SINGLE_OBJECTIVE:
                    continue
                per_seed = []
                started = time.perf_counter()
                for seed in seeds:
                    run = bench.search(searcher, mode, noisy, seed, trials)
                    per_seed.append([bench.measure(run, mode, n)
                                     for n in range(1, len(run.observed) + 1)])
                    if mode == "so" and not noisy and trials >= 100:
                        asks.setdefault(searcher, 0.0)
                        asks[searcher] = max(asks[searcher],
                                             1000 * statistics.median(run.asks[90:100]))
                print(f"  {name} {mode} noise={noisy} {searcher}: {len(seeds)} seeds in "
                      f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
                values[searcher] = np.array(per_seed)
                curves[(mode, noisy, searcher)] = values[searcher]
            for baseline in BASELINES:
                values[baseline] = np.array([[bench.measure(
                    bench.baseline(baseline, mode, noisy, seed, n), mode, n)
                    if n in budgets else np.nan for n in range(1, trials + 1)]
                    for seed in seeds])
            lines += ["", table(bench, mode, noisy, values, budgets)]
    if asks:
        lines += ["", "Ask time per trial at trials 91–100 (ms, median over a run; the "
                  "slowest seed): " + ", ".join(f"{s} {ms:.1f}" for s, ms in asks.items())]
    if plot_dir is not None:
        plot(bench, curves, plot_dir / f"ground_truth_{name}{tag}.png")
        lines += ["", f"![{name}](ground_truth_{name}{tag}.png)"]
    return "\n".join(lines)


def table(bench: Bench, mode: str, noisy: bool, values: dict[str, np.ndarray],
          budgets: Sequence[int]) -> str:
    """Median [IQR] per searcher and budget, with wins and p against random."""
    better = (lambda a, b: a < b) if mode == "so" else (lambda a, b: a > b)
    what = "regret" if mode == "so" else "hypervolume"
    head = f"| {mode} {what}, noise {'on' if noisy else 'off'} | " + " | ".join(
        f"{b} evals" for b in budgets) + " |"
    rows = [head, "|" + "---|" * (len(budgets) + 1)]
    for name, v in values.items():
        cells = []
        for b in budgets:
            x = v[:, b - 1]
            q1, med, q3 = np.percentile(x, [25, 50, 75])
            cell = f"{med:.3f} [{q1:.3f}, {q3:.3f}]"
            if name != "random" and "random" in values:
                r = values["random"][:, b - 1]
                wins = float(np.mean(better(x, r)))
                cell += f" won {wins:.0%}, p {wilcoxon(x, r):.2g}"
            cells.append(cell)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(bench: Bench, curves: dict[tuple[str, bool, str], np.ndarray], path: Path) -> None:
    """Regret and hypervolume against evaluations, median with the interquartile band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True, squeeze=False)
    for (mode, noisy, searcher), v in curves.items():
        ax = axes[0 if mode == "so" else 1][1 if noisy else 0]
        x = np.arange(1, v.shape[1] + 1)
        q1, med, q3 = np.percentile(v, [25, 50, 75], axis=0)
        (line,) = ax.plot(x, med, label=searcher)
        ax.fill_between(x, q1, q3, alpha=0.15, color=line.get_color())
        ax.set_title(f"{'regret of ' + bench.setup.score if mode == 'so' else 'hypervolume'}"
                     f", noise {'on' if noisy else 'off'}")
        ax.set_xscale("log")
        if mode == "so":
            ax.set_yscale("symlog", linthresh=0.1)
    for ax in axes[1]:
        ax.set_xlabel("evaluations")
    axes[0][0].legend()
    fig.suptitle(f"{bench.name}: median and interquartile range over paired seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
