"""The typed settings of the built-in evaluators: what
:func:`evaluators.build.build_evaluator` checks an experiment file's mapping against
(an unknown key or a wrong type is a one-line :class:`~nas.config.ConfigError`).

Each evaluator names its type with ``settings_type()``; the distilled retrain's is the
training loop's :class:`~nas.train.TrainSettings` itself. This module imports torch
(through :mod:`nas.train`), so only building an evaluator by name imports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from nas.config import check_fields
from nas.distill.mobilebert import PktWeights
from nas.train import TrainSettings


@dataclass(frozen=True)
class CostSettings:
    """``costs``: the counted quantities to minimise (``params``, ``flops``, ``macs``;
    ``latency_ms`` with a ``latency_fn`` part)."""

    objectives: list[str] = field(default_factory=lambda: ["params"])


@dataclass(frozen=True)
class PenaltySettings:
    """``penalty``: hard ceilings, soft targets with their weight λ, and costs appended as
    minimised objectives (:class:`evaluators.penalty.PenaltyEvaluator`)."""

    max_params: float | None = None
    max_flops: float | None = None
    max_latency_ms: float | None = None
    targets: dict[str, float] = field(default_factory=dict)
    penalty_weight: float | dict[str, float] = 1.0
    extra_objectives: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class WarmupKDSettings:
    """``warmup-kd``: the task-KD phase's loop settings, the text-KD phase's (``None``
    skips it), task steps between validation scores (``None``: each epoch) and whether to
    keep the text phase's loss curve (EfficientBERT, docs/reference.md#efficientbert)."""

    task: TrainSettings = field(default_factory=TrainSettings)
    text: TrainSettings | None = None
    eval_every: int | None = None
    record_curve: bool = False


#: what scores an inherited-kd candidate (InheritedKDSettings.score)
SCORES = ("metric", "teacher-kl")


#: ``layer_mapping``: which teacher layer each kept layer's hidden state is matched to
#: (:func:`evaluators.inherited_kd.layer_pairs`); ``sliced`` is the default every recorded
#: result used
LAYER_MAPPINGS = ("sliced", "uniform", "last")


@dataclass
class InheritedKDSettings(TrainSettings):
    """``inherited-kd``: the short distillation's loop settings (``max_steps`` caps it),
    the weight of the hidden-state MSE beside the logits loss (0: logits only) and what
    scores a candidate: ``metric`` (the task's validation metric) or ``teacher-kl``
    (minus the mean KL divergence from the full teacher's answers on the validation
    batches, which still separates candidates that a short distillation leaves at the
    majority answer; :mod:`evaluators.inherited_kd`). ``layer_mapping`` (TinyBERT's
    name): which teacher layer each kept layer's hidden state learns, ``sliced`` (the
    one it was cut from), ``uniform`` (TinyBERT's g(m)) or ``last`` (the last kept layer
    to the teacher's last; :func:`evaluators.inherited_kd.layer_pairs`)."""

    hidden_weight: float = 1.0
    score: str = "metric"
    layer_mapping: str = "sliced"

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("hidden_weight", self.hidden_weight >= 0, "a number >= 0"),
                      ("score", self.score in SCORES, " or ".join(SCORES)),
                      ("layer_mapping", self.layer_mapping in LAYER_MAPPINGS,
                       " or ".join(LAYER_MAPPINGS))], self)


@dataclass(frozen=True)
class TransferSettings:
    """``progressive-transfer``: the transfer strategy, each layer-wise stage's loop
    settings, the prediction stage's, (λ, μ, β, γ), the lower blocks' learning-rate scale
    and the prediction temperature (MobileBERT, docs/reference.md#mobilebert)."""

    transfer: str = "progressive"
    transfer_settings: TrainSettings = field(default_factory=TrainSettings)
    prediction_settings: TrainSettings = field(default_factory=TrainSettings)
    weights: PktWeights = field(default_factory=PktWeights)
    lower_lr_scale: float = 0.0
    temperature: float = 1.0


__all__ = ["LAYER_MAPPINGS", "CostSettings", "InheritedKDSettings", "PenaltySettings",
           "TrainSettings", "TransferSettings", "WarmupKDSettings"]
