"""Your own data: files and mappings as tasks, their errors, ``--set``, and the
worked example of ``docs/own_data.md`` run from the command line (slow)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import yaml

from nas.cli import main
from nas.config import ConfigError, apply_overrides
from nas.data import load_task, report_split, resolve_task
from nas.data.files import normalise_task
from nas.errors import DataError, RegistryError
from nas.methods import load_experiment

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_CSV = ROOT / "examples" / "reviews.csv"

POSITIVE = ["a lovely film", "works great", "sturdy and cheap", "I laughed a lot",
            "fast delivery", "a joy to use", "sharp picture", "superb cast"]
NEGATIVE = ["a dull film", "broke at once", "flimsy and dear", "I fell asleep",
            "late delivery", "a pain to use", "blurry picture", "wooden cast"]


def _rows(n: int = 40, offset: int = 0) -> list[tuple[str, str]]:
    """``n`` distinct (text, label) rows, alternating positive and negative."""
    out = []
    for i in range(offset, offset + n):
        words = POSITIVE if i % 2 == 0 else NEGATIVE
        out.append((f"{words[(i // 2) % len(words)]} number {i}",
                    "positive" if i % 2 == 0 else "negative"))
    return out


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _csv(path: Path, rows, header: str | None = "text,label", sep: str = ",") -> Path:
    lines = ([header] if header is not None else []) + [sep.join(map(str, r)) for r in rows]
    return _write(path, "\n".join(lines) + "\n")


# ---------------------------------------------------------------- formats and columns


def test_csv_with_string_labels_gets_sorted_classes_and_a_carved_validation(tmp_path):
    name = resolve_task(str(_csv(tmp_path / "reviews.csv", _rows(40))))
    assert name.startswith("reviews-")
    train, validation = load_task(name, "train"), load_task(name, "validation")
    assert train.label_names == ("negative", "positive") and train.kind == "single"
    assert len(train) + len(validation) == 40 and len(validation) == 4
    assert sorted(validation.labels) == [0, 0, 1, 1]  # stratified
    assert not set(train.texts_a) & set(validation.texts_a)  # train keeps only the rest
    assert load_task(name, "dev").fingerprint == validation.fingerprint  # dev = validation
    assert report_split(name) == "dev"  # no test file: reports use validation
    assert train.texts_a[0] == "a lovely film number 0" and train.labels[0] == 1


def test_headerless_tsv_is_text_then_label(tmp_path):
    """The newcomer's AG News files: ``text<TAB>label``, string labels, no header."""
    rows = [(f"story {i} about {t}", t) for i, t in
            enumerate(["World", "Sports", "Business", "Sci/Tech"] * 10)]
    path = _csv(tmp_path / "agnews" / "train.tsv", rows, header=None, sep="\t")
    name = resolve_task(str(path))
    assert name.startswith("agnews-")  # a file called train.* is named by its folder
    train = load_task(name, "train")
    assert train.label_names == ("Business", "Sci/Tech", "Sports", "World")
    assert len(train) + len(load_task(name, "validation")) == 40  # no row lost as a header
    assert "story 0 about World" in train.texts_a + load_task(name, "validation").texts_a


def test_headed_tsv_keeps_quotes_in_texts(tmp_path):
    rows = [(f'he said "hi" {i}', "yes" if i % 2 else "no") for i in range(20)]
    name = resolve_task(str(_csv(tmp_path / "q.tsv", rows, header="text\tlabel", sep="\t")))
    data = load_task(name, "train")
    assert all('"hi"' in t for t in data.texts_a)


def test_two_column_csv_with_a_header_of_other_names(tmp_path):
    name = resolve_task(str(_csv(tmp_path / "r.csv", _rows(20), header="review,sentiment")))
    data = load_task(name, "train")
    assert data.label_names == ("negative", "positive")
    assert "review" not in data.texts_a  # the header was not read as an example


