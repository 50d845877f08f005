"""TinyBERT (Jiao et al., 2020; SPEC §5): a small Transformer distilled from a BERT
teacher layer by layer, in two stages, with data augmentation.

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

import numpy as np
import torch
from torch.nn import functional as F

from nas.augment import AugmentSettings
from nas.cache import cached_entry, load_weights, save_weights, settings_key
from nas.config import ConfigError, check_fields
from nas.distill.general import TextDistillSettings, seeded_batches, text_corpus, token_lengths
from nas.distill.init import EMBEDDING_INITS
from nas.distill.task import PredictionSettings, evaluate_student, export_student
from nas.methods import register_method
from nas.seeding import seed_stage
from nas.train import TrainSettings, loop_settings
from recipes.common import MethodConfig, Recipe, TaskContext, load_typed

log = logging.getLogger("nas.tinybert")

LAYER_MAPPINGS = ("uniform", "top", "bottom")
#: Bump when general distillation changes, so that cached students are not reused.
GENERAL_VERSION = 1


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
class GeneralSettings(TextDistillSettings):
    """General distillation (TinyBERT §3.2) on unlabeled text; ``enabled: false`` skips
    it (the ablation)."""

    no_text = "general distillation needs text"

    enabled: bool = True
    checkpoint_every: int = 200


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


def load_config(path: str | Path, overrides: Any = ()) -> TinyBertConfig:
    """A TinyBERT experiment file's typed configuration (``method: tinybert`` required)."""
    return load_typed(path, TinyBert, overrides)


# ------------------------------------------------------------- general distillation


def general_distillation(cfg: TinyBertConfig, space: Any, task_train: Any,
                         data_dir: str | None, progress: bool) -> tuple[Path, dict[str, Any]]:
    """Stage 3: the general-distilled student (with its width maps), cached.

    Returns the weights file (a :class:`~nas.distill.tinybert.DistillStudent` state) and
    the result record. The cache key hashes the pre-trained teacher's identity, the
    student's shape and initialisation, the text and the settings; a finished entry is
    found again without loading anything, an interrupted one resumes from its checkpoint.
    """
    from nas.cache import cache_root
    from nas.teacher import resolve_teacher, teacher_identity
    from nas.tokenization import load_tokenizer

    g = cfg.general
    tokenizer = load_tokenizer(resolve_teacher(cfg.teacher))  # the pre-trained teacher's
    corpus = text_corpus(tokenizer, task=cfg.task, task_train=task_train, corpus=g.corpus,
                         splits=g.corpus_splits, task_sentences=g.task_sentences,
                         max_texts=g.max_texts, max_seq_len=g.max_seq_len, seed=g.seed,
                         data_dir=data_dir)
    teacher_id = teacher_identity(cfg.teacher)
    settings = {k: v for k, v in asdict(g).items() if k != "enabled"}
    key = settings_key(
        teacher=teacher_id, space=cfg.student.space, student=space.config,
        init=cfg.student.init, text=corpus.fingerprint, settings=settings,
        layer_mapping=cfg.layer_mapping, version=GENERAL_VERSION)
    folder = cache_root() / "general" / f"{cfg.student.space}-{key}"
    record, _ = cached_entry(folder, "stage 3/8: general distillation", lambda: _general_train(
        cfg, space, corpus, tokenizer, folder, key, teacher_id, settings, progress))
    return folder / "student.safetensors", record


