"""TinyBERT (Jiao et al., 2020; docs/reference.md#tinybert): a small Transformer distilled from a
BERT teacher layer by layer, in two stages, with data augmentation.

The method's steps, in order (:meth:`TinyBert.run`); each is a call into shared parts:

1. **teacher** — the teacher fine-tuned on the task (:func:`nas.teacher.finetune_teacher`,
   cached by its settings: AdaBERT runs with the same settings share it);
2. **data** — a seeded subset of the task's training set, ``dev`` and the report split
   (``test`` when the task has one: SST-2's sentences share no phrase with train);
3. **general distillation** — the student learns the *pre-trained* (not fine-tuned)
   teacher's embeddings, pre-softmax attention scores and hidden states on unlabeled
   text (WikiText-2 plus the task's training sentences without labels), student layer m
   matched to teacher layer g(m) (uniform map), through learned width maps where the
   student is narrower; cached by its settings, so every run of any seed with the same
   student starts from it;
4. **augmentation** — TinyBERT's word replacement of the training subset
   (:func:`nas.augment.augment_task`, what ``nas augment`` runs; cached);
5. **task distillation, intermediate layers** — the same losses on the augmented set,
   now against the fine-tuned teacher;
6. **task distillation, prediction layer** — soft cross-entropy against the fine-tuned
   teacher's logits (cached per data set);
7. **evaluation** — ``dev`` and the report split; parameters, FLOPs, latency;
8. **export** — the student alone (the width maps are dropped) as a native export and
   as a stock ``transformers`` ``BertForSequenceClassification`` (``export_hf``).

The ablations of TinyBERT's Table 6 are switches of the configuration, one ``--set``
each: ``losses.attention=false``, ``losses.hidden=false``, ``prediction.distill=false``
(the prediction stage then fits the gold labels), ``augment.enabled=false`` and
``general.enabled=false``. The loss switches act on task distillation; general
distillation always uses every intermediate loss, so all arms share its cache entry.

Every stage starts from a seed derived from the run's seed and its name
(:mod:`nas.seeding`); general distillation has its own seed (``general.seed``), like the
teacher's fine-tune, because its result is shared by runs of every seed. A finished
stage is never redone, and ``--resume`` continues an unfinished one from its checkpoint.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from nas.augment import AugmentSettings
from nas.cache import load_weights, save_weights
from nas.config import ConfigError, check_fields
from nas.device import table_rows
from nas.distill.init import EMBEDDING_INITS
from nas.distill.task import PredictionSettings
from nas.distill.tinybert import GeneralSettings, general_distillation, initial_student
from nas.methods import register_method
from nas.seeding import seed_stage
from nas.train import TrainSettings
from recipes.common import MethodConfig, Recipe, TaskContext

log = logging.getLogger("nas.tinybert")

LAYER_MAPPINGS = ("uniform", "top", "bottom")


# ---------------------------------------------------------------------------- config


@dataclass
class StudentSettings:
    """The student's shape: a registered space of the ``bert`` family (``tinybert`` is
    TinyBERT-4, L4 H312 A12 FFN1200) with overrides in HF's names (``hidden_size``...).
    ``init``: ``teacher-pca`` starts the word embeddings from the teacher's, projected on
    their top principal components (the rest is random); ``random``: all random."""

    space: str = "tinybert"
    config: dict = field(default_factory=dict)
    init: str = "teacher-pca"

    def __post_init__(self) -> None:
        check_fields([("space", bool(self.space.strip()), "a space name"),
                      ("init", self.init in EMBEDDING_INITS, " or ".join(EMBEDDING_INITS))], self)

    def build_space(self, num_labels: int) -> Any:
        from nas.space import get_space

        space = get_space(self.space, num_labels=num_labels, **self.config)
        if space.config.get("family") != "bert" or not space.is_fixed:
            raise ConfigError(f"student.space {self.space!r} is not a fixed design of the bert "
                              "family; use tinybert, bert (with a shape in student.config) or "
                              "another bert preset")
        if space.config.get("fit_size"):
            raise ConfigError("student.config.fit_size: TinyBERT's width maps belong to the "
                              "recipe, not to the student; remove the key")
        return space


@dataclass
class LossSettings:
    """Which intermediate losses task distillation uses (TinyBERT's Table 6 ablations)."""

    embedding: bool = True
    attention: bool = True
    hidden: bool = True

    def terms(self) -> Any:
        from nas.distill.tinybert import Terms

        return Terms(self.embedding, self.attention, self.hidden)


@dataclass
class IntermediateSettings(TrainSettings):
    """Task distillation of the intermediate layers (the shared loop's settings)."""

    lr: float = 1e-4
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0


@dataclass
class TinyBertPrediction(PredictionSettings):
    """Prediction-layer distillation; ``distill: false`` fits the gold labels instead (the
    ablation)."""

    distill: bool = True


@dataclass
class TinyBertConfig(MethodConfig):
    student: StudentSettings = field(default_factory=StudentSettings)
    layer_mapping: str = "uniform"
    general: GeneralSettings = field(default_factory=GeneralSettings)
    augment: AugmentSettings = field(default_factory=AugmentSettings)
    losses: LossSettings = field(default_factory=LossSettings)
    intermediate: IntermediateSettings = field(default_factory=IntermediateSettings)
    prediction: TinyBertPrediction = field(default_factory=TinyBertPrediction)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("layer_mapping", self.layer_mapping in LAYER_MAPPINGS,
                       " or ".join(LAYER_MAPPINGS))], self)
        self.student.build_space(num_labels=2)  # the shape's own checks, before any stage



