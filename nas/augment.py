"""TinyBERT data augmentation by word replacement (docs/reference.md#tinybert).

For each example, every word is replaced with probability ``p_t`` by one of ``M``
candidate words, producing ``N`` new examples (the original is kept as well). Candidates:

* the teacher's masked-LM head when it has one: the top-M predictions at a [MASK] put
  in place of a single-piece word (:class:`MlmCandidates`);
* otherwise, the M nearest neighbours of the word in the teacher's input-embedding
  space by cosine similarity (:class:`EmbeddingNeighbours`). The packaged MiniLM has no
  MLM head, so it always uses these.

Words that split into several WordPiece pieces get their candidates from a
word-embedding space in the paper (GloVe), which we do not ship. The mean of the
pieces' embeddings is a poor stand-in (its neighbours are mostly word fragments:
"unbelievably" → "un", "und", ...), so by default such words are left unchanged
(``multi_piece="skip"``); ``multi_piece="mean"`` uses the mean anyway.

Sampling is seeded per example (``seed`` and the example's index), so the output does not
depend on batching or on how many examples are processed. Results are cached by
(teacher, data, parameters) as a TSV file.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from nas.cache import cache_root, json_key
from nas.checkpoint import atomic_target
from nas.data.tasks import TaskData
from nas.errors import DataError, NasError


@dataclass(frozen=True)
class AugmentConfig:
    """Augmentation parameters (docs/reference.md#tinybert): p_t = 0.4, M = 15, N = 20 by
    default."""

    p_t: float = 0.4
    m: int = 15
    n: int = 20
    seed: int = 0
    max_seq_len: int = 128
    multi_piece: str = "skip"  # "skip" or "mean": see the module docstring

    def __post_init__(self) -> None:
        if self.multi_piece not in ("skip", "mean"):
            raise NasError(f"multi_piece must be 'skip' or 'mean', got {self.multi_piece!r}")
        if not 0.0 <= self.p_t <= 1.0 or self.m < 1 or self.n < 1:
            raise NasError(
                f"need 0 <= p_t <= 1, M >= 1 and N >= 1, got p_t={self.p_t}, M={self.m}, "
                f"N={self.n}"
            )


class CandidateSource(Protocol):
    """Gives up to M replacement candidates for each word of a sentence."""

    name: str

    def candidates(self, words: Sequence[str]) -> list[list[str]]: ...


def _is_replaceable(word: str) -> bool:
    # punctuation, numbers and special markers keep their place in the sentence
    return word.isalpha()


def _whole_word_ids(tokenizer: Any) -> np.ndarray:
    """Vocabulary ids of whole, alphabetic words (no ``##`` pieces, no [SPECIAL] tokens)."""
    vocab = tokenizer.get_vocab()
    return np.array(sorted(i for t, i in vocab.items() if t.isalpha() and len(t) > 1),
                    dtype=np.int64)


class EmbeddingNeighbours:
    """Nearest neighbours of a word in the teacher's input-embedding space (cosine).

    A word's vector is its piece embedding, or the mean of its pieces' embeddings when
    the tokenizer splits it; candidates are whole-word vocabulary entries.
    """

    name = "embedding-neighbours"

    def __init__(self, embeddings: np.ndarray, tokenizer: Any, m: int,
                 multi_piece: str = "skip") -> None:
        self.tokenizer = tokenizer
        self.m = m
        self.multi_piece = multi_piece
        self.ids = _whole_word_ids(tokenizer)
        emb = np.asarray(embeddings, dtype=np.float32)
        self.emb = emb
        cand = emb[self.ids]
        self.cand = cand / np.linalg.norm(cand, axis=1, keepdims=True).clip(1e-8)
        self.tokens = tokenizer.convert_ids_to_tokens(self.ids.tolist())
        self._memo: dict[str, list[str]] = {}

    def word(self, word: str) -> list[str]:
        key = word.lower()
        if key not in self._memo:
            pieces = self.tokenizer(key, add_special_tokens=False)["input_ids"]
            if not pieces or (len(pieces) > 1 and self.multi_piece == "skip"):
                self._memo[key] = []
            else:
                v = self.emb[pieces].mean(0)
                sims = self.cand @ (v / max(float(np.linalg.norm(v)), 1e-8))
                order = np.argsort(-sims, kind="stable")
                out: list[str] = []
                for j in order:
                    tok = self.tokens[j]
                    if tok != key:
                        out.append(tok)
                    if len(out) == self.m:
                        break
                self._memo[key] = out
        return self._memo[key]

    def candidates(self, words: Sequence[str]) -> list[list[str]]:
        return [self.word(w) if _is_replaceable(w) else [] for w in words]


class MlmCandidates:
    """Top-M masked-LM predictions for single-piece words; multi-piece words go to the
    embedding-neighbour fallback (skipped by default)."""

    name = "mlm"

    def __init__(self, mlm_model: Any, tokenizer: Any, m: int, max_seq_len: int = 128,
                 multi_piece: str = "skip") -> None:
        self.model = mlm_model.eval()
        self.tokenizer = tokenizer
        self.m = m
        self.max_seq_len = max_seq_len
        emb = mlm_model.get_input_embeddings().weight.detach().float().cpu().numpy()
        self.fallback = EmbeddingNeighbours(emb, tokenizer, m, multi_piece)
        allowed = np.zeros(emb.shape[0], dtype=bool)
        allowed[_whole_word_ids(tokenizer)] = True
        self.allowed = allowed

    def candidates(self, words: Sequence[str]) -> list[list[str]]:
        import torch

        tok = self.tokenizer
        out: list[list[str]] = [[] for _ in words]
        single: list[int] = []
        for i, w in enumerate(words):
            if not _is_replaceable(w):
                continue
            if len(tok(w.lower(), add_special_tokens=False)["input_ids"]) == 1:
                single.append(i)
            else:
                out[i] = self.fallback.word(w)
        if not single:
            return out
        # one row per single-piece word, that word replaced by [MASK] (batched forward)
        rows = [" ".join(tok.mask_token if j == i else w for j, w in enumerate(words))
                for i in single]
        enc = tok(rows, truncation=True, max_length=self.max_seq_len, padding=True,
                  return_tensors="pt")
        with torch.inference_mode():  # on the model's device (the run's: nas.device)
            device = next(self.model.parameters()).device
            logits = self.model(**{k: v.to(device) for k, v in enc.items()}).logits.cpu()
        mask_pos = enc["input_ids"] == tok.mask_token_id
        for r, i in enumerate(single):
            where = mask_pos[r].nonzero()
            if len(where) == 0:  # the word fell beyond max_seq_len
                continue
            scores = logits[r, int(where[0, 0])].float().numpy()
            scores = np.where(self.allowed, scores, -np.inf)
            best = np.argsort(-scores, kind="stable")[: self.m + 1]
            toks = [t for t in tok.convert_ids_to_tokens(best.tolist()) if t != words[i].lower()]
            out[i] = toks[: self.m]
        return out


def split_words(tokenizer: Any, text: str) -> list[str]:
    """BERT basic pre-tokenisation (whitespace and punctuation), original case kept."""
    return [w for w, _ in tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)]


def augment_sentence(
    words: Sequence[str], candidates: Sequence[Sequence[str]], config: AugmentConfig,
    rng: np.random.Generator,
) -> list[str]:
    """N new sentences: each word with candidates is replaced with probability p_t."""
    out = []
    for _ in range(config.n):
        new = [
            cands[int(rng.integers(len(cands)))] if cands and rng.random() < config.p_t else w
            for w, cands in zip(words, candidates, strict=True)
        ]
        out.append(" ".join(new))
    return out


def make_candidate_source(teacher: str | None, config: AugmentConfig) -> CandidateSource:
    """MLM candidates when the teacher has an MLM head, else embedding neighbours."""
    from nas.teacher import load_mlm_head, load_teacher, resolve_teacher
    from nas.tokenization import load_tokenizer

    path = resolve_teacher(teacher)
    tok = load_tokenizer(path)
    mlm = load_mlm_head(path)
    if mlm is not None:
        return MlmCandidates(mlm, tok, config.m, config.max_seq_len, config.multi_piece)
    enc = load_teacher(path)
    emb = enc.get_input_embeddings().weight.detach().float().cpu().numpy()
    return EmbeddingNeighbours(emb, tok, config.m, config.multi_piece)


def augment_task(
    data: TaskData,
    teacher: str | None = None,
    config: AugmentConfig | None = None,
    out_file: str | os.PathLike[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
    source: CandidateSource | None = None,
) -> dict[str, Any]:
    """Augment every example of ``data`` and write a TSV; cached (docs/reference.md#tinybert).

    The TSV has a header ``index<TAB>sentence[<TAB>sentence2]<TAB>label``: ``index`` is the
    source example's position, ``label`` its class index; each example's original comes
    first, then its N new versions (pairs: both sentences augmented). Returns a summary
    with the cache path and whether it was a cache hit.
    """
    from nas.teacher import resolve_teacher, teacher_identity

    config = config or AugmentConfig()
    if data.kind not in ("single", "pair"):
        raise DataError(f"augmentation supports single-sentence and pair tasks, not {data.kind}")
    tid = teacher_identity(teacher)
    key = json_key({"teacher": tid, "data": data.fingerprint, "config": asdict(config),
                    "source": source.name if source is not None else "auto", "version": 1})
    cached = cache_root(cache_dir) / "augment" / f"{data.task.replace('/', '_')}-{key}.tsv"
    summary = {"task": data.task, "split": data.split, "examples": len(data),
               "rows": len(data) * (config.n + 1), "config": asdict(config),
               "teacher": resolve_teacher(teacher), "cache_file": str(cached),
               "from_cache": cached.is_file()}
    if not cached.is_file():
        from tqdm.auto import tqdm

        from nas.tokenization import load_tokenizer

        src = source or make_candidate_source(teacher, config)
        summary["candidates"] = src.name
        tok = load_tokenizer(resolve_teacher(teacher))
        cached.parent.mkdir(parents=True, exist_ok=True)
        # complete files only: an interrupted run starts over
        with atomic_target(cached) as tmp, tmp.open("w", encoding="utf-8", newline="\n") as f:
            # plain tab-joined rows: quoting is off in our TSVs and _clean removes tabs
            header = ["index", "sentence", *(["sentence2"] if data.is_pair else []), "label"]
            f.write("\t".join(header) + "\n")
            for i in tqdm(range(len(data)), desc=f"augment {data.task}", disable=not progress):
                rng = np.random.default_rng([config.seed, i])
                texts = [data.texts_a[i]] + ([data.texts_b[i]] if data.texts_b else [])
                variants = []
                for text in texts:
                    words = split_words(tok, text)
                    variants.append(augment_sentence(words, src.candidates(words), config, rng))
                rows = [texts] + [[v[k] for v in variants] for k in range(config.n)]
                for row in rows:
                    f.write("\t".join([str(i), *map(_clean, row), str(data.labels[i])]) + "\n")
    if out_file is not None:
        out = Path(out_file)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cached, out)
        summary["output"] = str(out)
    return summary


@dataclass
class AugmentSettings:
    """An experiment file's ``augment:`` section: augment the training data before task
    distillation (docs/reference.md#tinybert: p_t 0.4, M 15, N 20). TinyBERT turns it on by default;
    for AdaBERT's retrain it is off unless the file has the section."""

    enabled: bool = True
    n: int = 20
    m: int = 15
    p_t: float = 0.4
    multi_piece: str = "skip"
    seed: int = 0

    def __post_init__(self) -> None:
        from nas.config import check_fields

        check_fields([("n", self.n >= 1, "an integer >= 1"), ("m", self.m >= 1, "an integer >= 1"),
                      ("p_t", 0.0 <= self.p_t <= 1.0, "in [0, 1]"),
                      ("multi_piece", self.multi_piece in ("skip", "mean"), "skip or mean")], self)

    def config(self, max_seq_len: int) -> AugmentConfig:
        return AugmentConfig(p_t=self.p_t, m=self.m, n=self.n, seed=self.seed,
                             max_seq_len=max_seq_len, multi_piece=self.multi_piece)


def augmented_training_data(data: TaskData, settings: AugmentSettings, teacher: str | None,
                            max_seq_len: int, progress: bool = True
                            ) -> tuple[TaskData, dict[str, Any]]:
    """``data`` with its N augmented versions per example (cached by
    :func:`augment_task`): what a recipe's task stage trains on; and the record a run logs
    of it (examples, rows, cache file, whether it came from the cache)."""
    summary = augment_task(data, teacher=teacher, config=settings.config(max_seq_len),
                           progress=progress)
    record = {k: summary[k] for k in ("examples", "rows", "cache_file", "from_cache")}
    return load_augmented(summary["cache_file"], like=data), record


def _clean(text: str) -> str:
    # quoting is off in our TSVs: tabs and newlines inside a text would break the row
    return " ".join(text.split())


def load_augmented(path: str | os.PathLike[str], like: TaskData) -> TaskData:
    """Read an augmented TSV back as a :class:`TaskData` with ``like``'s label names."""
    from nas.data.readers import read_tsv
    from nas.data.tasks import _hash_strings, file_digest

    p = Path(path)
    cols = ("sentence", "sentence2", "label") if like.is_pair else ("sentence", "label")
    rows = read_tsv(p, cols)
    labels = []
    for line, r in rows:
        if not r[-1].isdigit() or int(r[-1]) >= like.num_labels:
            raise DataError(f"{p}:{line}: label {r[-1]!r} is not a class index of {like.task}")
        labels.append(int(r[-1]))
    return TaskData(
        task=like.task, split=f"{like.split}-augmented", kind=like.kind,
        texts_a=tuple(r[0] for _, r in rows),
        texts_b=tuple(r[1] for _, r in rows) if like.is_pair else None,
        labels=tuple(labels), label_names=like.label_names, metric=like.metric,
        fingerprint=_hash_strings([like.task, "augmented", file_digest(p)]), sources=(str(p),),
    )
