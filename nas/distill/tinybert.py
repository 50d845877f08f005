"""TinyBERT's Transformer-distillation objective, composed from the losses of
:mod:`nas.distill.losses` (SPEC §5).

L_model = Σ_{m=0}^{M+1} λ_m · L_layer(S_m, T_g(m)) with λ_m = 1: the embedding loss
(m = 0), for each student layer m = 1…M the attention-score and hidden-state losses
against teacher layer g(m), and the prediction loss on the logits (m = M+1), used in
its own stage. Each term can be switched off (the ablations of TinyBERT's Table 6).

Both models are :class:`~nas.network.GraphNet` children of the ``bert`` family, which
record ``embeddings``, ``hidden_states`` and pre-softmax ``attention_scores`` when asked
(``spaces/bert.py``); the teacher is loaded into that design with
:func:`nas.hf.load_teacher_as_design`, since ``transformers`` 5.x returns no pre-softmax
scores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from nas.distill.losses import FitMap, attention_mse, fit_mse, soft_cross_entropy
from nas.errors import NasError
from nas.network import ModelOutput


@dataclass(frozen=True)
class Terms:
    """Which intermediate terms of L_model are used."""

    embedding: bool = True
    attention: bool = True
    hidden: bool = True

    @property
    def records(self) -> tuple[str, ...]:
        """The states a forward pass must record for these terms."""
        return tuple(kind for kind, on in (("embeddings", self.embedding),
                                           ("attention_scores", self.attention),
                                           ("hidden_states", self.hidden)) if on)

    @property
    def any(self) -> bool:
        return self.embedding or self.attention or self.hidden


class FitMaps(nn.Module):
    """TinyBERT's learned width maps, trained with the student and dropped after
    distillation: W_e for the embeddings, W_h (one matrix shared by every layer) for the
    hidden states. Identities without parameters when the widths agree."""

    def __init__(self, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.embedding = FitMap(student_dim, teacher_dim)
        self.hidden = FitMap(student_dim, teacher_dim)


class DistillStudent(nn.Module):
    """The student with its fit maps: what the intermediate stages train (one state dict,
    so a checkpoint carries both)."""

    def __init__(self, student: nn.Module, student_dim: int, teacher_dim: int) -> None:
        super().__init__()
        self.student = student
        self.fits = FitMaps(student_dim, teacher_dim)

    def forward(self, batch: dict[str, torch.Tensor], record: Sequence[str] = ()) -> ModelOutput:
        return self.student(batch, record=tuple(record))


def intermediate_loss(student: ModelOutput, teacher: ModelOutput, fits: FitMaps,
                      mapping: Sequence[int], terms: Terms
                      ) -> tuple[torch.Tensor, dict[str, float]]:
    """Σ of the enabled terms, and each term's value for the log.

    * embedding: MSE(E_S·W_e, E_T);
    * attention: Σ_m MSE(A_S^m, A_T^{g(m)}) on pre-softmax scores, masked entries zeroed;
    * hidden: Σ_m MSE(H_S^m·W_h, H_T^{g(m)}).

    ``mapping`` lists g(m) for m = 1…M (1-based teacher layers, :func:`layer_map`).
    """
    if not terms.any:
        raise NasError("intermediate distillation needs at least one of the embedding, "
                       "attention and hidden losses")
    s, t = student.records, teacher.records
    parts: dict[str, torch.Tensor] = {}
    if terms.embedding:
        parts["embedding"] = fit_mse(s["embeddings"][0], t["embeddings"][0], fits.embedding)
    for kind, name in (("attention_scores", "attention"), ("hidden_states", "hidden")):
        if not getattr(terms, name):
            continue
        if len(s[kind]) != len(mapping) or max(mapping) > len(t[kind]):
            raise NasError(f"layer mapping {list(mapping)} does not fit {len(s[kind])} "
                           f"student and {len(t[kind])} teacher layers")
        if name == "attention":
            values = [attention_mse(s[kind][m], t[kind][g - 1]) for m, g in enumerate(mapping)]
        else:
            values = [fit_mse(s[kind][m], t[kind][g - 1], fits.hidden)
                      for m, g in enumerate(mapping)]
        parts[name] = torch.stack(values).sum()
    total = torch.stack(list(parts.values())).sum()
    return total, {k: float(v.detach()) for k, v in parts.items()}


def prediction_loss(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                    temperature: float = 1.0) -> torch.Tensor:
    """L_pred = −softmax(z_T/t)·log_softmax(z_S/t), summed over classes, mean over the
    batch (SPEC §5; t = 1 by default)."""
    return soft_cross_entropy(student_logits, teacher_logits, temperature)


__all__ = ["DistillStudent", "FitMaps", "Terms", "intermediate_loss", "prediction_loss"]
