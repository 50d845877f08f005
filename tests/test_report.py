"""``nas report`` on a hand-written metrics.json: composite metrics (MRPC's accuracy+f1)."""

from __future__ import annotations

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
