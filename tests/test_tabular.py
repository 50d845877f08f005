"""Tabular benchmarks (nas/pool.py): the finite-pool spaces against their files, the mapping
of a proposal to the nearest unevaluated recorded row, the seeded noise of the tabular
evaluator, short studies through the real loop, and one-line errors."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest

from evaluators.base import EvaluatorError
from evaluators.tabular import TabularEvaluator
from nas.errors import NasError
from nas.pool import BenchmarkDataError, PoolSpace, benchmark_dir
from nas.space import get_space, list_spaces
from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study
from searchers.optuna_bridge import Budget, SpaceBridge
from searchers.results import complete_trials

BERT, GPT = "nas-bench-bert", "hw-gpt-bench"


@pytest.fixture(scope="module")
def bert() -> PoolSpace:
    return get_space(BERT)


@pytest.fixture(scope="module")
def gpt() -> PoolSpace:
    return get_space(GPT)


def test_both_benchmarks_are_registered_as_tabular_spaces():
    assert list_spaces(tabular=True) == [GPT, BERT]
    assert not set(list_spaces(tabular=False)) & {GPT, BERT}


def test_nas_bench_bert_holds_each_distinct_recorded_encoder_once_duplicates_averaged(bert):
    entries = json.loads((benchmark_dir() / "nas_bench_bert/BERT_benchmark.json").read_text())
    keys = [json.dumps(e["hparams"]["model_hparam_overrides"], sort_keys=True) for e in entries]
    assert bert.size() == len(set(keys)) < len(entries)
    first_twice = next(k for k in keys if keys.count(k) == 2)
    pair = [e for e, k in zip(entries, keys, strict=True) if k == first_twice]
    nc = pair[0]["hparams"]["model_hparam_overrides"]["nas_config"]["encoder_layers"]
    arch = {"hidden": pair[0]["hparams"]["model_hparam_overrides"]["hidden_size"],
            "layers": len(nc)}
    ops = {"SA": "sa", "LT": "lt", "DSC": "dsc"}
    for k, layer in enumerate(nc, start=1):
        arch |= {f"layer{k}.op": f"{ops[layer['operation_type']]}_"
                                 f"{str(layer['operation_parameter']).lower()}",
                 f"layer{k}.heads": layer["num_operation_heads"],
                 f"layer{k}.ffn": layer["feed_forward_dimension"],
                 f"layer{k}.ffn_stacks": layer["num_feed_forward"]}
    row = bert.row_of(arch)
    assert row is not None
    assert bert.record(row)["sst"] == pytest.approx(
        statistics.mean(e["scores"]["sst"] for e in pair))


def test_hw_gpt_bench_drops_the_top_percent_of_latency_and_uses_the_median(gpt):
    entries = json.loads((benchmark_dir() / "hw_gpt_bench/gpt_s_ppl_cpu_latency.json")
                         .read_text())
    medians = sorted(statistics.median(e["cpu_latency_s_runs"]) for e in entries)
    assert gpt.size() == len(entries) - len(entries) // 100
    assert gpt.metrics["latency_s"].max() == pytest.approx(medians[-len(entries) // 100 - 1])
    assert gpt.metrics["latency_s"].min() == pytest.approx(medians[0])
    assert gpt.best("perplexity") == pytest.approx(min(
        e["perplexity"] for e in entries
        if statistics.median(e["cpu_latency_s_runs"]) <= medians[-len(entries) // 100 - 1]))


def test_absent_layers_do_not_make_another_architecture(bert, gpt):
    two = next(a for a in bert.archs if a["layers"] == 2)
    other = dict(two) | {"layer3.op": "dsc_9", "layer4.ffn": 1024}
    assert bert.validate(other) == two and bert.row_of(other) is not None
    short = {k: v for k, v in two.items() if not k.startswith(("layer3", "layer4"))}
    assert bert.validate(short) == two
    ten = next(a for a in gpt.archs if a["layers"] == 10)
    assert gpt.validate(dict(ten) | {"layer12.heads": 4}).id == ten.id


def test_a_proposal_maps_to_the_nearest_unevaluated_recorded_row(bert):
    arch = bert.archs[7]
    assert bert.nearest(arch) == 7  # recorded and free: itself
    d = bert.distances(arch)
    assert d[7] == 0
    nearest_other = int(np.argmin(np.where(np.arange(len(d)) == 7, np.inf, d)))
    assert bert.nearest(arch, taken={arch.id}) == nearest_other
    # the stated distance: one op changed counts 1, a two-valued number changed counts 1
    changed = dict(arch) | {"layer1.op": "dsc_5" if arch["layer1.op"] != "dsc_5" else "sa_sdp"}
    assert bert.distances(changed)[7] == 1
    wider = dict(arch) | {"hidden": 384 - arch["hidden"]}
    assert bert.distances(wider)[7] == 1
    # a budget restricts the rows it maps to
    allowed = bert.within({"params": float(np.median(bert.metrics["params"]))})
    assert allowed[bert.nearest(bert.archs[int(np.argmax(bert.metrics["params"]))],
                                allowed=allowed)]
    assert bert.nearest(arch, taken={a.id for a in bert.archs}) is None


def test_the_bridge_maps_within_the_budget_and_records_what_was_proposed(bert):
    limit = float(np.median(bert.metrics["params"]))
    bridge = SpaceBridge(bert, Budget(max_params=limit))
    rng = np.random.default_rng(0)
    for _ in range(20):
        params = {name: dist.to_external_repr(rng.integers(len(dist.choices)))
                  if hasattr(dist, "choices") else int(rng.choice(range(
                      dist.low, dist.high + 1, dist.step)))
                  for name, dist in bridge.distributions.items()}
        proposal = bridge.propose(params)
        assert proposal.ok and bert.row_of(proposal.arch) is not None
        assert proposal.costs["params"] <= limit
        if proposal.mapped_from is not None:
            assert bert.row_of(proposal.mapped_from) is None or \
                bert.costs_of(proposal.mapped_from)["params"] > limit
    everything = {a.id for a in bert.archs}  # every row taken: the nearest, a repeat
    assert bridge.propose(params, everything).arch == proposal.arch
    assert not SpaceBridge(bert, Budget(max_params=1.0)).propose(params).ok


def test_tabular_noise_is_seeded_absolute_for_scores_and_relative_for_perplexity(bert, gpt):
    arch = bert.archs[3]
    recorded = bert.record(3)
    clean = TabularEvaluator(bert, ("sst", "params"))(arch)
    assert clean.values == (recorded["sst"], recorded["params"])
    a = TabularEvaluator(bert, ("sst", "params"), noise_sd=0.4, seed=1)
    assert a(arch).values == a(arch).values == \
        TabularEvaluator(bert, ("sst", "params"), noise_sd=0.4, seed=1)(arch).values
    assert a(arch).values[1] == recorded["params"]  # costs are never noisy
    assert a(arch).metrics["sst"] == recorded["sst"]  # metrics: the recorded truth
    other = TabularEvaluator(bert, ("sst",), noise_sd=0.4, seed=2)(arch).values[0]
    assert other != a(arch).values[0]
    errors = [a(x).values[0] - bert.record(i)["sst"] for i, x in enumerate(bert.archs)]
    assert 0.35 < float(np.std(errors)) < 0.45 and abs(float(np.mean(errors))) < 0.06
    g = TabularEvaluator(gpt, noise_rel=0.01, seed=0)
    assert g.objectives[0].name == "perplexity" and g.objectives[0].direction == "minimize"
    ratios = [g(x).values[0] / gpt.record(i)["perplexity"] for i, x in
              enumerate(gpt.archs[:400])]
    assert 0.008 < float(np.std(ratios)) < 0.012


@pytest.mark.parametrize("name, objectives", [(BERT, ("sst",)), (GPT, ("perplexity",)),
                                              (BERT, ("glue", "params"))])
@pytest.mark.parametrize("searcher", ["random", "tpe"])
def test_a_ten_trial_study_runs_through_the_loop(name, objectives, searcher, tmp_path):
    space = get_space(name)
    evaluator = TabularEvaluator(space, objectives, noise_sd=0.4, noise_rel=0.01, seed=0)
    settings = StudySettings(max_params=float(np.quantile(space.metrics["params"], 0.7)))
    memory = StudyOptions(storage=":memory:")  # thousands of fsyncs saved
    spec = StudySpec.for_run(searcher=searcher, name="tab", run_dir=tmp_path, seed=0,
                             settings=settings, options=memory, default_trials=10)
    study = run_study(spec, space, evaluator)
    trials = complete_trials(study)
    assert len(trials) == 10 and len(study.trials) == 10  # nothing rejected or repeated
    ids = [t.user_attrs["arch_id"] for t in trials]
    assert len(set(ids)) == 10
    rows = [space.row_of_id(i) for i in ids]
    assert None not in rows
    assert all(t.user_attrs["costs"]["params"] <= settings.max_params for t in trials)
    mapped = sum("proposed" in t.user_attrs for t in trials)
    if searcher == "random":  # a uniform recorded row: never mapped
        assert mapped == 0
    again = run_study(StudySpec.for_run(
        searcher=searcher, name="tab", run_dir=tmp_path / "again", seed=0, settings=settings,
        options=memory, default_trials=10), space, evaluator)
    assert [t.user_attrs["arch_id"] for t in complete_trials(again)] == ids


def test_no_data_folder_is_a_one_line_error(monkeypatch):
    """No default folder (as for tasks): without ``NAS_DATA_DIR`` or ``data_dir`` the loader
    names the variable instead of reading a folder outside the repository."""
    monkeypatch.delenv("NAS_DATA_DIR", raising=False)
    with pytest.raises(BenchmarkDataError, match=r"^no benchmark data folder: set NAS_DATA_DIR"
                                                 r" to the data folder") as err:
        get_space(BERT)
    assert "\n" not in str(err.value)


def test_missing_and_malformed_files_are_one_line_errors(tmp_path):
    with pytest.raises(BenchmarkDataError, match=r"^nas-bench-bert: benchmark file .*"
                                                 r"BERT_benchmark.json not found; set "
                                                 r"NAS_DATA_DIR") as err:
        get_space(BERT, data_dir=str(tmp_path))
    assert "\n" not in str(err.value)
    folder = tmp_path / "hw_gpt_bench"
    folder.mkdir()
    table = folder / "gpt_s_ppl_cpu_latency.json"
    table.write_text("[{")
    with pytest.raises(NasError, match=r"hw-gpt-bench: .* is not valid JSON") as err:
        get_space(GPT, data_dir=str(tmp_path))
    assert "\n" not in str(err.value)
    table.write_text(json.dumps([{"arch": {"sample_embed_dim": 192}}]))
    with pytest.raises(NasError, match=r"is malformed \(missing key 'sample_n_layer'\)"):
        get_space(GPT, data_dir=str(tmp_path))


def test_the_tabular_evaluator_refuses_bad_set_ups_in_one_line(bert):
    with pytest.raises(EvaluatorError, match=r"^tabular evaluator: nas-bench-bert records no "
                                             r"'perplexity'; choose from glue, "):
        TabularEvaluator(bert, ("perplexity",))
    with pytest.raises(EvaluatorError, match="noise_sd must be a number >= 0"):
        TabularEvaluator(bert, noise_sd=-1)
    with pytest.raises(EvaluatorError, match="is not a tabular benchmark"):
        TabularEvaluator(get_space("adabert", hidden=16, vocab_size=50, max_depth=2))
    unrecorded = dict(bert.archs[0]) | {"layer1.op": "lt_dft", "layer2.op": "lt_dft",
                                        "layer1.ffn_stacks": 3, "layer2.ffn_stacks": 3}
    if bert.row_of(unrecorded) is None:
        with pytest.raises(EvaluatorError, match="is not a recorded row of nas-bench-bert"):
            TabularEvaluator(bert)(bert.validate(unrecorded))
    with pytest.raises(NasError, match="tabular benchmark"):
        bert.resolve(bert.archs[0])