# --------------------------------------------------------------------- the context


class TinyBertContext(TaskContext[TinyBertConfig]):
    """Stages 1–2 (:class:`recipes.common.TaskContext`) and the student's space."""

    stage_count = 8

    def __init__(self, config: TinyBertConfig, run: Any, options: Any) -> None:
        super().__init__(config, run, options, eval_batch_size=config.prediction.batch_size)

    def prepare(self) -> TinyBertContext:
        super().prepare()
        self.space = self.cfg.student.build_space(self.train.num_labels)
        return self

    @classmethod
    def check_config(cls, config: TinyBertConfig) -> None:
        """Before any stage: TinyBERT compares attention maps head by head (equal head
        counts, or no L_attn) and maps M student layers onto N >= M teacher layers."""
        from transformers import AutoConfig

        from nas.teacher import resolve_teacher

        cfg = config
        teacher = AutoConfig.from_pretrained(resolve_teacher(cfg.teacher), local_files_only=True)
        student = cfg.student.build_space(2).config
        heads = teacher.num_attention_heads
        if student["num_attention_heads"] != heads and (cfg.losses.attention
                                                        or cfg.general.enabled):
            raise ConfigError(
                f"student.config.num_attention_heads is {student['num_attention_heads']}, the "
                f"teacher has {heads}: TinyBERT's attention loss compares heads one to one; "
                f"give the student {heads} heads (or set losses.attention=false and "
                "general.enabled=false)")
        if student["num_hidden_layers"] > teacher.num_hidden_layers:
            raise ConfigError(
                f"student.config.num_hidden_layers is {student['num_hidden_layers']}, the "
                f"teacher has {teacher.num_hidden_layers}: each student layer learns from "
                "its own teacher layer; use at most as many layers as the teacher")


# ------------------------------------------------------------------------- method


