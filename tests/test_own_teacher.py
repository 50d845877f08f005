"""A teacher the user fine-tuned already (``teacher_finetune: {enabled: false}``): its labels
matched with the task's by name (or ``teacher_labels``), never by position; its outputs in
the task's order wherever the run reads it; no fine-tune; its dev score the teacher row's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from nas.cli import main
from nas.teacher import TeacherError, match_labels, own_teacher

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "compress_smoke.yaml"
#: the compress smoke made small for a tiny teacher: the teacher's dev cap, a small training
#: subset, the truncation searcher and one distillation step per candidate
SMALL = ("teacher_finetune.enabled=false", "teacher_finetune.max_dev_examples=32",
         "data.max_train_examples=80", "importance.samples=16", "searcher=truncation",
         "evaluator.settings.max_steps=1")


def _relabel(folder: Path, labels: list[str]) -> Path:
    """Name the classifier's outputs in ``folder``'s config (row i is ``labels[i]``)."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config["id2label"] = {str(i): name for i, name in enumerate(labels)}
    config["label2id"] = {name: i for i, name in enumerate(labels)}
    path.write_text(json.dumps(config))
    return folder


@pytest.fixture
def named_teacher(tiny_teacher, tmp_path):
    """The tiny classifier with its rows named ``positive``, ``negative`` (SST-2's order is
    ``negative``, ``positive``)."""
    import shutil

    folder = tmp_path / "named"
    shutil.copytree(tiny_teacher, folder)
    return _relabel(folder, ["positive", "negative"])


# --------------------------------------------------------------- matching the labels

def test_labels_match_by_name_not_by_position():
    assert match_labels(["negative", "positive"], ["positive", "negative"], None, "T") == [1, 0]
    assert match_labels(["negative", "positive"], ["Negative", "Positive"], None, "T") == [0, 1]


def test_unnamed_labels_are_refused_without_teacher_labels_and_read_with_them():
    with pytest.raises(TeacherError) as err:
        match_labels(["negative", "positive"], ["LABEL_0", "LABEL_1"], None, "T")
    message = str(err.value)
    assert "\n" not in message and "teacher_labels" in message
    assert "the data's labels: negative, positive; the model's: LABEL_0, LABEL_1" in message
    mapping = {"negative": "LABEL_1", "positive": "LABEL_0"}
    assert match_labels(["negative", "positive"], ["LABEL_0", "LABEL_1"], mapping, "T") == [1, 0]


def test_a_label_count_mismatch_is_refused_in_one_line():
    with pytest.raises(TeacherError, match=r"^teacher T has 3 labels, the task 2 \(the data's "
                                           r"labels: negative, positive; the model's: a, b, c\)"):
        match_labels(["negative", "positive"], ["a", "b", "c"], None, "T")


@pytest.mark.parametrize("mapping, problem", [
    ({"negative": "LABEL_0"}, "leaves out 'positive'"),
    ({"negative": "LABEL_0", "positive": "LABEL_0"}, "maps two data labels to 'LABEL_0'"),
    ({"negative": "LABEL_0", "positive": "LABEL_7"}, "maps to 'LABEL_7', not a model label"),
    ({"negative": "LABEL_0", "positive": "LABEL_1", "neutral": "LABEL_1"},
     "names 'neutral', not a data label")])
def test_a_wrong_teacher_labels_is_refused_naming_the_problem(mapping, problem):
    with pytest.raises(TeacherError, match=f"^teacher_labels {problem} "):
        match_labels(["negative", "positive"], ["LABEL_0", "LABEL_1"], mapping, "T")


def test_names_matching_no_data_label_are_refused():
    with pytest.raises(TeacherError, match="do not match the data's by name"):
        match_labels(["negative", "positive"], ["neg", "pos"], None, "T")


# ------------------------------------------------------- one order, everywhere after

