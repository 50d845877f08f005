"""Mixed-vocabulary distillation (Zhao et al., 2019, "Extremely small BERT models from
mixed-vocabulary training"; docs/reference.md#mixed-vocabulary): a tiny student whose saving is
mostly in its embedding table, for classification and for sequence tagging (SNIPS intents and
slots).

The method's steps, in order (:meth:`MixedVocab.stages`); each is a call into shared parts:

1. **data** — train (a seeded subset when asked), dev (a seeded subset: SNIPS's dev is
   sorted by intent), the report split, and their overlap with train (logged);
2. **student vocabulary** — a ~5K WordPiece vocabulary trained on the unlabeled text
   with every printable ASCII character in it (:func:`nas.tokenization.train_student_vocab`),
   cached by its text and settings;
3. **stage I** — the pre-trained teacher continues MLM on *mixed-segmented* text
   (WikiText-2 plus the task's sentences; the pieces are in :mod:`nas.distill.mixedvocab`):
   each word is cut by the student vocabulary with probability p_SV = 0.5, else by the
   teacher's (``MixedSegmenter``, a seeded draw per word, recorded); student pieces enter
   through student embeddings (d_S) up-projected to d_T by a trainable affine map, and a
   masked piece is predicted over the vocabulary that segmented it (``MixedVocabMLM``).
   The MiniLM teacher has no MLM head: it starts from the tied input embeddings. Cached
   by its settings, resumable, logged (MLM loss and accuracy per vocabulary);
4. **stage II** — the student (``mixedvocab``: L6 H256 A4 with the built vocabulary's
   size) starts from the stage-I student embeddings and continues with MLM on
   student-vocabulary input only; ``stage2.distill_layers: true`` adds layer-wise
   distillation from the stage-I teacher reading the same pieces (off by default). Cached;
5. **task teacher** — the teacher with the same head as the student, fine-tuned on the
   task: for SNIPS a joint intent + slot head (cached here), for SST-2/MRPC the shared
   :func:`nas.teacher.finetune_teacher` (cached, shared with the other recipes);
6. **task stage** — the student with the task head, trained on gold labels plus the
   teacher's soft predictions (``task_stage.alpha``; for tagging, per *word*: the teacher and
   the student cut words differently, so their tag outputs are compared at each word's
   first piece);
7. **evaluation** — intent accuracy and ``conlleval`` slot F1 (SNIPS), accuracy (and F1
   for MRPC); parameters with the embedding table apart; batch-1 CPU latency; the same
   for the teacher, and the ratios;
8. **export** — native + ONNX (``model.onnx`` covers the tagging head), shipping the
   student vocabulary; ``nas predict DIR "play the latest song by adele"`` prints the
   intent and the slot spans. The joint head has no stock ``transformers`` class (its
   ``hf`` export is the remote-code format of the exports issue, not built here).

Ablations (one ``--set`` each): ``stage2.init=random`` (stage II from random embeddings
instead of stage I) and ``student.vocabulary=teacher`` (the same body on the teacher's
30K vocabulary: stages I skipped, stage II from random).

Every stage starts from a seed derived from its own seed and name (:mod:`nas.seeding`);
the cached stages (vocabulary, I, II, task teacher) have their own seeds: runs of every
seed share them. A finished stage is never redone; ``--resume`` continues an unfinished
one from its checkpoint.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from nas.cache import cache_root, cached_entry, load_weights, save_weights, settings_key
from nas.config import ConfigError, cap_ok, check_fields
from nas.distill import mixedvocab as mv
from nas.distill.general import check_text_settings
from nas.measure import paired_speedups
from nas.methods import register_method
from nas.rundir import RunDir
from nas.seeding import SEED_RANGE, is_seed, seed_stage
from nas.timing import TORCH_FP32
from nas.train import TrainSettings, loop_settings
from recipes.common import (
    DataSettings,
    MethodConfig,
    Recipe,
    TaskContext,
    seeded_subset,
)

log = logging.getLogger("nas.mixedvocab")

VOCABULARIES = ("student", "teacher")
INITS = ("stage1", "random")
#: Bump when a cached stage changes, so that old cache entries are not reused.
CACHE_VERSION = 1
STAGE2_VERSION = 2  # 2: the student starts from BERT's initialisation (bert_init)


# ---------------------------------------------------------------------------- config


@dataclass
class MixedVocabData(DataSettings):
    """The shared data settings, with dev capped to a *seeded* subset by default: SNIPS's
    dev file is sorted by intent, so its first rows would hold one intent."""

    dev_subset: str = "seeded"


@dataclass
class TextSettings:
    """The unlabeled text of the vocabulary and of both MLM stages: ``corpus`` (a corpus
    name or a .txt path) in ``corpus_splits`` plus the task's training sentences;
    ``max_texts`` keeps a seeded subset (of the corpus lines, before cutting)."""

    corpus: str = "wikitext2"
    corpus_splits: list = field(default_factory=lambda: ["valid", "test"])
    task_sentences: bool = True
    max_texts: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_text_settings(self, "no text")


@dataclass
class VocabSettings:
    """The student WordPiece vocabulary (docs/reference.md#mixed-vocabulary: ~5K, every ASCII
    character in it)."""

    size: int = 5000
    min_frequency: int = 2
    lowercase: bool = True

    def __post_init__(self) -> None:
        check_fields([("size", 200 <= self.size <= 100_000, "in [200, 100000]"),
                      ("min_frequency", self.min_frequency >= 1, "an integer >= 1")], self)


@dataclass
class MaskedLMSettings(TrainSettings):
    """What both MLM stages share (the shared loop's settings, the masking, the length)."""

    mask_probability: float = 0.15
    max_seq_len: int = 64
    seed: int = 0
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("mask_probability", 0.0 < self.mask_probability < 1.0, "in (0, 1)"),
                      ("max_seq_len", 8 <= self.max_seq_len <= 512, "in [8, 512]"),
                      ("seed", is_seed(self.seed), SEED_RANGE)], self)


