"""Compress the teacher: ``method: compress`` end to end on its smoke run (sort,
search with inherited-kd, final retrain from the inherited weights, export, nas predict)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nas.cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_the_smoke_sorts_searches_retrains_and_exports(smoke_runs, capsys):
    run = smoke_runs("compress")
    metrics = smoke_runs.metrics("compress")
    assert metrics["sort"]["method"] == "activation" and metrics["sort"]["samples"] == 64
    search, final = metrics["search"], metrics["final"]
    assert search["searcher"] == "random" and search["evaluations"] == 3
    assert search["objectives"] == ["val_accuracy", "latency_ms"]
    assert final[0]["trial"] == search["chosen"][0] and len(final[0]["seeds"]) == 1
    assert metrics["searched"]["arch_id"] == final[0]["arch_id"]
    # every trial started from the sorted teacher's slice: its inherited score is step 0
    for number in range(3):
        result = json.loads((run / "trials" / str(number) / "result.json").read_text())["result"]
        assert result["intermediate"][0] == [0, result["metrics"]["inherited_val_accuracy"]]
        assert len(result["intermediate"]) == 2  # then one epoch of 4 distillation steps
        # the latency objective is the latency model's prediction (latency: predicted)
        assert result["values"][1] == result["costs"]["latency_ms_predicted"]

    # the report's latency column is that objective, not the measured latency
    from nas.units import human

    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    report = capsys.readouterr().out
    assert "latency ms (objective)" in report
    assert f"| {human(result['values'][1], small='.4g')} |" in report

    config = json.loads((run / "export" / "config.json").read_text())
    assert (config.get("nas_export") or config["architecture"])  # stock or remote code
    capsys.readouterr()
    assert main(["predict", str(run / "export"), "a gripping, funny film"]) == 0
    label = capsys.readouterr().out.split("\t")[0]
    labels = config.get("labels") or list(config["id2label"].values())
    assert label in labels


def test_the_final_retrain_starts_from_the_inherited_weights():
    """The final retrain is inherited-kd with retrain:'s budget (not the distilled retrain
    from scratch of method search), with the search evaluator's hidden-state weight."""
    from nas.config import from_dict
    from recipes.compress import Compress, CompressConfig
    from recipes.search import Search

    class Ctx:
        cfg = from_dict(CompressConfig, {"name": "x", "task": "sst2", "evaluator": {
            "name": "inherited-kd", "settings": {"max_steps": 3, "hidden_weight": 0.5}}},
            "test")

    assert Compress().final_evaluator(Ctx()) == ("inherited-kd", {"hidden_weight": 0.5})
    assert Search().final_evaluator(Ctx())[0] == "distilled-retrain"
    assert Compress.export_format == "hf" and Search.export_format == "native"


#: the smoke file's settings changed for the tiny teacher (tests/conftest.py)
_TINY = ("teacher_finetune.max_train_examples=32", "teacher_finetune.max_dev_examples=32",
         "data.max_train_examples=80", "importance.samples=16")


def _tiny_compress(run, teacher, *sets: str) -> int:
    """``nas run`` of the smoke file with the tiny teacher, a small training subset and
    ``sets``. Dev and the report sample are the smoke run's, whose overlap check with
    train is then cached."""
    argv = ["run", str(ROOT / "experiments" / "compress_smoke.yaml"), "--run-dir", str(run),
            "--no-progress"]
    for item in (*_TINY, f"teacher={teacher}", *sets):
        argv += ["--set", item]
    return main(argv)


def test_truncation_is_the_baseline_searcher_of_compress(tiny_teacher, tmp_path):
    """``searcher: truncation`` (the uniform-truncation arm of docs/compress.md): the sorted
    teacher's first k whole layers, k = 1..L, queued as the study's trials, scored by the
    same evaluator and retrained by the same final stage as any searcher's points."""
    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=truncation",
                          "evaluator.settings.max_steps=1", "final={select: all, seeds: 1}") == 0
    metrics = json.loads((run / "metrics.json").read_text())
    trials = sorted((json.loads(p.read_text()) for p in (run / "trials").glob("*/result.json")),
                    key=lambda t: sum(v == 1 for k, v in t["arch"].items()
                                      if k.endswith("_keep")))
    layers = sum(name.endswith("_keep") for name in trials[0]["arch"])  # the tiny teacher's 2
    assert metrics["search"]["searcher"] == "truncation"
    assert metrics["search"]["evaluations"] == len(trials) == layers
    for k, trial in enumerate(trials, start=1):
        arch = trial["arch"]
        assert [arch[f"L{i}_keep"] for i in range(layers)] == [1] * k + [0] * (layers - k)
        assert all(arch[f"L{i}_heads"] == "1" and arch[f"L{i}_ffn"] == "1" for i in range(k))
    # final.select all: every truncation retrained, in trial order
    assert [f["trial"] for f in metrics["final"]] == list(range(layers))
    assert (run / "export" / "config.json").is_file()


