"""The latency model (14f4109): structure and determinism of a calibration, the table
file, the warnings and errors, the evaluators' hook and the commands. Accuracy is a
benchmark (``benchmarks/latency_model.py``), not a test: timings here use a tiny budget
on the small configurations."""

from __future__ import annotations

import json
import logging
import math
import re

import pytest

from evaluators.base import EvalResult, Evaluator, Objective
from evaluators.penalty import PenaltyEvaluator
from nas.cli import main
from nas.latency import (
    DEFAULT_CLOCK,
    LatencyError,
    LatencyModel,
    LatencyTable,
    MachineMismatchWarning,
    Setting,
    calibrate,
    calibration_archs,
    default_table_path,
    latency_source,
    machine,
    op_calls,
    op_keys,
    space_key,
    space_predictor,
)
from nas.space import get_space, small_config

SETTING = Setting(batch_size=2, seq_len=8)
TINY = dict(archs=3, pool=6, repeats=2, end_to_end=2)


@pytest.fixture(scope="module")
def spaces():
    return [get_space(n, **small_config(n)) for n in ("adabert", "mobilebert-grid")]


@pytest.fixture(scope="module")
def table(spaces):
    return calibrate(spaces, [SETTING], **TINY)


def test_a_calibration_records_the_machine_op_times_and_a_fit_per_space(spaces, table):
    here = machine()
    assert {k: table.machine[k] for k in here} == here and table.machine["threads"] == [1]
    times = table.ops[SETTING.key]
    for space in spaces:
        assert set(op_keys(space, TINY["pool"])) <= set(times)
        fit = table.fits[space_key(space)][SETTING.key]
        assert len(fit.archs) == len(fit.measured_ms) == TINY["archs"]
        assert min(fit.scale, fit.per_call_ms, fit.const_ms) >= 0
        assert all(t > 0 for t in fit.measured_ms)
    assert all(t > 0 and math.isfinite(t) for t in times.values())


def test_the_calibration_children_and_op_keys_are_seeded(spaces, table):
    for space in spaces:
        fit = table.fits[space_key(space)][SETTING.key]
        assert [a.id for a in calibration_archs(space, TINY["archs"], seed=0)] == fit.archs
        assert list(op_keys(space, TINY["pool"], seed=0)) == list(op_keys(space, TINY["pool"]))
        assert calibration_archs(space, 3, seed=1) != calibration_archs(space, 3, seed=0)


def test_predictions_sum_the_op_times_through_the_fit(spaces, table):
    model = LatencyModel(table)
    for space in spaces:
        arch = space.sample(7)
        p = model.explain(space, arch, SETTING.batch_size, SETTING.seq_len)
        fit = table.fits[space_key(space)][SETTING.key]
        times = table.ops[SETTING.key]
        calls = op_calls(space, arch)
        known = [times[c.key] for c in calls if c.key in times]
        assert p.calls == len(calls) and p.estimated_calls == len(calls) - len(known)
        if not p.estimated_calls:
            assert p.ops_ms == pytest.approx(sum(known))
        assert p.latency_ms == pytest.approx(fit(p.ops_ms, p.calls)) and p.latency_ms > 0
        assert model.predict(space, arch, 2, 8) == p.latency_ms  # deterministic


def test_untimed_op_calls_are_estimated_from_similar_ones(spaces, table):
    space = spaces[1]
    arch = space.sample(3)
    times = dict(table.ops[SETTING.key])
    dropped = {c.key for c in op_calls(space, arch)[:5]}
    partial = LatencyTable(table.machine, table.clock,
                           {SETTING.key: {k: t for k, t in times.items() if k not in dropped}},
                           table.fits)
    p = LatencyModel(partial).explain(space, arch, 2, 8)
    assert p.estimated_calls >= len(dropped) and p.latency_ms > 0


def test_the_table_file_round_trips(spaces, table, tmp_path):
    path = tmp_path / "t.json"
    table.save(path)
    loaded = LatencyModel.load(path)
    for space in spaces:
        arch = space.sample(1)
        # equal up to the order of a float sum (one ulp has been seen)
        assert loaded.predict(space, arch, 2, 8) == pytest.approx(
            LatencyModel(table).predict(space, arch, 2, 8), rel=1e-12)


def test_a_table_from_another_machine_warns_in_one_line(table, tmp_path):
    path = tmp_path / "other.json"
    LatencyTable({**table.machine, "cpu": "Some Other CPU", "cores": 64}, table.clock,
                 table.ops, table.fits).save(path)
    with pytest.warns(MachineMismatchWarning, match="Some Other CPU") as record:
        LatencyModel.load(path)
    assert "\n" not in str(record[0].message)


