"""Sample efficiency of the multi-trial searchers on a synthetic objective with a known
optimum, defined on a real space's encoding (docs/reference.md#lanas).

The space is EfficientBERT's (docs/reference.md#efficientbert: 6 layers × {FFN expression, stack N,
ratio r}, 18 choices; the expression a categorical over 3,645 enumerated expressions), searched
through the same bridge, budget check and searchers as a real search (``StudySearch.open(space,
name)``, ask/tell). (Results recorded before the expression space became a categorical used the
earlier 42-choice template space.)
The objective, fixed before any searcher ran and the same for all of them:

* an additive score: each choice ``c`` has a table ``T_c[value] ~ U(0, 1)`` weighted by
  ``w_c = 0.75^rank_c``, ``rank_c`` a random permutation of the choices, so that a
  handful of choices matter and the rest barely do (as in real spaces, where a few
  choices decide most of the accuracy);
* four pairwise interactions between two choices of one layer, ``I_p[a, b] ~ U(0, 1)``,
  each weighted 0.5;
* a parameter budget: ``max_params`` = the median parameter count (``count_costs``, from
  the graph) of 1,000 random valid architectures; over-budget proposals are rejected by
  the bridge (recorded, never "evaluated").

Its exact optimum under the budget: parameters add up over layers (base + Σ_l
c(N_l, r_l); checked against ``count_costs`` on 200 random architectures before the run),
and scores and interactions stay inside a layer, so each layer is enumerated (its 58,320
combinations) for its best score at each (N, r), and a dynamic programme over the
layers' parameter sums picks the best combination within the budget.

Reported per searcher, over ``--seeds`` seeds with at most ``--trials`` evaluated trials
each: the median number of evaluated trials until the best score is within 1% of the
optimum (rejected proposals cost no evaluation and are counted separately), how many
seeds got there, the same for 5% (a coarser view when few runs get within 1%), the
median best fraction of the optimum after 50 / 100 / 200 trials, and
the searcher's own time per trial (ask + tell, including the bridge and the budget check;
the objective itself takes microseconds).

Run: ``python benchmarks/searchers.py [--seeds 10] [--trials 200] [--searchers
lanas,tpe,gp,random]`` and record the output in ``benchmarks/RESULTS.md``.

``--benchmark NAME`` runs the searchers on a registered tabular benchmark with known
answers instead (:mod:`searchers.benchmarks`; built in: ``nas-bench-bert``,
``hw-gpt-bench``; ``--plugin FILE`` registers a table of yours, e.g.
``tests/fixtures/tiny_table.py``): regret and hypervolume at 10/20/40/100 evaluations
over paired seeds, against the controls ``random`` and ``random-params`` and two
baselines, with and without noise; it prints markdown tables
(:mod:`benchmarks.ground_truth`) and, with ``--out DIR``, writes the per-seed results
as JSON, the tables and a plot into ``DIR`` (nothing is written without it).
``--benchmark synthetic`` (the default) is the objective above.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, and the file is named like
# the package it measures: put the repository root there instead, so that `import
# searchers` finds the package and `benchmarks.ground_truth` its sibling module.
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path[0] = str(Path(__file__).resolve().parents[1])

import argparse  # noqa: E402
import itertools  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import numpy as np  # noqa: E402
import optuna  # noqa: E402

from evaluators.base import EvalResult, Objective  # noqa: E402
from nas.cost import count_costs  # noqa: E402
from nas.space import SearchSpace, get_space  # noqa: E402
from searchers.optuna_bridge import Budget  # noqa: E402
from searchers.proposals import StudySearch  # noqa: E402

optuna.logging.set_verbosity(optuna.logging.ERROR)

SEQ_LEN = 128
OBJECTIVE_SEED = 2024  # the objective's tables: fixed, not per searcher seed
LAYER_KEYS = ("expr", "stack", "ratio")

#: searcher name -> (registered searcher, sampler options); "lanas" uses EfficientBERT's
#: defaults (80 random trials first), "lanas-20" the same sampler after 20.
VARIANTS = {"lanas": ("lanas", {}),
            "lanas-20": ("lanas", {"n_startup_trials": 20, "leaf_size": 10}),
            "tpe": ("tpe", {}), "gp": ("gp", {}), "random": ("random", {})}


@dataclass
class Objective42:
    """The synthetic objective (module docstring) and its exact optimum."""

    space: SearchSpace
    tables: dict[str, dict]
    pairs: list[tuple[str, str, np.ndarray]]
    max_params: int
    base: int
    contribution: dict[tuple[int, str], int]
    layers: int

    def __call__(self, arch: Mapping) -> float:
        score = sum(self.tables[c][arch[c]] for c in self.tables)
        for a, b, table in self.pairs:
            ia = self.space.choice(a).index(arch[a])
            ib = self.space.choice(b).index(arch[b])
            score += table[ia, ib]
        return float(score)

    def params(self, arch: Mapping) -> int:
        return self.base + sum(self.contribution[(arch[f"L{i}.stack"], arch[f"L{i}.ratio"])]
                               for i in range(self.layers))

    def optimum(self) -> tuple[float, dict]:
        """The best score within the budget: per layer the best score at each (N, r) by
        enumeration, then a dynamic programme over the layers' parameter sums."""
        per_layer = [self._layer_best(i) for i in range(self.layers)]
        states: dict[int, tuple[float, list]] = {0: (0.0, [])}
        for best in per_layer:
            nxt: dict[int, tuple[float, list]] = {}
            for total, (score, picks) in states.items():
                for (stack, ratio), (s, arch) in best.items():
                    t = total + self.contribution[(stack, ratio)]
                    if self.base + t > self.max_params:
                        continue
                    if t not in nxt or nxt[t][0] < score + s:
                        nxt[t] = (score + s, picks + [arch])
            states = nxt
        score, picks = max(states.values(), key=lambda v: v[0])
        arch = {k: v for part in picks for k, v in part.items()}
        return score, arch

    def _layer_best(self, layer: int) -> dict[tuple[int, str], tuple[float, dict]]:
        names = [f"L{layer}.{k}" for k in LAYER_KEYS]
        choices = [self.space.choice(n) for n in names]
        best: dict[tuple[int, str], tuple[float, dict]] = {}
        rules = [r for r in self.space.constraints if set(r.choices) <= set(names)]
        for combo in itertools.product(*(c.values for c in choices)):
            values = dict(zip(names, combo, strict=True))
            if any(r.check(values) is not None for r in rules):
                continue
            score = sum(self.tables[n][values[n]] for n in names)
            for a, b, table in self.pairs:
                if a in values:
                    score += table[self.space.choice(a).index(values[a]),
                                   self.space.choice(b).index(values[b])]
            key = (values[names[1]], values[names[2]])
            if key not in best or best[key][0] < score:
                best[key] = (score, values)
        return best


