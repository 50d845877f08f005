"""``nas.run``: every registered method from Python, with ``nas run``'s checks (the same
code: :func:`nas.methods.start_run`), its plan (``dry_run=True``) or its result."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import yaml

import nas
from nas.errors import NasError

ROOT = Path(__file__).resolve().parents[1]
SPACE_FILE = ROOT / "examples" / "custom_space.py"
BUILT_IN = ("adabert", "efficientbert", "tinybert", "mobilebert", "mixedvocab", "search",
            "compress")


def _smoke_settings(method: str) -> dict:
    """The method's smoke experiment as keywords (``method:`` dropped; the search's
    plug-in file as an absolute path, as keywords have no file to be relative to)."""
    data = yaml.safe_load((ROOT / "experiments" / f"{method}_smoke.yaml").read_text())
    assert data.pop("method") == method
    if "plugins" in data:
        data["plugins"] = [str(SPACE_FILE)]
    return data


#: planned in the default run; the others' plans (the same route) are ``slow``
PLANNED_FIRST = ("adabert", "search", "compress")


@pytest.mark.parametrize("method", [m if m in PLANNED_FIRST else
                                    pytest.param(m, marks=pytest.mark.slow) for m in BUILT_IN])
def test_every_built_in_method_plans_from_python_without_training(method, tmp_path):
    """``dry_run=True``: ``nas run --dry-run``'s plan (checks passed, the caps' sizes, the
    training stages), and no run folder."""
    settings = _smoke_settings(method)
    plan = nas.run(method, run_dir=tmp_path / "run", dry_run=True, progress=False, **settings)
    assert isinstance(plan, dict)
    assert plan["method"] == method and plan["name"] == settings["name"]
    assert plan["checks"]["passed"] is True and plan["task"] == settings["task"]
    assert plan["data"]["train"] == settings["data"]["max_train_examples"]
    assert plan["stages"] and all(stage["steps"] >= 1 for stage in plan["stages"])
    assert not (tmp_path / "run").exists()


def test_the_name_defaults_to_the_method(tmp_path):
    plan = nas.run("tinybert", dry_run=True, **{k: v for k, v in
                                                _smoke_settings("tinybert").items()
                                                if k != "name"})
    assert plan["name"] == "tinybert"


@pytest.mark.parametrize(("method", "keywords", "message"), [
    ("adabert", {"epochz": 1}, r"^nas\.run\(\): unknown key 'epochz'; known keys: .*"),
    ("tinybert", {"studnet": {}}, r"^nas\.run\(\): unknown key 'studnet'; known keys: .*"),
    ("tinybert", {"seed": -1}, r"seed must be"),
    ("tinybert", {"searcher": "tpe"},
     r"^method 'tinybert' cannot use --searcher tpe; it accepts: none"),
    ("efficientbert", {"searcher": "gp"}, r"^method 'efficientbert' cannot use --searcher gp"),
    ("adabert", {"run_dir": ""}, r"^run_dir '': empty; name a folder"),
])
def test_a_bad_keyword_is_refused_in_one_line_before_the_run_folder(
        method, keywords, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # where runs/<name> would be made
    with pytest.raises(NasError, match=message) as err:
        nas.run(method, task="sst2", dry_run=True, **keywords)
    assert "\n" not in str(err.value) and list(tmp_path.iterdir()) == []


def test_an_unknown_method_is_refused_with_the_known_ones():
    with pytest.raises(NasError, match=r"unknown method 'adabret'; did you mean 'adabert'") \
            as err:
        nas.run("adabret", task="sst2")
    assert all(name in str(err.value) for name in BUILT_IN)
    assert "\n" not in str(err.value)


def test_help_lists_the_common_keywords_and_each_methods_documentation():
    from nas.methods import METHODS

    keywords = inspect.signature(nas.run).parameters
    assert list(keywords) == ["method", "task", "run_dir", "resume", "progress", "data_dir",
                              "dry_run", "settings"]
    for name in METHODS.names():
        if name in BUILT_IN:
            assert f"docs/{name}.md" in nas.run.__doc__
            assert (ROOT / "docs" / f"{name}.md").is_file()


def test_a_tiny_compress_runs_through_nas_run(tiny_teacher, tmp_path, monkeypatch):
    """The compress smoke with the tiny teacher (tests/test_compress.py's sizes), run by
    ``nas.run``: its result reads the run folder, reports and exports."""
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    settings = _smoke_settings("compress")
    settings.update(teacher=str(tiny_teacher), n_trials=2, importance={"samples": 16})
    settings["teacher_finetune"].update(max_train_examples=32, max_dev_examples=32)
    settings["data"].update(max_train_examples=80)
    settings["evaluator"]["settings"]["max_steps"] = 1
    run = tmp_path / "run"
    result = nas.run("compress", run_dir=run, progress=False, **settings)
    assert isinstance(result, nas.SearchResult) and result.run_dir == run
    assert result.metrics["searched"] == json.loads((run / "metrics.json").read_text())[
        "searched"]
    assert result.metrics["search"]["evaluations"] == 2
    assert result.best["arch_id"] == result.metrics["searched"]["arch_id"]
    assert "# Report: run" in result.report()
    out = result.export(tmp_path / "native")
    assert (out / "config.json").is_file()