def test_missing_broken_or_uncalibrated_tables_are_one_line_errors(spaces, table, tmp_path):
    with pytest.raises(LatencyError, match="nas latency calibrate"):
        LatencyModel.load(tmp_path / "none.json")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(LatencyError, match="broken"):
        LatencyModel.load(broken)
    model = LatencyModel(table)
    with pytest.raises(LatencyError, match="--batch-sizes 4 --seq-lens 8"):
        model.predict(spaces[0], None, batch_size=4, seq_len=8)
    with pytest.raises(LatencyError, match="no latency calibration for space 'adabert'"):
        model.predict(get_space("adabert"))  # another configuration: other widths
    with pytest.raises(LatencyError, match="positive integer"):
        Setting(0, 8)


class Trained(Evaluator):
    """An inner evaluator that counts its calls and 'measures' a latency."""

    objectives = (Objective("accuracy", "maximize"),)

    def __init__(self):
        self.calls = 0

    def evaluate(self, arch, trial=None):
        self.calls += 1
        return EvalResult((0.9,), costs={"latency_ms": 12.5})


def test_the_penalty_evaluator_takes_predicted_latency_as_a_constraint(spaces, table):
    space = spaces[0]
    predict = LatencyModel(table).predictor(space, batch_size=2, seq_len=8)
    small, large = sorted((space.sample(i) for i in range(6)), key=predict)[::5]
    ceiling = (predict(small) + predict(large)) / 2
    inner = Trained()
    penalty = PenaltyEvaluator(inner, space, seq_len=8, max_latency_ms=ceiling,
                               latency_fn=predict)
    over = penalty.evaluate(large)
    assert not over.ok and "latency_ms" in over.reason and inner.calls == 0
    assert over.costs["latency_ms_predicted"] == pytest.approx(predict(large))
    ok = penalty.evaluate(small)
    assert ok.ok and inner.calls == 1
    # the prediction and the inner evaluator's measurement are recorded side by side
    assert ok.costs["latency_ms_predicted"] == pytest.approx(predict(small))
    assert ok.costs["latency_ms"] == 12.5
    objective = PenaltyEvaluator(Trained(), space, seq_len=8, extra_objectives=["latency_ms"],
                                 latency_fn=predict)
    assert objective.evaluate(small).values[1] == pytest.approx(predict(small))


def test_a_predictor_for_an_uncalibrated_setting_fails_at_once(spaces, table):
    with pytest.raises(LatencyError):
        LatencyModel(table).predictor(spaces[0], batch_size=64, seq_len=8)


SMALL_ADABERT = ["-c", "vocab_size=500", "-c", "hidden=16", "-c", "max_depth=4"]


