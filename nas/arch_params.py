"""Architecture parameters α and their relaxations (DARTS, GDAS; docs/reference.md#adabert,
#darts-and-gdas).

One logit vector per relaxed choice, initialised 1e-3·N(0, 1). ``softmax()`` gives
DARTS's mixture weights, ``gumbel(tau, hard=True)`` a hard one-hot sample whose
gradient is the soft sample's (straight-through), so that only the sampled op runs.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn
from torch.nn import functional as F

from nas.architecture import Architecture
from nas.choices import Categorical


class ArchParameters(nn.Module):
    """Logits α over the values of each relaxed choice."""

    def __init__(self, choices: Iterable[Categorical], init_scale: float = 1e-3,
                 generator: torch.Generator | None = None) -> None:
        super().__init__()
        self.choices = {c.name: c for c in choices}
        self.alpha = nn.ParameterDict({
            _key(name): nn.Parameter(init_scale * torch.randn(len(c), generator=generator))
            for name, c in self.choices.items()
        })

    def logits(self, name: str) -> torch.Tensor:
        return self.alpha[_key(name)]

    def softmax(self) -> dict[str, torch.Tensor]:
        return {n: F.softmax(self.logits(n), dim=-1) for n in self.choices}

    def gumbel(self, tau: float, hard: bool = True,
               generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Gumbel-softmax over log-probabilities with temperature ``tau``
        (docs/reference.md#adabert)."""
        out = {}
        for n in self.choices:
            log_p = F.log_softmax(self.logits(n), dim=-1)
            # drawn on the CPU from the seeded (checkpointed) generator, whatever the device:
            # the same noise on every device; then beside the logits (nas.device)
            u = torch.rand(log_p.shape, generator=generator).clamp_(1e-10, 1 - 1e-10)
            u = u.to(log_p.device)
            soft = F.softmax((log_p - torch.log(-torch.log(u))) / tau, dim=-1)
            if hard:
                index = int(torch.argmax(soft.detach()))
                one_hot = torch.zeros_like(soft)
                one_hot[index] = 1.0
                soft = one_hot - soft.detach() + soft  # straight-through
            out[n] = soft
        return out

    def argmax(self) -> Architecture:
        return Architecture({n: c.values[int(torch.argmax(self.logits(n)))]
                             for n, c in self.choices.items()})

    def entropy(self) -> float:
        """Mean entropy (nats) of the choice distributions: how undecided the search is."""
        total = 0.0
        for n in self.choices:
            p = F.softmax(self.logits(n).detach(), dim=-1)
            total += float(-(p * torch.log(p.clamp_min(1e-12))).sum())
        return total / max(len(self.choices), 1)


def _key(name: str) -> str:
    return name.replace(".", ":")
