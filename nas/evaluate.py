"""Re-score a saved model on any split of a task (``nas evaluate``).

A run's numbers are only as good as the split they were measured on: SST-2's ``dev``
split shares phrases with ``train`` and overstates small students, so results are
re-scored on ``test`` (sentences that share nothing with training) whenever a task has
one. This module loads an export (or a run's export) and measures it again, with the
same tokenizer settings it was trained with.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nas.errors import NasError


def classify(model: Any, batches: Iterable[Any], metric: str) -> dict[str, float]:
    """Metrics of a classifier (a :class:`~nas.network.GraphNet`) on ``batches`` (each with
    ``labels``), in eval mode without gradients, on the model's device (the GraphNet moves
    its inputs there); the predictions come back to the CPU to be counted."""
    import torch

    from nas.teacher import classification_metrics

    model.eval()
    preds, labels = [], []
    with torch.no_grad():
        for b in batches:
            preds.append(model(b).logits.argmax(-1).cpu())
            labels.append(b["labels"].cpu())
    return classification_metrics(torch.cat(preds).numpy(), torch.cat(labels).numpy(), metric)


def export_dir_of(path: str | Path) -> tuple[Path, str | dict | None]:
    """``(export directory, task)`` for a run directory or an export directory; a run's
    task may be a file or a ``task:`` mapping (:func:`nas.data.resolve.resolve_task`)."""
    path = Path(path)
    if (path / "config.yaml").is_file():  # a run directory
        from nas.data.files import recorded_task
        from nas.rundir import RunDir

        task = recorded_task(RunDir(path).config.get("task"), path)
        export = path / "export"
        if not (export / "config.json").is_file():
            raise NasError(f"{path}: the run has no export yet (finish it with "
                           "`nas run ... --resume`)")
        return export, task if isinstance(task, str | dict) else None
    if (path / "config.json").is_file():
        import json

        task = json.loads((path / "config.json").read_text()).get("task")
        return path, task if isinstance(task, str) else None
    raise NasError(f"{path}: neither a run directory (config.yaml) nor an export "
                   "directory (config.json)")


def parse_label_map(text: str | None) -> dict[str, str]:
    """``--label-map neg=negative,pos=positive``: the data's label name → the model's."""
    if not text:
        return {}
    mapping: dict[str, str] = {}
    for item in text.split(","):
        data_name, sep, model_name = (part.strip() for part in item.partition("="))
        if not sep or not data_name or not model_name or data_name in mapping:
            raise NasError(f"--label-map expects DATA=MODEL pairs separated by commas, each "
                           f"data label once (e.g. neg=negative,pos=positive), got {text!r}")
        mapping[data_name] = model_name
    return mapping


def _check_task(export: Path, recorded: str | None, given: str) -> None:
    """A built-in task other than the one the export was trained on is refused: its
    classes mean something else, so the score would be meaningless (an SST-2 model scored
    on MRPC). A user's own data file is checked by its input kind and label names."""
    from nas.data.tasks import TASKS

    if recorded is None or recorded == given or given not in TASKS:
        return
    if TASKS.get(given).loader is None:  # a built-in task (not a user's data file)
        raise NasError(f"{export}: the model was trained on task {recorded!r}, not {given!r}; "
                       f"evaluate it with --task {recorded} (or drop --task)")


def _check_input(model: Any, export: Path, data: Any) -> None:
    """Single-text data for a pair model, or pairs for a single-text model, is refused."""
    kind = model.text_input
    given = "pair" if data.is_pair else "single"
    if kind is not None and kind != given:
        texts = {"single": "one text", "pair": "a pair of texts"}
        raise NasError(f"{export}: the model reads {texts[kind]} per example, task "
                       f"{data.task!r} gives {texts[given]}; evaluate it on a "
                       f"{kind}-text task")


def label_indices(model_labels: list[str], data: Any, mapping: dict[str, str],
                  export: Path) -> list[int]:
    """The data's labels as the model's class indices, matched by name (never by
    position), through ``mapping`` (``--label-map``) where given."""
    unknown = [k for k in mapping if k not in data.label_names]
    if unknown:
        raise NasError(f"--label-map names {unknown[0]!r}, which is not a label of task "
                       f"{data.task!r} ({', '.join(data.label_names)})")
    index = {name: i for i, name in enumerate(model_labels)}
    names = [mapping.get(name, name) for name in data.label_names]
    missing = [(d, m) for d, m in zip(data.label_names, names, strict=True) if m not in index]
    if missing:
        data_name, model_name = missing[0]
        which = f"{data_name!r}" + (f" (mapped to {model_name!r})" if data_name in mapping
                                    else "")
        raise NasError(f"{export}: the model's labels are ({', '.join(model_labels)}), the "
                       f"data's (task {data.task!r}) are ({', '.join(data.label_names)}); "
                       f"{which} is not a label of the model: match them by name with "
                       "--label-map DATA=MODEL,... (e.g. --label-map neg=negative,pos=positive)")
    return [index[names[y]] for y in data.labels]


