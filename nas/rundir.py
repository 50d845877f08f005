"""Run directories: everything a long run produces, in one folder a later command reads.

Layout::

    RUN/config.yaml        the configuration snapshot the run was started with
    RUN/log.jsonl          one JSON line per stage or epoch (appended, never rewritten)
    RUN/checkpoint.safetensors  the last checkpoint (nas.checkpoint format, atomic)
    RUN/*.json             results: derived architecture, metrics...
    RUN/export/            the standalone model

A run interrupted at any point loses nothing that was finished: checkpoints and
results are written to a temporary file and renamed (:mod:`nas.checkpoint`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from nas.checkpoint import (
    CheckpointError,
    atomic_write_json,
    atomic_write_text,
    load_state,
    save_state,
)
from nas.errors import NasError

CHECKPOINT_SUFFIX = ".safetensors"
LEGACY_SUFFIX = ".pt"  # pickle checkpoints of earlier versions: refused, never loaded


class RunDir:
    """A run's folder. ``RunDir(path, config)`` creates it or checks the config matches."""

    def __init__(self, path: str | Path, config: dict[str, Any] | None = None,
                 resume: bool = False) -> None:
        self.path = Path(path)
        snapshot = self.path / "config.yaml"
        if config is not None:
            if snapshot.is_file():
                old = yaml.safe_load(snapshot.read_text())
                if not resume:
                    raise NasError(
                        f"run directory {self.path} already holds a run; pass --resume to "
                        "continue it or choose another --run-dir")
                if old != config:
                    raise NasError(
                        f"{snapshot}: the configuration differs from the one the run was "
                        "started with; resume with the same file or start a new run")
            else:
                self.path.mkdir(parents=True, exist_ok=True)
                atomic_write_text(snapshot, yaml.safe_dump(config, sort_keys=False))
        elif not snapshot.is_file():
            raise NasError(f"{self.path} is not a run directory (no config.yaml)")

    @property
    def config(self) -> dict[str, Any]:
        return yaml.safe_load((self.path / "config.yaml").read_text())

    def log(self, stage: str, **values: Any) -> None:
        line = json.dumps({"time": time.time(), "stage": stage, **values}, default=str)
        with open(self.path / "log.jsonl", "a") as f:
            f.write(line + "\n")

    def read_log(self, stage: str | None = None) -> list[dict[str, Any]]:
        path = self.path / "log.jsonl"
        if not path.is_file():
            return []
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [r for r in rows if stage is None or r["stage"] == stage]

    def save_json(self, name: str, data: Any) -> Path:
        path = self.path / name
        atomic_write_json(path, data, default=str)
        return path

    def load_json(self, name: str) -> Any | None:
        path = self.path / name
        return json.loads(path.read_text()) if path.is_file() else None

    def checkpoint_path(self, name: str = "checkpoint") -> Path:
        """``RUN/<name>.safetensors``; a ``.pt`` suffix in ``name`` (older callers) is dropped."""
        stem = name.removesuffix(LEGACY_SUFFIX).removesuffix(CHECKPOINT_SUFFIX)
        return self.path / (stem + CHECKPOINT_SUFFIX)

    def save_checkpoint(self, state: dict[str, Any], name: str = "checkpoint") -> Path:
        """Write ``state`` (nested dicts of state dicts, numbers...) as a checkpoint."""
        path = self.checkpoint_path(name)
        save_state(path, state)
        return path

    def load_checkpoint(self, name: str = "checkpoint") -> dict[str, Any] | None:
        """The state saved under ``name``, or ``None`` when there is none.

        A leftover pickle checkpoint (``<name>.pt``) of an earlier version is an error:
        unpickling can run code, so it is never loaded.
        """
        path = self.checkpoint_path(name)
        if path.is_file():
            return load_state(path)
        legacy = path.with_suffix(LEGACY_SUFFIX)
        if legacy.is_file():
            raise CheckpointError(
                f"{legacy}: a checkpoint in the old pickle format, which is refused (loading "
                "it could run code); delete it and run the stage again")
        return None

    def remove_checkpoint(self, name: str = "checkpoint") -> None:
        self.checkpoint_path(name).unlink(missing_ok=True)
