"""The one timing protocol (docs/latency.md#speed-ups): interleaved rounds, the ratio and
its spread, the noisy warning, an in-run teacher, the runtime in the report and one scale
on the Pareto plot. Every timing here is injected: nothing compares measured time."""

from __future__ import annotations

import json
import logging
from types import SimpleNamespace

import pytest
import torch

from nas import measure, timing
from nas.report import write_report
from nas.rundir import RunDir
from nas.timing import MIN_ROUNDS, TORCH_FP32, ratio_result, time_pair
from recipes.common import report_reference


class FakeClock:
    """A clock that each fake model advances by its own cost, recording the call order."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: list[tuple[str, object]] = []

    def __call__(self) -> float:
        return self.now

    def model(self, name: str, seconds: float):
        def call(batch: object) -> None:
            self.calls.append((name, batch))
            self.now += seconds
        return call


def test_time_pair_interleaves_the_two_models_on_the_same_batches():
    clock = FakeClock()
    result = time_pair(clock.model("teacher", 0.010), clock.model("student", 0.002),
                       ["a", "b"], repeats=3, warmup=1, clock=clock)
    order = [name for name, _ in clock.calls]
    rounds = [order[i:i + 4] for i in range(0, len(order), 4)]
    # each round times one model over both batches, then the other; the first alternates
    assert len(rounds) == 1 + MIN_ROUNDS  # warm-up, then at least MIN_ROUNDS timed rounds
    assert [r[0] for r in rounds] == ["teacher", "student"] * 3
    assert all(r[0] == r[1] and r[2] == r[3] and r[0] != r[2] for r in rounds)
    assert [b for _, b in clock.calls[:4]] == ["a", "b", "a", "b"]
    assert result.rounds == MIN_ROUNDS and result.runtime == TORCH_FP32
    assert result.teacher.median_ms == pytest.approx(20.0)  # 2 batches x 10 ms
    assert result.student.median_ms == pytest.approx(4.0)
    assert result.speedup == pytest.approx(5.0) and not result.noisy


def test_time_pair_runs_the_repeats_asked_for_beyond_the_minimum():
    clock = FakeClock()
    result = time_pair(clock.model("teacher", 0.001), clock.model("student", 0.001), [0],
                       repeats=MIN_ROUNDS + 4, warmup=0, clock=clock)
    assert result.rounds == MIN_ROUNDS + 4 and len(clock.calls) == 2 * (MIN_ROUNDS + 4)


def test_the_ratio_and_its_spread_come_from_the_paired_rounds():
    result = ratio_result([10.0, 12.0, 9.0, 11.0, 20.0], [2.0, 3.0, 3.0, 2.0, 4.0])
    # per-round ratios 5, 4, 3, 5.5, 5: median 5, inclusive quartiles 4 and 5
    assert result.speedup == pytest.approx(5.0)
    assert (result.speedup_q1, result.speedup_q3) == pytest.approx((4.0, 5.0))
    assert result.teacher.median_ms == 11.0 and result.student.median_ms == 3.0
    record = result.to_dict()
    assert record["speedup_iqr"] == pytest.approx([4.0, 5.0])
    assert record["runtime"] == "torch-fp32" and record["protocol"] == "interleaved"
    assert record["noisy"] is False and result.warning("student") is None


def test_a_spread_larger_than_the_difference_warns():
    result = ratio_result([10.0, 14.0, 8.0, 11.0, 9.0], [10.0, 9.0, 11.0, 10.0, 12.0])
    assert result.noisy and result.to_dict()["noisy"] is True
    message = result.warning("trial3")
    assert message is not None and message.startswith("trial3: speed-up 1.00x (torch-fp32): "
                                                      "teacher 10 ms and student 10 ms a "
                                                      "call differ")
    assert "(interquartile ranges 2 + 1 ms)" in message
    # rounds of 10 calls each are reported per call, as metrics.json records them
    per_call = result.per_call(10).warning("trial3")
    assert per_call is not None and "teacher 1 ms and student 1 ms a call" in per_call
    assert "(interquartile ranges 0.2 + 0.1 ms)" in per_call



def test_a_wide_ratio_range_far_from_1_is_not_noisy():
    """A 100x student whose own timings jitter: its ratio's range is wide, yet the two
    models are plainly apart (the spread is ms, the difference hundreds of ms)."""
    result = ratio_result([390.0, 391.0, 389.0, 390.0, 390.0], [1.5, 6.0, 2.2, 5.9, 1.58])
    # ratios 260, 65, 177, 66, 247: a range wider than the speed-up's distance from 1
    assert result.speedup_q3 - result.speedup_q1 > result.speedup - 1
    assert not result.noisy and result.warning("searched") is None


def test_paired_speedups_logs_and_records_a_noisy_batch(monkeypatch, caplog):
    noisy = ratio_result([10.0, 14.0, 8.0, 11.0, 9.0], [10.0, 9.0, 11.0, 10.0, 12.0])
    clean = ratio_result([10.0] * 5, [2.0] * 5)
    given = {1: noisy, 32: clean}
    seen: dict[int, int] = {}
    threads: list[int] = []

    def fake_pair(t, s, batches, repeats, **_):
        seen[batches[0]] = len(batches)
        threads.append(torch.get_num_threads())
        return given[batches[0]]

    monkeypatch.setattr(timing, "time_pair", fake_pair)
    before = torch.get_num_threads()
    with caplog.at_level(logging.WARNING, logger="nas.measure"):
        out = measure.paired_speedups(print, print, {1: 1, 32: 32}, 5, what="searched")
    assert out["noisy"] is True and out["runtime"] == "torch-fp32"
    assert out["batch1"]["noisy"] and not out["batch32"]["noisy"]
    assert out["batch32"]["speedup"] == pytest.approx(5.0)
    # ten calls a round at batch 1, the record per call; one thread, restored after
    assert seen == {1: measure.CALLS_PER_ROUND[1], 32: 1}
    assert out["batch1"]["teacher_ms"] == pytest.approx(noisy.teacher.median_ms / seen[1])
    assert out["batch32"]["student_ms"] == pytest.approx(2.0)
    assert threads == [1, 1] and out["threads"] == 1 and torch.get_num_threads() == before
    assert any("searched vs teacher at batch 1" in r.getMessage() for r in caplog.records)


def test_a_cached_teacher_row_never_gives_the_latency(tmp_path, monkeypatch):
    """The teacher-costs cache keeps scores, parameters and FLOPs; a latency in it (as
    rows written before the one protocol held) is dropped and the teacher timed again."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    stale = {"batch1": {"median_ms": 999.0}, "batch32": {"median_ms": 9999.0}}
    monkeypatch.setattr(measure, "teacher_costs", lambda *a, **k: {
        "dev": {"accuracy": 0.9}, "params": 7, "flops": 11, "latency": stale})
    timed = iter([{"batch1": {"median_ms": 1.0}}, {"batch1": {"median_ms": 2.0}}])
    monkeypatch.setattr(measure, "teacher_latency", lambda model, batches, repeats: next(timed))
    teacher = SimpleNamespace(model_dir="teacher", key="k", metrics={"accuracy": 0.9})
    report = SimpleNamespace(fingerprint="report-fp")

    def row(folder: str) -> dict:
        return measure.cached_teacher_costs(
            RunDir(tmp_path / folder, {"name": "x"}), teacher, 2, report_split="test",
            report=report, tokenizer=None, max_seq_len=16, latency_batches={1: {}},
            latency_repeats=2, engine_teacher=lambda: None)

    first, second = row("run1"), row("run2")
    assert "from_cache" not in first and "from_cache" in second  # the second reads it
    assert first["latency"] == {"batch1": {"median_ms": 1.0}}
    assert second["latency"] == {"batch1": {"median_ms": 2.0}}  # timed in its own run
    assert second["runtime"] == "torch-fp32" and second["params"] == 7
    cached = json.loads(next((tmp_path / "cache" / "teacher-costs").glob("*.json")).read_text())
    assert cached["latency"] == stale  # the stale row is still there, and still ignored