def test_headerless_columns_by_number_and_a_byte_order_mark(tmp_path):
    rows = [(i, f"text {i}", "yes" if i % 2 else "no") for i in range(20)]
    path = _csv(tmp_path / "three.csv", rows, header=None)
    data = load_task(resolve_task({"train": str(path), "header": False, "text": 1,
                                   "label": 2}), "train")
    assert data.texts_a[0] == "text 0" and data.label_names == ("no", "yes")
    bom = _write(tmp_path / "excel.csv", "\ufeff" + (tmp_path / "three.csv").read_text())
    with pytest.raises(DataError, match=r"no column called 'text' \(the columns are 0, text 0, "
                                        r"no\).*header: false"):
        resolve_task(str(bom))  # no BOM left in the first column's name
    excel = _write(tmp_path / "excel2.csv", "\ufefftext,label\n" + "".join(
        f"t{i},{i % 2}\n" for i in range(20)))
    assert load_task(resolve_task(str(excel)), "train").label_names == ("0", "1")


def test_numeric_labels_sort_numerically(tmp_path):
    rows = [(f"text {i}", [2, 10, 1][i % 3]) for i in range(30)]
    data = load_task(resolve_task(str(_csv(tmp_path / "n.csv", rows))), "train")
    assert data.label_names == ("1", "2", "10")
    assert data.labels[0] == 1  # "text 0" is class 2 → index 1


def test_jsonl_pairs(tmp_path):
    lines = [json.dumps({"text": f"first {i}", "text_pair": f"second {i}",
                         "label": "same" if i % 2 else "different"}) for i in range(30)]
    name = resolve_task(str(_write(tmp_path / "pairs.jsonl", "\n".join(lines) + "\n")))
    data = load_task(name, "train")
    assert data.is_pair and data.kind == "pair" and data.texts_b[0] == "second 0"
    assert data.label_names == ("different", "same")


def test_jsonl_tagging_with_tokens_tags_and_a_label(tmp_path):
    lines = [json.dumps({"tokens": ["play", "song", str(i)], "tags": ["O", "B-track", "I-track"],
                         "label": "PlayMusic" if i % 2 else "AddToPlaylist"})
             for i in range(20)]
    name = resolve_task(str(_write(tmp_path / "slots.jsonl", "\n".join(lines))))
    data = load_task(name, "train")
    assert data.kind == "tagging" and data.tag_names == ("O", "B-track", "I-track")
    assert data.tokens[0] == ("play", "song", "0") and data.tags[0] == (0, 1, 2)
    assert data.texts_a[0] == "play song 0"


def test_parquet_and_saved_datasets_folders_keep_classlabel_names(tmp_path):
    import datasets

    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=["neg", "pos"])})
    split = {n: datasets.Dataset.from_dict(
        {"sentence": [f"{n} sentence {i}" for i in range(20)], "label": [i % 2 for i in
                                                                        range(20)]},
        features=features) for n in ("train", "validation", "test")}
    datasets.DatasetDict(split).save_to_disk(str(tmp_path / "saved"))
    split["train"].to_parquet(str(tmp_path / "train.parquet"))

    name = resolve_task({"path": str(tmp_path / "saved"), "text": "sentence"})
    assert report_split(name) == "test"  # reports use the test split when there is one
    test = load_task(name, "test")
    assert test.label_names == ("neg", "pos") and test.texts_a[1] == "test sentence 1"
    assert len(load_task(name, "validation")) == 20 and len(load_task(name, "train")) == 20

    name = resolve_task({"train": str(tmp_path / "train.parquet"), "text": "sentence"})
    assert load_task(name, "train").label_names == ("neg", "pos")


