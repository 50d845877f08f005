"""The multi-trial part of ``nas report RUN_DIR``: a trial table, the Pareto front
(``pareto.png``: the objectives, each trial labelled with its number, the reference
models such as the teacher, the seed architectures and the trials the final stage chose
marked), the optimisation history (``history.png``) and what pruning
saved. A method's :meth:`~nas.methods.Method.report_sections` calls
:func:`study_sections`; the study is read from its storage, so the report covers every
worker's trials.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from statistics import median
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from nas.errors import NasError
from nas.units import human
from searchers.results import best_trial, complete_trials, open_run_study, pareto_front, signs
from searchers.storage import masked
from searchers.study import read_pointer

#: At most this many trials in the report's table (the best first).
TABLE_ROWS = 50
PENALIZED = "penalized_"


def outcome(t: FrozenTrial) -> str:
    """What became of a trial: complete, pruned, failed, rejected, infeasible, repeat,
    surplus, stale (its worker died), running or waiting."""
    found = t.user_attrs.get("outcome")
    if found is not None:
        return found
    if t.state == TrialState.FAIL:
        return "stale"
    return t.state.name.lower()


def _fmt(value: Any) -> str:
    return human(value, small=".4g") if isinstance(value, int | float) else "-"


def pruning_savings(study: optuna.Study) -> dict[str, Any] | None:
    """Steps (epochs) the pruned trials did not run, against complete trials' length:
    ``planned`` steps per trial, ``run`` and ``saved`` steps, ``seconds`` saved (estimated
    from the complete trials' seconds per step)."""
    done = [t for t in complete_trials(study) if t.intermediate_values]
    pruned = [t for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
              if t.user_attrs.get("outcome") == "pruned"]
    if not pruned or not done:
        return None
    planned = max(max(t.intermediate_values) for t in done)
    ran = sum(max(t.intermediate_values, default=0) for t in pruned)
    saved = len(pruned) * planned - ran
    per_step = median(t.user_attrs.get("seconds", 0.0) / max(t.intermediate_values)
                      for t in done)
    return {"pruned": len(pruned), "evaluations": len(pruned) + len(done),
            "planned": planned, "run": ran, "saved": saved,
            "fraction": saved / (planned * (len(pruned) + len(done))),
            "seconds": saved * per_step}


def _axes(study: optuna.Study, done: Sequence[FrozenTrial]) -> tuple[tuple[str, float],
                                                                     tuple[str, float]]:
    """``((x name, sign), (y name, sign))`` of the Pareto plot (sign +1: higher is better).

    Several objectives: the second against the first. One objective: it against the
    first cost the trials measured (latency, FLOPs, parameters); a penalised objective
    is shown as the quantity it penalises (``penalized_val_accuracy`` → ``val_accuracy``)
    when the trials recorded it, so the plot shows the trade-off the penalty prices.
    """
    names = study.user_attrs.get("objectives") or [{"name": f"objective {i}"}
                                                   for i in range(len(study.directions))]
    s = signs(study)
    if len(names) > 1:
        return (names[1]["name"], s[1]), (names[0]["name"], s[0])
    y = names[0]["name"]
    if y.startswith(PENALIZED) and all(y[len(PENALIZED):] in (t.user_attrs.get("metrics") or {})
                                       for t in done):
        y = y[len(PENALIZED):]
    costs = [c for c in ("latency_ms", "flops", "params")
             if all(c in (t.user_attrs.get("costs") or {}) for t in done)]
    return (costs[0] if costs else "trial", -1.0), (y, s[0])


def _value(t: FrozenTrial, name: str, study: optuna.Study) -> float | None:
    names = [o["name"] for o in study.user_attrs.get("objectives", [])]
    if name in names:
        return t.values[names.index(name)]
    if name == "trial":
        return float(t.number)
    for key in ("metrics", "costs"):
        found = (t.user_attrs.get(key) or {}).get(name)
        if isinstance(found, int | float):
            return float(found)
    return None


def _trade_off(points: list[tuple[float, float]], sx: float, sy: float) -> list[int]:
    """Indices of the points that no other point beats on both axes (higher ``s·value``
    is better): the cost/score trade-off drawn for a *single-objective* study, whose
    plot's x axis is a cost the study does not optimise. A multi-objective study's front
    is Optuna's (:func:`searchers.results.pareto_front`)."""
    scored = [(sx * x, sy * y) for x, y in points]
    return [i for i, p in enumerate(scored)
            if not any(q[0] >= p[0] and q[1] >= p[1] and q != p for q in scored)]


def plot_pareto(study: optuna.Study, path: Path,
                reference: Mapping[str, Mapping[str, float]] | None = None,
                chosen: Sequence[int] = ()) -> Path | None:
    """``pareto.png``: every complete trial labelled with its number, the front joined,
    seeds and references marked, and the trials numbered in ``chosen`` (those a method's
    final stage retrained, e.g. ``method: search``'s ``final.select``) ringed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = complete_trials(study)
    if not done:
        return None
    (xn, sx), (yn, sy) = _axes(study, done)
    pts = [(_value(t, xn, study), _value(t, yn, study)) for t in done]
    keep = [(t, (x, y)) for t, (x, y) in zip(done, pts, strict=True)
            if x is not None and y is not None]
    if not keep:
        return None
    trials, xy = zip(*keep, strict=True)
    fig, ax = plt.subplots(figsize=(7, 5))
    ax.scatter([p[0] for p in xy], [p[1] for p in xy], s=18, c="tab:blue", alpha=0.6,
               label="trials")
    if len(study.directions) > 1:  # the study's own front, drawn on its first two objectives
        on_front = {t.number for t in pareto_front(study)}
        front_index = [i for i, t in enumerate(trials) if t.number in on_front]
    else:
        front_index = _trade_off(list(xy), sx, sy)
    front = sorted((xy[i] for i in front_index), key=lambda p: p[0])
    ax.plot([p[0] for p in front], [p[1] for p in front], "-o", c="tab:red", ms=5,
            label="Pareto front")
    for t, (x, y) in zip(trials, xy, strict=True):  # which trial is which (nas export)
        ax.annotate(str(t.number), (x, y), textcoords="offset points", xytext=(3, -9),
                    fontsize=6, color="dimgrey")
    marked = set(chosen)
    picked = [p for t, p in zip(trials, xy, strict=True) if t.number in marked]
    if picked:
        ax.scatter([p[0] for p in picked], [p[1] for p in picked], marker="o", s=140,
                   facecolors="none", edgecolors="black", linewidths=1.5,
                   label="chosen (final retrain)")
    seeds = [(t.user_attrs["seed"], p) for t, p in zip(trials, xy, strict=True)
             if t.user_attrs.get("seed")]
    for i, (tag, (x, y)) in enumerate(seeds):
        ax.scatter([x], [y], marker="s", s=60, facecolors="none", edgecolors="tab:green",
                   label="seed architectures" if i == 0 else None)
        ax.annotate(tag, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    for name, values in (reference or {}).items():
        if xn in values and yn in values:
            ax.scatter([values[xn]], [values[yn]], marker="*", s=160, c="tab:orange",
                       label=name)
    ax.set(xlabel=f"{xn} ({'higher' if sx > 0 else 'lower'} is better)",
           ylabel=f"{yn} ({'higher' if sy > 0 else 'lower'} is better)",
           title=f"{study.study_name}: {len(xy)} trials, {len(front)} on the front")
    if xn in ("latency_ms", "flops", "params") and any(r.get(xn) for r in
                                                       (reference or {}).values()):
        ax.set_xscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_history(study: optuna.Study, path: Path) -> Path | None:
    """``history.png``: each objective per trial number, with the best so far."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = complete_trials(study)
    if not done:
        return None
    names = [o["name"] for o in study.user_attrs.get("objectives", [])] or [
        f"objective {i}" for i in range(len(study.directions))]
    s = signs(study)
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4), squeeze=False)
    for k, (ax, name) in enumerate(zip(axes[0], names, strict=True)):
        xs = [t.number for t in done]
        ys = [t.values[k] for t in done]
        ax.scatter(xs, ys, s=14, alpha=0.7, label="trial")
        best, run = [], None
        for y in ys:
            run = y if run is None or s[k] * y > s[k] * run else run
            best.append(run)
        ax.step(xs, best, where="post", c="tab:red", label="best so far")
        stopped = [t for t in study.get_trials(deepcopy=False, states=(TrialState.PRUNED,))
                   if t.user_attrs.get("outcome") == "pruned" and t.intermediate_values]
        if stopped and len(names) == 1:  # where pruning stopped them (their last report)
            ax.scatter([t.number for t in stopped],
                       [t.intermediate_values[max(t.intermediate_values)] for t in stopped],
                       marker="x", c="grey", s=20, label="pruned (last report)")
        ax.set(xlabel="trial", ylabel=name, title=f"{name} ({'max' if s[k] > 0 else 'min'})")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def study_sections(run_dir: str | Path,
                   reference: Mapping[str, Mapping[str, float]] | None = None,
                   chosen: Sequence[int] = (), into: dict[str, Any] | None = None
                   ) -> tuple[list[str], list[Path]]:
    """Report lines and pictures for the run folder's study (none without a study);
    ``chosen``: the trial numbers the method's final stage retrained, named in the text
    and ringed on the Pareto plot; ``into``: given, it receives the comparison with the
    controls under ``controls`` (:func:`controls_line`), for the report's JSON."""
    run_dir = Path(run_dir)
    pointer = read_pointer(run_dir)
    if pointer is None:
        return [], []
    study = open_run_study(run_dir)
    trials = study.get_trials(deepcopy=False)
    counts: dict[str, int] = {}
    for t in trials:
        counts[outcome(t)] = counts.get(outcome(t), 0) + 1
    names = [o["name"] for o in study.user_attrs.get("objectives", [])]
    directions = ["max" if x > 0 else "min" for x in signs(study)]
    evaluated = [t for t in trials if outcome(t) in ("complete", "pruned", "failed")]
    lines = ["", f"## Multi-trial search: {pointer['searcher']} (study `{study.study_name}`)",
             "", f"Storage `{masked(pointer['storage'])}`; objectives "
             + ", ".join(f"{n} ({d})" for n, d in zip(names, directions, strict=True))
             + f". {len(evaluated)} evaluations of {study.user_attrs.get('n_trials', '?')}: "
             + ", ".join(f"{counts.get(k, 0)} {k}" for k in ("complete", "pruned", "failed"))
             + "."]
    free = {k: counts[k] for k in ("rejected", "infeasible", "repeat", "stale", "surplus")
            if counts.get(k)}
    if free:
        what = {"rejected": "rejected proposals (invalid or over budget, never trained)",
                "infeasible": "infeasible proposals (over a constraint, never trained; told "
                              "to the sampler with their constraint values)",
                "repeat": "repeated architectures skipped",
                "stale": "trials lost with their worker (failed and queued again)",
                "surplus": "trials asked after the study was full (not run)"}
        lines.append("Also: " + "; ".join(f"{n} {what[k]}" for k, n in free.items()) + ".")
    saving = pruning_savings(study)
    if saving is not None:
        lines.append(
            f"Pruning ({study.user_attrs.get('settings', {}).get('pruner', '?')}): "
            f"{saving['pruned']} of {saving['evaluations']} evaluations stopped early; they "
            f"ran {saving['run']} of {saving['pruned'] * saving['planned']} planned steps, "
            f"saving {saving['saved']} steps ({100 * saving['fraction']:.0f}% of the "
            f"search's training, about {saving['seconds']:.0f} s).")
    done = complete_trials(study)
    if done and len(study.directions) == 1:
        b = best_trial(study)
        lines.append(f"Best: trial {b.number}, {names[0] if names else 'value'} "
                     f"{b.values[0]:.4f}, arch `{b.user_attrs.get('arch_id')}` "
                     f"(`nas export --run {run_dir} --trial best`).")
    elif done:
        front = pareto_front(study)
        lines.append("Pareto front: trials " + ", ".join(str(t.number) for t in front)
                     + f" (`nas export --run {run_dir} --trial N`).")
    line, found = controls_line(study)
    lines.append(line)
    if into is not None:
        into["controls"] = found
    if chosen:
        lines.append("Chosen for the final retrain: trial"
                     + ("s " if len(chosen) > 1 else " ")
                     + ", ".join(str(n) for n in chosen) + " (ringed on the Pareto plot).")
    lines += ["", _table(study, evaluated, names), "",
              f"Open the study in the dashboard: `optuna-dashboard {pointer['storage']}`."]
    pictures = [p for p in (plot_pareto(study, run_dir / "pareto.png", reference, chosen),
                            plot_history(study, run_dir / "history.png")) if p is not None]
    return lines, pictures