def test_an_own_teachers_logits_follow_the_tasks_label_order(named_teacher, tmp_path,
                                                             monkeypatch):
    """A teacher answering ``[positive, negative]`` becomes, for an SST-2 run, a classifier
    answering ``[negative, positive]``: as ``transformers`` loads it and in the engine's
    ``bert`` design (what the teacher logits cache, importance and distillation read);
    nothing is fine-tuned (no ``teachers`` entry)."""
    from nas.hf import load_teacher_as_design
    from nas.teacher import FinetuneConfig, load_teacher
    from nas.tokenization import encode, load_tokenizer

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    result = own_teacher("sst2", str(named_teacher),
                         config=FinetuneConfig(enabled=False, max_dev_examples=16,
                                               max_seq_len=32))
    assert result.model_dir != str(named_teacher) and result.steps == 0
    assert not (tmp_path / "cache" / "teachers").exists()
    assert set(result.metrics) == {"accuracy"} and result.dev_examples == 16
    config = json.loads((Path(result.model_dir) / "config.json").read_text())
    assert config["id2label"] == {"0": "negative", "1": "positive"}
    batch = encode(load_tokenizer(named_teacher), ["a fine film", "dull"], None, 32)
    with torch.no_grad():
        before = load_teacher(named_teacher, num_labels=2)(**batch).logits
        after = load_teacher(result.model_dir, num_labels=2)(**batch).logits
        design = load_teacher_as_design(result.model_dir)[1](batch).logits
    torch.testing.assert_close(after, before[:, [1, 0]])
    torch.testing.assert_close(design, before[:, [1, 0]], atol=1e-5, rtol=1e-5)
    # the teacher-output cache, as a run fills it from teacher.model_dir
    from nas.data import load_task
    from nas.distill.general import cached_teacher_logits

    rows = load_task("sst2", "dev").head(4)
    cached = cached_teacher_logits(result.model_dir,
                                   lambda: load_teacher_as_design(result.model_dir)[1], rows,
                                   load_tokenizer(result.model_dir), 32)
    with torch.no_grad():
        plain = load_teacher(named_teacher, num_labels=2)(
            **encode(load_tokenizer(named_teacher), list(rows.texts_a), None, 32)).logits
    torch.testing.assert_close(torch.tensor(cached), plain[:, [1, 0]], atol=1e-4,
                               rtol=1e-4)
    again = own_teacher("sst2", str(named_teacher),
                        config=FinetuneConfig(enabled=False, max_dev_examples=16,
                                              max_seq_len=32))
    assert again.model_dir == result.model_dir and again.from_cache
    assert again.metrics == result.metrics


def test_a_teacher_in_the_tasks_order_is_read_from_its_own_folder(tiny_teacher, tmp_path,
                                                                  monkeypatch):
    from nas.teacher import FinetuneConfig

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    result = own_teacher("sst2", str(tiny_teacher),
                         config=FinetuneConfig(enabled=False, max_dev_examples=8,
                                               max_seq_len=32),
                         labels={"negative": "LABEL_0", "positive": "LABEL_1"})
    assert result.model_dir == str(tiny_teacher)
    assert not (tmp_path / "cache").exists() or not any((tmp_path / "cache").iterdir())


def test_teacher_labels_read_numbers_as_names():
    """A data file's labels ``0``, ``1`` written unquoted in YAML are names all the same."""
    from nas.teacher import FinetuneConfig
    from recipes.common import MethodConfig

    config = MethodConfig(name="x", task="sst2", teacher_finetune=FinetuneConfig(enabled=False),
                          teacher_labels={0: "LABEL_1", 1: "LABEL_0"})  # type: ignore[dict-item]  # as YAML reads 0: LABEL_1
    assert config.teacher_labels == {"0": "LABEL_1", "1": "LABEL_0"}