def test_full_mapping_with_relative_paths(tmp_path, monkeypatch):
    folder = tmp_path / "data"
    _csv(folder / "train.csv", _rows(30), header="review,stars")
    _csv(folder / "valid.csv", _rows(6, offset=100), header="review,stars")
    _csv(folder / "test.csv", _rows(6, offset=200), header="review,stars")
    task = {"train": "train.csv", "validation": "valid.csv", "test": "test.csv",
            "text": "review", "label": "stars", "name": "My Reviews"}
    normalised = normalise_task(task, base_dir=folder)  # relative to the experiment file
    assert normalised["train"] == str(folder / "train.csv")
    monkeypatch.chdir(folder)  # ...or to the current directory
    name = resolve_task(task)
    assert name.startswith("my-reviews-") and resolve_task(normalised) == name
    assert len(load_task(name, "train")) == 30 and len(load_task(name, "dev")) == 6
    assert report_split(name) == "test" and load_task(name, "test").texts_a[0].endswith("200")


def test_the_name_follows_the_content_not_the_path(tmp_path):
    a = _csv(tmp_path / "a" / "reviews.csv", _rows(20))
    b = _csv(tmp_path / "b" / "reviews.csv", _rows(20))
    assert resolve_task(str(a)) == resolve_task(str(b))  # a copy keeps its teacher cache
    c = _csv(tmp_path / "c" / "reviews.csv", _rows(22))
    assert resolve_task(str(c)) != resolve_task(str(a))
    assert resolve_task({"train": str(a), "val_fraction": 0.2}) != resolve_task(str(a))
    # the same columns named or found: one name, so one teacher cache
    assert resolve_task({"train": str(a), "text": "text", "label": "label"}) == resolve_task(
        str(a))


def test_registered_tasks_keep_their_names_and_fingerprints():
    """The teacher cache is keyed by these: renaming dev → validation must not move them."""
    assert resolve_task("sst2") == "sst2" and resolve_task("glue/sst2") == "glue/sst2"
    assert load_task("sst2", "train").fingerprint == "b613d498d38e1d30"
    assert load_task("sst2", "dev").fingerprint == "0b83784c087373bc"
    assert load_task("sst2", "validation").fingerprint == "0b83784c087373bc"
    assert load_task("mrpc", "validation").fingerprint == "aecf61ea30194d05"
    assert load_task("snips", "validation").fingerprint == "b9b97726c0b99d00"


# --------------------------------------------------------------------------- errors


def _bad(tmp_path: Path, case: str):
    """The task value of one bad-input case (files written under ``tmp_path``)."""
    good = _csv(tmp_path / "good.csv", _rows(20))
    if case == "unknown column":
        return {"train": str(good), "text": "review"}
    if case == "empty file":
        return str(_write(tmp_path / "empty.csv", ""))
    if case == "header only":
        return str(_write(tmp_path / "header.csv", "text,label\n"))
    if case == "label only in validation":
        valid = _csv(tmp_path / "valid.csv", _rows(4, offset=50) + [("so so", "neutral")])
        return {"train": str(good), "validation": str(valid)}
    if case == "mixed label types":
        return str(_csv(tmp_path / "mixed.csv", _rows(10) + [("meh", 3)]))
    if case == "mixed label types across files":
        valid = _csv(tmp_path / "valid.csv", [("fine", 1), ("bad", 0)])
        return {"train": str(good), "validation": str(valid)}
    if case == "one class":
        return str(_csv(tmp_path / "one.csv", [(f"t{i}", "spam") for i in range(10)]))
    if case == "missing file":
        return "data/nope.csv"
    if case == "unknown mapping key":
        return {"train": str(good), "txt": "review"}
    if case == "plain folder":
        (tmp_path / "folder").mkdir()
        return str(tmp_path / "folder")
    if case == "no text column":
        return str(_write(tmp_path / "three.csv", "a,b,c\n1,2,3\n4,5,6\n"))
    if case == "unknown file type":
        return str(_write(tmp_path / "data.xlsx", "x"))
    raise AssertionError(case)


