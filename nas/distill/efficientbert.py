"""EfficientBERT's task distillation objective (docs/reference.md#efficientbert), shared by the
proxy of stages 1–2, the stage-3 supernet and the final retrain.

L = Σ_m (L_attn + L_hidn) + γ·L_pred: the student's attention scores and hidden states
(through its space's ``fit`` layer, :class:`nas.distill.warmup.SpaceFit`) against the
teacher's layers g(m) of a uniform map, plus the soft cross-entropy at temperature T
against the teacher's logits, cached per training example and looked up by the batch's
``index``. Which intermediate terms count is a :class:`~nas.distill.tinybert.Terms`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from nas.device import table_rows
from nas.distill.tinybert import Terms, intermediate_loss, prediction_loss
from nas.distill.warmup import SpaceFit

Batch = Mapping[str, torch.Tensor]


class TaskKD:
    """``loss(model, batch) -> (loss, logged terms)``: the objective on ``model``'s
    forward (the teacher's states first, then the student's, as the warm-up does).
    ``teacher``: the frozen teacher, or a :class:`~nas.distill.general.CachedTeacher`;
    ``mapping``: student layer m → teacher layer; ``logits``: the teacher's logits of the
    training data (``None`` or ``gamma = 0``: no prediction term)."""

    def __init__(self, teacher: Any, mapping: Sequence[int], terms: Terms,
                 logits: np.ndarray | None = None, gamma: float = 1.0,
                 temperature: float = 1.0) -> None:
        self.teacher, self.mapping, self.terms = teacher, mapping, terms
        self.logits, self.gamma, self.temperature = logits, gamma, temperature

    def __call__(self, model: Any, batch: Batch) -> tuple[torch.Tensor, dict[str, float]]:
        t = self.teacher_states(batch)
        return self.against(model(batch, record=self.terms.records), t, batch, SpaceFit(model))

    def on_output(self, fit: SpaceFit) -> Callable[[Any, Batch], Any]:
        """``loss(output, batch)``: the objective on a forward already run (recording
        ``terms.records``), as a one-shot searcher's ``task_loss``; ``fit``: the
        supernet's fit layer."""
        return lambda out, batch: self.against(out, self.teacher_states(batch), batch, fit)

    def teacher_states(self, batch: Batch) -> Any:
        with torch.no_grad():
            return self.teacher(batch, record=self.terms.records)

    def against(self, student: Any, teacher: Any, batch: Batch, fit: SpaceFit
                ) -> tuple[torch.Tensor, dict[str, float]]:
        value, info = intermediate_loss(student, teacher, fit, self.mapping, self.terms)
        if self.logits is not None and self.gamma > 0:
            target = table_rows(self.logits, batch["index"], student.logits)
            pred = prediction_loss(student.logits, target, self.temperature)
            info = {**info, "pred": float(pred.detach())}
            value = value + self.gamma * pred
        return value, info