def make_objective(space: SearchSpace, layers: int) -> Objective42:
    rng = np.random.default_rng(OBJECTIVE_SEED)
    choices = space.choices()
    ranks = rng.permutation(len(choices))
    tables = {c.name: {v: 0.75 ** int(r) * float(x) for v, x in
                       zip(c.values, rng.uniform(size=len(c)), strict=True)}
              for c, r in zip(choices, ranks, strict=True)}
    pairs = []
    for layer in rng.choice(layers, size=4, replace=True):
        a, b = rng.choice(LAYER_KEYS, size=2, replace=False)
        ca, cb = space.choice(f"L{layer}.{a}"), space.choice(f"L{layer}.{b}")
        pairs.append((ca.name, cb.name, 0.5 * rng.uniform(size=(len(ca), len(cb)))))
    # parameters: base + per layer c(N, r), read off count_costs on layer 0
    default = space.default()
    base_arch = default.replace(**{f"L{i}.stack": 1 for i in range(layers)},
                                **{f"L{i}.ratio": "1" for i in range(layers)})
    p0 = count_costs(space, base_arch, SEQ_LEN).params
    unit = {}
    for stack in space.choice("L0.stack").values:
        for ratio in space.choice("L0.ratio").values:
            arch = base_arch.replace(**{"L0.stack": stack, "L0.ratio": ratio})
            unit[(stack, ratio)] = count_costs(space, arch, SEQ_LEN).params - p0
    one = unit[(1, "1")]
    contribution = {k: v + one for k, v in unit.items()}
    base = p0 - layers * one
    sample_rng = np.random.default_rng(0)
    params = [count_costs(space, space.sample(sample_rng), SEQ_LEN).params for _ in range(1000)]
    objective = Objective42(space, tables, pairs, int(np.median(params)), base, contribution,
                            layers)
    check_rng = np.random.default_rng(1)
    for _ in range(200):  # the DP relies on additive parameters: check it on real counts
        arch = space.sample(check_rng)
        assert objective.params(arch) == count_costs(space, arch, SEQ_LEN).params, arch  # noqa: S101
    return objective


