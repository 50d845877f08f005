"""The leakage check: validation texts that overlap the training texts are counted."""

from __future__ import annotations

import pytest

from nas.data.overlap import text_overlap

TRAIN = ["the film is a charming and often affecting journey of self discovery",
         "a dull , lifeless movie"]


def test_exact_contained_and_containing_texts_count():
    valid = [
        "a dull , lifeless movie",  # exact
        "often affecting",  # a short phrase inside a long training text
        "I think the film is a charming and often affecting journey indeed",  # shares 8
        "a dull , lifeless",  # inside a training text of fewer than 8 words: not counted
        "an entirely new sentence with nothing in common at all",
    ]
    overlap = text_overlap(TRAIN, valid, min_words=8)
    assert (overlap.examples, overlap.exact, overlap.shared_phrase) == (5, 1, 3)
    assert "3 of 5 validation texts (60%)" in overlap.message("demo/dev")


def test_sst2_dev_overlaps_and_the_test_sentences_do_not():
    from nas.data import load_task

    train = load_task("sst2", "train").texts_a
    dev = text_overlap(train, load_task("sst2", "dev").texts_a[:400])
    test = text_overlap(train, load_task("sst2", "test").texts_a)
    assert dev.fraction > 0.9 and test.fraction < 0.01


def test_overlap_counts_are_cached_by_the_splits_content(tmp_path, monkeypatch):
    """The second count of the same pair of splits is read back, not recomputed; another
    pair is counted."""
    import nas.data.overlap
    from nas.data import load_task
    from nas.measure import overlap_counts

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path))
    train, dev = load_task("mrpc", "train").head(300), load_task("mrpc", "dev").head(50)
    first = overlap_counts("mrpc", train, {"dev": dev})
    monkeypatch.setattr(nas.data.overlap, "text_overlap", lambda *a, **k: 1 / 0)
    assert overlap_counts("mrpc", train, {"dev": dev}) == first
    with pytest.raises(ZeroDivisionError):
        overlap_counts("mrpc", train, {"dev": dev.head(40)})
