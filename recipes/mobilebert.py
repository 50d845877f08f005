"""MobileBERT (Sun et al., 2020; docs/reference.md#mobilebert): a bottleneck student of the
teacher's depth and feature-map width, trained by progressive knowledge transfer, its bottleneck
chosen by a grid search under a parameter budget.

The method's steps, in order (:meth:`MobileBert.stages`); each is a call into shared parts:

1. **teacher** — the teacher fine-tuned on the task (:func:`nas.teacher.finetune_teacher`,
   cached: AdaBERT and TinyBERT runs with the same settings share it). It must have the
   student's depth, feature-map width and a multiple of its heads: the default teacher,
   MiniLM-L6-H384, has 6 layers of width 384 with 12 heads;
2. **data** — a seeded subset of the task's training set, ``dev`` and the report split;
3. **grid search** (with ``--searcher`` or ``searcher:``) — the multi-trial loop
   (:mod:`searchers.loop`) over the ``search.choices`` of ``mobilebert-grid`` (h_intra ×
   stacked FFNs × heads × FFN width by default), proposals over ``multi_trial.max_params``
   rejected before training, every candidate trained by this recipe's transfer on a
   reduced budget (the ``progressive-transfer`` evaluator on ``search.max_train_examples``
   examples) and scored on dev; ``nas report`` draws the accuracy–latency Pareto front.
   The most accurate trial becomes the student;
4. **transfer** — the student (``student.arch``, or the searched one) learns the
   teacher layer by layer (:mod:`nas.distill.mobilebert`): the embedding output, then
   block 1, 2, …, L, each with the blocks below frozen, on λ·L_AT + μ·L_FMT + β·L_μ + γ·L_σ;
5. **prediction-layer distillation** — the whole student, soft cross-entropy against the
   teacher's logits (cached per data set);
6. **evaluation** — ``dev`` and the report split; parameters, FLOPs, batch-1 and
   batch-32 latency (:meth:`recipes.common.TaskContext.score_model`);
7. **export** — native (``export/``) and a stock ``transformers``
   ``MobileBertForSequenceClassification`` (``export_hf/``; every attention input but
   ``feature_map`` converts);
8. **comparison arms** (``compare``) — other grid points (by default ``mobilebert-tiny``'s
   choices moved to the student's depth and width) trained by steps 4–6 with the same
   seed and budget.

The paper's alternatives are one switch, ``transfer``: ``progressive`` (default),
``all_at_once`` (every block on the sum of the layer losses, as many epochs as the
progressive stages together) and ``prediction_only`` (no layer-wise transfer); each
``--set transfer=...`` with the same seed is the ablation. ``pkt.lower_lr_scale=0.1``
trains the lower blocks at 0.1× the rate (the published code) instead of freezing them.

Every stage starts from a seed derived from the run's seed and its name; a finished
stage is never redone, and ``--resume`` continues an unfinished one from its checkpoint.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nas.cache import load_weights, save_weights
from nas.config import ConfigError, check_fields
from nas.distill.init import EMBEDDING_INITS
from nas.distill.mobilebert import TRANSFERS, PktWeights
from nas.distill.task import PredictionSettings
from nas.errors import NasError
from nas.methods import register_method
from nas.rundir import RunDir
from nas.seeding import seed_stage
from nas.train import TrainSettings, loop_settings
from recipes.common import MethodConfig, Recipe, TaskContext, mean_std, report_reference
from searchers.loop import StudySettings

log = logging.getLogger("nas.mobilebert")

#: ``mobilebert-tiny``'s block choices (h_intra, heads, stacked FFNs and their width,
#: bottleneck attention), the default comparison arm at the student's depth and width.
TINY_CHOICES: dict[str, Any] = dict(intra_bottleneck_size=128, num_attention_heads=4,
                                    num_feedforward_networks=2, intermediate_size=512,
                                    attention_input="input_bottleneck")


# ---------------------------------------------------------------------------- config


@dataclass
class StudentSettings:
    """The student: a ``mobilebert``-family space (``mobilebert-grid``) with hyperparameters
    in ``config`` (HF names; a list makes a choice) and the chosen grid point in ``arch``.
    Its depth and ``hidden_size`` must be the teacher's (6 and 384 for MiniLM-L6-H384).
    ``init: teacher-pca`` starts the word table from the teacher's principal components."""

    space: str = "mobilebert-grid"
    config: dict = field(default_factory=lambda: {"hidden_size": 384, "num_hidden_layers": 6})
    arch: dict = field(default_factory=lambda: {
        "intra_bottleneck_size": 192, "num_attention_heads": 12,
        "num_feedforward_networks": 4, "intermediate_size": 512})
    init: str = "teacher-pca"

    def __post_init__(self) -> None:
        check_fields([("space", bool(self.space.strip()), "a space name"),
                      ("init", self.init in EMBEDDING_INITS, " or ".join(EMBEDDING_INITS))], self)

    def build_space(self, num_labels: int, choices: dict[str, Any] | None = None) -> Any:
        """The space whose architectures are students: ``config``, with every grid
        dimension in ``arch`` fixed to its value; given ``choices`` (a search), those
        dimensions are free and every other one is fixed (to ``arch`` or its default)."""
        from nas.space import get_space

        wanted = {k: tuple(v) for k, v in (choices or {}).items()}
        fixed = {k: v for k, v in self.arch.items() if k not in wanted}
        try:
            space = get_space(self.space, num_labels=num_labels,
                              **{**self.config, **fixed, **wanted})
            if choices is not None:
                default = space.default()
                rest = {c.name: default[c.name] for c in space.choices()
                        if c.name not in wanted}
                space = get_space(self.space, num_labels=num_labels,
                                  **{**self.config, **fixed, **rest, **wanted})
        except (TypeError, NasError) as err:
            raise ConfigError(f"student: {err}") from None
        if space.config.get("family") != "mobilebert":
            raise ConfigError(f"student.space {self.space!r} is not of the mobilebert family; "
                              "use mobilebert-grid")
        return space

    def default_arch(self, space: Any) -> Any:
        return space.validate(space.default())


