"""Mixed-vocabulary distillation (Zhao et al., 2019; docs/reference.md#mixed-vocabulary): the shared
parts.

* :class:`MixedSegmenter` — each *word* (a whitespace-separated token, so the original
  word boundaries are kept for tagging) is cut into pieces by the student vocabulary with
  probability ``p_student`` (p_SV = 0.5), else by the teacher's. The draws come from a
  generator the caller seeds (:func:`batch_rng`: the stage's seed, the epoch and the
  batch index), so a segmentation is reproducible and a resumed run repeats it exactly.
* :func:`mask_tokens` — BERT's masking (15 % of the word pieces; 80 % ``[MASK]``, 10 %
  a random piece, 10 % unchanged), each position using the vocabulary that segmented it.
* :class:`MixedVocabMLM` — stage I: the teacher (a :class:`~nas.network.GraphNet` of the
  ``bert`` design) reading mixed input. Student-vocabulary pieces use student embeddings
  of width d_S up-projected to d_T by a trainable affine map; a masked piece is predicted
  by a softmax over the vocabulary that segmented it. Teacher, student embeddings, the
  map and both heads train.
* :class:`StudentMLM` — stage II: the student with an MLM head over its own vocabulary,
  on student-vocabulary input only; optionally distilled layer by layer from the stage-I
  teacher reading the same student pieces (:class:`LayerDistillation`, the recipe's
  switch, off by default).

The packaged MiniLM teacher has **no MLM head** (a sentence-embedding model ships encoder
weights only, :func:`nas.teacher.load_mlm_head`). :class:`MLMHead` therefore starts from
the tied input embeddings: its decoder *is* the word-embedding table (BERT ties them too),
its transform (dense, GELU, LayerNorm) starts at the identity matrix with zero bias, and
its output bias at zero; stage I trains it with the rest.

The recipe's other parts that are not steps live here too: the unlabeled text and its
cache keys (:func:`unlabeled_texts`, :func:`word_windows`, :func:`text_key`), the MLM
batch source (:func:`mlm_batches`), and how a model reads a task and is scored and
distilled on it (:func:`task_reader`: a :class:`JointReader` for tagging — SNIPS's
intent + slot head, tags compared at each word's first piece — or a :class:`ClassReader`),
the task teacher's loading (:func:`load_task_teacher`) and a model's report row
(:func:`model_row`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from nas.seeding import stage_seed

if TYPE_CHECKING:
    from nas.network import GraphNet

log = logging.getLogger("nas.mixedvocab")

TEACHER, STUDENT = 0, 1  # the values of a batch's ``vocab`` entry
VOCABS = ("teacher", "student")
IGNORE = -100


# ---------------------------------------------------------------------- segmentation


def batch_rng(seed: int, epoch: int, batch: int) -> np.random.Generator:
    """The generator of one batch's segmentation and masking: a function of the stage's
    seed, the epoch and the batch index only (resume-exact, no global state)."""
    return np.random.default_rng([int(seed) % (1 << 63), int(epoch), int(batch)])


@dataclass
class Segment:
    """One segmented sentence: piece ids, which vocabulary each came from, and the word
    each belongs to (``-1`` for ``[CLS]``/``[SEP]``)."""

    ids: list[int]
    vocab: list[int]
    words: list[int]
    num_words: int


class MixedSegmenter:
    """Per-word mixed segmentation with the teacher's and the student's WordPiece
    vocabularies (docs/reference.md#mixed-vocabulary). ``p_student``: probability that a word is cut
    by the student vocabulary (1.0: student only, stage II; 0.0: teacher only). ``[CLS]``/``[SEP]``
    come from the vocabulary ``specials`` names. A sentence is cut at a word boundary when it
    would exceed ``max_length`` pieces."""

    def __init__(self, teacher_tokenizer: Any, student_tokenizer: Any, p_student: float = 0.5,
                 max_length: int = 128, specials: str = "teacher") -> None:
        if not 0.0 <= p_student <= 1.0:
            raise ValueError(f"p_student must be in [0, 1], got {p_student!r}")
        if specials not in VOCABS:
            raise ValueError(f"specials must be one of {VOCABS}, got {specials!r}")
        self.tokenizers = (teacher_tokenizer, student_tokenizer)
        self.p_student = float(p_student)
        self.max_length = int(max_length)
        self._cache: tuple[dict[str, list[int]], dict[str, list[int]]] = ({}, {})
        self.special_vocab = VOCABS.index(specials)
        tok = self.tokenizers[self.special_vocab]
        self.cls_id, self.sep_id = int(tok.cls_token_id), int(tok.sep_token_id)
        self.sizes = tuple(len(t) for t in self.tokenizers)
        self.mask_ids = tuple(int(t.mask_token_id) for t in self.tokenizers)
        self.pad_ids = tuple(int(t.pad_token_id) for t in self.tokenizers)
        # ids below this are special tokens in each vocabulary (never a random replacement)
        self.first_regular = tuple(_first_regular(t) for t in self.tokenizers)

    def pieces(self, words: Iterable[str], vocab: int) -> list[list[int]]:
        """The piece ids of each word in ``vocab`` (memoised; new words tokenised at once)."""
        words = list(words)
        cache, tok = self._cache[vocab], self.tokenizers[vocab]
        new = list(dict.fromkeys(w for w in words if w not in cache))
        if new:
            for w, ids in zip(new, tok(new, add_special_tokens=False)["input_ids"], strict=True):
                cache[w] = list(ids)
        return [cache[w] for w in words]

    def segment(self, words: Sequence[str], rng: np.random.Generator) -> Segment:
        """One sentence (a list of words) segmented with a fresh draw per word."""
        use_student = rng.random(len(words)) < self.p_student
        by_vocab = (self.pieces(words, TEACHER), self.pieces(words, STUDENT))
        sv = self.special_vocab
        ids, vocab, owner = [self.cls_id], [sv], [-1]
        for i in range(len(words)):
            v = int(use_student[i])
            pcs = by_vocab[v][i]
            if len(ids) + len(pcs) > self.max_length - 1:
                break  # cut at a word boundary
            ids += pcs
            vocab += [v] * len(pcs)
            owner += [i] * len(pcs)
        ids.append(self.sep_id)
        vocab.append(sv)
        owner.append(-1)
        return Segment(ids, vocab, owner, len(words))

    def collate(self, segments: Sequence[Segment]) -> dict[str, torch.Tensor]:
        """Pad to the longest: ``input_ids``, ``vocab``, ``attention_mask``,
        ``token_type_ids``, ``word_ids`` (B, L) and ``first_piece`` (B, W): the position
        of each word's first piece (``-1``: padding or cut off)."""
        n, width = len(segments), max(len(s.ids) for s in segments)
        words = max(max(s.num_words for s in segments), 1)
        pad_vocab = self.special_vocab
        ids = torch.full((n, width), self.pad_ids[pad_vocab], dtype=torch.long)
        vocab = torch.full((n, width), pad_vocab, dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        owner = torch.full((n, width), -1, dtype=torch.long)
        first = torch.full((n, words), -1, dtype=torch.long)
        for b, s in enumerate(segments):
            k = len(s.ids)
            ids[b, :k] = torch.tensor(s.ids)
            vocab[b, :k] = torch.tensor(s.vocab)
            mask[b, :k] = 1
            owner[b, :k] = torch.tensor(s.words)
            seen: set[int] = set()
            for pos, w in enumerate(s.words):
                if w >= 0 and w not in seen:
                    first[b, w] = pos
                    seen.add(w)
        return {"input_ids": ids, "vocab": vocab, "attention_mask": mask,
                "token_type_ids": torch.zeros_like(ids), "word_ids": owner,
                "first_piece": first}

    def batch(self, sentences: Sequence[Sequence[str]], rng: np.random.Generator
              ) -> dict[str, torch.Tensor]:
        return self.collate([self.segment(words, rng) for words in sentences])


def _first_regular(tokenizer: Any) -> int:
    """The first id after the special and ``[unused…]`` rows (BERT's vocabulary puts them
    first): random replacements are drawn from here on."""
    special = {int(i) for i in tokenizer.all_special_ids}
    tokens = tokenizer.convert_ids_to_tokens(list(range(min(len(tokenizer), 2000))))
    for i, t in enumerate(tokens):
        if i not in special and not t.startswith("[unused"):
            return i
    return 0


def mask_tokens(batch: dict[str, torch.Tensor], segmenter: MixedSegmenter,
                rng: np.random.Generator, probability: float = 0.15) -> dict[str, torch.Tensor]:
    """BERT's masking of the word pieces (never ``[CLS]``/``[SEP]``/padding), each in its
    own vocabulary: returns the batch with masked ``input_ids`` and ``labels`` (the
    original id at chosen positions, ``-100`` elsewhere)."""
    ids, vocab = batch["input_ids"].numpy().copy(), batch["vocab"].numpy()
    eligible = batch["word_ids"].numpy() >= 0
    chosen = eligible & (rng.random(ids.shape) < probability)
    labels = np.where(chosen, ids, IGNORE)
    action = rng.random(ids.shape)
    for v in (TEACHER, STUDENT):
        here = chosen & (vocab == v)
        to_mask = here & (action < 0.8)
        ids[to_mask] = segmenter.mask_ids[v]
        to_random = here & (action >= 0.8) & (action < 0.9)
        ids[to_random] = rng.integers(segmenter.first_regular[v], segmenter.sizes[v],
                                      size=int(to_random.sum()))
    return {**batch, "input_ids": torch.from_numpy(ids), "labels": torch.from_numpy(labels)}


# --------------------------------------------------------------------------- models


class MLMHead(nn.Module):
    """BERT's MLM head over a given (tied) output table: ``LN(gelu(W·h)) · Eᵀ + b``.

    Starts from the tied input embeddings (see the module docstring): ``W`` = identity,
    zero biases, so before training it scores a state against the embedding table.
    """

    def __init__(self, hidden: int, vocab_size: int, eps: float = 1e-12) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, hidden)
        with torch.no_grad():
            self.dense.weight.copy_(torch.eye(hidden))
            self.dense.bias.zero_()
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        self.bias = nn.Parameter(torch.zeros(vocab_size))

    def forward(self, h: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        x = self.LayerNorm(F.gelu(self.dense(h)))  # (N, H)
        return x @ table.t() + self.bias  # (N, V)


def _mlm_terms(h: torch.Tensor, labels: torch.Tensor, which: torch.Tensor,
               heads: Sequence[tuple[str, int, Any]]) -> tuple[torch.Tensor, dict[str, float]]:
    """Cross-entropy of the masked positions, each over its own vocabulary; the mean over
    all masked positions, plus loss and accuracy per vocabulary (NaN when a vocabulary
    had no masked piece in the batch: the Trainer skips NaN in its means)."""
    total = h.new_zeros(())
    count = 0
    info: dict[str, float] = {}
    for name, v, score in heads:
        sel = (labels != IGNORE) & (which == v)
        n = int(sel.sum())
        if n == 0:
            info[f"mlm_loss_{name}"] = info[f"mlm_acc_{name}"] = float("nan")
            continue
        logits = score(h[sel])  # (N, V_vocab)
        target = labels[sel]
        loss = F.cross_entropy(logits, target, reduction="sum")
        total = total + loss
        count += n
        info[f"mlm_loss_{name}"] = float(loss.detach()) / n
        info[f"mlm_acc_{name}"] = float((logits.argmax(-1) == target).float().mean())
    return total / max(count, 1), info


def model_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The model's inputs of a batch (what a forward pass and the latency read)."""
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")
            if k in batch}


class MixedVocabMLM(nn.Module):
    """Stage I (docs/reference.md#mixed-vocabulary): the teacher continues MLM on mixed-vocabulary
    input.

    ``teacher``: a :class:`~nas.network.GraphNet` of the ``bert`` design (its word
    embeddings are read through ``nodes["emb"]``). ``student_embeddings`` (V_S, d_S) and
    ``up`` (d_S → d_T, affine) give the student pieces' input vectors; the student head's
    output table is the up-projected student embeddings (tied, as BERT ties input and
    output embeddings), so the stage trains exactly the table stage II starts from.
    """

    def __init__(self, teacher: GraphNet, student_vocab_size: int, student_dim: int,
                 eps: float = 1e-12) -> None:
        super().__init__()
        self.teacher = teacher
        table = self.teacher_table()
        d_t = table.shape[1]
        self.student_embeddings = nn.Embedding(student_vocab_size, student_dim)
        nn.init.normal_(self.student_embeddings.weight, std=0.02)  # BERT's initialiser
        self.up = nn.Linear(student_dim, d_t)
        self.teacher_head = MLMHead(d_t, table.shape[0], eps)
        self.student_head = MLMHead(d_t, student_vocab_size, eps)

    def teacher_table(self) -> torch.Tensor:
        return self.teacher.word_embeddings()  # (V_T, d_T)

    def student_table(self) -> torch.Tensor:
        return self.up(self.student_embeddings.weight)  # (V_S, d_T)

    def word_vectors(self, ids: torch.Tensor, vocab: torch.Tensor) -> torch.Tensor:
        """(B, L, d_T): teacher rows for teacher pieces, W·e_S + b for student pieces."""
        student = vocab == STUDENT
        t = F.embedding(torch.where(student, 0, ids), self.teacher_table())
        s = self.up(self.student_embeddings(torch.where(student, ids, 0)))
        return torch.where(student.unsqueeze(-1), s, t)

    def encode(self, batch: Mapping[str, torch.Tensor], record: tuple[str, ...] = ()) -> Any:
        """The teacher's forward pass on mixed input, recording ``hidden_states``."""
        feed = model_inputs(batch)
        feed["inputs_embeds"] = self.word_vectors(batch["input_ids"], batch["vocab"])
        return self.teacher(feed, record=("hidden_states", *record))

    def forward(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor,
                                                                 dict[str, float]]:
        h = self.encode(batch).records["hidden_states"][-1]  # (B, L, d_T)
        s_table = self.student_table()
        return _mlm_terms(h, batch["labels"], batch["vocab"], (
            ("teacher", TEACHER, lambda x: self.teacher_head(x, self.teacher_table())),
            ("student", STUDENT, lambda x: self.student_head(x, s_table))))


class StudentMLM(nn.Module):
    """Stage II (docs/reference.md#mixed-vocabulary): the student with an MLM head tied to its word
    embeddings, on student-vocabulary input only; ``fits`` (width maps d_S → d_T per mapped layer)
    when layer-wise distillation is on."""

    def __init__(self, student: GraphNet, eps: float = 1e-12,
                 fits: nn.ModuleList | None = None) -> None:
        super().__init__()
        self.student = student
        table = self.table()
        self.head = MLMHead(table.shape[1], table.shape[0], eps)
        self.fits = fits if fits is not None else nn.ModuleList()

    def table(self) -> torch.Tensor:
        return self.student.word_embeddings()  # (V_S, d_S)

    def forward(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Any,
                                                                 dict[str, float]]:
        """``(MLM loss, the student's output with hidden states, logged values)``."""
        out = self.student(model_inputs(batch), record=("hidden_states",))
        h = out.records["hidden_states"][-1]
        table = self.table()
        loss, info = _mlm_terms(h, batch["labels"], torch.full_like(batch["labels"], STUDENT),
                                (("student", STUDENT, lambda x: self.head(x, table)),))
        return loss, out, info


def as_teacher_specials(batch: Mapping[str, torch.Tensor], segmenter: MixedSegmenter
                        ) -> dict[str, torch.Tensor]:
    """A student-only batch (student ``[CLS]``/``[SEP]``/``[PAD]``) as the stage-I teacher
    reads it: the special tokens in the teacher's vocabulary, every piece a student one."""
    t_tok, s_tok = segmenter.tokenizers
    ids, vocab = batch["input_ids"].clone(), torch.full_like(batch["input_ids"], STUDENT)
    specials = batch["word_ids"] < 0
    for name in ("cls_token_id", "sep_token_id", "pad_token_id"):
        here = specials & (batch["input_ids"] == int(getattr(s_tok, name)))
        ids[here] = int(getattr(t_tok, name))
        vocab[here] = TEACHER
    return {**batch, "input_ids": ids, "vocab": vocab}


class LayerDistillation:
    """Stage II's layer-wise distillation (off by default): the stage-I teacher (``state``:
    a :class:`MixedVocabMLM`'s weights) reads the student's pieces with its own specials
    (:func:`as_teacher_specials`); student layer m, through a width map (``fits``, trained
    with the student), matches teacher layer g(m) of the uniform map by MSE."""

    def __init__(self, teacher_dir: Any, state: Mapping[str, torch.Tensor], vocab_size: int,
                 student: Mapping[str, Any]) -> None:
        from nas.device import place
        from nas.distill.losses import FitMap, layer_map
        from nas.hf import load_teacher_as_design

        t_space, t_net = load_teacher_as_design(teacher_dir)
        self.teacher = place(MixedVocabMLM(t_net, vocab_size, student["hidden_size"],
                                           t_space.config["layer_norm_eps"]))
        self.teacher.load_state_dict(state)
        self.teacher.eval().requires_grad_(False)
        self.mapping = layer_map(student["num_hidden_layers"],
                                 t_space.config["num_hidden_layers"])
        self.fits = nn.ModuleList(FitMap(student["hidden_size"], t_space.config["hidden_size"])
                                  for _ in self.mapping)

    def loss(self, out: Any, batch: Mapping[str, torch.Tensor], segmenter: MixedSegmenter,
             fits: nn.ModuleList) -> torch.Tensor:
        """The summed MSE of the mapped layers (``out``: the student's, with its hidden
        states; ``fits``: the width maps as the trained model holds them)."""
        from nas.distill.losses import fit_mse

        with torch.no_grad():
            t = self.teacher.encode(as_teacher_specials(batch, segmenter)).records
        total = sum(fit_mse(out.records["hidden_states"][m], t["hidden_states"][g - 1], fits[m])
                    for m, g in enumerate(self.mapping))
        return cast(torch.Tensor, total)  # a tensor: the mapping is never empty


@torch.no_grad()
def bert_init(model: nn.Module, std: float = 0.02) -> None:
    """BERT's initialisation (HF ``BertPreTrainedModel._init_weights``): every matrix and
    embedding table from N(0, std²), biases 0, normalisation weights 1.

    Why: a built child's tables start at N(0, 1) (``nn.Embedding``'s default); a word table
    of BERT's scale (stage I's) summed with position embeddings a fifty times larger is
    erased by the LayerNorm that follows, and the student learns nothing from its words.
    """
    for name, p in model.named_parameters():
        if p.ndim >= 2:
            nn.init.normal_(p, std=std)
        elif name.endswith("weight"):  # LayerNorm's γ (a 1-D weight is always a norm's)
            nn.init.ones_(p)
        else:
            nn.init.zeros_(p)


@torch.no_grad()
def copy_encoder(src: nn.Module, dst: nn.Module, skip: Sequence[str] = ("nodes.head.",)
                 ) -> list[str]:
    """Copy every tensor of ``src`` that ``dst`` has under the same name and shape, except
    those under ``skip`` (the head); returns the names copied."""
    mine = dst.state_dict()
    copied = []
    for name, tensor in src.state_dict().items():
        if any(name.startswith(s) for s in skip) or name not in mine:
            continue
        if tuple(mine[name].shape) == tuple(tensor.shape):
            mine[name].copy_(tensor)
            copied.append(name)
    return copied


# ---------------------------------------------------------------------- the text


def unlabeled_texts(settings: Any, task_train: Any, data_dir: str | None) -> list[str]:
    """The unlabeled text of the vocabulary and both MLM stages: the ``settings.corpus``
    lines in ``corpus_splits`` plus the task's training sentences (``task_sentences``),
    a seeded subset of ``max_texts`` when set (seed ``settings.seed``)."""
    from nas.data import load_corpus

    texts: list[str] = []
    for split in settings.corpus_splits:
        texts += load_corpus(settings.corpus, split, data_dir)
    if settings.task_sentences:
        texts += list(dict.fromkeys(list(task_train.texts_a) + list(task_train.texts_b or ())))
    texts = [x for x in texts if x.strip()]
    if settings.max_texts is not None and settings.max_texts < len(texts):
        rng = np.random.default_rng(stage_seed(settings.seed, "mixedvocab-texts"))
        texts = [texts[i] for i in np.sort(rng.permutation(len(texts))[: settings.max_texts])]
    return texts


def word_windows(texts: Sequence[str], max_words: int) -> list[list[str]]:
    """Texts as lists of whitespace words, long ones cut into windows of ``max_words``."""
    out = []
    for text in texts:
        words = text.split()
        out += [words[i:i + max_words] for i in range(0, len(words), max_words)]
    return [w for w in out if w]


def text_key(texts: Sequence[str]) -> str:
    """A 16-hex key of a list of texts (the part of a cache key that names the text)."""
    return hashlib.sha256(json.dumps(list(texts), sort_keys=True, default=str).encode()
                          ).hexdigest()[:16]


def windows_key(windows: Sequence[Sequence[str]]) -> str:
    """The :func:`text_key` of word windows (an MLM stage's text)."""
    return text_key(["\n".join(" ".join(w) for w in windows)])


# ------------------------------------------------------------------- MLM batches


def mlm_batches(segmenter: MixedSegmenter, windows: Sequence[Sequence[str]], batch_size: int,
                seed: int, mask_probability: float
                ) -> tuple[Callable[[int, int], Iterator[dict[str, torch.Tensor]]], int]:
    """``(batches, steps per epoch)``: the Trainer's batch source for an MLM stage, a
    seeded order per epoch; each batch segmented and masked with :func:`batch_rng` (seed,
    epoch, batch), so batch k of an epoch is the same on resume."""
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


def step_logger(stage: str, every: int = 50) -> Callable[[int, dict[str, float]], None]:
    """A Trainer ``after_step`` hook logging the step's values every ``every`` steps."""
    def after(step: int, info: dict[str, float]) -> None:
        if step % every == 0:
            log.info("%s step %d: %s", stage, step, ", ".join(
                f"{k} {v:.4g}" for k, v in info.items() if not math.isnan(v)))
    return after


# ------------------------------------------------------------- tagging (joint head)


def tagged_batches(segmenter: MixedSegmenter, data: Any, batch_size: int,
                   order: Sequence[int] | np.ndarray | None = None, start: int = 0,
                   extra: Callable[[np.ndarray, dict[str, Any]], None] | None = None
                   ) -> Iterator[dict[str, torch.Tensor]]:
    """Batches of a tagging task through a single-vocabulary segmenter (``p_student`` 0
    or 1: no random draw): the segmenter's keys plus ``labels`` (intent, B),
    ``tag_labels`` (B, W; one tag per word, ``-100`` for padding) and ``index``;
    ``extra(indices, batch)`` adds to each batch."""
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
        intent, tags = word_tag_logits(model(b).logits.cpu(), b["first_piece"], num_intents)
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


def attach_joint_targets(targets: tuple[np.ndarray, list[np.ndarray]]
                         ) -> Callable[[np.ndarray, dict[str, Any]], None]:
    """A :func:`tagged_batches` hook adding the teacher's ``t_intent`` (B, I), ``t_tags``
    (B, W, T) (zeros past each sentence's words) and ``t_valid`` (B, W)."""
    intents, tags = targets

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


def joint_space(base: Any, num_intents: int, num_tags: int) -> Any:
    """The ``bert`` design of ``base`` (a space of that family) with the joint intent +
    slot head."""
    from nas.space import get_space

    shape = {k: v for k, v in base.config.items()
             if k not in ("family", "num_labels", "fit_size", "head", "num_tags")}
    return get_space("bert", **shape, head="joint", num_labels=num_intents, num_tags=num_tags)


def bert_space(config: dict[str, Any]) -> Any:
    """The ``bert`` space of a recorded ``space.config`` (a cache entry's record)."""
    from nas.space import get_space

    return get_space("bert", **{k: v for k, v in config.items() if k != "family"})


def export_labels(train: Any) -> tuple[list[str], dict[str, Any] | None]:
    """An export's ``labels`` and ``head``: the intents then the tags, with the joint
    head's entry, for a tagging task; the class names alone otherwise."""
    if train.tokens is None:
        return list(train.label_names), None
    return list(train.label_names) + list(train.tag_names), {
        "kind": "joint", "num_intents": train.num_labels, "intents": list(train.label_names),
        "tags": list(train.tag_names)}


def load_task_teacher(record: Mapping[str, Any]) -> tuple[Any, Any]:
    """``(space, model)`` of a task teacher's record: the joint teacher of a cache entry
    (frozen, in eval mode) or the shared fine-tuned classifier."""
    from nas.builder import build_child
    from nas.cache import load_weights
    from nas.hf import load_teacher_as_design

    if record["kind"] != "joint":
        return load_teacher_as_design(record["model_dir"])
    space = bert_space(record["space"])
    model = build_child(space)
    load_weights(model, Path(record["weights"]))
    return space, model.eval().requires_grad_(False)


# ------------------------------------------------------- how a model reads the task


def median_examples(data: Any, n: int) -> Any:
    """The ``n`` examples of ``data`` closest to its median number of words."""
    lengths = np.asarray([len(t.split()) for t in data.texts_a])
    closest = np.argsort(np.abs(lengths - np.median(lengths)), kind="stable")[:n]
    return data.subset(sorted(closest.tolist()))


class TaskReader:
    """How one model (the student, on its vocabulary, or the teacher) reads a task, is
    scored on it and is distilled on it: evaluation and training batches, the score, the
    teacher's soft targets and the task loss."""

    def batches(self, data: Any, batch_size: int = 64) -> Iterator[dict[str, torch.Tensor]]:
        raise NotImplementedError

    def score(self, model: Any, batches: Sequence[Any], metric: str) -> dict[str, float]:
        """``model``'s metrics on ``batches`` (``metric`` first)."""
        raise NotImplementedError

    def latency_batches(self, data: Any) -> dict[int, dict[str, torch.Tensor]]:
        """The inputs latency is measured on: batch 1 and 32 of the ``data`` examples
        closest to its median number of words."""
        return {bs: model_inputs(next(iter(self.batches(median_examples(data, bs), bs))))
                for bs in (1, 32)}


class JointReader(TaskReader):
    """A tagging task through a single-vocabulary ``segmenter``, read by a joint intent +
    slot head (:func:`evaluate_joint`, :func:`joint_loss`)."""

    def __init__(self, segmenter: MixedSegmenter, num_intents: int, tag_names: Sequence[str]
                 ) -> None:
        self.segmenter, self.num_intents, self.tag_names = segmenter, num_intents, tag_names

    def batches(self, data: Any, batch_size: int = 64) -> Iterator[dict[str, torch.Tensor]]:
        return tagged_batches(self.segmenter, data, batch_size)

    def train_batches(self, data: Any, batch_size: int, seed: int, targets: Any = None
                      ) -> Callable[[int, int], Iterator[dict[str, torch.Tensor]]]:
        """The Trainer's batch source: a seeded order per epoch; ``targets`` (the
        teacher's, :meth:`teacher_targets`) attached to each batch."""
        attach = attach_joint_targets(targets) if targets is not None else None

        def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
            order = np.random.default_rng(stage_seed(seed, f"order:{epoch}")).permutation(
                len(data))
            return tagged_batches(self.segmenter, data, batch_size, order, start, attach)
        return batches

    def score(self, model: Any, batches: Sequence[Any], metric: str) -> dict[str, float]:
        return evaluate_joint(model, batches, self.num_intents, self.tag_names)

    @torch.no_grad()
    def teacher_targets(self, model: Any, data: Any) -> tuple[np.ndarray, list[np.ndarray]]:
        """The teacher's intent logits (N, I) and per-word tag logits (W_i, T) on ``data``
        (NaN for words its truncation cut off)."""
        intents = np.zeros((len(data), self.num_intents), dtype=np.float32)
        tags: list[np.ndarray] = [np.zeros(0)] * len(data)
        log.info("teacher outputs on %d training examples", len(data))
        for b in self.batches(data):
            intent, word = word_tag_logits(model(b).logits.cpu(), b["first_piece"],
                                           self.num_intents)  # counted on the CPU
            word = word.masked_fill((b["first_piece"] < 0).unsqueeze(-1), float("nan"))
            for r, i in enumerate(b["index"].tolist()):
                intents[i] = intent[r].numpy()
                tags[i] = word[r, :len(data.tags[i])].numpy()
        return intents, tags

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor], alpha: float,
             temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
        t = (batch["t_intent"], batch["t_tags"]) if "t_intent" in batch else None
        return joint_loss(logits, batch, self.num_intents, t, alpha, temperature)


