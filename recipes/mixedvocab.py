"""Mixed-vocabulary distillation (Zhao et al., 2019, "Extremely small BERT models from
mixed-vocabulary training"; SPEC §7): a tiny student whose saving is mostly in its
embedding table, for classification and for sequence tagging (SNIPS intents and slots).

The method's steps, in order (:meth:`MixedVocab.run`); each is a call into shared parts:

1. **data** — the task's train (a seeded subset when asked) and dev splits;
2. **student vocabulary** — a ~5K WordPiece vocabulary trained on the unlabeled text
   with every printable ASCII character in it (:func:`nas.tokenization.train_student_vocab`),
   cached by its text and settings;
3. **stage I** — the pre-trained teacher continues MLM on *mixed-segmented* text
   (WikiText-2 plus the task's sentences): each word is cut by the student vocabulary with
   probability p_SV = 0.5, else by the teacher's (:class:`nas.distill.mixedvocab.MixedSegmenter`,
   a seeded draw per word, recorded); student pieces enter through student embeddings
   (d_S) up-projected to d_T by a trainable affine map, and a masked piece is predicted
   over the vocabulary that segmented it (:class:`nas.distill.mixedvocab.MixedVocabMLM`). The
   MiniLM teacher has no MLM head: it starts from the tied input embeddings. Cached by
   its settings, resumable, logged (MLM loss and accuracy per vocabulary);
4. **stage II** — the student (``mixedvocab``: L6 H256 A4 with the built vocabulary's
   size) starts from the stage-I student embeddings and continues with MLM on
   student-vocabulary input only; ``stage2.distill_layers: true`` adds layer-wise
   distillation from the stage-I teacher reading the same pieces (off by default). Cached;
5. **task teacher** — the teacher with the same head as the student, fine-tuned on the
   task: for SNIPS a joint intent + slot head (cached here), for SST-2/MRPC the shared
   :func:`nas.teacher.finetune_teacher` (cached, shared with the other recipes);
6. **task stage** — the student with the task head, trained on gold labels plus the
   teacher's soft predictions (``task.alpha``; for tagging, per *word*: the teacher and
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
the cached stages (vocabulary, I, II, task teacher) have their own seeds because runs of
every seed share them. A finished stage is never redone; ``--resume`` continues an
unfinished one from its checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.nn import functional as F

from nas.config import ConfigError, check_fields
from nas.distill.general import check_text_settings, exclusive, load_weights, save_weights
from nas.methods import Method, RunOptions, load_experiment, register_method
from nas.rundir import RunDir
from nas.seeding import seed_stage, stage_seed
from nas.train import TrainSettings, loop_settings

log = logging.getLogger("nas.mixedvocab")

VOCABULARIES = ("student", "teacher")
INITS = ("stage1", "random")
#: Bump when a cached stage changes, so that old cache entries are not reused.
CACHE_VERSION = 1
STAGE2_VERSION = 2  # 2: the student starts from BERT's initialisation (bert_init)


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


# ---------------------------------------------------------------------------- config


@dataclass
class DataSettings:
    max_train_examples: int | None = None  # a seeded random subset of train
    max_dev_examples: int | None = None
    max_seq_len: int = 64

    def __post_init__(self) -> None:
        check_fields([("max_train_examples", (self.max_train_examples or 2) >= 2, "None or >= 2"),
                      ("max_dev_examples", (self.max_dev_examples or 1) >= 1, "None or >= 1"),
                      ("max_seq_len", 8 <= self.max_seq_len <= 512, "in [8, 512]")], self)


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
    """The student WordPiece vocabulary (SPEC §7: ~5K, every ASCII character in it)."""

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
    batch_size: int = 32
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("mask_probability", 0.0 < self.mask_probability < 1.0, "in (0, 1)"),
                      ("max_seq_len", 8 <= self.max_seq_len <= 512, "in [8, 512]")], self)


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
    batch_size: int = 32
    warmup_fraction: float = 0.1
    schedule: str = "linear"
    grad_clip: float | None = 1.0


@dataclass
class TaskSettings(TrainSettings):
    """The student's task stage: ``(1 − alpha)·CE(gold) + alpha·CE(teacher soft)`` at
    ``temperature``; ``distill: false`` trains on gold labels only."""

    distill: bool = True
    alpha: float = 0.5
    temperature: float = 1.0
    lr: float = 2e-4
    epochs: int = 3
    batch_size: int = 32
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
class MixedVocabConfig:
    name: str
    task: str
    teacher: str | None = None
    seed: int = 0
    data: DataSettings = field(default_factory=DataSettings)
    text: TextSettings = field(default_factory=TextSettings)
    vocab: VocabSettings = field(default_factory=VocabSettings)
    stage1: StageOneSettings = field(default_factory=StageOneSettings)
    stage2: StageTwoSettings = field(default_factory=StageTwoSettings)
    teacher_task: TeacherTaskSettings = field(default_factory=TeacherTaskSettings)
    teacher_finetune: dict = field(default_factory=dict)
    student: StudentSettings = field(default_factory=StudentSettings)
    task_stage: TaskSettings = field(default_factory=TaskSettings)
    latency_repeats: int = 10

    def __post_init__(self) -> None:
        from nas.teacher import check_finetune_overrides

        check_fields([("name", bool(self.name.strip()), "a non-empty name"),
                      ("task", bool(self.task.strip()), "a task name"),
                      ("latency_repeats", self.latency_repeats >= 1, "an integer >= 1")], self)
        check_finetune_overrides(self.teacher_finetune)  # before any stage
        if self.student.vocabulary == "teacher" and self.stage2.distill_layers:
            raise ConfigError("stage2.distill_layers needs the stage-I teacher, which reads the "
                              "student vocabulary; it does not go with student.vocabulary="
                              "teacher")
        if self.student.vocabulary == "teacher" and self.stage2.init == "stage1":
            # the ablation arm has no stage I: its embeddings start random
            self.stage2.init = "random"
        self.student.build_space(vocab_size=1000)  # the shape's own checks, before any stage


def load_config(path: str | Path, overrides: Sequence[str] = ()) -> MixedVocabConfig:
    """A mixed-vocabulary experiment file's typed configuration."""
    method, config = load_experiment(path, overrides)
    if not isinstance(method, MixedVocab):
        raise ConfigError(f"{path}: method {method.name!r} is not mixedvocab")
    return config


