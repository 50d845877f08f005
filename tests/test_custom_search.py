"""Search a space of your own: ``method: search`` on examples/custom_search.yaml
(the method's smoke run), its outputs, ``nas.search`` from Python, plug-in files, and the
one-line answers to bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nas.cli import main

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "custom_search.yaml"
SPACE_FILE = ROOT / "examples" / "custom_space.py"


def _run(tmp_path: Path, capsys, data: dict, *args: str) -> tuple[int, str]:
    """``nas run`` on ``data`` (in another folder than the example's space file: give
    ``plugins`` as absolute paths; a copy of the file would register tiny-cell twice)."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code = main(["run", str(path), "--run-dir", str(tmp_path / "run"), "--no-progress", *args])
    return code, capsys.readouterr().err


def _example(**changes) -> dict:
    data = yaml.safe_load(EXAMPLE.read_text())
    data.update({"plugins": [str(SPACE_FILE)], **changes})
    return data


# ------------------------------------------------------------- the example, end to end


def test_the_example_searches_exports_and_predicts(smoke_runs, capsys):
    """search → final → export → nas predict, nas report (with the Pareto plot) and
    nas export --run --trial, which imports the run's plug-in again."""
    run = smoke_runs("search")
    metrics = smoke_runs.metrics("search")
    search, final = metrics["search"], metrics["final"]
    assert search["searcher"] == "tpe" and search["evaluations"] == 4
    assert final[0]["trial"] == search["chosen"][0] and len(final[0]["seeds"]) == 1
    assert metrics["searched"]["arch_id"] == final[0]["arch_id"]
    assert set(metrics["searched"]) >= {"dev", "test", "params", "latency"}

    capsys.readouterr()
    assert main(["predict", str(run / "export"), "a gripping, funny film"]) == 0
    label = capsys.readouterr().out.split("\t")[0]
    assert label in json.loads((run / "export" / "config.json").read_text())["labels"]
    assert (run / "final" / final[0]["tag"] / "export" / "config.json").is_file()

    assert main(["report", str(run)]) == 0
    report = capsys.readouterr().out
    assert "## Final retrains" in report and "tpe" in report
    assert (run / "pareto.png").is_file()

    out = run / "exports" / "trial0"
    assert main(["export", "--run", str(run), "--trial", "0"]) == 0  # default folder
    assert json.loads((out / "config.json").read_text())["labels"] == ["negative", "positive"]
    # "best" of a two-objective study: the trial the final stage chose
    capsys.readouterr()
    assert main(["export", "--run", str(run), "--trial", "best", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trial"] == search["chosen"][0]


def test_the_python_api_returns_the_study_front_and_an_export(smoke_runs, tmp_path):
    """``nas.SearchResult`` over the smoke run: best, pareto, the study, a trial table and
    an export to another format."""
    import nas

    result = nas.SearchResult.open(smoke_runs("search"))
    assert result.best["arch_id"] == smoke_runs.metrics("search")["searched"]["arch_id"]
    assert [p["trial"] for p in result.pareto] and result.study.study_name.endswith("-tpe")
    table = result.trials
    assert len(table) >= 4 and "values_val_accuracy" in table.columns
    out = result.export(tmp_path / "onnx", format="onnx")
    assert (out / "model.onnx").is_file()


def test_a_notebook_space_object_is_searched_without_registration(tmp_path, smoke_runs):
    """``space=`` takes a ``SearchSpace``: a two-op cell made here, searched by random
    search with one-epoch trials, in this process (the smoke run's cache holds the
    teacher)."""
    import nas
    from nas import Categorical, ChoiceRef, GraphBuilder, SearchSpace

    smoke_runs("search")  # the teacher of these settings, cached
    g = GraphBuilder()
    g.node("emb", "embedding", group="embeddings", params=dict(
        vocab_size=30522, embedding_size=16, out=16, max_positions=64))
    g.node("n0", "sum", cell="cell", group="encoder")
    g.edge("emb", "n0", ChoiceRef("op"))
    g.node("head", "pooler_classifier", role="output", group="head",
           params={"num_labels": 2, "pooling": "mean"})
    g.edge("n0", "head")
    space = SearchSpace("notebook-cell", [Categorical("op", ("std_conv_3", "skip"))], g.graph)
    data = _example()
    keep = ("task", "teacher_finetune", "data", "latency_repeats")
    result = nas.search(space, searcher={"name": "random"}, n_trials=2, run_dir=tmp_path / "run",
                        evaluator={"name": "distilled-retrain", "settings": {"epochs": 1}},
                        retrain={"epochs": 1}, progress=False, **{k: data[k] for k in keep})
    assert len(result.trials) == 2 and result.best["arch"]["op"] in ("std_conv_3", "skip")
    assert (tmp_path / "run" / "export" / "config.json").is_file()


# --------------------------------------------------------------------- bad input


def test_an_unregistered_space_names_plugins_and_close_names(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, _example(space="tiny-cel", plugins=[]))
    assert code == 2 and "tiny-cel" in err and "plugins:" in err
    assert len(err.strip().splitlines()) == 1


def test_a_plugin_that_fails_to_import_is_named_with_its_line(tmp_path, capsys):
    broken = tmp_path / "broken.py"
    broken.write_text("import math\n\nvalue = math.nothing_here\n")
    code, err = _run(tmp_path, capsys, _example(plugins=[str(broken)]))
    assert code == 2 and "broken.py" in err and "line 3" in err and "AttributeError" in err
    assert len(err.strip().splitlines()) == 1
    code, err = _run(tmp_path, capsys, _example(plugins=["missing.py"]))
    assert code == 2 and "missing.py: no such file" in err


def test_an_evaluator_that_cannot_score_the_space_is_refused_before_stage_one(tmp_path,
                                                                              capsys):
    code, err = _run(tmp_path, capsys, _example(evaluator={"name": "warmup-kd"}))
    assert code == 2 and "warmup-kd" in err and "supernet" in err
    assert not (tmp_path / "run").exists()


def test_an_unknown_objective_lists_the_known_ones(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, _example(objectives=["accuracy", "speed"]))
    assert code == 2 and "'speed'" in err and "latency_ms" in err


def test_a_constraint_no_architecture_meets_is_refused_before_stage_one(tmp_path, capsys):
    """The cost model costs the space's architectures first (all 27 of tiny-cell) and the
    one line names the smallest parameters and FLOPs found and the limit to raise."""
    code, err = _run(tmp_path, capsys, _example(constraints={"max_params": 1.0e6,
                                                             "max_flops": 100}))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no architecture of space 'tiny-cell' meets them" in err
    assert "params 994.27K (max_params 1.00M)" in err and "FLOPs" in err
    assert "raise constraints.max_flops to at least" in err and "max_params to" not in err
    assert not (tmp_path / "run").exists()  # before the run folder, the teacher, anything


def test_a_latency_limit_refused_on_predictions_names_the_latency_table(tmp_path, capsys,
                                                                         monkeypatch):
    """A ``max_latency_ms`` that no predicted latency meets names the table that predicted
    it (a table calibrated on a busy machine refuses what the limit was meant to allow)."""
    from nas.latency import Fit, LatencyModel, LatencyTable, Setting, space_key
    from recipes.search import Search

    table_path = tmp_path / "table.json"

    def predictor(self, space, seq_len, runtime="torch"):
        setting = Setting(1, seq_len)
        table = LatencyTable.new()
        table.fits[space_key(space)] = {setting.key: Fit(0.0, 0.0, 5.0)}  # 5 ms, any child
        table.calibrated, table.noise = "2026-01-02T03:04:05Z", {setting.key: 0.02}
        return LatencyModel(table, table_path).predictor(space, 1, seq_len)

    monkeypatch.setattr(Search, "latency_model", predictor)
    code, err = _run(tmp_path, capsys, _example(constraints={"max_latency_ms": 2.5}))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no architecture of space 'tiny-cell' meets them" in err
    assert (f"latency predicted by latency table {table_path} (clock cpu, calibrated "
            "2026-01-02T03:04:05Z, noise 2.0 %") in err
    assert "`nas latency calibrate --table" in err and "--clock cpu`" in err


def test_a_latency_limit_is_checked_with_the_latency_model(tmp_path):
    """``max_latency_ms`` is costed by a latency predictor (here a stand-in: the
    calibrated one is tests/test_latency_model.py's); a sampled space says how many it
    drew, and a limit met alone but not with the others is named so."""
    from nas.errors import NasError
    from nas.space import get_space, small_config
    from searchers.feasibility import check_feasible
    from searchers.optuna_bridge import Budget

    space = get_space("adabert", **small_config("adabert"))

    def latency(arch):
        return 1.0 + arch["depth"]

    check_feasible(space, Budget(max_latency_ms=3.0, latency_fn=latency), seq_len=16)
    with pytest.raises(NasError, match=r"smallest of \d+ sampled architectures: latency 2 ms "
                                       r"\(max_latency_ms 1.5 ms\); raise constraints\."
                                       r"max_latency_ms to at least 2 ms"):
        check_feasible(space, Budget(max_latency_ms=1.5, latency_fn=latency), seq_len=16,
                       samples=200)


def test_the_plugin_flag_imports_a_file_for_any_experiment(tmp_path, capsys):
    """``nas run --plugin FILE`` adds to ``plugins:`` (here the file's own list is empty)."""
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(_example(plugins=[])))
    from nas.methods import load_experiment

    _, config = load_experiment(path, plugins=[str(SPACE_FILE)])
    assert config.plugins == [str(SPACE_FILE.resolve())]


# ------------------------------------------------------------------------ slow ones


@pytest.mark.slow
def test_the_example_runs_with_the_differentiable_searcher(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, _example(), "--searcher", "differentiable")
    assert code == 0, err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["search"]["searcher"] == "differentiable"
    assert (tmp_path / "run" / "export" / "config.json").is_file()
    # a new process knows the space again from the run's recorded plug-ins
    done = subprocess.run([sys.executable, "-m", "nas", "report", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "## One-shot search: differentiable" in done.stdout


def test_the_one_shot_report_warns_when_choices_stay_near_uniform():
    from recipes.search import one_shot_lines

    lines = one_shot_lines({"searcher": "differentiable", "derived": {"a": "x", "d": 2},
                            "probabilities": {"a": [0.6, 0.2, 0.2], "d": [0.34, 0.33, 0.33]}})
    text = "\n".join(lines)
    assert "| a | x | 0.600 | 0.333 |" in text and "| d | 2 | 0.340 | 0.333 |" in text
    assert "1 of 2 choices (d) ended within 0.05 of uniform" in text
    assert one_shot_lines({}) == []
    ranked = "\n".join(one_shot_lines({"searcher": "sampled-supernet", "candidates": [
        {"arch_id": "a", "params": 10, "value": 0.5}, {"arch_id": "b", "params": 20,
                                                        "value": 0.75},
        {"arch_id": "c", "params": 30, "value": 0.75}]}))
    assert "| 1 | b | 20 | 0.7500 |\n| 2 | c | 30 | 0.7500 |\n| 3 | a | 10 | 0.5000 |" in ranked
    assert "2 of 3 candidates tie at the best inherited score" in ranked


@pytest.mark.slow
def test_nas_search_runs_in_a_fresh_interpreter(tmp_path):
    """The issue's example call, in a new Python process."""
    script = f"""
import nas
result = nas.search(space="tiny-cell", plugins=[{str(SPACE_FILE)!r}], task="sst2",
                    searcher="tpe", n_trials=2, constraints={{"max_params": 2e6}},
                    run_dir={str(tmp_path / 'run')!r}, progress=False,
                    teacher_finetune=dict(epochs=1, max_train_examples=256,
                                          max_dev_examples=256, max_seq_len=32, batch_size=32),
                    data=dict(max_train_examples=320, max_dev_examples=64, val_fraction=0.2,
                              max_seq_len=32),
                    evaluator={{"name": "distilled-retrain", "settings": {{"epochs": 1}}}},
                    retrain={{"epochs": 1}}, latency_repeats=2)
print(result.best["arch_id"], len(result.trials))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    arch_id, trials = done.stdout.split()
    assert len(arch_id) == 12 and trials == "2"


# ------------------------------------------------------------------ the final choice


def _study(values: list[tuple[float, float]], names=("val_accuracy", "latency_ms")):
    import optuna

    study = optuna.create_study(directions=["maximize", "minimize"])
    study.set_metric_names(list(names))
    for v in values:
        study.add_trial(optuna.trial.create_trial(values=list(v)))
    return study


def test_final_selects_best_pareto_latency_ratios_and_all():
    from recipes.search_config import FinalSettings
    from recipes.search_select import select_trials

    #        accuracy, latency ms: trials 0-3 on the front, 4 dominated
    study = _study([(0.90, 10.0), (0.85, 4.0), (0.80, 2.0), (0.70, 1.0), (0.60, 9.0)])
    trials = study.trials
    numbers = lambda picked: [t.number for t in picked]  # noqa: E731
    assert numbers(select_trials(study, trials, FinalSettings("best", n=2))) == [0, 1]
    assert numbers(select_trials(study, trials, FinalSettings("pareto", n=2))) == [3, 0]
    assert numbers(select_trials(study, trials, FinalSettings("pareto", n=9))) == [3, 2, 1, 0]
    # teacher 20 ms: 2x -> 10 ms (trial 0), 5x -> 4 ms (1), 15x -> 1.33 ms (3)
    ratios = FinalSettings("latency_ratios", ratios=[2, 5, 15])
    assert numbers(select_trials(study, trials, ratios, teacher_ms=20.0)) == [0, 1, 3]
    # two ratios nearest the same point retrain it once
    twice = FinalSettings("latency_ratios", ratios=[2, 2.2])
    assert numbers(select_trials(study, trials, twice, teacher_ms=20.0)) == [0]
    # all: every trial, dominated ones included, in trial order
    assert numbers(select_trials(study, trials[::-1], FinalSettings("all"))) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("value", [1, "most", True, 2.5])
def test_final_train_examples_refuses_what_is_not_all_or_a_row_count(tmp_path, capsys, value):
    code, err = _run(tmp_path, capsys, _example(final={"train_examples": value}))
    # a bool or float is refused by the typed loader (its type), the rest by the check
    assert code == 2 and "train_examples" in err and len(err.strip().splitlines()) == 1


def test_final_train_examples_picks_the_subset_all_or_seeded_rows():
    """The final retrain's data: the run's subset by default, the whole split for
    ``all``, else a seeded N rows of it (the same rows for the same seed), logged once."""
    from types import SimpleNamespace

    from nas.data import load_task
    from recipes.search_config import FinalSettings
    from recipes.search_context import SearchContext

    full = load_task("sst2", "dev").head(40)
    subset = full.subset(range(10))
    logged: list[dict] = []

    def final_rows(value, seed=0):
        ctx = SimpleNamespace(cfg=SimpleNamespace(final=FinalSettings(train_examples=value)),
                              train=subset, full_train=full, seed=seed,
                              run=SimpleNamespace(log=lambda stage, **f: logged.append(f)))
        first = SearchContext.final_train(ctx)  # type: ignore[arg-type]
        assert SearchContext.final_train(ctx) is first  # type: ignore[arg-type]  # drawn once
        return first

    assert final_rows(None) is subset and not logged
    assert final_rows("all") is full and logged[-1] == {"rows": 40, "of": 40, "setting": "all"}
    drawn = final_rows(25)
    assert len(drawn) == 25 and set(drawn.texts_a) <= set(full.texts_a)
    assert drawn.texts_a == final_rows(25).texts_a != final_rows(25, seed=1).texts_a
    assert len(logged) == 4  # all, and the three draws of 25


def test_latency_ratios_need_a_latency_objective(tmp_path, capsys):
    code, err = _run(tmp_path, capsys, _example(final={"select": "latency_ratios",
                                                       "ratios": [2]}))
    assert code == 2 and "latency_ms among the objectives" in err


# ----------------------------------------------------------------------- plug-ins


def test_plugin_files_resolve_beside_the_experiment_and_import_once(tmp_path, monkeypatch):
    from nas.plugins import PluginError, import_plugins

    (tmp_path / "exp").mkdir()
    plugin = tmp_path / "exp" / "counted.py"
    plugin.write_text("import builtins\n"
                      "builtins.nas_test_imports = getattr(builtins, 'nas_test_imports', 0) + 1\n")
    monkeypatch.chdir(tmp_path)
    import builtins

    monkeypatch.setattr(builtins, "nas_test_imports", 0, raising=False)
    assert import_plugins(["counted.py"], tmp_path / "exp") == [str(plugin.resolve())]
    assert import_plugins(["exp/counted.py"]) == [str(plugin.resolve())]  # from the cwd
    assert builtins.nas_test_imports == 1  # the same file, imported once
    assert import_plugins(["json"]) == ["json"]  # a module name
    with pytest.raises(PluginError, match="no module of that name"):
        import_plugins(["no_such_module_here"])
    (tmp_path / "bad.py").write_text("def f(:\n")
    with pytest.raises(PluginError, match=r"bad.py failed to import: line 1: SyntaxError"):
        import_plugins(["bad.py"])


def test_the_dry_run_counts_the_final_retrain_on_its_own_rows():
    from recipes.plan import final_train_rows
    from recipes.search_config import FinalSettings

    def config(value):
        return {"final": FinalSettings(train_examples=value)}

    assert final_train_rows(config(None), 100, 500) == 100
    assert final_train_rows(config("all"), 100, 500) == 500
    assert final_train_rows(config(300), 100, 500) == 300
    assert final_train_rows(config(900), 100, 500) == 500  # capped at the split
    assert final_train_rows({}, 100, 500) == 100  # a method without final:


def test_nas_search_takes_the_configurations_keys_with_its_checks(tmp_path):
    """``nas.search``'s keywords are the configuration's keys (no copy of them to keep in
    step): an unknown one, a bad value or an unknown searcher is one line naming it,
    before the run folder is made."""
    import dataclasses
    import inspect

    import nas
    from nas.errors import NasError
    from recipes.search_config import SearchConfig

    keywords = inspect.signature(nas.search).parameters
    assert set(keywords) == {"space", "task", "run_dir", "resume", "progress", "data_dir",
                             *(f.name for f in dataclasses.fields(SearchConfig))}
    assert keywords["n_trials"].default == 12 and keywords["searcher"].default == "tpe"
    for keywords, message in [
            ({"n_trial": 3}, r"nas\.search\(\): unknown key 'n_trial'; known keys: .*n_trials"),
            ({"n_trials": 0}, r"n_trials must be an integer >= 1"),
            ({"searcher": "tpee"}, r"unknown searcher 'tpee'; did you mean 'tpe'"),
            ({"searcher": {"name": "tpe", "settings": {"n_startp": 1}}},
             r"searcher 'tpe': bad sampler option")]:
        with pytest.raises(NasError, match=message) as err:
            nas.search("tiny-cell", plugins=[str(SPACE_FILE)], task="sst2",
                       run_dir=tmp_path / "run", **keywords)
        assert "\n" not in str(err.value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_example_runs_with_a_planned_plugin_searcher(tmp_path, capsys):
    """examples/custom_planned.py's ``my-list`` in method search, named by ``searcher:``
    with its settings: its two architectures are the study's trials, in order."""
    planned = str(ROOT / "examples" / "custom_planned.py")
    data = _example(plugins=[str(SPACE_FILE), planned], searcher={
        "name": "my-list", "settings": {"archs": [{"a": "skip"}, {"a": "std_conv_3"}]}})
    code, err = _run(tmp_path, capsys, data)
    assert code == 0, err
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["search"]["searcher"] == "my-list" and metrics["search"]["evaluations"] == 2
    trials = [json.loads((tmp_path / "run" / "trials" / str(n) / "result.json").read_text())
              for n in range(2)]
    assert [t["arch"]["a"] for t in trials] == ["skip", "std_conv_3"]
