"""Prediction at volume: ``nas.runtime.load(DIR).predict(list)`` and
``nas predict DIR --file F`` give every text the answer it gets alone, in file order.

The model is a small random AdaBERT export: its convolutions see padding, so a padded
batch answers differently from the texts scored alone (checked below, so the length
grouping is what makes the answers agree)."""

from __future__ import annotations

import json

import pytest

from nas.cli import main
from nas.export import export
from nas.runtime import length_batches, load
from nas.space import get_space

TEXTS = ["a fine film", "the plot is thin but the acting is superb and the music lovely",
         "bad", "not good at all , really", "a fine movie", "dull"]


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """``{"single": DIR, "pair": DIR}``: random AdaBERT exports with the MiniLM tokenizer."""
    root = tmp_path_factory.mktemp("predict")
    out = {}
    for kind, extra, fmt in (("single", {}, "onnx"), ("pair", {"pair": True}, "native")):
        space = get_space("adabert", hidden=16, max_depth=2, **extra)  # MiniLM vocabulary
        out[kind] = export(space, space.default(), root / kind, labels=["neg", "pos"],
                           random_init=True, fmt=fmt)
    return out


def _same(got: list[dict], want: list[dict], tol: float = 1e-6) -> bool:
    """The same labels, and probabilities equal up to float rounding (a batch of two sums
    in another order than a batch of one)."""
    return len(got) == len(want) and all(
        g["label"] == w["label"] and g["probabilities"].keys() == w["probabilities"].keys()
        and all(abs(g["probabilities"][k] - v) <= tol for k, v in w["probabilities"].items())
        for g, w in zip(got, want, strict=True))


def _alone(model, texts, pairs=None):
    return [model.predict([t], None if pairs is None else [p])[0]
            for t, p in zip(texts, pairs or [None] * len(texts), strict=True)]


def test_length_batches_share_one_length_and_keep_file_order():
    assert length_batches([3, 5, 3, 3, 5, 2], 2) == [[5], [0, 2], [3], [1, 4]]
    assert length_batches([], 4) == []


@pytest.mark.parametrize("runtime", ["torch", "onnx"])
def test_predict_on_a_list_answers_as_each_text_alone(exports, runtime):
    model = load(exports["single"], runtime)
    many = model.predict(TEXTS, batch_size=2)
    assert _same(many, _alone(model, TEXTS))
    assert model.predict([]) == []
    # a plain padded batch of all six does not: the grouping is what makes them agree
    padded = model._predict_batch(TEXTS, None)
    assert not _same(padded, many, tol=1e-4)


def test_pairs_stream_in_order(exports):
    model = load(exports["pair"])
    firsts, seconds = TEXTS, TEXTS[::-1]
    streamed = list(model.predict_stream(zip(firsts, seconds, strict=True), batch_size=2,
                                         chunk_size=4))
    assert _same(streamed, _alone(model, firsts, seconds))


def _lines(capsys) -> list[str]:
    return capsys.readouterr().out.splitlines()


def test_cli_file_of_lines_matches_the_single_text_path(exports, tmp_path, capsys):
    path = tmp_path / "texts.txt"
    path.write_text("\n".join([TEXTS[0], "", *TEXTS[1:]]) + "\n", encoding="utf-8")
    directory = str(exports["single"])
    single = []
    for text in TEXTS[:2]:  # the single-text command is model.predict([text]) (above)
        assert main(["predict", directory, text, "--json"]) == 0
        single.append(json.loads(capsys.readouterr().out))
    assert _same(single, _alone(load(directory), TEXTS[:2]))
    assert main(["predict", directory, "--file", str(path), "--json", "--batch-size", "2"]) == 0
    rows = [json.loads(line) for line in _lines(capsys)]
    assert [r.pop("line") for r in rows] == [1, 3, 4, 5, 6, 7]  # the blank line skipped
    assert [r.pop("text") for r in rows] == TEXTS
    assert _same(rows, _alone(load(directory), TEXTS)) and _same(rows[:2], single)
    assert main(["predict", directory, "--file", str(path), "--runtime", "onnx"]) == 0
    text = _lines(capsys)
    assert [t.split("\t")[0] for t in text] == [r["label"] for r in rows]


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_cli_tables_with_named_columns(exports, tmp_path, capsys, suffix):
    path = tmp_path / f"pairs{suffix}"
    rows = [{"id": str(i), "first": a, "second": b}
            for i, (a, b) in enumerate(zip(TEXTS, TEXTS[::-1], strict=True))]
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        import csv

        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, ["id", "first", "second"],
                                    delimiter="\t" if suffix == ".tsv" else ",")
            writer.writeheader()
            writer.writerows(rows)
    model = load(exports["pair"])
    assert main(["predict", str(exports["pair"]), "--file", str(path), "--text-column",
                 "first", "--pair-column", "second", "--json"]) == 0
    got = [json.loads(line) for line in _lines(capsys)]
    assert [r["text_pair"] for r in got] == TEXTS[::-1]
    want = _alone(model, TEXTS, TEXTS[::-1])
    assert _same(got, want)


@pytest.mark.parametrize(("argv", "content", "message"), [
    (["--file", "{f}", "--text-column", "review"], "text,label\nhi,1\n",
     "no column 'review' (the columns are 'text', 'label'); pass --text-column NAME"),
    (["--file", "{f}"], "first,second\nhi,1\n", "no column 'text'"),
    (["a text", "--file", "{f}"], "hi\n", "needs a text or --file FILE (not both)"),
    ([], None, "needs a text or --file FILE"),
    (["a text", "--text-column", "x"], None, "--text-column and --pair-column go with --file"),
    (["--file", "{f}"], "\n\n", "holds no text"),
    (["--file", "{f}"], b"fine\n\xe9t\xe9\n", "line 2 is not UTF-8 text (byte 0xe9)"),
    (["--file", "{f}"], 'text\nfine\n"open quote,\n',
     "after line 2: not valid CSV (unexpected end of data)"),
    (["--file", "{f}.jsonl"], '{"text": "fine"}\n{"txt": "typo"}\n',
     "line 2: column 'text' is missing; give every row a text"),
])
def test_cli_file_refusals_are_one_line(exports, tmp_path, capsys, argv, content, message):
    suffix = ".csv" if isinstance(content, str) and "," in content else ".txt"
    path = tmp_path / f"input{suffix}"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content, encoding="utf-8")
    if any(a.endswith(".jsonl") for a in argv):
        path = path.rename(path.with_suffix(".jsonl"))
    args = [a.replace("{f}.jsonl", str(path)).replace("{f}", str(path)) for a in argv]
    assert main(["predict", str(exports["single"]), *args]) == 2
    *warnings, err = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("error: ") and message in err
    assert all(w.startswith("warning: ") for w in warnings)  # the random-init warning


def test_cli_pair_model_needs_a_pair_column(exports, tmp_path, capsys):
    path = tmp_path / "texts.txt"
    path.write_text("a fine film\n", encoding="utf-8")
    assert main(["predict", str(exports["pair"]), "--file", str(path)]) == 2
    assert "reads a pair of texts" in capsys.readouterr().err
    table = tmp_path / "pairs.csv"
    table.write_text("text,text_pair\na fine film,dull\n", encoding="utf-8")
    assert main(["predict", str(exports["pair"]), "--file", str(table), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["text_pair"] == "dull"  # found by its name
