"""Ranking audit: does a cheap proxy rank candidates the way full training does?

One-shot and proxy scores often fail to rank candidates like stand-alone training
(Sciuto et al. 2019; Zhang et al. 2020). EfficientBERT claims its warm-up-KD proxy does
(Dong et al. 2021: a strongly positive Kendall τ against full retraining;
docs/reference.md#efficientbert). This module measures it for any space that has a proxy evaluator
and a full evaluator:

1. **candidates** spread over the space: a seeded pool of random valid architectures
   (within the budget), one picked at each of ``n`` parameter-count quantiles
   (:func:`spread_candidates`), so that small and large ones are both present; or, with
   ``select="latency-spread"``, the ``n`` whose predicted batch-1 latency lies nearest
   ``n`` points log-spaced from the pool's fastest to its slowest
   (:func:`latency_candidates`), so that they span the widest latency range the pool
   has (method compress asks for at least 10x: the span is reported, and warned about below
   ``min_span``);
2. each candidate scored by every **proxy arm** (e.g. the ``warmup-kd`` proxy with and
   without the warm-up) and by the **full** evaluator (the recipe's stand-alone retrain);
3. **agreement**: Kendall τ and Spearman ρ (:mod:`scipy.stats`) between each arm's scores
   and the full scores, each with a 95% percentile-bootstrap interval over candidates;
4. **steps to reach**: for arms that record their text-KD loss per step, how many steps
   the inherited candidate needs to reach the final KD loss of the same candidate
   trained from scratch (both curves smoothed by a running mean over a tenth of the
   steps, so one noisy batch does not decide);
5. **seed noise** (``noise_seeds`` > 0): the middle candidate scored again by every arm
   and the full evaluator with other seeds (:func:`reseeded`); when the candidates'
   spread (sd of their scores) is smaller than that seed noise (sd over seeds), the audit
   warns (:func:`spread_warnings`): its ranking is then mostly noise (the
   EfficientBERT audit's 12 candidates spread by sd 0.26, one architecture by 0.27);
6. a **scatter plot** (proxy score against full score, one panel per arm), ``audit.json``
   and ``audit.md``.

:func:`rank_agreement` is the statistics on their own, for any caller (the
ground-truth audit of NAS-Bench-BERT's proxies, ``benchmarks/proxy_audit.py``).

Every evaluation is written as soon as it finishes (``<folder>/candidates/<id>.json``), so
an interrupted audit resumes where it stopped. A failed proxy evaluation scores 0, as the
paper scores a candidate whose loss is NaN; a candidate whose full evaluation fails is
left out of the statistics (and counted).
"""

from __future__ import annotations

import copy
import json
import logging
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from evaluators.base import EvalResult, Evaluator, run_evaluation
from nas.errors import NasError

if TYPE_CHECKING:
    from nas.space import SearchSpace

log = logging.getLogger("nas.audit")

MIN_CANDIDATES = 3  # below this there is no ranking to measure (12 is the advice)
#: how candidates are chosen: parameter-count quantiles, or a spread of predicted latency
SELECTIONS = ("params", "latency-spread")
#: the predicted-latency span (slowest / fastest) a latency-spread audit asks for
MIN_LATENCY_SPAN = 10.0


@dataclass
class AuditParts:
    """What a method provides for ``nas audit`` (:meth:`nas.methods.Method.audit_parts`).

    space: the space the candidates come from.
    arms: proxy name → evaluator (e.g. ``{"warm-up": …, "no warm-up": …}``).
    full: the stand-alone evaluator whose scores are the reference.
    folder: where the audit writes its files.
    max_params: the budget candidates are drawn within (``None``: none).
    seq_len: the length parameter counts are taken at.
    curve_arms: ``(inherited, scratch)`` arm names whose ``metrics["text_kd_curve"]`` give
        the steps-to-reach measurement (``None``: not measured).
    latency_fn: ``arch -> ms``, the predicted batch-1 latency (:func:`nas.latency.
        space_predictor`) that ``select="latency-spread"`` spreads the candidates over
        (``None``: that selection is refused).
    """

    space: SearchSpace
    arms: Mapping[str, Evaluator]
    full: Evaluator
    folder: Path
    max_params: float | None = None
    seq_len: int = 128
    curve_arms: tuple[str, str] | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    latency_fn: Callable[[Any], float] | None = None


