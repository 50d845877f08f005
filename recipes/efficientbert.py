"""EfficientBERT (Dong et al., 2021; docs/reference.md#efficientbert): coarse-to-fine search of the
FFNs of a small BERT, each candidate scored by a warmed-up supernet with weight inheritance.

The method's steps, in order (:meth:`EfficientBert.stages` after the shared stages 1–2 of
:class:`recipes.common.TaskContext`); each is a call into shared parts:

1. **teacher** — the default MiniLM-L6-H384 teacher fine-tuned on the task
   (:func:`nas.teacher.finetune_teacher`, cached by its settings), loaded into the
   engine's ``bert`` design for its pre-softmax attention scores;
2. **data** — a seeded subset of train, split into a search-train part and a held-out
   validation part (candidates are scored there, never on dev), ``dev`` and the report
   split (``test`` for SST-2);
3. **warm-up** — the supernet (N = 4, r = 1, standard FFN in every layer) distilled on
   unlabeled text by attention and hidden MSE through the space's fit layer
   (:func:`nas.distill.warmup.warmup_supernet`; cached by its settings, resumable);
4. **stage 1** — expressions, N and r jointly, proposed by the LaNAS sampler under the
   parameter budget, each scored by the ``warmup-kd`` proxy
   (:class:`evaluators.warmup_kd.WarmupKDEvaluator`) on the multi-trial study loop;
5. **stage 2** — expressions only: the depth and width choices (N, r) fixed from stage 1
   (:func:`nas.space.fix_choices`), the rest searched the same way;
6. **stage 3** — N and r only, the expressions fixed: the ``sampled-supernet`` searcher
   (:mod:`searchers.sampled_supernet`) trains one *unfrozen* copy of the warmed-up
   supernet with task KD, each step on a sub-network sampled uniformly under the budget,
   then ranks candidates with the ``inherited`` evaluator (:mod:`evaluators.inherited`:
   their inherited weights alone, on the held-out part of train);
7. **retrain** — the winner inherits from the warmed-up supernet and is trained with the
   full distillation (attention + hidden + prediction KD) on the training subset
   (:class:`evaluators.retrain.DistilledRetrainEvaluator`), evaluated on dev and the
   report split; the optional baselines (published architecture, hand-designed FFN,
   random architectures under the budget) get the very same retrain;
8. **export** — native and ONNX (``export/``): it runs in the search-free runtime.

Each of stages 1–3 is a section of the experiment file with ``enabled: false`` to skip
it. The budget is a parameter count from the graph (:mod:`nas.cost`): ``budget.max_params``,
or the count of ``budget.reference`` (the published architecture, by default) at the
space's width. A finished stage is never redone; ``--resume`` continues an unfinished one
(the studies from their journals, the stage-3 supernet and the retrain from their
checkpoints). Every stage has its own seed from the run's seed (:mod:`nas.seeding`); the
warm-up has its own (``warmup.seed``) because its cache entry is shared by every run.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, cast

import numpy as np

from nas.architecture import load_for_space
from nas.config import ConfigError, cap_ok, check_fields
from nas.distill.warmup import WarmupSettings
from nas.methods import RunOptions, register_method
from nas.rundir import RunDir
from nas.seeding import seed_stage, stage_seed
from nas.train import TrainSettings, loop_settings
from recipes.common import (
    MethodConfig,
    Recipe,
    TaskContext,
    mean_std,
    seeded_subset,
)
from searchers.loop import StudySettings
from searchers.sampled_supernet import SHAPE_KINDS  # N and r: stage 2 fixes, stage 3 searches

log = logging.getLogger("nas.efficientbert")

PAPER_ARCH = "experiments/archs/efficientbert_paper.json"


# ---------------------------------------------------------------------------- config


@dataclass
class BudgetSettings:
    """The parameter budget (counted from the graph, paper convention of the space):
    ``max_params``, or the count of the ``reference`` architecture file (choices the
    space lacks, e.g. layers beyond a smaller space's depth, are dropped)."""

    max_params: float | None = None
    reference: str | None = PAPER_ARCH

    def __post_init__(self) -> None:
        if self.max_params is None and not self.reference:
            raise ValueError("budget needs max_params or a reference architecture file")
        check_fields([("max_params", self.max_params is None or self.max_params > 0,
                       "None or > 0")], self)


@dataclass
class ProxySettings:
    """The ``warmup-kd`` proxy of stages 1–2: ``text_steps`` of attention + hidden KD on
    the warm-up text (0: none), then ``task_steps`` of hidden KD + soft cross-entropy on
    the search-train part (at most ``max_task_examples``), the soft cross-entropy weighted
    by ``gamma`` (the paper's 1), scored every ``eval_every`` steps on the held-out part;
    the score is the best value. ``inherit: false`` starts each candidate from scratch
    (the no-warm-up arm)."""

    text_steps: int = 200
    task_steps: int = 200
    batch_size: int = 32
    lr: float = 4e-4
    eval_every: int | None = 50
    max_task_examples: int | None = None
    temperature: float = 1.0
    gamma: float = 1.0
    inherit: bool = True
    cache_teacher: bool = True

    def __post_init__(self) -> None:
        check_fields([("text_steps", self.text_steps >= 0, "an integer >= 0"),
                      ("task_steps", self.task_steps >= 1, "an integer >= 1"),
                      ("batch_size", self.batch_size >= 1, "an integer >= 1"),
                      ("lr", 0.0 < self.lr < math.inf, "a number > 0"),
                      ("eval_every", self.eval_every is None or self.eval_every >= 1,
                       "None or >= 1"),
                      ("max_task_examples", cap_ok(self.max_task_examples, 2),
                       "null (all rows) or an integer >= 2"),
                      ("temperature", 0.0 < self.temperature < math.inf, "a number > 0"),
                      ("gamma", 0.0 < self.gamma < math.inf, "a number > 0")], self)

    def settings(self, steps: int) -> TrainSettings:
        return TrainSettings(epochs=10_000, max_steps=steps, batch_size=self.batch_size,
                             lr=self.lr, schedule="linear", warmup_fraction=0.1,
                             grad_clip=1.0, checkpoint_every=10_000)


@dataclass
class SearchStage(StudySettings):
    """Stage 1 or 2: the multi-trial study's settings (``multi_trial:`` of other methods;
    ``max_params`` defaults to the budget) and whether the stage runs."""

    enabled: bool = True


@dataclass
class Stage3Settings(TrainSettings):
    """Stage 3: the unfrozen supernet's task-KD training (the loop's settings; each step
    samples (N, r) uniformly under the budget), then ``candidates`` sub-networks scored
    by their inherited weights alone."""

    enabled: bool = True
    candidates: int = 32
    max_steps: int | None = 300
    lr: float = 1e-4
    warmup_fraction: float = 0.1
    schedule: str = "linear"
    grad_clip: float | None = 1.0
    temperature: float = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("candidates", self.candidates >= 1, "an integer >= 1"),
                      ("temperature", 0.0 < self.temperature < math.inf, "a number > 0")], self)