class ClassReader(TaskReader):
    """A classification task through ``tokenizer`` (pairs joined), read by a classifier."""

    def __init__(self, tokenizer: Any, max_seq_len: int) -> None:
        self.tokenizer, self.max_seq_len = tokenizer, max_seq_len

    def batches(self, data: Any, batch_size: int = 64) -> Iterator[dict[str, torch.Tensor]]:
        from nas.data import iter_batches

        return iter_batches(data, self.tokenizer, batch_size, self.max_seq_len)

    def train_batches(self, data: Any, batch_size: int, seed: int,
                      targets: np.ndarray | None = None
                      ) -> Callable[[int, int], Iterator[dict[str, torch.Tensor]]]:
        """The Trainer's batch source: a seeded order per epoch; the teacher's logits
        (``targets``, N × C) of each row as ``t_logits``."""
        from nas.data import iter_batches

        def batches(epoch: int, start: int) -> Iterator[dict[str, torch.Tensor]]:
            for b in iter_batches(data, self.tokenizer, batch_size, self.max_seq_len,
                                  shuffle=True, seed=stage_seed(seed, f"order:{epoch}"),
                                  start_batch=start):
                if targets is not None:
                    b["t_logits"] = torch.from_numpy(targets[b["index"].numpy()])
                yield b
        return batches

    def score(self, model: Any, batches: Sequence[Any], metric: str) -> dict[str, float]:
        from nas.evaluate import classify

        return classify(model, list(batches), metric)

    @torch.no_grad()
    def teacher_targets(self, model: Any, data: Any) -> np.ndarray:
        """The teacher's logits on ``data`` (N, C)."""
        out = np.zeros((len(data), data.num_labels), dtype=np.float32)
        log.info("teacher logits on %d training examples", len(data))
        for b in self.batches(data):
            out[b["index"].numpy()] = model(b).logits.cpu().numpy()
        return out

    def loss(self, logits: torch.Tensor, batch: dict[str, torch.Tensor], alpha: float,
             temperature: float) -> tuple[torch.Tensor, dict[str, float]]:
        """``(1 − alpha)·CE(gold) + alpha·CE(teacher soft)``; gold alone without targets."""
        from nas.distill.losses import soft_cross_entropy

        gold = F.cross_entropy(logits, batch["labels"])
        if "t_logits" not in batch:
            return gold, {"gold": float(gold.detach())}
        soft = soft_cross_entropy(logits, batch["t_logits"], temperature)
        return (1 - alpha) * gold + alpha * soft, {"gold": float(gold.detach()),
                                                   "soft": float(soft.detach())}


