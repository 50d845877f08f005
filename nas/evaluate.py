"""Re-score a saved model on any split of a task (``nas evaluate``).

A run's numbers are only as good as the split they were measured on: SST-2's ``dev``
split shares phrases with ``train`` and overstates small students, so results are
re-scored on ``test`` (sentences that share nothing with training) whenever a task has
one. This module loads an export (or a run's export) and measures it again, with the
same tokenizer settings it was trained with.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nas.errors import NasError


def classify(model: Any, batches: list[Any], metric: str) -> dict[str, float]:
    """Metrics of a classifier (a :class:`~nas.network.GraphNet`) on ``batches`` (each with
    ``labels``), in eval mode without gradients."""
    import torch

    from nas.teacher import classification_metrics

    model.eval()
    preds, labels = [], []
    with torch.no_grad():
        for b in batches:
            preds.append(model(b).logits.argmax(-1))
            labels.append(b["labels"])
    return classification_metrics(torch.cat(preds).numpy(), torch.cat(labels).numpy(), metric)


def export_dir_of(path: str | Path) -> tuple[Path, str | dict | None]:
    """``(export directory, task)`` for a run directory or an export directory; a run's
    task may be a file or a ``task:`` mapping (:func:`nas.data.resolve.resolve_task`)."""
    path = Path(path)
    if (path / "config.yaml").is_file():  # a run directory
        from nas.rundir import RunDir

        task = RunDir(path).config.get("task")
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


def evaluate_saved(path: str | Path, task: str | dict | None = None, split: str | None = None,
                   data_dir: str | None = None, batch_size: int = 64,
                   runtime: str = "torch") -> dict[str, Any]:
    """Metrics of the model saved at ``path`` on ``split`` of ``task`` (default: the
    task's report split, ``test`` when it has one)."""
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
    split = split or report_split(task)
    data = load_task(task, split, data_dir)
    model = load(export, runtime=runtime)
    if model.head is not None:  # a joint intent + slot model (SPEC §7)
        metrics = _joint_metrics(model, data, batch_size, export, task)
        return {"task": task, "split": split, "file": ", ".join(data.sources),
                "examples": len(data), "metrics": metrics, "export": str(export)}
    if len(model.labels) != data.num_labels:
        raise NasError(f"{export}: the model has {len(model.labels)} labels, task {task!r} "
                       f"has {data.num_labels}; evaluate it on the task it was trained for")
    preds = []
    for start in range(0, len(data), batch_size):
        texts_a = list(data.texts_a[start:start + batch_size])
        texts_b = list(data.texts_b[start:start + batch_size]) if data.texts_b else None
        preds.append(model(model.encode(texts_a, texts_b)).argmax(-1).numpy())
    metrics = classification_metrics(np.concatenate(preds), np.asarray(data.labels),
                                     data.metric)
    return {"task": task, "split": split, "file": ", ".join(data.sources),
            "examples": len(data), "metrics": metrics, "export": str(export)}


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
