"""What the task-distillation recipes share beyond the run skeleton (TinyBERT and
MobileBERT): the prediction layer's settings. The student's row and export are the run
skeleton's (``TaskContext.finish`` in ``recipes/common.py``)."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from nas.config import check_fields
from nas.train import TrainSettings

log = logging.getLogger("nas.distill")


@dataclass
class PredictionSettings(TrainSettings):
    """Prediction-layer distillation (TinyBERT §3.1 eq. 10, MobileBERT §3.4): soft
    cross-entropy against the teacher's logits at ``temperature``. A recipe subclasses it
    for its own defaults or switches."""

    temperature: float = 1.0
    lr: float = 5e-5
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("temperature", 0.0 < self.temperature < math.inf, "a number > 0")], self)


__all__ = ["PredictionSettings"]
