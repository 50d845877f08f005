"""MobileBERT (docs/reference.md#mobilebert): the grid's MiniLM-shaped student, progressive
knowledge transfer (what each stage trains and freezes, the losses, the strategies), the hf export,
the recipe's configuration, and the smoke run end to end through ``nas run`` (with the grid
search as a slow test)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from nas.builder import build_child
from nas.cli import main
from nas.config import ConfigError
from nas.distill.losses import attention_kl, grouped_attention_kl
from nas.distill.mobilebert import (
    PktWeights,
    check_pair,
    copy_from_teacher,
    group_of,
    parameter_groups,
    run_prediction,
    run_transfer,
    transfer_stages,
)
from nas.errors import NasError
from nas.space import get_space
from nas.train import TrainSettings
from recipes.common import load_typed
from recipes.mobilebert import TINY_CHOICES, MobileBert

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "mobilebert_smoke.yaml"
EXPERIMENTS = sorted((ROOT / "experiments").glob("mobilebert_*.yaml"))
V = 120


# ---------------------------------------------------------------------- the grid


def test_the_grid_holds_the_minilm_shaped_student_and_keeps_the_paper_points():
    from transformers import MobileBertForSequenceClassification

    from nas import hf
    from nas.cost import count_costs

    grid = get_space("mobilebert-grid")
    assert grid.size() == 16_896  # 10,368 before depth 6 and 12 heads were added
    arch = grid.validate({**grid.default(), "hidden_size": 384, "num_hidden_layers": 6,
                          "num_attention_heads": 12, "intra_bottleneck_size": 192})
    config = hf.hf_config(grid.config, arch)
    theirs = sum(p.numel() for p in MobileBertForSequenceClassification(config).parameters())
    assert count_costs(grid, arch).params == theirs
    # mobilebert-tiny's block moved to 6 layers and width 384 is a grid point too
    grid.validate({**grid.default(), "hidden_size": 384, "num_hidden_layers": 6, **TINY_CHOICES})


# ------------------------------------------------------------------------ losses


def test_grouped_attention_kl_is_the_papers_loss_for_equal_heads_and_zero_at_the_mean():
    g = torch.Generator().manual_seed(0)
    s, t = torch.randn(2, 4, 5, 5, generator=g), torch.randn(2, 4, 5, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    assert torch.allclose(grouped_attention_kl(s, t, mask), attention_kl(s, t, query_mask=mask))
    # a student head equal to its group's mean distribution has zero loss
    teacher = torch.randn(2, 4, 5, 5, generator=g)
    mean = teacher.softmax(-1).view(2, 2, 2, 5, 5).mean(2)  # 4 teacher heads -> 2 groups
    assert grouped_attention_kl(mean.log(), teacher).abs().item() < 1e-6
    # identical heads within each group: the loss is the head-to-head KL with one of them
    twin = s[:, :2].repeat_interleave(2, dim=1)  # (B, 4, L, L): heads 0,0,1,1
    assert torch.allclose(grouped_attention_kl(t[:, :2], twin), attention_kl(t[:, :2], s[:, :2]),
                          atol=1e-6)
    with pytest.raises(NasError, match="must divide"):
        grouped_attention_kl(torch.randn(1, 3, 5, 5), torch.randn(1, 4, 5, 5))


# ------------------------------------------------------------------- transfer


def _pair(heads: int = 2, **arch):
    """A 2-layer bert teacher of width 32 with 4 heads and a grid student of its depth
    and width (as the recipe pairs MiniLM-L6-H384 with a 6 × 384 student)."""
    teacher_space = get_space("bert", vocab_size=V, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, intermediate_size=48)
    torch.manual_seed(0)
    teacher = build_child(teacher_space).eval()
    space = get_space("mobilebert-grid", vocab_size=V, embedding_size=16, hidden_size=32,
                      num_hidden_layers=2, intra_bottleneck_size=(16, 24),
                      num_attention_heads=(2, 4), num_feedforward_networks=(1, 2),
                      intermediate_size=32)
    a = space.validate({**space.default(), "num_attention_heads": heads, **arch})
    student = build_child(space, a)
    copy_from_teacher(student, teacher)
    return teacher_space, teacher, space, a, student


def _batches(n: int = 3):
    out = []
    for i in range(n):
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(1, V, (8, 10), generator=g)
        mask = torch.ones(8, 10, dtype=torch.long)
        mask[:3, 7:] = 0  # padding in some rows
        out.append({"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(
            ids), "labels": torch.randint(0, 2, (8,), generator=g), "index": torch.arange(8)})
    return out


def _source(batches):
    return lambda stage: (lambda epoch, start: batches[start:])


def _snapshot(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _changed(before, after):
    """The parameter groups with any tensor changed."""
    return {group_of(k) for k in before if not torch.equal(before[k], after[k])}


def test_parameters_group_by_block():
    *_, student = _pair()
    groups = parameter_groups(student)
    assert set(groups) == {"embeddings", "L0", "L1", "head"}
    # the linear edge into a block's input bottleneck belongs to that block
    assert "edges.L0_out->L1_bin.dense.weight" in groups["L1"]
    assert all(n.startswith("nodes.head.") for n in groups["head"])


def test_the_teacher_tensors_that_fit_are_copied():
    _, teacher, _, _, student = _pair()
    copied = copy_from_teacher(student, teacher)
    assert "nodes.emb.position_embeddings.weight" in copied
    assert {"nodes.head.classifier.weight", "nodes.head.pooler.dense.weight"} <= set(copied)
    assert torch.equal(student.state_dict()["nodes.head.classifier.weight"],
                       teacher.state_dict()["nodes.head.classifier.weight"])


def test_progressive_transfer_freezes_every_lower_block_and_the_losses_decrease():
    """Stage ℓ changes block ℓ only: the embeddings and the blocks below keep their
    weights bit for bit, the blocks above and the head are untouched; every stage's loss
    falls over its epochs."""
    _, teacher, _, _, student = _pair()
    snaps, history = [_snapshot(student)], {}

    def on_stage(stage, result):
        snaps.append(_snapshot(student))
        history[stage.name] = [row["loss"] for row in result.history]

    stages = transfer_stages("progressive", 2)
    assert [s.name for s in stages] == ["embeddings", "layer1", "layer2"]
    run_transfer(student, teacher, stages, TrainSettings(epochs=4, lr=3e-3), _source(_batches()),
                 3, seed=0, on_stage=on_stage)
    assert [_changed(a, b) for a, b in zip(snaps, snaps[1:], strict=False)] == [
        {"embeddings"}, {"L0"}, {"L1"}]
    for name, losses in history.items():
        assert losses[-1] < losses[0], (name, losses)
    assert all(p.requires_grad for p in student.parameters())  # unfrozen for what follows


def test_finished_stages_are_not_run_again(tmp_path):
    """With a workdir each finished stage leaves its weights; a second call (a resumed run)
    loads them instead of training, and ends with the same student."""
    _, teacher, space, arch, student = _pair()
    stages = transfer_stages("progressive", 2)
    run_transfer(student, teacher, stages, TrainSettings(lr=1e-3), _source(_batches()), 3,
                 workdir=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "transfer-embeddings.safetensors", "transfer-layer1.safetensors",
        "transfer-layer2.safetensors"]
    again, ran = build_child(space, arch), []
    run_transfer(again, teacher, stages, TrainSettings(lr=1e-3), _source(_batches()), 3,
                 workdir=tmp_path, on_stage=lambda stage, result: ran.append(stage.name))
    assert ran == [] and _changed(_snapshot(student), _snapshot(again)) == set()


def test_the_published_codes_lower_learning_rate_trains_the_lower_blocks_too():
    _, teacher, _, _, student = _pair()
    snaps = [_snapshot(student)]
    run_transfer(student, teacher, transfer_stages("progressive", 2), TrainSettings(lr=3e-3),
                 _source(_batches()), 3, lower_lr_scale=0.1,
                 on_stage=lambda stage, result: snaps.append(_snapshot(student)))
    assert [_changed(a, b) for a, b in zip(snaps, snaps[1:], strict=False)] == [
        {"embeddings"}, {"embeddings", "L0"}, {"embeddings", "L0", "L1"}]


def test_the_strategy_switch_changes_what_trains():
    """all_at_once: one stage trains the embeddings and every block together, for as many
    epochs as the progressive stages; prediction_only: no transfer at all, and the
    prediction stage trains everything, head included."""
    progressive = transfer_stages("progressive", 6)
    (together,) = transfer_stages("all_at_once", 6)
    assert together.epochs_scale == len(progressive) == 7
    assert set(together.train) == {g for s in progressive for g in s.train}
    assert together.layers == tuple(range(6)) and together.embeddings
    assert transfer_stages("prediction_only", 6) == []
    with pytest.raises(NasError, match="transfer must be one of"):
        transfer_stages("layerwise", 6)

    _, teacher, _, _, student = _pair()
    before = _snapshot(student)
    run_transfer(student, teacher, transfer_stages("all_at_once", 2), TrainSettings(lr=1e-3),
                 _source(_batches()), 3)
    assert _changed(before, _snapshot(student)) == {"embeddings", "L0", "L1"}

    _, _, _, _, student = _pair()
    before = _snapshot(student)
    logits, one = torch.randn(8, 2).numpy(), _batches(1)
    result = run_prediction(student, logits, TrainSettings(epochs=3, lr=1e-3),
                            lambda epoch, start: one[start:], 1)
    assert _changed(before, _snapshot(student)) == {"embeddings", "L0", "L1", "head"}
    assert result.history[-1]["loss"] < result.history[0]["loss"]


def test_fewer_student_heads_learn_grouped_teacher_heads():
    """A 2-head student learns a 4-head teacher: each head from the mean of two."""
    _, teacher, _, _, student = _pair(heads=2)
    history = []
    run_transfer(student, teacher, transfer_stages("progressive", 2)[1:2],
                 TrainSettings(epochs=4, lr=3e-3), _source(_batches()), 3,
                 weights=PktWeights(feature_map=0, mean=0, variance=0),
                 on_stage=lambda s, r: history.extend(row["attention"] for row in r.history))
    assert history[-1] < history[0]


def test_a_student_the_teacher_cannot_teach_is_refused_in_one_line():
    teacher = {"num_hidden_layers": 6, "hidden_size": 384, "num_attention_heads": 12}
    student = {"num_hidden_layers": 6, "hidden_size": 384}
    check_pair(student, {"num_attention_heads": 4}, teacher)
    with pytest.raises(NasError, match="num_hidden_layers=12 but the teacher has 6"):
        check_pair({**student, "num_hidden_layers": 12}, {"num_attention_heads": 4}, teacher)
    with pytest.raises(NasError, match="num_attention_heads=5 does not divide"):
        check_pair(student, {"num_attention_heads": 5}, teacher)


def test_a_transferred_student_exports_as_a_stock_transformers_mobilebert(tmp_path):
    from transformers import MobileBertForSequenceClassification

    from nas.export import export

    _, teacher, space, arch, student = _pair(heads=4)
    run_transfer(student, teacher, transfer_stages("progressive", 2), TrainSettings(lr=1e-3),
                 _source(_batches()), 3)
    export(space, arch, tmp_path / "hf", model=student, fmt="hf", labels=["neg", "pos"])
    theirs = MobileBertForSequenceClassification.from_pretrained(str(tmp_path / "hf")).eval()
    batch = _batches(1)[0]
    student.eval()
    with torch.no_grad():
        ours = student(batch).logits
        ref = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     token_type_ids=batch["token_type_ids"]).logits
    assert (ours - ref).abs().max().item() < 1e-4


# ------------------------------------------------------------------------ config


@pytest.mark.parametrize("path", EXPERIMENTS, ids=lambda p: p.name)
def test_each_experiment_header_says_what_it_got(path):
    # parsing: tests/test_experiment_files.py
    assert "Results" in path.read_text().split("\nmethod:")[0]


def test_the_ablation_arms_are_one_set_each():
    for mode in ("progressive", "all_at_once", "prediction_only"):
        assert load_typed(SMOKE, MobileBert, [f"transfer={mode}"]).transfer == mode
    assert load_typed(SMOKE, MobileBert, ["pkt.lower_lr_scale=0.1"]).pkt.lower_lr_scale == 0.1
    with pytest.raises(ConfigError, match="transfer must be progressive or all_at_once or "
                                          "prediction_only, got 'layerwise'"):
        load_typed(SMOKE, MobileBert, ["transfer=layerwise"])


def test_the_search_is_opt_in_and_multi_trial(capsys):
    assert MobileBert().check_searcher(None) is None
    assert main(["run", str(SMOKE), "--searcher", "differentiable"]) == 2
    assert "cannot use --searcher differentiable" in capsys.readouterr().err


def test_bad_student_shapes_fail_before_any_stage():
    with pytest.raises(ConfigError, match="not divisible by num_attention_heads"):
        load_typed(SMOKE, MobileBert, ["student.arch.num_attention_heads=5"])
    with pytest.raises(ConfigError, match="pkt.batch_size .16. and prediction.batch_size .8."):
        load_typed(SMOKE, MobileBert, ["prediction.batch_size=8"])


def test_the_sst2_budget_is_the_tiny_shaped_students_size():
    """The search's parameter budget is the comparison arm's size, so the searched point
    is compared with the mobilebert-tiny-shaped student at (at most) equal parameters."""
    from nas.cost import count_costs

    config = load_typed(ROOT / "experiments" / "mobilebert_sst2.yaml", MobileBert)
    (arm,) = config.compare
    tiny = count_costs(config.arm_space(arm["arch"], 2), None, config.data.max_seq_len)
    assert config.multi_trial.max_params == pytest.approx(tiny.params, rel=0.01)


# ------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
    return smoke_runs("mobilebert")


def test_smoke_run_end_to_end(smoke_run):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from nas.report import write_report
    from nas.runtime import load

    metrics = json.loads((smoke_run / "metrics.json").read_text())
    teacher, student, (arm,) = metrics["teacher"], metrics["searched"], metrics["arms"]
    assert metrics["transfer"] == "progressive" and metrics["evaluation"]["split"] == "test"
    for row in (teacher, student, arm):
        assert 0.0 <= row["test"]["accuracy"] <= 1.0 and row["flops"] > 0
        assert {"batch1", "batch32"} <= set(row["latency"])
    assert student["params"] < teacher["params"] / 3
    assert student["shape"]["num_hidden_layers"] == 6 and student["shape"]["hidden_size"] == 384
    assert arm["tag"] == "mobilebert-tiny-shaped" and arm["shape"]["num_attention_heads"] == 4
    log = [json.loads(line) for line in (smoke_run / "log.jsonl").read_text().splitlines()]
    names = [r["name"] for r in log if r["stage"] == "transfer" and r["tag"] == "student"]
    assert names == ["embeddings"] + [f"layer{i}" for i in range(1, 7)]
    assert not list(smoke_run.glob("transfer-*")) and not list(smoke_run.glob("*checkpoint*"))

    text, _ = write_report(smoke_run)
    assert "## MobileBERT recipe" in text and "| mobilebert-tiny-shaped |" in text

    hf_dir = smoke_run / "export_hf"
    model = AutoModelForSequenceClassification.from_pretrained(str(hf_dir)).eval()
    assert type(model).__name__ == "MobileBertForSequenceClassification"
    texts = ["a wonderful , moving film", "dull and far too long"]
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    with torch.no_grad():
        hf_logits = model(**tok(texts, return_tensors="pt", padding=True)).logits
    native = load(smoke_run / "export")
    assert torch.allclose(hf_logits, torch.as_tensor(native(native.encode(texts))), atol=1e-4)


@pytest.mark.slow
def test_smoke_grid_search_then_prediction_only_arm(smoke_run, tmp_path):
    """The grid search (2 trials, budget, Pareto front in the report), and the
    prediction-only ablation with the same seed: no transfer stage runs."""
    from nas.report import write_report

    run_dir = tmp_path / "search"
    assert main(["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
                 "--searcher", "random", "--n-trials", "2", "--set", "compare=[]"]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    search = metrics["search"]
    assert search["searcher"] == "random" and len(search["runs"]) == 2
    assert all(r["costs"]["params"] <= 8e6 for r in search["runs"])
    assert metrics["searched"]["arch"] == search["best_arch"]
    text, _ = write_report(run_dir)
    assert "Pareto front" in text
    # a trial's model exports from the study as a stock transformers MobileBERT
    out = tmp_path / "trial_hf"
    assert main(["export", "--run", str(run_dir), "--trial", str(search["best_trial"]),
                 "-o", str(out), "--format", "hf"]) == 0
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(str(out))
    assert model.config.intra_bottleneck_size == search["best_arch"]["intra_bottleneck_size"]

    arm = tmp_path / "prediction_only"
    assert main(["run", str(SMOKE), "--run-dir", str(arm), "--no-progress",
                 "--set", "transfer=prediction_only", "--set", "compare=[]"]) == 0
    log = [json.loads(line) for line in (arm / "log.jsonl").read_text().splitlines()]
    assert not [r for r in log if r["stage"] == "transfer"]
    assert math.isfinite(json.loads((arm / "metrics.json").read_text())["searched"]["params"])
