"""Add a one-shot searcher: single-path one-shot search (Guo et al., 2020), in a few dozen
lines.

A one-shot searcher trains one weight-sharing supernet through the run's trainer
(``trainer.fit(procedure)``: the shared training loop with the procedure's hooks), then
derives one candidate. Here every training step trains one uniformly drawn child's path
of the supernet; afterwards the drawn candidate of lowest validation loss, with the
trained shared weights, is the result. Each step's child is a pure function of the seed
and the step, so a resumed search trains what the uninterrupted one would.

Run: ``python examples/custom_one_shot.py`` (a few steps on the small AdaBERT space with
random tokens), or in a search: ``nas run examples/tour.yaml --plugin
examples/custom_one_shot.py --searcher single-path --run-dir runs/tour-single-path``.
"""

from __future__ import annotations

import torch

from nas.seeding import stage_seed
from nas.train import TrainSettings
from searchers.base import SEARCHERS, Candidate, OneShotSearcher


class UniformPaths:
    """The training loop's hooks: each step trains the path of one uniformly drawn child."""

    def __init__(self, space, task_loss, settings, seed):
        self.space, self.task_loss, self.settings, self.seed = space, task_loss, settings, seed

    def before_step(self, step, batch):
        self.arch = self.space.sample(stage_seed(self.seed, f"path:{step}"))
        return {}

    def weight_loss(self, model, batch):
        return self.task_loss(model(batch["train"], arch=self.arch), batch["train"])

    def state_dict(self):
        return {}  # nothing to keep: step n's path depends on the seed and n only

    def load_state_dict(self, state):
        pass


@SEARCHERS.register("single-path")
class SinglePath(OneShotSearcher):
    """Single-path one-shot search (Guo et al., 2020): uniform paths, then the best of
    ``candidates`` drawn children by validation loss on the shared weights."""

    name = "single-path"

    def __init__(self, seed: int = 0, candidates: int = 8, lr: float = 1e-3):
        super().__init__(seed)
        self.candidates, self.lr = candidates, lr

    def search(self, space, trainer):
        settings = TrainSettings(epochs=trainer.epochs, lr=self.lr)
        trainer.fit(UniformPaths(space, trainer.task_loss, settings, self.seed))
        trainer.supernet.eval()
        val = list(trainer.val_batches(0))

        def loss(arch):
            with torch.no_grad():
                return sum(float(trainer.task_loss(trainer.supernet(b, arch=arch), b))
                           for b in val)

        drawn = [space.sample(stage_seed(self.seed, f"candidate:{i}"))
                 for i in range(self.candidates)]
        best = min(drawn, key=loss)  # the first drawn on a tie
        self._best = Candidate(0, best, {"val_loss": loss(best)})
        return self._best


if __name__ == "__main__":
    # The contract tests' synthetic trainer: random tokens and labels, two short epochs.
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from nas.space import get_space, small_config
    from tests.test_searcher_contract import SyntheticTrainer

    space = get_space("adabert", **small_config("adabert"))
    candidate = SEARCHERS.get("single-path")(seed=0).search(space, SyntheticTrainer(space))
    print("derived:", candidate.arch.id, f"val loss {candidate.params['val_loss']:.4f}")
