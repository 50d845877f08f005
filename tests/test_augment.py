"""TinyBERT data augmentation (docs/reference.md#tinybert): candidates, sampling, caching, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import nas.teacher
from nas.augment import (
    AugmentConfig,
    EmbeddingNeighbours,
    MlmCandidates,
    augment_sentence,
    augment_task,
    load_augmented,
    split_words,
)
from nas.cli import augment as cli_augment
from nas.data import load_task
from nas.errors import NasError
from nas.teacher import load_mlm_head, resolve_teacher
from nas.tokenization import load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(resolve_teacher(None))


def test_embedding_neighbours_find_the_closest_words(tok) -> None:
    rng = np.random.default_rng(0)
    emb = rng.normal(size=(tok.vocab_size, 8)).astype(np.float32)
    good, great, fine = tok.convert_tokens_to_ids(["good", "great", "fine"])
    emb[great] = emb[good] + 0.01  # cosine ~1: the nearest neighbour of "good"
    emb[fine] = emb[good] * 2 + 0.05  # same direction, further away in L2 but not in cosine
    src = EmbeddingNeighbours(emb, tok, m=3)
    cands = src.candidates(["Good", ",", "42"])
    assert set(cands[0][:2]) == {"great", "fine"} and len(cands[0]) == 3
    assert "good" not in cands[0]
    assert cands[1] == [] and cands[2] == []  # punctuation and numbers are kept
    assert all(not c.startswith("##") and c.isalpha() for c in cands[0])


def test_augment_sentence_probability_and_seed() -> None:
    words = ["a", "fine", "film", "."]
    cands = [["one"], ["good", "great"], ["movie"], []]
    cfg = AugmentConfig(p_t=0.0, n=3)
    assert augment_sentence(words, cands, cfg, np.random.default_rng(0)) == ["a fine film ."] * 3
    cfg = AugmentConfig(p_t=1.0, n=4, m=2)
    out = augment_sentence(words, cands, cfg, np.random.default_rng(0))
    assert all(s.startswith("one ") and s.endswith(" movie .") for s in out)
    assert {s.split()[1] for s in out} <= {"good", "great"}
    cfg = AugmentConfig(p_t=0.4, n=20)
    a = augment_sentence(words, cands, cfg, np.random.default_rng(5))
    b = augment_sentence(words, cands, cfg, np.random.default_rng(5))
    assert a == b and len(a) == 20
    changed = sum(x != y for s in a for x, y in zip(s.split(), words, strict=True))
    assert 0 < changed < 20 * 3  # some but not all replaceable words change
    with pytest.raises(NasError):
        AugmentConfig(p_t=1.5)


def test_split_words_keeps_case_and_splits_punctuation(tok) -> None:
    assert split_words(tok, "Hello, World!") == ["Hello", ",", "World", "!"]


def test_packaged_minilm_has_no_mlm_head(tiny_mlm_teacher: Path) -> None:
    assert load_mlm_head(None) is None  # sentence-embedding weights: encoder only
    assert load_mlm_head(str(tiny_mlm_teacher)) is not None


def test_mlm_candidates_for_single_piece_words(tiny_mlm_teacher: Path) -> None:
    model = load_mlm_head(str(tiny_mlm_teacher))
    words = ["the", "film", "was", "unbelievably", "good", "."]
    src = MlmCandidates(model, load_tokenizer(tiny_mlm_teacher), m=4)
    cands = src.candidates(words)
    # "unbelievably" splits into pieces: skipped by default (TinyBERT takes GloVe
    # neighbours for those, docs/reference.md#tinybert, and none ship here)
    assert [len(c) for c in cands] == [4, 4, 4, 0, 4, 0]
    assert "film" not in cands[1]
    src = MlmCandidates(model, load_tokenizer(tiny_mlm_teacher), m=4, multi_piece="mean")
    cands = src.candidates(words)
    assert len(cands[3]) == 4 and cands[3] == src.fallback.word("unbelievably")


def test_augment_task_cached_and_readable(tiny_teacher: Path, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    data = load_task("sst2", "dev").head(5)
    cfg = AugmentConfig(n=3, m=5)
    out = tmp_path / "aug.tsv"
    first = augment_task(data, str(tiny_teacher), cfg, out, cache_dir=tmp_path, progress=False)
    assert not first["from_cache"] and first["candidates"] == "embedding-neighbours"
    lines = out.read_text().splitlines()
    assert lines[0] == "index\tsentence\tlabel" and len(lines) == 1 + 5 * 4
    aug = load_augmented(out, data)
    assert len(aug) == 20 and aug.labels[:4] == (data.labels[0],) * 4
    assert aug.texts_a[0] == " ".join(data.texts_a[0].split())

    def blocked(*args: object, **kwargs: object) -> None:
        raise AssertionError("teacher loaded for a cached augmentation")

    monkeypatch.setattr(nas.teacher, "load_teacher", blocked)
    monkeypatch.setattr(nas.teacher, "_from_pretrained", blocked)
    again = augment_task(data, str(tiny_teacher), cfg, tmp_path / "b.tsv", cache_dir=tmp_path,
                         progress=False)
    assert again["from_cache"]
    assert (tmp_path / "b.tsv").read_text() == out.read_text()


def test_augment_pairs_and_cli_json(tiny_teacher: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "mrpc.tsv"
    code = cli_augment.main(["--task", "mrpc", "--split", "dev", "--n", "2", "--max-examples",
                             "3", "--teacher", str(tiny_teacher), "--cache-dir", str(tmp_path),
                             "-o", str(out), "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["rows"] == 9 and summary["output"] == str(out)
    aug = load_augmented(out, load_task("mrpc", "dev"))
    assert aug.is_pair and len(aug) == 9
    # a bad argument is one line on stderr and exit status 2
    assert cli_augment.main(["--task", "sst2", "--p", "2", "--teacher", str(tiny_teacher)]) == 2
    assert "p_t" in capsys.readouterr().err
