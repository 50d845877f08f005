"""AdaBERT (Chen et al., 2020; docs/reference.md#adabert): task-adaptive CNN students by
differentiable search, distilled from a fine-tuned BERT teacher.

The method's steps, in order (:meth:`AdaBert.run`); each is a call into shared parts:

1. **teacher** — the teacher fine-tuned on the task (:func:`nas.teacher.finetune_teacher`,
   cached by its settings);
2. **data and probes** — the training subset, the validation split carved from it for
   the architecture steps, and the teacher's per-layer probe logits (§3.2, cached);
3. **search** — a one-shot searcher (``differentiable``: hard Gumbel samples, loss
   (1−γ)·CE + γ·probe-KD + β·L_E) trains the supernet in the shared training loop and
   derives an architecture; or a multi-trial searcher on Optuna (``random``: the
   baseline; ``lanas``, ``tpe``, ``nsga2``, ``gp``) runs ``multi_trial.n_trials`` trials;
4. **retrain** — each candidate's child trained from scratch with the same distillation
   loss (evaluator ``distilled-retrain``), scored on ``dev`` and measured on the task's
   report split (``test`` when it has one: SST-2's sentences share no phrase with train);
5. **export** — the searched student as a standalone model.

Every stage starts from a seed derived from the run's seed and the stage's name
(:mod:`nas.seeding`), so a result does not depend on what ran before it in the process
(a cold or a warm teacher cache, a resume). Everything lands in a :class:`~nas.rundir.
RunDir`; a finished stage is never redone and ``--resume`` continues an unfinished one
from its checkpoint.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from evaluators.retrain import DistilledRetrainEvaluator, RetrainTask
from nas.architecture import Architecture
from nas.augment import AugmentSettings
from nas.config import ConfigError, check_fields
from nas.device import table_rows
from nas.distill.init import init_embeddings, teacher_embedding_init
from nas.errors import NasError
from nas.methods import RunOptions, register_method
from nas.rundir import RunDir
from nas.seeding import seed_stage, stage_seed
from nas.train import TrainSettings, loop_settings
from recipes.common import (
    MethodConfig,
    Recipe,
    TaskContext,
    mean_std,
    report_reference,
    run_study_stage,
)
from searchers.loop import StudySettings

log = logging.getLogger("nas.adabert")


# ---------------------------------------------------------------------------- config


@dataclass
class SearchSettings:
    """The search stage (docs/reference.md#adabert, #darts-and-gdas). The weights train with SGD
    (momentum 0.9, cosine from ``lr`` to ``lr_min``, clip 5); α with Adam (``arch_lr``,
    ``arch_weight_decay``)."""

    epochs: int = 1
    batch_size: int = 32
    gamma: float = 0.8  # weight of probe KD
    beta: float = 4.0  # weight of the efficiency loss
    kd_temperature: float = 1.0
    lr: float = 2e-2
    lr_min: float = 5e-4
    arch_lr: float = 3e-4
    arch_weight_decay: float = 1e-3
    # fraction of the steps that train only the shared weights (α frozen, ops sampled
    # uniformly) before α starts to move; 0 = the paper's schedule
    arch_warmup: float = 0.0
    tau_every: int = 100
    checkpoint_every: int = 50  # steps
    alpha_log_every: int = 50  # steps between α snapshots in log.jsonl
    # efficiency-loss scale: "normalised" (op costs 0..1, edges averaged) or "published"
    # (0.1 per op, edges summed, as the published code; searchers/differentiable.py)
    op_costs: str = "normalised"

    def __post_init__(self) -> None:
        check_fields([("epochs", self.epochs >= 1, "an integer >= 1"),
                      ("batch_size", self.batch_size >= 1, "an integer >= 1"),
                      ("gamma", 0.0 <= self.gamma <= 1.0, "in [0, 1]"),
                      ("beta", self.beta >= 0.0, "a number >= 0"),
                      ("kd_temperature", self.kd_temperature > 0.0, "a number > 0"),
                      ("lr", self.lr > 0.0, "a number > 0"),
                      ("lr_min", 0.0 <= self.lr_min <= self.lr, f"in [0, lr={self.lr}]"),
                      ("arch_lr", self.arch_lr > 0.0, "a number > 0"),
                      ("arch_weight_decay", self.arch_weight_decay >= 0.0, "a number >= 0"),
                      ("arch_warmup", 0.0 <= self.arch_warmup < 1.0, "in [0, 1)"),
                      ("tau_every", self.tau_every >= 1, "an integer >= 1"),
                      ("checkpoint_every", self.checkpoint_every >= 1, "an integer >= 1"),
                      ("alpha_log_every", self.alpha_log_every >= 1, "an integer >= 1"),
                      ("op_costs", self.op_costs in ("normalised", "published"),
                       "normalised or published")], self)


@dataclass
class RetrainSettings(TrainSettings):
    """The distilled retrain: the shared loop's settings plus the distillation weights."""

    lr: float = 1e-3
    grad_clip: float | None = 5.0
    gamma: float = 0.8
    kd_temperature: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("gamma", 0.0 <= self.gamma <= 1.0, "in [0, 1]"),
                      ("kd_temperature", self.kd_temperature > 0.0, "a number > 0")], self)

    def train_settings(self) -> TrainSettings:
        return loop_settings(self)