@pytest.mark.parametrize(("case", "match"), [
    ("unknown column", r"good\.csv: no column 'review' for text \(the columns are text, "
                       r"label\); set text: COLUMN"),
    ("empty file", r"empty\.csv: empty file"),
    ("header only", r"header\.csv: empty file"),
    ("label only in validation", r"valid\.csv: label 'neutral' \(row 5\) never occurs in the "
                                 r"training data .*good\.csv.*add training examples"),
    ("mixed label types", r"mixed\.csv: column 'label' mixes label types: words .* and "
                          r"numbers \(e\.g\. '3' at row 11\); write every label the same way"),
    ("mixed label types across files", r"valid\.csv: labels are numbers but the training "
                                       r"data's are words; mixed label types"),
    ("one class", r"one\.csv: every training label is 'spam'"),
    ("missing file", r"data/nope\.csv: no such file or folder"),
    ("unknown mapping key", r"unknown key 'txt'; known keys: train, validation, test"),
    ("plain folder", r"folder is a folder but not one written by datasets"),
    ("no text column", r"three\.csv: no column called 'text' \(the columns are a, b, c\)"),
    ("unknown file type", r"data\.xlsx: unknown file type '\.xlsx'"),
])
def test_bad_files_get_one_line_naming_the_file_and_the_fix(tmp_path, monkeypatch, case,
                                                            match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DataError, match=match) as err:
        resolve_task(_bad(tmp_path, case))
    assert "\n" not in str(err.value)


def test_an_unknown_name_still_lists_the_close_registered_ones():
    with pytest.raises(RegistryError, match=r"unknown task 'sst'.*sst2.*or give a data file"):
        resolve_task("sst")


def test_overlap_between_train_and_validation_is_a_warning_with_the_count(tmp_path, caplog):
    train = _csv(tmp_path / "train.csv", _rows(20))
    valid = _csv(tmp_path / "valid.csv", _rows(3) + _rows(3, offset=60))  # 3 exact copies
    with caplog.at_level(logging.WARNING, logger="nas.data"):
        name = resolve_task({"train": str(train), "validation": str(valid)})
    assert len(load_task(name, "validation")) == 6  # not a failure: the run goes on
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert warnings[0].startswith(f"{valid}: 3 of 6 validation texts also occur in the "
                                  f"training data {train} (exact duplicates)")
    assert "remove them from one of the files (a warning: the run goes on)" in warnings[0]


# ------------------------------------------------------------------------ overrides


def test_set_overrides_any_dotted_key_before_the_typed_checks(tmp_path):
    data = {"name": "x", "retrain": {"epochs": 3}, "search": None}
    out = apply_overrides(data, ["retrain.epochs=1", "search.beta=0", "data.max_train_examples"
                                 "=2000", "retrain.lr=2e-4", "space={hidden: 16}"], "exp.yaml")
    assert out == {"name": "x", "retrain": {"epochs": 1, "lr": 2e-4}, "search": {"beta": 0},
                   "data": {"max_train_examples": 2000}, "space": {"hidden": 16}}
    assert data["retrain"] == {"epochs": 3}  # the file's mapping is left alone
    with pytest.raises(ConfigError, match=r"--set name.first=1: exp.yaml: name is 'x', not a "
                                          r"mapping"):
        apply_overrides(data, ["name.first=1"], "exp.yaml")
    with pytest.raises(ConfigError, match="--set expects KEY=VALUE"):
        apply_overrides(data, ["retrain.epochs"], "exp.yaml")


@pytest.mark.parametrize(("override", "match"), [
    ("retrain.epochs=zero", r"retrain\.epochs: expected int, got 'zero'"),
    ("search.gamma=2", r"gamma must be in \[0, 1\], got 2"),
    ("retrain.epochz=1", r"unknown key 'epochz'"),
    ("task=nope.csv", r"adabert_smoke\.yaml: task: nope\.csv: no such file"),
    ("task.text=review", r"--set task.text: the task is 'sst2', a named task whose columns "
                         r"are set; give your data too \(--set task.train=FILE\), or --task"),
])
def test_set_gets_the_same_checks_as_the_file(override, match):
    with pytest.raises(ConfigError, match=match):
        load_experiment(ROOT / "experiments" / "adabert_smoke.yaml", [override])