@dataclass
class StageOneSettings(MaskedLMSettings):
    """Stage I: the teacher's MLM on mixed-segmented text, each word cut by the student
    vocabulary with probability ``p_student``."""

    p_student: float = 0.5
    lr: float = 5e-5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("p_student", 0.0 <= self.p_student <= 1.0, "in [0, 1]")], self)


@dataclass
class StageTwoSettings(MaskedLMSettings):
    """Stage II: the student's MLM on student-vocabulary input. ``init``: ``stage1`` (the
    stage-I student embeddings) or ``random`` (the ablation); ``distill_layers`` adds the
    MSE between each student layer (through a width map) and its uniformly mapped
    stage-I teacher layer, weighted by ``distill_weight``."""

    init: str = "stage1"
    distill_layers: bool = False
    distill_weight: float = 1.0
    lr: float = 5e-4

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("init", self.init in INITS, " or ".join(INITS)),
                      ("distill_weight", 0.0 < self.distill_weight < math.inf, "a number > 0")],
                     self)


@dataclass
class TeacherTaskSettings(TrainSettings):
    """The joint intent + slot teacher's fine-tune (tagging tasks; cached);
    ``max_train_examples`` keeps a seeded subset of the full training split."""

    max_train_examples: int | None = None
    seed: int = 0
    lr: float = 5e-5
    epochs: int = 3
    warmup_fraction: float = 0.1
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("max_train_examples", cap_ok(self.max_train_examples, 2),
                       "null (all rows) or an integer >= 2"),
                      ("seed", is_seed(self.seed), SEED_RANGE)], self)


@dataclass
class TaskSettings(TrainSettings):
    """The student's task stage: ``(1 − alpha)·CE(gold) + alpha·CE(teacher soft)`` at
    ``temperature``; ``distill: false`` trains on gold labels only."""

    distill: bool = True
    alpha: float = 0.5
    temperature: float = 1.0
    lr: float = 2e-4
    epochs: int = 3
    warmup_fraction: float = 0.1
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("alpha", 0.0 <= self.alpha <= 1.0, "in [0, 1]"),
                      ("temperature", 0.0 < self.temperature < math.inf, "a number > 0")], self)


