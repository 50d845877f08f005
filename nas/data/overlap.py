"""Leakage check: how many validation texts overlap the training texts.

SST-2's ``dev.tsv`` is a carve of the GLUE training set, which holds every phrase of
each training sentence: nearly every dev item shares a long phrase with training, and a
small student scores far higher there than on unseen sentences. A user's own data can
have the same defect, so every run counts it and warns.

A validation text *overlaps* when it equals a training text, when it contains a run of
``min_words`` consecutive words of one, or when the whole (shorter) text occurs inside
a training text of ``min_words`` or more words: "contains, or is contained in, a
training phrase of ``min_words`` or more words".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Overlap:
    examples: int
    exact: int
    shared_phrase: int  # exact matches included
    min_words: int

    @property
    def fraction(self) -> float:
        return self.shared_phrase / self.examples if self.examples else 0.0

    def message(self, what: str) -> str:
        return (f"{what}: {self.shared_phrase} of {self.examples} validation texts "
                f"({100 * self.fraction:.0f}%) overlap the training texts ({self.exact} "
                f"exact, the rest share a phrase of ≥ {self.min_words} words); scores on "
                "them overstate what the model does on unseen text")


def _words(text: str) -> list[str]:
    return text.lower().split()


def _shingles(words: Sequence[str], n: int) -> Iterable[tuple[str, ...]]:
    return (tuple(words[i:i + n]) for i in range(len(words) - n + 1))


#: The training side of the last count, by its key: ``(exact texts, long texts' words,
#: {n: n-grams})``. A run counts dev and the report split against the same training set.
_TRAIN_SIDE: dict[str, tuple[set[str], list[list[str]], dict[int, set[str]]]] = {}


def text_overlap(train: Sequence[str], validation: Sequence[str], min_words: int = 8,
                 train_key: str | None = None) -> Overlap:
    """Count validation texts that equal, contain or lie inside a training phrase of
    ``min_words`` or more words (whitespace words, case-folded). ``train_key`` (the
    training set's content fingerprint) keeps its n-grams for the next count."""
    flags = overlapping(train, validation, min_words, train_key)
    exact = sum(f == EXACT for f in flags)
    return Overlap(len(validation), exact, sum(f != NONE for f in flags), min_words)


#: :func:`overlapping`'s answers per text
NONE, EXACT, PHRASE = 0, 1, 2


def overlapping(train: Sequence[str], validation: Sequence[str], min_words: int = 8,
                train_key: str | None = None) -> list[int]:
    """Per validation text: ``EXACT`` (equals a training text), ``PHRASE`` (contains, or
    lies inside, a training phrase of ``min_words`` or more words) or ``NONE``; what
    :func:`text_overlap` counts, and what a filter drops (transfer text that shares a
    phrase with dev or the report split)."""
    key = f"{train_key}:{min_words}" if train_key else None
    if key is not None and key in _TRAIN_SIDE:
        exact_set, long_train, by_n = _TRAIN_SIDE[key]
    else:
        exact_set = {" ".join(_words(t)) for t in train}
        long_train = [w for w in map(_words, train) if len(w) >= min_words]
        by_n = {}
        if key is not None:
            _TRAIN_SIDE.clear()  # one training set at a time: its n-grams are large
            _TRAIN_SIDE[key] = (exact_set, long_train, by_n)
    valid = [_words(t) for t in validation]
    # every n-gram of the long training texts, for n = min_words and for the lengths of
    # the shorter validation texts (a short text counts when it lies inside one)
    lengths = {min_words} | {len(w) for w in valid if 0 < len(w) < min_words}
    for n in lengths - set(by_n):
        by_n[n] = {" ".join(g) for words in long_train for g in _shingles(words, n)}
    flags = []
    for words in valid:
        if " ".join(words) in exact_set:
            flags.append(EXACT)
        elif len(words) < min_words:  # an L-word text can only lie inside an L-gram
            flags.append(PHRASE if words and " ".join(words) in by_n[len(words)] else NONE)
        elif any(" ".join(g) in by_n[min_words] for g in _shingles(words, min_words)):
            flags.append(PHRASE)
        else:
            flags.append(NONE)
    return flags


def exact_overlap(train: Sequence[str], validation: Sequence[str]) -> int:
    """How many validation texts equal a training text (whitespace words, case-folded):
    the cheap part of :func:`text_overlap`, run whenever a user's files are read."""
    seen = {" ".join(_words(t)) for t in train}
    return sum(" ".join(_words(t)) in seen for t in validation)
