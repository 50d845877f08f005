"""``nas run --dry-run``: what a run would do, found without doing it.

A dry run first makes the run's own checks (:meth:`nas.methods.Method.validate`, the
same call the run makes before anything else, so that a configuration the run would
refuse is refused here in the same line), measuring nothing: a latency limit is checked
on this machine's cached latency table, and without one the plan says it was not
checked and how long the run's calibration takes. It then resolves the task, reads
and caps the data exactly as stage 2 does
(:meth:`recipes.common.TaskContext.select_data`, so the cuts it reports are the run's),
asks the teacher cache whether the fine-tuned teacher exists
(:func:`nas.teacher.finetune_plan`), and counts the steps of every training section of
the configuration: a section is any part of it with ``epochs`` and ``batch_size``
(``search``, ``retrain``, a distillation stage...), trained on the training subset; a
search's final retrain trains on ``final.train_examples`` and the ``transfer.texts``
rows the run would keep (read and filtered here as the run reads them), once per final
point and seed (:func:`final_runs`). It writes no run folder and trains nothing.

The wall-time estimate is rough on purpose and says so: one forward and backward pass
of the teacher is timed on real training examples at the run's token length, here, at
the current torch thread count, and every counted step is charged as a teacher-sized
step of its batch size. A student is smaller than the teacher (its steps are cheaper),
a supernet or a distillation step that also runs the teacher costs more, and a
multi-trial stage repeats its per-trial training for each trial (the trial count is
shown, not guessed into the sum): read the figure as the order of magnitude.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Iterator, Mapping
from typing import Any

#: examples in the timed teacher step (after one untimed warm-up step)
TIMED_EXAMPLES = 8
#: examples whose token counts scale the timed step to another length cap
LENGTH_SAMPLE = 256


class _NoRunFolder:
    """The run folder a dry run does not open: log lines go nowhere."""

    def log(self, stage: str, **fields: Any) -> None:
        pass


def training_sections(config: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """``(dotted name, section)`` for every part of ``config`` (dataclasses and mappings,
    nested) that has ``epochs`` and ``batch_size``, in declaration order. The teacher's
    fine-tuning (``teacher_finetune``) is counted apart."""
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        items: Mapping[str, Any] = {f.name: getattr(config, f.name)
                                    for f in dataclasses.fields(config)}
    elif isinstance(config, Mapping):
        items = config
    else:
        return
    for name, value in items.items():
        path = f"{prefix}{name}"
        if path == "teacher_finetune":
            continue
        if _get(value, "epochs") is not None and _get(value, "batch_size") is not None:
            yield path, value
        else:
            yield from training_sections(value, f"{path}.")


def _get(section: Any, key: str) -> Any:
    if isinstance(section, Mapping):
        return section.get(key)
    if dataclasses.is_dataclass(section) and not isinstance(section, type):
        return getattr(section, key, None)
    return None


def section_steps(section: Any, examples: int) -> dict[str, Any]:
    """The batches one pass of ``section`` trains: ``epochs`` × ⌈examples / batch⌉, cut
    at ``max_steps`` when set."""
    epochs, batch = _get(section, "epochs"), int(_get(section, "batch_size"))
    per_epoch = math.ceil(examples / batch)
    steps = max(1, int(round(float(epochs) * per_epoch)))
    cap = _get(section, "max_steps")
    if isinstance(cap, int) and cap < steps:
        steps = cap
    return {"examples": examples, "batch_size": batch, "epochs": epochs,
            "batches_per_epoch": per_epoch, "steps": steps}


def final_train_rows(config: Any, subset: int, full: int) -> int:
    """The rows a search's final retrain (``retrain:``) trains on: ``final.train_examples``
    of the ``full`` train split when set (``all``, or N capped at the split), else the
    training ``subset``."""
    wanted = _get(_get(config, "final"), "train_examples")
    if wanted is None:
        return subset
    return full if wanted == "all" else min(int(wanted), full)


def final_runs(config: Any) -> tuple[int | None, int, bool] | None:
    """``(points, seeds, at_most)``: how many times a search's final retrain runs, one per
    chosen point and seed (``final.select``: ``n`` for ``best`` and ``pareto``, a point per
    ratio for ``latency_ratios``, every trial for ``all``); ``at_most`` where points can
    coincide or fall short (a front with fewer points). ``points`` is ``None`` when the
    count is known only once the search has run (``all`` after a planned searcher, whose
    list the run makes); ``None`` without a ``final`` block."""
    final = _get(config, "final")
    select = _get(final, "select")
    if final is None or select is None:
        return None
    seeds = int(_get(final, "seeds") or 1)
    if select == "best":
        return int(_get(final, "n") or 1), seeds, False
    if select == "pareto":
        return int(_get(final, "n") or 1), seeds, True
    if select == "latency_ratios":
        return len(_get(final, "ratios") or ()), seeds, True
    trials = _trials(config) or _get(config, "n_trials")
    if _planned(config) or not isinstance(trials, int):
        return None, seeds, True
    return int(trials), seeds, True


def _planned(config: Any) -> bool:
    """Whether ``config.searcher`` names a planned searcher (its list is made by the run)."""
    from nas.errors import NasError
    from searchers import SEARCHERS

    searcher = _get(config, "searcher")
    name = _get(searcher, "name") if isinstance(searcher, Mapping) else searcher
    try:  # the run's checks named a bad searcher before the plan is made
        return isinstance(name, str) and SEARCHERS.kind_of(name) == "planned"
    except (NasError, KeyError):
        return False


def transfer_rows(ctx: Any, config: Any) -> int:
    """The ``transfer.texts`` rows the final retrain adds to its own (the file read and
    filtered as the run reads it, :meth:`recipes.common.TaskContext.load_transfer`);
    ``transfer.augment``'s variants are made only by the run, and are not counted."""
    settings = _get(config, "transfer")
    if settings is None or _get(settings, "texts") is None:
        return 0
    data = ctx.load_transfer()
    return 0 if data is None else len(data)


