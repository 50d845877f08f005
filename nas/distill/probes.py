"""AdaBERT probe classifiers: one softmax classifier per teacher layer (docs/reference.md#adabert).

AdaBERT's task-oriented distillation freezes the fine-tuned teacher and trains one
linear softmax classifier ("probe") on the pooled features of each layer, the
embedding output included (J+1 probes for J layers). Their logits are then fixed
targets for the student's layers (:func:`nas.distill.losses.probe_distillation_loss`),
so they are computed once and cached (:mod:`nas.distill.cache`).

Probes are trained here as multinomial logistic regression with L-BFGS on the
standardised features: the problem is convex, so a deterministic full-batch solver is
both faster and more reproducible than SGD on a CPU.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from nas.errors import NasError


@dataclass
class ProbeSet:
    """P linear probes: ``weight`` (P, D, C), ``bias`` (P, C), on features standardised
    with ``mean``/``std`` (P, D)."""

    weight: torch.Tensor
    bias: torch.Tensor
    mean: torch.Tensor
    std: torch.Tensor

    @property
    def num_probes(self) -> int:
        return int(self.weight.shape[0])

    def logits(self, features: torch.Tensor | np.ndarray, batch_size: int = 8192) -> np.ndarray:
        """Probe logits (P, N, C) float32 for pooled features (P, N, D)."""
        out = []
        for i in range(0, features.shape[1], batch_size):
            x = torch.from_numpy(np.array(features[:, i : i + batch_size], dtype=np.float32))
            x = (x - self.mean[:, None]) / self.std[:, None]  # (P, n, D)
            out.append((torch.bmm(x, self.weight) + self.bias[:, None]).numpy())  # (P, n, C)
        return np.concatenate(out, axis=1).astype(np.float32)

    def save(self, path: str | os.PathLike[str]) -> None:
        from nas.checkpoint import save_safetensors

        save_safetensors({"weight": self.weight.contiguous(), "bias": self.bias.contiguous(),
                          "mean": self.mean.contiguous(), "std": self.std.contiguous()}, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ProbeSet:
        from nas.cache import load_tensors

        t = load_tensors(Path(path))
        return cls(t["weight"], t["bias"], t["mean"], t["std"])


def pool_hidden_states(
    hidden_states: torch.Tensor | tuple[torch.Tensor, ...],
    attention_mask: torch.Tensor,
    pooling: str = "mean",
) -> torch.Tensor:
    """Pool each layer's states (P tensors (B, L, D)) into (P, B, D).

    ``"cls"`` takes the first token (the [CLS] features a classifier head reads);
    ``"mean"`` averages over real tokens. Mean is the default because the embedding
    layer's [CLS] vector is the same for every input, so its probe could learn nothing.
    """
    h = torch.stack(tuple(hidden_states)) if not isinstance(hidden_states, torch.Tensor) \
        else hidden_states  # (P, B, L, D)
    if pooling == "cls":
        return h[:, :, 0]
    if pooling == "mean":
        m = attention_mask.to(h.dtype)[None, :, :, None]  # (1, B, L, 1)
        return (h * m).sum(2) / m.sum(2).clamp_min(1.0)
    raise NasError(f"pooling must be 'cls' or 'mean', got {pooling!r}")


def train_probes(
    features: torch.Tensor | np.ndarray,
    labels: torch.Tensor | np.ndarray,
    num_classes: int,
    l2: float = 1e-3,
    max_iter: int = 100,
    seed: int = 0,
) -> ProbeSet:
    """Fit one softmax classifier per layer on frozen features (docs/reference.md#adabert).

    ``features`` (P, N, D) pooled teacher features of the train split, ``labels`` (N,).
    Minimises mean cross-entropy + ``l2``·‖W‖² per probe; the P problems are
    independent, so they are solved jointly (their losses add up) by one L-BFGS run.
    """
    x = torch.from_numpy(np.array(features, dtype=np.float32))  # (P, N, D), a copy
    y = torch.as_tensor(np.asarray(labels), dtype=torch.long)
    if x.ndim != 3 or x.shape[1] != y.shape[0]:
        raise NasError(
            f"features must be (P, N, D) with N = {y.shape[0]} labels, got {tuple(x.shape)}"
        )
    if int(y.max()) >= num_classes or int(y.min()) < 0:
        raise NasError(f"labels must lie in 0..{num_classes - 1}")
    mean = x.mean(1)  # (P, D)
    std = x.std(1).clamp_min(1e-6)
    x = (x - mean[:, None]) / std[:, None]
    p, _, d = x.shape
    gen = torch.Generator().manual_seed(seed)
    weight = (0.01 * torch.randn(p, d, num_classes, generator=gen)).requires_grad_(True)
    bias = torch.zeros(p, num_classes, requires_grad=True)
    opt = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=max_iter,
                            line_search_fn="strong_wolfe")
    target = y.expand(p, -1).reshape(-1)

    def closure() -> torch.Tensor:
        opt.zero_grad()
        logits = torch.bmm(x, weight) + bias[:, None]  # (P, N, C)
        # sum over probes of each probe's mean CE: the P problems stay independent
        loss = F.cross_entropy(logits.reshape(-1, num_classes), target) * p
        loss = loss + l2 * weight.pow(2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return ProbeSet(weight.detach(), bias.detach(), mean, std)


def probe_accuracy(probe_logits: np.ndarray, labels: np.ndarray | Sequence[int]) -> list[float]:
    """Accuracy of each probe (P,) from its logits (P, N, C): a sanity read-out."""
    y = np.asarray(labels)
    return [float((probe_logits[i].argmax(-1) == y).mean()) for i in range(probe_logits.shape[0])]
