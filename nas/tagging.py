"""Sequence tagging: IOB spans, the span-level F1 of CoNLL's ``conlleval``, slot decoding.

SNIPS slot filling (docs/reference.md#mixed-vocabulary) tags each *word* with IOB tags (``O``,
``B-artist``, ``I-artist``...). A model reads word pieces; the tag of a word is read at its first
piece (:func:`first_piece_positions`), and scores are computed on words, never pieces.

The score is ``conlleval``'s (the CoNLL-2000 shared task's Perl script): a *chunk* is a
maximal run of one type, and a predicted chunk counts as correct only when a gold chunk
has exactly the same type, first word and last word. Its chunk boundaries
(:func:`iob_spans`) follow the script, including its lenient reading of invalid IOB:

* ``B-X`` always starts a chunk;
* ``I-X`` continues the open chunk when that chunk has type ``X``, else it starts one
  (``O I-X`` and ``B-Y I-X`` both open an ``X`` chunk, as the script's ``startOfChunk``);
* ``O`` closes the open chunk.

Precision = correct / predicted chunks, recall = correct / gold chunks, F1 their harmonic
mean (0 when there are no correct chunks), all as fractions in [0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def _split(tag: str) -> tuple[str, str]:
    """``("B", "artist")`` of ``"B-artist"``; ``("O", "")`` of ``"O"``."""
    if tag == "O" or not tag:
        return "O", ""
    prefix, _, kind = tag.partition("-")
    if prefix not in ("B", "I") or not kind:
        raise ValueError(f"tag {tag!r} is not IOB (O, B-TYPE or I-TYPE)")
    return prefix, kind


def iob_spans(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The chunks of one sentence's tags: ``(type, first, last)``, word indices inclusive."""
    spans: list[tuple[str, int, int]] = []
    open_kind, start = "", -1
    for i, tag in enumerate(tags):
        prefix, kind = _split(tag)
        starts = prefix == "B" or (prefix == "I" and kind != open_kind)
        if open_kind and (prefix == "O" or starts):
            spans.append((open_kind, start, i - 1))
            open_kind = ""
        if starts:
            open_kind, start = kind, i
    if open_kind:
        spans.append((open_kind, start, len(tags) - 1))
    return spans


def span_f1(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
            ) -> dict[str, float]:
    """``conlleval``'s precision, recall and F1 over sentences (word-level tag strings)."""
    if len(gold) != len(predicted):
        raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted")
    correct = n_gold = n_pred = 0
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if len(g) != len(p):
            raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted")
        gs, ps = set(iob_spans(g)), set(iob_spans(p))
        correct += len(gs & ps)
        n_gold += len(gs)
        n_pred += len(ps)
    precision = correct / n_pred if n_pred else 0.0
    recall = correct / n_gold if n_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if correct else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}


def first_piece_positions(word_ids: Sequence[int | None], num_words: int) -> list[int]:
    """For each word, the position of its first piece (``-1`` when truncated away).

    ``word_ids``: the word of each position (``None`` for special tokens and padding),
    as ``tokenizers``' ``Encoding.word_ids`` gives it.
    """
    out = [-1] * num_words
    previous = None
    for pos, word in enumerate(word_ids):
        if word is not None and word != previous and word < num_words and out[word] < 0:
            out[word] = pos
        previous = word
    return out


def slot_spans(words: Sequence[str], tags: Sequence[str]) -> list[dict[str, Any]]:
    """The slots a tagged sentence names: ``[{"slot", "text", "start", "end"}]`` with word
    indices (``end`` exclusive) and the words joined by spaces."""
    return [{"slot": kind, "text": " ".join(words[a:b + 1]), "start": a, "end": b + 1}
            for kind, a, b in iob_spans(tags)]


__all__ = ["first_piece_positions", "iob_spans", "slot_spans", "span_f1"]
