"""Every registered method's smoke experiment reproduces its recorded results exactly.

The guard for refactors: ``experiments/<method>_smoke.yaml`` carries
the metrics its seed gave when recorded (``# expected:`` lines, format in
``tests/smokes.py``); the run here (shared with the method's own end-to-end tests through
the ``smoke_runs`` fixture) must give the same numbers, to the last digit. A change that
moves them on purpose re-records the block and says why in its commit.
"""

from __future__ import annotations

import pytest
from smokes import EXPERIMENTS, headline, lookup, read_expected, smoke_file

from nas.methods import METHODS


def test_the_format_round_trips(tmp_path):
    """What ``record`` writes, ``read_expected`` reads back to the same values."""
    import json

    from smokes import record

    metrics = {"evaluation": {"examples": 9}, "teacher": {"dev": {"accuracy": 0.1 + 0.2},
                                                          "params": 7, "latency": {"ms": 1.5}},
               "random": {"runs": [{"test": {"f1": 1 / 3}, "params": 5, "flag": True}]}}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    smoke = tmp_path / "x_smoke.yaml"
    smoke.write_text("# a header\nmethod: x\n# not the header\n")
    record(tmp_path, smoke, "abc1234", width=40)
    expected = read_expected(smoke)
    assert expected == {"teacher.dev.accuracy": 0.1 + 0.2, "teacher.params": 7,
                        "random.runs.0.test.f1": 1 / 3, "random.runs.0.params": 5}
    assert expected == headline(metrics)
    assert all(lookup(metrics, k) == v for k, v in expected.items())
    assert smoke.read_text().endswith("method: x\n# not the header\n")
    record(tmp_path, smoke, "def5678")  # re-recording replaces the block
    assert smoke.read_text().count("# expected (") == 1 and read_expected(smoke) == expected
    with pytest.raises(KeyError, match="teacher.test.accuracy"):
        lookup(metrics, "teacher.test.accuracy")


def test_every_smoke_file_has_a_recorded_block():
    for path in sorted(EXPERIMENTS.glob("*_smoke.yaml")):
        assert read_expected(path), f"{path.name} records no results: see tests/smokes.py"


@pytest.mark.parametrize("method", METHODS.names())
def test_the_smoke_run_reproduces_the_recorded_metrics(method, smoke_runs):
    path = smoke_file(method)
    assert path.is_file(), (f"method {method!r} has no smoke experiment: add "
                            f"experiments/{path.name} and record its results (tests/smokes.py)")
    expected = read_expected(path)
    assert expected, f"{path.name} records no results: see tests/smokes.py"
    metrics = smoke_runs.metrics(method)
    got = {}
    for key in expected:
        try:
            got[key] = lookup(metrics, key)
        except KeyError as missing:
            got[key] = f"missing: {missing}"
    assert got == expected


@pytest.mark.parametrize("method", METHODS.names())
def test_the_smoke_run_times_its_speed_up_by_the_one_protocol(method, smoke_runs):
    """The teacher is timed in the run as an engine graph (its row names the runtime), and
    a run with a native export records the speed-up of paired, interleaved rounds, which
    the report names (docs/latency.md#speed-ups-one-timing-protocol)."""
    from nas.report import write_report
    from nas.timing import MIN_ROUNDS

    run_dir = smoke_runs(method)
    metrics = smoke_runs.metrics(method)
    assert metrics["teacher"]["runtime"] == "torch-fp32"
    assert "from_cache" not in metrics["teacher"]["latency"]
    assert metrics["teacher"]["latency"]["batch1"]["runtime"] == "torch-fp32"
    paired = metrics.get("speedup")
    ships_onnx = (run_dir / "export" / "model.onnx").is_file()
    if (run_dir / "export" / "config.json").is_file():
        # an export that ships an ONNX graph is timed in it, against the teacher exported
        # the same way, with its pairing against the PyTorch-fp32 teacher beside it
        # (mixedvocab times its own pair in PyTorch: two vocabularies, one text each)
        assert paired is not None and paired["runtime"] in ("torch-fp32", "onnx-fp32")
        shipped = paired["runtime"] == "onnx-fp32"
        assert ships_onnx or not shipped
        timings = [paired, paired["vs_torch_fp32"]] if shipped else [paired]
        for timing in timings:
            assert timing["threads"] == 1
            for key in ("batch1", "batch32"):
                assert timing[key]["protocol"] == "interleaved"
                assert timing[key]["rounds"] >= MIN_ROUNDS
                low, high = timing[key]["speedup_iqr"]
                assert low <= timing[key]["speedup"] <= high
    text, _ = write_report(run_dir)
    if paired is not None and paired["runtime"] == "onnx-fp32":
        assert "rows marked (paired), the teacher's too, are in `onnx-fp32`" in text
    else:
        assert "Runtime of every latency figure: `torch-fp32`" in text
    if paired is not None:
        assert "(paired)" in text and "interleaved rounds on the same batches" in text


@pytest.mark.parametrize("method", METHODS.names())
def test_the_smoke_run_pairs_its_exports_with_the_teacher(method, smoke_runs):
    """A run with an export and a classification report split records each shipped file
    against the teacher on the same examples (McNemar, :mod:`nas.paired`), with counts
    that add up, and the report shows it; a tagging run records none."""
    from nas.report import write_report

    run_dir = smoke_runs(method)
    metrics = smoke_runs.metrics(method)
    paired = metrics.get("paired")
    if paired is None:
        assert method == "mixedvocab" or not (run_dir / "export" / "config.json").is_file()
        return
    assert paired["split"] == metrics["evaluation"]["split"]
    assert paired["examples"] == metrics["evaluation"]["examples"]
    assert paired["points"]
    for point in paired["points"].values():
        n = point["examples"]
        assert n == paired["examples"]
        assert point["teacher_accuracy"] == paired["teacher_accuracy"]
        assert point["student_only"] + point["teacher_only"] <= n
        assert point["difference"] == pytest.approx(
            point["student_accuracy"] - point["teacher_accuracy"], abs=0.02)
        low, high = point["difference_95"]
        assert low <= point["difference"] <= high and 0 <= point["p_value"] <= 1
    text, _ = write_report(run_dir)
    assert "McNemar's exact test" in text
