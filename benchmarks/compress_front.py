"""The searched front of the teacher's sub-networks on the blockwise proxy, against random
sub-networks, uniform truncation and the knapsack, over paired seeds (results in
benchmarks/RESULTS.md).

The teacher is the default one-epoch fine-tune of the packaged MiniLM-L6-H384 on SST-2,
found as every recipe finds it (:func:`nas.teacher.finetune_teacher` with the default
:class:`~nas.teacher.FinetuneConfig`: a cache hit, or the fine-tune itself from an empty
cache), loaded into the ``bert`` design (:func:`nas.hf.load_teacher_as_design`) as
``recipes/compress.py`` does, and sorted by activation importance (Minitron, Muralidharan
et al. 2024, §2.1) on the calibration sample of ``benchmarks/blockwise_table.py`` (256
SST-2 training sentences, seed 0, length-sorted, batches of 32, at most 64 tokens). On
it the blockwise table is built once (Puzzle, Bercovich et al. 2025, §3:
:func:`evaluators.blockwise.block_table`, the teacher's block states cached), with this
machine's batch-1 latency model (:func:`nas.latency.space_predictor`, 128 tokens).

**The proxy.** A sub-network's score is the ``blockwise`` evaluator's: minus the summed
block error of its layers, with the table's predicted batch-1 latency as its cost (both
read from the table, microseconds per candidate). The knapsack's objective is the same
sum, so the knapsack is the exact optimum of this proxy under a latency budget.

**The arms**, each a set of (summed block error, predicted latency) points:

* ``tpe``, ``nsga2``: the engine's searchers through the real study loop
  (:func:`searchers.loop.run_study`, the ``blockwise`` evaluator plus ``latency_ms`` as a
  second, minimised objective by :func:`searchers.loop.study_evaluator`), ``--trials``
  evaluations each;
* ``random``: the engine's ``random`` searcher in the same loop, the same evaluations;
  seed ``s`` of every searcher is the study's seed ``s`` (paired seeds);
* ``truncation``: the first k layers, k = 1..L, all heads and FFN neurons, at the
  teacher's width (L points), and at each of the space's hidden widths (4L points);
* ``knapsack``: the exact Pareto front of the proxy against latency
  (:func:`knapsack_pareto`: the knapsack under the teacher's latency, then again just
  below the latency of each pick, until no sub-network is faster).

**Hypervolume.** In the plane (summed block error, ln(latency / the teacher's)), both
minimised, with one reference point for every arm and seed: (the largest summed error
any sub-network of the space can have, ln 1 = 0, the teacher's latency), over speed-ups
from 1x to 20x (``MAX_SPEEDUP``; the compress method's largest ratio is 15): a faster point counts
as 20x, so that the sub-networks that keep almost nothing (the space reaches several
hundred times the teacher's speed with the embeddings and the head alone) do not weigh
in. The logarithm gives each factor of speed-up the same weight (2x, 5x and 15x spread
evenly), so the front is judged over the whole range, not mostly at the slow end. The
same on a linear latency axis (ms, same range and reference) is printed too. The
knapsack's front has the largest hypervolume any set of sub-networks can have on this
proxy, so each arm is reported as a share of it.

**Equal latency.** At speed-ups 1.5, 2, 3, 5, 10, 15 and 20 over the teacher: the knapsack's
error under that latency budget, and each arm's best error under the same budget
(the gap is never negative: the knapsack is the optimum).

Run: ``OMP_NUM_THREADS=1 NAS_DATA_DIR=... python benchmarks/compress_front.py [--seeds 20]
[--first-seed 100] [--trials 200] [--teacher-cache DIR | --teacher-dir MODEL_DIR]``; it
prints markdown (record it in ``benchmarks/RESULTS.md`` with the command and commit) and
writes ``benchmarks/compress_front.png``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path: put the repository root
# there instead, so that the engine's packages and `benchmarks.*` are found.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import logging  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from evaluators.blockwise import BlockTable, BlockwiseEvaluator  # noqa: E402
from evaluators.blockwise_knapsack import Pick, knapsack, truncations  # noqa: E402
from searchers.pareto import dominance_numbers, hypervolume  # noqa: E402

#: the searched arms and the random arm, all through the engine's study loop
SEARCHED = ("tpe", "nsga2")
RANDOM = "random"
#: evaluations at which the hypervolume is reported (those below --trials, and --trials);
#: 40 is the trial budget of experiments/compress_sst2.yaml
BUDGETS = (20, 40, 100, 200)
#: speed-ups over the teacher at which the arms are compared with the knapsack
RATIOS = (1.5, 2, 3, 5, 10, 15, 20)
#: the hypervolume's latency range: from the teacher's latency down to 1/20 of it (issue
#: 30's largest ratio is 15); a faster point counts as this fast
MAX_SPEEDUP = 20.0


# ---------------------------------------------------------------------------
# points, fronts and their hypervolume on the proxy
# ---------------------------------------------------------------------------


def proxy_points(table: BlockTable, archs: Sequence[Any]) -> np.ndarray:
    """``(n, 2)``: each architecture's summed block error (the proxy score negated) and
    its predicted batch-1 latency in ms, both from the table."""
    return np.array([[table.error_of(a), table.cost_of(a, "latency_ms")] for a in archs],
                    dtype=np.float64).reshape(-1, 2)


def largest_error(table: BlockTable) -> float:
    """The largest summed block error any architecture of the table's space has: each
    layer's worst option, at the worst width (no point lies beyond it)."""
    return float(table.error.max(axis=2).sum(axis=1).max())


