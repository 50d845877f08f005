"""Every export folder carries a model card (issue 31): ``README.md`` whose metadata header
the Hugging Face Hub reads (parsed here with ``huggingface_hub``'s own ``ModelCard``), with
the task, labels, metrics on the report split, teacher, params, latency, the command that
made it and the engine version."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

import nas
from nas.cli import main
from nas.runtime import load


def _header(path) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_an_export_outside_a_run_has_a_card_without_metrics(tmp_path, capsys):
    out = tmp_path / "m"
    args = ["export", "--space", "adabert", "-c", "hidden=16", "-c", "max_depth=2",
            "--random-init", "--labels", "bad,good", "--max-length", "24", "-o", str(out),
            "--quiet"]
    assert main(args) == 0
    header = _header(out / "README.md")
    facts = header["nas"]
    assert header["library_name"] == "transformers"
    assert header["pipeline_tag"] == "text-classification" and "custom_code" in header["tags"]
    assert facts["labels"] == ["bad", "good"] and facts["trained_length"] == 24
    assert facts["command"] == shlex.join(["nas", *args])
    assert facts["engine_version"] == nas.__version__ and facts["random_init"] is True
    model = load(out)
    assert facts["params"] == sum(t.numel() for t in model.network.state_dict().values())
    assert facts["metrics"] is None and "model-index" not in header
    assert "not measured" in (out / "README.md").read_text()
    # the card is documentation: editing it for the Hub leaves the export loadable
    (out / "README.md").write_text("edited\n")
    load(out)


def test_a_runs_exports_carry_its_metrics(smoke_runs, tmp_path):
    from huggingface_hub import ModelCard

    run = smoke_runs("adabert")
    metrics = json.loads((run / "metrics.json").read_text())
    searched, teacher = metrics["searched"], metrics["teacher"]
    hf = tmp_path / "hf"
    assert main(["export", "--run", str(run), "--format", "hf", "-o", str(hf), "--quiet"]) == 0
    for folder, command in ((run / "export", "nas run "), (hf, "nas export --run ")):
        text = (folder / "README.md").read_text(encoding="utf-8")
        facts = _header(folder / "README.md")["nas"]
        assert facts["command"].startswith(command), facts["command"]
        assert facts["task"] == "sst2" and facts["labels"] == ["negative", "positive"]
        assert facts["params"] == searched["params"]
        assert facts["metrics"]["test"] == searched["test"]
        assert facts["report_split"]["split"] == "test"
        assert facts["report_split"]["examples"] == metrics["evaluation"]["examples"]
        assert facts["teacher"]["params"] == teacher["params"]
        assert facts["teacher"]["metrics"]["test"] == teacher["test"]
        assert facts["latency"]["batch1_median_ms"] == pytest.approx(
            searched["latency"]["batch1"]["median_ms"], abs=1e-3)
        assert facts["engine_commit"] == metrics["environment"]["commit"]
        # the Hub's own parser reads the results from the header
        [result] = ModelCard(text).data.eval_results
        assert (result.metric_type, result.dataset_split) == ("accuracy", "test")
        assert result.metric_value == pytest.approx(searched["test"]["accuracy"])
        assert result.task_type == "text-classification"
