"""Sampled-supernet search: EfficientBERT's stage 3 (docs/reference.md#efficientbert), a single-path
one-shot search.

One weight-sharing supernet is trained with a sub-network sampled uniformly at every
step (the choices of ``kinds``, EfficientBERT's stack number N and ratio r, drawn until
the architecture fits the parameter budget; the other choices held at the incumbent's
values); then candidates drawn the same way are ranked by an evaluator of the trained
supernet, by default the ``inherited`` one (:mod:`evaluators.inherited`: their inherited
weights on the validation batches, no training of their own). The best candidate is the
search's result; the table of every candidate's score travels in its ``params``.

* :class:`SampledSupernetSearch` — the step hooks for the shared training loop
  (:func:`searchers.base.run_steps`): :meth:`~SampledSupernetSearch.before_step` draws
  the step's sub-network, :meth:`~SampledSupernetSearch.weight_loss` runs the supernet at
  it and applies the trainer's task loss. The sampler is a ``torch.Generator`` whose
  state travels in the loop's checkpoint, so a resumed search samples what an
  uninterrupted one would.
* :class:`SampledSupernetSearcher` — the same behind the one-shot searcher contract
  (registered as ``sampled-supernet``).

Seeds: ``stage_seed(seed, stage)`` draws the sub-networks of the training steps and
``stage_seed(seed, stage + "-candidates")`` the candidates (:mod:`nas.seeding`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from evaluators.base import Evaluator
from nas.architecture import Architecture
from nas.seeding import stage_seed
from nas.space import SearchSpace
from nas.train import TrainSettings
from searchers.base import SEARCHERS, Candidate, OneShotSearcher, SearcherError, SupernetTrainer

#: The choice kinds sampled by default: EfficientBERT's N (depth) and r (width).
SHAPE_KINDS = ("depth", "width")


class SampledSupernetSearch:
    """The hooks of one sampled-supernet training (:class:`searchers.base.SearchProcedure`).

    ``fixed``: the values of the choices not sampled; ``max_params``: the budget every
    sampled sub-network fits (counted at ``seq_len`` tokens); ``task_loss(output,
    batch)``: the trainer's loss on the supernet's output at the sampled sub-network,
    recording ``record`` (the states a distillation loss compares).
    """

    def __init__(self, space: SearchSpace, fixed: Mapping[str, Any], settings: TrainSettings,
                 task_loss: Callable[[Any, Any], Any], *, seed: int,
                 kinds: tuple[str, ...] = SHAPE_KINDS, max_params: float | None = None,
                 seq_len: int = 128, record: tuple[str, ...] = ()) -> None:
        self.space, self.fixed, self.settings = space, dict(fixed), settings
        self.task_loss, self.kinds, self.record = task_loss, kinds, record
        self.max_params, self.seq_len = max_params, seq_len
        self.generator = torch.Generator().manual_seed(seed)
        self.arch: Architecture | None = None

    def sample(self) -> Architecture:
        """The next sub-network: a numpy generator seeded from the (checkpointed) torch
        one draws it, so the draw is exact on resume."""
        from nas.distill.warmup import sample_under_budget

        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=self.generator)))
        return sample_under_budget(self.space, self.fixed, rng, kinds=self.kinds,
                                   max_params=self.max_params, seq_len=self.seq_len)

    def before_step(self, step: int, batch: Mapping[str, Any]) -> dict[str, float]:
        self.arch = self.sample()
        return {}

    def weight_loss(self, model: Any, batch: Mapping[str, Any]) -> Any:
        """The task loss of the step's sub-network on ``batch["train"]``."""
        out = model(batch["train"], arch=self.arch, record=self.record)
        return self.task_loss(out, batch["train"])

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.generator.set_state(state["generator"])


@dataclass
class SampledSupernetSettings:
    """``sampled-supernet``'s settings: how many candidates the trained supernet scores
    (method search reads it from ``one_shot.candidates``, EfficientBERT from
    ``stage3.candidates``)."""

    candidates: int = 32

    def __post_init__(self) -> None:
        from nas.config import check_fields

        check_fields([("candidates", self.candidates >= 1, "an integer >= 1")], self)