@dataclass(frozen=True)
class Plane:
    """Where a front's hypervolume is measured (module docstring): the summed block
    error against ``ln(latency / teacher_ms)`` (``log``) or the latency in ms, both
    minimised, up to the reference ``(error_ref, teacher)``, over latencies from
    ``teacher_ms / max_speedup`` up (a faster point counts as that fast: the volume is
    the part of the dominated region inside that range)."""

    error_ref: float
    teacher_ms: float
    log: bool = True
    max_speedup: float = MAX_SPEEDUP

    @classmethod
    def of(cls, table: BlockTable, log: bool = True, max_speedup: float = MAX_SPEEDUP
           ) -> Plane:
        return cls(largest_error(table), float(table.teacher["latency_ms"]), log, max_speedup)

    @property
    def reference(self) -> np.ndarray:
        return np.array([self.error_ref, 0.0 if self.log else self.teacher_ms])

    def hypervolume(self, points: np.ndarray) -> float:
        """The hypervolume of ``points`` (``proxy_points``' rows) in this plane."""
        points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
        if not len(points):
            return 0.0
        ms = np.maximum(points[:, 1], self.teacher_ms / self.max_speedup)
        x = np.log(ms / self.teacher_ms) if self.log else ms
        return hypervolume(np.column_stack([points[:, 0], x]), self.reference)


