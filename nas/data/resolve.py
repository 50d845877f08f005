"""Task resolution: whatever names a task (``task:`` in an experiment, ``--task``), once.

A task is named by a registered name (``sst2``, plug-ins), a hub name with a slash
(``glue/sst2``), a path to data files or a ``task:`` mapping (:mod:`nas.data.files`,
whose docstring gives the order in which they are tried). :func:`resolve_task` turns any
of them into the name of a registered task (reading and registering files on the first
call), and :func:`load_task` and :func:`report_split` take any of them. This module
sits above :mod:`nas.data.tasks` (the task table) and :mod:`nas.data.files` (your own
files), which therefore never call back up.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nas.data.files import FileTask, parse_task, refuse_unreadable_path, register_files
from nas.data.tasks import TASKS, TaskData, load_registered
from nas.errors import RegistryError


def resolve_task(task: Any, base_dir: str | Path | None = None) -> str:
    """The registered task name for whatever ``task`` is (see the module docstring).

    Files are read, checked and registered on the first call; a registered name is
    returned as it is (its data is read by :func:`load_task`).
    """
    parsed = parse_task(task, base_dir)
    if isinstance(parsed, FileTask):
        return register_files(parsed)
    if parsed in TASKS:
        return parsed
    refuse_unreadable_path(parsed, base_dir)
    if "/" in parsed:
        return parsed  # a hub name
    try:
        TASKS.get(parsed)
    except RegistryError as err:
        raise RegistryError(f"{err.args[0]}; or give a data file (train.csv), a saved "
                            f"datasets folder, or a hub name with a slash (glue/sst2)"
                            ) from None
    return parsed  # pragma: no cover - TASKS.get raised above


def load_task(
    name: str | dict, split: str, data_dir: str | os.PathLike[str] | None = None
) -> TaskData:
    """Load split ``split`` (``train``, ``validation`` alias ``dev``, ``test``) of a task.

    ``name`` is a registered task (``sst2``, ``mrpc``, ``snips``, plug-ins) read from the
    data directory, a path to your own data file or a ``task:`` mapping (read where it
    is, :mod:`nas.data.files`), or a hub name with a slash (``glue/sst2``).
    """
    return load_registered(resolve_task(name), split, data_dir)


def report_split(name: str | dict) -> str:
    """The split results are reported on: ``test`` when the task has one, else ``dev``."""
    name = resolve_task(name)
    if name not in TASKS and "/" in name:
        return "dev"
    return "test" if "test" in TASKS.get(name).files else "dev"


__all__ = ["load_task", "report_split", "resolve_task"]
