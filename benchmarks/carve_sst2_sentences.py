"""A larger choosing split for SST-2: whole training sentences carved out of ``train.tsv``
with every training row that would leak them.

SST-2's ``dev.tsv`` shares phrases with ``train.tsv``; only 307 of its 872 rows share no
8-word phrase with train, too few to tell a 1-point lever from noise (one row is 0.33
points). This carves ``--sentences`` whole sentences (rows contained in no longer row,
:func:`nas.transfer.sentence_rows`) at random and drops from train every row that equals
one, contains one, or shares an 8-word phrase with one, so that the carve is clean by the
same rule as the clean dev rows (:func:`nas.data.overlap.overlapping`, checked before
writing). Shorter phrases inside a carved sentence stay in train, as they do for the clean
dev rows.

Run: ``NAS_DATA_DIR=... python benchmarks/carve_sst2_sentences.py OUT [--sentences 2000]``.
It writes ``OUT/train.tsv`` and ``OUT/choose.tsv`` (columns ``sentence``, ``label``) and
prints the task mapping to give an experiment (the report split stays
``sst2/test_sentences.tsv``), e.g. ``--set "task={train: OUT/train.tsv, validation:
OUT/choose.tsv, test: DATA/sst2/test_sentences.tsv, text: sentence, label: label}"``.
"""

from __future__ import annotations

import argparse
import csv
import os
import random
from pathlib import Path

MIN_WORDS = 8


def _grams(text: str, n: int = MIN_WORDS) -> set[str]:
    words = text.lower().split()
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _write(path: Path, texts: list[str], labels: list[str]) -> None:
    with path.open("w", newline="") as f:
        out = csv.writer(f, delimiter="\t", quoting=csv.QUOTE_NONE, escapechar=None,
                         lineterminator="\n")
        out.writerow(["sentence", "label"])
        out.writerows(zip(texts, labels, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for train.tsv and choose.tsv")
    ap.add_argument("--sentences", type=int, default=2000, help="whole sentences to carve")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    from nas.data import load_task
    from nas.data.overlap import NONE, overlapping
    from nas.transfer import sentence_rows

    data_dir = os.environ.get("NAS_DATA_DIR")
    train = load_task("sst2", "train", data_dir)
    labels = [str(y) for y in train.labels]  # the class index: the file's own 0 and 1
    sentences = sentence_rows(train)
    rows = {t: i for i, t in enumerate(train.texts_a)}
    # a reproducible sample for an experiment, not a secret
    chosen = random.Random(args.seed).sample(  # noqa: S311
        list(sentences.texts_a), args.sentences)
    chosen_words = {" ".join(t.lower().split()) for t in chosen}
    chosen_grams = set().union(*(_grams(t) for t in chosen))

    def leaks(text: str) -> bool:
        words = " ".join(text.lower().split())
        # a carved sentence lies inside no longer row (sentence_rows), so equality and
        # a shared 8-word phrase are the two ways a row can leak it
        return words in chosen_words or bool(_grams(text) & chosen_grams)

    keep = [i for i, t in enumerate(train.texts_a) if not leaks(t)]
    kept_texts = [train.texts_a[i] for i in keep]
    flags = overlapping(kept_texts, chosen)
    clean = [t for t, f in zip(chosen, flags, strict=True) if f == NONE]
    args.out.mkdir(parents=True, exist_ok=True)
    _write(args.out / "train.tsv", kept_texts, [labels[i] for i in keep])
    _write(args.out / "choose.tsv", clean, [labels[rows[t]] for t in clean])
    print(f"train: {len(keep)} of {len(train.texts_a)} rows kept; carve: {len(clean)} of "
          f"{len(chosen)} sentences clean by the 8-word rule (of {len(sentences.texts_a)})")


if __name__ == "__main__":
    main()