@dataclass
class StudentSettings:
    """The student: a fixed design of the ``bert`` family (default ``mixedvocab``, L6 H256
    A4) with overrides in HF's names; its ``vocab_size`` is always the vocabulary's.
    ``vocabulary``: ``student`` (the built one) or ``teacher`` (the ablation)."""

    space: str = "mixedvocab"
    config: dict = field(default_factory=dict)
    vocabulary: str = "student"

    def __post_init__(self) -> None:
        check_fields([("space", bool(self.space.strip()), "a space name"),
                      ("vocabulary", self.vocabulary in VOCABULARIES, " or ".join(VOCABULARIES))],
                     self)
        for key in ("vocab_size", "head", "num_tags", "num_labels"):
            if key in self.config:
                raise ConfigError(f"student.config.{key}: set by the recipe (the vocabulary "
                                  "and the task); remove the key")

    def build_space(self, vocab_size: int, num_labels: int = 2, num_tags: int = 0) -> Any:
        from nas.space import get_space

        head = dict(head="joint", num_tags=num_tags) if num_tags else {}
        space = get_space(self.space, vocab_size=vocab_size, num_labels=num_labels,
                          **head, **self.config)
        if space.config.get("family") != "bert" or not space.is_fixed:
            raise ConfigError(f"student.space {self.space!r} is not a fixed design of the bert "
                              "family; use mixedvocab, bert (with a shape in student.config) "
                              "or another bert preset")
        return space


