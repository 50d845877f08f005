"""Mixed-vocabulary distillation (Zhao et al., 2019; SPEC §7): the shared parts.

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
  teacher reading the same student pieces (the recipe's switch, off by default).

The packaged MiniLM teacher has **no MLM head** (a sentence-embedding model ships encoder
weights only, :func:`nas.teacher.load_mlm_head`). :class:`MLMHead` therefore starts from
the tied input embeddings: its decoder *is* the word-embedding table (BERT ties them too),
its transform (dense, GELU, LayerNorm) starts at the identity matrix with zero bias, and
its output bias at zero; stage I trains it with the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

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
    vocabularies (SPEC §7). ``p_student``: probability that a word is cut by the student
    vocabulary (1.0: student only, stage II; 0.0: teacher only). ``[CLS]``/``[SEP]`` come
    from the vocabulary ``specials`` names. A sentence is cut at a word boundary when it
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


def _model_inputs(batch: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: batch[k] for k in ("input_ids", "attention_mask", "token_type_ids")
            if k in batch}


class MixedVocabMLM(nn.Module):
    """Stage I (SPEC §7): the teacher continues MLM on mixed-vocabulary input.

    ``teacher``: a :class:`~nas.network.GraphNet` of the ``bert`` design (its word
    embeddings are read through ``nodes["emb"]``). ``student_embeddings`` (V_S, d_S) and
    ``up`` (d_S → d_T, affine) give the student pieces' input vectors; the student head's
    output table is the up-projected student embeddings (tied, as BERT ties input and
    output embeddings), so the stage trains exactly the table stage II starts from.
    """

    def __init__(self, teacher: nn.Module, student_vocab_size: int, student_dim: int,
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
        return self.teacher.nodes["emb"].word_embeddings.weight  # (V_T, d_T)

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
        feed = _model_inputs(batch)
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
    """Stage II (SPEC §7): the student with an MLM head tied to its word embeddings, on
    student-vocabulary input only; ``fits`` (width maps d_S → d_T per mapped layer) when
    layer-wise distillation is on."""

    def __init__(self, student: nn.Module, eps: float = 1e-12,
                 fits: nn.ModuleList | None = None) -> None:
        super().__init__()
        self.student = student
        table = self.table()
        self.head = MLMHead(table.shape[1], table.shape[0], eps)
        self.fits = fits if fits is not None else nn.ModuleList()

    def table(self) -> torch.Tensor:
        return self.student.nodes["emb"].word_embeddings.weight  # (V_S, d_S)

    def forward(self, batch: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Any,
                                                                 dict[str, float]]:
        """``(MLM loss, the student's output with hidden states, logged values)``."""
        out = self.student(_model_inputs(batch), record=("hidden_states",))
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


__all__ = ["IGNORE", "STUDENT", "TEACHER", "MLMHead", "MixedSegmenter", "MixedVocabMLM",
           "Segment", "StudentMLM", "as_teacher_specials", "batch_rng", "bert_init",
           "copy_encoder",
           "mask_tokens"]