@dataclass
class RetrainSettings(TrainSettings):
    """The final recipe: the architecture inherits from the warmed-up supernet
    (``inherit``) and trains with L = Σ_m (L_attn + L_hidn) + γ·L_pred at temperature T
    (docs/reference.md#efficientbert: γ = 1 and T = 1 in fine-tuning), scored on dev after each
    epoch."""

    epochs: int = 3
    lr: float = 1e-4
    warmup_fraction: float = 0.1
    schedule: str = "linear"
    grad_clip: float | None = 1.0
    gamma: float = 1.0
    temperature: float = 1.0
    inherit: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("gamma", 0.0 <= self.gamma < math.inf, "a number >= 0"),
                      ("temperature", 0.0 < self.temperature < math.inf, "a number > 0")], self)


@dataclass
class BaselineSettings:
    """Architectures retrained with the winner's recipe under the same budget:
    ``archs`` (JSON files, e.g. the published one), ``hand_designed`` (N = 1, r = 1, the
    space's default expression, the standard GeLU FFN) and ``random`` architectures
    sampled uniformly within the budget."""

    archs: list = field(default_factory=list)
    hand_designed: bool = False
    random: int = 0

    def __post_init__(self) -> None:
        check_fields([("archs", all(isinstance(a, str) for a in self.archs),
                       "a list of file paths"),
                      ("random", self.random >= 0, "an integer >= 0")], self)


