"""The run skeleton (recipes/common.py): a new method needs only its configuration fields
and its ``stages()``; the shared configuration, data and context behave the same for
every method."""

from __future__ import annotations

import dataclasses
import json
import logging
import typing
from pathlib import Path

import pytest
import yaml

from nas.config import ConfigError, from_dict
from nas.methods import METHODS, RunOptions
from recipes.common import DataSettings, MethodConfig, Recipe, TaskContext, snapshot

# ---------------------------------------------------------------- a new method


@dataclasses.dataclass
class TwoStageConfig(MethodConfig):
    greeting: str = "hello"


class TwoStage(Recipe):
    """A trivial two-stage method: its fields and its stages, nothing else."""

    name = "two-stage"
    config_class = TwoStageConfig

    def stages(self, ctx: TaskContext) -> dict:
        with ctx.timed("count"):  # stage 3
            counted = {"train": len(ctx.train), "dev": len(ctx.dev)}
        ctx.run.save_json("counted.json", counted)
        greeting = f"{ctx.cfg.greeting}, {len(ctx.dev_batches)} dev batches"  # stage 4
        return {"searched": {"tag": "two-stage", **counted, "greeting": greeting}}


def test_a_new_method_needs_only_its_fields_and_stages(tiny_teacher, tmp_path, monkeypatch):
    own = {k for k in vars(TwoStage) if not k.startswith("_")}
    assert own == {"name", "config_class", "stages"}
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    config = from_dict(TwoStageConfig, {
        "name": "two", "task": "sst2", "teacher": str(tiny_teacher), "greeting": "hi",
        "teacher_finetune": {"epochs": 1, "max_train_examples": 32, "max_dev_examples": 16,
                             "max_seq_len": 16},
        "data": {"max_train_examples": 20, "max_dev_examples": 10, "max_seq_len": 16}},
        "two.yaml")
    run_dir = tmp_path / "run"
    metrics = TwoStage().run(config, RunOptions(run_dir=run_dir, progress=False))
    assert metrics["searched"] == {"tag": "two-stage", "train": 20, "dev": 10,
                                   "greeting": "hi, 1 dev batches"}
    assert metrics["teacher"]["params"] > 0 and metrics["metric"] == "accuracy"
    assert metrics["evaluation"]["split"] == "test" and "count" in metrics["wall_seconds"]
    env = metrics["environment"]  # what the result depends on besides its configuration
    assert env["threads"] >= 1 and env["torch"] and (env["commit"] is None
                                                     or len(env["commit"]) == 40)
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert on_disk["searched"] == metrics["searched"]
    stages = [json.loads(line)["stage"] for line in (run_dir / "log.jsonl").read_text()
              .splitlines()]
    assert stages[-1] == "done" and "teacher" in stages and "overlap" in stages
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert saved["method"] == "two-stage" and saved["greeting"] == "hi"
    assert saved["teacher_finetune"]["max_train_examples"] == 32  # typed: every field
    assert saved["data"]["dev_subset"] == "head"
    # a second run of the same folder resumes: the skeleton finds the finished stages
    again = TwoStage().run(config, RunOptions(run_dir=run_dir, progress=False, resume=True))
    assert again["searched"] == metrics["searched"]


# ----------------------------------------------------------- the shared config


def test_every_registered_method_uses_the_shared_config_and_skeleton():
    for name in METHODS.names():
        method = METHODS.get(name)
        assert issubclass(method, Recipe), name
        assert issubclass(method.config_class, MethodConfig), name
        hints = typing.get_type_hints(method.config_class)
        assert issubclass(hints["data"], DataSettings), name


def test_teacher_finetune_is_typed_and_checked_before_any_stage():
    base = {"name": "x", "task": "sst2"}
    with pytest.raises(ConfigError, match="teacher_finetune: unknown key 'epoch'"):
        from_dict(TwoStageConfig, {**base, "teacher_finetune": {"epoch": 1}}, "x.yaml")
    with pytest.raises(ConfigError, match="teacher_finetune.batch_size"):
        from_dict(TwoStageConfig, {**base, "teacher_finetune": {"batch_size": "big"}}, "x.yaml")
    config = from_dict(TwoStageConfig, {**base, "teacher_finetune": {"epochs": 2}}, "x.yaml")
    assert config.finetune_config().epochs == 2.0
    assert snapshot("two-stage", config)["teacher_finetune"]["epochs"] == 2.0


@pytest.mark.parametrize("data, message", [
    ({"dev_subset": "first"}, "dev_subset must be head or seeded"),
    ({"max_train_examples": 1}, "max_train_examples"),
    ({"val_fraction": 1.0}, "val_fraction"),
    ({"max_seq_len": 4}, "max_seq_len"),
])
def test_data_settings_are_checked(data, message):
    with pytest.raises(ConfigError, match=message):
        from_dict(DataSettings, data, "data")


class _Ctx(TaskContext):
    """A context with the data stage only (no teacher, no tokenizer)."""

    def __init__(self, data: dict, tmp_path: Path) -> None:
        from types import SimpleNamespace

        config = TwoStageConfig(name="x", task="snips", data=DataSettings(**data))
        run = SimpleNamespace(log=lambda *a, **k: None)
        super().__init__(config, run, RunOptions(run_dir=tmp_path, progress=False))


