"""``nas report`` on a hand-written metrics.json: composite metrics (MRPC's accuracy+f1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nas.report import write_report
from nas.rundir import RunDir
from nas.teacher import metric_score


def _model(acc: float, f1: float, params: int, ms: float) -> dict:
    latency = {f"batch{b}": {"median_ms": ms * b, "seq_len": 40} for b in (1, 32)}
    return {"dev": {"accuracy": acc, "f1": f1}, "params": params, "flops": 2_000_000,
            "latency": latency}


def test_score_is_the_mean_of_a_composite_metric():
    assert metric_score({"accuracy": 0.8, "f1": 0.9}, "accuracy+f1") == pytest.approx(0.85)
    assert metric_score({"accuracy": 0.8}, "accuracy") == 0.8


def test_report_shows_each_part_of_a_composite_metric(tmp_path):
    run = RunDir(tmp_path / "run", {"name": "x"})
    teacher = _model(0.80, 0.86, 20_000_000, 10.0)
    runs = [_model(0.70, 0.80, 5_000_000, 2.0), _model(0.60, 0.70, 5_000_000, 2.0)]
    run.save_json("metrics.json", {
        "metric": "accuracy+f1", "teacher": teacher,
        "searched": _model(0.75, 0.85, 4_000_000, 1.0),
        "random": {"runs": runs, "metric": "accuracy+f1", "mean": 0.70, "std": 0.07}})
    text, _ = write_report(tmp_path / "run")
    assert "dev accuracy / f1 (%)" in text
    assert "| searched | 75.00 / 85.00 | 4.00M |" in text and "| 5.0× | 10.0× |" in text
    assert "random baseline (mean of accuracy and f1), dev: 70.00 ± 7.00" in text
    assert "searched − random mean: +10.00 points" in text


def test_report_uses_the_report_split_and_names_its_file(tmp_path):
    run = RunDir(tmp_path / "run", {"name": "x"})
    teacher = {**_model(0.93, 0.0, 20_000_000, 10.0), "test": {"accuracy": 0.90}}
    student = {**_model(0.95, 0.0, 4_000_000, 1.0), "test": {"accuracy": 0.82}}
    run.save_json("metrics.json", {
        "metric": "accuracy", "teacher": teacher, "searched": student,
        "evaluation": {"split": "test", "file": "sst2/test_sentences.tsv", "examples": 1821,
                       "latency_tokens": 22}})
    text, _ = write_report(tmp_path / "run")
    assert "Scores on `test` (sst2/test_sentences.tsv, 1821 examples)" in text
    assert "| searched | 82.00 |" in text and "| teacher | 90.00 |" in text
    assert "closest to its median length of 22 tokens" in text


def _evaluated(tmp_path, searched_acc: float, teacher_acc: float = 0.9, **evaluation):
    import tempfile

    folder = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"
    run = RunDir(folder, {"name": "x"})
    teacher = {**_model(teacher_acc, 0.0, 20_000_000, 10.0), "test": {"accuracy": teacher_acc}}
    student = {**_model(0.5, 0.0, 100_000, 0.05), "test": {"accuracy": searched_acc}}
    run.save_json("metrics.json", {
        "metric": "accuracy", "teacher": teacher, "searched": student,
        "evaluation": {"split": "test", "file": "mine.csv", "examples": 300, **evaluation}})
    return write_report(folder)[0]


def test_report_flags_a_model_near_chance_or_the_majority_answer(tmp_path):
    """Once, a student at 36% on 3 classes was reported only as "194.8× faster"."""
    three = {"classes": 3, "majority": {"label": "neutral", "share": 0.35}}
    text = _evaluated(tmp_path, 0.345, **three)
    assert ("Warning: searched scores 34.50% accuracy on `test`, within 2 points of chance "
            "(33.33%, 3 classes) and within 2 points of the majority answer (35.00%, always "
            "'neutral'): it has not learned the task") in text
    assert "Warning: teacher" not in text
    assert "searched scores 36.00% accuracy on `test`, within 2 points of the majority" in \
        _evaluated(tmp_path, 0.36, **three)  # 2.67 points above chance, 1 above the majority
    # always answering the majority class beats it: flagged as below that answer
    text = _evaluated(tmp_path, 0.55, **{"classes": 2,
                                         "majority": {"label": "pos", "share": 0.8}})
    assert ("searched scores 55.00% accuracy on `test`, below the majority answer (80.00%, "
            "always 'pos')") in text
    # 2 points above both is a model that learned something: no warning
    assert "Warning" not in _evaluated(tmp_path, 0.38, **three)
    # old runs recorded no class counts: no flag, and no failure
    assert "Warning" not in _evaluated(tmp_path, 0.36)