# ------------------------------------------------------------------------ the text


def unlabeled_texts(cfg: MixedVocabConfig, task_train: Any, data_dir: str | None
                    ) -> list[str]:
    """The unlabeled text (corpus lines plus the task's training sentences), a seeded
    subset when ``text.max_texts`` is set."""
    from nas.data import load_corpus

    t = cfg.text
    texts: list[str] = []
    for split in t.corpus_splits:
        texts += load_corpus(t.corpus, split, data_dir)
    if t.task_sentences:
        texts += list(dict.fromkeys(list(task_train.texts_a) + list(task_train.texts_b or ())))
    texts = [x for x in texts if x.strip()]
    if t.max_texts is not None and t.max_texts < len(texts):
        rng = np.random.default_rng(stage_seed(t.seed, "mixedvocab-texts"))
        texts = [texts[i] for i in np.sort(rng.permutation(len(texts))[: t.max_texts])]
    return texts


def word_windows(texts: Sequence[str], max_words: int) -> list[list[str]]:
    """Texts as lists of whitespace words, long ones cut into windows of ``max_words``."""
    out = []
    for text in texts:
        words = text.split()
        out += [words[i:i + max_words] for i in range(0, len(words), max_words)]
    return [w for w in out if w]


def _texts_fingerprint(windows: Sequence[Sequence[str]]) -> str:
    return _key(["\n".join(" ".join(w) for w in windows)])


# ------------------------------------------------------------- cached stage helper


def _cached(folder: Path, what: str, train: Callable[[], dict[str, Any]]
            ) -> tuple[dict[str, Any], bool]:
    """The record of a cached stage in ``folder``: read it, or (under a lock, so that two
    runs of the same settings train it once) run ``train``, which writes the entry and
    returns its record; ``result.json`` is written last and marks the entry complete."""
    from nas.checkpoint import atomic_write_json

    result = folder / "result.json"
    trained = False
    if not result.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive(folder / ".lock", f"{what} {folder}"):
            if not result.is_file():
                record = train()
                atomic_write_json(result, record)
                (folder / "checkpoint.safetensors").unlink(missing_ok=True)
                trained = True
    if not trained:
        log.info("%s from the cache (%s)", what, folder)
    return {**json.loads(result.read_text()), "from_cache": not trained}, trained


def _mlm_batches(segmenter: Any, windows: Sequence[Sequence[str]], batch_size: int,
                 seed: int, mask_probability: float
                 ) -> tuple[Callable[[int, int], Iterator[Any]], int]:
    """The Trainer's batch source for an MLM stage: a seeded order per epoch; each batch
    segmented and masked with :func:`nas.distill.mixedvocab.batch_rng` (seed, epoch, batch)."""
    from nas.distill.mixedvocab import batch_rng, mask_tokens

    n = len(windows)
    steps = math.ceil(n / batch_size)

    def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
        order = np.random.default_rng(stage_seed(seed, f"order:{epoch}")).permutation(n)
        for b in range(start, steps):
            rng = batch_rng(seed, epoch, b)
            batch = segmenter.batch([windows[i] for i in order[b * batch_size:
                                                                (b + 1) * batch_size]], rng)
            yield mask_tokens(batch, segmenter, rng, mask_probability)

    return batches, steps


def _step_logger(stage: str, every: int = 50) -> Callable[[int, dict[str, float]], None]:
    def after(step: int, info: dict[str, float]) -> None:
        if step % every == 0:
            log.info("%s step %d: %s", stage, step, ", ".join(
                f"{k} {v:.4g}" for k, v in info.items() if not math.isnan(v)))
    return after


# ---------------------------------------------------------------- tagging batches


def tagged_batches(segmenter: Any, data: Any, batch_size: int, order: Sequence[int] | None = None,
                   start: int = 0, extra: Callable[[np.ndarray, dict[str, Any]], None] | None
                   = None) -> Iterator[dict[str, torch.Tensor]]:
    """Batches of a tagging task through a single-vocabulary segmenter (``p_student`` 0
    or 1: no random draw): the segmenter's keys plus ``labels`` (intent, B),
    ``tag_labels`` (B, W; one tag per word, ``-100`` for padding) and ``index``."""
    from nas.distill.mixedvocab import IGNORE

    idx_all = np.arange(len(data)) if order is None else np.asarray(order)
    rng = np.random.default_rng(0)  # unused: p_student is 0 or 1
    for b in range(start, math.ceil(len(idx_all) / batch_size)):
        idx = idx_all[b * batch_size:(b + 1) * batch_size]
        batch = segmenter.batch([list(data.tokens[i]) for i in idx], rng)
        words = batch["first_piece"].shape[1]
        tags = torch.full((len(idx), words), IGNORE, dtype=torch.long)
        for r, i in enumerate(idx):
            seq = data.tags[i]
            tags[r, :len(seq)] = torch.tensor(seq, dtype=torch.long)
        batch["tag_labels"] = tags
        batch["labels"] = torch.tensor([data.labels[i] for i in idx], dtype=torch.long)
        batch["index"] = torch.as_tensor(idx, dtype=torch.long)
        if extra is not None:
            extra(idx, batch)
        yield batch