def model_row(model: Any, space: Any, reader: TaskReader, dev: Any, report: Any,
              report_split: str, max_seq_len: int, repeats: int
              ) -> tuple[dict[str, Any], dict[int, dict[str, torch.Tensor]]]:
    """``(row, latency inputs)``: a model's scores on ``dev`` (and on the report split when
    it is not dev), parameters with the embedding table apart, FLOPs and batch-1/32
    latency on the report split's median-length examples."""
    from nas.cost import count_costs, measure_latency

    counted = count_costs(space, None, max_seq_len)
    inputs = reader.latency_batches(report)
    row = {"dev": reader.score(model, list(reader.batches(dev)), dev.metric),
           "params": counted.params,
           "embedding_params": int(model.word_embeddings().numel()),
           "flops": counted.flops, "seq_len": counted.seq_len,
           "latency": {f"batch{bs}": measure_latency(model, b, repeats=repeats).to_dict()
                       for bs, b in inputs.items()}}
    if report_split != "dev":  # SST-2: dev shares phrases with train, test does not
        row[report_split] = reader.score(model, list(reader.batches(report)), report.metric)
    return row, inputs


def task_reader(train: Any, teacher_tokenizer: Any, student_tokenizer: Any | None,
                max_seq_len: int) -> JointReader | ClassReader:
    """How a model reads ``train``'s task: with the student vocabulary
    (``student_tokenizer``; the teacher's specials ``[CLS]``/``[SEP]`` replaced by the
    student's) or, when it is ``None``, with the teacher's alone."""
    tokenizer = teacher_tokenizer if student_tokenizer is None else student_tokenizer
    if train.tokens is None:
        return ClassReader(tokenizer, max_seq_len)
    if student_tokenizer is None:
        segmenter = MixedSegmenter(teacher_tokenizer, teacher_tokenizer, 0.0, max_seq_len)
    else:
        segmenter = MixedSegmenter(teacher_tokenizer, student_tokenizer, 1.0, max_seq_len,
                                   specials="student")
    return JointReader(segmenter, train.num_labels, train.tag_names)


__all__ = ["IGNORE", "STUDENT", "TEACHER", "ClassReader", "JointReader", "LayerDistillation",
           "MLMHead", "MixedSegmenter", "MixedVocabMLM", "Segment", "StudentMLM", "TaskReader",
           "as_teacher_specials", "attach_joint_targets", "batch_rng", "bert_init", "bert_space",
           "copy_encoder", "evaluate_joint", "export_labels", "joint_loss", "joint_space",
           "load_task_teacher", "mask_tokens", "median_examples", "mlm_batches", "model_inputs",
           "model_row", "step_logger", "tagged_batches", "task_reader", "text_key",
           "unlabeled_texts", "windows_key", "word_tag_logits", "word_windows"]
