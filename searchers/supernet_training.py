"""The recipe's side of a one-shot search, for any space: a generic
:class:`searchers.base.SupernetTrainer`.

A one-shot searcher (``differentiable``) builds its relaxation over ``trainer.supernet``
and hands its hooks to ``trainer.fit``; the trainer supplies the batches, the task loss
and the training loop's checkpoint, logging and progress bar. AdaBERT's trainer
(:class:`recipes.adabert.AdaBertSupernetTrainer`) is one such trainer with its probe
loss and run folder; :class:`KDSupernetTrainer` takes the same pieces as arguments, so
a generic recipe (``method: search``) or a script searches any space with, typically,
:func:`nas.distill.losses.kd_loss` against cached teacher logits as the task loss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from searchers.base import Batch, SearcherError, SearchProcedure, run_steps

if TYPE_CHECKING:
    from nas.network import GraphNet

TrainBatches = Callable[[int, int], Iterable[Batch]]
ValBatches = Callable[[int], Sequence[Batch]]
TaskLoss = Callable[[Any, Batch], torch.Tensor]


class KDSupernetTrainer:
    """A :class:`~searchers.base.SupernetTrainer` built from its parts.

    supernet: the weight-sharing network (:func:`nas.builder.build_supernet`).
    epochs, steps_per_epoch: the search's length.
    train_batches(epoch, start_batch): the epoch's training batches from ``start_batch``
        on, in an order that depends on ``epoch`` only (so that a resumed search sees the
        same batches).
    val_batches(epoch): the epoch's validation batches for the architecture steps; each
        is handed to the search with ``"split": "val"`` added, so ``task_loss`` can tell
        them from training batches (e.g. to read the teacher's logits of the right split).
    task_loss(output, batch): the task part of the search's loss (e.g. :func:`nas.distill.
        losses.kd_loss` of ``output.logits`` against the batch's teacher logits).
    checkpoint: the loop's ``.safetensors`` checkpoint; an existing one is resumed (the
        weights, the search's α and optimiser, the Gumbel generator). ``None``: none.
    checkpoint_every (steps) is the searcher's (``DifferentiableSearcher(checkpoint_every=)``).
    on_epoch(epoch, means) and after_step(step, info): logging hooks; :attr:`search` is
        the running search procedure (its ``probabilities()``, ``derive()``) while ``fit``
        runs.
    """

    def __init__(self, supernet: GraphNet, *, epochs: int, steps_per_epoch: int,
                 train_batches: TrainBatches, val_batches: ValBatches, task_loss: TaskLoss,
                 checkpoint: str | Path | None = None, progress: bool = False,
                 on_epoch: Callable[[int, dict[str, float]], None] | None = None,
                 after_step: Callable[[int, dict[str, float]], None] | None = None,
                 desc: str = "search") -> None:
        if epochs < 1 or steps_per_epoch < 1:
            raise SearcherError(f"a supernet search needs epochs >= 1 and steps_per_epoch >= 1, "
                                f"got {epochs} and {steps_per_epoch}")
        self.supernet = supernet
        self.epochs, self.steps_per_epoch = epochs, steps_per_epoch
        self._train, self._val, self._loss = train_batches, val_batches, task_loss
        self.checkpoint = None if checkpoint is None else Path(checkpoint)
        self.progress, self.desc = progress, desc
        self.on_epoch, self.after_step = on_epoch, after_step
        self.search: SearchProcedure | None = None
        self.result: Any = None  # the loop's TrainResult after fit

    def task_loss(self, output: Any, batch: Batch) -> torch.Tensor:
        return self._loss(output, batch)

    def train_batches(self, epoch: int, start_batch: int = 0) -> Iterable[Batch]:
        return self._train(epoch, start_batch)

    def val_batches(self, epoch: int) -> list[Batch]:
        return [{**b, "split": "val"} for b in self._val(epoch)]

    def fit(self, search: SearchProcedure) -> None:
        """Train the supernet with ``search``'s hooks in the shared loop (:func:`searchers.
        base.run_steps`), checkpointing to and resuming from :attr:`checkpoint`."""
        self.search = search

        def on_epoch_end(epoch: int, means: dict[str, float]) -> Mapping[str, Any]:
            if self.on_epoch is not None:
                self.on_epoch(epoch, means)
            return {}

        # a hard Gumbel sample runs one op per choice: the others get no gradient
        self.result = run_steps(self, search, checkpoint=self.checkpoint,
                                after_step=self.after_step, on_epoch_end=on_epoch_end,
                                progress=self.progress, desc=self.desc,
                                find_unused_parameters=True)


__all__ = ["KDSupernetTrainer"]