def test_seed_truncations_start_a_searchers_study_with_the_first_k_layers(tiny_teacher,
                                                                         tmp_path):
    """``seed_truncations: true``: the study of a multi-trial searcher holds the
    truncations as its first trials (tagged ``first-k``), then the searcher's own."""
    import optuna

    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=random", "n_trials=3",
                          "seed_truncations=true", "evaluator.settings.max_steps=1") == 0
    study = optuna.load_study(study_name="compress_smoke-random",
                              storage=optuna.storages.JournalStorage(
                                  optuna.storages.journal.JournalFileBackend(
                                      str(run / "study.journal"))))
    trials = sorted(study.trials, key=lambda t: t.number)
    assert len(trials) == 3  # the tiny teacher's two truncations count in n_trials
    assert [t.user_attrs.get("seed") for t in trials] == ["first-1", "first-2", None]
    for k, trial in enumerate(trials[:2], start=1):
        arch = json.loads((run / "trials" / str(trial.number) / "result.json").read_text())[
            "arch"]
        assert [arch["L0_keep"], arch["L1_keep"]] == [1, int(k == 2)]


def test_the_knapsack_is_a_searcher_of_compress(tiny_teacher, tmp_path, capsys):
    """``searcher: knapsack`` (step 3's alternative in docs/compress.md) on the smoke file with
    the tiny teacher: the blockwise table of the sorted teacher, the knapsack at each
    budget, its distinct picks run as the study's trials (scored by inherited-kd), then
    the front, ``final: {select: latency_ratios}``, the report and the export."""
    import optuna

    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=knapsack", "n_trials=3",
                          "evaluator.settings.max_steps=1",
                          "final={select: latency_ratios, ratios: [3], seeds: 1}") == 0
    metrics = json.loads((run / "metrics.json").read_text())
    search = metrics["search"]
    assert search["searcher"] == "knapsack" and search["knapsack"]["cost"] == "latency_ms"
    picks = search["knapsack"]["picks"]
    # three budgets from the teacher's latency (ratio 1) down, plus the final ratio 3;
    # a pick equal to an earlier one is run once
    assert 2 <= len(picks) <= 4 and len({p["arch_id"] for p in picks}) == len(picks)
    assert picks[0]["ratio"] == 1.0 and picks[0]["block_error"] == 0.0  # the teacher itself
    assert [p["block_error"] for p in picks] == sorted(p["block_error"] for p in picks)
    assert all(p["table_latency_ms"] <= picks[0]["table_latency_ms"] / p["ratio"] * (1 + 1e-9)
               for p in picks)
    assert search["evaluations"] == len(picks)
    # each pick is a trial of the run's study, queued with its budget and scored by the
    # configured evaluator (inherited-kd: the slice's score at step 0, then 1 step)
    study = optuna.load_study(study_name="compress_smoke-knapsack",
                              storage=optuna.storages.JournalStorage(
                                  optuna.storages.journal.JournalFileBackend(
                                      str(run / "study.journal"))))
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.user_attrs["arch_id"] for t in trials] == [p["arch_id"] for p in picks]
    assert [t.user_attrs["seed"] for t in trials] == [f"knapsack-{p['ratio']:.4g}x"
                                                      for p in picks]
    assert all(len(t.user_attrs["intermediate"]) == 2 for t in trials)
    assert json.loads((run / "study.json").read_text())["searcher"] == "knapsack"
    assert metrics["final"][0]["trial"] in search["chosen"]
    # latency_ratios divides the teacher's latency on the trials' scale: the latency
    # model's prediction for the teacher, which is the table's (the ratio-1 pick)
    assert search["ratios_teacher_ms"] == pytest.approx(picks[0]["table_latency_ms"], rel=1e-6)
    assert (run / "export" / "config.json").is_file()
    capsys.readouterr()
    assert main(["report", str(run)]) == 0
    assert "Multi-trial search: knapsack" in capsys.readouterr().out


