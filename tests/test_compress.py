"""Compress the teacher (issue 30): ``method: compress`` end to end on its smoke run (sort,
search with inherited-kd, final retrain from the inherited weights, export, nas predict)."""

from __future__ import annotations

import json

from nas.cli import main


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