@dataclass
class EfficientBertConfig(MethodConfig):
    space: dict = field(default_factory=dict)
    budget: BudgetSettings = field(default_factory=BudgetSettings)
    warmup: WarmupSettings = field(default_factory=WarmupSettings)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    stage1: SearchStage = field(default_factory=lambda: SearchStage(n_trials=24,
                                                                    seeds=["default"]))
    stage2: SearchStage = field(default_factory=lambda: SearchStage(n_trials=16))
    stage3: Stage3Settings = field(default_factory=Stage3Settings)
    retrain: RetrainSettings = field(default_factory=RetrainSettings)
    baselines: BaselineSettings = field(default_factory=BaselineSettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not cap_ok(self.data.max_train_examples, 4):  # search-train and held-out parts
            raise ValueError("data.max_train_examples must be null or >= 4 (a held-out part "
                             f"is carved out of it), got {self.data.max_train_examples}")
        self.build_space(2)  # the space's own checks, before any stage
        if self.warmup.max_seq_len != self.data.max_seq_len:
            raise ValueError(f"warmup.max_seq_len ({self.warmup.max_seq_len}) must equal "
                             f"data.max_seq_len ({self.data.max_seq_len})")

    def build_space(self, num_labels: int) -> Any:
        from nas.space import get_space

        if "num_labels" in self.space:
            raise ConfigError("space.num_labels comes from the task; remove the key")
        return get_space("efficientbert", num_labels=num_labels, **self.space)


# --------------------------------------------------------------------- the context


class EfficientBertContext(TaskContext[EfficientBertConfig]):
    """Stages 1–2 (:class:`recipes.common.TaskContext`: teacher, data, batches) and what
    the later stages share: the search-train and held-out parts of the training subset
    (and the proxy's subset of the first), the space and its budget, the frozen teacher
    with its layer map, the task-KD objective and the evaluators."""

    def __init__(self, config: EfficientBertConfig, run: RunDir, options: RunOptions) -> None:
        super().__init__(config, run, options, eval_batch_size=config.retrain.batch_size)

    def prepare(self) -> EfficientBertContext:
        from nas.cost import count_costs

        cfg = self.cfg
        super().prepare()
        self.search_train, self.search_val = self.carve_validation()
        self.proxy_train = seeded_subset(self.search_train, cfg.proxy.max_task_examples,
                                         self.seed, "proxy-data", "proxy.max_task_examples")
        self.space = cfg.build_space(self.train.num_labels)
        self.val_batches = list(self.batches(self.search_val, self.eval_batch_size))
        self.budget = self._budget()
        self.budget_source = (f"max_params {cfg.budget.max_params:.0f}"
                              if cfg.budget.max_params is not None
                              else f"{cfg.budget.reference} at this width")
        default = count_costs(self.space, self.space.default(), self.max_seq_len).params
        log.info("space: %d choices, %.3g architectures; budget %.2fM parameters (%s); the "
                 "default architecture has %.2fM", len(self.space.choices()), self.space.size(),
                 self.budget / 1e6, self.budget_source, default / 1e6)
        self.run.log("data", train=len(self.train), search_train=len(self.search_train),
                     search_val=len(self.search_val), proxy_train=len(self.proxy_train),
                     dev=len(self.dev), report=len(self.report), budget=self.budget)
        return self

    @classmethod
    def check_config(cls, config: EfficientBertConfig) -> None:
        """Before any stage: the space must fit the teacher (heads, layers, fit width)."""
        from transformers import AutoConfig

        from nas.distill.warmup import check_teacher_fits
        from nas.teacher import resolve_teacher

        teacher = AutoConfig.from_pretrained(resolve_teacher(config.teacher),
                                             local_files_only=True)
        check_teacher_fits(config.build_space(2), teacher.to_dict())

    def _budget(self) -> float:
        from nas.cost import count_costs

        b = self.cfg.budget
        if b.max_params is not None or b.reference is None:  # one is set (BudgetSettings)
            return float(cast(float, b.max_params))
        arch = load_for_space(self.space, b.reference)
        return float(count_costs(self.space, arch, self.max_seq_len).params)

    # -- teacher -----------------------------------------------------------------------
    def teacher_model(self) -> tuple[Any, Any]:
        """The frozen teacher (:meth:`task_teacher`) with the uniform layer map of the
        space onto it."""
        from nas.distill.losses import layer_map
        from nas.distill.warmup import check_teacher_fits

        space, model = self.task_teacher()
        check_teacher_fits(self.space, space.config)
        return model, layer_map(self.space.config["layers"], space.config["num_hidden_layers"])

    def cached_teacher(self) -> Any:
        """The teacher with its states stored per batch on disk (the proxy's batches)."""
        from nas.cache import cache_root
        from nas.distill.general import CachedTeacher
        from nas.teacher import teacher_identity

        if not hasattr(self, "_cached_teacher"):
            folder = (cache_root() / "teacher_states"
                      / f"{teacher_identity(self.teacher.model_dir)}-L{self.max_seq_len}")
            self._cached_teacher = CachedTeacher(lambda: self.teacher_model()[0], folder)
        return self._cached_teacher

    def kd_loss(self, terms: Any, data: Any = None, gamma: float = 1.0,
                temperature: float = 1.0, cached: bool = False) -> Any:
        """The task-KD objective (:class:`nas.distill.efficientbert.TaskKD`): ``terms``
        against the teacher, plus γ·soft cross-entropy against its logits on ``data``
        (none without); ``cached``: the teacher's states come from :meth:`cached_teacher`."""
        from nas.distill.efficientbert import TaskKD

        teacher, mapping = self.teacher_model()
        logits = None if data is None else self.teacher_logits(data)
        return TaskKD(self.cached_teacher() if cached else teacher, mapping, terms, logits,
                      gamma, temperature)

    # -- evaluators ----------------------------------------------------------------------
    def proxy_evaluator(self, warm: Any, inherit: bool | None = None,
                        record_curve: bool = False) -> Any:
        """Stages 1–2's evaluator: ``warmup-kd`` (inherit, text KD, task KD, best score on
        the held-out part of train); ``inherit`` overrides ``proxy.inherit``."""
        from evaluators.warmup_kd import WarmupKDEvaluator, WarmupKDTask
        from nas.distill.tinybert import Terms
        from nas.distill.warmup import WARMUP_TERMS

        p = self.cfg.proxy
        text = self.text_corpus()
        task = WarmupKDTask(
            supernet=(lambda: warm.load(self.space)) if (p.inherit if inherit is None
                                                         else inherit) else None,
            task_batches=self.train_batches(self.proxy_train, p.batch_size, "proxy-task"),
            task_steps_per_epoch=math.ceil(len(self.proxy_train) / p.batch_size),
            task_loss=self.kd_loss(Terms(False, False, True), self.proxy_train,
                                   gamma=p.gamma, temperature=p.temperature,
                                   cached=p.cache_teacher),
            val_batches=self.val_batches,
            text_batches=self.train_batches(text, p.batch_size, "proxy-text"),
            text_steps_per_epoch=math.ceil(len(text) / p.batch_size),
            text_loss=self.kd_loss(WARMUP_TERMS, cached=p.cache_teacher),
            metric=self.dev.metric,
            latency_batches={1: self.latency_batches[1]}, seq_len=self.max_seq_len)
        return WarmupKDEvaluator(
            self.space, task, p.settings(p.task_steps),
            p.settings(p.text_steps) if p.text_steps else None, seed=self.cfg.seed,
            eval_every=p.eval_every, latency_repeats=self.cfg.latency_repeats,
            record_curve=record_curve)

    def text_corpus(self) -> Any:
        from nas.distill.warmup import warmup_corpus

        if not hasattr(self, "_text"):
            self._text = warmup_corpus(self.space, self.cfg.warmup, self.tokenizer,
                                       self.task, self.full_train, self.options.data_dir)
        return self._text

    def retrain_evaluator(self, warm: Any, workdir: Path | None = None) -> Any:
        """The final recipe: inherit, full KD on the training subset, dev each epoch."""
        from evaluators.retrain import DistilledRetrainEvaluator, RetrainTask
        from nas.builder import inherit_weights
        from nas.distill.tinybert import Terms

        r = self.cfg.retrain
        supernet: dict[str, Any] = {}

        def init(child: Any) -> None:
            if "net" not in supernet:
                supernet["net"] = warm.load(self.space)
            inherit_weights(child, supernet["net"])

        task = RetrainTask(
            train_batches=self.train_batches(self.train, r.batch_size, "retrain"),
            steps_per_epoch=math.ceil(len(self.train) / r.batch_size),
            loss=self.kd_loss(Terms(False, True, True), self.train, gamma=r.gamma,
                              temperature=r.temperature),
            test_batches=self.report_batches_or_none(), init=init if r.inherit else None,
            **self.scoring_fields())
        return DistilledRetrainEvaluator(
            self.space, task, loop_settings(r), seed=self.cfg.seed,
            workdir=workdir or self.run.path / "retrain", latency_repeats=self.cfg.latency_repeats,
            progress=self.options.progress)


class Stage3Trainer:
    """Stage 3's side of the one-shot search (:class:`searchers.base.SupernetTrainer`): an
    unfrozen copy of the warmed-up supernet, task KD (attention, hidden, prediction) on
    the search-train part, the loop's checkpoint and log in the run folder. The trained
    weights are kept (``stage3_supernet.safetensors``): a stage interrupted while scoring
    scores again without training."""

    def __init__(self, ctx: EfficientBertContext, warm: Any) -> None:
        from nas.distill.tinybert import Terms

        s = ctx.cfg.stage3
        self.ctx, self.terms = ctx, Terms(False, True, True)
        self.supernet = warm.load(ctx.space)
        self.epochs, self.steps_per_epoch = s.epochs, math.ceil(len(ctx.search_train)
                                                                / s.batch_size)
        self.train_batches = ctx.train_batches(ctx.search_train, s.batch_size, "stage3")
        self.weights = ctx.run.path / "stage3_supernet.safetensors"
        self._loss: Any = None  # built in fit(), after the stage's seed

    def val_batches(self, epoch: int) -> list[Any]:
        return self.ctx.val_batches

    def task_loss(self, out: Any, batch: Any) -> Any:
        return self._loss(out, batch)

    def fit(self, search: Any) -> None:
        from nas.cache import load_weights, save_weights
        from nas.distill.warmup import SpaceFit
        from searchers.base import run_steps

        ctx, s, run = self.ctx, self.ctx.cfg.stage3, self.ctx.run
        if self.weights.is_file():
            load_weights(self.supernet, self.weights)
            return
        seed_stage(ctx.seed, "stage3")  # the teacher (when first built here) comes after it
        self._loss = ctx.kd_loss(self.terms, ctx.search_train,
                                 temperature=s.temperature).on_output(SpaceFit(self.supernet))
        log.info("stage3: the unfrozen supernet, task KD on %d examples, (N, r) sampled "
                 "under %.2fM params each step", len(ctx.search_train), ctx.budget / 1e6)
        result = run_steps(self, search, checkpoint=run.checkpoint_path("stage3"),
                           progress=ctx.progress, desc="stage 3 supernet")
        save_weights(self.supernet, self.weights)
        run.remove_checkpoint("stage3")
        run.log("stage3_supernet", steps=result.steps, seconds=round(result.seconds, 1),
                history=result.history)


# ------------------------------------------------------------------------- method


@register_method("efficientbert")
class EfficientBert(Recipe[EfficientBertConfig]):
    """``method: efficientbert`` — warm-up, coarse-to-fine search, retrain, export."""

    config_class = EfficientBertConfig
    context_class = EfficientBertContext
    searchers = ("lanas", "random", "tpe")  # the sampler of stages 1 and 2

    def stages(self, ctx: EfficientBertContext) -> dict[str, Any]:
        searcher = self.check_searcher(ctx.options.searcher)
        warm = self.warmup(ctx)
        arch = ctx.space.default()  # the seed architecture (docs/reference.md#efficientbert)
        stages: dict[str, Any] = {}
        for name in ("stage1", "stage2"):
            found = self.search_stage(ctx, warm, name, arch, searcher)  # type: ignore[arg-type]  # default: a name
            if found is not None:
                stages[name] = found
                arch = ctx.space.validate(found["best"])
        found = self.stage3(ctx, warm, arch)
        if found is not None:
            stages["stage3"] = found
            arch = ctx.space.validate(found["best"])
        metrics: dict[str, Any] = {
            "stages": stages, "budget": {"max_params": ctx.budget, "source": ctx.budget_source},
            # with every stage skipped the retrained model is the seed (hand-designed) FFN
            "searched": self.retrain_and_export(ctx, warm, arch,
                                                "searched" if stages else "hand-designed"),
            **self.baselines(ctx, warm)}
        metrics["warmup"] = {k: v for k, v in warm.record.items() if k != "history"}
        return metrics

    # -- warm-up -------------------------------------------------------------------
    def warmup(self, ctx: EfficientBertContext) -> Any:
        from nas.distill.warmup import warmup_supernet

        log.info("warm-up: the largest supernet distilled on unlabeled text (cached)")
        with ctx.timed("warmup"):
            warm = warmup_supernet(ctx.space, ctx.teacher.model_dir, ctx.cfg.warmup,
                                   task=ctx.task, task_train=ctx.full_train,
                                   data_dir=ctx.options.data_dir, corpus=ctx.text_corpus(),
                                   progress=ctx.progress)
        ctx.run.log("warmup", **{k: v for k, v in warm.record.items() if k != "history"})
        return warm

    # -- stages 1 and 2 -------------------------------------------------------------
    def search_stage(self, ctx: EfficientBertContext, warm: Any, name: str, current: Any,
                     searcher: str) -> dict[str, Any] | None:
        """Stage 1 (everything) or stage 2 (N and r fixed from ``current``) as a study of
        the multi-trial loop, each candidate scored by the ``warmup-kd`` proxy."""

        from nas.space import fix_choices
        from recipes.common import run_study_stage
        from searchers.report import outcome
        from searchers.results import best_trial

        s: SearchStage = getattr(ctx.cfg, name)
        if not s.enabled:
            log.info("%s: skipped (%s.enabled=false)", name, name)
            return None
        done = ctx.run.load_json(f"{name}.json")
        if done is not None:
            log.info("%s: finished before, best %s", name, done["id"])
            return done
        space, fixed, seeds = ctx.space, {}, list(s.seeds)
        if name == "stage2":  # N and r kept; the stage-1 winner is the first candidate
            fixed = {c.name: current[c.name] for c in space.choices() if c.kind in SHAPE_KINDS}
            space = fix_choices(space, fixed)
            path = ctx.run.path / "stage2_seed.json"
            ctx.run.save_json(path.name, {"space": space.name, "choices": dict(current)})
            seeds = [str(path), *seeds]
        settings = replace(s, max_params=s.max_params or ctx.budget, seeds=seeds)
        folder = ctx.run.path / name
        log.info("%s: %s search of %d choices (%s fixed), budget %.2fM params", name, searcher,
                 sum(len(c) > 1 for c in space.choices()), len(fixed) or "none",
                 ctx.budget / 1e6)
        space, evaluator = _study_objective(ctx, searcher, settings, fixed, warm)
        stage = run_study_stage(
            ctx, searcher=searcher, space=space, evaluator=evaluator, settings=settings,
            parts=ctx.worker_parts(_study_objective, searcher, settings, fixed),
            name=f"{ctx.cfg.name}-{name}", run_dir=folder, seed=stage_seed(ctx.seed, name),
            default_trials=settings.n_trials or 16, resume=(folder / "study.json").is_file())
        best = best_trial(stage.study)
        outcomes = [outcome(t) for t in stage.study.trials]
        arch = space.validate(best.user_attrs["arch"])
        found = {"best": dict(arch), "id": arch.id, "value": best.values[0],
                 "trial": best.number, "fixed": fixed, "searcher": searcher,
                 "n_trials": stage.spec.n_trials,
                 "trials": [{"number": t.number, "arch_id": t.user_attrs.get("arch_id"),
                             "value": t.values[0],
                             "params": (t.user_attrs.get("costs") or {}).get("params")}
                            for t in stage.trials],
                 "outcomes": {o: outcomes.count(o) for o in sorted(set(outcomes))},
                 "seconds": stage.seconds}
        return self._finish(ctx, name, found, "trials")

    def _finish(self, ctx: EfficientBertContext, name: str, found: dict[str, Any],
                table: str) -> dict[str, Any]:
        """A stage's result kept: ``NAME.json``, its time, and the log without its table."""
        ctx.seconds[name] = found["seconds"]
        ctx.run.save_json(f"{name}.json", found)
        ctx.run.log(name, **{k: v for k, v in found.items() if k != table})
        return found

    # -- stage 3 -------------------------------------------------------------------
    def stage3(self, ctx: EfficientBertContext, warm: Any, current: Any
               ) -> dict[str, Any] | None:
        """N and r only, expressions fixed: the ``sampled-supernet`` searcher trains one
        unfrozen supernet sampling (N, r) uniformly under the budget at every step, then
        ranks candidates with the ``inherited`` evaluator, without any per-candidate
        training (docs/reference.md#efficientbert)."""
        from evaluators.inherited import InheritedEvaluator, InheritedTask
        from searchers.base import resolve_searcher

        s = ctx.cfg.stage3
        if not s.enabled:
            log.info("stage3: skipped (stage3.enabled=false)")
            return None
        done = ctx.run.load_json("stage3.json")
        if done is not None:
            log.info("stage3: finished before, best %s", done["id"])
            return done
        t0 = time.time()
        trainer = Stage3Trainer(ctx, warm)
        scorer = InheritedEvaluator(ctx.space, InheritedTask(
            supernet=trainer.supernet, **ctx.scoring_fields(ctx.val_batches)))
        searcher = resolve_searcher("sampled-supernet", kinds=("one-shot",),
                                    settings={"candidates": s.candidates}).build(
            seed=ctx.seed, stage="stage3", incumbent=current,
            max_params=ctx.budget, seq_len=ctx.max_seq_len, settings=loop_settings(s),
            record=trainer.terms.records, evaluator=scorer)
        best = searcher.search(ctx.space, trainer)
        rows = best.params["candidates"]
        log.info("stage3: best of %d inherited candidates %s (validation %.4f)", len(rows),
                 best.arch.id, best.params["value"])
        return self._finish(ctx, "stage3", {
            "best": dict(best.arch), "id": best.arch.id, "value": best.params["value"],
            "candidates": rows, "seconds": round(time.time() - t0, 1)}, "candidates")

    # -- retrain, evaluation, export ---------------------------------------------------
    def retrain(self, ctx: EfficientBertContext, warm: Any, arch: Any, tag: str,
                exports: dict[str, str] | None = None) -> dict[str, Any]:
        """``arch`` retrained with the full distillation and scored (and exported into
        ``exports``: none unless given)."""
        return ctx.finish(tag, ctx.space, arch, evaluator=ctx.retrain_evaluator(warm),
                          what=f"the retrain of {tag}", exports=exports or {})

    def retrain_and_export(self, ctx: EfficientBertContext, warm: Any, arch: Any,
                           tag: str = "searched") -> dict[str, Any]:
        run = ctx.run
        searched = run.load_json("searched.json")
        if searched is not None and (run.path / "export" / "config.json").is_file():
            return searched
        t0 = time.time()
        log.info("retrain: %s with the full distillation, then %s", arch.id,
                 ctx.evaluated_splits)
        log.info("export: native and ONNX")
        searched = self.retrain(ctx, warm, arch, tag, exports={"export": "onnx"})
        space_config = {k: v for k, v in ctx.space.config.items()
                        if k not in ("paper_params_groups", "drawing_style")}
        run.save_json("derived_arch.json", {**arch.to_dict(), "id": arch.id,
                                            "space_config": space_config})
        run.save_json("searched.json", searched)
        ctx.seconds["retrain_export"] = round(time.time() - t0, 1)
        run.log("searched", **{k: searched[k] for k in ("arch_id", "dev", "params")})
        return searched

    def baselines(self, ctx: EfficientBertContext, warm: Any) -> dict[str, Any]:
        """The published, hand-designed and random architectures, same recipe."""
        from nas.distill.warmup import sample_under_budget

        b, run = ctx.cfg.baselines, ctx.run
        todo: list[tuple[str, Any]] = [(Path(p).stem, load_for_space(ctx.space, p))
                                       for p in b.archs]
        if b.hand_designed:  # N = 1, r = 1 in every layer, the default (GeLU) expression
            todo.append(("hand-designed", ctx.space.default()))
        rng = np.random.default_rng(stage_seed(ctx.seed, "random-baselines"))
        for i in range(b.random):
            todo.append((f"random{i}", sample_under_budget(
                ctx.space, {}, rng, kinds=("op", "depth", "width", "other"),
                max_params=ctx.budget, seq_len=ctx.max_seq_len)))
        if not todo:
            return {}
        rows = run.load_json("baselines.json") or {}
        for tag, arch in todo:
            if tag not in rows:
                log.info("baseline %s (%s): the same retrain", tag, arch.id)
                rows[tag] = self.retrain(ctx, warm, arch, tag)
                run.save_json("baselines.json", rows)  # after each: a resume skips it
        out: dict[str, Any] = {"baselines": [r for t, r in rows.items()
                                             if not t.startswith("random")]}
        randoms = [r for t, r in rows.items() if t.startswith("random")]
        if randoms:
            from nas.teacher import metric_score

            split = ctx.report_split
            scores = [metric_score(r[split], ctx.dev.metric) for r in randoms]
            out["random"] = {"runs": randoms, "split": split, "metric": ctx.dev.metric,
                             **mean_std(scores)}
        return out

    # -- ranking audit -------------------------------------------------------------------
    def audit_parts(self, config: EfficientBertConfig, options: RunOptions) -> Any:
        """``nas audit``: the ``warmup-kd`` proxy with and without the warm-up (same
        steps, same data; the second starts each candidate from scratch) against the
        stand-alone full-KD retrain, candidates drawn within the budget."""
        from evaluators.audit import AuditParts

        ctx = self.prepared(config, options, audit=True)
        config, run = ctx.cfg, ctx.run
        warm = self.warmup(ctx)
        arms = {"warm-up": ctx.proxy_evaluator(warm, inherit=True, record_curve=True),
                "no warm-up": ctx.proxy_evaluator(warm, inherit=False, record_curve=True)}
        p = config.proxy
        notes = {"proxy": asdict(p), "full": "retrain: " + ", ".join(
            f"{k}={v}" for k, v in asdict(config.retrain).items()), "budget": ctx.budget,
            "warmup_steps": warm.record.get("steps")}
        return AuditParts(space=ctx.space, arms=arms,
                          full=ctx.retrain_evaluator(warm, run.path / "audit_full"),
                          folder=run.path, max_params=ctx.budget, seq_len=ctx.max_seq_len,
                          curve_arms=("warm-up", "no warm-up") if p.text_steps else None,
                          notes=notes)

    # -- report ----------------------------------------------------------------------
    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        from nas.report import _row as table_row

        lines = ["", "## EfficientBERT search", ""]
        budget = metrics.get("budget") or {}
        if budget:
            lines.append(f"- parameter budget: {budget['max_params'] / 1e6:.2f}M "
                         f"({budget['source']})")
        warm = metrics.get("warmup") or {}
        if warm:
            lines.append(f"- warm-up: {warm.get('texts')} texts, {warm.get('steps')} steps, "
                         f"{warm.get('train_seconds')} s"
                         + (" (from the cache)" if warm.get("from_cache") else ""))
        for name, s in (metrics.get("stages") or {}).items():
            what = (f"{s.get('n_trials')} trials ({s.get('searcher')}), outcomes "
                    f"{s.get('outcomes')}" if "n_trials" in s
                    else f"{len(s.get('candidates', []))} inherited candidates")
            lines.append(f"- {name}: best {s['id']} at validation {100 * s['value']:.2f} "
                         f"({what}, {s.get('seconds')} s)")
        searched = metrics.get("searched")
        if searched:
            lines.append(f"- searched architecture: {searched['arch_id']}")
        base = metrics.get("baselines") or []
        teacher = metrics.get("teacher")
        split = (metrics.get("evaluation") or {}).get("split", "dev")
        if base and teacher:
            lines += ["", "Baselines with the searched architecture's recipe and budget:", "",
                      f"| model | {split} (%) | params | FLOPs/example | CPU ms (batch 1) | "
                      "CPU ms (batch 32) | smaller than teacher | faster (batch 1) |",
                      "|---|---|---|---|---|---|---|---|"]
            lines += [table_row(r["tag"], r, metrics.get("metric", "accuracy"), teacher, split)
                      for r in base]
        return lines, []


def _study_objective(ctx: EfficientBertContext, searcher: str, settings: SearchStage,
                     fixed: dict[str, Any], warm: Any = None) -> tuple[Any, Any]:
    """A search stage's space (``fixed`` choices pinned) and evaluator: the proxy on the
    warm-up supernet (``warm``; a worker process takes it from the caches)."""
    from nas.space import fix_choices
    from searchers.loop import study_evaluator

    warm = warm if warm is not None else EfficientBert().warmup(ctx)
    space = fix_choices(ctx.space, fixed) if fixed else ctx.space
    return space, study_evaluator(ctx.proxy_evaluator(warm), space, settings, searcher,
                                  seq_len=ctx.max_seq_len)


__all__ = ["EfficientBert", "EfficientBertConfig", "EfficientBertContext"]