def word_tag_logits(logits: torch.Tensor, first_piece: torch.Tensor, num_intents: int
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Intent logits (B, I) and each word's tag logits at its first piece (B, W, T) of a
    joint head's output (B, L, I + T); words without a piece get position 0's (masked
    out by the caller)."""
    from nas.ops.transformer import split_joint

    intent, tags = split_joint(logits, num_intents)
    pos = first_piece.clamp(min=0)
    return intent, tags.gather(1, pos.unsqueeze(-1).expand(-1, -1, tags.shape[-1]))


@torch.no_grad()
def evaluate_joint(model: Any, batches: Sequence[dict[str, torch.Tensor]], num_intents: int,
                   tag_names: Sequence[str]) -> dict[str, float]:
    """Intent accuracy and ``conlleval`` slot precision/recall/F1 (word level; a word cut
    off by truncation counts as tagged ``O``)."""
    from nas.tagging import span_f1

    model.eval()
    correct = total = 0
    gold_seqs: list[list[str]] = []
    pred_seqs: list[list[str]] = []
    for b in batches:
        intent, tags = word_tag_logits(model(b).logits, b["first_piece"], num_intents)
        correct += int((intent.argmax(-1) == b["labels"]).sum())
        total += len(b["labels"])
        pred = tags.argmax(-1)
        for r in range(len(b["labels"])):
            gold = [int(t) for t in b["tag_labels"][r] if int(t) >= 0]
            p = [int(pred[r, w]) if int(b["first_piece"][r, w]) >= 0 else 0
                 for w in range(len(gold))]
            gold_seqs.append([tag_names[t] for t in gold])
            pred_seqs.append([tag_names[t] for t in p])
    slots = span_f1(gold_seqs, pred_seqs)
    return {"intent_accuracy": correct / max(total, 1), "slot_f1": slots["f1"],
            "slot_precision": slots["precision"], "slot_recall": slots["recall"]}


def joint_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor], num_intents: int,
               teacher: tuple[torch.Tensor, torch.Tensor] | None, alpha: float,
               temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
    """Intent CE + per-word tag CE on gold, mixed with soft CE against the teacher's
    intent and per-word tag logits (``teacher``: (B, I), (B, W, T)) when given."""
    from nas.distill.losses import soft_cross_entropy

    intent, tags = word_tag_logits(logits, batch["first_piece"], num_intents)
    valid = (batch["first_piece"] >= 0) & (batch["tag_labels"] >= 0)
    gold = F.cross_entropy(intent, batch["labels"]) + F.cross_entropy(
        tags[valid], batch["tag_labels"][valid])
    info = {"gold": float(gold.detach())}
    if teacher is None or alpha == 0.0:
        return gold, info
    t_intent, t_tags = teacher
    known = valid & batch["t_valid"] if "t_valid" in batch else valid
    soft = soft_cross_entropy(intent, t_intent, temperature) + soft_cross_entropy(
        tags[known], t_tags[known], temperature)
    info["soft"] = float(soft.detach())
    return (1.0 - alpha) * gold + alpha * soft, info


# ------------------------------------------------------------------------- context


class Context:
    """What the stages share: configuration, run folder, data, tokenizers, timings."""

    def __init__(self, cfg: MixedVocabConfig, run: RunDir, options: RunOptions) -> None:
        self.cfg, self.run, self.options = cfg, run, options
        self.seconds: dict[str, float] = {}

    def prepare(self) -> Context:
        from nas.data import load_task
        from nas.teacher import resolve_teacher, teacher_identity
        from nas.tokenization import load_tokenizer

        cfg = self.cfg
        log.info("stage 1/8: data")
        self.full_train = load_task(cfg.task, "train", self.options.data_dir)
        train = self.full_train
        if cfg.data.max_train_examples and cfg.data.max_train_examples < len(train):
            rng = np.random.default_rng(stage_seed(cfg.seed, "data"))
            train = train.subset(np.sort(rng.permutation(len(train))
                                         [: cfg.data.max_train_examples]).tolist())
        self.train = train
        dev = load_task(cfg.task, "dev", self.options.data_dir)
        if cfg.data.max_dev_examples and cfg.data.max_dev_examples < len(dev):
            # a seeded subset, not the first rows: SNIPS's dev file is sorted by intent
            rng = np.random.default_rng(stage_seed(cfg.seed, "dev-subset"))
            dev = dev.subset(np.sort(rng.permutation(len(dev))
                                     [: cfg.data.max_dev_examples]).tolist())
        self.dev = dev
        self.tagging = train.tokens is not None
        if self.tagging and (train.tag_names is None or train.tags is None):
            raise ConfigError(f"task {cfg.task!r}: a tagging task without tags")
        self.teacher_dir = resolve_teacher(cfg.teacher)
        self.teacher_id = teacher_identity(cfg.teacher)
        self.teacher_tokenizer = load_tokenizer(self.teacher_dir)
        self.texts = unlabeled_texts(cfg, self.full_train, self.options.data_dir)
        return self

    def progress(self) -> bool:
        return self.options.progress


# ------------------------------------------------------------------------- method


@register_method("mixedvocab")
class MixedVocab(Method):
    """``method: mixedvocab`` — mixed-vocabulary distillation of a fixed student shape."""

    config_class = MixedVocabConfig
    searchers = ()  # a fixed design: nothing to search

    def run(self, config: MixedVocabConfig, options: RunOptions) -> dict[str, Any]:
        started = time.time()
        run = RunDir(options.run_dir, {"method": self.name, **asdict(config)},
                     resume=options.resume, break_lock=options.break_lock)
        ctx = Context(config, run, options).prepare()
        vocab = self.vocabulary(ctx)
        stage1 = self.stage_one(ctx, vocab)
        stage2 = self.stage_two(ctx, vocab, stage1)
        student = run.load_json("student.json")
        if student is None:
            teacher = self.task_teacher(ctx)
            self.task(ctx, vocab, stage2, teacher)
            student = self.evaluate_and_export(ctx, vocab, teacher, stage1, stage2)
        metrics = {"searched": student, "teacher": student.get("teacher"),
                   "metric": "intent_accuracy+slot_f1" if ctx.tagging else ctx.dev.metric,
                   "evaluation": student.get("evaluation"),
                   "wall_seconds": {**ctx.seconds, "total": round(time.time() - started, 1)}}
        run.save_json("metrics.json", metrics)
        run.log("done")
        return metrics

    # -- stage 2 ---------------------------------------------------------------------
    def vocabulary(self, ctx: Context) -> dict[str, Any]:
        """The student vocabulary folder (cached), or the teacher's for the ablation."""
        from nas.teacher import cache_root
        from nas.tokenization import load_tokenizer, train_student_vocab

        cfg = ctx.cfg
        if cfg.student.vocabulary == "teacher":
            log.info("stage 2/8: student on the teacher's vocabulary (ablation)")
            ctx.student_tokenizer = ctx.teacher_tokenizer
            record = {"dir": ctx.teacher_dir, "size": len(ctx.teacher_tokenizer),
                      "key": "teacher-" + ctx.teacher_id, "source": "teacher"}
            ctx.run.log("vocabulary", **record)
            return record
        key = _key({"text": _key(ctx.texts), "settings": asdict(cfg.vocab),
                    "version": CACHE_VERSION})
        folder = cache_root() / "mixedvocab" / f"vocab-{key}"
        t0 = time.time()

        def train() -> dict[str, Any]:
            log.info("stage 2/8: student WordPiece vocabulary of ~%d on %d texts",
                     cfg.vocab.size, len(ctx.texts))
            train_student_vocab(ctx.texts, folder, vocab_size=cfg.vocab.size,
                                lowercase=cfg.vocab.lowercase,
                                min_frequency=cfg.vocab.min_frequency,
                                progress=ctx.progress())
            return {"key": key, "texts": len(ctx.texts), "settings": asdict(cfg.vocab)}

        record, _ = _cached(folder, "stage 2/8: student vocabulary", train)
        ctx.student_tokenizer = load_tokenizer(folder)
        record.update(dir=str(folder), size=len(ctx.student_tokenizer), source="built")
        ctx.seconds["vocabulary"] = round(time.time() - t0, 1)
        ctx.run.log("vocabulary", **record)
        return record

    def _student_dim(self, ctx: Context) -> int:
        return int(ctx.cfg.student.build_space(vocab_size=1000).config["hidden_size"])

    # -- stage 3 ---------------------------------------------------------------------
    def stage_one(self, ctx: Context, vocab: dict[str, Any]) -> dict[str, Any]:
        """Stage I (cached): the teacher's MLM on mixed-segmented text; writes the whole
        :class:`~nas.distill.mixedvocab.MixedVocabMLM` (``weights.safetensors``)."""
        from nas.teacher import cache_root

        cfg, s = ctx.cfg, ctx.cfg.stage1
        if cfg.student.vocabulary == "teacher" or (cfg.stage2.init == "random"
                                                   and not cfg.stage2.distill_layers):
            log.info("stage 3/8: stage I not needed (%s)", "student on the teacher vocabulary"
                     if cfg.student.vocabulary == "teacher" else "stage2.init=random")
            return {"enabled": False}
        d_s = self._student_dim(ctx)
        windows = word_windows(ctx.texts, max(4, (s.max_seq_len - 2) // 2))
        settings = asdict(s)
        key = _key({"teacher": ctx.teacher_id, "vocab": vocab["key"], "d_s": d_s,
                    "text": _texts_fingerprint(windows), "settings": settings,
                    "version": CACHE_VERSION})
        folder = cache_root() / "mixedvocab" / f"stage1-{key}"
        t0 = time.time()

        def train() -> dict[str, Any]:
            from nas.distill.mixedvocab import MixedSegmenter, MixedVocabMLM
            from nas.hf import load_teacher_as_design
            from nas.train import Trainer

            seed = seed_stage(s.seed, "mixedvocab-stage1")
            teacher_space, teacher = load_teacher_as_design(ctx.teacher_dir)
            model = MixedVocabMLM(teacher, vocab["size"], d_s,
                                  teacher_space.config["layer_norm_eps"]).train()
            segmenter = MixedSegmenter(ctx.teacher_tokenizer, ctx.student_tokenizer,
                                       s.p_student, s.max_seq_len, specials="teacher")
            batches, steps = _mlm_batches(segmenter, windows, s.batch_size, seed,
                                          s.mask_probability)
            log.info("stage 3/8: stage I, the teacher's MLM on %d mixed-segmented windows "
                     "(p_SV %.2f), %d steps per epoch", len(windows), s.p_student, steps)
            result = Trainer(model, loop_settings(s), batches, steps, lambda net, b: net(b),
                             checkpoint=folder / "checkpoint.safetensors",
                             after_step=_step_logger("stage I"), progress=ctx.progress(),
                             desc="stage I (mixed MLM)").fit()
            save_weights(model, folder / "weights.safetensors")
            return {"key": key, "windows": len(windows), "steps": result.steps,
                    "train_seconds": round(result.seconds, 1), "history": result.history,
                    "segmentation": {"p_student": s.p_student, "seed": seed,
                                     "generator": "numpy default_rng([seed, epoch, batch])"},
                    "settings": settings, "student_dim": d_s}

        record, _ = _cached(folder, "stage 3/8: stage I", train)
        record["weights"] = str(folder / "weights.safetensors")
        ctx.seconds["stage1"] = round(time.time() - t0, 1)
        ctx.run.log("stage1", **record)
        return {"enabled": True, **record}

    # -- stage 4 ---------------------------------------------------------------------
    def stage_two(self, ctx: Context, vocab: dict[str, Any], stage1: dict[str, Any]
                  ) -> dict[str, Any]:
        """Stage II (cached): the student's MLM on student-vocabulary input; writes the
        student (``student.safetensors``, the classifier head unused)."""
        from nas.teacher import cache_root

        cfg, s = ctx.cfg, ctx.cfg.stage2
        space = cfg.student.build_space(vocab_size=vocab["size"])
        windows = word_windows(ctx.texts, max(4, (s.max_seq_len - 2) // 2))
        settings = asdict(s)
        key = _key({"stage1": stage1.get("key") if s.init == "stage1" or s.distill_layers
                    else None, "vocab": vocab["key"], "student": space.config,
                    "text": _texts_fingerprint(windows), "settings": settings,
                    "version": STAGE2_VERSION})
        folder = cache_root() / "mixedvocab" / f"stage2-{key}"
        t0 = time.time()

        def train() -> dict[str, Any]:
            from safetensors.torch import load_file

            from nas.builder import build_child
            from nas.distill.losses import FitMap, fit_mse, layer_map
            from nas.distill.mixedvocab import (
                MixedSegmenter,
                MixedVocabMLM,
                StudentMLM,
                as_teacher_specials,
                bert_init,
            )
            from nas.train import Trainer

            seed = seed_stage(s.seed, "mixedvocab-stage2")
            student = build_child(space)
            bert_init(student)  # both arms: the ablation's word table is BERT's N(0, 0.02²)
            stage1_state = load_file(stage1["weights"]) if stage1.get("enabled") else None
            if s.init == "stage1":
                assert stage1_state is not None  # noqa: S101 - stage I ran for this init
                with torch.no_grad():
                    student.nodes["emb"].word_embeddings.weight.copy_(
                        stage1_state["student_embeddings.weight"])
            teacher, fits, mapping = None, None, []
            if s.distill_layers:
                from nas.hf import load_teacher_as_design

                t_space, t_net = load_teacher_as_design(ctx.teacher_dir)
                teacher = MixedVocabMLM(t_net, vocab["size"], space.config["hidden_size"],
                                        t_space.config["layer_norm_eps"])
                teacher.load_state_dict(stage1_state)
                teacher.eval().requires_grad_(False)
                mapping = layer_map(space.config["num_hidden_layers"],
                                    t_space.config["num_hidden_layers"])
                fits = torch.nn.ModuleList(FitMap(space.config["hidden_size"],
                                                  t_space.config["hidden_size"])
                                           for _ in mapping)
            model = StudentMLM(student, space.config["layer_norm_eps"], fits).train()
            segmenter = MixedSegmenter(ctx.teacher_tokenizer, ctx.student_tokenizer, 1.0,
                                       s.max_seq_len, specials="student")
            batches, steps = _mlm_batches(segmenter, windows, s.batch_size, seed,
                                          s.mask_probability)

            def loss(net: Any, batch: dict[str, torch.Tensor]) -> Any:
                mlm, out, info = net(batch)
                if teacher is None:
                    return mlm, info
                with torch.no_grad():
                    t = teacher.encode(as_teacher_specials(batch, segmenter)).records
                hidden = sum(fit_mse(out.records["hidden_states"][m], t["hidden_states"][g - 1],
                                     model.fits[m]) for m, g in enumerate(mapping))
                info["hidden_mse"] = float(hidden.detach())
                return mlm + s.distill_weight * hidden, info

            log.info("stage 4/8: stage II, the student's MLM on %d student-vocabulary windows "
                     "(init %s%s), %d steps per epoch", len(windows), s.init,
                     ", layer distillation" if teacher is not None else "", steps)
            result = Trainer(model, loop_settings(s), batches, steps, loss,
                             checkpoint=folder / "checkpoint.safetensors",
                             after_step=_step_logger("stage II"), progress=ctx.progress(),
                             desc="stage II (student MLM)").fit()
            save_weights(student, folder / "student.safetensors")
            return {"key": key, "windows": len(windows), "steps": result.steps,
                    "train_seconds": round(result.seconds, 1), "history": result.history,
                    "settings": settings, "mapping": mapping}

        record, _ = _cached(folder, "stage 4/8: stage II", train)
        record["weights"] = str(folder / "student.safetensors")
        ctx.seconds["stage2"] = round(time.time() - t0, 1)
        ctx.run.log("stage2", **record)
        return record

    # -- stage 5 ---------------------------------------------------------------------
    def task_teacher(self, ctx: Context) -> dict[str, Any]:
        """The teacher with the student's head, fine-tuned on the task (cached)."""
        if not ctx.tagging:
            from nas.teacher import finetune_teacher

            cfg = ctx.cfg
            t0 = time.time()
            log.info("stage 5/8: teacher fine-tuned on %s (cached)", cfg.task)
            seed_stage(cfg.seed, "teacher")
            result = finetune_teacher(cfg.task, cfg.teacher, ctx.options.data_dir,
                                      config=cfg_finetune(cfg), progress=ctx.progress())
            ctx.seconds["teacher"] = round(time.time() - t0, 1)
            ctx.run.log("teacher", model_dir=result.model_dir, metrics=result.metrics,
                        from_cache=result.from_cache)
            return {"kind": "classifier", "model_dir": result.model_dir,
                    "dev": result.metrics}
        return self._joint_teacher(ctx)

    def _joint_space(self, teacher_space: Any, ctx: Context) -> Any:
        from nas.space import get_space

        shape = {k: v for k, v in teacher_space.config.items()
                 if k not in ("family", "num_labels", "fit_size", "head", "num_tags")}
        return get_space("bert", **shape, head="joint", num_labels=ctx.train.num_labels,
                         num_tags=len(ctx.train.tag_names))

    def _joint_teacher(self, ctx: Context) -> dict[str, Any]:
        from nas.teacher import cache_root

        cfg, s = ctx.cfg, ctx.cfg.teacher_task
        settings = asdict(s)
        key = _key({"teacher": ctx.teacher_id, "train": ctx.full_train.fingerprint,
                    "dev": ctx.dev.fingerprint, "max_seq_len": cfg.data.max_seq_len,
                    "settings": settings, "version": CACHE_VERSION})
        folder = cache_root() / "mixedvocab" / f"teacher-{cfg.task}-{key}"
        t0 = time.time()

        def train() -> dict[str, Any]:
            from nas.builder import build_child
            from nas.distill.mixedvocab import MixedSegmenter, copy_encoder
            from nas.hf import load_teacher_as_design
            from nas.train import Trainer

            seed = seed_stage(s.seed, "mixedvocab-task-teacher")
            base_space, base = load_teacher_as_design(ctx.teacher_dir)
            space = self._joint_space(base_space, ctx)
            model = build_child(space)
            copy_encoder(base, model)
            seg = MixedSegmenter(ctx.teacher_tokenizer, ctx.teacher_tokenizer, 0.0,
                                 cfg.data.max_seq_len)
            data, n_int = ctx.full_train, ctx.train.num_labels
            if s.max_train_examples and s.max_train_examples < len(data):
                rng = np.random.default_rng(stage_seed(s.seed, "task-teacher-data"))
                data = data.subset(np.sort(rng.permutation(len(data))
                                           [: s.max_train_examples]).tolist())
            steps = math.ceil(len(data) / s.batch_size)

            def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
                order = np.random.default_rng(stage_seed(seed, f"order:{epoch}")).permutation(
                    len(data))
                return tagged_batches(seg, data, s.batch_size, order, start)

            dev = list(tagged_batches(seg, ctx.dev, 64))

            def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
                score = evaluate_joint(model, dev, n_int, ctx.train.tag_names)
                log.info("task teacher epoch %d: loss %.4f, dev %s", epoch + 1, means["loss"],
                         score)
                return {"dev": score}

            log.info("stage 5/8: joint intent + slot teacher fine-tuned on %d examples, %d "
                     "steps per epoch (cached)", len(data), steps)
            result = Trainer(model, loop_settings(s), batches, steps,
                             lambda net, b: joint_loss(net(b).logits, b, n_int, None, 0.0, 1.0),
                             checkpoint=folder / "checkpoint.safetensors",
                             on_epoch_end=dev_score, progress=ctx.progress(),
                             desc="task teacher").fit()
            save_weights(model, folder / "model.safetensors")
            return {"key": key, "space": space.config, "steps": result.steps,
                    "train_seconds": round(result.seconds, 1), "history": result.history,
                    "dev": result.history[-1]["dev"], "settings": settings}

        record, _ = _cached(folder, "stage 5/8: joint task teacher", train)
        ctx.seconds["teacher"] = round(time.time() - t0, 1)
        ctx.run.log("teacher", **record)
        return {"kind": "joint", "weights": str(folder / "model.safetensors"), **record}

    def _joint_space_of(self, teacher: dict[str, Any]) -> Any:
        from nas.space import get_space

        config = dict(teacher["space"])
        config.pop("family")
        return get_space("bert", **config)

    def _load_joint_teacher(self, ctx: Context, teacher: dict[str, Any]) -> Any:
        from nas.builder import build_child

        model = build_child(self._joint_space_of(teacher))
        load_weights(model, Path(teacher["weights"]))
        return model.eval().requires_grad_(False)

    # -- stage 6 ---------------------------------------------------------------------
    def task(self, ctx: Context, vocab: dict[str, Any], stage2: dict[str, Any],
             teacher: dict[str, Any]) -> None:
        """The student's task stage; writes ``student.safetensors`` in the run folder."""
        from nas.builder import build_child
        from nas.distill.mixedvocab import bert_init, copy_encoder
        from nas.train import Trainer

        cfg, run, s = ctx.cfg, ctx.run, ctx.cfg.task_stage
        out = run.path / "student.safetensors"
        if out.is_file():
            return
        t0 = time.time()
        seed = seed_stage(cfg.seed, "task")
        space = self._task_space(ctx, vocab)
        model = build_child(space)
        bert_init(model)  # the head; the encoder comes from stage II below
        mlm_student = build_child(cfg.student.build_space(vocab_size=vocab["size"]))
        load_weights(mlm_student, Path(stage2["weights"]))
        copied = copy_encoder(mlm_student, model)
        data = ctx.train
        steps = math.ceil(len(data) / s.batch_size)
        use_teacher = s.distill and s.alpha > 0
        if ctx.tagging:
            seg = self._student_segmenter(ctx)
            n_int = data.num_labels
            soft = self._joint_teacher_outputs(ctx, teacher, data) if use_teacher else None
            attach = _attach_joint_teacher(soft) if soft is not None else None

            def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
                order = np.random.default_rng(stage_seed(seed, f"order:{epoch}")).permutation(
                    len(data))
                return tagged_batches(seg, data, s.batch_size, order, start, attach)

            def loss(net: Any, b: dict[str, torch.Tensor]) -> Any:
                t = (b["t_intent"], b["t_tags"]) if "t_intent" in b else None
                return joint_loss(net(b).logits, b, n_int, t, s.alpha, s.temperature)

            dev = list(tagged_batches(seg, ctx.dev, 64))

            def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
                score = evaluate_joint(model, dev, n_int, data.tag_names)
                log.info("task epoch %d: loss %.4f, dev %s", epoch + 1, means["loss"], score)
                return {"dev": score}
        else:
            from evaluators.retrain import classify
            from nas.distill.losses import soft_cross_entropy

            logits = self._teacher_logits(ctx, teacher, data) if use_teacher else None
            batches = self._class_batches(ctx, data, s.batch_size, seed)
            dev = list(self._eval_batches(ctx, ctx.dev))

            def loss(net: Any, b: dict[str, torch.Tensor]) -> Any:
                out = net(b).logits
                gold = F.cross_entropy(out, b["labels"])
                if logits is None:
                    return gold, {"gold": float(gold.detach())}
                target = torch.from_numpy(logits[b["index"].numpy()])
                soft = soft_cross_entropy(out, target, s.temperature)
                return (1 - s.alpha) * gold + s.alpha * soft, {"gold": float(gold.detach()),
                                                               "soft": float(soft.detach())}

            def dev_score(epoch: int, means: dict[str, float]) -> dict[str, Any]:
                score = classify(model, dev, ctx.dev.metric)
                log.info("task epoch %d: loss %.4f, dev %s", epoch + 1, means["loss"], score)
                return {"dev": score}

        log.info("stage 6/8: task stage on %d examples (%d tensors from stage II, teacher "
                 "%s), %d steps per epoch", len(data), len(copied),
                 "soft targets on" if use_teacher else "off", steps)
        result = Trainer(model, loop_settings(s), batches, steps, loss,
                         checkpoint=run.checkpoint_path("task"), on_epoch_end=dev_score,
                         progress=ctx.progress(), desc="task").fit()
        save_weights(model, out)
        ctx.seconds["task"] = round(time.time() - t0, 1)
        run.log("task", steps=result.steps, seconds=round(result.seconds, 1),
                history=result.history, copied_tensors=len(copied), seed=seed)
        run.remove_checkpoint("task")

    def _task_space(self, ctx: Context, vocab: dict[str, Any]) -> Any:
        if ctx.tagging:
            return ctx.cfg.student.build_space(vocab_size=vocab["size"],
                                               num_labels=ctx.train.num_labels,
                                               num_tags=len(ctx.train.tag_names))
        return ctx.cfg.student.build_space(vocab_size=vocab["size"],
                                           num_labels=ctx.train.num_labels)

    def _student_segmenter(self, ctx: Context) -> Any:
        from nas.distill.mixedvocab import MixedSegmenter

        return MixedSegmenter(ctx.teacher_tokenizer, ctx.student_tokenizer, 1.0,
                              ctx.cfg.data.max_seq_len, specials="student")

    def _class_batches(self, ctx: Context, data: Any, batch_size: int, seed: int
                       ) -> Callable[[int, int], Iterator[Any]]:
        from nas.data import iter_batches

        def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
            return iter_batches(data, ctx.student_tokenizer, batch_size,
                                ctx.cfg.data.max_seq_len, shuffle=True,
                                seed=stage_seed(seed, f"order:{epoch}"), start_batch=start)
        return batches

    def _eval_batches(self, ctx: Context, data: Any, tokenizer: Any = None
                      ) -> Iterator[dict[str, torch.Tensor]]:
        from nas.data import iter_batches

        return iter_batches(data, tokenizer or ctx.student_tokenizer, 64,
                            ctx.cfg.data.max_seq_len)

    @torch.no_grad()
    def _joint_teacher_outputs(self, ctx: Context, teacher: dict[str, Any], data: Any
                               ) -> tuple[np.ndarray, list[np.ndarray]]:
        """The joint teacher's intent logits (N, I) and per-word tag logits (W_i, T) on
        ``data`` (words cut by the teacher's own vocabulary)."""
        from nas.distill.mixedvocab import MixedSegmenter

        model = self._load_joint_teacher(ctx, teacher)
        seg = MixedSegmenter(ctx.teacher_tokenizer, ctx.teacher_tokenizer, 0.0,
                             ctx.cfg.data.max_seq_len)
        n_int = data.num_labels
        intents = np.zeros((len(data), n_int), dtype=np.float32)
        tags: list[np.ndarray] = [np.zeros(0)] * len(data)
        log.info("teacher outputs on %d training examples", len(data))
        for b in tagged_batches(seg, data, 64):
            intent, word = word_tag_logits(model(b).logits, b["first_piece"], n_int)
            word = word.masked_fill((b["first_piece"] < 0).unsqueeze(-1), float("nan"))
            for r, i in enumerate(b["index"].tolist()):
                intents[i] = intent[r].numpy()
                tags[i] = word[r, :len(data.tags[i])].numpy()  # NaN: cut off by truncation
        return intents, tags

    @torch.no_grad()
    def _teacher_logits(self, ctx: Context, teacher: dict[str, Any], data: Any) -> np.ndarray:
        from nas.hf import load_teacher_as_design

        _, model = load_teacher_as_design(teacher["model_dir"])
        out = np.zeros((len(data), data.num_labels), dtype=np.float32)
        log.info("teacher logits on %d training examples", len(data))
        for b in self._eval_batches(ctx, data, ctx.teacher_tokenizer):
            out[b["index"].numpy()] = model(b).logits.numpy()
        return out

    # -- stages 7 and 8 --------------------------------------------------------------
    def evaluate_and_export(self, ctx: Context, vocab: dict[str, Any], teacher: dict[str, Any],
                            stage1: dict[str, Any], stage2: dict[str, Any]) -> dict[str, Any]:
        from nas.builder import build_child
        from nas.cost import count_costs, measure_latency
        from nas.export import export

        cfg, run = ctx.cfg, ctx.run
        log.info("stage 7/8: evaluation on dev")
        space = self._task_space(ctx, vocab)
        student = build_child(space)
        load_weights(student, run.path / "student.safetensors")
        student.eval()
        counted = count_costs(space, None, cfg.data.max_seq_len)
        split, data = self._report_data(ctx)
        examples = {bs: self._median_examples(data, bs) for bs in (1, 32)}
        if ctx.tagging:
            seg = self._student_segmenter(ctx)
            dev = evaluate_joint(student, list(tagged_batches(seg, ctx.dev, 64)),
                                 ctx.train.num_labels, ctx.train.tag_names)
            batches = {bs: _model_batch(next(tagged_batches(seg, ex, bs)))
                       for bs, ex in examples.items()}
            t_model = self._load_joint_teacher(ctx, teacher)
            t_space = self._joint_space_of(teacher)
            t_seg = type(seg)(ctx.teacher_tokenizer, ctx.teacher_tokenizer, 0.0,
                              cfg.data.max_seq_len)
            t_dev = evaluate_joint(t_model, list(tagged_batches(t_seg, ctx.dev, 64)),
                                   ctx.train.num_labels, ctx.train.tag_names)
            t_batches = {bs: _model_batch(next(tagged_batches(t_seg, ex, bs)))
                         for bs, ex in examples.items()}
        else:
            from evaluators.retrain import classify
            from nas.hf import load_teacher_as_design

            dev = classify(student, list(self._eval_batches(ctx, ctx.dev)), ctx.dev.metric)
            batches = {bs: _model_batch(next(self._eval_batches(ctx, ex)))
                       for bs, ex in examples.items()}
            t_space, t_model = load_teacher_as_design(teacher["model_dir"])
            t_dev = classify(t_model, list(self._eval_batches(ctx, ctx.dev,
                                                              ctx.teacher_tokenizer)),
                             ctx.dev.metric)
            t_batches = {bs: _model_batch(next(self._eval_batches(ctx, ex,
                                                                  ctx.teacher_tokenizer)))
                         for bs, ex in examples.items()}
        latency = {f"batch{bs}": measure_latency(student, b, repeats=cfg.latency_repeats
                                                 ).to_dict() for bs, b in batches.items()}
        t_latency = {f"batch{bs}": measure_latency(t_model, b, repeats=cfg.latency_repeats
                                                   ).to_dict() for bs, b in t_batches.items()}
        t_counted = count_costs(t_space, None, cfg.data.max_seq_len)
        t_params = sum(p.numel() for p in t_model.parameters())
        t_emb = int(t_model.nodes["emb"].word_embeddings.weight.numel())
        embedding = int(student.nodes["emb"].word_embeddings.weight.numel())
        row: dict[str, Any] = {
            "tag": "student", "space": cfg.student.space, "vocabulary": cfg.student.vocabulary,
            "vocab_size": vocab["size"],
            "shape": {k: space.config[k] for k in ("num_hidden_layers", "hidden_size",
                                                   "num_attention_heads", "intermediate_size",
                                                   "vocab_size")},
            "dev": dev, "params": counted.params, "embedding_params": embedding,
            "non_embedding_params": counted.params - embedding, "flops": counted.flops,
            "seq_len": counted.seq_len, "latency": latency,
            "teacher": {"tag": "teacher", "dev": t_dev, "params": t_params,
                        "embedding_params": t_emb, "flops": t_counted.flops,
                        "seq_len": t_counted.seq_len, "latency": t_latency},
            "recipe": {"stage1": {k: stage1.get(k) for k in (
                "enabled", "key", "steps", "train_seconds", "segmentation", "from_cache")},
                "stage1_last_epoch": (stage1.get("history") or [{}])[-1],
                "stage2": {k: stage2.get(k) for k in ("key", "steps", "train_seconds",
                                                       "from_cache")},
                "stage2_init": cfg.stage2.init, "distill_layers": cfg.stage2.distill_layers,
                "stage2_last_epoch": (stage2.get("history") or [{}])[-1],
                "task_distill": cfg.task_stage.distill and cfg.task_stage.alpha > 0,
                "train_examples": len(ctx.train), "vocab_dir": vocab["dir"]},
        }
        row["ratios"] = {"params": row["params"] / t_params,
                         "embedding_params": embedding / t_emb,
                         "latency_batch1": latency["batch1"]["median_ms"]
                         / t_latency["batch1"]["median_ms"]}
        if split != "dev":  # SST-2: dev shares phrases with train, test does not
            from evaluators.retrain import classify

            log.info("evaluation on %s (%d examples)", split, len(data))
            row[split] = classify(student, list(self._eval_batches(ctx, data)), data.metric)
            row["teacher"][split] = classify(t_model, list(self._eval_batches(
                ctx, data, ctx.teacher_tokenizer)), data.metric)
        row["evaluation"] = {"split": split, "file": ", ".join(data.sources),
                             "examples": len(data),
                             "latency_tokens": int(batches[1]["input_ids"].shape[1])}
        log.info("stage 8/8: export (native + onnx, with the student vocabulary)")
        if ctx.tagging:
            labels = list(ctx.train.label_names) + list(ctx.train.tag_names)
            head = {"kind": "joint", "num_intents": ctx.train.num_labels,
                    "intents": list(ctx.train.label_names), "tags": list(ctx.train.tag_names)}
        else:
            labels, head = list(ctx.train.label_names), None
        export(space, None, run.path / "export", model=student, fmt="onnx", labels=labels,
               tokenizer=vocab["dir"], max_length=cfg.data.max_seq_len, task=cfg.task,
               overwrite=True, head=head)
        run.save_json("student.json", row)
        run.log("student", dev=dev, params=row["params"], teacher_dev=t_dev)
        return row

    def _report_data(self, ctx: Context) -> tuple[str, Any]:
        """The split results are reported on: ``test`` when a classification task has one
        (SST-2), else dev (SNIPS here has train and valid only)."""
        from nas.data import load_task, report_split

        split = report_split(ctx.cfg.task)
        if split == "dev" or ctx.tagging:
            return "dev", ctx.dev
        return split, load_task(ctx.cfg.task, split, ctx.options.data_dir)

    def _median_examples(self, data: Any, n: int) -> Any:
        """The ``n`` examples of ``data`` closest to its median number of words (the
        latency inputs)."""
        lengths = np.asarray([len(t.split()) for t in data.texts_a])
        closest = np.argsort(np.abs(lengths - np.median(lengths)), kind="stable")[:n]
        return data.subset(sorted(closest.tolist()))

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


def cfg_finetune(cfg: MixedVocabConfig) -> Any:
    from nas.teacher import FinetuneConfig

    return FinetuneConfig(**cfg.teacher_finetune)


def _model_batch(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's inputs of a batch (what the latency is measured on)."""
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


def _attach_joint_teacher(soft: tuple[np.ndarray, list[np.ndarray]]
                          ) -> Callable[[np.ndarray, dict[str, Any]], None]:
    """A :func:`tagged_batches` hook adding the teacher's ``t_intent`` (B, I) and
    ``t_tags`` (B, W, T) (zeros past each sentence's words)."""
    intents, tags = soft

    def attach(idx: np.ndarray, batch: dict[str, Any]) -> None:
        words = batch["first_piece"].shape[1]
        t = np.zeros((len(idx), words, tags[idx[0]].shape[-1]), dtype=np.float32)
        for r, i in enumerate(idx):
            t[r, :len(tags[i])] = tags[i]
        known = ~np.isnan(t).any(-1)  # the teacher's truncation cut these words off
        batch["t_intent"] = torch.from_numpy(intents[idx])
        batch["t_tags"] = torch.from_numpy(np.nan_to_num(t))
        batch["t_valid"] = torch.from_numpy(known)

    return attach


__all__ = ["MixedVocab", "MixedVocabConfig", "evaluate_joint", "joint_loss", "load_config",
           "tagged_batches", "unlabeled_texts", "word_windows"]
