"""Tasks and loaders: the shared data sets, bad input naming file and line, the split."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nas.data import (
    DATA_DIR_ENV,
    iter_batches,
    load_corpus,
    load_task,
    resolve_data_dir,
    train_val_split,
)
from nas.errors import DataError, NasError, RegistryError
from nas.tokenization import load_tokenizer


@pytest.mark.parametrize(
    ("task", "split", "rows"),
    [("sst2", "train", 60614), ("sst2", "dev", 6735), ("mrpc", "train", 3668),
     ("mrpc", "dev", 408), ("snips", "train", 13084), ("snips", "dev", 700)],
)
def test_shared_data_row_counts(task: str, split: str, rows: int) -> None:
    data = load_task(task, split)
    assert len(data) == rows == len(data.labels)
    assert set(data.labels) <= set(range(data.num_labels))
    assert data.fingerprint


def test_mrpc_pairs_bom_and_quotes() -> None:
    data = load_task("mrpc", "train")  # the header starts with a BOM: "\ufeffQuality"
    assert data.is_pair and data.label_names == ("not_paraphrase", "paraphrase")
    assert data.texts_a[0].startswith("Amrozi accused his brother")
    # quoting is off: the quote characters stay inside the text
    assert '"the witness"' in data.texts_a[0]
    assert data.labels[:2] == (1, 0)
    assert data.metric == "accuracy+f1"


def test_sst2_single_sentence() -> None:
    data = load_task("sst2", "dev")
    assert not data.is_pair and data.kind == "single"
    assert any('"' in t or "'" in t for t in data.texts_a[:2000])


def test_snips_intents_and_iob_tags() -> None:
    train, dev = load_task("snips", "train"), load_task("snips", "dev")
    assert train.num_labels == 7 and train.tag_names is not None
    assert len(train.tag_names) == 1 + 2 * 39  # O plus B-/I- for each of the 39 slot types
    assert train.tag_names == dev.tag_names
    assert all(len(a) == len(b) for a, b in zip(train.tokens, train.tags, strict=True))
    first = [train.tag_names[i] for i in train.tags[0]]
    assert first[:3] == ["O", "O", "B-artist"]


def test_data_dir_must_be_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    with pytest.raises(DataError, match="--data-dir.*NAS_DATA_DIR"):
        resolve_data_dir(None)
    with pytest.raises(DataError, match="does not exist"):
        resolve_data_dir("/nonexistent/data")


def test_unknown_task_lists_close_names() -> None:
    with pytest.raises(RegistryError, match="sst2"):
        load_task("sst", "train")
    with pytest.raises(DataError, match="no split"):
        load_task("mrpc", "test")  # sst2 has a test split; mrpc has none


# ------------------------------------------------------------------ bad input files


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"sst2/train\.tsv: file not found"):
        load_task("sst2", "train", tmp_path)


def test_missing_column_names_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path, "sst2/train.tsv", "text\tlabel\nfine\t1\n")
    with pytest.raises(DataError, match=r"train\.tsv:1: missing column\(s\) \['sentence'\]"):
        load_task("sst2", "train", tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    _write(tmp_path, "sst2/train.tsv", "")
    with pytest.raises(DataError, match=r"train\.tsv:1: empty file"):
        load_task("sst2", "train", tmp_path)
    _write(tmp_path, "sst2/train.tsv", "sentence\tlabel\n")
    with pytest.raises(DataError, match=r"train\.tsv:2: empty file"):
        load_task("sst2", "train", tmp_path)


def test_label_outside_label_set_names_line(tmp_path: Path) -> None:
    _write(tmp_path, "sst2/train.tsv", 'sentence\tlabel\ngood "film\t1\nbad\t2\n')
    with pytest.raises(DataError, match=r"train\.tsv:3: label '2' is not in"):
        load_task("sst2", "train", tmp_path)


def test_short_row_names_line(tmp_path: Path) -> None:
    _write(tmp_path, "mrpc/train.tsv",
           "\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\ta\tb\n0\t3\n")
    with pytest.raises(DataError, match=r"train\.tsv:3: expected at least 5"):
        load_task("mrpc", "train", tmp_path)


def test_snips_tag_count_mismatch_names_file_and_line(tmp_path: Path) -> None:
    _write(tmp_path, "snips/train/seq.in", "play some jazz\nadd this song\n")
    _write(tmp_path, "snips/train/seq.out", "O O B-genre\nO O\n")
    _write(tmp_path, "snips/train/label", "PlayMusic\nAddToPlaylist\n")
    with pytest.raises(DataError, match=r"seq\.out:2: 2 IOB tags for 3 tokens"):
        load_task("snips", "train", tmp_path)


def test_snips_unknown_intent_and_misaligned_files(tmp_path: Path) -> None:
    _write(tmp_path, "snips/train/seq.in", "play jazz\n")
    _write(tmp_path, "snips/train/seq.out", "O B-genre\n")
    _write(tmp_path, "snips/train/label", "Dance\n")
    with pytest.raises(DataError, match=r"label:1: intent 'Dance'"):
        load_task("snips", "train", tmp_path)
    _write(tmp_path, "snips/train/label", "PlayMusic\nPlayMusic\n")
    with pytest.raises(DataError, match="line counts differ"):
        load_task("snips", "train", tmp_path)


# ------------------------------------------------------------------------ the split


def test_train_val_split_is_seeded_disjoint_and_stratified() -> None:
    data = load_task("mrpc", "train")
    tr, va = train_val_split(data, 0.1, seed=3)
    tr2, va2 = train_val_split(data, 0.1, seed=3)
    assert va.texts_a == va2.texts_a and va.fingerprint == va2.fingerprint
    assert len(tr) + len(va) == len(data)
    assert abs(len(va) - 0.1 * len(data)) <= 2
    pairs = set(zip(data.texts_a, data.texts_b, strict=True))
    got = set(zip(tr.texts_a, tr.texts_b, strict=True)) | set(
        zip(va.texts_a, va.texts_b, strict=True))
    assert got == pairs
    # label shares preserved (stratified)
    assert np.mean(va.labels) == pytest.approx(np.mean(data.labels), abs=0.01)
    _, other = train_val_split(data, 0.1, seed=4)
    assert other.texts_a != va.texts_a and other.fingerprint != va.fingerprint
    assert "search-val" in va.split
    with pytest.raises(NasError):
        train_val_split(data, 1.5)


def test_head_subset_fingerprints_differ() -> None:
    data = load_task("sst2", "dev")
    assert data.head(10).fingerprint != data.head(11).fingerprint != data.fingerprint
    assert data.head(None) is data


# ---------------------------------------------------------------- hub and corpora


def test_hub_name_offline_gives_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    def offline(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Couldn't reach 'glue' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match=r"could not load 'glue/sst2'.*--data-dir"):
        load_task("glue/sst2", "dev")


def test_wikitext_corpus_drops_headings() -> None:
    paras = load_corpus("wikitext2", "valid")
    assert len(paras) > 1000
    assert not any(p.startswith("= ") for p in paras)
    assert paras[0].startswith("Homarus gammarus")
    with pytest.raises(DataError, match="no split"):
        load_corpus("wikitext2", "train")


# -------------------------------------------------------------------------- batches


def test_pair_batches_tokenise_b_separately(tiny_teacher: Path) -> None:
    tok = load_tokenizer(tiny_teacher)
    data = load_task("mrpc", "dev").head(6)
    batches = list(iter_batches(data, tok, batch_size=4, max_length=64, separate_b=True))
    assert [len(b["labels"]) for b in batches] == [4, 2]
    b = batches[0]
    width = b["input_ids"].shape[1]
    for key in ("attention_mask", "token_type_ids", "input_ids_a", "attention_mask_a",
                "input_ids_b", "attention_mask_b"):
        assert b[key].shape == (4, width), key
    assert b["index"].tolist() == [0, 1, 2, 3]
    # sentence B alone starts with [CLS] (positions restart for B, docs/reference.md#adabert)
    assert (b["input_ids_b"][:, 0] == tok.cls_token_id).all()
    alone = tok(data.texts_b[0], max_length=width, truncation=True)["input_ids"]
    assert b["input_ids_b"][0, : len(alone)].tolist() == alone
