"""Shared pieces of task-agnostic distillation on unlabeled text: the corpus, its batches,
and the teacher's cached outputs on them.

TinyBERT's general distillation (docs/reference.md#tinybert) and EfficientBERT's supernet warm-up
(docs/reference.md#efficientbert) both train a student against a teacher on unlabeled text
(WikiText-2 plus the task's training sentences without their labels), cut into pieces of at most
``max_seq_len`` tokens, and cache the result by its settings so that every later run starts from it.
This module holds what they share; each recipe keeps its own loss and model. The cache
entry's key, lock and weight files are :mod:`nas.cache`'s.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas.data.batching import token_lengths  # where it lives; kept here for its callers
from nas.seeding import stage_seed
from nas.train import TrainSettings

log = logging.getLogger("nas.distill")


def chunk_texts(tokenizer: Any, texts: list[str], max_tokens: int) -> list[str]:
    """Cut each text into pieces of at most ``max_tokens`` WordPiece tokens, at word
    boundaries (a piece never starts with a ``##`` continuation); pieces are slices of
    the original text, so tokenising one gives back its tokens."""
    pieces: list[str] = []
    counts = [len(ids) for ids in tokenizer(texts, add_special_tokens=False,
                                            verbose=False)["input_ids"]]
    long = [t for t, n in zip(texts, counts, strict=True) if n > max_tokens]
    pieces += [t for t, n in zip(texts, counts, strict=True) if n <= max_tokens]
    for start in range(0, len(long), 1024):  # only long texts need their token offsets
        batch = long[start:start + 1024]
        enc = tokenizer(batch, add_special_tokens=False, return_offsets_mapping=True,
                        verbose=False)
        for i, text in enumerate(batch):
            tokens, offsets = enc.tokens(i), enc["offset_mapping"][i]
            a = 0
            while a < len(tokens):
                b = min(a + max_tokens, len(tokens))
                while a + 1 < b < len(tokens) and tokens[b].startswith("##"):
                    b -= 1
                pieces.append(text[offsets[a][0]:offsets[b - 1][1]])
                a = b
    return [p for p in pieces if p.strip()]


def unlabeled(task: str, texts: list[str], source: str) -> Any:
    """Texts as a single-sentence :class:`~nas.data.TaskData` with one dummy label."""
    from nas.data import TaskData

    digest = hashlib.sha256("\0".join(texts).encode()).hexdigest()[:16]
    return TaskData(task=task, split="general", kind="single", texts_a=tuple(texts),
                    labels=(0,) * len(texts), label_names=("text",), fingerprint=digest,
                    sources=(source,))


def text_corpus(tokenizer: Any, *, task: str, task_train: Any, corpus: str,
                splits: Sequence[str], task_sentences: bool, max_texts: int | None,
                max_seq_len: int, seed: int, data_dir: str | None) -> Any:
    """The unlabeled text of general distillation / warm-up (docs/reference.md#efficientbert,
    #tinybert).

    ``corpus`` (a corpus name or a .txt path) in ``splits``, plus the task's training
    sentences (``task_sentences``) without labels, cut into pieces of at most
    ``max_seq_len`` tokens ([CLS] and [SEP] included); ``max_texts`` keeps a seeded
    random subset (drawn before and after cutting). Returns a
    :class:`~nas.data.TaskData` whose fingerprint identifies the text.
    """
    from nas.data import load_corpus

    sources: list[str] = []
    for split in splits:
        sources += load_corpus(corpus, split, data_dir)
    if task_sentences:
        sources += list(dict.fromkeys(list(task_train.texts_a) + list(task_train.texts_b or ())))
    rng = np.random.default_rng(stage_seed(seed, "general-texts"))
    if max_texts is not None and max_texts < len(sources):  # sample before cutting
        sources = [sources[i] for i in np.sort(rng.permutation(len(sources))[:max_texts])]
    texts = chunk_texts(tokenizer, sources, max_seq_len - 2)
    if max_texts is not None and max_texts < len(texts):
        texts = [texts[i] for i in np.sort(rng.permutation(len(texts))[:max_texts])]
    return unlabeled(task, texts, f"{corpus}[{','.join(splits)}]"
                     + (f" + {task} train sentences" if task_sentences else ""))


def check_text_settings(settings: Any, no_text: str) -> None:
    """The unlabeled-text keys that general distillation, the warm-up and the mixed-vocab
    MLM stages share (``corpus_splits``, ``max_texts``, ``task_sentences``), checked
    alike (and their ``seed``); ``no_text`` starts the error when neither a corpus split
    nor the task's sentences are asked for."""
    from nas.config import cap_ok, check_fields
    from nas.seeding import SEED_RANGE, is_seed

    check_fields([("corpus_splits", isinstance(settings.corpus_splits, list)
                   and all(isinstance(s, str) for s in settings.corpus_splits),
                   "a list of names"),
                  ("max_texts", cap_ok(settings.max_texts), "null (all) or an integer >= 1"),
                  ("seed", is_seed(settings.seed), SEED_RANGE)], settings)
    if not settings.corpus_splits and not settings.task_sentences:
        raise ValueError(f"{no_text}: corpus_splits is empty and task_sentences is false")


@dataclass
class TextDistillSettings(TrainSettings):
    """Distillation on unlabeled text (TinyBERT's general distillation, EfficientBERT's
    warm-up): the shared loop's settings plus the text and the seed.

    ``corpus`` (a corpus name or a .txt path) in ``corpus_splits`` plus the task's
    training sentences (``task_sentences``) without labels, cut into pieces of at most
    ``max_seq_len`` tokens; ``max_texts`` keeps a seeded random subset of them.
    ``no_text`` starts the error when neither is asked for.
    """

    no_text = "distillation on text needs text"  # a class constant, not a setting

    corpus: str = "wikitext2"
    corpus_splits: list = field(default_factory=lambda: ["valid", "test"])
    task_sentences: bool = True
    max_texts: int | None = None
    max_seq_len: int = 64
    seed: int = 0
    lr: float = 5e-4
    warmup_fraction: float = 0.05
    schedule: str = "linear"
    grad_clip: float | None = 1.0

    def __post_init__(self) -> None:
        from nas.config import check_fields

        super().__post_init__()
        check_text_settings(self, self.no_text)
        check_fields([("max_seq_len", 8 <= self.max_seq_len <= 512, "in [8, 512]")], self)


def seeded_batches(data: Any, tokenizer: Any, batch_size: int, max_seq_len: int, seed: int,
                   stage: str, lengths: np.ndarray | None = None
                   ) -> Callable[[int, int], Iterator[dict[str, torch.Tensor]]]:
    """The Trainer's batch source: (length-grouped) batches in a seeded order per epoch,
    the same for the same ``seed`` and ``stage`` (what makes resume exact)."""
    from nas.data import iter_batches

    def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
        return iter_batches(data, tokenizer, batch_size, max_seq_len, shuffle=True,
                            seed=stage_seed(seed, f"{stage}-order:{epoch}"), start_batch=start,
                            lengths=lengths)

    return batches


def cached_teacher_logits(model_dir: str, teacher: Callable[[], Any], data: Any,
                          tokenizer: Any, max_seq_len: int, progress: bool = False
                          ) -> np.ndarray:
    """The fine-tuned teacher's logits on ``data`` (N, C), cached beside its other outputs
    (:class:`nas.distill.cache.TeacherOutputCache`: shared by every run on the same data);
    ``teacher()`` gives the model (called only when the cache lacks them)."""
    from nas.distill.cache import TeacherOutputCache

    cache = TeacherOutputCache(model_dir, data, max_seq_len)
    if cache.has("logits"):
        return cache.load("logits")
    log.info("teacher logits on %d rows (cached for later runs)", len(data))
    return cache.save("logits", model_logits(teacher(), data, tokenizer, max_seq_len,
                                             progress, desc="teacher logits"))


def model_logits(model: Any, data: Any, tokenizer: Any, max_seq_len: int,
                 progress: bool = False, desc: str = "logits") -> np.ndarray:
    """``model``'s logits on ``data`` (N, C) float32, in length-sorted batches of 128
    (little padding), in data order: the teacher's, or a teacher assistant's."""
    import math

    from tqdm.auto import tqdm

    from nas.data import iter_batches

    lengths = token_lengths(tokenizer, data, max_seq_len)
    order = np.argsort(lengths, kind="stable")  # length-sorted batches: little padding
    out = np.zeros((len(data), data.num_labels), dtype=np.float32)
    sub = data.subset(order.tolist())
    with torch.inference_mode():
        for batch in tqdm(iter_batches(sub, tokenizer, 128, max_seq_len),
                          total=math.ceil(len(sub) / 128), desc=desc, disable=not progress):
            out[order[batch["index"].numpy()]] = model(batch).logits.float().cpu().numpy()
    return out


class CachedTeacher:
    """A frozen teacher whose recorded states are stored on disk per batch, so that batches
    seen again (the same proxy batches for every candidate of a search) cost a file read
    instead of a forward pass. Called like the teacher: ``teacher(batch, record=...)``.

    A batch is identified by a hash of its token tensors and of the states asked for;
    entries are safetensors files of fp16 tensors (logits and every recorded state),
    written atomically (parallel workers may race; both write the same content).
    ``teacher()`` gives the model, loaded only on the first miss.
    """

    def __init__(self, teacher: Callable[[], Any], folder: Path) -> None:
        self._teacher, self.folder = teacher, Path(folder)
        self._model: Any = None
        self.hits = self.misses = 0

    @staticmethod
    def key(batch: Any, record: Sequence[str]) -> str:
        h = hashlib.sha256(",".join(sorted(record)).encode())
        for name in ("input_ids", "attention_mask", "token_type_ids"):
            t = batch.get(name)
            if t is not None:
                h.update(name.encode())
                h.update(str(tuple(t.shape)).encode())
                h.update(t.detach().cpu().contiguous().numpy().tobytes())
        return h.hexdigest()[:24]

    def __call__(self, batch: Any, record: Sequence[str] = ()) -> Any:
        from nas.cache import load_tensors
        from nas.checkpoint import save_safetensors
        from nas.network import ModelOutput

        path = self.folder / f"{self.key(batch, record)}.safetensors"
        if path.is_file():
            self.hits += 1
            # beside the batch, on the run's device (nas.device): the student's side
            state = load_tensors(path, device=str(batch["input_ids"].device))
            records: dict[str, list[torch.Tensor]] = {}
            for name in sorted(k for k in state if k != "logits"):  # "<kind>.<layer:03d>"
                kind = name.rsplit(".", 1)[0]
                records.setdefault(kind, []).append(state[name].float())
            return ModelOutput(state["logits"].float(), records)
        self.misses += 1
        if self._model is None:
            self._model = self._teacher()
        with torch.no_grad():
            out = self._model(batch, record=tuple(record))
        state = {"logits": out.logits.detach().half().contiguous()}
        for kind, tensors in out.records.items():
            for i, t in enumerate(tensors):
                state[f"{kind}.{i:03d}"] = t.detach().half().contiguous()
        self.folder.mkdir(parents=True, exist_ok=True)
        # written from the host, whatever the device
        save_safetensors({k: v.cpu() for k, v in state.items()}, path)
        # the caller gets what a hit would give: every candidate sees the same targets
        return ModelOutput(state["logits"].float(), {
            kind: [t.half().float() for t in tensors] for kind, tensors in out.records.items()})


__all__ = [
    "CachedTeacher",
    "TextDistillSettings",
    "cached_teacher_logits",
    "model_logits",
    "check_text_settings",
    "chunk_texts",
    "seeded_batches",
    "text_corpus",
    "token_lengths",
    "unlabeled",
]