def test_task_keys_replace_a_named_task_with_your_files(tmp_path):
    """--set task.train=FILE on an experiment whose task: is a name replaces the
    name; column keys alone rename the columns of a task given as a file."""
    smoke = ROOT / "experiments" / "adabert_smoke.yaml"
    train = _csv(tmp_path / "mine.csv", _rows(20), header="review,sentiment")
    _, config = load_experiment(smoke, [f"task.train={train}", "task.text=review",
                                        "task.label=sentiment"])
    assert config.task == {"train": str(train), "text": "review", "label": "sentiment"}
    _, config = load_experiment(smoke, ["task.text=review", "task.label=sentiment"],
                                task=str(train))
    assert config.task == {"path": str(train), "text": "review", "label": "sentiment"}
    assert resolve_task(config.task).startswith("mine-")


def test_run_task_replaces_the_file_s_task(tmp_path, monkeypatch):
    smoke = ROOT / "experiments" / "adabert_smoke.yaml"
    path = _csv(tmp_path / "reviews.csv", _rows(20))
    monkeypatch.chdir(tmp_path)
    _, config = load_experiment(smoke, task="reviews.csv")  # relative to the current folder
    assert config.task == str(path)
    assert load_experiment(smoke, task="mrpc")[1].task == "mrpc"
    with pytest.raises(ConfigError, match=r"--task nope\.csv: task: nope\.csv: no such file"):
        load_experiment(smoke, task="nope.csv")


def test_dry_run_prints_the_plan_and_trains_nothing(tmp_path, tiny_teacher, monkeypatch,
                                                    capsys):
    """nas run --task FILE --dry-run: the resolved configuration, the sizes and the caps'
    cuts, the teacher (to fine-tune), the steps per training section and an estimate; no
    run folder, no teacher in the cache."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    path = _csv(tmp_path / "big.csv", _rows(400))
    run_dir = tmp_path / "run"
    argv = ["run", str(ROOT / "examples" / "reviews.yaml"), "--task", str(path), "--run-dir",
            str(run_dir), "--set", f"teacher={tiny_teacher}", "--set",
            "data.max_train_examples=256", "--set", "teacher_finetune.max_train_examples=100",
            "--dry-run", "--no-progress"]
    assert main([*argv, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert not run_dir.exists() and not (tmp_path / "cache" / "teachers").exists()
    assert plan["config"]["task"] == str(path) and plan["task"].startswith("big-")
    # 400 rows: 40 carved for validation (val_fraction 0.1), 360 left, 256 used
    assert plan["data"]["cuts"] == ["train: 360 rows, using 256: data.max_train_examples"]
    assert plan["data"]["train"] == 256 and plan["data"]["dev"] == 40
    steps = {s["name"]: s["steps"] for s in plan["stages"]}
    assert steps == {"search": 2 * 8, "retrain": 3 * 8}  # epochs × ⌈256 / 32⌉
    assert plan["trials"] == 2
    assert plan["teacher"] == {"cached": False, "folder": plan["teacher"]["folder"],
                               "train": 100, "dev": 40, "steps": 8,  # 2 epochs × ⌈100/32⌉
                               "cuts": ["train: 360 rows, using 100: teacher_finetune."
                                        "max_train_examples (the first rows)"]}
    assert plan["estimate"]["seconds"] > 0 and plan["estimate"]["seq_len"] == 32
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "train: 360 rows, using 256: data.max_train_examples" in text
    assert "  retrain: 24 steps (3 epoch(s) × 8 batches of 32 on 256 examples)" in text
    assert "estimated wall time: about" in text and "task: " + str(path) in text


def test_the_run_snapshot_records_the_overrides(tmp_path, capsys):
    """The run folder's config.yaml is the typed config after --set (and the task's files
    as absolute paths); a teacher that does not exist stops the run right after."""
    run_dir = tmp_path / "run"
    code = main(["run", str(ROOT / "examples" / "reviews.yaml"), "--run-dir", str(run_dir),
                 "--no-progress", "--set", "data.max_train_examples=100",
                 "--set", f"teacher={tmp_path / 'no-teacher'}"])
    assert code == 2 and "teacher folder" in capsys.readouterr().err
    snapshot = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert snapshot["data"]["max_train_examples"] == 100
    assert snapshot["task"] == {"train": str(EXAMPLE_CSV), "text": "review",
                                "label": "sentiment"}


def test_data_inside_the_run_folder_is_recorded_relative_to_it(tmp_path, capsys):
    """The run folder's storage rule for a task's files: inside the run folder relative (a
    moved run reads its own copy), a user's own files as given (absolute)."""
    from nas.data.files import record_task, recorded_task
    from nas.evaluate import export_dir_of

    run_dir = tmp_path / "run"
    inside = _csv(run_dir / "data" / "train.csv", _rows(40), header="review,sentiment")
    outside = _csv(tmp_path / "test.csv", _rows(10, offset=40), header="review,sentiment")
    code = main(["run", str(ROOT / "examples" / "reviews.yaml"), "--run-dir", str(run_dir),
                 "--no-progress", "--set", f"task.train={inside}", "--set",
                 f"task.test={outside}", "--set", f"teacher={tmp_path / 'no-teacher'}"])
    assert code == 2 and "teacher folder" in capsys.readouterr().err  # stops after opening
    snapshot = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert snapshot["task"]["train"] == "data/train.csv"
    assert snapshot["task"]["test"] == str(outside)
    moved = tmp_path / "moved"
    run_dir.rename(moved)
    (moved / "export").mkdir()
    (moved / "export" / "config.json").write_text("{}")
    _, task = export_dir_of(moved)  # what nas evaluate RUN_DIR reads
    assert task["train"] == str((moved / "data" / "train.csv").resolve())
    assert task["test"] == str(outside) and task["text"] == "review"
    assert record_task("sst2", moved) == "sst2" == recorded_task("sst2", moved)