@pytest.mark.slow
def test_the_blockwise_proxy_scores_any_searchers_compress_trials(tiny_teacher, tmp_path):
    """``evaluator: blockwise`` in method compress: the table is built on the sorted
    teacher when the evaluator asks for it, and each trial's score is minus its summed
    block error (a cheap proxy for any searcher, docs/compress.md#blockwise)."""
    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=random", "n_trials=3",
                          "evaluator={name: blockwise, settings: {}}") == 0
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["search"]["objectives"] == ["block_score", "latency_ms"]
    for number in range(3):
        result = json.loads((run / "trials" / str(number) / "result.json").read_text())["result"]
        assert result["values"][0] == -result["metrics"]["block_error"] <= 0.0


def test_nas_audit_serves_compress_with_a_latency_spread(tiny_teacher, tmp_path, capsys):
    """``nas audit --select latency-spread`` on method compress (its ranking audit): the
    search's inherited-kd and the blockwise proxy ranked against the final retrain, the
    candidates spread over the latency model's predictions and their span reported. The
    settings are the knapsack test's, so the tiny teacher, its sort and its block states
    come from the cache."""
    from evaluators.audit import latency_span

    run = tmp_path / "audit"
    argv = ["audit", str(ROOT / "experiments" / "compress_smoke.yaml"), "--run-dir", str(run),
            "--no-progress", "--json", "--n", "3", "--select", "latency-spread",
            "--noise-seeds", "0", "--bootstrap", "20"]
    for item in (*_TINY, "evaluator.settings.max_steps=1", f"teacher={tiny_teacher}"):
        argv += ["--set", item]
    capsys.readouterr()
    assert main(argv) == 0
    summary = json.loads(capsys.readouterr().out)
    assert set(summary["arms"]) == {"inherited-kd", "blockwise"}
    assert summary["select"] == "latency-spread" and summary["candidates"] == 3
    assert summary["full_objective"] == "val_accuracy" and summary["full_failed"] == 0
    latencies = summary["latency_ms_predicted"]
    assert latencies == sorted(latencies) and summary["latency_span"] == latency_span(latencies)
    saved = json.loads((run / "audit.json").read_text())
    for row in saved["candidates"]:
        inherited, block = row["results"]["inherited-kd"], row["results"]["blockwise"]
        assert inherited["metrics"]["inherited_val_accuracy"] is not None
        assert block["values"][0] == -block["metrics"]["block_error"]
        assert row["results"]["full"]["status"] == "complete"
    text = (run / "audit.md").read_text()
    assert "spread over predicted latency" in text
    assert f"the candidates span {summary['latency_span']:.3g}x" in text


#: a latency table of the onnx-int8 runtime for the tiny teacher's bert-subnet at 32 tokens
#: (a real calibration, 16 + 6 children, kept so that the test below times nothing)
INT8_TABLE = ROOT / "tests" / "fixtures" / "latency_onnx_int8_tiny.json"


