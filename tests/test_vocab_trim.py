"""Trimmed vocabularies (nas.vocab_trim): the kept pieces, the rewritten files, the same
logits on kept-piece text, stock loading, refusal of other tokenizers, nas predict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nas.builder import build_child
from nas.cli import main
from nas.errors import ExportError
from nas.export import convert, export
from nas.quantize import DevSet
from nas.runtime import load
from nas.space import get_space
from nas.tokenization import load_tokenizer
from nas.vocab_trim import TrimTexts

TRAIN = ["a fine film", "a dull film, sadly", "the cast shines"]
KEPT_TEXT = "sadly the film shines, a fine cast"  # only pieces of TRAIN
UNSEEN = "xylophone"  # a word none of whose pieces TRAIN has
SPECIALS = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
TOL = 1e-5


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny BERT (the packaged WordPiece vocabulary, 30,522 pieces) exported stock
    (``hf``) and native, each untrimmed and trimmed to TRAIN's pieces; the report split
    of the trimmed ones is TRAIN plus one text with an unseen piece."""
    root = tmp_path_factory.mktemp("trim")
    space = get_space("bert", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=48, num_labels=2)
    torch.manual_seed(0)
    child = build_child(space).eval()
    report = DevSet([*TRAIN, f"a {UNSEEN} film"], None, [0, 1, 0, 1], "accuracy")
    out = {}
    for fmt in ("hf", "native"):
        out[fmt] = export(space, None, root / fmt, fmt=fmt, model=child, labels=["neg", "pos"])
        out[f"{fmt}-trim"] = export(space, None, root / f"{fmt}-trim", fmt=fmt, model=child,
                                    labels=["neg", "pos"],
                                    trim=TrimTexts(TRAIN, report=report, split="test"))
    return out


def _pieces(folder: Path, texts: list[str]) -> set[str]:
    tokenizer = load_tokenizer(folder)
    return {p for t in texts for p in tokenizer.tokenize(t)}


def _logits(folder: Path, text: str) -> tuple[list[int], torch.Tensor]:
    model = load(folder, "torch")
    batch = model.encode([text])
    with torch.no_grad():
        return batch["input_ids"][0].tolist(), model(batch)