def evaluate_saved(path: str | Path, task: str | dict | None = None, split: str | None = None,
                   data_dir: str | None = None, batch_size: int = 64,
                   runtime: str = "auto", label_map: dict[str, str] | None = None,
                   device: str = "cpu") -> dict[str, Any]:
    """Metrics of the model saved at ``path`` on ``split`` of ``task`` (default: the
    task's report split, ``test`` when it has one). The model must fit the data: the same
    task when both are built-in, the same number of texts per example, and labels that
    match by name (``label_map``: the data's name → the model's). ``device``: where the
    torch runtime computes (:func:`nas.runtime.load`)."""
    import numpy as np

    from nas.data import load_task, report_split, resolve_task
    from nas.runtime import load
    from nas.teacher import classification_metrics

    export, run_task = export_dir_of(path)
    task = task or run_task
    if task is None:
        raise NasError(f"{path}: the export does not name its task; pass --task NAME")
    if batch_size < 1:
        raise NasError(f"--batch-size must be ≥ 1, got {batch_size}")
    task = resolve_task(task)  # a file or mapping becomes a registered name
    model = load(export, runtime=runtime, device=device)
    _check_task(export, model.task, task)
    split = split or report_split(task)
    full = load_task(task, split, data_dir)
    data = _run_sample(path, split, full)
    sample = {"of_examples": len(full)} if len(data) < len(full) else {}
    if model.head is not None:  # a joint intent + slot model (docs/reference.md#mixed-vocabulary)
        metrics = _joint_metrics(model, data, batch_size, export, task)
        return {"task": task, "split": split, "file": ", ".join(data.sources),
                "examples": len(data), **sample, "metrics": metrics, "export": str(export)}
    _check_input(model, export, data)
    labels = label_indices(model.labels, data, label_map or {}, export)
    metrics = classification_metrics(export_predictions(model, data, batch_size),
                                     np.asarray(labels), data.metric)
    return {"task": task, "split": split, "file": ", ".join(data.sources),
            "examples": len(data), **sample, "metrics": metrics, "export": str(export)}


def export_predictions(model: Any, data: Any, batch_size: int = 64) -> Any:
    """A loaded export's (:func:`nas.runtime.load`) class index for each example of
    ``data``, in the data's order (numpy, int). Examples go ``batch_size`` at a time in
    order of length, since each batch is padded to its longest text: on SST-2's 1,821
    test sentences, batches of 64 run 61k tokens in order of length against 97k as they
    come (46k real)."""
    import numpy as np

    lengths = [len(a) + (len(data.texts_b[i]) if data.texts_b else 0)
               for i, a in enumerate(data.texts_a)]
    order = np.argsort(lengths, kind="stable")
    preds = np.zeros(len(order), dtype=int)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        texts_a = [data.texts_a[i] for i in rows]
        texts_b = [data.texts_b[i] for i in rows] if data.texts_b else None
        preds[rows] = model(model.encode(texts_a, texts_b)).argmax(-1).cpu().numpy()
    return preds


def _run_sample(path: str | Path, split: str, data: Any) -> Any:
    """The seeded sample of ``split`` a run scored (``data.max_report_examples``), when
    ``path`` is such a run: ``nas evaluate RUN`` re-scores what the run reported."""
    from nas.rundir import RunDir
    from nas.seeding import REPORT_SAMPLE_STAGE, sample_rows

    if not (Path(path) / "config.yaml").is_file():
        return data
    run = RunDir(path)
    evaluation = (run.load_json("metrics.json") or {}).get("evaluation") or {}
    if evaluation.get("split") != split or "of_examples" not in evaluation:
        return data
    config = run.config
    rows = sample_rows(len(data), (config.get("data") or {}).get("max_report_examples"),
                       int(config.get("seed", 0)), REPORT_SAMPLE_STAGE)
    return data if rows is None else data.subset(rows)


def _joint_metrics(model: Any, data: Any, batch_size: int, export: Path, task: str
                   ) -> dict[str, float]:
    """Intent accuracy and ``conlleval`` slot F1 of a joint model on a tagging split."""
    from nas.tagging import span_f1

    if data.tokens is None or data.tags is None or data.tag_names is None:
        raise NasError(f"{export}: a joint intent + slot model; task {task!r} has no slot "
                       "tags to score it on")
    results: list[dict[str, Any]] = []
    for start in range(0, len(data), batch_size):
        results += model.predict_slots([" ".join(w) for w in data.tokens[start:start
                                                                          + batch_size]])
    correct = sum(r["intent"] == data.label_names[y]
                  for r, y in zip(results, data.labels, strict=True))
    slots = span_f1([[data.tag_names[t] for t in seq] for seq in data.tags],
                    [r["tags"] for r in results])
    return {"intent_accuracy": correct / len(data), "slot_f1": slots["f1"],
            "slot_precision": slots["precision"], "slot_recall": slots["recall"]}