def test_teacher_labels_without_enabled_false_is_refused(capsys):
    code = main(["run", str(SMOKE), "--dry-run", "--set", "teacher_labels={negative: LABEL_0, "
                 "positive: LABEL_1}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in err
    assert "set teacher_finetune.enabled=false with it, or remove teacher_labels" in err


def test_an_unnamed_teacher_is_refused_by_the_run_in_one_line(tiny_teacher, tmp_path, capsys):
    code = main(["run", str(SMOKE), "--run-dir", str(tmp_path / "run"), "--no-progress",
                 "--set", f"teacher={tiny_teacher}", "--set", "teacher_finetune.enabled=false"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert "map them with teacher_labels: {negative: LABEL_0, positive: LABEL_1}" in err[-1]


def test_the_dry_run_checks_an_own_teachers_labels_and_plans_no_fine_tune(
        tiny_teacher, named_teacher, capsys):
    argv = ["run", str(SMOKE), "--dry-run", "--set", "teacher_finetune.enabled=false"]
    assert main([*argv, "--set", f"teacher={tiny_teacher}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "teacher_labels" in err
    assert main([*argv, "--set", f"teacher={named_teacher}"]) == 0
    out = capsys.readouterr().out
    assert "its rows for the task's labels: negative 1, positive 0" in out
    assert "to fine-tune" not in out


# ---------------------------------------------------------------- whole runs

def _compress(run: Path, teacher: Path, *sets: str) -> dict:
    argv = ["run", str(SMOKE), "--run-dir", str(run), "--no-progress"]
    for item in (f"teacher={teacher}", *SMALL, *sets):
        argv += ["--set", item]
    assert main(argv) == 0
    return json.loads((run / "metrics.json").read_text())


def _log_events(run: Path) -> list[dict]:
    from nas.rundir import LOG_FILE

    return [json.loads(line) for line in (run / LOG_FILE).read_text().splitlines()]


def test_compress_runs_on_an_own_teacher_without_fine_tuning_it(tiny_teacher, tmp_path,
                                                                monkeypatch):
    """``nas run experiments/compress_smoke.yaml --set teacher=DIR --set
    teacher_finetune.enabled=false``: no fine-tune (no ``teachers`` entry), the teacher's
    dev score measured first (the run log's first stage) and its row in metrics.json."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    run = tmp_path / "run"
    metrics = _compress(run, tiny_teacher,
                        "teacher_labels={negative: LABEL_0, positive: LABEL_1}")
    assert not (tmp_path / "cache" / "teachers").exists()
    first = [e for e in _log_events(run) if e["stage"] != "start"][0]
    assert first["stage"] == "teacher" and first["fine_tuned_here"] is False
    assert first["model_dir"] == str(tiny_teacher)
    assert metrics["teacher"]["dev"] == first["metrics"]
    assert 0.0 <= first["metrics"]["accuracy"] <= 1.0
    assert metrics["teacher"]["model_dir"] == str(tiny_teacher)
    exported = json.loads((run / "export" / "config.json").read_text())
    assert exported["id2label"] == {"0": "negative", "1": "positive"}


def test_compress_runs_on_an_own_roberta_teacher_with_its_labels_reversed(tmp_path,
                                                                         monkeypatch):
    """A random RoBERTa classifier (tests/test_hf_parity.py's) whose rows are named
    ``positive``, ``negative``: re-ordered once, then sorted, searched, retrained and
    exported with the task's label order, its card naming the teacher folder."""
    from transformers import AutoModelForSequenceClassification

    from nas.tokenization import load_tokenizer
    from tests.test_hf_parity import _teacher_config, bpe_tokenizer

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    folder = bpe_tokenizer(tmp_path / "my-roberta")
    tok = load_tokenizer(folder)
    torch.manual_seed(0)
    config = _teacher_config("roberta", len(tok), tok.pad_token_id)
    config.update(dict(max_position_embeddings=514, num_labels=2,
                       id2label={0: "positive", 1: "negative"},
                       label2id={"positive": 0, "negative": 1}))
    AutoModelForSequenceClassification.from_config(config).save_pretrained(str(folder))
    run = tmp_path / "run"
    metrics = _compress(run, folder)
    cache = tmp_path / "cache"
    assert not (cache / "teachers").exists()
    copies = list((cache / "own-teachers").iterdir())
    assert len(copies) == 1 and metrics["teacher"]["model_dir"] == str(copies[0] / "model")
    exported = json.loads((run / "export" / "config.json").read_text())
    assert exported["architectures"] == ["RobertaForSequenceClassification"]
    assert exported["id2label"] == {"0": "negative", "1": "positive"}
    assert "model: my-roberta" in (run / "export" / "README.md").read_text()