# ------------------------------------------------------------------------ candidates


def spread_candidates(space: SearchSpace, n: int, seed: int = 0, *,
                      max_params: float | None = None, seq_len: int = 128,
                      pool: int | None = None) -> list[Any]:
    """``n`` distinct architectures at the parameter-count quantiles (i + ½)/n of a seeded
    pool of random valid ones within ``max_params`` (pool size ``max(50, 20·n)``)."""
    if n < 1:
        raise NasError(f"the audit needs at least 1 candidate, got {n}")
    found = _pool(space, pool or max(50, 20 * n), seed, max_params, seq_len)
    if len(found) < n:
        raise NasError(f"only {len(found)} distinct architectures of space {space.name!r} fit "
                       f"the budget {max_params}; ask for fewer candidates or raise the budget")
    ranked = sorted(found.values(), key=lambda t: (t[0], t[1].id))
    picked: list[Any] = []
    for i in range(n):
        q = int((i + 0.5) / n * len(ranked))
        # the nearest not-yet-picked architecture to that quantile
        for j in sorted(range(len(ranked)), key=lambda j: (abs(j - q), j)):
            if all(ranked[j][1].id != a.id for a in picked):
                picked.append(ranked[j][1])
                break
    return picked


def _pool(space: SearchSpace, size: int, seed: int, max_params: float | None, seq_len: int
          ) -> dict[str, tuple[int, Any]]:
    """Up to ``size`` distinct random architectures within ``max_params``, by id, with
    their parameter counts (seeded)."""
    from nas.cost import count_costs

    rng = np.random.default_rng(seed)
    found: dict[str, tuple[int, Any]] = {}
    for _ in range(20 * size):
        if len(found) >= size:
            break
        arch = space.sample(rng)
        if arch.id in found:
            continue
        params = count_costs(space, arch, seq_len).params
        if max_params is None or params <= max_params:
            found[arch.id] = (params, arch)
    return found


def latency_candidates(space: SearchSpace, n: int, latency_fn: Callable[[Any], float],
                       seed: int = 0, *, max_params: float | None = None,
                       seq_len: int = 128, pool: int | None = None) -> list[Any]:
    """``n`` distinct architectures spread over predicted latency: from a seeded pool of
    random valid ones within ``max_params`` (size ``max(50, 20·n)``), the nearest in log
    latency to each of ``n`` points log-spaced from the pool's fastest to its slowest,
    in order of latency. So the candidates span the pool's whole range, which a ranking
    audit over sub-networks of very different speed needs (method compress: at least 10x)."""
    if n < 1:
        raise NasError(f"the audit needs at least 1 candidate, got {n}")
    found = _pool(space, pool or max(50, 20 * n), seed, max_params, seq_len)
    if len(found) < n:
        raise NasError(f"only {len(found)} distinct architectures of space {space.name!r} fit "
                       f"the budget {max_params}; ask for fewer candidates or raise the budget")
    timed = sorted(((float(latency_fn(a)), a.id, a) for _, a in found.values()),
                   key=lambda t: (t[0], t[1]))
    logs = np.log([max(t[0], 1e-12) for t in timed])
    picked: list[int] = []
    for target in np.linspace(logs[0], logs[-1], n):
        free = [j for j in range(len(timed)) if j not in picked]
        picked.append(min(free, key=lambda j: (abs(logs[j] - target), j)))
    return [timed[j][2] for j in sorted(picked)]


def latency_span(latencies: Sequence[float]) -> float:
    """Slowest over fastest of ``latencies`` (inf when the fastest is 0)."""
    low, high = min(latencies), max(latencies)
    return math.inf if low <= 0 else high / low


# ------------------------------------------------------------------------ statistics