NOT_TABULAR = ("Comparison with the controls not run (not a tabular space: each evaluation "
               "trains a model).")


def controls_line(study: optuna.Study) -> tuple[str, dict[str, Any]]:
    """Whether the study's front beats the controls ``random`` and ``random-params`` given
    as many evaluations, on paired seeds (:func:`searchers.benchmarks.run_against_controls`):
    only on a tabular space, where a control's evaluation is a look-up; the line and the
    numbers (``{"run": False, "reason": ...}`` where it was not run)."""
    from searchers.benchmarks import benchmark_of_space, run_against_controls

    try:  # a table's files gone since the run, a plug-in's benchmark defined wrongly
        benchmark = benchmark_of_space(str(study.user_attrs.get("space", "")))
        if benchmark is None:
            return NOT_TABULAR, {"run": False, "reason": "not a tabular space"}
        space = benchmark.load()
        rows = [space.row_of_id(t.user_attrs.get("arch_id", ""))
                for t in complete_trials(study)]
        recorded = [r for r in rows if r is not None]
        if not rows or len(recorded) < len(rows):
            return ("Comparison with the controls not run (no complete trial, or one that "
                    "is not a recorded row)."), {"run": False, "reason": "no recorded trials"}
        found = run_against_controls(benchmark, recorded, int(study.user_attrs.get("seed", 0)))
    except NasError as err:  # the rest of the report still stands
        return f"Comparison with the controls not run ({err}).", {"run": False,
                                                                  "reason": str(err)}
    k = len(found["seeds"])
    reached = {c: v["reached"] for c, v in found["controls"].items()}
    hv = f"{found['hypervolume']:.4f}"
    line = (f"Controls ({benchmark.name}: {' and '.join(found['front'])}, "
            f"{found['evaluations']} evaluations each, hypervolume as a share of the table's "
            f"front): front hypervolume {hv}; random reaches ≥ {hv} in {reached['random']} "
            f"of {k} seeds, random-params in {reached['random-params']} of {k}: "
            f"{'' if found['better'] else 'not '}better than the controls for this budget.")
    return line, {"run": True, **found}