def _trials(config: Any) -> int | None:
    study = _get(config, "multi_trial")
    n = _get(study, "n_trials") if study is not None else None
    return int(n) if isinstance(n, int) else None


def dry_run(method: Any, config: Any, options: Any) -> dict[str, Any]:
    """The plan of ``method`` on ``config``: the configuration as the run folder's
    ``config.yaml`` would record it, the data sizes and cuts, the teacher, the steps of
    each training section and the rough wall-time estimate (module docstring)."""
    from nas.data import resolve_task
    from nas.teacher import finetune_plan

    not_checked = method.validate(config, options, calibrate=False)
    task = resolve_task(config.task)
    resolved = dataclasses.replace(config, task=task)
    # the method's own context (``Recipe.context``), so that its data choices are the run's;
    # taken from ``method``, so that this module never imports the skeleton that calls it
    ctx = method.context(resolved, _NoRunFolder(), options)
    cuts = ctx.select_data()
    finetune = resolved.finetune_config()
    teacher = finetune_plan(task, resolved.teacher, options.data_dir, finetune)
    final_rows = final_train_rows(resolved, len(ctx.train), len(ctx.full_train))
    transfer = transfer_rows(ctx, resolved)
    runs = final_runs(resolved)
    sections = [{"name": name, **section_steps(
                    section, final_rows + transfer if name == "retrain" else len(ctx.train))}
                for name, section in training_sections(resolved)]
    for section in sections:
        if section["name"] == "retrain":
            section["transfer"] = transfer
            if runs is not None:  # once per final point and seed
                section["points"], section["seeds"], section["at_most"] = runs
                section["repeats"] = (runs[0] or 1) * runs[1]
    seq_len = resolved.data.max_seq_len
    timed = teacher_step_seconds(teacher.teacher_path, ctx.train, seq_len)
    seconds = sum(s["steps"] * s["batch_size"] * s.get("repeats", 1)
                  for s in sections) * timed["per_example"]
    teacher_row: dict[str, Any] = {"cached": teacher.cached, "folder": str(teacher.run_dir),
                                   "train": len(teacher.train), "dev": len(teacher.dev),
                                   "cuts": teacher.cuts}
    if not finetune.enabled:  # the user's own classifier: its labels checked, no fine-tune
        teacher_row = own_teacher_row(teacher, resolved, options.data_dir)
    elif not teacher.cached:
        steps = teacher.steps(finetune)
        teacher_row["steps"] = steps
        # batches are padded to their longest text (dynamic padding): the cost follows
        # the texts' mean length under each cap, not the caps (linear: the low side, as
        # attention grows faster with length)
        lengths = timed.pop("lengths")
        ratio = (sum(min(n, finetune.max_seq_len) for n in lengths)
                 / max(1, sum(min(n, seq_len) for n in lengths)))
        seconds += steps * finetune.batch_size * timed["per_example"] * ratio
    timed.pop("lengths", None)
    return {"method": method.name, "name": resolved.name,
            "config": method.snapshot(config), "task": task,
            "data": {"train": len(ctx.train), "dev": len(ctx.dev),
                     ctx.report_split: len(ctx.report), "cuts": cuts,
                     "report_split": ctx.report_split},
            "checks": {"passed": True, "not_checked": not_checked},
            "teacher": teacher_row, "stages": sections, "trials": _trials(resolved),
            "estimate": {"seconds": round(seconds, 1), **timed}}


def own_teacher_row(teacher: Any, config: Any, data_dir: Any) -> dict[str, Any]:
    """The plan's teacher row for ``teacher_finetune.enabled: false``: the folder as given,
    its labels matched with the task's (refused in one line as the run would:
    :func:`nas.teacher.teacher_order`), the dev rows it is scored on, no fine-tune."""
    from nas.teacher import teacher_order

    names, order = teacher_order(teacher.task, teacher.teacher_path, data_dir,
                                 config.teacher_labels)
    return {"fine_tune": False, "folder": teacher.teacher_path, "dev": len(teacher.dev),
            "labels": dict(zip(names, order, strict=True)),
            "cuts": [c for c in teacher.cuts if c.startswith("dev")]}