@dataclass
class PktSettings(TrainSettings):
    """The transfer stages: the shared loop's settings (``epochs`` per stage), the loss
    weights (λ, μ, β, γ) and the lower blocks' learning-rate scale (0: frozen)."""

    lr: float = 2e-3  # 5e-4 left the feature maps far from the teacher's (dev 64 vs 75)
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0
    weights: PktWeights = field(default_factory=PktWeights)
    lower_lr_scale: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("lower_lr_scale", 0.0 <= self.lower_lr_scale <= 1.0, "in [0, 1]")], self)


@dataclass
class MobileBertPrediction(PredictionSettings):
    """Prediction-layer distillation after the transfer, at MobileBERT's learning rate."""

    lr: float = 1e-4


@dataclass
class SearchSettings:
    """The grid search (step 3, run with ``--searcher`` or ``searcher:``): ``choices``
    (grid dimension → values searched; the others keep ``student.arch``) and the reduced
    budget of each trial (a seeded subset of ``max_train_examples`` training examples,
    ``transfer_epochs`` per stage and ``prediction_epochs``)."""

    choices: dict = field(default_factory=lambda: {
        "intra_bottleneck_size": [96, 128, 192], "num_feedforward_networks": [1, 2, 4],
        "num_attention_heads": [4, 6, 12], "intermediate_size": [256, 512]})
    max_train_examples: int = 2000
    transfer_epochs: int = 1
    prediction_epochs: int = 1

    def __post_init__(self) -> None:
        check_fields([("choices", isinstance(self.choices, dict) and all(
                          isinstance(v, list) and len(v) >= 1 for v in self.choices.values()),
                       "a mapping of grid dimensions to lists of values"),
                      ("max_train_examples", self.max_train_examples >= 2, "an integer >= 2"),
                      ("transfer_epochs", self.transfer_epochs >= 1, "an integer >= 1"),
                      ("prediction_epochs", self.prediction_epochs >= 1, "an integer >= 1")], self)


@dataclass
class ArmSettings:
    """A comparison arm: another grid point (``arch``, over ``student.arch``) trained by
    the same transfer, seed and budget."""

    tag: str
    arch: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields([("tag", bool(self.tag.strip()) and "/" not in self.tag, "a name without /")],
                     self)