def _table(study: optuna.Study, evaluated: list[FrozenTrial], names: list[str]) -> str:
    s = signs(study)

    def key(t: FrozenTrial) -> tuple:
        if t.state != TrialState.COMPLETE:
            return (1, t.number)
        return (0, -s[0] * t.values[0], t.number)

    rows = sorted(evaluated, key=key)
    shown = rows[:TABLE_ROWS]
    # an objective that is a cost (params, flops, latency_ms) is shown once, in its cost
    # column, marked as an objective: not again as a raw float beside it
    cost_columns = {"params": "params", "flops": "FLOPs", "latency_ms": "latency ms"}
    scored = [i for i, n in enumerate(names) if n not in cost_columns]
    head = (["trial", "outcome", "seed", "arch", *(names[i] for i in scored),
             *(title + (" (objective)" if cost in names else "")
               for cost, title in cost_columns.items()), "seconds"])
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in shown:
        costs = t.user_attrs.get("costs") or {}
        values = ([f"{t.values[i]:.4f}" for i in scored] if outcome(t) == "complete"
                  else ["-"] * len(scored))  # Optuna gives a pruned trial its last report
        if "latency_ms" in names and outcome(t) == "complete":
            # the objective itself: a latency model's prediction where the study used one
            costs = {**costs, "latency_ms": t.values[names.index("latency_ms")]}
        lines.append("| " + " | ".join([
            str(t.number), outcome(t), t.user_attrs.get("seed") or "",
            f"`{t.user_attrs.get('arch_id', '?')}`", *values,
            *(_fmt(costs.get(cost)) for cost in cost_columns),
            f"{t.user_attrs.get('seconds', 0.0):.1f}"]) + " |")
    if len(rows) > len(shown):
        lines.append(f"\n({len(shown)} of {len(rows)} evaluated trials shown, the best first.)")
    return "\n".join(lines)