def _model(ms: float, params: int) -> dict:
    latency = {f"batch{b}": {"median_ms": ms * b, "seq_len": 20} for b in (1, 32)}
    return {"dev": {"accuracy": 0.8}, "params": params, "flops": 1000, "latency": latency}


def _paired(speedup: float, noisy: bool = False) -> dict:
    return {"runtime": "torch-fp32", "protocol": "interleaved", "rounds": 5,
            "teacher_ms": 10.0, "teacher_iqr_ms": 0.5, "student_ms": 10.0 / speedup,
            "student_iqr_ms": 0.1, "speedup": speedup,
            "speedup_iqr": [speedup - 0.1, speedup + 0.1], "noisy": noisy}


def test_the_report_names_the_runtime_and_gives_the_paired_speed_up(tmp_path):
    run = RunDir(tmp_path / "run", {"name": "x"})
    run.save_json("metrics.json", {
        "metric": "accuracy", "teacher": {**_model(10.0, 20_000_000), "runtime": "torch-fp32"},
        "searched": _model(4.0, 4_000_000),  # its own median says 2.5x; the pair says 3.1x
        "speedup": {"runtime": "torch-fp32", "protocol": "interleaved", "noisy": True,
                    "batch1": _paired(3.1), "batch32": _paired(1.02, noisy=True)}})
    text, _ = write_report(tmp_path / "run")
    # both rows show the paired medians (teacher 10 ms, searched 10 / 3.1 ms)
    assert "| 10.0 | 10.0 | 1.0× | 1.0× |" in text
    assert "| 3.23 | 9.80 | 5.0× | 3.1× (paired) |" in text
    assert "Runtime of every latency figure: `torch-fp32` (PyTorch, float32, eager)" in text
    assert ("Speed-up of searched over the teacher at batch 1 (paired: 5 interleaved rounds "
            "on the same batches): 3.10× against the teacher in the same runtime "
            "`torch-fp32` (interquartile range 3.00–3.20") in text
    assert "the teacher in PyTorch fp32: the same runtime here" in text
    assert "Warning: at batch 32 the timings' spread (teacher's and student's" in text
    assert "Warning: at batch 1" not in text