@dataclass
class MobileBertConfig(MethodConfig):
    searcher: str | None = None  # a multi-trial searcher: the grid search runs first
    student: StudentSettings = field(default_factory=StudentSettings)
    transfer: str = "progressive"
    pkt: PktSettings = field(default_factory=PktSettings)
    prediction: MobileBertPrediction = field(default_factory=MobileBertPrediction)
    search: SearchSettings = field(default_factory=SearchSettings)
    multi_trial: StudySettings = field(default_factory=StudySettings)
    compare: list = field(default_factory=lambda: [
        {"tag": "mobilebert-tiny-shaped", "arch": dict(TINY_CHOICES)}])

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("transfer", self.transfer in TRANSFERS, " or ".join(TRANSFERS))], self)
        if self.pkt.batch_size != self.prediction.batch_size:
            raise ValueError(f"pkt.batch_size ({self.pkt.batch_size}) and prediction.batch_size "
                             f"({self.prediction.batch_size}) must agree: every stage reads "
                             "one batch source")
        arms = []
        for i, arm in enumerate(self.compare):
            if not isinstance(arm, dict):
                raise ValueError(f"compare[{i}] must be a mapping with tag and arch, got {arm!r}")
            arms.append(ArmSettings(**arm) if not isinstance(arm, ArmSettings) else arm)
        self.compare = [asdict(a) for a in arms]
        # the shapes' own checks, before any stage
        space = self.student.build_space(2)
        self.student.default_arch(space)
        for arm in arms:
            self.arm_space(arm.arch, 2)
        if self.searcher is not None:
            self.student.build_space(2, self.search.choices)

    def arm_space(self, arch: dict, num_labels: int) -> Any:
        return replace(self.student, arch={**self.student.arch, **arch}).build_space(num_labels)



# --------------------------------------------------------------------- the context


def check_student(space: Any, arch: Any, teacher: Mapping[str, Any]) -> None:
    """The teacher's depth and width equal the student's and its heads are a multiple of
    the student's (docs/reference.md#mobilebert); a one-line error naming ``student``."""
    from nas.distill.mobilebert import check_pair

    try:
        check_pair(space.config, arch, teacher)
    except NasError as err:
        raise ConfigError(f"student: {err}") from None


class MobileBertContext(TaskContext[MobileBertConfig]):
    """Stages 1–2 (:class:`recipes.common.TaskContext`) plus the student's parts:
    initialisation from the teacher and the transfer's batch sources."""

    stage_count = 8

    def __init__(self, config: MobileBertConfig, run: Any, options: Any) -> None:
        super().__init__(config, run, options, eval_batch_size=config.prediction.batch_size)

    def prepare(self) -> MobileBertContext:
        super().prepare()
        self.space = self.cfg.student.build_space(self.train.num_labels)
        return self

    @classmethod
    def check_config(cls, config: MobileBertConfig) -> None:
        """Before any stage: the student's default architecture fits the teacher's shape
        (read from its configuration: fine-tuning keeps it), :meth:`check_teacher`."""
        from transformers import AutoConfig

        from nas.hf import space_kwargs_from_hf
        from nas.teacher import resolve_teacher

        teacher = AutoConfig.from_pretrained(resolve_teacher(config.teacher),
                                             local_files_only=True)
        space = config.student.build_space(2)
        check_student(space, config.student.default_arch(space), space_kwargs_from_hf(teacher)[1])

    def check_teacher(self, space: Any, arch: Any) -> None:
        """Before training an arm: :func:`check_student` against the task's teacher."""
        check_student(space, arch, self.task_teacher()[0].config)

    def init_student(self, model: Any) -> None:
        """The word table from the pre-trained teacher's principal components (with
        ``student.init: teacher-pca``), then every teacher tensor that fits (position and
        token-type tables, pooler, classifier: :func:`~nas.distill.mobilebert.
        copy_from_teacher`)."""
        from nas.distill.init import init_embeddings, teacher_embedding_init
        from nas.distill.mobilebert import copy_from_teacher

        if self.cfg.student.init == "teacher-pca":
            if not hasattr(self, "_pca"):
                self._pca = teacher_embedding_init(self.teacher.model_dir,
                                                   model.word_embeddings().shape[1])
            init_embeddings(model, self._pca)
        copy_from_teacher(model, self.task_teacher()[1])

    def transfer_task(self, data: Any, batch_size: int, *, with_test: bool = False) -> Any:
        """The :class:`evaluators.transfer.TransferTask` of ``data``."""
        from evaluators.transfer import TransferTask
        from nas.distill.general import seeded_batches, token_lengths

        lengths = token_lengths(self.tokenizer, data, self.max_seq_len)
        return TransferTask(
            teacher=self.task_teacher()[1],
            batches=lambda stage: seeded_batches(data, self.tokenizer, batch_size,
                                                 self.max_seq_len, self.seed, stage, lengths),
            steps_per_epoch=math.ceil(len(data) / batch_size), logits=self.teacher_logits(data),
            test_batches=self.report_batches if with_test else None, init=self.init_student,
            **self.scoring_fields())

    def evaluator(self, space: Any, data: Any, workdir: Path, *, transfer_epochs: int | None = None,
                  prediction_epochs: int | None = None, with_test: bool = False) -> Any:
        """The ``progressive-transfer`` evaluator with this run's settings (epochs
        overridden for the search's reduced budget)."""
        from evaluators.transfer import TransferEvaluator

        cfg = self.cfg
        pkt, pred = loop_settings(cfg.pkt), loop_settings(cfg.prediction)
        if transfer_epochs is not None:
            pkt = replace(pkt, epochs=transfer_epochs)
        if prediction_epochs is not None:
            pred = replace(pred, epochs=prediction_epochs)
        return TransferEvaluator(
            space, self.transfer_task(data, pkt.batch_size, with_test=with_test), pkt, pred,
            transfer=cfg.transfer, weights=cfg.pkt.weights,
            lower_lr_scale=cfg.pkt.lower_lr_scale, temperature=cfg.prediction.temperature,
            seed=cfg.seed, workdir=workdir, latency_repeats=cfg.latency_repeats,
            progress=self.options.progress)