def rank_agreement(x: Sequence[float], y: Sequence[float], n_boot: int = 1000,
                   seed: int = 0, level: float = 0.95) -> dict[str, Any]:
    """Kendall τ (τ-b) and Spearman ρ of ``x`` against ``y``, each with a percentile
    bootstrap interval at ``level`` (pairs resampled with replacement; resamples where a
    coefficient is undefined, e.g. all scores tied, are dropped and counted)."""
    from scipy.stats import kendalltau, spearmanr

    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if xs.shape != ys.shape or len(xs) < 2:
        raise NasError(f"rank agreement needs two equal-length score lists of at least 2, got "
                       f"{len(xs)} and {len(ys)}")
    out: dict[str, Any] = {"n": len(xs), "bootstrap": n_boot, "level": level}
    rng = np.random.default_rng(seed)
    samples = [rng.integers(0, len(xs), len(xs)) for _ in range(n_boot)]
    for name, fn in (("kendall_tau", kendalltau), ("spearman_rho", spearmanr)):
        boot = []
        # tied resamples have no coefficient: counted below, not warned about one by one
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = float(fn(xs, ys)[0])
            for idx in samples:
                v = float(fn(xs[idx], ys[idx])[0])
                if math.isfinite(v):
                    boot.append(v)
        lo, hi = ((float(np.quantile(boot, (1 - level) / 2)),
                   float(np.quantile(boot, 1 - (1 - level) / 2))) if boot else (math.nan,
                                                                                 math.nan))
        out[name] = value if math.isfinite(value) else None
        out[f"{name}_ci"] = [lo, hi]
        out[f"{name}_ci_width"] = hi - lo
        out[f"{name}_undefined_resamples"] = n_boot - len(boot)
    return out


def running_mean(values: Sequence[float], window: int) -> np.ndarray:
    """The mean of the last ``window`` values at each step (fewer at the start)."""
    v = np.asarray(values, dtype=float)
    c = np.cumsum(np.insert(v, 0, 0.0))
    idx = np.arange(1, len(v) + 1)
    lo = np.maximum(0, idx - window)
    return (c[idx] - c[lo]) / (idx - lo)


