"""Distillation losses of TinyBERT (docs/reference.md#tinybert), MobileBERT (#mobilebert)
and AdaBERT (#adabert).

Every function takes plain tensors, so a student of any design and a cached teacher
output (:mod:`nas.distill.cache`) plug in alike. Reductions follow the papers; where the
published code reduces differently, the code's variant is an option. Each loss is
tested against numbers worked out by hand in ``tests/test_losses.py``.

Shapes: B batch, L tokens, D hidden size, H heads, C classes, V vocabulary,
K student layers, J teacher layers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from nas.errors import NasError

# TinyBERT's code treats any score <= -100 as masked (BERT adds -10000 to masked keys,
# HF 5.x adds the dtype's minimum); both fall below this threshold.
MASKED_SCORE_THRESHOLD = -100.0


# ------------------------------------------------------------------------------ TinyBERT


class FitMap(nn.Module):
    """Learnable linear map W from the student width to the teacher width
    (docs/reference.md#tinybert).

    TinyBERT matches E_S·W_e to E_T and H_S·W_h to H_T; W is trained with the student
    and dropped after distillation. Identity (no parameters) when the widths agree and
    ``force`` is false.
    """

    def __init__(self, student_dim: int, teacher_dim: int, force: bool = False) -> None:
        super().__init__()
        self.proj: nn.Module = (
            nn.Linear(student_dim, teacher_dim)
            if force or student_dim != teacher_dim
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., D_S) -> (..., D_T)
        return self.proj(x)


def fit_mse(
    student: torch.Tensor, teacher: torch.Tensor, fit: nn.Module | None = None
) -> torch.Tensor:
    """MSE(fit(student), teacher), mean over every element: L_embd and L_hidn
    (docs/reference.md#tinybert).

    ``student`` (B, L, D_S), ``teacher`` (B, L, D_T); ``fit`` maps D_S → D_T
    (a :class:`FitMap`), or is ``None`` when the widths already agree.
    """
    s = fit(student) if fit is not None else student
    if s.shape != teacher.shape:
        raise NasError(
            f"student {tuple(s.shape)} and teacher {tuple(teacher.shape)} shapes differ "
            f"after the fit map; pass fit=FitMap(student_dim, teacher_dim)"
        )
    return F.mse_loss(s, teacher.to(s.dtype))


def attention_mse(
    student_scores: torch.Tensor,
    teacher_scores: torch.Tensor,
    threshold: float = MASKED_SCORE_THRESHOLD,
) -> torch.Tensor:
    """L_attn: MSE of *pre-softmax* attention scores, averaged over heads
    (docs/reference.md#tinybert).

    Inputs (B, H, L, L). Masked entries (which carry −10000 or a larger negative) are
    set to 0 in both tensors before the difference, as TinyBERT does, so padding does
    not dominate the loss. With equal-sized heads the mean over heads of per-head MSEs
    equals one mean over every element.
    """
    if student_scores.shape != teacher_scores.shape:
        raise NasError(
            f"attention shapes differ: student {tuple(student_scores.shape)}, teacher "
            f"{tuple(teacher_scores.shape)}; TinyBERT needs equal head counts and lengths"
        )
    t = teacher_scores.to(student_scores.dtype)
    s = torch.where(student_scores <= threshold, torch.zeros_like(student_scores), student_scores)
    t = torch.where(t <= threshold, torch.zeros_like(t), t)
    return F.mse_loss(s, t)


def soft_cross_entropy(
    student_logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    temperature: float = 1.0,
    reduction: str = "batchmean",
) -> torch.Tensor:
    """L_pred = −softmax(z_T/t)·log_softmax(z_S/t) (docs/reference.md#tinybert), t = 1 by default.

    Logits (..., C). ``reduction="batchmean"`` (paper: sum over classes, mean over the
    examples) or ``"mean"`` (TinyBERT's code: mean over every element, i.e. the paper's
    value divided by C).
    """
    target = F.softmax(teacher_logits.to(student_logits.dtype) / temperature, dim=-1)
    per = -(target * F.log_softmax(student_logits / temperature, dim=-1))
    if reduction == "batchmean":
        return per.sum(-1).mean()
    if reduction == "mean":
        return per.mean()
    raise NasError(f"reduction must be 'batchmean' or 'mean', got {reduction!r}")


def kd_loss(
    logits: torch.Tensor,
    teacher_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 2.0,
    alpha: float = 0.5,
) -> torch.Tensor:
    """Knowledge distillation (Hinton et al., 2015, §2): (1−α)·CE(y, z_S) +
    α·T²·KL(softmax(z_T/T) ‖ softmax(z_S/T)), batch mean.

    Logits (B, C), labels (B,). The T² keeps the soft term's gradients on the scale of the
    hard term's as T changes (Hinton et al., 2015, §2). The teacher is a constant (no
    gradient reaches it). α = 0 is plain cross-entropy.
    """
    if not 0.0 <= alpha <= 1.0 or not temperature > 0.0:
        raise NasError(f"kd_loss needs alpha in [0, 1] and temperature > 0, got alpha={alpha}, "
                       f"temperature={temperature}")
    ce = F.cross_entropy(logits, labels)
    if alpha == 0.0:
        return ce
    log_s = F.log_softmax(logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.detach().to(logits.dtype) / temperature, dim=-1)
    kl = F.kl_div(log_s, log_t, reduction="batchmean", log_target=True)
    return (1.0 - alpha) * ce + alpha * temperature ** 2 * kl


def layer_map(num_student: int, num_teacher: int, strategy: str = "uniform") -> list[int]:
    """Teacher layer g(m) for each student layer m = 1…M (docs/reference.md#tinybert), 1-based.

    0 is the embedding (g(0) = 0) and is not listed. ``uniform``: g(m) = ⌊m·N/M⌋
    (every N/M-th layer, ending on the last); ``top``: the last M layers
    (g(m) = N − M + m); ``bottom``: the first M (g(m) = m).
    """
    if not 0 < num_student <= num_teacher:
        raise NasError(
            f"need 0 < student layers <= teacher layers, got {num_student} and {num_teacher}"
        )
    m = range(1, num_student + 1)
    if strategy == "uniform":
        return [i * num_teacher // num_student for i in m]
    if strategy == "top":
        return [num_teacher - num_student + i for i in m]
    if strategy == "bottom":
        return list(m)
    raise NasError(f"layer mapping must be 'uniform', 'top' or 'bottom', got {strategy!r}")


# ---------------------------------------------------------------------------- MobileBERT


def _plain_layernorm(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """LayerNorm over the last dimension with no scale or shift."""
    return F.layer_norm(x, x.shape[-1:], eps=eps)


def feature_map_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """L_FMT: MSE between parameter-free LayerNorm of both feature maps
    (docs/reference.md#mobilebert).

    (B, L, D) each; mean over tokens and features. Normalising first makes the loss
    insensitive to the scale and offset of each token's features, which the separate
    mean and variance terms (:func:`mean_loss`, :func:`variance_loss`) transfer.
    """
    return F.mse_loss(_plain_layernorm(student), _plain_layernorm(teacher.to(student.dtype)))


def mean_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """L_μ: squared difference of per-token feature means, averaged over tokens
    (docs/reference.md#mobilebert)."""
    return (student.mean(-1) - teacher.to(student.dtype).mean(-1)).pow(2).mean()


def variance_loss(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """L_σ: absolute difference of per-token feature variances, averaged
    (docs/reference.md#mobilebert).

    Population variance (divide by D), as the LayerNorm statistics it mirrors.
    """
    vs = student.var(-1, unbiased=False)
    vt = teacher.to(student.dtype).var(-1, unbiased=False)
    return (vs - vt).abs().mean()


def attention_kl(
    student: torch.Tensor,
    teacher: torch.Tensor,
    from_logits: bool = True,
    query_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """L_AT: KL(teacher attention ‖ student attention) per head, averaged
    (docs/reference.md#mobilebert).

    Inputs (B, H, L, L): pre-softmax scores (``from_logits``, masked keys carrying a large
    negative) or probabilities. The KL sums over keys and is averaged over heads and
    query positions; ``query_mask`` (B, L) restricts the average to real tokens.
    """
    if student.shape != teacher.shape:
        raise NasError(
            f"attention shapes differ: student {tuple(student.shape)}, teacher "
            f"{tuple(teacher.shape)}; MobileBERT transfer needs equal head counts"
        )
    teacher = teacher.to(student.dtype)
    if from_logits:
        log_s = F.log_softmax(student, dim=-1)
        log_t = F.log_softmax(teacher, dim=-1)
        p_t = log_t.exp()
        kl = (p_t * (log_t - log_s)).sum(-1)  # (B, H, L)
    else:
        kl = (torch.xlogy(teacher, teacher) - torch.xlogy(teacher, student)).sum(-1)
    if query_mask is None:
        return kl.mean()
    m = query_mask.to(kl.dtype)[:, None, :].expand_as(kl)  # (B, H, L)
    return (kl * m).sum() / m.sum().clamp_min(1.0)


def grouped_attention_kl(
    student: torch.Tensor,
    teacher: torch.Tensor,
    query_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """L_AT for a student with fewer heads: KL(mean of a group of teacher heads' attention
    ‖ student head), averaged (docs/reference.md#mobilebert, adapted).

    ``student`` (B, A_S, L, L) and ``teacher`` (B, A_T, L, L) pre-softmax scores, A_S
    dividing A_T: student head h learns the average of the attention distributions of
    teacher heads h·g … h·g + g − 1 (g = A_T / A_S; a mixture of distributions is a
    distribution). With A_S = A_T it is :func:`attention_kl`.
    """
    hs, ht = student.shape[1], teacher.shape[1]
    if hs == ht:
        return attention_kl(student, teacher, from_logits=True, query_mask=query_mask)
    if ht % hs or student.shape[0] != teacher.shape[0] or student.shape[2:] != teacher.shape[2:]:
        raise NasError(
            f"attention shapes {tuple(student.shape)} (student) and {tuple(teacher.shape)} "
            f"(teacher) do not group: the student's heads must divide the teacher's"
        )
    g = ht // hs
    b, _, length, keys = teacher.shape
    log_t = F.log_softmax(teacher.to(student.dtype), dim=-1).view(b, hs, g, length, keys)
    log_t = torch.logsumexp(log_t, dim=2) - math.log(g)  # log of the group's mean
    log_s = F.log_softmax(student, dim=-1)
    kl = (log_t.exp() * (log_t - log_s)).sum(-1)  # (B, H_S, L)
    if query_mask is None:
        return kl.mean()
    m = query_mask.to(kl.dtype)[:, None, :].expand_as(kl)
    return (kl * m).sum() / m.sum().clamp_min(1.0)


# ------------------------------------------------------------------------- AdaBERT


def probe_layer_map(num_student: int, num_probes: int) -> list[int]:
    """Teacher probe j = ⌈i·J/K⌉ for student layer i = 1…K (docs/reference.md#adabert).

    Probes are numbered 0…J with 0 the embedding probe, so the result lies in 1…J.
    """
    if num_student < 1 or num_probes < 1:
        raise NasError(f"need K >= 1 and J >= 1, got K={num_student}, J={num_probes}")
    return [math.ceil(i * num_probes / num_student) for i in range(1, num_student + 1)]


def attentive_layer_weights(
    probe_logits: torch.Tensor, labels: torch.Tensor, layers: Sequence[int] | None = None
) -> torch.Tensor:
    """Per-example weights over layers: softmax of the probes' log-likelihood of the label.

    ``probe_logits`` (P, B, C): the cached logits of the P = J+1 teacher probes;
    ``labels`` (B,). ``layers`` picks which probes compete (e.g. the ⌈i·J/K⌉ of each
    student layer; all when ``None``). Returns (B, len(layers)):
    w_{i,m} = exp(log P_{j_i}(y_m | x_m)) / Σ_{i'} exp(log P_{j_i'}(y_m | x_m)),
    AdaBERT's "attentive hierarchical transfer": layers whose probe already predicts the
    example well teach it more (docs/reference.md#adabert).
    """
    idx = list(range(probe_logits.shape[0])) if layers is None else list(layers)
    logp = F.log_softmax(probe_logits[idx].float(), dim=-1)  # (K, B, C)
    ll = logp.gather(-1, labels.view(1, -1, 1).expand(len(idx), -1, 1)).squeeze(-1)  # (K, B)
    return F.softmax(ll, dim=0).transpose(0, 1)  # (B, K)


def probe_distillation_loss(
    student_layer_logits: Sequence[torch.Tensor] | torch.Tensor,
    probe_logits: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
) -> torch.Tensor:
    """AdaBERT's task-oriented KD (docs/reference.md#adabert): Σ_i w_{i,m}·CE(P_{j_i}^T, P_i^S),
    batch mean.

    ``student_layer_logits``: K tensors (B, C), one classifier output per student layer
    (or one (K, B, C) tensor); ``probe_logits`` (J+1, B, C) with probe 0 on the embedding;
    ``labels`` (B,). Student layer i learns from probe j_i = ⌈i·J/K⌉
    (:func:`probe_layer_map`) with the attentive per-example weights of
    :func:`attentive_layer_weights` over the K mapped probes (weights are constants:
    they come from the frozen teacher).
    """
    s = (
        torch.stack(list(student_layer_logits))
        if not isinstance(student_layer_logits, torch.Tensor)
        else student_layer_logits
    )  # (K, B, C)
    probe_logits = probe_logits.detach()  # the teacher is frozen: no gradient to it
    num_student, num_probes = s.shape[0], probe_logits.shape[0] - 1
    mapped = probe_layer_map(num_student, num_probes)
    weights = attentive_layer_weights(probe_logits, labels, mapped).to(s.dtype)  # (B, K)
    t = probe_logits[mapped].to(s.dtype)  # (K, B, C)
    target = F.softmax(t / temperature, dim=-1)
    ce = -(target * F.log_softmax(s / temperature, dim=-1)).sum(-1)  # (K, B)
    return (weights.transpose(0, 1) * ce).sum(0).mean()