def front(points: np.ndarray) -> np.ndarray:
    """The non-dominated rows of ``points`` (both columns minimised), by latency."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    kept = np.unique(points[dominance_numbers(points) == 0], axis=0)
    return kept[np.argsort(kept[:, 1], kind="stable")]


def knapsack_pareto(table: BlockTable, max_points: int = 10_000) -> list[Pick]:
    """The Pareto front of the summed block error against predicted latency: the
    knapsack's pick within the teacher's latency, then within just less than each pick's
    latency, until no architecture fits. The picks' latencies fall strictly and each is
    the least error at its budget (up to the solver's relative MIP gap; the rare pick
    that gap leaves dominated is dropped), so none is dominated. Fastest first."""
    picks: list[Pick] = []
    budget = float(table.teacher["latency_ms"])
    while len(picks) < max_points:
        pick = knapsack(table, max_latency_ms=budget)
        if pick is None:
            break
        picks.append(pick)
        budget = pick.costs["latency_ms"] * (1 - 1e-7)
    points = proxy_points(table, [p.arch for p in picks])
    kept = dominance_numbers(points) == 0
    return [p for p, k in zip(picks, kept, strict=True) if k][::-1]


def best_within(points: np.ndarray, max_ms: float) -> float:
    """The least summed error among ``points`` within ``max_ms`` (inf when none is)."""
    points = np.asarray(points, dtype=np.float64).reshape(-1, 2)
    inside = points[points[:, 1] <= max_ms]
    return float(inside[:, 0].min()) if len(inside) else float("inf")


# ---------------------------------------------------------------------------
# the searches
# ---------------------------------------------------------------------------


def search_points(table: BlockTable, searcher: str, seed: int, trials: int) -> np.ndarray:
    """``(trials, 2)`` proxy points of one study of ``searcher`` (the engine's study loop,
    in memory, its records on a temporary folder), in evaluation order."""
    from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study
    from searchers.loop import study_evaluator as make_evaluator
    from searchers.results import complete_trials

    space = table.space
    evaluator = make_evaluator(
        BlockwiseEvaluator(space, table), space,
        StudySettings(extra_objectives=["latency_ms"]), searcher,
        latency_fn=lambda arch: table.cost_of(arch, "latency_ms"))
    shm = Path("/dev/shm")  # noqa: S108 (a private temporary folder inside it)
    with tempfile.TemporaryDirectory(dir=shm if shm.is_dir() else None) as folder:
        spec = StudySpec.for_run(
            searcher=searcher, name="compress-front", run_dir=folder, seed=seed,
            settings=StudySettings(extra_objectives=["latency_ms"]),
            options=StudyOptions(storage=":memory:"), default_trials=trials)
        study = run_study(spec, space, evaluator)
        done = sorted(complete_trials(study), key=lambda t: t.number)
    # values: (block_score, latency_ms); the score is minus the summed error
    return np.array([[-t.values[0], t.values[1]] for t in done], dtype=np.float64)


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------


def _wilcoxon(a: np.ndarray, b: np.ndarray) -> float:
    from searchers.benchmarks import wilcoxon

    return wilcoxon(a.tolist(), b.tolist())


def _mean_sd(x: np.ndarray) -> str:
    return f"{np.mean(x):.4f} ± {np.std(x, ddof=1) if len(x) > 1 else 0.0:.4f}"


def hv_table(plane: Plane, runs: dict[str, list[np.ndarray]], fixed: dict[str, np.ndarray],
             best: float, budgets: Sequence[int]) -> list[str]:
    """Markdown: per arm and budget the mean ± sd of the hypervolume as a share of the
    knapsack front's (``best``), with the share of paired seeds above random and the
    Wilcoxon p; the fixed arms (truncation, knapsack) as one value."""
    rows = ["| arm | " + " | ".join(f"{n} evals" for n in budgets) + " |",
            "|---|" + "---|" * len(budgets)]
    hv = {arm: np.array([[plane.hypervolume(p[:n]) / best for n in budgets] for p in per_seed])
          for arm, per_seed in runs.items()}
    for arm, v in hv.items():
        cells = []
        for j in range(len(budgets)):
            cell = _mean_sd(v[:, j])
            if arm != RANDOM:
                r = hv[RANDOM][:, j]
                tied = np.mean(v[:, j] == r)
                cell += (f"; above random in {np.mean(v[:, j] > r):.0%} of seeds"
                         + (f" ({tied:.0%} tied)" if tied else "")
                         + f", p {_wilcoxon(v[:, j], r):.2g}")
            cells.append(cell)
        rows.append(f"| {arm} | " + " | ".join(cells) + " |")
    for arm, points in fixed.items():
        value = plane.hypervolume(points) / best
        rows.append(f"| {arm} ({len(points)} points) | " + " | ".join(
            [f"{value:.4f}"] * len(budgets)) + " |")
    return rows


def equal_latency_table(table: BlockTable, runs: dict[str, list[np.ndarray]],
                        fixed: dict[str, np.ndarray], ratios: Sequence[float]) -> list[str]:
    """Markdown: per speed-up, the knapsack's summed error within the teacher's latency
    over the ratio, and each arm's best within the same budget: the median [IQR] over
    seeds of its excess over the knapsack's, and in how many seeds it had a point there."""
    teacher = float(table.teacher["latency_ms"])
    head = ["| speed-up (budget) | knapsack error | "
            + " | ".join(f"{a}: excess" for a in [*runs, *fixed]) + " |",
            "|---|---|" + "---|" * (len(runs) + len(fixed))]
    for ratio in ratios:
        budget = teacher / ratio
        pick = knapsack(table, max_latency_ms=budget)
        if pick is None:
            head.append(f"| {ratio:g}x ({budget:.2f} ms) | none fits |"
                        + " |" * (len(runs) + len(fixed)))
            continue
        cells = []
        for per_seed in runs.values():
            best = np.array([best_within(p, budget) for p in per_seed])
            found = np.isfinite(best)
            if not found.any():
                cells.append("no point")
                continue
            q1, med, q3 = np.percentile(best[found] - pick.error, [25, 50, 75])
            cells.append(f"{med:+.3f} [{q1:+.3f}, {q3:+.3f}] ({found.sum()}/{len(best)})")
        for points in fixed.values():
            b = best_within(points, budget)
            cells.append("no point" if not np.isfinite(b) else f"{b - pick.error:+.3f}")
        head.append(f"| {ratio:g}x ({budget:.2f} ms) | {pick.error:.3f} | "
                    + " | ".join(cells) + " |")
    return head


