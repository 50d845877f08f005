"""The multi-trial searchers on tabular benchmarks with known answers, run by
``benchmarks/searchers.py --benchmark NAME [--plugin FILE] [--out DIR]``: a thin report
over :mod:`searchers.benchmarks` (the registration of a table as a benchmark, the runs,
the controls ``random`` and ``random-params``, the baselines ``largest`` and
``rank-params``, and the paired one- and two-sided Wilcoxon tests; its docstring says
what is measured). Built in: NAS-Bench-BERT (Serianni & Kalita, 2023) and HW-GPT-Bench's
GPT-2 S space (Sukthanker et al., 2024); any table a plug-in file registers.

This module formats the results as markdown tables (median [IQR] per entry and budget;
against each control, the fraction of paired seeds won and the one-sided p that the
entry is better, then the two-sided p) and draws the curves. With ``--out DIR`` the
per-seed results go to ``DIR/<name>.json``, the tables to ``DIR/<name>.md`` and the plot
to ``DIR/ground_truth_<name><tag>.png``; without it only the tables are printed, and
nothing is written.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import optuna

from searchers.benchmarks import CONTROLS, compare

optuna.logging.set_verbosity(optuna.logging.ERROR)


def run_benchmark(name: str, seeds: Sequence[int], trials: int, searchers: Sequence[str],
                  out_dir: Path | None, modes: Sequence[str] = ("so", "mo"),
                  noise: Sequence[bool] = (False, True), tag: str = "") -> str:
    """Every searcher, control and baseline on ``name``; returns the markdown (and, with
    ``out_dir``, writes the JSON, the markdown and the plot there)."""
    results = compare(name, seeds, trials, searchers, modes, noise,
                      progress=lambda line: print(f"  {line}", file=sys.stderr, flush=True))
    text = report(results)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / f"{name}{tag}.json").write_text(json.dumps(results, indent=1) + "\n")
        plot(results, out_dir / f"ground_truth_{name}{tag}.png")
        text += f"\n\n![{name}](ground_truth_{name}{tag}.png)"
        (out_dir / f"{name}{tag}.md").write_text(text + "\n")
    return text


def report(results: dict[str, Any]) -> str:
    """The markdown of :func:`searchers.benchmarks.compare`'s results."""
    seeds = results["seeds"]
    lines = [f"### {results['benchmark']}: {results['rows']} recorded architectures; "
             f"{len(seeds)} paired seeds ({seeds[0]}–{seeds[-1]}), {results['trials']} "
             "evaluations per run", "",
             f"- single-objective: {results['score']} under params ≤ "
             f"{results['max_params'] / 1e6:.2f}M; optimum {results['optimum']:.3f}; regret in "
             "the score's units (median [IQR])",
             f"- multi-objective: {results['front'][0]} vs {results['front'][1]}, hypervolume "
             f"/ the table's ({results['table_hypervolume']:.4g}), reference point "
             f"{results['reference']}",
             f"- noise: {results['noise']}",
             "- against each control: seeds won, one-sided p (better), two-sided p "
             "(paired Wilcoxon signed-rank)"]
    for key, block in results["results"].items():
        lines += ["", table(key, block, results["budgets"])]
    for mode, asks in results["ask_ms"].items():
        lines += ["", f"Ask time per trial at trials 91–100, {mode} (ms, median over a run; "
                  "the slowest seed): " + ", ".join(f"{s} {ms:.1f}" for s, ms in asks.items())]
    return "\n".join(lines)


def table(key: str, block: dict[str, Any], budgets: Sequence[int]) -> str:
    """Median [IQR] per entry and budget, with the comparisons against the controls."""
    mode, noise = key.split("/")
    what = "regret" if mode == "so" else "hypervolume"
    rows = [f"| {mode} {what}, {noise} | " + " | ".join(f"{b} evals" for b in budgets) + " |",
            "|" + "---|" * (len(budgets) + 1)]
    for name, per_seed in block["values"].items():
        v = np.array(per_seed, dtype=np.float64)
        cells = []
        for b in budgets:
            q1, med, q3 = np.percentile(v[:, b - 1], [25, 50, 75])
            cell = f"{med:.3f} [{q1:.3f}, {q3:.3f}]"
            for control in CONTROLS:
                c = block["comparisons"].get(name, {}).get(control, {}).get(str(b))
                if c is not None:
                    cell += (f"; vs {control} {c['won']:.0%}, p {c['p_better']:.2g} "
                             f"({c['p_two_sided']:.2g})")
            cells.append(cell)
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def plot(results: dict[str, Any], path: Path) -> None:
    """Regret and hypervolume against evaluations, median with the interquartile band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8), sharex=True, squeeze=False)
    for key, block in results["results"].items():
        mode, noise = key.split("/")
        ax = axes[0 if mode == "so" else 1][1 if noise == "noise-on" else 0]
        for name, per_seed in block["values"].items():
            v = np.array(per_seed, dtype=np.float64)
            if np.isnan(v).any():  # a baseline: measured at the budgets only
                continue
            x = np.arange(1, v.shape[1] + 1)
            q1, med, q3 = np.percentile(v, [25, 50, 75], axis=0)
            (line,) = ax.plot(x, med, label=name)
            ax.fill_between(x, q1, q3, alpha=0.15, color=line.get_color())
        ax.set_title(f"{'regret of ' + results['score'] if mode == 'so' else 'hypervolume'}"
                     f", {noise}")
        ax.set_xscale("log")
        if mode == "so":
            ax.set_yscale("symlog", linthresh=0.1)
        ax.legend(fontsize=7)
    for ax in axes[1]:
        ax.set_xlabel("evaluations")
    fig.suptitle(f"{results['benchmark']}: median and interquartile range over paired seeds")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