def run_one(objective: Objective42, variant: str, seed: int, trials: int, target: float,
            loose: float) -> dict:
    name, options = VARIANTS[variant]
    searcher = StudySearch.open(
        objective.space, name, seed=seed, objectives=(Objective("score", "maximize"),),
        budget=Budget(max_params=objective.max_params, seq_len=SEQ_LEN),
        sampler_options=options)
    best, reached, near, overhead = -np.inf, None, None, []
    curve = []
    for i in range(trials):
        t0 = time.perf_counter()
        candidate = searcher.ask()
        t1 = time.perf_counter()
        value = objective(candidate.arch)
        t2 = time.perf_counter()
        searcher.tell(candidate, EvalResult((value,)))
        overhead.append((t1 - t0) + (time.perf_counter() - t2))
        best = max(best, value)
        curve.append(best)
        if (i + 1) % 25 == 0:
            print(f"    {variant} seed {seed}: {i + 1} trials, best {best:.4f}, last ask "
                  f"{1000 * (t1 - t0):.0f} ms", file=sys.stderr, flush=True)
        if reached is None and best >= target:
            reached = i + 1
        if near is None and best >= loose:
            near = i + 1
    rejected = sum(t.user_attrs.get("outcome") == "rejected" for t in searcher.study.trials)
    return {"reached": reached, "near": near, "curve": curve,
            "ms": 1000 * statistics.median(overhead), "rejected": rejected}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--benchmark", default="synthetic",
                        help="synthetic, or a registered tabular benchmark: nas-bench-bert, "
                             "hw-gpt-bench, or one a --plugin file registers")
    parser.add_argument("--plugin", action="append", default=[],
                        help="a Python file (or module) that registers a tabular benchmark "
                             "(searchers.benchmarks.register_benchmark); repeatable")
    parser.add_argument("--out", type=Path, default=None,
                        help="tabular benchmarks: write <name>.json (per-seed results), "
                             "<name>.md and the plot into this folder")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--first-seed", type=int, default=0,
                        help="tabular benchmarks: seeds first-seed .. first-seed+seeds-1")
    parser.add_argument("--trials", type=int, default=None,
                        help="evaluations per run (default 200; tabular benchmarks 100)")
    parser.add_argument("--searchers", default=None,
                        help="default lanas,lanas-20,tpe,gp,random; tabular benchmarks "
                             "random,tpe,nsga2,gp,lanas,lamoo")
    parser.add_argument("--modes", default="so,mo",
                        help="tabular benchmarks: so (regret), mo (hypervolume) or both")
    parser.add_argument("--noise", default="off,on", help="tabular benchmarks: off, on or both")
    parser.add_argument("--tag", default="", help="tabular benchmarks: a suffix of the plot")
    parser.add_argument("--layers", type=int, default=6, help="EfficientBERT layers")
    args = parser.parse_args()
    if args.benchmark != "synthetic":
        tabular(args)
        return
    args.trials = args.trials or 200
    args.searchers = args.searchers or "lanas,lanas-20,tpe,gp,random"
    space = get_space("efficientbert", layers=args.layers)
    t0 = time.perf_counter()
    objective = make_objective(space, args.layers)
    optimum, arch = objective.optimum()
    assert abs(objective(space.validate(arch)) - optimum) < 1e-9  # noqa: S101 (the pick)
    assert objective.params(arch) <= objective.max_params  # noqa: S101
    target = 0.99 * optimum
    print(f"space efficientbert ({args.layers} layers, {len(space.choices())} choices), budget "
          f"{objective.max_params / 1e6:.2f}M parameters (median of 1,000 random "
          f"architectures); optimum {optimum:.4f}, found exactly in "
          f"{time.perf_counter() - t0:.0f} s; target 99% = {target:.4f}")
    print(f"{args.seeds} seeds x at most {args.trials} evaluated trials per searcher\n")
    print(f"{'searcher':<10} {'median trials to 99%':>21} {'seeds there':>12} "
          f"{'trials to 95%':>14} "
          f"{'best@50':>8} {'best@100':>9} {'best@200':>9} {'rejected/run':>13} "
          f"{'ms/trial':>9}")
    for variant in args.searchers.split(","):
        runs = []
        for seed in range(args.seeds):
            started = time.perf_counter()
            runs.append(run_one(objective, variant, seed, args.trials, target,
                                0.95 * optimum))
            print(f"  {variant} seed {seed}: best {runs[-1]['curve'][-1] / optimum:.3f}, "
                  f"{time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        reached = [r["reached"] for r in runs if r["reached"] is not None]
        ordered = sorted(r["reached"] or float("inf") for r in runs)
        med = statistics.median(ordered)
        med_text = f"{med:.0f}" if med != float("inf") else f">{args.trials}"
        near = statistics.median(sorted(r["near"] or float("inf") for r in runs))
        near_text = f"{near:.0f}" if near != float("inf") else f">{args.trials}"

        def at(n: int, runs: list = runs) -> str:
            if n > args.trials:
                return "-"
            return f"{statistics.median(r['curve'][n - 1] for r in runs) / optimum:.3f}"

        print(f"{variant:<10} {med_text:>21} {len(reached):>9}/{args.seeds:<2} "
              f"{near_text:>14} {at(50):>8} "
              f"{at(100):>9} {at(200):>9} "
              f"{statistics.mean(r['rejected'] for r in runs):>13.1f} "
              f"{statistics.median(r['ms'] for r in runs):>9.1f}", flush=True)


def tabular(args: argparse.Namespace) -> None:
    """``--benchmark NAME``: a registered tabular benchmark (module docstring); a bad name,
    plug-in or searcher is one line on stderr and exit 2."""
    from benchmarks.ground_truth import run_benchmark
    from nas.errors import NasError
    from nas.plugins import import_plugins

    searchers = (args.searchers or "random,tpe,nsga2,gp,lanas,lamoo").split(",")
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    try:
        import_plugins(args.plugin)
        print(run_benchmark(args.benchmark, seeds, args.trials or 100, searchers, args.out,
                            args.modes.split(","), [n == "on" for n in args.noise.split(",")],
                            args.tag))
    except NasError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
