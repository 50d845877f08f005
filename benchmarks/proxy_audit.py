"""The ranking audit checked on ground truth (docs/ranking_audit.md): NAS-Bench-BERT's 7
training-free proxies (Serianni & Kalita, 2023, §3) and the parameter count, against the
recorded SST-2 and GLUE dev scores, with the audit's own statistics
(:func:`evaluators.audit.rank_agreement`: Kendall τ-b and Spearman ρ with percentile-
bootstrap 95% intervals).

* over all 491 recorded architectures (1,000 resamples);
* over ``--subsets`` random subsets of 12 and of 20 architectures (uniform, seeded;
  ``--bootstrap`` resamples each), as ``nas audit`` sees a space: the median τ, the
  fraction of subsets whose interval excludes 0 from below (the audit *confirms* the
  proxy), and, for a **good** proxy (τ over all rows ≥ 0.2), how often a small audit
  calls it bad: its interval reaches 0 or below (no evidence of agreement), or its τ is
  ≤ 0 (a reversed or null ranking);
* the benchmark's own seed noise: the 9 architectures recorded twice give a pooled sd of
  one architecture's score, set against the sd of 12 random candidates' scores (the
  spread ``nas audit`` now compares with its measured noise).

Run: ``python benchmarks/proxy_audit.py [--subsets 200] [--bootstrap 200]``; the output
is the table in ``docs/ranking_audit.md``.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.pop(0)  # run as a script: `import searchers` etc. must find the packages

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from evaluators.audit import rank_agreement  # noqa: E402
from nas.pool import benchmark_dir  # noqa: E402
from nas.space import get_space  # noqa: E402

GOOD = 0.2  # a proxy whose τ over all rows reaches this is called good here
TARGETS = ("sst", "glue")
SIZES = (12, 20)


def seed_noise(target: str) -> tuple[float, int]:
    """The pooled sd of one architecture's ``target`` score from the file's duplicates."""
    entries = json.loads((benchmark_dir() / "nas_bench_bert/BERT_benchmark.json").read_text())
    groups: dict[str, list[float]] = {}
    for e in entries:
        key = json.dumps(e["hparams"]["model_hparam_overrides"], sort_keys=True)
        groups.setdefault(key, []).append(float(e["scores"][target]))
    pairs = [v for v in groups.values() if len(v) == 2]
    return float(np.sqrt(np.mean([np.var(v, ddof=1) for v in pairs]))), len(pairs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--subsets", type=int, default=200)
    parser.add_argument("--bootstrap", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    started = time.perf_counter()
    space = get_space("nas-bench-bert")
    proxies = [*space.names("proxy"), "params"]
    rng = np.random.default_rng(args.seed)
    n = space.size()
    subsets = {k: [rng.choice(n, size=k, replace=False) for _ in range(args.subsets)]
               for k in SIZES}
    print(f"NAS-Bench-BERT, {n} architectures; {args.subsets} random subsets of "
          f"{' and '.join(map(str, SIZES))} ({args.bootstrap} bootstrap resamples each), "
          f"seed {args.seed}; good proxy: τ over all rows ≥ {GOOD}\n")
    for target in TARGETS:
        y = space.metrics[target]
        sd, pairs = seed_noise(target)
        spreads = [float(np.std(y[idx], ddof=1)) for idx in subsets[12]]
        print(f"#### {target}: one architecture's seed noise sd {sd:.2f} points ({pairs} "
              f"duplicated rows); 12 random candidates spread by sd "
              f"{np.median(spreads):.2f} (median; below the noise in "
              f"{np.mean(np.array(spreads) < sd):.0%} of subsets)\n")
        head = "| proxy | τ all rows [95% CI] | ρ all rows |"
        for k in SIZES:
            head += f" τ, {k} (median) | {k}: CI > 0 |"
        head += " good, 12 called bad (CI ≤ 0 / τ ≤ 0) |"
        print(head)
        print("|" + "---|" * (3 + 2 * len(SIZES) + 1))
        for proxy in proxies:
            x = space.metrics[proxy]
            whole = rank_agreement(x, y, n_boot=1000, seed=args.seed)
            tau, ci = whole["kendall_tau"], whole["kendall_tau_ci"]
            row = f"| {proxy} | {tau:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] | " \
                  f"{whole['spearman_rho']:+.3f} |"
            bad = None
            for k in SIZES:
                stats = [rank_agreement(x[idx], y[idx], n_boot=args.bootstrap,
                                        seed=args.seed + i)
                         for i, idx in enumerate(subsets[k])]
                taus = np.array([s["kendall_tau"] if s["kendall_tau"] is not None
                                 else np.nan for s in stats])
                lows = np.array([s["kendall_tau_ci"][0] for s in stats])
                row += f" {np.nanmedian(taus):+.3f} | {np.mean(lows > 0):.0%} |"
                if k == 12 and tau >= GOOD:
                    bad = (np.mean(~(lows > 0)), np.mean(~(taus > 0)))
            row += f" {bad[0]:.0%} / {bad[1]:.0%} |" if bad is not None else " – |"
            print(row, flush=True)
        print()
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