def teacher_step_seconds(teacher_path: str, data: Any, seq_len: int) -> dict[str, Any]:
    """Seconds per training example of one teacher forward and backward pass on the
    first :data:`TIMED_EXAMPLES` training examples at ``seq_len`` tokens (dynamic
    padding, as the runs batch), after one untimed pass; ``lengths``: the untruncated
    token counts of the first :data:`LENGTH_SAMPLE` examples."""
    import torch

    from nas.teacher import load_teacher
    from nas.tokenization import encode, load_tokenizer

    rows = data.head(TIMED_EXAMPLES)
    tokenizer = load_tokenizer(teacher_path)
    batch = encode(tokenizer, rows.texts_a, rows.texts_b, seq_len, separate_b=False)
    sample = data.head(LENGTH_SAMPLE)
    lengths = [len(ids) for ids in tokenizer(
        list(sample.texts_a), list(sample.texts_b) if sample.texts_b else None,
        truncation=False)["input_ids"]]
    model = load_teacher(teacher_path, num_labels=max(2, data.num_labels)).train()
    labels = torch.tensor([y % max(2, data.num_labels) for y in rows.labels] or [0])

    def step() -> None:
        model.zero_grad()
        model(**batch, labels=labels[: batch["input_ids"].shape[0]]).loss.backward()

    step()
    t0 = time.perf_counter()
    step()
    elapsed = time.perf_counter() - t0
    return {"per_example": elapsed / batch["input_ids"].shape[0], "seq_len": seq_len,
            "threads": torch.get_num_threads(), "measured_on": "teacher", "lengths": lengths}


def describe(plan: dict[str, Any]) -> str:
    """The plan as the lines ``nas run --dry-run`` prints."""
    import yaml

    data = plan["data"]
    lines = [f"dry run of {plan['name']} (method {plan['method']}): nothing trained, no run "
             "folder written", "", "checks: the run's checks before its first training "
             "step passed (it would run)"]
    lines += [f"  {note}" for note in plan["checks"]["not_checked"]]
    lines += ["", "configuration (as the run's config.yaml records it):"]
    lines += ["  " + line for line in yaml.safe_dump(plan["config"], sort_keys=False)
              .rstrip().splitlines()]
    split = data["report_split"]
    sizes = f"train {data['train']:,}, dev {data['dev']:,}" + (
        f", {split} {data[split]:,}" if split != "dev" else "")
    lines += ["", f"data (task {plan['task']}): {sizes}"]
    lines += [f"  {cut}" for cut in data["cuts"]] or ["  (no cap cut the data)"]
    teacher = plan["teacher"]
    if teacher.get("fine_tune") is False:
        lines += ["", f"teacher: {teacher['folder']} as fine-tuned (teacher_finetune.enabled="
                      f"false), scored on {teacher['dev']:,} dev examples; its rows for the "
                      f"task's labels: " + ", ".join(f"{k} {v}" for k, v in
                                                     teacher["labels"].items())]
    else:
        lines += ["", "teacher: " + (
            f"fine-tuned, cached ({teacher['folder']})" if teacher["cached"]
            else f"to fine-tune: {teacher['steps']:,} steps on {teacher['train']:,} examples "
                 f"(dev {teacher['dev']:,})")]
    lines += [f"  {cut}" for cut in teacher["cuts"]]
    lines += ["", "training sections (epochs × batches of the training subset, or of"
                  " final.train_examples for the final retrain):"]
    lines += [f"  {s['name']}: {s['steps']:,} steps ({s['epochs']} epoch(s) × "
              f"{s['batches_per_epoch']:,} batches of {s['batch_size']} on {s['examples']:,} "
              "examples" + _transfer_part(s) + (
                  ", cut at max_steps" if s["steps"] < s["batches_per_epoch"] * s["epochs"]
                  else "") + ")" + _repeats_part(s)
              for s in plan["stages"]] or ["  (none found)"]
    if plan.get("trials"):
        lines.append(f"  multi_trial: {plan['trials']} trials, each with its own training "
                     "(not added into the estimate)")
    est = plan["estimate"]
    lines += ["", f"estimated wall time: about {_duration(est['seconds'])} (rough: every step "
                  f"charged as a teacher step, {1000 * est['per_example']:.1f} ms per example at "
                  f"{est['seq_len']} tokens measured now on {est['threads']} thread(s); "
                  "students are cheaper, supernets and trials cost more)"]
    return "\n".join(lines)


def _transfer_part(section: Mapping[str, Any]) -> str:
    transfer = section.get("transfer") or 0
    return (f": {section['examples'] - transfer:,} of train and {transfer:,} transfer texts"
            if transfer else "")


def _repeats_part(section: Mapping[str, Any]) -> str:
    if "repeats" not in section:
        return ""
    if section["points"] is None:
        return (f", once per seed of each point: {section['seeds']} seed(s) × the points "
                "the searcher plans (counted as one)")
    points = f"{'up to ' if section['at_most'] else ''}{section['points']} final point(s)"
    return f", once per seed of each point: {points} × {section['seeds']} seed(s)"


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


__all__ = ["describe", "dry_run", "section_steps", "teacher_step_seconds",
           "training_sections"]
