"""Distillation losses against values worked out by hand (docs/reference.md#adabert, #mobilebert,
#tinybert).

Each expected number below is derived in the comment next to it from the paper's
formula, not from the implementation, so a change of formula or reduction fails here.
"""

from __future__ import annotations

import math

import pytest
import torch

from nas.distill import losses as L
from nas.errors import NasError

LN2, LN3 = math.log(2.0), math.log(3.0)


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=torch.float64)


# -------------------------------------------------------------------------- TinyBERT


def test_fit_mse_through_a_fit_map() -> None:
    fit = L.FitMap(2, 3)
    with torch.no_grad():
        fit.proj.weight.copy_(t([[1, 0], [0, 1], [1, 1]]))
        fit.proj.bias.copy_(t([0, 0, 1]))
    fit.double()
    # fit([1, 2]) = [1, 2, 1+2+1] = [1, 2, 4]; minus teacher [1, 1, 1] = [0, 1, 3];
    # MSE = (0 + 1 + 9) / 3 = 10/3.
    loss = L.fit_mse(t([[[1, 2]]]), t([[[1, 1, 1]]]), fit)
    assert loss.item() == pytest.approx(10 / 3)
    loss.backward()
    assert fit.proj.weight.grad is not None  # the fit map is learnable


def test_fit_map_is_identity_for_equal_widths_and_shape_check() -> None:
    assert not list(L.FitMap(4, 4).parameters())
    # (1 - 0)^2 and (3 - 1)^2 → (1 + 4) / 2
    assert L.fit_mse(t([[[1, 3]]]), t([[[0, 1]]])).item() == pytest.approx(2.5)
    with pytest.raises(NasError, match="FitMap"):
        L.fit_mse(t([[[1, 3]]]), t([[[0, 1, 2]]]))


def test_attention_mse_zeroes_masked_scores_in_both() -> None:
    # one head, 2x2 scores; the masked key carries -10000 in the student and the HF-style
    # dtype minimum in the teacher: both become 0, so that entry contributes 0.
    s = t([[[[1.0, -10000.0], [2.0, 3.0]]]])
    tt = t([[[[0.5, torch.finfo(torch.float64).min], [1.0, 1.0]]]])
    # diffs 0.5, 0, 1, 2 → squares 0.25, 0, 1, 4 → mean 5.25 / 4
    assert L.attention_mse(s, tt).item() == pytest.approx(1.3125)
    # a second head with MSE 0 halves the mean over heads
    s2 = torch.cat([s, tt.clamp_min(-10000)], dim=1)
    t2 = torch.cat([tt, tt], dim=1)
    assert L.attention_mse(s2, t2).item() == pytest.approx(1.3125 / 2)


def test_kd_loss_by_hand() -> None:
    # student uniform over 2 classes, teacher softmax([2·ln3, 0] / T=2) = (3/4, 1/4):
    # CE = ln 2, KL = 3/4·ln(3/2) + 1/4·ln(1/2) = 3/4·ln 3 − ln 2;
    # 0.5·ln 2 + 0.5·4·(3/4·ln 3 − ln 2) = 1.5·ln(3/2)
    student = torch.zeros(1, 2, dtype=torch.float64)
    teacher = torch.tensor([[2 * math.log(3.0), 0.0]], dtype=torch.float64)
    labels = torch.tensor([0])
    assert L.kd_loss(student, teacher, labels).item() == pytest.approx(1.5 * math.log(1.5))
    assert L.kd_loss(student, teacher, labels, alpha=0.0).item() == pytest.approx(math.log(2.0))
    with pytest.raises(ValueError, match="alpha in"):
        L.kd_loss(student, teacher, labels, alpha=2.0)


def test_soft_cross_entropy_with_temperature_and_reductions() -> None:
    # ex. 1, T=2: teacher [0, 2 ln3]/2 → softmax [1/4, 3/4]; student [0,0] → log 1/2 each:
    # CE = ln 2.  ex. 2: teacher [0,0]/2 → [1/2, 1/2]; student [2 ln3, 0]/2 = [ln3, 0] →
    # log-probs [ln 3/4, ln 1/4]: CE = -(ln(3/4) + ln(1/4)) / 2.
    student = t([[0.0, 0.0], [2 * LN3, 0.0]])
    teacher = t([[0.0, 2 * LN3], [0.0, 0.0]])
    ce1 = LN2
    ce2 = -(math.log(0.75) + math.log(0.25)) / 2
    got = L.soft_cross_entropy(student, teacher, temperature=2.0)
    assert got.item() == pytest.approx((ce1 + ce2) / 2)
    # TinyBERT code's reduction: mean over all B*C elements = batchmean / C
    got_code = L.soft_cross_entropy(student, teacher, temperature=2.0, reduction="mean")
    assert got_code.item() == pytest.approx((ce1 + ce2) / 4)


@pytest.mark.parametrize(
    ("m", "n", "strategy", "expected"),
    [
        (4, 12, "uniform", [3, 6, 9, 12]),
        (3, 8, "uniform", [2, 5, 8]),  # ⌊8/3⌋, ⌊16/3⌋, 8
        (4, 12, "top", [9, 10, 11, 12]),
        (4, 12, "bottom", [1, 2, 3, 4]),
        (6, 6, "uniform", [1, 2, 3, 4, 5, 6]),
    ],
)
def test_layer_mappings(m: int, n: int, strategy: str, expected: list[int]) -> None:
    assert L.layer_map(m, n, strategy) == expected