def test_the_report_marks_runs_timed_under_the_previous_protocol(tmp_path):
    run = RunDir(tmp_path / "run", {"name": "x"})
    run.save_json("metrics.json", {"metric": "accuracy", "teacher": _model(10.0, 20_000_000),
                                   "searched": _model(4.0, 4_000_000)})
    text, _ = write_report(tmp_path / "run")
    assert "Timed under the previous protocol: the teacher as a `transformers` model" in text
    assert "| 5.0× | 2.5× |" in text


@pytest.mark.parametrize(("search", "expected"), [
    ({"latency_scale": "predicted", "teacher_latency_ms": 3.5}, 3.5),  # the trials' scale
    ({"latency_scale": "measured", "teacher_latency_ms": 10.0}, 10.0),
    ({}, 10.0),  # a study that records no scale timed its trials
    ({"latency_scale": "predicted"}, None),  # predicted trials, no predicted teacher: none
    # trials timed as int8 graphs: the teacher's int8 graph, never its torch timing
    ({"latency_scale": "measured", "latency_runtime": "onnx-int8", "teacher_latency_ms": 4.0},
     4.0),
    ({"latency_scale": "measured", "latency_runtime": "onnx-int8"}, None),
])
def test_the_pareto_plot_draws_the_teacher_on_the_trials_scale(search, expected):
    metrics = {"metric": "accuracy", "teacher": _model(10.0, 20_000_000), "search": search}
    point = report_reference(metrics)["teacher"]
    assert point.get("latency_ms") == expected
    assert point["params"] == 20_000_000 and point["val_accuracy"] == 0.8
