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
    GRAPH_FEATURES,
    LatencyError,
    LatencyModel,
    LatencyTable,
    MachineMismatchWarning,
    Setting,
    calibrate,
    calibrate_graph,
    calibration_archs,
    default_table_path,
    graph_features,
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


# -- the runtime a model ships in: ONNX Runtime graphs ---------------------------------------

INT8_TINY = dict(archs=4, held_out=2, repeats=2, budget_s=0.05)


@pytest.fixture(scope="module")
def bert_subnet():
    return get_space("bert-subnet", **small_config("bert-subnet"))


@pytest.fixture(scope="module")
def int8_table(bert_subnet):
    return calibrate_graph(bert_subnet, SETTING, "onnx-int8", **INT8_TINY)


def test_an_int8_calibration_fits_exported_children_and_checks_held_out_ones(bert_subnet,
                                                                             int8_table):
    """The children are exported to int8 ONNX and timed; the first ``archs`` fit the linear
    model, the rest measure its MAPE, which the table keeps with the calibration's time."""
    assert int8_table.runtime == "onnx-int8" and not int8_table.fits and not int8_table.ops
    fit = int8_table.graph_fits[space_key(bert_subnet)][SETTING.key]
    picked = [a.id for a in calibration_archs(bert_subnet, 6)]
    assert fit.archs == picked[:4] and fit.held_out == picked[4:]
    assert len(fit.coefs) == len(GRAPH_FEATURES) and min(fit.coefs) >= 0
    assert all(t > 0 for t in fit.measured_ms + fit.held_out_ms) and fit.calibration_s > 0
    held = [bert_subnet.validate(a) for a in calibration_archs(bert_subnet, 6)[4:]]
    assert fit.held_out_predicted_ms == [fit(graph_features(bert_subnet, a, SETTING))
                                         for a in held]
    assert fit.mape == pytest.approx(sum(abs(p - y) / y for p, y in zip(
        fit.held_out_predicted_ms, fit.held_out_ms, strict=True)) / 2)


def test_an_onnx_table_round_trips_and_predicts_by_its_fit(bert_subnet, int8_table, tmp_path):
    path = tmp_path / "int8.json"
    int8_table.save(path)
    loaded = LatencyModel.load(path)
    assert loaded.table.runtime == "onnx-int8"
    fit = loaded.table.graph_fits[space_key(bert_subnet)][SETTING.key]
    assert fit == int8_table.graph_fits[space_key(bert_subnet)][SETTING.key]
    arch = bert_subnet.default()
    predictor = loaded.predictor(bert_subnet, SETTING.batch_size, SETTING.seq_len)
    assert predictor(arch) == fit(graph_features(bert_subnet, arch, SETTING))
    source = latency_source(predictor)
    assert source is not None and "(runtime onnx-int8, clock cpu, calibrated " in source
    assert f"held-out MAPE {100 * fit.mape:.1f} % on 2 children" in source
    assert "nas latency calibrate" not in source  # it times torch only
    with pytest.raises(LatencyError, match=r"no latency calibration on onnx-int8 for space "
                                           r"'adabert'.*a run with latency runtime onnx-int8"):
        loaded.predictor(get_space("adabert", **small_config("adabert")), 2, 8)


def test_tables_of_different_runtimes_are_cached_apart(bert_subnet, int8_table, tmp_path,
                                                       monkeypatch):
    """A torch table and an onnx-int8 one are two files; a run asking for one never reads
    the other (an onnx-int8 table for the space is not a torch fit)."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path))
    paths = {r: default_table_path(runtime=r) for r in ("torch", "onnx", "onnx-int8")}
    assert len(set(paths.values())) == 3 and paths["torch"].name.endswith("cores-cpu.json")
    assert paths["onnx-int8"].name.endswith("-cpu-onnx-int8.json")
    int8_table.save(paths["onnx-int8"])
    predictor = space_predictor(bert_subnet, batch_size=2, seq_len=8, runtime="onnx-int8")
    assert predictor.model.table.runtime == "onnx-int8"
    assert not paths["torch"].exists() and not paths["onnx"].exists()
    with pytest.raises(LatencyError, match="unknown latency runtime 'tflite'"):
        default_table_path(runtime="tflite")


def test_a_measured_int8_latency_times_the_childs_int8_graph(bert_subnet):
    """``latency: {source: measured, runtime: onnx-int8}``: a trained candidate's latency
    is its int8 ONNX graph's on ONNX Runtime, recorded under that runtime's name."""
    from evaluators.training import measured_costs
    from nas.builder import build_child
    from nas.cost import batch_for

    arch = bert_subnet.default()
    child = build_child(bert_subnet, arch)
    costs = measured_costs(bert_subnet, arch, child, 8, {1: batch_for(bert_subnet, 1, 8)}, 2,
                           "onnx-int8")
    row = costs["latency"]["batch1"]
    assert row["runtime"] == "onnx-int8" and row["threads"] == 1 and row["repeats"] == 2
    assert (row["batch_size"], row["seq_len"]) == (1, 8) and costs["latency_ms"] > 0
    torch_row = measured_costs(bert_subnet, arch, child, 8, {1: batch_for(bert_subnet, 1, 8)},
                               2)["latency"]["batch1"]
    assert torch_row["runtime"] == "torch-fp32"


def test_latency_show_lists_an_onnx_tables_fits(int8_table, bert_subnet, tmp_path, capsys):
    path = tmp_path / "int8.json"
    int8_table.save(path)
    capsys.readouterr()
    assert main(["latency", "show", "--table", str(path)]) == 0
    out = capsys.readouterr().out
    fit = int8_table.graph_fits[space_key(bert_subnet)][SETTING.key]
    assert "runtime onnx-int8, clock cpu" in out
    assert f"  {space_key(bert_subnet)} {SETTING.key}: {fit.describe()}" in out
