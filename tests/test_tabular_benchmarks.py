"""Any table as a benchmark (searchers.benchmarks), the pool's row graphs and neighbours,
and the searchers that move by small steps on a pool (wl-bo, local-search,
regularized-evolution) and their WL kernel and hypervolume improvement."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import wilcoxon as scipy_wilcoxon

from evaluators.base import Objective
from evaluators.tabular import TabularEvaluator
from nas.plugins import import_plugins
from searchers.benchmarks import BenchmarkError, compare_runs, get_benchmark, wilcoxon
from searchers.optuna_bridge import SpaceBridge
from searchers.pareto import hypervolume
from searchers.proposals import StudySearch
from searchers.wl_bo import hv_improvement_2d, wl_features, wl_kernel

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "fixtures" / "tiny_table.py"


@pytest.fixture(scope="module")
def tiny():
    import_plugins([str(PLUGIN)])
    return get_benchmark("tiny-table").load()


def test_the_plugin_table_runs_as_a_benchmark_with_its_controls_and_baselines(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "searchers.py"), "--plugin", str(PLUGIN),
           "--benchmark", "tiny-table", "--out", str(out), "--seeds", "3", "--trials", "10",
           "--searchers", "wl-bo", "--modes", "mo", "--noise", "off"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "tiny-table.json").read_text())
    assert results["rows"] == 24 and results["seeds"] == [0, 1, 2]
    block = results["results"]["mo/noise-off"]
    assert list(block["values"]) == ["random", "random-params", "wl-bo", "largest",
                                     "rank-params"]
    assert all(len(v) == 3 and len(v[0]) == 10 for k, v in block["values"].items())
    wl = block["comparisons"]["wl-bo"]
    assert set(wl) == {"random", "random-params"}
    assert set(wl["random"]["10"]) == {"won", "p_better", "p_two_sided"}
    assert (out / "tiny-table.md").read_text().startswith("### tiny-table: 24 recorded")
    assert "| wl-bo |" in done.stdout and "vs random-params" in done.stdout
    assert {p.name for p in tmp_path.iterdir()} == {"out"}  # nothing else written


def test_an_unknown_benchmark_is_one_line_and_exit_2(tmp_path):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "searchers.py"), "--benchmark",
           "tiny-tabel", "--seeds", "1", "--trials", "2"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().startswith("error: unknown benchmark 'tiny-tabel'; registered:")
    assert "\n" not in done.stderr.strip()


def test_a_benchmark_naming_an_unrecorded_metric_is_refused(tiny):
    from searchers.benchmarks import TabularBenchmark

    bad = TabularBenchmark("bad", lambda: tiny, score="sst", front=("acc", "params"))
    with pytest.raises(BenchmarkError, match=r"records no 'sst'; use one of acc, params"):
        bad.load()


def test_wilcoxon_one_sided_follows_the_direction():
    a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]
    b = [0.5, 1.2, 2.9, 3.0, 4.4, 5.1, 6.95]
    greater = scipy_wilcoxon(np.subtract(a, b), zero_method="wilcox", alternative="greater")
    assert wilcoxon(a, b, "greater") == pytest.approx(greater.pvalue) == pytest.approx(1 / 128)
    assert wilcoxon(a, b, "less") == pytest.approx(1.0)
    assert wilcoxon(a, a, "greater") == 1.0
    hv = compare_runs(np.array(a), np.array(b), "mo")
    assert hv.won == 1.0 and hv.p_better == pytest.approx(1 / 128)
    regret = compare_runs(np.array(a), np.array(b), "so")  # higher regret is worse
    assert regret.won == 0.0 and regret.p_better == pytest.approx(1.0)


def test_a_rows_graph_is_a_chain_of_its_layers_and_its_neighbours_differ_in_one_choice(tiny):
    arch = tiny.validate({"width": 64, "layers": 2, "layer1.op": "conv", "layer2.op": "mlp"})
    g = tiny.row_graph(arch)
    assert list(g.edges) == [("layers=2", "width=64"), ("width=64", "layer1"),
                             ("layer1", "layer2")]
    labels = [g.nodes[n]["label"] for n in ("layers=2", "layer1", "layer2")]
    assert labels == ["layers=2", "layer:op=conv", "layer:op=mlp"]
    short = tiny.row_graph(tiny.validate({"width": 64, "layers": 1, "layer1.op": "conv"}))
    assert list(short.nodes) == ["layers=1", "width=64", "layer1"]
    row = tiny.row_of(arch)
    near = [tiny.archs[r] for r in tiny.neighbours(row)]
    # the width, two other ops in each layer; depth 1 differs in two choices canonically
    # (layer 2's op falls back to its default), so it is not among the nearest
    assert len(near) == 5
    for other in near:
        assert sum(other[k] != arch[k] for k in arch) == 1


def test_the_wl_kernel_is_one_on_equal_graphs_and_below_on_different_ones(tiny):
    graphs = [tiny.row_graph(a) for a in tiny.archs[:3]] + [tiny.row_graph(tiny.archs[0])]
    k = wl_kernel([wl_features(g) for g in graphs], 2)
    assert np.allclose(np.diag(k), 1.0) and k[0, 3] == pytest.approx(1.0)
    assert 0 < k[0, 1] < 1


def test_the_2d_hypervolume_improvement_is_exact():
    rng = np.random.default_rng(0)
    front = np.array([[0.1, 0.9], [0.4, 0.5], [0.8, 0.2]])
    ref = np.array([1.1, 1.1])
    points = rng.uniform(0, 1.2, size=(50, 2))
    gains = hv_improvement_2d(front, points, ref)
    base = hypervolume(front, ref)
    expected = [hypervolume(np.vstack([front, p]), ref) - base for p in points]
    assert np.allclose(gains, expected)


@pytest.mark.parametrize("name", ["wl-bo", "local-search", "regularized-evolution"])
@pytest.mark.parametrize("objectives", [("acc",), ("acc", "params")])
def test_on_a_pool_each_proposal_is_a_recorded_row_not_a_mapped_one(tiny, name, objectives):
    """Mutants and random points are rows themselves, so the benchmark's nearest-row
    mapping (which favours rows in sparse regions) never moves them; repeats never
    happen before the table is used up."""
    options = {"wl-bo": {"n_startup_trials": 4},
               "regularized-evolution": {"population_size": 4, "sample_size": 2}}
    direction = {"acc": "maximize", "params": "minimize"}
    search = StudySearch.open(tiny, name, seed=3,
                              objectives=tuple(Objective(o, direction[o]) for o in objectives),
                              sampler_options=options.get(name, {}))
    evaluator = TabularEvaluator(tiny, objectives, seed=3)
    bridge = SpaceBridge(tiny)
    for _ in range(12):
        c = search.ask()
        assert bridge.architecture(c.params).id == c.arch.id
        search.tell(c, evaluator(c.arch))
    done = [t for t in search.study.trials if t.state.name == "COMPLETE"]
    assert len(done) == 12 and len({t.user_attrs["arch_id"] for t in done}) == 12


def test_local_search_moves_to_a_neighbour_of_its_first_architecture(tiny):
    search = StudySearch.open(tiny, "local-search", seed=0,
                              objectives=(Objective("acc", "maximize"),))
    evaluator = TabularEvaluator(tiny, ("acc",), seed=0)
    first = search.ask()
    search.tell(first, evaluator(first.arch))
    second = search.ask()
    assert tiny.row_of(second.arch) in set(tiny.neighbours(tiny.row_of(first.arch)).tolist())


def _tabular_run(tiny, folder, trials: int, seed: int = 5):
    """A ``method: search`` run folder whose study searched the tiny table (a hand-written
    metrics.json, as tests/test_report.py writes, beside a real study)."""
    from nas.rundir import RunDir
    from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study

    run = RunDir(folder, {"method": "search", "name": "tiny"})
    latency = {f"batch{b}": {"median_ms": 1.0, "seq_len": 8} for b in (1, 32)}
    run.save_json("metrics.json", {"teacher": {"dev": {"accuracy": 0.9}, "params": 10,
                                               "flops": 10, "latency": latency}})
    spec = StudySpec.for_run(searcher="random", name="tiny", run_dir=folder, seed=seed,
                             settings=StudySettings(), options=StudyOptions(),
                             default_trials=trials)
    return run_study(spec, tiny, TabularEvaluator(tiny, ("acc", "params"), seed=seed))


def test_the_report_of_a_tabular_run_compares_its_front_with_the_controls(tiny, tmp_path):
    """Every row evaluated: the run's front is the table's (hypervolume 1), and each
    control given as many evaluations reaches it in every seed: not better."""
    from nas.report import write_report

    _tabular_run(tiny, tmp_path / "run", trials=tiny.size())
    text, data = write_report(tmp_path / "run")
    assert ("front hypervolume 1.0000; random reaches ≥ 1.0000 in 10 of 10 seeds, "
            "random-params in 10 of 10: not better than the controls for this budget."
            ) in text
    assert "Controls (tiny-table: acc and params, 24 evaluations each" in text
    found = data["controls"]
    assert found["run"] and found["evaluations"] == 24 and found["hypervolume"] == 1.0
    assert found["front"] == ["acc", "params"] and len(set(found["seeds"])) == 10
    assert {c: v["reached"] for c, v in found["controls"].items()} == {
        "random": 10, "random-params": 10}
    assert "controls" not in data["metrics"]  # the report's finding, not the run's record


def test_a_front_found_in_few_evaluations_is_better_than_the_controls(tiny):
    """Only the table's front rows evaluated: the controls, as many evaluations each,
    seldom evaluate all of those that count."""
    from searchers.benchmarks import front_mask, run_against_controls, sign

    table = np.column_stack([sign(tiny, n) * tiny.metrics[n] for n in ("acc", "params")])
    rows = np.flatnonzero(front_mask(table)).tolist()
    found = run_against_controls(get_benchmark("tiny-table"), rows, run_seed=0)
    assert found["evaluations"] == len(rows) < tiny.size() and found["hypervolume"] == 1.0
    # 2 of 10 seeds: at the bar (a control reaching it in at most a fifth of the seeds)
    assert [v["reached"] for v in found["controls"].values()] == [2, 0]
    assert found["better"] is True
    again = run_against_controls(get_benchmark("tiny-table"), rows, run_seed=1)
    assert again["seeds"] != found["seeds"]  # derived from the run's seed


def test_the_report_of_a_search_that_trains_models_says_the_comparison_was_not_run(tmp_path):
    from searchers.loop import run_study
    from searchers.report import study_sections
    from tests.test_study_loop import Synthetic, space, spec_for

    s = space()
    run_study(spec_for(tmp_path, searcher="random", n_trials=3), s, Synthetic(s))
    found: dict = {}
    lines, _ = study_sections(tmp_path, into=found)
    assert ("Comparison with the controls not run (not a tabular space: each evaluation "
            "trains a model).") in lines
    assert found["controls"] == {"run": False, "reason": "not a tabular space"}


def test_a_runs_space_finds_its_benchmark_and_a_space_with_models_finds_none(tiny):
    from searchers.benchmarks import benchmark_of_space

    assert benchmark_of_space("tiny-table").name == "tiny-table"  # a plug-in's, by its table
    assert benchmark_of_space("nas-bench-bert").front == ("sst", "params")
    assert benchmark_of_space("adabert") is None