@register_method("tinybert")
class TinyBert(Recipe[TinyBertConfig]):
    """``method: tinybert`` — general and task distillation of a fixed student shape."""

    config_class = TinyBertConfig
    context_class = TinyBertContext
    searchers = ()  # a fixed design: nothing to search

    def stages(self, ctx: TinyBertContext) -> dict[str, Any]:
        student = ctx.run.load_json("student.json")
        if student is None or not (ctx.run.path / "export_hf" / "config.json").is_file():
            with ctx.timed("general"):
                general = self.general(ctx)
            with ctx.timed("augment"):
                task_data = self.augment(ctx)
            self.intermediate(ctx, task_data, general)
            self.prediction(ctx, task_data)
            with ctx.timed("evaluate_export"):
                student = self.evaluate_and_export(ctx, general, task_data)
        return {"searched": student}

    # -- stage 3 -------------------------------------------------------------------
    def general(self, ctx: TinyBertContext) -> dict[str, Any]:
        """The general-distilled student (cached), or a note that the arm skips it."""
        if not ctx.cfg.general.enabled:
            ctx.stage(3, "general distillation off (general.enabled=false)")
            return {"enabled": False}
        cfg = ctx.cfg
        weights, record = general_distillation(
            cfg.general, teacher=cfg.teacher, space=ctx.space, space_name=cfg.student.space,
            init=cfg.student.init, layer_mapping=cfg.layer_mapping, task=ctx.task,
            task_train=ctx.full_train, data_dir=ctx.options.data_dir, progress=ctx.progress)
        ctx.run.log("general", **{k: v for k, v in record.items() if k != "history"})
        return {"enabled": True, "weights": str(weights), **record}

    # -- stage 4 -------------------------------------------------------------------
    def augment(self, ctx: TinyBertContext) -> Any:
        """The task distillation data: the augmented training subset, or the subset."""
        from nas.augment import augmented_training_data

        a = ctx.cfg.augment
        if not a.enabled:
            ctx.stage(4, "augmentation off: %d training examples", len(ctx.train))
            return ctx.train
        ctx.stage(4, "augmentation of %d examples x %d (cached)", len(ctx.train), a.n)
        data, record = augmented_training_data(ctx.train, a, ctx.cfg.teacher, ctx.max_seq_len,
                                               ctx.progress)
        ctx.run.log("augment", **record)
        return data

    # -- stage 5 -------------------------------------------------------------------
    def intermediate(self, ctx: TinyBertContext, data: Any, general: dict[str, Any]) -> None:
        """Task distillation of the intermediate layers; writes
        ``after_intermediate.safetensors`` (the student with its width maps)."""
        from nas.distill.losses import layer_map
        from nas.distill.tinybert import intermediate_loss

        cfg, out = ctx.cfg, ctx.run.path / "after_intermediate.safetensors"
        if out.is_file():
            return
        teacher_space, teacher = ctx.task_teacher()
        teacher_dim = teacher_space.config["hidden_size"]
        if general.get("enabled"):
            model = initial_student(ctx.space, teacher_dim)
            load_weights(model, Path(general["weights"]))
        else:
            seed_stage(cfg.seed, "student-init")
            model = initial_student(ctx.space, teacher_dim, cfg.teacher, cfg.student.init)
        terms = cfg.losses.terms()
        if not terms.any:
            ctx.stage(5, "intermediate-layer distillation off (no intermediate loss)")
            save_weights(model, out)
            return
        mapping = layer_map(ctx.space.config["num_hidden_layers"],
                            teacher_space.config["num_hidden_layers"], cfg.layer_mapping)

        def loss(net: Any, batch: dict[str, torch.Tensor]) -> Any:
            with torch.no_grad():
                t = teacher(batch, record=terms.records)
            return intermediate_loss(net(batch, terms.records), t, model.fits, mapping, terms)

        ctx.stage(5, "intermediate-layer distillation (%s; layers %s), %d rows",
                  ", ".join(terms.records), mapping, len(data))
        ctx.fit_stage("intermediate", model, cfg.intermediate, data, loss, out=out,
                      log_fields={"mapping": mapping})

    # -- stage 6 -------------------------------------------------------------------
    def prediction(self, ctx: TinyBertContext, data: Any) -> None:
        """Prediction-layer distillation (or, as the ablation, gold labels); writes
        ``student.safetensors`` (the student alone)."""
        from nas.distill.tinybert import prediction_loss
        from nas.evaluate import classify

        s, out = ctx.cfg.prediction, ctx.run.path / "student.safetensors"
        if out.is_file():
            return
        model = initial_student(ctx.space, ctx.task_teacher()[0].config["hidden_size"])
        load_weights(model, ctx.run.path / "after_intermediate.safetensors")
        student = model.student
        logits = ctx.teacher_logits(data) if s.distill else None

        def loss(net: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            out = net(batch).logits
            if logits is None:
                return F.cross_entropy(out, batch["labels"])
            return prediction_loss(out, table_rows(logits, batch["index"], out), s.temperature)

        def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            dev = classify(student, ctx.dev_batches, ctx.dev.metric)
            log.info("prediction epoch %d: loss %.4f, dev %s", epoch + 1, means["loss"], dev)
            return {"dev": dev}

        ctx.stage(6, "prediction-layer %s, %d rows", "distillation" if s.distill
                  else "training on gold labels (ablation)", len(data))
        ctx.fit_stage("prediction", student, s, data, loss, out=out, on_epoch_end=dev_score,
                      log_fields={"distill": s.distill})

    # -- stages 7 and 8 ---------------------------------------------------------------
    def evaluate_and_export(self, ctx: TinyBertContext, general: dict[str, Any],
                            data: Any) -> dict[str, Any]:
        from nas.builder import build_child

        cfg, run = ctx.cfg, ctx.run
        ctx.stage(7, "evaluation on %s", ctx.evaluated_splits)
        student = build_child(ctx.space)
        load_weights(student, run.path / "student.safetensors")
        shape = {k: ctx.space.config[k] for k in ("num_hidden_layers", "hidden_size",
                                                  "num_attention_heads", "intermediate_size",
                                                  "vocab_size")}
        # training time of the task stages, from their log rows (a resumed run logs each
        # stage once, when it finishes)
        stages = {e["stage"]: e["seconds"] for e in run.read_log()
                  if e["stage"] in ("intermediate", "prediction")}
        recipe = {
            "general": {k: general.get(k) for k in ("enabled", "texts", "tokens", "steps",
                                                     "train_seconds", "from_cache", "key")
                        if k in general},
            "task_rows": len(data), "train_examples": len(ctx.train),
            "augmented": cfg.augment.enabled, "losses": asdict(cfg.losses),
            "prediction_distill": cfg.prediction.distill, "stage_seconds": stages,
        }
        row = ctx.finish("student", ctx.space, None, model=student, stage=8,
                         exports={"export": "native", "export_hf": "hf"},
                         extra={"shape": shape, "space": cfg.student.space,
                                "train_seconds": round(sum(stages.values()), 1),
                                "recipe": recipe}, record="student.json")
        run.log("student", **{k: row[k] for k in ("dev", "params", "flops")},
                **({ctx.report_split: row[ctx.report_split]} if ctx.report_split != "dev"
                   else {}))
        return row

    def report_sections(self, run: Any, metrics: dict[str, Any]) -> tuple[list[str],
                                                                          list[Path]]:
        student = metrics.get("searched", {})
        recipe = student.get("recipe")
        if not recipe:
            return [], []
        general, shape = recipe["general"], student.get("shape", {})
        lines = ["", "## TinyBERT recipe", "",
                 f"- student: {student.get('space')} L{shape.get('num_hidden_layers')} "
                 f"H{shape.get('hidden_size')} A{shape.get('num_attention_heads')} "
                 f"FFN{shape.get('intermediate_size')}",
                 "- general distillation: " + (
                     f"{general.get('texts')} texts, {general.get('steps')} steps, "
                     f"{general.get('train_seconds')} s" if general.get("enabled") else "off"),
                 f"- task data: {recipe['task_rows']} rows from {recipe['train_examples']} "
                 f"training examples ({'augmented' if recipe['augmented'] else 'no augmentation'})",
                 "- intermediate losses: " + (", ".join(k for k, v in recipe["losses"].items()
                                                        if v) or "none"),
                 "- prediction layer: " + ("soft cross-entropy against the teacher"
                                           if recipe["prediction_distill"] else "gold labels"),
                 "- task distillation wall time: " + ", ".join(
                     f"{k} {v} s" for k, v in recipe["stage_seconds"].items())]
        return lines, []


__all__ = ["TinyBert", "TinyBertConfig"]
