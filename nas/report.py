"""``nas report RUN_DIR``: teacher vs searched vs random, with plots.

Reads ``metrics.json`` and ``derived_arch.json`` of a run directory and writes
``report.md`` and ``derived_cell.png``; the method that made the run adds its own
sections and plots (:meth:`nas.methods.Method.report_sections`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nas.errors import NasError
from nas.methods import method_of_run
from nas.plugins import import_run_plugins
from nas.rundir import RunDir
from nas.teacher import metric_parts, metric_score
from nas.units import human


def _ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _row(name: str, m: dict[str, Any], metric: str, teacher: dict[str, Any],
         split: str = "dev", paired: dict[str, Any] | None = None,
         side: str = "student_ms") -> str:
    """A model's row. With ``paired`` (the interleaved timing of
    :func:`nas.measure.paired_speedups`) its milliseconds are that timing's ``side``
    (``teacher_ms`` for the teacher's row) and its speed-up the paired one, marked
    "(paired)"; else its own medians and the ratio of the two rows' batch-1 medians."""
    lat1 = m["latency"]["batch1"]["median_ms"]
    lat32 = m["latency"]["batch32"]["median_ms"]
    size = teacher["params"] / m["params"]
    speed = teacher["latency"]["batch1"]["median_ms"] / lat1
    how = ""
    if paired and "batch1" in paired:
        lat1 = paired["batch1"][side]
        lat32 = paired.get("batch32", {}).get(side, lat32)
        if side == "student_ms":
            speed, how = paired["batch1"]["speedup"], " (paired)"
    flops = human(m["flops"]) if "flops" in m else "-"  # from 512 to billions
    scores = m.get(split)
    value = (" / ".join(f"{100 * scores[p]:.2f}" for p in metric_parts(metric))
             if scores else "-")
    return (f"| {name} | {value} | {m['params'] / 1e6:.2f}M | {flops} | "
            f"{_ms(lat1)} | {_ms(lat32)} | {size:.1f}× | {speed:.1f}×{how} |")


def _overlap_lines(evaluation: dict[str, Any]) -> list[str]:
    """How many dev / report texts overlap the training texts (leakage), when counted."""
    lines = []
    for name, o in evaluation.get("overlap_with_train", {}).items():
        if o["examples"] and o["shared_phrase"] / o["examples"] > 0.05:
            lines.append(f"Warning: {o['shared_phrase']} of {o['examples']} `{name}` texts "
                         f"overlap the training texts (exact, or a shared phrase of ≥ "
                         f"{o['min_words']} words); scores there overstate unseen-text "
                         "accuracy.")
    return lines


#: A model that scores less than this far above chance or the majority answer has not
#: learned the task (a student at 36% on 3 classes was reported only as
#: "194.8× faster").
TRIVIAL_MARGIN = 0.02


def _trivial_lines(metrics: dict[str, Any], split: str) -> list[str]:
    """One warning per model (teacher, searched) whose accuracy on ``split`` is within
    :data:`TRIVIAL_MARGIN` of chance or of always giving the majority answer, or below
    them. Runs made before the report split's class counts were recorded get none."""
    evaluation = metrics.get("evaluation") or {}
    classes, majority = evaluation.get("classes"), evaluation.get("majority")
    part = next((p for p in metric_parts(metrics.get("metric", "accuracy"))
                 if p.endswith("accuracy")), None)
    if not classes or part is None:
        return []
    trivial = [("chance", 1 / classes, f"{classes} classes")]
    if majority:
        trivial.append(("the majority answer", majority["share"],
                        f"always {majority['label']!r}"))
    lines = []
    for name, row in (("teacher", metrics["teacher"]),
                      (metrics.get("searched", {}).get("tag") or "searched",
                       metrics.get("searched"))):
        score = ((row or {}).get(split) or {}).get(part)
        if score is None:
            continue
        close = [f"{'below' if score < value - TRIVIAL_MARGIN else 'within 2 points of'} "
                 f"{what} ({100 * value:.2f}%, {why})"
                 for what, value, why in trivial if score < value + TRIVIAL_MARGIN]
        if close:
            lines.append(f"Warning: {name} scores {100 * score:.2f}% {part} on `{split}`, "
                         f"{' and '.join(close)}: it has not learned the task; give it more "
                         "data, more epochs or a larger model before reading its speed-up.")
    return lines


def _models(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    found = [metrics["teacher"]] + ([metrics["searched"]] if "searched" in metrics else [])
    return found + list(metrics.get("random", {}).get("runs", []))


def write_report(run_dir: str | Path) -> tuple[str, dict[str, Any]]:
    run = RunDir(run_dir)
    metrics = run.load_json("metrics.json")
    if metrics is None:
        raise NasError(f"{run.path}/metrics.json is missing: the run has not finished "
                       "(rerun `nas search ... --resume`)")
    if not isinstance(metrics, dict) or not isinstance(metrics.get("teacher"), dict):
        raise NasError(f"{run.path}/metrics.json: expected a JSON object with the teacher's "
                       "results; the file is damaged (delete it and finish the run with --resume)")
    try:
        lines = _table(metrics, f"# Report: {run.path.name}")
    except (KeyError, TypeError, ValueError, IndexError, ZeroDivisionError) as err:
        what = f"no entry {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {err}"
        raise NasError(f"{run.path}/metrics.json: a result is missing or malformed ({what}); "
                       "the file is damaged or from another version") from None
    import_run_plugins(run.path)  # a space of the user's own (method search's plugins:)
    pictures = _derived_drawing(run)
    method = method_of_run(run)
    if method is not None:
        extra_lines, extra_pictures = method.report_sections(run, metrics)
        lines += extra_lines
        pictures += extra_pictures
    lines += ["", *(f"![{p.stem}]({p.name})" for p in pictures)]
    text = "\n".join(lines)
    (run.path / "report.md").write_text(text + "\n")
    data = {"metrics": metrics, "pictures": [str(p) for p in pictures],
            "report": str(run.path / "report.md")}
    # a multi-trial study's comparison with the controls (searchers.report.study_sections
    # adds it to the metrics it is handed): the report's finding, not the run's record
    if "controls" in metrics:
        data["controls"] = metrics.pop("controls")
    return text, data


def _table(metrics: dict[str, Any], title: str) -> list[str]:
    """The report's title, table and summary lines."""
    metric = metrics.get("metric", "accuracy")
    parts = metric_parts(metric)
    teacher = metrics["teacher"]
    # Runs made before the report split existed measured on dev only.
    evaluation = metrics.get("evaluation", {"split": "dev", "file": "the dev split"})
    split = evaluation["split"]
    lines = [title, "",
             f"Scores on `{split}` ({evaluation['file']}"
             + (f", {evaluation['examples']} examples" if "examples" in evaluation else "")
             + (f": a seeded sample of its {evaluation['of_examples']} (data.max_report_examples)"
                if "of_examples" in evaluation else "")
             + ")" + ("; the searches chose on dev, never on this split." if split != "dev"
                      else "."), *_overlap_lines(evaluation),
             *_trivial_lines(metrics, split), "",
             f"| model | {split} {' / '.join(parts)} (%) | params | FLOPs/example | "
             "CPU ms (batch 1) | CPU ms (batch 32) | smaller than teacher | faster (batch 1) |",
             "|---|---|---|---|---|---|---|---|",
             _row("teacher", teacher, metric, teacher, split, metrics.get("speedup"),
                  side="teacher_ms")]
    if "searched" in metrics:
        # a fixed-design recipe (TinyBERT, MobileBERT, mixed vocab) tags its row "student"
        lines.append(_row(metrics["searched"].get("tag") or "searched", metrics["searched"],
                          metric, teacher, split, metrics.get("speedup")))
    if "random" in metrics:
        r = metrics["random"]
        for i, one in enumerate(r["runs"]):
            name = one.get("tag", f"random{i}").replace("random", "random ", 1)
            lines.append(_row(name, one, metric, teacher, split))
        what = "" if len(parts) == 1 else f" (mean of {' and '.join(parts)})"
        if r["runs"]:
            lines += ["", f"random baseline{what}, {split}: {100 * r['mean']:.2f} ± "
                          f"{100 * r['std']:.2f} ({len(r['runs'])} architectures)"]
        if r.get("failed"):
            lines.append(f"failed random trials: {', '.join(map(str, r['failed']))}")
        if "searched" in metrics and r["runs"] and metrics["searched"].get(split):
            gap = metric_score(metrics["searched"][split], metric) - r["mean"]
            lines.append(f"searched − random mean: {100 * gap:+.2f} points")
    seq = {m["latency"][f"batch{b}"]["seq_len"] for m in _models(metrics) for b in (1, 32)}
    where = (f"{split} example(s) closest to its median length of "
             f"{evaluation['latency_tokens']} tokens" if "latency_tokens" in evaluation
             else "the first dev example(s)")
    threads = sorted({m["latency"][f"batch{b}"].get("threads", 1) for m in _models(metrics)
                      for b in (1, 32)})
    on = (f"{threads[0]} CPU thread{'s' if threads[0] > 1 else ''}" if len(threads) == 1
          else f"{' or '.join(map(str, threads))} CPU threads")
    lines += ["", f"FLOPs per example at {teacher.get('seq_len', '?')} tokens; latency: median "
                  f"forward pass of the {where}, {on}, padded to the batch's longest "
                  f"({', '.join(map(str, sorted(seq)))} tokens)."]
    lines += timing_lines(metrics)
    lines += paired_lines(metrics)
    env = metrics.get("environment")
    if env:  # runs made before it was recorded have none
        lines.append(f"Measured at commit {(env.get('commit') or 'unknown')[:12]} (engine "
                     f"{env.get('engine')}, torch {env.get('torch')}, transformers "
                     f"{env.get('transformers')}), training on {env.get('threads')} torch "
                     "thread(s).")
    return lines


#: What a runtime name means, for the report's text.
RUNTIMES = {"torch-fp32": "PyTorch, float32, eager",
            "onnx-fp32": "ONNX Runtime, float32", "onnx-int8": "ONNX Runtime, dynamic int8"}


def timing_lines(metrics: dict[str, Any]) -> list[str]:
    """How latency was timed, in words: the runtime every figure is in, the searched
    model's paired speed-up (against the teacher in PyTorch fp32 and in the student's own
    runtime) with its spread, a warning when the spread is larger than the difference,
    and a note for runs timed under the previous protocol
    (docs/latency.md#speed-ups-one-timing-protocol)."""
    teacher = metrics["teacher"]
    runtime = teacher.get("runtime")
    if runtime is None:
        return ["Timed under the previous protocol: the teacher as a `transformers` model, "
                "possibly a row cached from an earlier run, apart from the students; its "
                "speed-ups are not comparable with runs that time both in one runtime."]
    paired = metrics.get("speedup")
    shipped = (paired or {}).get("runtime", runtime)
    if shipped == runtime:
        lines = [f"Runtime of every latency figure: `{runtime}` "
                 f"({RUNTIMES.get(runtime, runtime)}); the teacher was timed in this run in "
                 "the engine's `bert` design, as the students are. Rows marked (paired) show "
                 "the paired timing below (the teacher's row too); other speed-ups divide the "
                 "teacher's and the row's separately timed medians."]
    else:  # an export that ships an ONNX graph, timed in it (nas.shipped)
        lines = [f"Runtime of the latency figures: rows marked (paired), the teacher's too, "
                 f"are in `{shipped}` ({RUNTIMES.get(shipped, shipped)}: the export's own "
                 "graph against the teacher exported the same way, "
                 f"{(paired or {}).get('threads', '?')} thread); the others in `{runtime}` "
                 f"({RUNTIMES.get(runtime, runtime)}), the teacher in the engine's `bert` "
                 "design as the students are."]
    if not paired:
        return lines
    tag = (metrics.get("searched") or {}).get("tag") or "searched"
    for key in sorted(k for k in paired if k.startswith("batch")):
        r = paired[key]
        low, high = r["speedup_iqr"]
        if r["runtime"] == "torch-fp32":
            fp32 = "the same figure (the teacher in PyTorch fp32: the same runtime here)"
        else:  # a runtime plugged in: its pairing against the teacher in torch-fp32 beside
            base = (paired.get("vs_torch_fp32") or {}).get(key)
            fp32 = (f"{base['speedup']:.2f}× against the teacher in PyTorch fp32" if base
                    else "not timed against the teacher in PyTorch fp32")
        lines.append(f"Speed-up of {tag} over the teacher at {key.replace('batch', 'batch ')}"
                     f" (paired: {r['rounds']} interleaved rounds on the same batches): "
                     f"{r['speedup']:.2f}× against the teacher in the same runtime "
                     f"`{r['runtime']}` (interquartile range {low:.2f}–{high:.2f}; teacher "
                     f"{_ms(r['teacher_ms'])} ms, {tag} {_ms(r['student_ms'])} ms); {fp32}.")
        if r.get("noisy"):
            lines.append(f"Warning: at {key.replace('batch', 'batch ')} the timings' spread "
                         "(teacher's and student's interquartile ranges together) is larger "
                         "than the difference between their medians: the machine was too "
                         "busy to tell the two apart; time again on a quiet machine with more "
                         "`latency_repeats`.")
    return lines


def paired_lines(metrics: dict[str, Any]) -> list[str]:
    """Each shipped file against the teacher on the same examples (:mod:`nas.paired`):
    the paired difference with its 95% interval and McNemar's exact p, since two
    accuracies' own intervals overlap far more than a paired test does."""
    paired = metrics.get("paired")
    if not paired or not paired.get("points"):
        return []
    lines = ["", f"Paired with the teacher on the same {paired['examples']} `{paired['split']}` "
                 f"examples (the exported files as loaded by `nas.runtime.load`; teacher "
                 f"{paired['teacher_accuracy']:.2f}): McNemar's exact test on the examples "
                 "exactly one of the two gets right.", "",
             "| model | accuracy (%) | − teacher, points [95%] | right only here / only teacher "
             "| McNemar p |", "|---|---|---|---|---|"]
    # the final points in the run's order (the searched one among them), then any other
    order = [row.get("tag") for row in metrics.get("final") or []]
    points = sorted(paired["points"].items(),
                    key=lambda item: order.index(item[0]) if item[0] in order else len(order))
    for tag, r in points:
        low, high = r["difference_95"]
        lines.append(f"| {tag} | {r['student_accuracy']:.2f} | {r['difference']:+.2f} "
                     f"[{low:+.2f}, {high:+.2f}] | {r['student_only']} / {r['teacher_only']} "
                     f"| {r['p_value']:.2g} |")
    return [*lines, ""]


def _derived_drawing(run: RunDir) -> list[Path]:
    """The derived architecture, drawn from the space it belongs to (any method)."""
    derived = run.load_json("derived_arch.json")
    if derived is None or "space_config" not in derived:
        return []
    if not (isinstance(derived.get("space"), str) and isinstance(derived["space_config"], dict)
            and isinstance(derived.get("choices"), dict)):
        raise NasError(f"{run.path}/derived_arch.json: expected 'space', 'space_config' and "
                       "'choices'; the file is damaged")
    from nas.draw import draw_architecture
    from nas.space import get_space

    space = get_space(derived["space"], **derived["space_config"])
    if not space.drawing:  # a user's space need not declare drawing groups
        return []
    return [draw_architecture(space, derived["choices"], run.path / "derived_cell.png",
                              title=f"derived architecture {derived.get('id', '')}")]