# ------------------------------------------------------------------------- method


@register_method("mobilebert")
class MobileBert(Recipe[MobileBertConfig]):
    """``method: mobilebert`` — progressive knowledge transfer into a bottleneck student,
    optionally after a grid search under a parameter budget."""

    config_class = MobileBertConfig
    context_class = MobileBertContext
    searchers = ("tpe", "random", "nsga2", "lanas", "gp")

    def default_searcher(self) -> str | None:
        return None  # without --searcher (or ``searcher:``) the student is ``student.arch``

    def stages(self, ctx: MobileBertContext) -> dict[str, Any]:
        config = ctx.cfg
        searcher = self.check_searcher(ctx.options.searcher or config.searcher)
        metrics: dict[str, Any] = {"transfer": config.transfer}
        space, arch = ctx.space, config.student.default_arch(ctx.space)
        if searcher is not None:
            summary, space, arch = self.grid_search(ctx, searcher)
            metrics["search"] = summary  # not under the searcher's name: the report's
            # "random" rows are retrained models, these are reduced-budget trials
        metrics["searched"] = self.train_student(ctx, space, arch, "student", export=True)
        metrics["arms"] = [self.train_student(ctx, config.arm_space(a["arch"],
                                                                    ctx.train.num_labels),
                                              None, a["tag"])
                           for a in config.compare]
        return metrics

    def done_fields(self, config: MobileBertConfig, options: Any) -> dict[str, Any]:
        return {"searcher": self.check_searcher(options.searcher or config.searcher),
                "transfer": config.transfer}

    # -- step 3 --------------------------------------------------------------------
    def grid_search(self, ctx: MobileBertContext, name: str) -> tuple[dict[str, Any], Any, Any]:
        """The grid search: every trial is this recipe's transfer on a reduced budget."""

        from recipes.common import run_study_stage

        cfg = ctx.cfg
        space, evaluator = _study_objective(ctx, name)
        ctx.stage(3, "%s grid search over %s (%d architectures), each trial a %s transfer on "
                  "%d examples", name, ", ".join(cfg.search.choices), space.size(),
                  cfg.transfer, cfg.search.max_train_examples)
        found = run_study_stage(ctx, searcher=name, space=space,
                                evaluator=evaluator, settings=cfg.multi_trial,
                                parts=ctx.worker_parts(_study_objective, name))
        ctx.seconds["search"] = found.seconds
        done = found.trials
        if not done:
            raise NasError(f"the {name} search finished no trial (see {ctx.run.path}/trials); "
                           "loosen multi_trial.max_params or add trials")
        # the most accurate trial; ties (and a Pareto front) broken by the cost objectives
        best = max(done, key=lambda t: (t.values[0], *(-v for v in t.values[1:])))
        arch = space.validate(best.user_attrs["arch"])
        runs = [{"trial": t.number, "arch": t.user_attrs["arch"],
                 "dev": t.user_attrs.get("metrics") or {}, "costs": t.user_attrs["costs"]}
                for t in done]
        summary = {"searcher": name, "study": found.spec.study_name,
                   "n_trials": found.spec.n_trials, "runs": runs, "best_trial": best.number,
                   "best_arch": dict(arch), **mean_std([t.values[0] for t in done])}
        ctx.run.log("search", best=best.number, arch=dict(arch), seconds=found.seconds)
        return summary, space, arch

    # -- steps 4 to 7 ----------------------------------------------------------------
    def train_student(self, ctx: MobileBertContext, space: Any, arch: Any, tag: str,
                      export: bool = False) -> dict[str, Any]:
        """Transfer, prediction-layer distillation, evaluation (and export) of one student;
        its files live in ``RUN/`` (the student) or ``RUN/arms/<tag>/``."""
        from nas.builder import build_child
        from nas.distill.mobilebert import (
            remove_stage_weights,
            run_prediction,
            run_transfer,
            transfer_stages,
        )

        cfg, run = ctx.cfg, ctx.run
        folder = run.path if tag == "student" else run.path / "arms" / tag
        folder.mkdir(parents=True, exist_ok=True)
        arch = arch if arch is not None else cfg.student.default_arch(space)
        done = run.load_json("student.json" if tag == "student" else f"arms/{tag}/student.json")
        if done is not None and (not export or (run.path / "export_hf" / "config.json").is_file()):
            return done
        ctx.check_teacher(space, arch)
        evaluator = ctx.evaluator(space, ctx.train, folder)
        task = evaluator.task
        seed_stage(cfg.seed, f"student-init:{tag}")
        model = build_child(space, arch)
        ctx.init_student(model)
        weights = folder / "student.safetensors"
        stages = transfer_stages(cfg.transfer, int({**space.config, **arch}["num_hidden_layers"]))
        if not weights.is_file():
            def logged(stage: Any, result: Any) -> None:
                ctx.seconds[f"{tag}:{stage.name}"] = round(result.seconds, 1)
                run.log("transfer", tag=tag, name=stage.name, steps=result.steps,
                        seconds=round(result.seconds, 1), history=result.history)

            ctx.stage(4, "(%s) %s transfer, %d stage(s) of %d steps per epoch", tag,
                      cfg.transfer, len(stages), task.steps_per_epoch)
            run_transfer(model, task.teacher, stages, evaluator.transfer_settings, task.batches,
                         task.steps_per_epoch, weights=cfg.pkt.weights,
                         lower_lr_scale=cfg.pkt.lower_lr_scale, seed=cfg.seed, workdir=folder,
                         progress=ctx.options.progress, on_stage=logged)
            from nas.evaluate import classify

            def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
                dev = classify(model, ctx.dev_batches, ctx.dev.metric)
                log.info("prediction epoch %d (%s): loss %.4f, dev %s", epoch + 1, tag,
                         means["loss"], dev)
                return {"dev": dev}

            ctx.stage(5, "(%s) prediction-layer distillation", tag)
            result = run_prediction(
                model, task.logits, evaluator.prediction_settings, task.batches("prediction"),
                task.steps_per_epoch, temperature=cfg.prediction.temperature, seed=cfg.seed,
                checkpoint=folder / "prediction.checkpoint.safetensors",
                progress=ctx.options.progress, on_epoch_end=dev_score)
            save_weights(model, weights)
            (folder / "prediction.checkpoint.safetensors").unlink(missing_ok=True)
            remove_stage_weights(folder, stages)
            ctx.seconds[f"{tag}:prediction"] = round(result.seconds, 1)
            run.log("prediction", tag=tag, steps=result.steps, seconds=round(result.seconds, 1),
                    history=result.history)
        else:
            load_weights(model, weights)
        ctx.stage(6, "(%s) evaluation on %s", tag, ctx.evaluated_splits)
        seconds = [e["seconds"] for e in run.read_log() if e.get("tag") == tag
                   and e["stage"] in ("transfer", "prediction")]
        recipe = {"transfer": cfg.transfer, "stages": [s.name for s in stages],
                  "train_examples": len(ctx.train), "lower_lr_scale": cfg.pkt.lower_lr_scale,
                  "weights": asdict(cfg.pkt.weights)}
        row = ctx.finish(tag, space, arch, model=model, stage=7,
                         exports={"export": "native", "export_hf": "hf"} if export else {},
                         extra={"shape": {k: v for k, v in {**space.config, **arch}.items()
                                          if k not in ("family", "num_labels")},
                                "train_seconds": round(sum(seconds), 1), "recipe": recipe},
                         record="student.json" if tag == "student"
                         else f"arms/{tag}/student.json")
        run.log("student", tag=tag, **{k: row[k] for k in ("dev", "params", "flops")},
                **({ctx.report_split: row[ctx.report_split]} if ctx.report_split != "dev"
                   else {}))
        return row

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        from nas.teacher import metric_score
        from searchers.report import study_sections

        student = metrics.get("searched", {})
        if not student.get("recipe"):
            return [], []
        metric, split = metrics.get("metric", "accuracy"), metrics.get(
            "evaluation", {}).get("split", "dev")
        lines = ["", "## MobileBERT recipe", "",
                 f"- transfer: {student['recipe']['transfer']} (stages: "
                 f"{', '.join(student['recipe']['stages']) or 'none'}), then prediction-layer "
                 "distillation", "",
                 f"| model | shape | {split} (%) | params | MFLOPs | CPU ms b1 / b32 |",
                 "|---|---|---|---|---|---|"]
        for row in [student, *metrics.get("arms", [])]:
            score = metric_score(row[split], metric) if row.get(split) else float("nan")
            lat, v = row["latency"], row["shape"]
            lines.append(f"| {row['tag']} | {_shape_line(v)} | {100 * score:.2f} | "
                         f"{row['params'] / 1e6:.2f}M | {row['flops'] / 1e6:.1f} | "
                         f"{lat['batch1']['median_ms']:.2f} / {lat['batch32']['median_ms']:.1f} |")
        more, pictures = study_sections(run.path, report_reference(metrics),
                                           into=metrics) if (
            run.path / "study.json").is_file() else ([], [])
        return lines + more, pictures