def _general_train(cfg: TinyBertConfig, space: Any, corpus: Any, tokenizer: Any,
                   folder: Path, key: str, teacher_id: str, settings: dict[str, Any],
                   progress: bool) -> dict[str, Any]:
    """The training of stage 3 (see :func:`general_distillation`); returns the record."""
    from nas.distill.losses import layer_map
    from nas.distill.tinybert import DistillStudent, Terms, intermediate_loss
    from nas.hf import load_teacher_as_design
    from nas.teacher import resolve_teacher
    from nas.train import Trainer

    g = cfg.general
    seed_stage(g.seed, "general")
    teacher_space, teacher = load_teacher_as_design(resolve_teacher(cfg.teacher))
    model = _initial_student(cfg, space, teacher_space.config["hidden_size"])
    for p in teacher.parameters():
        p.requires_grad_(False)
    mapping = layer_map(space.config["num_hidden_layers"],
                        teacher_space.config["num_hidden_layers"], cfg.layer_mapping)
    terms = Terms()
    lengths = token_lengths(tokenizer, corpus, g.max_seq_len)
    steps_per_epoch = -(-len(corpus) // g.batch_size)

    def loss(net: DistillStudent, batch: dict[str, torch.Tensor]) -> Any:
        with torch.no_grad():
            t = teacher(batch, record=terms.records)
        return intermediate_loss(net(batch, terms.records), t, model.fits, mapping, terms)

    log.info("stage 3/8: general distillation on %d texts (%s), %d steps per epoch",
             len(corpus), corpus.sources[0], steps_per_epoch)
    result = Trainer(model, loop_settings(g),
                     seeded_batches(corpus, tokenizer, g.batch_size, g.max_seq_len, g.seed,
                                    "general", lengths),
                     steps_per_epoch, loss, checkpoint=folder / "checkpoint.safetensors",
                     progress=progress, desc="general distillation").fit()
    save_weights(model, folder / "student.safetensors")
    return {"key": key, "teacher": resolve_teacher(cfg.teacher), "teacher_id": teacher_id,
            "texts": len(corpus), "tokens": int(lengths.sum()), "source": corpus.sources[0],
            "steps": result.steps, "train_seconds": round(result.seconds, 1),
            "history": result.history, "mapping": mapping, "settings": settings}


def _initial_student(cfg: TinyBertConfig, space: Any, teacher_dim: int,
                     pca_init: bool = True) -> Any:
    """A fresh student with its width maps (call after seeding the stage); with
    ``pca_init`` and ``student.init: teacher-pca``, word embeddings from the pre-trained
    teacher's principal components."""
    from nas.builder import build_child
    from nas.distill.init import init_embeddings, teacher_embedding_init
    from nas.distill.tinybert import DistillStudent

    student = build_child(space)
    if pca_init and cfg.student.init == "teacher-pca":
        init_embeddings(student, teacher_embedding_init(cfg.teacher,
                                                        space.config["hidden_size"]))
    return DistillStudent(student, space.config["hidden_size"], teacher_dim)


# --------------------------------------------------------------------- the context


class TinyBertContext(TaskContext):
    """Stages 1–2 (:class:`recipes.common.TaskContext`) and the student's space."""

    stage_count = 8

    def __init__(self, config: TinyBertConfig, run: Any, options: Any) -> None:
        super().__init__(config, run, options, eval_batch_size=config.prediction.batch_size)

    def prepare(self) -> TinyBertContext:
        self._check_teacher_shape()
        super().prepare()
        self.space = self.cfg.student.build_space(self.train.num_labels)
        return self

    def _check_teacher_shape(self) -> None:
        """Before any stage: TinyBERT compares attention maps head by head (equal head
        counts, or no L_attn) and maps M student layers onto N >= M teacher layers."""
        from transformers import AutoConfig

        from nas.teacher import resolve_teacher

        cfg = self.cfg
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
class TinyBert(Recipe):
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
        weights, record = general_distillation(ctx.cfg, ctx.space, ctx.full_train,
                                               ctx.options.data_dir, ctx.progress)
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
            model = _initial_student(cfg, ctx.space, teacher_dim, pca_init=False)
            load_weights(model, Path(general["weights"]))
        else:
            seed_stage(cfg.seed, "student-init")
            model = _initial_student(cfg, ctx.space, teacher_dim)
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

        cfg, s, out = ctx.cfg, ctx.cfg.prediction, ctx.run.path / "student.safetensors"
        if out.is_file():
            return
        model = _initial_student(cfg, ctx.space, ctx.task_teacher()[0].config["hidden_size"],
                                 pca_init=False)
        load_weights(model, ctx.run.path / "after_intermediate.safetensors")
        student = model.student
        logits = ctx.teacher_logits(data) if s.distill else None

        def loss(net: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
            out = net(batch).logits
            if logits is None:
                return F.cross_entropy(out, batch["labels"])
            target = torch.from_numpy(np.asarray(logits[batch["index"].numpy()],
                                                 dtype=np.float32))
            return prediction_loss(out, target, s.temperature)

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
        row: dict[str, Any] = {"tag": "student",
                               **evaluate_student(ctx, ctx.space, None, student),
                               "shape": shape, "space": cfg.student.space}
        # training time of the task stages, from their log rows (a resumed run logs each
        # stage once, when it finishes)
        stages = {e["stage"]: e["seconds"] for e in run.read_log()
                  if e["stage"] in ("intermediate", "prediction")}
        row["train_seconds"] = round(sum(stages.values()), 1)
        row["recipe"] = {
            "general": {k: general.get(k) for k in ("enabled", "texts", "tokens", "steps",
                                                     "train_seconds", "from_cache", "key")
                        if k in general},
            "task_rows": len(data), "train_examples": len(ctx.train),
            "augmented": cfg.augment.enabled, "losses": asdict(cfg.losses),
            "prediction_distill": cfg.prediction.distill, "stage_seconds": stages,
        }
        ctx.stage(8, "export (native and hf)")
        export_student(ctx, ctx.space, None, student, {"export": "native", "export_hf": "hf"})
        run.save_json("student.json", row)
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


__all__ = ["TinyBert", "TinyBertConfig", "general_distillation", "load_config",
           "token_lengths"]