def test_latency_commands(tmp_path, capsys):
    path = str(tmp_path / "table.json")
    code = main(["latency", "calibrate", "--spaces", "adabert", *SMALL_ADABERT,
                 "--batch-sizes", "2", "--seq-lens", "8", "--archs", "2", "--pool", "3",
                 "--repeats", "2", "--end-to-end", "2", "--table", path, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["table"] == path and out["settings"] == [SETTING.key]
    code = main(["cost", "adabert", *SMALL_ADABERT, "--seq-len", "8", "--batch-size", "2",
                 "--latency-model", "--latency-table", path, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["latency_predicted"]["ms"] > 0
    code = main(["cost", "adabert", *SMALL_ADABERT, "--seq-len", "8", "--batch-size", "2",
                 "--latency-model", "--latency-table", path])
    out, err = capsys.readouterr()
    assert code == 0 and "predicted" in out and "ms" in out
    code = main(["cost", "adabert", *SMALL_ADABERT, "--seq-len", "9", "--batch-size", "2",
                 "--latency-model", "--latency-table", path])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "nas latency calibrate" in err
    code = main(["latency", "show", "--table", path])
    out = capsys.readouterr().out
    assert code == 0 and SETTING.key in out and "adabert@" in out
    code = main(["latency", "calibrate", "--spaces", "adabert", "--archs", "0", "--table", path])
    assert code == 2 and "--archs" in capsys.readouterr().err


def test_a_space_without_a_table_is_calibrated_once_and_cached(spaces, tmp_path, monkeypatch):
    """What ``constraints.max_latency_ms`` uses: this machine's table in the
    cache; a space it lacks is calibrated, saved and logged with its time, and found in
    the cache the next time."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path))
    notes: list[str] = []
    first = space_predictor(spaces[0], seq_len=8, log=notes.append, calibration=TINY)
    assert len(notes) == 1 and "no table for space 'adabert'" in notes[0]
    assert " s and cached in " in notes[0] and default_table_path().is_file()
    again = space_predictor(spaces[0], seq_len=8, log=notes.append, calibration=TINY)
    assert "(cached; clock cpu, calibrated " in notes[1]
    arch = spaces[0].sample(1)
    assert first(arch) == again(arch) == LatencyModel.load().predict(spaces[0], arch,
                                                                      seq_len=8)
    space_predictor(spaces[1], seq_len=8, log=notes.append, calibration=TINY)  # added
    assert "no table for space 'mobilebert-grid'" in notes[2]
    assert set(LatencyTable.load(default_table_path()).fits) == {space_key(s) for s in spaces}


def test_the_cpu_clock_times_one_thread(spaces, tmp_path):
    table = calibrate(spaces[:1], [SETTING], clock="cpu", **TINY)
    assert table.clock == "cpu" and table.ops[SETTING.key]
    table.save(tmp_path / "cpu.json")
    assert LatencyModel.load(tmp_path / "cpu.json").table.clock == "cpu"
    assert default_table_path("cpu").name.endswith("cores-cpu.json")
    with pytest.raises(LatencyError, match="one thread"):
        calibrate(spaces[:1], [Setting(2, 8, threads=2)], clock="cpu", **TINY)
    with pytest.raises(LatencyError, match="unknown latency clock"):
        calibrate(spaces[:1], [SETTING], clock="gpu", **TINY)


def test_a_table_records_its_clock_date_and_noise(spaces, table, tmp_path):
    """The runs' clock is the CPU clock; a table says when it was calibrated and how much
    its repeated timings spread, in the file too."""
    assert DEFAULT_CLOCK == "cpu" and table.clock == "cpu"
    assert default_table_path().name.endswith("cores-cpu.json")
    assert re.fullmatch(r"20\d\d-\d\d-\d\dT\d\d:\d\d:\d\dZ", table.calibrated or "")
    assert set(table.noise) == {SETTING.key} and table.noise[SETTING.key] >= 0
    path = tmp_path / "t.json"
    table.save(path)
    data = json.loads(path.read_text())
    assert (data["clock"], data["calibrated"], data["noise"]) == (
        "cpu", table.calibrated, table.noise)
    loaded = LatencyTable.load(path)
    assert (loaded.calibrated, loaded.noise) == (table.calibrated, table.noise)
    assert loaded.describe(SETTING).startswith(
        f"clock cpu, calibrated {table.calibrated}, noise {100 * table.noise[SETTING.key]:.1f} %")


def test_a_table_without_clock_date_or_noise_still_loads(spaces, table, tmp_path):
    path = tmp_path / "old.json"
    table.save(path)
    data = json.loads(path.read_text())
    for key in ("clock", "calibrated", "noise"):
        del data[key]
    path.write_text(json.dumps(data))
    old = LatencyModel.load(path)
    assert old.table.clock == "unknown" and old.table.calibrated is None
    assert old.table.describe(SETTING).startswith(
        "clock unknown, calibrated unknown, noise unknown")
    arch = spaces[0].sample(1)
    assert old.predict(spaces[0], arch, 2, 8) == pytest.approx(
        LatencyModel(table).predict(spaces[0], arch, 2, 8), rel=1e-12)
    source = old.predictor(spaces[0], 2, 8).source()
    assert "clock unknown" in source and "--clock cpu" in source


def test_a_noisy_calibration_is_logged_and_kept(spaces, monkeypatch, caplog):
    """Never refused (CI runs on busy machines): a warning, and the noise in the table."""
    monkeypatch.setattr("nas.latency.NOISY_SPREAD", -1.0)  # every calibration is noisy
    with caplog.at_level(logging.WARNING, logger="nas.latency"):
        noisy = calibrate(spaces[:1], [SETTING], **TINY)
    [warning] = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "is noisy" in warning and "batch 2, sequence length 8" in warning
    assert SETTING.key in noisy.fits[space_key(spaces[0])] and SETTING.key in noisy.noise
    assert "(noisy: calibrated on a busy machine?)" in noisy.describe(SETTING)


def test_a_predictor_names_its_table_and_how_to_recalibrate(spaces, table, tmp_path,
                                                             monkeypatch):
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path))
    path = default_table_path()
    table.save(path)
    predictor = LatencyModel.load().predictor(spaces[0], 2, 8)
    assert predictor(spaces[0].default()) > 0
    source = latency_source(predictor)
    assert source is not None and source.startswith(f"latency predicted by latency table {path} "
                                                     f"(clock cpu, calibrated {table.calibrated}")
    assert "`nas cache clear latency`" in source
    assert ("`nas latency calibrate --table " + str(path) + " --spaces adabert --batch-sizes 2 "
            "--seq-lens 8 --threads 1 --clock cpu`") in source
    assert latency_source(lambda arch: 1.0) is None