# ------------------------------------------------------------------ command line


def test_teacher_finetune_takes_a_file(tmp_path, tiny_teacher, capsys, monkeypatch):
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    rows = [(t, label) for t, label in _rows(24)]
    path = _csv(tmp_path / "news" / "train.tsv", rows, header=None, sep="\t")
    code = main(["teacher", "finetune", "--task", str(path), "--teacher", str(tiny_teacher),
                 "--epochs", "1", "--max-seq-len", "16", "--batch-size", "8", "--json",
                 "--no-progress"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert result["task"].startswith("news-") and result["train_examples"] == 22
    assert result["dev_examples"] == 2


@pytest.mark.slow
def test_the_worked_example_runs_from_the_command_line(tmp_path, monkeypatch, capsys):
    """docs/own_data.md, command by command, on the shipped CSV: search, report, predict."""
    import csv

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(ROOT)
    with EXAMPLE_CSV.open(newline="", encoding="utf-8") as f:
        labels = {row["sentiment"] for row in csv.DictReader(f)}
    assert labels == {"negative", "positive"} and EXAMPLE_CSV.stat().st_size < 100_000

    run_dir = tmp_path / "runs" / "reviews"
    assert main(["run", "examples/reviews.yaml", "--run-dir", str(run_dir),
                 "--no-progress"]) == 0
    assert main(["report", str(run_dir)]) == 0
    capsys.readouterr()
    assert main(["predict", str(run_dir / "export"), "the zip broke on the first day"]) == 0
    label = capsys.readouterr().out.split("\t")[0]
    assert label in labels

    exported = json.loads((run_dir / "export" / "config.json").read_text())
    assert exported["labels"] == ["negative", "positive"]
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["evaluation"]["split"] == "dev" and metrics["evaluation"]["examples"] == 26
    assert main(["evaluate", str(run_dir), "--json"]) == 0  # the snapshot finds the CSV again
    scored = json.loads(capsys.readouterr().out)
    assert scored["metrics"] == metrics["searched"]["dev"] and scored["examples"] == 26
