"""Teacher WordPiece tokenisation and the ~5K student vocabulary
(docs/reference.md#mixed-vocabulary)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nas.data import load_corpus
from nas.errors import DataError
from nas.teacher import resolve_teacher
from nas.tokenization import ASCII_ALPHABET, encode, load_tokenizer, train_student_vocab


@pytest.fixture(scope="module")
def teacher_tok():
    return load_tokenizer(resolve_teacher(None))  # the packaged MiniLM, offline


def test_teacher_tokenizer_single_and_pair(teacher_tok) -> None:
    enc = encode(teacher_tok, ["a fine film", "bad"], max_length=16)
    assert enc["input_ids"].shape == (2, 5)  # dynamic padding to the longest row
    assert teacher_tok.convert_ids_to_tokens(enc["input_ids"][0].tolist()) == [
        "[CLS]", "a", "fine", "film", "[SEP]"]
    assert enc["attention_mask"][1].tolist() == [1, 1, 1, 0, 0]
    pair = encode(teacher_tok, ["a b"], ["c"], max_length=16)
    assert pair["token_type_ids"][0].tolist() == [0, 0, 0, 0, 1, 1]
    assert pair["input_ids_a"].shape == pair["input_ids_b"].shape == (1, 6)
    fixed = encode(teacher_tok, ["a"], max_length=8, pad_to_max=True)
    assert fixed["input_ids"].shape == (1, 8)
    with pytest.raises(DataError):
        encode(teacher_tok, ["a", "b"], ["c"])


def test_truncation_respects_max_length(teacher_tok) -> None:
    enc = encode(teacher_tok, ["word " * 100], ["other " * 100], max_length=32)
    assert enc["input_ids"].shape[1] == 32


def test_load_tokenizer_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="does not exist"):
        load_tokenizer(tmp_path / "nope")


def test_student_vocab_covers_all_ascii(tmp_path: Path) -> None:
    texts = load_corpus("wikitext2", "valid")[:400]
    out = train_student_vocab(texts, tmp_path / "student", vocab_size=600)
    vocab = (out / "vocab.txt").read_text().splitlines()
    assert vocab[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    for c in ASCII_ALPHABET:
        assert c in vocab and f"##{c}" in vocab, c
    assert len(vocab) <= 600 + 2 * len(ASCII_ALPHABET)
    tok = load_tokenizer(out)
    assert tok.vocab_size == len(vocab) or len(tok) == len(vocab)
    # no word of ASCII characters is out of vocabulary
    weird = "zqxj 9f@k ~~|} Qwerty_42 <html> \\path/x"
    ids = tok(weird)["input_ids"]
    assert tok.unk_token_id not in ids
    assert tok.convert_ids_to_tokens(ids)[0] == "[CLS]"
    assert tok.decode(ids, skip_special_tokens=True).replace(" ", "") == weird.lower().replace(
        " ", "")


def test_snips_tags_align_to_first_pieces(teacher_tok) -> None:
    from nas.data import iter_batches, load_task
    from nas.tokenization import encode_tagged

    enc = encode_tagged(teacher_tok, [["play", "westbam", "now"]], [[0, 5, 0]])
    pieces = teacher_tok.convert_ids_to_tokens(enc["input_ids"][0].tolist())
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]" and len(pieces) > 5  # westbam splits
    labels = enc["tag_labels"][0].tolist()
    assert labels[0] == labels[-1] == -100 and labels[1] == 0 and labels[2] == 5
    assert labels[3:-2] == [-100] * (len(pieces) - 5) and labels[-2] == 0
    data = load_task("snips", "dev").head(3)
    batch = next(iter_batches(data, teacher_tok, batch_size=3, max_length=64))
    assert batch["tag_labels"].shape == batch["input_ids"].shape
    first = [t for t in batch["tag_labels"][0].tolist() if t != -100]
    assert first == list(data.tags[0])  # every word kept its tag once


def test_student_vocab_ids_are_the_same_from_run_to_run(tmp_path: Path) -> None:
    """The trainer's own order follows per-process-seeded hash maps: the same text once
    gave the same tokens under other ids. The ids are now canonical."""
    texts = load_corpus("wikitext2", "valid")[:300]
    runs = [(train_student_vocab(texts, tmp_path / f"v{i}", vocab_size=400,
                                 min_frequency=1) / "vocab.txt").read_text() for i in range(3)]
    assert runs[0] == runs[1] == runs[2]
    tok = load_tokenizer(tmp_path / "v0")
    pieces = tok.convert_ids_to_tokens(tok("the film")["input_ids"])[1:-1]
    assert pieces[0] == "the" and "".join(p.removeprefix("##") for p in pieces[1:]) == "film"
