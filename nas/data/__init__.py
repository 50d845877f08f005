"""Tasks and data: GLUE TSV, SNIPS, your own files, hub names, corpora, seeded split.

See :mod:`nas.data.tasks` for the task table, :mod:`nas.data.files` for tasks read from
a user's files, and :mod:`nas.data.resolve` for :func:`resolve_task` and :func:`load_task`,
which take a task in any of its forms.
"""

from nas.data.batching import batch_order, iter_batches
from nas.data.resolve import load_task, report_split, resolve_task
from nas.data.tasks import (
    CORPORA,
    DATA_DIR_ENV,
    TASKS,
    TaskData,
    TaskSpec,
    file_digest,
    load_corpus,
    resolve_data_dir,
    train_val_split,
)

__all__ = [
    "CORPORA",
    "DATA_DIR_ENV",
    "TASKS",
    "TaskData",
    "TaskSpec",
    "batch_order",
    "file_digest",
    "iter_batches",
    "load_corpus",
    "load_task",
    "report_split",
    "resolve_task",
    "resolve_data_dir",
    "train_val_split",
]