@SEARCHERS.register("sampled-supernet")
class SampledSupernetSearcher(OneShotSearcher):
    """Sampled-supernet search (EfficientBERT's stage 3) as a one-shot searcher.

    :meth:`search` trains ``trainer.supernet`` through ``trainer.fit`` with a
    :class:`SampledSupernetSearch` (``settings``: the weight optimiser, default AdamW lr
    1e-4, linear schedule with 10% warm-up, gradients clipped at norm 1, for
    ``trainer.epochs``), puts the supernet in eval mode, then scores ``candidates``
    distinct architectures: the ``incumbent`` first when it fits ``max_params``, then
    sub-networks drawn as in training (at most 20 draws per candidate). ``incumbent``
    (default: the space's default) also gives the values of the choices outside
    ``kinds``. ``evaluator``: scores a candidate on the trained supernet (default: the
    ``inherited`` evaluator on ``trainer.val_batches(0)``, accuracy). The best complete
    score wins, the earliest on a tie (the incumbent first).
    """

    def __init__(self, seed: int = 0, *, stage: str = "sampled-supernet", candidates: int = 32,
                 kinds: tuple[str, ...] = SHAPE_KINDS, incumbent: Mapping[str, Any] | None = None,
                 max_params: float | None = None, seq_len: int = 128,
                 settings: TrainSettings | None = None, record: tuple[str, ...] = (),
                 evaluator: Evaluator | None = None) -> None:
        super().__init__(seed)
        if candidates < 1:
            raise SearcherError(f"candidates must be an integer >= 1, got {candidates}")
        self.stage, self.candidates, self.kinds = stage, candidates, tuple(kinds)
        self.incumbent, self.max_params, self.seq_len = incumbent, max_params, seq_len
        self.settings, self.record, self.evaluator = settings, tuple(record), evaluator

    @classmethod
    def settings_type(cls) -> type:
        return SampledSupernetSettings

    def search(self, space: SearchSpace, trainer: SupernetTrainer) -> Candidate:
        from nas.cost import count_costs
        from nas.distill.warmup import sample_under_budget

        incumbent = space.validate(self.incumbent or space.default())
        fixed = {c.name: incumbent[c.name] for c in space.choices() if c.kind not in self.kinds}
        settings = replace(self.settings or TrainSettings(
            lr=1e-4, schedule="linear", warmup_fraction=0.1, grad_clip=1.0),
            epochs=trainer.epochs)
        trainer.fit(SampledSupernetSearch(
            space, fixed, settings, trainer.task_loss, seed=stage_seed(self.seed, self.stage),
            kinds=self.kinds, max_params=self.max_params, seq_len=self.seq_len,
            record=self.record))
        trainer.supernet.eval()
        rng = np.random.default_rng(stage_seed(self.seed, f"{self.stage}-candidates"))
        fits = (self.max_params is None
                or count_costs(space, incumbent, self.seq_len).params <= self.max_params)
        archs = {incumbent.id: incumbent} if fits else {}
        for _ in range(20 * self.candidates):
            if len(archs) >= self.candidates:
                break
            arch = sample_under_budget(space, fixed, rng, kinds=self.kinds,
                                       max_params=self.max_params, seq_len=self.seq_len)
            archs.setdefault(arch.id, arch)
        evaluator = self.evaluator or self._inherited(space, trainer)
        scored = [(arch, evaluator(arch)) for arch in archs.values()]
        done = [(arch, r) for arch, r in scored if r.ok]
        if not done:
            raise SearcherError(f"none of the {len(scored)} candidates was scored (first: "
                                f"{scored[0][1].reason}); check the evaluator")
        best, result = max(done, key=lambda ar: ar[1].values[0])  # the first on a tie
        rows = [{"arch_id": arch.id, "value": r.values[0] if r.ok else None,
                 "params": r.costs.get("params"),
                 **({} if r.ok else {"status": str(r.status), "reason": r.reason})}
                for arch, r in scored]
        self._best = Candidate(0, best, {"value": result.values[0], "candidates": rows})
        return self._best

    def _inherited(self, space: SearchSpace, trainer: SupernetTrainer) -> Evaluator:
        from evaluators.inherited import InheritedEvaluator, InheritedTask

        return InheritedEvaluator(space, InheritedTask(
            supernet=trainer.supernet, val_batches=list(trainer.val_batches(0)),
            seq_len=self.seq_len))