def ratios_line(plane: Plane, runs: dict[str, list[np.ndarray]],
                fixed: dict[str, np.ndarray]) -> str:
    """Each arm's hypervolume over random's: a searcher's as the mean over seeds of the
    paired ratio, a fixed arm's over random's mean."""
    rand = [plane.hypervolume(r) for r in runs[RANDOM]]
    parts = []
    for arm, per_seed in runs.items():
        if arm != RANDOM:
            paired = [plane.hypervolume(a) / r for a, r in zip(per_seed, rand, strict=True)]
            parts.append(f"{arm}/random {np.mean(paired):.3f} (paired mean)")
    parts += [f"{arm}/random {plane.hypervolume(points) / np.mean(rand):.3f}"
              for arm, points in fixed.items() if arm != "knapsack"]
    return ", ".join(parts)


def plot(plane: Plane, runs: dict[str, list[np.ndarray]], fixed: dict[str, np.ndarray],
         best: float, seed: int, path: Path) -> None:
    """Left: the fronts of the first seed, the truncations and the knapsack front
    (summed block error against predicted latency). Right: hypervolume (share of the
    knapsack's) against evaluations, mean and ±1 sd over seeds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5))
    for arm, per_seed in runs.items():
        f = front(per_seed[0])
        left.step(f[:, 1], f[:, 0], where="post", marker=".", label=f"{arm} (seed {seed})")
    markers = iter(["x", "o"])
    for arm, points in sorted(fixed.items(), reverse=True):  # the 4 widths under the one
        if arm == "knapsack":
            f = front(points)
            left.step(f[:, 1], f[:, 0], where="post", color="black", lw=1, label=arm)
        else:
            left.plot(points[:, 1], points[:, 0], next(markers), mfc="none", label=arm)
    left.axvline(plane.teacher_ms, color="grey", ls=":", label="teacher")
    left.axvline(plane.teacher_ms / plane.max_speedup, color="grey", ls="--",
                 label=f"{plane.max_speedup:g}x faster (hypervolume's range)")
    left.set_xscale("log")
    left.set_xlim(plane.teacher_ms / (2 * plane.max_speedup), 1.2 * plane.teacher_ms)
    left.set_xlabel("predicted batch-1 latency (ms, one thread, 128 tokens)")
    left.set_ylabel("summed block error (minus the proxy score)")
    left.legend(fontsize=8)
    left.set_title("fronts on the blockwise proxy")
    trials = max(len(p) for per_seed in runs.values() for p in per_seed)
    n = np.unique(np.geomspace(1, trials, 40).round().astype(int))
    for arm, per_seed in runs.items():
        v = np.array([[plane.hypervolume(p[:k]) / best for k in n] for p in per_seed])
        mean, sd = v.mean(0), v.std(0)
        (line,) = right.plot(n, mean, label=arm)
        right.fill_between(n, mean - sd, mean + sd, alpha=0.15, color=line.get_color())
    for (arm, points), color in zip(fixed.items(), ["tab:red", "tab:purple", None],
                                    strict=True):
        if arm != "knapsack":
            right.axhline(plane.hypervolume(points) / best, ls="--", lw=1, color=color,
                          label=arm)
    right.set_xscale("log")
    right.set_xlabel("evaluations")
    right.set_ylabel("hypervolume / the knapsack front's")
    right.set_title(f"{len(next(iter(runs.values())))} paired seeds, mean ± sd")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# ---------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------


def load_sorted_table(args: argparse.Namespace) -> tuple[BlockTable, dict[str, Any]]:
    """The teacher (module docstring), sorted, and its blockwise table; what each step
    took and which teacher it was."""
    import torch

    from benchmarks.blockwise_table import calibration_batches
    from evaluators.blockwise import block_table
    from nas.compress.importance import sort_teacher
    from nas.hf import load_teacher_as_design
    from nas.latency import space_predictor
    from nas.teacher import FinetuneConfig, finetune_teacher
    from nas.tokenization import load_tokenizer
    from spaces.bert_subnet import from_design

    info: dict[str, Any] = {}
    start = time.perf_counter()
    if args.teacher_dir:
        model_dir = args.teacher_dir
        info["teacher"] = f"{model_dir} (given)"
    else:
        result = finetune_teacher("sst2", None, config=FinetuneConfig(),
                                  cache_dir=args.teacher_cache, progress=False)
        model_dir = result.model_dir
        info["teacher"] = (f"{model_dir} (key {result.key}, dev accuracy "
                           f"{100 * result.metrics['accuracy']:.2f}, "
                           f"{'cached' if result.from_cache else 'fine-tuned now'})")
    design, teacher = load_teacher_as_design(model_dir)
    tokenizer = load_tokenizer(model_dir)
    batches = calibration_batches(tokenizer, args.samples, args.batch_size, args.max_seq_len)
    info["teacher_s"] = time.perf_counter() - start

    start = time.perf_counter()
    sorted_teacher, _ = sort_teacher(teacher, batches, "activation", task="sst2", seed=0)
    space, supernet = from_design(sorted_teacher, design.config)
    info["sort_s"] = time.perf_counter() - start
    start = time.perf_counter()
    latency = space_predictor(space, seq_len=args.latency_seq_len, log=print)
    info["latency_model_s"] = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    table = block_table(space, supernet, batches, task="sst2", seed=0,
                        seq_len=args.latency_seq_len, latency_fn=latency)
    info["table_s"] = time.perf_counter() - start
    info["table_cpu_s"] = time.process_time() - cpu
    info["threads"] = torch.get_num_threads()
    return table, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--first-seed", type=int, default=100)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--searchers", default=",".join(SEARCHED),
                        help="the searched arms (random is always run)")
    parser.add_argument("--teacher-cache", default=None,
                        help="the engine cache holding the fine-tuned teacher (default: "
                             "the engine's cache, $NAS_CACHE_DIR)")
    parser.add_argument("--teacher-dir", default=None,
                        help="a fine-tuned HF BERT folder instead of the default teacher")
    parser.add_argument("--samples", type=int, default=256)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-seq-len", type=int, default=64)
    parser.add_argument("--latency-seq-len", type=int, default=128)
    parser.add_argument("--plot", default=str(Path(__file__).resolve().parent
                                              / "compress_front.png"))
    args = parser.parse_args()
    import optuna
    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    started = time.perf_counter()

    table, info = load_sorted_table(args)
    plane, linear = Plane.of(table), Plane.of(table, log=False)
    start = time.perf_counter()
    pareto = knapsack_pareto(table)
    knapsack_s = time.perf_counter() - start
    fixed = {"truncation": proxy_points(table, truncations(table)),
             "truncation, 4 widths": proxy_points(table, truncations(table, all_widths=True)),
             "knapsack": proxy_points(table, [p.arch for p in pareto])}
    best, best_linear = (plane.hypervolume(fixed["knapsack"]),
                         linear.hypervolume(fixed["knapsack"]))

    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    runs: dict[str, list[np.ndarray]] = {}
    seconds: dict[str, float] = {}
    for arm in [*args.searchers.split(","), RANDOM]:
        start = time.perf_counter()
        runs[arm] = [search_points(table, arm, seed, args.trials) for seed in seeds]
        seconds[arm] = time.perf_counter() - start
        print(f"  {arm}: {len(seeds)} seeds x {args.trials} evaluations in "
              f"{seconds[arm]:.0f} s", file=sys.stderr, flush=True)
    budgets = [n for n in BUDGETS if n < args.trials] + [args.trials]

    teacher_ms = float(table.teacher["latency_ms"])
    fastest = float(fixed["knapsack"][:, 1].min())
    lines = [
        f"Teacher: {info['teacher']}; {table.teacher['params'] / 1e6:.2f}M parameters, "
        f"{teacher_ms:.2f} ms predicted at batch 1 ({args.latency_seq_len} tokens, one "
        f"thread). Table: {len(table.widths)} widths x {table.layers} layers x "
        f"{len(table.options)} options on {args.samples} sentences in {info['table_s']:.1f} s "
        f"({info['table_cpu_s']:.1f} s CPU; {info['threads']} torch thread); sort "
        f"{info['sort_s']:.1f} s; latency model {info['latency_model_s']:.1f} s.",
        "",
        f"Knapsack front: {len(pareto)} points from {fixed['knapsack'][:, 1].max():.2f} to "
        f"{fastest:.2f} ms ({teacher_ms / fastest:.1f}x faster than the teacher), in "
        f"{knapsack_s:.1f} s. Hypervolume reference (every arm, every seed): summed block "
        f"error {plane.error_ref:.3f} (the space's largest), latency {teacher_ms:.2f} ms "
        f"(the teacher's; ln 1 = 0 on the log axis), over speed-ups 1x to "
        f"{plane.max_speedup:g}x. Knapsack hypervolume: {best:.4f} (log axis), "
        f"{best_linear:.4f} (ms axis).",
        "",
        f"Searches: {len(seeds)} paired seeds ({seeds[0]}–{seeds[-1]}), {args.trials} "
        "evaluations each; " + ", ".join(
            f"{arm} {1000 * s / (len(seeds) * args.trials):.0f} ms per evaluation"
            for arm, s in seconds.items()) + " (the loop, the sampler and the proxy).",
        "",
        "Hypervolume / the knapsack front's, log latency axis (mean ± sd over seeds):",
        "",
        *hv_table(plane, runs, fixed, best, budgets),
        "",
        "The same, linear latency axis (ms):",
        "",
        *hv_table(linear, runs, fixed, best_linear, [args.trials]),
        "",
        f"Ratios in this run (log axis, {args.trials} evaluations): "
        + ratios_line(plane, runs, fixed) + ".",
        "",
        "Equal latency: summed block error above the knapsack's at the same budget "
        f"(median [IQR] over seeds, at {args.trials} evaluations; seeds with a point "
        "within the budget):",
        "",
        *equal_latency_table(table, runs, {k: v for k, v in fixed.items() if k != "knapsack"},
                             RATIOS),
    ]
    plot(plane, runs, fixed, best, seeds[0], Path(args.plot))
    lines += ["", f"![compress front]({Path(args.plot).name})", "",
              f"Total {time.perf_counter() - started:.0f} s."]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
