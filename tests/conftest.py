"""Shared test set-up: point the engine at the shared data folder (never copied here)."""

from __future__ import annotations

import os
from pathlib import Path

# The data lives beside the repository (../shared/data); an explicit NAS_DATA_DIR wins.
os.environ.setdefault(
    "NAS_DATA_DIR", str(Path(__file__).resolve().parents[1].parent / "shared" / "data")
)