def _shape_line(v: dict[str, Any]) -> str:
    """``L6 H384 intra 192 A12 F4×512 shared_bottleneck no_norm relu``."""
    return (f"L{v['num_hidden_layers']} H{v['hidden_size']} intra {v['intra_bottleneck_size']} "
            f"A{v['num_attention_heads']} F{v['num_feedforward_networks']}×"
            f"{v['intermediate_size']} {v['attention_input']} {v['normalization_type']} "
            f"{v['hidden_act']}")


def _study_objective(ctx: MobileBertContext, searcher: str) -> tuple[Any, Any]:
    """The grid search's space (``search.choices``) and evaluator: this recipe's transfer
    on the search subset, plus the cost objectives ``multi_trial`` asks for."""
    from recipes.common import seeded_subset
    from searchers.loop import study_evaluator

    cfg = ctx.cfg
    space = cfg.student.build_space(ctx.train.num_labels, cfg.search.choices)
    data = seeded_subset(ctx.train, cfg.search.max_train_examples, cfg.seed, "search-data",
                         "search.max_train_examples")
    inner = ctx.evaluator(space, data, ctx.run.path / "trial_weights",
                          transfer_epochs=cfg.search.transfer_epochs,
                          prediction_epochs=cfg.search.prediction_epochs)
    return space, study_evaluator(inner, space, cfg.multi_trial, searcher,
                                  seq_len=cfg.data.max_seq_len)


__all__ = ["TINY_CHOICES", "MobileBert", "MobileBertConfig"]