@dataclass
class MixedVocabConfig(MethodConfig):
    """The shared fields (:class:`~recipes.common.MethodConfig`) and a section per step;
    stage 5 reads ``teacher_task`` on a tagging task, ``teacher_finetune`` otherwise."""

    data: MixedVocabData = field(default_factory=MixedVocabData)
    text: TextSettings = field(default_factory=TextSettings)
    vocab: VocabSettings = field(default_factory=VocabSettings)
    stage1: StageOneSettings = field(default_factory=StageOneSettings)
    stage2: StageTwoSettings = field(default_factory=StageTwoSettings)
    teacher_task: TeacherTaskSettings = field(default_factory=TeacherTaskSettings)
    student: StudentSettings = field(default_factory=StudentSettings)
    task_stage: TaskSettings = field(default_factory=TaskSettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.student.vocabulary == "teacher" and self.stage2.distill_layers:
            raise ConfigError("stage2.distill_layers needs the stage-I teacher, which reads the "
                              "student vocabulary; it does not go with student.vocabulary="
                              "teacher")
        if self.student.vocabulary == "teacher" and self.stage2.init == "stage1":
            # the ablation arm has no stage I: its embeddings start random
            self.stage2.init = "random"
        self.student.build_space(vocab_size=1000)  # the shape's own checks, before any stage



# --------------------------------------------------------------------- the context


class MixedVocabContext(TaskContext[MixedVocabConfig]):
    """What the stages share: the data (stage 1; the teacher is fine-tuned later, in stage
    5, with the student's head), the pre-trained teacher's tokenizer and identity, the
    unlabeled text, and (from stage 2) the student's tokenizer."""

    stage_count = 8
    #: the student's tokenizer, set by the vocabulary stage (stage 2)
    student_tokenizer: Any

    def prepare(self) -> MixedVocabContext:
        from nas.teacher import resolve_teacher, teacher_identity
        from nas.tokenization import load_tokenizer

        self.prepare_data(1)
        self.tagging = self.train.tokens is not None
        if self.tagging and (self.train.tag_names is None or self.train.tags is None):
            raise ConfigError(f"task {self.task!r}: a tagging task without tags")
        self.teacher_dir = resolve_teacher(self.cfg.teacher)
        self.teacher_id = teacher_identity(self.cfg.teacher)
        self.teacher_tokenizer = load_tokenizer(self.teacher_dir)
        self.texts = mv.unlabeled_texts(self.cfg.text, self.full_train, self.options.data_dir)
        return self

    @property
    def metric(self) -> str:
        return "intent_accuracy+slot_f1" if self.tagging else self.dev.metric

    def reader(self, student: bool) -> Any:
        """How the student (on its vocabulary) or the teacher reads the task
        (:func:`nas.distill.mixedvocab.task_reader`)."""
        return mv.task_reader(self.train, self.teacher_tokenizer,
                           self.student_tokenizer if student else None, self.max_seq_len)

    def task_space(self, vocab_size: int) -> Any:
        """The student with the task's head (joint intent + slot for tagging)."""
        tags = len(self.train.tag_names) if self.tagging else 0
        return self.cfg.student.build_space(vocab_size, self.train.num_labels, tags)


# ------------------------------------------------------------------------- method


@register_method("mixedvocab")
class MixedVocab(Recipe[MixedVocabConfig]):
    """``method: mixedvocab`` — mixed-vocabulary distillation of a fixed student shape."""

    config_class = MixedVocabConfig
    context_class = MixedVocabContext
    searchers = ()  # a fixed design: nothing to search

    def stages(self, ctx: MixedVocabContext) -> dict[str, Any]:
        # the teacher's row comes from stage 7 (no ctx.teacher in prepare: no second row)
        vocab = self.vocabulary(ctx)
        stage1 = self.stage_one(ctx, vocab)
        stage2 = self.stage_two(ctx, vocab, stage1)
        student = ctx.run.load_json("student.json")
        if student is None:
            teacher = self.task_teacher(ctx)
            self.task(ctx, vocab, stage2, teacher)
            student = self.evaluate_and_export(ctx, vocab, teacher, stage1, stage2)
        return {"searched": student, "teacher": student.get("teacher"),
                "evaluation": student.get("evaluation"),
                **({"speedup": student["speedup"]} if "speedup" in student else {})}

    # -- stage 2 ---------------------------------------------------------------------
    def vocabulary(self, ctx: MixedVocabContext) -> dict[str, Any]:
        """The student vocabulary folder (cached), or the teacher's for the ablation."""
        from nas.tokenization import load_tokenizer, train_student_vocab

        cfg = ctx.cfg
        if cfg.student.vocabulary == "teacher":
            ctx.stage(2, "student on the teacher's vocabulary (ablation)")
            ctx.student_tokenizer = ctx.teacher_tokenizer
            record = {"dir": ctx.teacher_dir, "size": len(ctx.teacher_tokenizer),
                      "key": "teacher-" + ctx.teacher_id, "source": "teacher"}
            ctx.run.log("vocabulary", **record)
            return record
        key = settings_key(text=mv.text_key(ctx.texts), settings=asdict(cfg.vocab),
                           version=CACHE_VERSION)
        folder = cache_root() / "mixedvocab" / f"vocab-{key}"

        def train() -> dict[str, Any]:
            ctx.stage(2, "student WordPiece vocabulary of ~%d on %d texts", cfg.vocab.size,
                      len(ctx.texts))
            train_student_vocab(ctx.texts, folder, vocab_size=cfg.vocab.size,
                                lowercase=cfg.vocab.lowercase,
                                min_frequency=cfg.vocab.min_frequency, progress=ctx.progress)
            return {"key": key, "texts": len(ctx.texts), "settings": asdict(cfg.vocab)}

        with ctx.timed("vocabulary"):
            record, _ = cached_entry(folder, "stage 2/8: student vocabulary", train)
            ctx.student_tokenizer = load_tokenizer(folder)
            record.update(dir=str(folder), size=len(ctx.student_tokenizer), source="built")
        ctx.run.log("vocabulary", **record)
        return record

    # -- stage 3 ---------------------------------------------------------------------
    def stage_one(self, ctx: MixedVocabContext, vocab: dict[str, Any]) -> dict[str, Any]:
        """Stage I (cached): the teacher's MLM on mixed-segmented text; writes the whole
        :class:`~nas.distill.mixedvocab.MixedVocabMLM` (``weights.safetensors``)."""
        from nas.cache import cache_root

        cfg, s = ctx.cfg, ctx.cfg.stage1
        if cfg.student.vocabulary == "teacher" or (cfg.stage2.init == "random"
                                                   and not cfg.stage2.distill_layers):
            ctx.stage(3, "stage I not needed (%s)", "student on the teacher vocabulary"
                      if cfg.student.vocabulary == "teacher" else "stage2.init=random")
            return {"enabled": False}
        d_s = int(cfg.student.build_space(vocab_size=1000).config["hidden_size"])
        windows = mv.word_windows(ctx.texts, max(4, (s.max_seq_len - 2) // 2))
        settings = asdict(s)
        key = settings_key(teacher=ctx.teacher_id, vocab=vocab["key"], d_s=d_s,
                           text=mv.windows_key(windows), settings=settings, version=CACHE_VERSION)
        folder = cache_root() / "mixedvocab" / f"stage1-{key}"

        def train() -> dict[str, Any]:
            from nas.hf import load_teacher_as_design
            from nas.train import Trainer

            seed = seed_stage(s.seed, "mixedvocab-stage1")
            teacher_space, teacher = load_teacher_as_design(ctx.teacher_dir)
            model = mv.MixedVocabMLM(teacher, vocab["size"], d_s,
                                  teacher_space.config["layer_norm_eps"]).train()
            segmenter = mv.MixedSegmenter(ctx.teacher_tokenizer, ctx.student_tokenizer,
                                       s.p_student, s.max_seq_len, specials="teacher")
            batches, steps = mv.mlm_batches(segmenter, windows, s.batch_size, seed,
                                         s.mask_probability)
            ctx.stage(3, "stage I, the teacher's MLM on %d mixed-segmented windows (p_SV "
                      "%.2f), %d steps per epoch", len(windows), s.p_student, steps)
            result = Trainer(model, loop_settings(s), batches, steps, lambda net, b: net(b),
                             checkpoint=folder / "checkpoint.safetensors",
                             after_step=mv.step_logger("stage I"), progress=ctx.progress,
                             desc="stage I (mixed MLM)").fit()
            save_weights(model, folder / "weights.safetensors")
            return {"key": key, "windows": len(windows), "steps": result.steps,
                    "train_seconds": round(result.seconds, 1), "history": result.history,
                    "segmentation": {"p_student": s.p_student, "seed": seed,
                                     "generator": "numpy default_rng([seed, epoch, batch])"},
                    "settings": settings, "student_dim": d_s}

        with ctx.timed("stage1"):
            record, _ = cached_entry(folder, "stage 3/8: stage I", train)
            record["weights"] = str(folder / "weights.safetensors")
        ctx.run.log("stage1", **record)
        return {"enabled": True, **record}

    # -- stage 4 ---------------------------------------------------------------------
    def stage_two(self, ctx: MixedVocabContext, vocab: dict[str, Any], stage1: dict[str, Any]
                  ) -> dict[str, Any]:
        """Stage II (cached): the student's MLM on student-vocabulary input; writes the
        student (``student.safetensors``, the classifier head unused)."""

        cfg, s = ctx.cfg, ctx.cfg.stage2
        space = cfg.student.build_space(vocab_size=vocab["size"])
        windows = mv.word_windows(ctx.texts, max(4, (s.max_seq_len - 2) // 2))
        settings = asdict(s)
        key = settings_key(stage1=stage1.get("key") if s.init == "stage1" or s.distill_layers
                           else None, vocab=vocab["key"], student=space.config,
                           text=mv.windows_key(windows), settings=settings, version=STAGE2_VERSION)
        folder = cache_root() / "mixedvocab" / f"stage2-{key}"

        def train() -> dict[str, Any]:
            from safetensors.torch import load_file

            from nas.builder import build_child
            from nas.train import Trainer

            seed = seed_stage(s.seed, "mixedvocab-stage2")
            student = build_child(space)
            mv.bert_init(student)  # both arms: the ablation's word table is BERT's N(0, 0.02²)
            stage1_state = load_file(stage1["weights"]) if stage1.get("enabled") else None
            if s.init == "stage1":
                assert stage1_state is not None  # noqa: S101 - stage I ran for this init
                with torch.no_grad():
                    student.word_embeddings().copy_(
                        stage1_state["student_embeddings.weight"])
            distill = (mv.LayerDistillation(
                ctx.teacher_dir, stage1_state,  # type: ignore[arg-type]  # stage I ran: stage_one runs it with distill_layers
                vocab["size"], space.config) if s.distill_layers else None)
            model = mv.StudentMLM(student, space.config["layer_norm_eps"],
                               distill.fits if distill else None).train()
            segmenter = mv.MixedSegmenter(ctx.teacher_tokenizer, ctx.student_tokenizer, 1.0,
                                       s.max_seq_len, specials="student")
            batches, steps = mv.mlm_batches(segmenter, windows, s.batch_size, seed,
                                         s.mask_probability)

            def loss(net: Any, batch: dict[str, torch.Tensor]) -> Any:
                mlm, out, info = net(batch)
                if distill is None:
                    return mlm, info
                hidden = distill.loss(out, batch, segmenter, net.fits)
                info["hidden_mse"] = float(hidden.detach())
                return mlm + s.distill_weight * hidden, info

            ctx.stage(4, "stage II, the student's MLM on %d student-vocabulary windows (init "
                      "%s%s), %d steps per epoch", len(windows), s.init,
                      ", layer distillation" if distill else "", steps)
            result = Trainer(model, loop_settings(s), batches, steps, loss,
                             checkpoint=folder / "checkpoint.safetensors",
                             after_step=mv.step_logger("stage II"), progress=ctx.progress,
                             desc="stage II (student MLM)").fit()
            save_weights(student, folder / "student.safetensors")
            return {"key": key, "windows": len(windows), "steps": result.steps,
                    "train_seconds": round(result.seconds, 1), "history": result.history,
                    "settings": settings, "mapping": distill.mapping if distill else []}

        with ctx.timed("stage2"):
            record, _ = cached_entry(folder, "stage 4/8: stage II", train)
            record["weights"] = str(folder / "student.safetensors")
        ctx.run.log("stage2", **record)
        return record

    # -- stage 5 ---------------------------------------------------------------------
    def task_teacher(self, ctx: MixedVocabContext) -> dict[str, Any]:
        """The teacher with the student's head, fine-tuned on the task (cached): the shared
        fine-tuned classifier, or the joint intent + slot teacher for tagging."""
        if ctx.tagging:
            return self._joint_teacher(ctx)
        ctx.prepare_teacher(5)
        return {"kind": "classifier", "model_dir": ctx.teacher.model_dir,
                "dev": ctx.teacher.metrics}

    def _joint_teacher(self, ctx: MixedVocabContext) -> dict[str, Any]:
        from nas.cache import cache_root

        cfg, s = ctx.cfg, ctx.cfg.teacher_task
        settings = asdict(s)
        key = settings_key(teacher=ctx.teacher_id, train=ctx.full_train.fingerprint,
                           dev=ctx.dev.fingerprint, max_seq_len=cfg.data.max_seq_len,
                           settings=settings, version=CACHE_VERSION)
        folder = cache_root() / "mixedvocab" / f"teacher-{cfg.task}-{key}"

        def train() -> dict[str, Any]:
            from nas.builder import build_child
            from nas.hf import load_teacher_as_design
            from nas.train import Trainer

            seed = seed_stage(s.seed, "mixedvocab-task-teacher")
            base_space, base = load_teacher_as_design(ctx.teacher_dir)
            space = mv.joint_space(base_space, ctx.train.num_labels, len(ctx.train.tag_names))
            model = build_child(space)
            mv.copy_encoder(base, model)
            reader = ctx.reader(student=False)
            data = seeded_subset(ctx.full_train, s.max_train_examples, s.seed,
                                 "task-teacher-data", "teacher_task.max_train_examples")
            steps = math.ceil(len(data) / s.batch_size)
            dev = list(reader.batches(ctx.dev))

            def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
                score = reader.score(model, dev, ctx.dev.metric)
                log.info("task teacher epoch %d: loss %.4f, dev %s", epoch + 1, means["loss"],
                         score)
                return {"dev": score}

            ctx.stage(5, "joint intent + slot teacher fine-tuned on %d examples, %d steps per "
                      "epoch (cached)", len(data), steps)
            result = Trainer(model, loop_settings(s), reader.train_batches(
                data, s.batch_size, seed), steps, lambda net, b: reader.loss(
                net(b).logits, b, 0.0, 1.0), checkpoint=folder / "checkpoint.safetensors",
                on_epoch_end=dev_score, progress=ctx.progress, desc="task teacher").fit()
            save_weights(model, folder / "model.safetensors")
            return {"key": key, "space": space.config, "steps": result.steps,
                    "train_seconds": round(result.seconds, 1), "history": result.history,
                    "dev": result.history[-1]["dev"], "settings": settings}

        with ctx.timed("teacher"):
            record, _ = cached_entry(folder, "stage 5/8: joint task teacher", train)
        ctx.run.log("teacher", **record)
        return {"kind": "joint", "weights": str(folder / "model.safetensors"), **record}

    # -- stage 6 ---------------------------------------------------------------------
    def task(self, ctx: MixedVocabContext, vocab: dict[str, Any], stage2: dict[str, Any],
             teacher: dict[str, Any]) -> None:
        """The student's task stage on gold labels and (``task_stage.alpha``) the teacher's
        soft predictions, per word for tagging; writes ``student.safetensors``."""
        from nas.builder import build_child
        from nas.train import Trainer

        cfg, run, s = ctx.cfg, ctx.run, ctx.cfg.task_stage
        out = run.path / "student.safetensors"
        if out.is_file():
            return
        t0 = time.time()
        seed = seed_stage(cfg.seed, "task")  # before the model: its head's initialisation
        model = build_child(ctx.task_space(vocab["size"]))
        mv.bert_init(model)  # the head; the encoder comes from stage II below
        mlm_student = build_child(cfg.student.build_space(vocab_size=vocab["size"]))
        load_weights(mlm_student, Path(stage2["weights"]))
        copied = mv.copy_encoder(mlm_student, model)
        data, reader = ctx.train, ctx.reader(student=True)
        steps = math.ceil(len(data) / s.batch_size)
        use_teacher = s.distill and s.alpha > 0
        targets = (ctx.reader(student=False).teacher_targets(mv.load_task_teacher(teacher)[1],
                                                            data) if use_teacher else None)
        dev = list(reader.batches(ctx.dev))

        def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
            score = reader.score(model, dev, ctx.dev.metric)
            log.info("task epoch %d: loss %.4f, dev %s", epoch + 1, means["loss"], score)
            return {"dev": score}

        ctx.stage(6, "task stage on %d examples (%d tensors from stage II, teacher %s), %d "
                  "steps per epoch", len(data), len(copied),
                  "soft targets on" if use_teacher else "off", steps)
        result = Trainer(model, loop_settings(s), reader.train_batches(
            data, s.batch_size, seed, targets), steps, lambda net, b: reader.loss(
            net(b).logits, b, s.alpha, s.temperature), checkpoint=run.checkpoint_path("task"),
            on_epoch_end=dev_score, progress=ctx.progress, desc="task").fit()
        save_weights(model, out)
        ctx.seconds["task"] = round(time.time() - t0, 1)
        run.log("task", steps=result.steps, seconds=round(result.seconds, 1),
                history=result.history, copied_tensors=len(copied), seed=seed)
        run.remove_checkpoint("task")

    # -- stages 7 and 8 --------------------------------------------------------------
    def evaluate_and_export(self, ctx: MixedVocabContext, vocab: dict[str, Any],
                            teacher: dict[str, Any], stage1: dict[str, Any],
                            stage2: dict[str, Any]) -> dict[str, Any]:
        """Stage 7: the student and the teacher on dev (and the report split), their
        parameters, FLOPs and latency, and the ratios; stage 8: the export."""
        from nas.builder import build_child
        from nas.device import module_device, to_device

        cfg, run, split, report = ctx.cfg, ctx.run, ctx.report_split, ctx.report
        ctx.stage(7, "evaluation on %s", ctx.evaluated_splits)
        space = ctx.task_space(vocab["size"])
        student = build_child(space)
        load_weights(student, run.path / "student.safetensors")
        student.eval()
        t_space, t_model = mv.load_task_teacher(teacher)
        measure = dict(dev=ctx.dev, report=report, report_split=split,
                       max_seq_len=cfg.data.max_seq_len, repeats=cfg.latency_repeats)
        row, inputs = mv.model_row(student, space, ctx.reader(True), **measure)
        t_row, t_inputs = mv.model_row(t_model, t_space, ctx.reader(False), **measure)
        t_row.update(tag="teacher", params=sum(p.numel() for p in t_model.parameters()),
                     runtime=TORCH_FP32)
        # the same texts in each model's own vocabulary, timed in interleaved rounds
        pairs = {bs: (to_device(t_inputs[bs], module_device(t_model)),
                      to_device(inputs[bs], module_device(student))) for bs in inputs}
        with torch.no_grad():
            speedup = paired_speedups(lambda pair: t_model(pair[0]), lambda pair: student(pair[1]),
                                      pairs, cfg.latency_repeats,
                                      device=module_device(student))
        row.update(
            tag="student", space=cfg.student.space, vocabulary=cfg.student.vocabulary,
            vocab_size=vocab["size"],
            shape={k: space.config[k] for k in ("num_hidden_layers", "hidden_size",
                                                "num_attention_heads", "intermediate_size",
                                                "vocab_size")},
            non_embedding_params=row["params"] - row["embedding_params"], teacher=t_row,
            recipe={"stage1": {k: stage1.get(k) for k in (
                "enabled", "key", "steps", "train_seconds", "segmentation", "from_cache")},
                "stage1_last_epoch": (stage1.get("history") or [{}])[-1],
                "stage2": {k: stage2.get(k) for k in ("key", "steps", "train_seconds",
                                                       "from_cache")},
                "stage2_init": cfg.stage2.init, "distill_layers": cfg.stage2.distill_layers,
                "stage2_last_epoch": (stage2.get("history") or [{}])[-1],
                "task_distill": cfg.task_stage.distill and cfg.task_stage.alpha > 0,
                "train_examples": len(ctx.train), "vocab_dir": vocab["dir"]},
            ratios={"params": row["params"] / t_row["params"],
                    "embedding_params": row["embedding_params"] / t_row["embedding_params"],
                    "latency_batch1": 1 / speedup["batch1"]["speedup"]},
            speedup=speedup,
            evaluation={"split": split, "file": ", ".join(report.sources),
                        "examples": len(report),
                        "latency_tokens": int(inputs[1]["input_ids"].shape[1])})
        ctx.stage(8, "export (native + onnx, with the student vocabulary)")
        labels, head = mv.export_labels(ctx.train)
        ctx.export_model(space, None, "export", fmt="onnx", model=student, labels=labels,
                         tokenizer=vocab["dir"], max_length=cfg.data.max_seq_len,
                         task=ctx.task, head=head)
        run.save_json("student.json", row)
        run.log("student", dev=row["dev"], params=row["params"], teacher_dev=t_row["dev"])
        return row

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        student = metrics.get("searched") or {}
        recipe = student.get("recipe")
        if not recipe:
            return [], []
        teacher = student.get("teacher", {})
        shape = student.get("shape", {})

        def pct(scores: dict[str, float] | None) -> str:
            return ", ".join(f"{k} {100 * v:.2f}" for k, v in (scores or {}).items())

        def mlm(row: dict[str, Any]) -> str:
            return ", ".join(f"{k} {v:.3f}" for k, v in row.items() if k.startswith("mlm_"))

        s1, s2 = recipe["stage1"], recipe["stage2"]
        lines = ["", "## Mixed-vocabulary recipe", "",
                 f"- student: {student.get('space')} L{shape.get('num_hidden_layers')} "
                 f"H{shape.get('hidden_size')} A{shape.get('num_attention_heads')} "
                 f"FFN{shape.get('intermediate_size')}, {student.get('vocabulary')} "
                 f"vocabulary of {student.get('vocab_size')} tokens",
                 f"- parameters: {student.get('params'):,} (embedding table "
                 f"{student.get('embedding_params'):,}); teacher {teacher.get('params'):,} "
                 f"(embedding table {teacher.get('embedding_params'):,})",
                 f"- dev: {pct(student.get('dev'))}; teacher {pct(teacher.get('dev'))}",
                 "- stage I: " + (
                     f"{s1.get('steps')} steps, {s1.get('train_seconds')} s, p_SV "
                     f"{s1['segmentation']['p_student']}; last epoch "
                     f"{mlm(recipe['stage1_last_epoch'])}"
                     if s1.get("enabled") else "not run"),
                 f"- stage II: init {recipe['stage2_init']}, layer distillation "
                 f"{'on' if recipe['distill_layers'] else 'off'}, {s2.get('steps')} steps, "
                 f"{s2.get('train_seconds')} s; last epoch {mlm(recipe['stage2_last_epoch'])}",
                 "- task stage: " + ("gold labels and the teacher's soft predictions"
                                     if recipe["task_distill"] else "gold labels only")
                 + f", {recipe['train_examples']} training examples",
                 "- ratios to the teacher: " + ", ".join(
                     f"{k} {v:.3f}" for k, v in (student.get("ratios") or {}).items())]
        return lines, []



__all__ = ["MixedVocab", "MixedVocabConfig", "MixedVocabContext", "MixedVocabData"]
