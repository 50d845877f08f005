"""Run directories: everything a long run produces, in one folder a later command reads.

Layout::

    RUN/config.yaml        the configuration snapshot the run was started with
    RUN/log.jsonl          one JSON line per stage or epoch (appended, never rewritten)
    RUN/checkpoint.pt      the last checkpoint (written atomically)
    RUN/*.json             results: derived architecture, metrics...
    RUN/export/            the standalone model

A run interrupted at any point loses nothing that was finished: checkpoints and
results are written to a temporary file and renamed.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import yaml

from nas.errors import NasError


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
                self._atomic_write(snapshot, yaml.safe_dump(config, sort_keys=False))
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
        self._atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        return path

    def load_json(self, name: str) -> Any | None:
        path = self.path / name
        return json.loads(path.read_text()) if path.is_file() else None

    def save_checkpoint(self, state: dict[str, Any], name: str = "checkpoint.pt") -> None:
        tmp = self.path / (name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path / name)

    def load_checkpoint(self, name: str = "checkpoint.pt") -> dict[str, Any] | None:
        path = self.path / name
        return torch.load(path, weights_only=False) if path.is_file() else None

    @staticmethod
    def _atomic_write(path: Path, text: str) -> None:
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
