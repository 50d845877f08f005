"""What a search stage of ``method: search`` hands its searcher: the study objective
(the space and the evaluator that scores each trial, in the first process and in every
worker), and the one-shot searcher's supernet trainer and keywords."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from nas.device import table_rows
from nas.distill.losses import kd_loss
from recipes.search_config import (
    Distillation,
    OneShot,
    SearchConfig,
    accepted_keywords,
    one_shot_settings,
)
from recipes.search_context import SearchContext


def study_objective(ctx: SearchContext, searcher: Any) -> tuple[Any, Any]:
    """The study's space and evaluator: the configured evaluator on the held-out part,
    with the cost objectives the file asks for."""
    from searchers.loop import study_evaluator

    cfg = ctx.cfg
    inner = ctx.evaluator(cfg.evaluator.name, cfg.evaluator.settings, data=ctx.search_train,
                          val_batches=list(ctx.batches(ctx.search_val, ctx.eval_batch_size)),
                          test=False, workdir=ctx.run.path / "trial_weights", seed=cfg.seed,
                          stage="trials")
    return ctx.space, study_evaluator(inner, ctx.space, cfg.study_settings(), searcher,
                                      seq_len=ctx.max_seq_len,
                                      latency_fn=ctx.study_latency_fn())



def supernet_trainer(ctx: SearchContext, supernet: Any, s: OneShot) -> Any:
    """The recipe's side of the one-shot search: KD on the training part, architecture
    steps on the held-out part, checkpoints and α logs in the run folder."""
    from searchers.supernet_training import KDSupernetTrainer

    settings = Distillation(batch_size=s.batch_size, temperature=ctx.cfg.retrain.temperature,
                            alpha=ctx.cfg.retrain.alpha)
    parts = ctx.distillation(ctx.search_train, settings, "search")
    val_logits = ctx.teacher_logits(ctx.search_val)
    train_logits = ctx.teacher_logits(ctx.search_train)

    def task_loss(out: Any, batch: Mapping[str, Any]) -> torch.Tensor:
        logits = val_logits if batch.get("split") == "val" else train_logits
        return kd_loss(out.logits, table_rows(logits, batch["index"], out.logits),
                       batch["labels"], settings.temperature, settings.alpha)

    def val_batches(epoch: int) -> list[Any]:
        from nas.seeding import stage_seed

        return list(ctx.batches(ctx.search_val, s.batch_size, shuffle=True,
                                seed=stage_seed(ctx.seed, f"search-val-order:{epoch}")))

    def on_epoch(epoch: int, info: Mapping[str, Any]) -> None:
        ctx.run.log("search_epoch", epoch=epoch + 1, **info)

    return KDSupernetTrainer(supernet, epochs=s.epochs, steps_per_epoch=parts["steps_per_epoch"],
                             train_batches=parts["train_batches"], val_batches=val_batches,
                             task_loss=task_loss, checkpoint=ctx.run.checkpoint_path("search"),
                             progress=ctx.progress, on_epoch=on_epoch)


def one_shot_options(cls: Any, seed: int, cfg: SearchConfig, space: Any) -> dict[str, Any]:
    """A one-shot searcher's keywords from the file's ``one_shot:`` section, each given
    only if its class takes it (a plug-in's one-shot searcher gets what it asks for;
    ``searcher: {name, settings}`` overrides them):

    * ``differentiable``: ``derive="argmax"`` (every relaxed choice takes its most probable
      value), β, the weight and architecture optimisers, τ's staircase;
    * ``sampled-supernet`` (EfficientBERT's stage 3): every choice kind of the space
      sampled under ``constraints.max_params``, ``one_shot.candidates`` candidates scored
      with inherited weights, the same weight optimiser as the differentiable search."""
    from searchers.differentiable import weight_settings

    s = cfg.one_shot
    pool = {"seed": seed, **one_shot_settings(s),
            "kinds": tuple(sorted({c.kind for c in space.choices()})),
            "max_params": cfg.constraints.max_params, "seq_len": cfg.data.max_seq_len,
            "settings": weight_settings(epochs=s.epochs, lr=s.lr, lr_min=s.lr_min,
                                        checkpoint_every=s.checkpoint_every)}
    accepts = accepted_keywords(cls.__init__)
    return {k: v for k, v in pool.items() if k in accepts or "**" in accepts}


__all__ = ["one_shot_options", "study_objective", "supernet_trainer"]