@pytest.mark.parametrize("fmt", ["hf", "native"])
def test_trimming_keeps_exactly_the_pieces_of_the_texts_and_the_specials(folders, fmt):
    full = (folders[fmt] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    kept = (folders[f"{fmt}-trim"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert set(kept) == _pieces(folders[fmt], TRAIN) | SPECIALS
    assert kept == sorted(kept, key=full.index)  # the old order, ids contiguous
    config = json.loads((folders[f"{fmt}-trim"] / "config.json").read_text())
    record = config["vocab_trim" if fmt == "native" else "nas_vocab_trim"]
    assert record["before"]["vocab_size"] == 30522
    assert record["after"]["vocab_size"] == len(kept) == config["vocab_size"]
    # the embedding table alone shrinks: (30522 - kept) rows of 32
    assert record["before"]["parameters"] - record["after"]["parameters"] == (
        30522 - len(kept)) * 32


@pytest.mark.parametrize("fmt", ["hf", "native"])
def test_tokenizer_json_vocab_txt_and_config_agree(folders, fmt):
    folder = folders[f"{fmt}-trim"]
    words = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokenizer = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    assert tokenizer["model"]["vocab"] == {w: i for i, w in enumerate(words)}
    assert {t["content"]: t["id"] for t in tokenizer["added_tokens"]} == {
        s: words.index(s) for s in SPECIALS}
    specials = tokenizer["post_processor"]["special_tokens"]
    assert specials["[CLS]"]["ids"] == [words.index("[CLS]")]
    assert specials["[SEP]"]["ids"] == [words.index("[SEP]")]
    settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    for key, entry in (settings.get("added_tokens_decoder") or {}).items():
        assert words[int(key)] == entry["content"]
    config = json.loads((folder / "config.json").read_text())
    assert config["pad_token_id"] == words.index("[PAD]")
    # the slow tokenizer (vocab.txt) and the fast one (tokenizer.json) give the same ids
    from transformers import BertTokenizer

    slow = BertTokenizer(str(folder / "vocab.txt"))
    fast = load_tokenizer(folder)
    for text in (KEPT_TEXT, f"a {UNSEEN}"):
        assert slow(text)["input_ids"] == fast(text)["input_ids"]


@pytest.mark.parametrize("fmt", ["hf", "native"])
def test_same_logits_on_kept_piece_text_and_unk_for_a_dropped_piece(folders, fmt):
    _, before = _logits(folders[fmt], KEPT_TEXT)
    ids, after = _logits(folders[f"{fmt}-trim"], KEPT_TEXT)
    assert max(ids) < json.loads((folders[f"{fmt}-trim"] / "config.json").read_text())[
        "vocab_size"]
    assert (before - after).abs().max().item() <= TOL
    ids, _ = _logits(folders[f"{fmt}-trim"], f"a {UNSEEN}")
    words = (folders[f"{fmt}-trim"] / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert [words[i] for i in ids] == ["[CLS]", "a", "[UNK]", "[SEP]"]


def test_the_record_scores_the_report_split_and_its_unseen_piece_texts(folders):
    record = json.loads((folders["native-trim"] / "config.json").read_text())["vocab_trim"]
    assert record["report"]["examples"] == 4 and record["report"]["split"] == "test"
    assert record["unseen_pieces"]["examples"] == 1  # "a xylophone film"
    assert record["report"]["changed_answers"] <= 1  # only that text reads differently
    assert record["texts"] == "train" and record["num_texts"] == len(TRAIN)


def test_stock_transformers_loads_the_trimmed_folder(folders, without_this_project):
    _, before = _logits(folders["hf"], KEPT_TEXT)
    out = without_this_project('''
import json, sys, torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForSequenceClassification.from_pretrained(sys.argv[1]).eval()
with torch.no_grad():
    logits = model(**tok([sys.argv[2]], return_tensors="pt")).logits
print(json.dumps({"logits": logits[0].tolist(), "unk": tok.tokenize(sys.argv[3])}))
''', str(folders["hf-trim"]), KEPT_TEXT, UNSEEN)
    answer = json.loads(out.strip().splitlines()[-1])
    assert torch.tensor(answer["logits"]).sub(before[0]).abs().max().item() <= TOL
    assert answer["unk"] == ["[UNK]"]


def test_an_onnx_export_is_traced_again_from_the_trimmed_weights(folders, tmp_path):
    trim = TrimTexts(TRAIN)
    out = convert(folders["native"], tmp_path / "onnx", "onnx", trim=trim)
    stock = convert(folders["hf"], tmp_path / "hf-onnx", "onnx", trim=trim)
    _, before = _logits(folders["native"], KEPT_TEXT)
    for folder in (out, stock):
        model = load(folder, "onnx")
        assert (torch.as_tensor(model(model.encode([KEPT_TEXT]))) - before).abs().max() <= 1e-4
        record = json.loads((folder / "config.json").read_text())
        record = record.get("vocab_trim") or record["nas_vocab_trim"]
        assert record["after"]["onnx_bytes"] < record["before"]["onnx_bytes"] / 5
    # trimmed, then quantised: the int8 graph is the trimmed one's
    int8 = convert(folders["native"], tmp_path / "int8", "onnx", quantize="int8", trim=trim)
    config = json.loads((int8 / "config.json").read_text())
    assert config["vocab_trim"]["after"]["onnx_bytes"] == config["quantization"][
        "fp32_onnx_bytes"]
    assert load(int8).predict([KEPT_TEXT])[0]["label"] in ("neg", "pos")
    # a stock folder converted to hf with trimming: a trimmed copy, still stock
    copy = convert(folders["hf"], tmp_path / "hf-copy", "hf", trim=trim)
    assert not (copy / "model.onnx").exists()
    assert (copy / "vocab.txt").read_text() == (folders["hf-trim"] / "vocab.txt").read_text()


def test_a_tokenizer_other_than_wordpiece_is_refused_in_one_line(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "fine", "film"]
    word_level = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, "[UNK]"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = {"unk_token": "[UNK]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                "sep_token": "[SEP]"}
    PreTrainedTokenizerFast(tokenizer_object=word_level, **specials).save_pretrained(
        str(tmp_path / "tok"))
    space = get_space("bert", hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      intermediate_size=48, vocab_size=len(words))
    with pytest.raises(ExportError) as err:
        export(space, None, tmp_path / "out", random_init=True, tokenizer=tmp_path / "tok",
               trim=TrimTexts(TRAIN))
    message = str(err.value)
    assert "\n" not in message
    assert "trims WordPiece tokenizers only, this one's model is WordLevel" in message
    assert not (tmp_path / "out").exists()  # nothing left behind


def test_nas_predict_answers_the_same_on_kept_piece_text(folders, capsys):
    for fmt in ("hf", "native"):
        answers = []
        for folder in (folders[fmt], folders[f"{fmt}-trim"]):
            assert main(["predict", str(folder), KEPT_TEXT, "--json"]) == 0
            answers.append(json.loads(capsys.readouterr().out))
        assert answers[0]["label"] == answers[1]["label"]
        for name, p in answers[0]["probabilities"].items():
            assert answers[1]["probabilities"][name] == pytest.approx(p, abs=1e-5)


def test_a_trimmed_export_is_timed_on_its_teachers_ids(folders):
    """A run times its export against the teacher on the teacher's tokens: the trimmed
    export's timed callable reads ids beyond its vocabulary modulo it."""
    from nas.runtime import timed_callable

    model = load(folders["native-trim"], "torch")
    ids = torch.tensor([[101, 29000, 2023, 102]])  # the 30,522-piece vocabulary's ids
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
             "token_type_ids": torch.zeros_like(ids)}
    with torch.no_grad():
        out = timed_callable(model)(batch)
    assert out.logits.shape == (1, 2)
    with pytest.raises(IndexError):  # what the untrimmed lookup would do
        model.network(batch)


def test_the_model_card_says_the_vocabulary_was_trimmed(folders):
    card = (folders["hf-trim"] / "README.md").read_text(encoding="utf-8")
    kept = len((folders["hf-trim"] / "vocab.txt").read_text().splitlines())
    assert f"- vocabulary trimmed to the pieces of the task's train texts: 30,522 -> {kept} " \
           "pieces" in card
    assert "on its texts with a piece absent from train (1 examples)" in card
    assert "vocab_trim:" in card.split("---")[1]  # in the Hub's metadata header too


def test_a_run_asks_for_the_trim_of_its_whole_train_split_scored_on_its_report_rows():
    from types import SimpleNamespace

    from recipes.common import TaskContext
    from recipes.search_config import FinalExport, FinalSettings

    train = SimpleNamespace(texts_a=["a b", "c"], texts_b=["d", "e"])
    report = SimpleNamespace(texts_a=["x"], texts_b=None, labels=[1])
    ctx = SimpleNamespace(cfg=SimpleNamespace(final=FinalSettings(
        export=FinalExport(trim_vocab=True))), full_train=train, report=report,
        report_split="test", metric="accuracy")
    trim = TaskContext.format_keywords(ctx, "native")["trim"]  # type: ignore[arg-type]
    assert list(trim.texts) == ["a b", "c", "d", "e"] and trim.split == "test"
    assert trim.report == DevSet(["x"], None, [1], "accuracy")


def test_nas_export_run_trim_vocab_trims_every_result(smoke_runs, tmp_path, capsys):
    run = smoke_runs("compress")
    capsys.readouterr()  # the smoke run's own lines
    out = tmp_path / "trimmed"
    assert main(["export", "--run", str(run), "--trim-vocab", "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["trim_vocab"] is True and len(doc["final"]) == 1
    for folder in (out, Path(doc["final"][0]["directory"])):
        config = json.loads((folder / "config.json").read_text())
        record = config.get("vocab_trim") or config["nas_vocab_trim"]
        assert record["texts"] == "train" and record["before"]["vocab_size"] == 30522
        assert record["after"]["vocab_size"] < 30522
        assert record["report"]["split"] == "test" and record["report"]["examples"] == 256
        assert record["unseen_pieces"]["examples"] > 0
    assert main(["predict", str(out), "a fine film"]) == 0
