"""MobileBERT's progressive knowledge transfer (Sun et al., 2020, §3.5–3.6;
docs/reference.md#mobilebert), composed from the losses of :mod:`nas.distill.losses` and run by the
one training loop.

The student is a child of the ``mobilebert`` family with the teacher's depth and
feature-map width (h_inter); stage ℓ trains block ℓ alone to reproduce teacher layer ℓ:

    λ·L_AT + μ·L_FMT + β·L_μ + γ·L_σ,   (λ, μ, β, γ) = (1, 100, 5000, 5),

L_AT the KL from the teacher's attention distributions to the student's (per head,
averaged over heads and real query tokens), L_FMT the MSE of the parameter-free
LayerNorm of both feature maps, L_μ and L_σ their per-token means and variances (real
tokens only). The blocks below ℓ are frozen (the paper) or train at
``lower_lr_scale`` × the learning rate (the published code: 0.1). Then the whole
student learns the teacher's predictions (soft cross-entropy, :func:`run_prediction`).

Transfer strategies (the paper's Table 7 and its prediction-only baseline),
:data:`TRANSFERS`:

* ``progressive`` — embeddings, then block 1, 2, …, L, one stage each;
* ``all_at_once`` — one stage training every block on the sum of every layer's loss,
  for as many epochs as the progressive stages together (the same budget);
* ``prediction_only`` — no layer-wise transfer; prediction-layer distillation alone.

Two adaptations, because the teacher here is a BERT (MiniLM-L6-H384) rather than the
paper's IB-BERT: (1) the paper copies the embedding layer from the teacher, but BERT's
384-wide table is not MobileBERT's 128-wide trigram embedding, so the student copies what
fits (position and token-type tables, pooler, classifier: :func:`copy_from_teacher`),
starts its word table from the teacher's principal components, and a first stage
transfers the embedding output like a feature map (``embeddings``); (2) a student with
fewer heads than the teacher (A_S dividing A_T) learns, per head, the mean of a group of
A_T / A_S teacher heads' attention distributions (:func:`nas.distill.losses.
grouped_attention_kl`); with equal counts this is the paper's head-to-head loss.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from nas.device import table_rows
from nas.distill.losses import (
    feature_map_loss,
    grouped_attention_kl,
    mean_loss,
    soft_cross_entropy,
    variance_loss,
)
from nas.errors import NasError
from nas.network import ModelOutput
from nas.seeding import seed_stage
from nas.train import Trainer, TrainResult, TrainSettings

log = logging.getLogger("nas.distill.mobilebert")

TRANSFERS = ("progressive", "all_at_once", "prediction_only")
#: What each transfer forward pass records.
RECORDS = ("embeddings", "attention_scores", "hidden_states")

_LAYER = re.compile(r"^L(\d+)_")


@dataclass(frozen=True)
class PktWeights:
    """(λ, μ, β, γ) of the layer loss (docs/reference.md#mobilebert: 1, 100, 5000, 5)."""

    attention: float = 1.0
    feature_map: float = 100.0
    mean: float = 5000.0
    variance: float = 5.0

    def __post_init__(self) -> None:
        for name in ("attention", "feature_map", "mean", "variance"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {getattr(self, name)!r}")


@dataclass(frozen=True)
class Stage:
    """One transfer stage: which parameter groups train (``train``), which layers' losses
    it sums (0-based), whether the embedding output is transferred, and how many of the
    per-stage epochs it runs (``epochs_scale``)."""

    name: str
    train: tuple[str, ...]
    layers: tuple[int, ...]
    embeddings: bool = False
    epochs_scale: int = 1


def transfer_stages(mode: str, num_layers: int) -> list[Stage]:
    """The stages of a transfer strategy (module docstring) for an L-block student."""
    if mode not in TRANSFERS:
        raise NasError(f"transfer must be one of {', '.join(TRANSFERS)}, got {mode!r}")
    blocks = [f"L{i}" for i in range(num_layers)]
    if mode == "progressive":
        return [Stage("embeddings", ("embeddings",), (), embeddings=True)] + [
            Stage(f"layer{i + 1}", (blocks[i],), (i,)) for i in range(num_layers)]
    if mode == "all_at_once":
        return [Stage("all_layers", ("embeddings", *blocks), tuple(range(num_layers)),
                      embeddings=True, epochs_scale=num_layers + 1)]
    return []


def group_of(name: str) -> str:
    """The parameter group of a :class:`~nas.network.GraphNet` parameter name of the
    ``mobilebert`` family: ``embeddings``, ``L<i>`` (block i, including the linear edges
    into its nodes) or ``head``."""
    parts = name.split(".")
    node = parts[1].split("->")[-1] if parts[0] == "edges" else parts[1]
    m = _LAYER.match(node)
    if m:
        return f"L{m.group(1)}"
    if node.startswith("emb"):
        return "embeddings"
    return "head"


def parameter_groups(model: nn.Module) -> dict[str, list[str]]:
    """Parameter names by :func:`group_of`."""
    groups: dict[str, list[str]] = {}
    for name, _ in model.named_parameters():
        groups.setdefault(group_of(name), []).append(name)
    return groups


def copy_from_teacher(student: nn.Module, teacher: nn.Module) -> list[str]:
    """Copy every teacher tensor whose name and shape the student shares (the position
    and token-type embeddings, the pooler and the classifier when the widths agree);
    returns the names copied. The paper copies the embedding and the classifier (§3.5)."""
    mine = student.state_dict()
    copied = []
    with torch.no_grad():
        for name, value in teacher.state_dict().items():
            if name in mine and mine[name].shape == value.shape and (
                    name.startswith("nodes.head.") or name.endswith((
                        "position_embeddings.weight", "token_type_embeddings.weight"))):
                mine[name].copy_(value)
                copied.append(name)
    return copied


def check_pair(student_config: Mapping[str, Any], arch: Mapping[str, Any],
               teacher_config: Mapping[str, Any]) -> None:
    """Transfer needs equal depth and feature-map width, and student heads dividing the
    teacher's (docs/reference.md#mobilebert); a one-line error otherwise."""
    v = {**student_config, **arch}
    pairs = (("num_hidden_layers", "num_hidden_layers"), ("hidden_size", "hidden_size"))
    for mine, theirs in pairs:
        if int(v[mine]) != int(teacher_config[theirs]):
            raise NasError(f"student {mine}={v[mine]} but the teacher has {teacher_config[theirs]}"
                           f": progressive transfer maps layer to layer and feature map to "
                           f"feature map; set the student's {mine} to {teacher_config[theirs]}")
    heads = int(v["num_attention_heads"])
    teacher_heads = int(teacher_config["num_attention_heads"])
    if teacher_heads % heads:
        raise NasError(f"student num_attention_heads={heads} does not divide the teacher's "
                       f"{teacher_heads}: attention transfer compares each student head with "
                       f"a group of teacher heads; use a divisor of {teacher_heads}")


# ------------------------------------------------------------------------- losses


def transfer_loss(student: ModelOutput, teacher: ModelOutput, mask: torch.Tensor,
                  layers: Sequence[int], embeddings: bool, weights: PktWeights
                  ) -> tuple[torch.Tensor, dict[str, float]]:
    """Σ over ``layers`` (and the embedding output) of λ·L_AT + μ·L_FMT + β·L_μ + γ·L_σ;
    feature-map terms on real tokens (``mask`` (B, L) > 0), attention on real queries.
    Returns the loss and each term's sum for the log."""
    s, t = student.records, teacher.records
    real = mask.bool()
    terms: dict[str, list[torch.Tensor]] = {"attention": [], "feature_map": [], "mean": [],
                                            "variance": []}

    def feature(a: torch.Tensor, b: torch.Tensor) -> None:
        a, b = a[real], b[real]  # (N, D): real tokens only
        terms["feature_map"].append(feature_map_loss(a, b))
        terms["mean"].append(mean_loss(a, b))
        terms["variance"].append(variance_loss(a, b))

    if embeddings:
        feature(s["embeddings"][0], t["embeddings"][0])
    for i in layers:
        feature(s["hidden_states"][i], t["hidden_states"][i])
        terms["attention"].append(grouped_attention_kl(s["attention_scores"][i],
                                                       t["attention_scores"][i], query_mask=mask))
    parts = {k: torch.stack(v).sum() for k, v in terms.items() if v}
    total = torch.stack([getattr(weights, k) * v for k, v in parts.items()]).sum()
    return total, {k: float(v.detach()) for k, v in parts.items()}


# ------------------------------------------------------------------------- stages


def _param_groups(model: nn.Module, train: Iterable[str], lower: Iterable[str],
                  lower_lr_scale: float, settings: TrainSettings) -> list[dict[str, Any]]:
    """Optimiser groups: ``train`` at the stage's rate, ``lower`` at ``lower_lr_scale`` ×
    it (0: frozen, no gradient at all); weight decay on matrices only (as the Trainer's
    default). Every other parameter is frozen."""
    train, lower = set(train), set(lower) if lower_lr_scale > 0 else set()
    groups: list[dict[str, Any]] = []
    for names, scale in ((train, 1.0), (lower, lower_lr_scale)):
        params = [p for n, p in model.named_parameters() if group_of(n) in names]
        for p in params:
            p.requires_grad_(True)
        for decay, sel in ((settings.weight_decay, [p for p in params if p.ndim >= 2]),
                           (0.0, [p for p in params if p.ndim < 2])):
            if sel:
                groups.append({"params": sel, "weight_decay": decay,
                               "lr": settings.lr * scale})
    for n, p in model.named_parameters():
        if group_of(n) not in train | lower:
            p.requires_grad_(False)
    if not groups:
        raise NasError(f"no parameters to train in groups {sorted(train)}")
    return groups


def lower_groups(stage: Stage) -> list[str]:
    """The groups below a one-block stage (the embeddings and the blocks under it): frozen,
    or trained at the lower rate; none for the embedding and all-at-once stages."""
    if stage.embeddings or not stage.layers:
        return []
    return ["embeddings", *(f"L{j}" for j in range(min(stage.layers)))]


def run_transfer(student: nn.Module, teacher: nn.Module, stages: Sequence[Stage],
                 settings: TrainSettings, batches: Callable[[str], Any], steps_per_epoch: int,
                 *, weights: PktWeights | None = None, lower_lr_scale: float = 0.0,
                 seed: int = 0, workdir: Path | None = None, progress: bool = False,
                 on_stage: Callable[[Stage, TrainResult], None] | None = None) -> None:
    """Run the transfer ``stages`` in order, each a :class:`~nas.train.Trainer` fit of
    ``settings`` (epochs × the stage's ``epochs_scale``) with its own seed.

    ``batches(stage name)`` is the stage's batch source (``(epoch, start) → batches``).
    With ``workdir``, a finished stage leaves ``transfer-<name>.safetensors`` there and is
    not run again (its weights are loaded), and an unfinished one resumes from its
    checkpoint. ``on_stage(stage, result)`` is called after each stage that ran.
    """
    from nas.cache import load_weights, save_weights

    weights = weights or PktWeights()
    teacher.eval()
    for stage in stages:
        final = None if workdir is None else workdir / f"transfer-{stage.name}.safetensors"
        if final is not None and final.is_file():
            load_weights(student, final)
            continue
        seed_stage(seed, f"transfer:{stage.name}")
        lower = lower_groups(stage)
        groups = _param_groups(student, stage.train, lower, lower_lr_scale, settings)
        stage_settings = replace(settings, epochs=settings.epochs * stage.epochs_scale,
                                 max_steps=None if settings.max_steps is None
                                 else settings.max_steps * stage.epochs_scale)

        def loss(net: nn.Module, batch: Mapping[str, torch.Tensor], stage: Stage = stage
                 ) -> tuple[torch.Tensor, dict[str, float]]:
            with torch.no_grad():
                t = teacher(batch, record=RECORDS)
            return transfer_loss(net(batch, record=RECORDS), t, batch["attention_mask"],
                                 stage.layers, stage.embeddings, weights)

        checkpoint = (None if workdir is None
                      else workdir / f"transfer-{stage.name}.checkpoint.safetensors")
        log.info("transfer stage %s: training %s%s", stage.name, ", ".join(stage.train),
                 f" (lower blocks at {lower_lr_scale}x lr)" if lower and lower_lr_scale
                 else " (lower blocks frozen)" if lower else "")
        result = Trainer(student, stage_settings, batches(f"transfer-{stage.name}"),
                         steps_per_epoch, loss, param_groups=groups,
                         checkpoint=checkpoint,
                         progress=progress, desc=f"transfer {stage.name}").fit()
        if final is not None:
            save_weights(student, final)
            if checkpoint is not None:  # both are None or both set (by workdir)
                checkpoint.unlink(missing_ok=True)
        if on_stage is not None:
            on_stage(stage, result)
    for p in student.parameters():
        p.requires_grad_(True)


def remove_stage_weights(workdir: Path, stages: Sequence[Stage]) -> None:
    """Delete the finished stages' weights (kept only so that an interrupted transfer
    resumes); call once the student's final weights are written."""
    for stage in stages:
        (workdir / f"transfer-{stage.name}.safetensors").unlink(missing_ok=True)


def run_prediction(student: nn.Module, logits: np.ndarray, settings: TrainSettings,
                   batches: Any, steps_per_epoch: int, *, temperature: float = 1.0,
                   seed: int = 0, checkpoint: Path | None = None, progress: bool = False,
                   on_epoch_end: Callable[[int, dict[str, float]], Any] | None = None
                   ) -> TrainResult:
    """Prediction-layer distillation of the whole student: soft cross-entropy at
    ``temperature`` against the teacher's ``logits`` (N, C), rows picked by each batch's
    ``index``."""
    for p in student.parameters():
        p.requires_grad_(True)
    seed_stage(seed, "prediction")

    def loss(net: nn.Module, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
        out = net(batch).logits
        return soft_cross_entropy(out, table_rows(logits, batch["index"], out), temperature)

    return Trainer(student, settings, batches, steps_per_epoch, loss, checkpoint=checkpoint,
                   on_epoch_end=on_epoch_end, progress=progress, desc="prediction").fit()


__all__ = ["RECORDS", "TRANSFERS", "PktWeights", "Stage", "check_pair", "copy_from_teacher",
           "group_of", "lower_groups", "parameter_groups", "remove_stage_weights",
           "run_prediction", "run_transfer", "transfer_loss", "transfer_stages"]