def test_a_dev_head_that_loses_classes_is_warned_about_and_seeded_keeps_them(tmp_path,
                                                                               caplog):
    # SNIPS's dev file is sorted by intent: its first 20 rows hold one intent of seven
    with caplog.at_level(logging.WARNING, logger="nas.recipe"):
        ctx = _Ctx({"max_dev_examples": 20}, tmp_path)
        ctx.prepare_data()
    assert len(set(ctx.dev.labels)) < 7
    assert "data.dev_subset=seeded" in caplog.text
    seeded = _Ctx({"max_dev_examples": 20, "dev_subset": "seeded"}, tmp_path)
    seeded.prepare_data()
    assert len(seeded.dev) == 20 and len(set(seeded.dev.labels)) > len(set(ctx.dev.labels))


def test_caps_that_cut_the_data_are_logged_with_their_setting(tmp_path, caplog):
    """A cap is named: "2,000 rows, using 256: data.max_train_examples", on the console and in
    the run log; the report split's trivial answers are recorded for the report."""
    logged: list[tuple[str, dict]] = []
    with caplog.at_level(logging.INFO, logger="nas.recipe"):
        ctx = _Ctx({"max_train_examples": 50, "max_dev_examples": 30}, tmp_path)
        ctx.run.log = lambda stage, **fields: logged.append((stage, fields))
        ctx.prepare_data()
    rows = len(ctx.full_train)
    assert len(ctx.train) == 50 and rows > 1000
    train_note = f"train: {rows:,} rows, using 50: data.max_train_examples"
    assert train_note in caplog.text
    data = dict(logged)["data"]
    assert data["train"] == 50 and data["dev"] == 30
    assert data["cuts"][0] == train_note
    assert data["cuts"][1] == "dev: 700 rows, using 30: data.max_dev_examples (the first rows)"
    ctx.report, ctx.report_rows, ctx.overlap, ctx.median_tokens = ctx.dev, 30, {}, 8
    evaluation = ctx.evaluation()
    assert evaluation["classes"] == 7
    labels = list(ctx.dev.labels)
    top = max(set(labels), key=labels.count)
    assert evaluation["majority"] == {"label": ctx.dev.label_names[top],
                                      "share": labels.count(top) / 30}


# ------------------------------------------------------------ the end of a run


class FinishedStage(TwoStage):
    """A method whose one stage ends a model's part of the run through the skeleton."""

    name = "finished-stage"

    def stages(self, ctx: TaskContext) -> dict:
        space, model = ctx.task_teacher()
        return {"searched": ctx.finish("copy", space, None, model=model, record="copy.json",
                                       extra={"note": "the teacher itself"})}


def test_finish_scores_exports_and_records_a_model(tiny_teacher, tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    config = from_dict(TwoStageConfig, {
        "name": "fin", "task": "sst2", "teacher": str(tiny_teacher), "latency_repeats": 1,
        "teacher_finetune": {"epochs": 1, "max_train_examples": 32, "max_dev_examples": 16,
                             "max_seq_len": 16},
        "data": {"max_train_examples": 20, "max_dev_examples": 10, "max_seq_len": 16,
                 "max_report_examples": 12}}, "fin.yaml")
    run_dir = tmp_path / "run"
    row = FinishedStage().run(config, RunOptions(run_dir=run_dir, progress=False))["searched"]
    assert row["tag"] == "copy" and row["note"] == "the teacher itself"
    assert set(row["dev"]) == {"accuracy"} and set(row["test"]) == {"accuracy"}
    assert row["params"] > 0 and set(row["latency"]) == {"batch1", "batch32"}
    assert json.loads((run_dir / "copy.json").read_text()) == row
    card = (run_dir / "export" / "README.md").read_text()  # exported, with the run's card
    # the run's card: the task's dataset and the row's report-split score
    assert (run_dir / "export" / "config.json").is_file()
    assert "config: sst2" in card and f"value: {row['test']['accuracy']}" in card


class _Failing:
    def evaluate(self, arch, trial):
        raise RuntimeError("out of memory")


def test_a_failed_final_evaluation_stops_the_run_in_one_line_naming_what():
    from nas.architecture import Architecture
    from nas.errors import NasError

    ctx = TaskContext.__new__(TaskContext)
    with pytest.raises(NasError, match=r"^the final retrain of best \([0-9a-f]+\) failed: "
                                       r"RuntimeError: out of memory$"):
        ctx.evaluate(_Failing(), Architecture({"a": 1}, "s"), "the final retrain of best")


def _objective(ctx, *args):
    return ctx, args


class _PreparedContext(TaskContext):
    def prepare(self):
        self.prepared = True
        return self


def test_worker_parts_prepare_the_methods_context_and_call_its_objective(tmp_path):
    from recipes.common import worker_parts

    config = TwoStageConfig(name="w", task="sst2")
    (tmp_path / "config.yaml").write_text("method: two-stage\n")  # the first process's run
    options = RunOptions(run_dir=tmp_path, progress=True)
    parts = TaskContext.__new__(_PreparedContext)
    parts.cfg, parts.options = config, options
    ctx, args = parts.worker_parts(_objective, "tpe", 3)()
    assert type(ctx) is _PreparedContext and ctx.prepared and args == ("tpe", 3)
    assert ctx.cfg is config and ctx.run.path == tmp_path and not ctx.progress
    assert worker_parts.__module__ == "recipes.common"