def test_the_int8_latency_objective_is_predicted_from_its_table(tiny_teacher, tmp_path):
    """``latency: {source: predicted, runtime: onnx-int8}``: each trial's ``latency_ms``
    is the onnx-int8 table's linear model over the child's op calls, read from this
    runtime's own table in the cache (the committed one: nothing is calibrated or timed),
    and the run log names that runtime and the fit's held-out error."""
    import inspect

    import optuna

    from nas.latency import (
        GraphFit,
        LatencyTable,
        Setting,
        default_table_path,
        graph_features,
        machine,
        space_key,
    )
    from spaces.bert_subnet import bert_subnet_space

    table = json.loads(INT8_TABLE.read_text())
    table["machine"] = {**machine(), "threads": [1]}  # as if calibrated here
    path = default_table_path(runtime="onnx-int8")
    assert path != default_table_path()  # a torch table is another file
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(table))
    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=random", "n_trials=2",
                          "evaluator.settings.max_steps=1", "final={select: best, seeds: 1}",
                          "latency={source: predicted, runtime: onnx-int8}") == 0
    assert LatencyTable.load(path).calibrated == table["calibrated"]  # not calibrated again

    # the run's space, rebuilt from its study as `nas export --run` does
    study = optuna.load_study(study_name="compress_smoke-random",
                              storage=optuna.storages.JournalStorage(
                                  optuna.storages.journal.JournalFileBackend(
                                      str(run / "study.journal"))))
    names = inspect.signature(bert_subnet_space).parameters
    space = bert_subnet_space(**{k: v for k, v in study.user_attrs["space_config"].items()
                                 if k in names})
    fits = table["graph_fits"][space_key(space)]  # the fixture is this space's
    fit = GraphFit(**fits[Setting(1, 32).key])
    for number in range(2):
        result = json.loads((run / "trials" / str(number) / "result.json").read_text())
        arch = space.validate(result["arch"])
        predicted = fit(graph_features(space, arch, Setting(1, 32)))
        assert result["result"]["values"][1] == pytest.approx(predicted, rel=1e-9)
        assert result["result"]["costs"]["latency_ms_predicted"] == result["result"]["values"][1]
    notes = [json.loads(line).get("note", "") for line in
             (run / "log.jsonl").read_text().splitlines()]
    assert any(f"{path} (cached; runtime onnx-int8, clock cpu" in n and
               f"held-out MAPE {100 * fit.mape:.1f} % on 6 children" in n for n in notes)


def test_the_latency_section_takes_a_source_a_runtime_or_both():
    """``latency:`` is ``{source, runtime}``; a bare string is the source (as files wrote
    it before runtimes), a mapping without a source keeps the method's (compress predicts,
    search measures), and the runtime reaches the study's ``max_latency_ms``."""
    from nas.config import from_dict
    from recipes.compress import CompressConfig
    from recipes.search_config import LatencySettings, SearchConfig

    def compress(latency):
        return from_dict(CompressConfig, {"name": "x", "task": "sst2", "latency": latency}, "f")

    assert compress("measured").latency == LatencySettings("measured", "torch")
    int8 = compress({"runtime": "onnx-int8"})
    assert int8.latency == LatencySettings("predicted", "onnx-int8")
    assert int8.study_settings().latency_runtime == "onnx-int8"
    assert from_dict(CompressConfig, {"name": "x", "task": "sst2"}, "f").latency == \
        LatencySettings("predicted", "torch")
    search = from_dict(SearchConfig, {"name": "x", "task": "sst2", "space": "adabert",
                                      "latency": {"runtime": "onnx"}}, "f")
    assert search.latency == LatencySettings("measured", "onnx")
    assert search.study_settings().latency_runtime == "onnx"


def test_a_measured_int8_latency_times_each_candidates_int8_graph(tiny_teacher, tmp_path):
    """``latency: {source: measured, runtime: onnx-int8}``: each trained candidate's
    ``latency_ms`` is its int8 ONNX graph's on ONNX Runtime, and ``latency_ratios``
    divides the teacher's int8 graph's latency, timed the same way (logged once), never
    its torch timing."""
    run = tmp_path / "run"
    assert _tiny_compress(run, tiny_teacher, "searcher=random", "n_trials=2",
                          "evaluator.settings.max_steps=1",
                          "final={select: latency_ratios, ratios: [2], seeds: 1}",
                          "latency={source: measured, runtime: onnx-int8}") == 0
    for number in range(2):
        result = json.loads((run / "trials" / str(number) / "result.json").read_text())["result"]
        row = result["costs"]["latency"]["batch1"]
        assert row["runtime"] == "onnx-int8" and row["threads"] == 1
        assert result["values"][1] == result["costs"]["latency_ms"] == row["median_ms"]
        assert "latency_ms_predicted" not in result["costs"]
    search = json.loads((run / "metrics.json").read_text())["search"]
    assert (search["latency_scale"], search["latency_runtime"]) == ("measured", "onnx-int8")
    logged = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    teacher = [e for e in logged if e.get("stage") == "teacher_latency"]
    assert len(teacher) == 1 and teacher[0]["runtime"] == "onnx-int8"
    assert search["ratios_teacher_ms"] == search["teacher_latency_ms"] == teacher[0]["median_ms"]