@dataclass
class AdaBertConfig(MethodConfig):
    space: dict = field(default_factory=dict)
    search: SearchSettings = field(default_factory=SearchSettings)
    retrain: RetrainSettings = field(default_factory=RetrainSettings)
    # TinyBERT's word-replacement augmentation of the retrain's data;
    # off unless the file has an ``augment:`` section. The search keeps the plain subset.
    augment: AugmentSettings = field(default_factory=lambda: AugmentSettings(enabled=False))
    searcher: str | None = None  # this experiment's searcher (default: differentiable)
    multi_trial: StudySettings = field(default_factory=StudySettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.build_space(2, pair=False)  # the space's own checks (hidden: 0...), before any stage

    def build_space(self, num_labels: int, pair: bool) -> Any:
        """The AdaBERT space with ``space:`` over its defaults, for the task's labels and
        input; a value it refuses is a one-line error naming ``space.KEY``."""
        from nas.space import get_space

        for key in ("num_labels", "pair"):
            if key in self.space:
                raise ConfigError(f"space.{key} comes from the task; remove the key")
        try:
            return get_space("adabert", num_labels=num_labels, pair=pair, **self.space)
        except NasError as err:
            raise ConfigError(f"space: {err}") from None



# ------------------------------------------------------------------------- helpers


def distillation_loss(model: Any, out: Any, batch: Mapping[str, torch.Tensor],
                      probes: np.ndarray, gamma: float, temperature: float) -> torch.Tensor:
    """(1−γ)·CE + γ·probe KD; student layer logits = the shared classifier on each
    active cell's pooled output (docs/reference.md#adabert)."""
    from nas.distill.losses import probe_distillation_loss

    labels = batch["labels"]
    ce = F.cross_entropy(out.logits, labels)
    if gamma == 0.0:
        return ce
    classifier = model.nodes["readout"].classifier
    layer_logits = [classifier(h) for h in out.records["layer_features"]]
    probe = table_rows(probes, batch["index"], out.logits, axis=1)
    kd = probe_distillation_loss(layer_logits, probe, labels, temperature)
    return (1.0 - gamma) * ce + gamma * kd


# --------------------------------------------------------------------- the context


class AdaBertContext(TaskContext[AdaBertConfig]):
    """Stages 1–2 (teacher, data; :class:`recipes.common.TaskContext`), the teacher's
    probes, the space, and the batches every later stage uses. Pairs are fed as two
    separately tokenised sentences (AdaBERT §3.1)."""

    pair_input = "separate"
    stage_count = 5

    def __init__(self, config: AdaBertConfig, run: RunDir, options: RunOptions) -> None:
        super().__init__(config, run, options, eval_batch_size=config.retrain.batch_size)

    def prepare_data(self, number: int = 2) -> None:
        super().prepare_data(number)
        self.search_train, self.search_val = self.carve_validation()

    def prepare(self) -> AdaBertContext:
        from nas.distill.cache import cached_probe_logits

        super().prepare()
        log.info("stage 2/5: teacher probes (cached)")
        kw: dict[str, Any] = dict(max_seq_len=self.max_seq_len, progress=self.progress)
        model_dir, train = self.teacher.model_dir, self.train
        self.probes = {
            "train": cached_probe_logits(model_dir, train, **kw),
            "search_train": cached_probe_logits(model_dir, train, self.search_train, **kw),
            "search_val": cached_probe_logits(model_dir, train, self.search_val, **kw),
        }
        self.retrain_data, self.probes["retrain"] = self._retrain_data(kw)
        self.space = self.cfg.build_space(train.num_labels, pair=train.is_pair)
        self.embedding_init = teacher_embedding_init(model_dir, self.space.config["hidden"])
        return self

    def _retrain_data(self, kw: dict[str, Any]) -> tuple[Any, np.ndarray]:
        """The retrain's training data and its probe logits: the subset, or the subset
        with its augmented versions (probes trained on the subset, scored on every row)."""
        from nas.augment import augmented_training_data
        from nas.distill.cache import cached_probe_logits

        a = self.cfg.augment
        if not a.enabled:
            return self.train, self.probes["train"]
        log.info("stage 2/5: augmentation of %d retrain examples x %d (cached)",
                 len(self.train), a.n)
        data, record = augmented_training_data(self.train, a, self.cfg.teacher,
                                               self.max_seq_len, self.progress)
        self.run.log("augment", **record)
        return data, cached_probe_logits(self.teacher.model_dir, self.train, data, **kw)

    def retrain_evaluator(self) -> DistilledRetrainEvaluator:
        """Stage 4's evaluator: the child trained from scratch on the whole training
        subset (augmented, when the file says so) with (1−γ)·CE + γ·probe-KD, scored on
        dev, measured on the report split."""
        cfg, r = self.cfg, self.cfg.retrain
        probes, data = self.probes["retrain"], self.retrain_data

        def train_batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
            return self.batches(data, r.batch_size, shuffle=True,
                                seed=stage_seed(cfg.seed, f"retrain-order:{epoch}"),
                                start=start)

        def loss(model: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            out = model(batch, record=("layer_features",))
            return distillation_loss(model, out, batch, probes, r.gamma, r.kd_temperature)

        task = RetrainTask(
            train_batches=train_batches, steps_per_epoch=math.ceil(len(data) / r.batch_size),
            loss=loss, test_batches=self.report_batches_or_none(),
            init=lambda model: init_embeddings(model, self.embedding_init),
            **self.scoring_fields())
        return DistilledRetrainEvaluator(
            self.space, task, r.train_settings(), seed=cfg.seed,
            workdir=self.run.path / "retrain", latency_repeats=cfg.latency_repeats,
            progress=self.progress)


# ----------------------------------------------------------------- the search stage


class AdaBertSupernetTrainer:
    """The recipe's side of the one-shot search (:class:`searchers.base.SupernetTrainer`):
    batches, the task loss, and the loop's checkpoint and logging in the run folder."""

    def __init__(self, ctx: AdaBertContext) -> None:
        from nas.builder import build_supernet

        self.ctx, s = ctx, ctx.cfg.search
        self.epochs = s.epochs
        self.steps_per_epoch = math.ceil(len(ctx.search_train) / s.batch_size)
        self.supernet = build_supernet(ctx.space)
        init_embeddings(self.supernet, ctx.embedding_init)

    def task_loss(self, out: Any, batch: Mapping[str, Any]) -> torch.Tensor:
        s = self.ctx.cfg.search
        source = self.ctx.probes["search_val" if batch.get("split") == "val"
                                 else "search_train"]
        return distillation_loss(self.supernet, out, batch, source, s.gamma, s.kd_temperature)

    def train_batches(self, epoch: int, start_batch: int = 0) -> Iterator[dict[str, Any]]:
        seed = stage_seed(self.ctx.cfg.seed, f"search-order:{epoch}")
        return self.ctx.batches(self.ctx.search_train, self.ctx.cfg.search.batch_size,
                                shuffle=True, seed=seed, start=start_batch)

    def val_batches(self, epoch: int) -> list[dict[str, Any]]:
        seed = stage_seed(self.ctx.cfg.seed, f"search-val-order:{epoch}")
        return [{**b, "split": "val"} for b in self.ctx.batches(
            self.ctx.search_val, self.ctx.cfg.search.batch_size, shuffle=True, seed=seed)]

    def fit(self, search: Any) -> None:
        from searchers.base import run_steps

        run, every = self.ctx.run, self.ctx.cfg.search.alpha_log_every

        def log_alpha(step: int, info: dict[str, float]) -> None:
            if step % every == 0:  # the α trajectory, not just one point per epoch
                run.log("alpha", step=step, tau=info.get("tau"), probs=search.probabilities())

        def log_epoch(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            run.log("search_epoch", epoch=epoch + 1, step=search.step_count + 1, **means,
                    entropy=search.alphas.entropy(), argmax=dict(search.derive()),
                    probs=search.probabilities())
            return {}

        run_steps(self, search, checkpoint=run.checkpoint_path("search"),
                  after_step=log_alpha, on_epoch_end=log_epoch,
                  progress=self.ctx.progress, desc="search",
                  find_unused_parameters=True)


def open_run(config: AdaBertConfig, run_dir: str | Path, *, data_dir: str | None = None,
             resume: bool = False, progress: bool = False) -> AdaBertContext:
    """Stages 1–2 of a run, for scripts that go on with single stages (``AdaBert().search``,
    ``ctx.retrain_evaluator()``)."""
    return AdaBert().prepared(config, RunOptions(run_dir=Path(run_dir), data_dir=data_dir,
                                                 resume=resume, progress=progress))


# ------------------------------------------------------------------------- method


@register_method("adabert")
class AdaBert(Recipe[AdaBertConfig]):
    """``method: adabert`` — the differentiable search, or a multi-trial baseline."""

    config_class = AdaBertConfig
    context_class = AdaBertContext
    searchers = ("differentiable", "random", "lanas", "tpe", "nsga2", "gp")

    def snapshot(self, config: AdaBertConfig) -> dict[str, Any]:
        """Augmentation, when off (the default), is left out of ``config.yaml``, so that
        runs started before the option existed still resume."""
        values = super().snapshot(config)
        if not config.augment.enabled:
            del values["augment"]
        return values

    def searcher_of(self, config: AdaBertConfig, options: RunOptions) -> str:
        return self.check_searcher(options.searcher or config.searcher)  # type: ignore[return-value]  # a searching method's default is a name

    def resumes(self, config: AdaBertConfig, options: RunOptions) -> bool:
        # the random baseline adds a stage to an existing run: no --resume needed for that
        return options.resume or (self.searcher_of(config, options) == "random"
                                  and (Path(options.run_dir) / "config.yaml").is_file())

    def done_fields(self, config: AdaBertConfig, options: RunOptions) -> dict[str, Any]:
        return {"searcher": self.searcher_of(config, options)}

    def stages(self, ctx: AdaBertContext) -> dict[str, Any]:
        from searchers.base import SEARCHERS

        searcher = self.searcher_of(ctx.cfg, ctx.options)
        if SEARCHERS.kind_of(searcher) == "one-shot":
            return {"searched": self.retrain_and_export(ctx, self.search(ctx, searcher))}
        return {searcher: self.multi_trial(ctx, searcher)}

    # -- stage 3 -------------------------------------------------------------------
    def search(self, ctx: AdaBertContext, name: str) -> Architecture:
        """The one-shot search; its derived architecture is kept and never searched again."""
        from searchers.base import resolve_searcher

        done = ctx.run.load_json("derived_arch.json")
        if done is not None:
            ctx.stage(3, "search already finished, derived %s", done["choices"])
            return ctx.space.validate(done["choices"])
        s = ctx.cfg.search
        seed = seed_stage(ctx.cfg.seed, "search")
        trainer = AdaBertSupernetTrainer(ctx)
        ctx.stage(3, "%s search, %d epochs × %d steps", name, s.epochs,
                  trainer.steps_per_epoch)
        # the search: section's searcher settings are the differentiable searcher's
        settings = {"beta": s.beta, "lr": s.lr, "lr_min": s.lr_min, "arch_lr": s.arch_lr,
                    "arch_weight_decay": s.arch_weight_decay, "tau_every": s.tau_every,
                    "arch_warmup": s.arch_warmup, "checkpoint_every": s.checkpoint_every,
                    "op_costs": s.op_costs}
        searcher = resolve_searcher(name, kinds=("one-shot",), settings=settings).build(
            seed=seed, record=("layer_features",))
        t0 = time.time()
        arch = searcher.search(ctx.space, trainer).arch
        space_config = {k: ctx.space.config[k] for k in
                        ("num_labels", "pair", "vocab_size", "hidden", "max_depth")}
        ctx.run.save_json("derived_arch.json", {**arch.to_dict(), "id": arch.id,
                                                "space_config": space_config})
        ctx.run.log("derived", arch=dict(arch), id=arch.id, seconds=time.time() - t0)
        ctx.run.remove_checkpoint("search")
        return arch

    # -- stages 4 and 5 --------------------------------------------------------------
    def retrain_and_export(self, ctx: AdaBertContext, arch: Architecture) -> dict[str, Any]:
        searched = ctx.run.load_json("searched.json")
        if searched is not None and (ctx.run.path / "export" / "config.json").is_file():
            return searched
        ctx.stage(4, "retrain the derived architecture")
        searched = ctx.finish("searched", ctx.space, arch, evaluator=ctx.retrain_evaluator(),
                              what="the retrain of the derived architecture", stage=5,
                              record="searched.json")
        ctx.run.log("retrained", **searched)
        return searched

    def multi_trial(self, ctx: AdaBertContext, name: str) -> dict[str, Any]:
        """Stage 3 as a multi-trial search on Optuna (:mod:`searchers.loop`): the random
        baseline, LaNAS, TPE, NSGA-II or GP, each candidate scored by the same retrain
        (scalarised with ``multi_trial.targets``, or with ``extra_objectives`` as more
        objectives); ``multi_trial.n_trials`` (default 3) trials."""

        from nas.teacher import metric_score

        ctx.stage(3, "%s search, each candidate retrained (stages 3-4)", name)
        found = run_study_stage(ctx, searcher=name, space=ctx.space,
                                evaluator=_study_objective(ctx, name)[1],
                                settings=ctx.cfg.multi_trial, default_trials=3,
                                parts=ctx.worker_parts(_study_objective, name))
        runs = [ctx.result_row(f"{name}{t.number}", ctx.space.validate(t.user_attrs["arch"]),
                               SimpleNamespace(metrics=t.user_attrs.get("metrics") or {},
                                               costs=t.user_attrs["costs"]))
                for t in found.trials]
        outcome = {t.number: t.user_attrs.get("outcome") for t in found.study.trials}
        summary = {"study": found.spec.study_name, "n_trials": found.spec.n_trials,
                   "runs": runs, "failed": [n for n, o in outcome.items() if o == "failed"],
                   "pruned": [n for n, o in outcome.items() if o == "pruned"]}
        if not runs:
            return summary
        scores = [metric_score(r[ctx.report_split], ctx.metric) for r in runs]
        return {**summary, "metric": ctx.metric, "split": ctx.report_split,
                **mean_std(scores)}

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        from searchers.report import study_sections

        lines, pictures = study_sections(run.path, report_reference(metrics), into=metrics)
        return lines, _plots(run) + pictures


def _study_objective(ctx: AdaBertContext, searcher: str) -> tuple[Any, Any]:
    """The multi-trial study's space and evaluator: each candidate retrained."""
    from searchers.loop import study_evaluator

    return ctx.space, study_evaluator(ctx.retrain_evaluator(), ctx.space, ctx.cfg.multi_trial,
                                      searcher, seq_len=ctx.max_seq_len)



# -------------------------------------------------------------------------- report

OP_GROUPS = {"conv": ("std_conv_3", "std_conv_5", "std_conv_7"),
             "dilated conv": ("dil_conv_3", "dil_conv_5", "dil_conv_7"),
             "pool": ("max_pool_3", "avg_pool_3"), "skip": ("skip",), "zero": ("zero",)}


def _plots(run: RunDir) -> list[Path]:
    """How the depth and op distributions moved during the search (every logged α
    snapshot, so a one-epoch search still shows a trajectory)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nas.ops.cnn import ADABERT_OPS

    snapshots = run.read_log("alpha") or run.read_log("search_epoch")
    if not snapshots:
        return []
    fig, (ax_d, ax_o) = plt.subplots(1, 2, figsize=(11, 4))
    xs = [e["step"] for e in snapshots]
    depth = [e["probs"]["depth"] for e in snapshots]
    for k in range(len(depth[0])):
        ax_d.plot(xs, [d[k] for d in depth], label=f"K={k + 1}")
    ax_d.set(title="depth distribution", xlabel="search step", ylabel="probability")
    ax_d.legend(fontsize=7, ncol=2)
    edges = [n for n in snapshots[0]["probs"] if n != "depth"]
    for group, ops in OP_GROUPS.items():
        idx = [ADABERT_OPS.index(o) for o in ops]
        ys = [sum(sum(e["probs"][n][i] for i in idx) for n in edges) / len(edges)
              for e in snapshots]
        ax_o.plot(xs, ys, label=group)
    ax_o.set(title=f"op distribution (mean over the {len(edges)} edges)", xlabel="search step",
             ylabel="probability")
    ax_o.legend(fontsize=8)
    fig.tight_layout()
    path = run.path / "arch_distribution.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return [path]


__all__ = ["AdaBert", "AdaBertConfig", "AdaBertContext", "open_run"]