def steps_to_reach(inherited: Sequence[float], scratch: Sequence[float]) -> dict[str, Any]:
    """Steps the inherited curve needs to reach the scratch curve's final value, both
    smoothed by a running mean over a tenth of the scratch steps (at least 1)."""
    if not inherited or not scratch:
        raise NasError("steps_to_reach needs two non-empty loss curves")
    window = max(1, len(scratch) // 10)
    target = float(running_mean(scratch, window)[-1])
    smooth = running_mean(inherited, window)
    hit = np.flatnonzero(smooth <= target)
    steps = int(hit[0]) + 1 if len(hit) else None
    return {"target": target, "steps": steps, "scratch_steps": len(scratch),
            "fraction": None if steps is None else steps / len(scratch),
            "inherited_final": float(smooth[-1])}


# ------------------------------------------------------------------------ the audit


def _score(result: EvalResult) -> float:
    """A proxy's score: its objective, or 0 when it failed (the paper's NaN rule)."""
    return float(result.values[0]) if result.ok else 0.0


def reseeded(evaluator: Evaluator, seed: int) -> Evaluator | None:
    """A copy of ``evaluator`` with another ``seed`` (its checkpoints, if it keeps any, in
    a subfolder of their own), or ``None`` for an evaluator without a seed."""
    if not hasattr(evaluator, "seed"):
        return None
    clone = copy.copy(evaluator)
    clone.seed = seed
    if getattr(clone, "workdir", None) is not None:
        clone.workdir = Path(clone.workdir) / f"noise-seed-{seed}"  # type: ignore[attr-defined]  # getattr above
    return clone


def measure_noise(parts: AuditParts, arch: Any, score: dict[str, float], seeds: Sequence[int],
                  folder: Path) -> dict[str, Any]:
    """The sd over seeds of each arm's and the full evaluator's score of ``arch`` (its
    audit score ``score[name]`` and one per seed of ``seeds``), saved to
    ``folder/seed_noise.json`` as it goes (a resume skips what is there)."""
    from nas.checkpoint import atomic_write_json

    path = folder / "seed_noise.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    if saved.get("arch_id") != arch.id:
        saved = {"arch_id": arch.id, "scores": {}}
    for name, evaluator in [*parts.arms.items(), ("full", parts.full)]:
        scores = saved["scores"].setdefault(name, {})
        for s in seeds:
            if str(s) in scores:
                continue
            other = reseeded(evaluator, s)
            if other is None:
                log.warning("audit: %s has no seed; its seed noise is not measured", name)
                break
            log.info("audit seed noise: %s, seed %d", name, s)
            scores[str(s)] = _score(run_evaluation(other, arch))
            atomic_write_json(path, saved)
    sds = {}
    for name, scores in saved["scores"].items():
        values = [score[name], *scores.values()]
        if len(values) >= 2:
            sds[name] = float(np.std(values, ddof=1))
    return {"arch_id": arch.id, "seeds": list(seeds), "sd": sds, "scores": saved["scores"]}


def spread_warnings(scores: Mapping[str, Sequence[float]], noise_sd: Mapping[str, float]
                    ) -> list[str]:
    """One warning per score list whose spread (sd over candidates) is smaller than the
    seed noise measured for it: a ranking of such candidates is mostly noise."""
    out = []
    for name, sd in noise_sd.items():
        values = scores.get(name)
        if values is None or len(values) < 2:
            continue
        spread = float(np.std(values, ddof=1))
        if spread < sd:
            out.append(f"{name}: the candidates spread by sd {spread:.3g}, less than one "
                       f"architecture's seed noise (sd {sd:.3g}); its ranking is mostly noise")
    return out


def run_audit(parts: AuditParts, n: int = 12, seed: int = 0, n_boot: int = 1000,
              noise_seeds: int = 0, select: str = "params",
              min_span: float = MIN_LATENCY_SPAN) -> dict[str, Any]:
    """Run the audit of ``parts`` on ``n`` candidates (module docstring); returns the
    summary written to ``audit.json``. ``noise_seeds``: how many other seeds score the
    middle candidate again, for the seed-noise check (0: none). ``select``: ``params``
    (parameter-count quantiles) or ``latency-spread`` (over ``parts.latency_fn``'s
    predictions; a span below ``min_span`` is warned about)."""
    if select not in SELECTIONS:
        raise NasError(f"--select {select}: unknown; use one of {', '.join(SELECTIONS)}")
    if select == "latency-spread" and parts.latency_fn is None:
        raise NasError("--select latency-spread needs a latency model of the space, which "
                       "this method's audit does not give; use --select params")
    if n < MIN_CANDIDATES:
        raise NasError(f"--candidates must be at least {MIN_CANDIDATES} (12 or more give an "
                       f"interval worth reading), got {n}")
    if n < 12:
        log.warning("%d candidates: the audit's advice is at least 12; the intervals will be "
                    "wide", n)
    folder = Path(parts.folder)
    (folder / "candidates").mkdir(parents=True, exist_ok=True)
    if select == "latency-spread":
        assert parts.latency_fn is not None  # noqa: S101 (checked above)
        candidates = latency_candidates(parts.space, n, parts.latency_fn, seed,
                                        max_params=parts.max_params, seq_len=parts.seq_len)
    else:
        candidates = spread_candidates(parts.space, n, seed, max_params=parts.max_params,
                                       seq_len=parts.seq_len)
    from nas.checkpoint import atomic_write_json
    from nas.cost import count_costs

    rows = []
    for i, arch in enumerate(candidates):
        path = folder / "candidates" / f"{arch.id}.json"
        row = json.loads(path.read_text()) if path.is_file() else {
            "arch_id": arch.id, "arch": dict(arch),
            "params": count_costs(parts.space, arch, parts.seq_len).params, "results": {}}
        if parts.latency_fn is not None and "latency_ms_predicted" not in row:
            row["latency_ms_predicted"] = float(parts.latency_fn(arch))
        for name, evaluator in [*parts.arms.items(), ("full", parts.full)]:
            if name in row["results"]:
                continue
            log.info("audit candidate %d/%d %s (%.3gM params): %s", i + 1, n, arch.id,
                     row["params"] / 1e6, name)
            row["results"][name] = run_evaluation(evaluator, arch).to_dict()
            atomic_write_json(path, row)  # after each evaluation: a resume skips it
        rows.append(row)
    noise = None
    if noise_seeds > 0:
        middle = n // 2  # candidates come in order of parameter count
        own = {name: _score(EvalResult.from_dict(r)) for name, r in
               rows[middle]["results"].items()}
        noise = measure_noise(parts, candidates[middle], own,
                              [seed + 1000 + i for i in range(noise_seeds)], folder)
    summary = summarise(parts, rows, n_boot, seed, noise)
    summary["select"] = select
    if parts.latency_fn is not None:
        latencies = [r["latency_ms_predicted"] for r in rows]
        span = latency_span(latencies)
        summary["latency_ms_predicted"] = latencies
        summary["latency_span"] = span
        if select == "latency-spread" and span < min_span:
            summary.setdefault("warnings", []).append(
                f"the candidates' predicted latency spans {span:.3g}x, less than the "
                f"{min_span:g}x asked for; the space (or the budget) has no wider range "
                "in the pool")
    for warning in summary.get("warnings", []):
        log.warning("audit: %s", warning)
    atomic_write_json(folder / "audit.json", {**summary, "candidates": rows})
    summary["plot"] = str(scatter_plot(folder / "audit_scatter.png", rows, list(parts.arms)))
    (folder / "audit.md").write_text("\n".join(audit_lines(summary)) + "\n")
    return summary


def summarise(parts: AuditParts, rows: list[dict[str, Any]], n_boot: int, seed: int,
              noise: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Agreement per arm, the steps-to-reach measurement and the spread against the seed
    noise (when measured), from the candidates' rows."""
    results = [{k: EvalResult.from_dict(v) for k, v in r["results"].items()} for r in rows]
    usable = [res for res in results if res["full"].ok]
    full = [res["full"].values[0] for res in usable]
    out: dict[str, Any] = {"candidates": len(rows), "full_failed": len(rows) - len(usable),
                           "full_objective": parts.full.objective_names[0],
                           "params": [r["params"] for r in rows], "arms": {},
                           "notes": dict(parts.notes)}
    for name in parts.arms:
        scores = [_score(res[name]) for res in usable]
        arm: dict[str, Any] = {"failed": sum(not res[name].ok for res in results),
                               "mean_seconds": float(np.mean([res[name].seconds
                                                              for res in results]))}
        if len(usable) >= 2:
            arm.update(rank_agreement(scores, full, n_boot, seed))
        out["arms"][name] = arm
    out["full_mean_seconds"] = float(np.mean([res["full"].seconds for res in results]))
    if noise is not None:
        by_arm = {name: [_score(res[name]) for res in usable] for name in parts.arms}
        by_arm["full"] = full
        out["seed_noise"] = dict(noise)
        out["spread_sd"] = {k: float(np.std(v, ddof=1)) for k, v in by_arm.items()
                            if len(v) >= 2}
        out["warnings"] = spread_warnings(by_arm, noise["sd"])
    if parts.curve_arms is not None:
        inherited, scratch = parts.curve_arms
        reach = []
        for row, res in zip(rows, results, strict=True):
            a, b = (res[inherited].metrics.get("text_kd_curve"),
                    res[scratch].metrics.get("text_kd_curve"))
            if a and b:
                reach.append({"arch_id": row["arch_id"], **steps_to_reach(a, b)})
        fractions = [r["fraction"] for r in reach if r["fraction"] is not None]
        out["steps_to_reach"] = {
            "inherited": inherited, "scratch": scratch, "per_candidate": reach,
            "reached": len(fractions), "measured": len(reach),
            "median_fraction": float(np.median(fractions)) if fractions else None,
            "within_one_fifth": sum(f <= 0.2 for f in fractions)}
    return out


def scatter_plot(path: Path, rows: list[dict[str, Any]], arms: list[str]) -> Path:
    """Proxy score against full score, one panel per arm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(arms), figsize=(4.5 * len(arms), 4), squeeze=False)
    for ax, name in zip(axes[0], arms, strict=True):
        pts = [(_score(EvalResult.from_dict(r["results"][name])),
                EvalResult.from_dict(r["results"]["full"]).values[0], r["params"])
               for r in rows if r["results"]["full"]["status"] == "complete"]
        if pts:
            x, y, p = zip(*pts, strict=True)
            sc = ax.scatter(x, y, c=np.asarray(p) / 1e6, cmap="viridis")
            fig.colorbar(sc, ax=ax, label="parameters (M)")
        ax.set(title=f"proxy: {name}", xlabel="proxy score (held-out part of train)",
               ylabel="stand-alone score")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _fmt(arm: Mapping[str, Any], name: str) -> str:
    value, ci = arm.get(name), arm.get(f"{name}_ci")
    if value is None or ci is None:
        return "undefined"
    return f"{value:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] (width {ci[1] - ci[0]:.3f})"


def audit_lines(summary: Mapping[str, Any]) -> list[str]:
    """``audit.md``: the agreement table and the steps-to-reach line."""
    p = summary["params"]
    how = ("spread over predicted latency" if summary.get("select") == "latency-spread"
           else "quantiles of a random pool")
    lines = ["# Ranking audit", "",
             f"{summary['candidates']} candidates, {min(p) / 1e6:.3g}M–{max(p) / 1e6:.3g}M "
             f"parameters ({how}); reference: stand-alone "
             f"{summary['full_objective']} ({summary['full_failed']} failed, left out).", ""]
    latencies = summary.get("latency_ms_predicted")
    if latencies:
        span = summary["latency_span"]
        lines += [f"Predicted batch-1 latency {min(latencies):.3g}–{max(latencies):.3g} ms: "
                  f"the candidates span {span:.3g}x "
                  + (f"(at least {MIN_LATENCY_SPAN:g}x)." if span >= MIN_LATENCY_SPAN
                     else f"(less than {MIN_LATENCY_SPAN:g}x)."), ""]
    lines += ["| proxy | Kendall τ [95% CI] | Spearman ρ [95% CI] | failed | s / candidate |",
              "|---|---|---|---|---|"]
    for name, arm in summary["arms"].items():
        lines.append(f"| {name} | {_fmt(arm, 'kendall_tau')} | {_fmt(arm, 'spearman_rho')} "
                     f"| {arm['failed']} | {arm['mean_seconds']:.1f} |")
    lines.append(f"| stand-alone | | | {summary['full_failed']} | "
                 f"{summary['full_mean_seconds']:.1f} |")
    reach = summary.get("steps_to_reach")
    if reach:
        med = reach["median_fraction"]
        lines += ["", f"Steps for `{reach['inherited']}` to reach the final text-KD loss of "
                      f"`{reach['scratch']}` (the same candidate from scratch): reached by "
                      f"{reach['reached']} of {reach['measured']}; median "
                      + (f"{100 * med:.0f}% of the scratch steps" if med is not None else "-")
                      + f"; within 1/5 of them: {reach['within_one_fifth']}."]
    noise = summary.get("seed_noise")
    if noise:
        spread = summary.get("spread_sd", {})
        lines += ["", f"Seed noise (candidate {noise['arch_id']} scored again with "
                      f"{len(noise['seeds'])} other seed(s)): "
                  + "; ".join(f"{k} sd {v:.3g} against the candidates' spread sd "
                              f"{spread.get(k, math.nan):.3g}" for k, v in noise["sd"].items())
                  + "."]
    if summary.get("warnings"):
        lines += ["", *[f"- **warning**: {w}" for w in summary["warnings"]]]
    if summary.get("plot"):
        lines += ["", f"![scatter]({Path(summary['plot']).name})"]
    return lines


__all__ = ["MIN_LATENCY_SPAN", "SELECTIONS", "AuditParts", "audit_lines", "latency_candidates",
           "latency_span", "measure_noise", "rank_agreement", "reseeded", "run_audit",
           "scatter_plot", "spread_candidates", "spread_warnings", "steps_to_reach"]