def test_layer_map_rejects_bad_input() -> None:
    with pytest.raises(NasError):
        L.layer_map(8, 4)
    with pytest.raises(NasError, match="uniform"):
        L.layer_map(2, 4, "middle")


# ------------------------------------------------------------------------ MobileBERT

# two tokens, D = 2: student [[1,3],[2,6]], teacher [[5,1],[0,0]]
S_FM = t([[[1.0, 3.0], [2.0, 6.0]]])
T_FM = t([[[5.0, 1.0], [0.0, 0.0]]])


def test_feature_map_loss_uses_parameter_free_layernorm() -> None:
    # LN(student): token1 mean 2 std 1 → [-1, 1]; token2 mean 4 std 2 → [-1, 1]
    # LN(teacher): token1 mean 3 std 2 → [1, -1]; token2 constant → [0, 0]
    # diffs (-2, 2), (-1, 1) → squares 4, 4, 1, 1 → mean 2.5
    assert L.feature_map_loss(S_FM, T_FM).item() == pytest.approx(2.5, rel=1e-6)


def test_mean_and_variance_terms() -> None:
    # means S 2, 4; T 3, 0 → squared diffs 1, 16 → 8.5
    assert L.mean_loss(S_FM, T_FM).item() == pytest.approx(8.5)
    # population variances S 1, 4; T 4, 0 → |diffs| 3, 4 → 3.5
    assert L.variance_loss(S_FM, T_FM).item() == pytest.approx(3.5)


def test_attention_kl_per_head_from_scores_and_probabilities() -> None:
    # teacher [1/2, 1/2], student [1/4, 3/4]: KL = ½ ln(½/¼) + ½ ln(½/¾) = ½ ln(4/3)
    kl = 0.5 * math.log(4 / 3)
    probs_s = t([[[[0.25, 0.75]]]])
    probs_t = t([[[[0.5, 0.5]]]])
    assert L.attention_kl(probs_s, probs_t, from_logits=False).item() == pytest.approx(kl)
    # same from scores, with a masked third key (-10000: probability ~0 in both)
    scores_s = t([[[[0.0, LN3, -10000.0]]]])
    scores_t = t([[[[0.0, 0.0, -10000.0]]]])
    assert L.attention_kl(scores_s, scores_t).item() == pytest.approx(kl)
    # two heads, the second identical in both (KL 0): mean over heads halves it
    s2 = torch.cat([scores_s, scores_t], dim=1)
    t2 = torch.cat([scores_t, scores_t], dim=1)
    assert L.attention_kl(s2, t2).item() == pytest.approx(kl / 2)


def test_attention_kl_query_mask_skips_padded_queries() -> None:
    # query 1 has KL ½ln(4/3); query 2 (padding) has a large KL that must be ignored
    s = t([[[[0.0, LN3], [0.0, 10.0]]]])
    tt = t([[[[0.0, 0.0], [10.0, 0.0]]]])
    got = L.attention_kl(s, tt, query_mask=t([[1.0, 0.0]]))
    assert got.item() == pytest.approx(0.5 * math.log(4 / 3))


# --------------------------------------------------------------------------- AdaBERT


@pytest.mark.parametrize(
    ("k", "j", "expected"),
    [
        (3, 6, [2, 4, 6]),
        (4, 6, [2, 3, 5, 6]),  # ⌈1.5⌉, ⌈3⌉, ⌈4.5⌉, ⌈6⌉
        (8, 6, [1, 2, 3, 3, 4, 5, 6, 6]),
        (1, 6, [6]),
    ],
)
def test_probe_layer_map(k: int, j: int, expected: list[int]) -> None:
    assert L.probe_layer_map(k, j) == expected


# probe 0 (embedding) is never used for K = J = 2; probe 1 → [3/4, 1/4], probe 2 → [1/4, 3/4]
PROBES = t([[[5.0, -5.0]], [[LN3, 0.0]], [[0.0, LN3]]])  # (J+1=3, B=1, C=2)
LABEL0 = torch.tensor([0])


def test_attentive_layer_weights_softmax_of_label_likelihood() -> None:
    # log P(y=0): probe 1 ln(3/4), probe 2 ln(1/4) → softmax = [3/4, 1/4] / (3/4 + 1/4)
    w = L.attentive_layer_weights(PROBES, LABEL0, layers=[1, 2])
    assert w.shape == (1, 2)
    assert w[0].tolist() == pytest.approx([0.75, 0.25])


def test_probe_distillation_loss_by_hand() -> None:
    # K = 2 student layers, J = 2: layer 1 ← probe 1, layer 2 ← probe 2, weights 3/4, 1/4.
    # layer 1 logits [0,0]: CE([3/4,1/4], [1/2,1/2]) = ln 2
    # layer 2 logits [0, ln3] → [1/4, 3/4]: CE = -(¼ ln ¼ + ¾ ln ¾)
    student = [t([[0.0, 0.0]]), t([[0.0, LN3]])]
    ce2 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    got = L.probe_distillation_loss(student, PROBES, LABEL0)
    assert got.item() == pytest.approx(0.75 * LN2 + 0.25 * ce2)


def test_probe_distillation_gradient_reaches_student_only() -> None:
    student = torch.zeros(2, 1, 2, dtype=torch.float64, requires_grad=True)
    probes = PROBES.clone().requires_grad_(True)
    L.probe_distillation_loss(student, probes, LABEL0).backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert probes.grad is None  # the teacher's probes are constants
