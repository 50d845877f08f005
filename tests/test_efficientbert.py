"""EfficientBERT (docs/reference.md#efficientbert): partially fixed spaces, the warm-up supernet
(fit layer, cache, resume), budget sampling, the recipe's configuration, and the smoke run end to
end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.builder import build_supernet, extract_child
from nas.cli import main
from nas.config import ConfigError
from nas.cost import count_costs
from nas.distill.warmup import (
    SpaceFit,
    WarmupSettings,
    check_teacher_fits,
    sample_under_budget,
    warmup_arch,
    warmup_supernet,
)
from nas.errors import ArchitectureError, NasError
from nas.methods import load_experiment
from nas.space import fix_choices, get_space

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "efficientbert_smoke.yaml"
SMALL = {"vocab_size": 30522, "layers": 2, "hidden": 24, "heads": 2, "embedding_size": 8,
         "max_positions": 64, "fit_size": 32}  # fits the tiny test teacher (2 heads, H32)


@pytest.fixture(scope="module")
def space():
    return get_space("efficientbert", **SMALL)


def _shape(space):
    return [c.name for c in space.choices() if c.kind in ("depth", "width")]


# ----------------------------------------------------------------- partial fixing


def test_fixed_choices_stay_fixed_and_architectures_keep_their_ids(space):
    shape = _shape(space)
    fixed = {n: space.choice(n).values[-1] for n in shape}
    restricted = fix_choices(space, fixed)
    assert restricted.name == space.name and restricted.config == space.config
    assert restricted.size() * np.prod([len(space.choice(n)) for n in shape]) == space.size()
    for seed in range(5):
        arch = restricted.sample(seed)
        assert {n: arch[n] for n in shape} == fixed
        assert space.validate(arch).id == arch.id
    with pytest.raises(ArchitectureError, match="'L0.stack': 9 is not allowed"):
        fix_choices(space, {"L0.stack": 9})


# ----------------------------------------------------------------- warm-up pieces


def test_warmup_arch_is_the_largest_stack_at_ratio_one(space):
    arch = warmup_arch(space)
    for c in space.choices():
        expected = c.largest() if c.kind in ("depth", "width") else space.default()[c.name]
        assert arch[c.name] == expected
    assert all(arch[f"L{i}.stack"] == 4 and arch[f"L{i}.ratio"] == "1" for i in range(2))


def test_budget_sampling_keeps_the_fixed_choices_and_the_budget(space):
    rng = np.random.default_rng(0)
    fixed = {c.name: space.default()[c.name] for c in space.choices()
             if c.kind not in ("depth", "width")}
    default = count_costs(space, space.default(), 16).params
    budget = default + 3 * 24 * 12  # room for a few more inner units, not for N = 4 at r = 1
    seen = set()
    for _ in range(20):
        arch = sample_under_budget(space, fixed, rng, max_params=budget, seq_len=16)
        assert count_costs(space, arch, 16).params <= budget
        assert all(arch[k] == v for k, v in fixed.items())
        seen.add(arch.id)
    assert len(seen) > 3
    with pytest.raises(ConfigError, match="raise the budget"):
        sample_under_budget(space, fixed, rng, max_params=10, seq_len=16, tries=20)


def test_the_fit_layer_is_the_spaces_own_and_is_inherited(space):
    supernet = build_supernet(space)
    arch = space.sample(1)
    child = extract_child(supernet, space, arch)
    fit = SpaceFit(child)
    assert fit.out_features == 32 and fit.embedding is None
    assert torch.equal(fit.hidden.weight, SpaceFit(supernet).hidden.weight)
    adabert = get_space("adabert", hidden=16, vocab_size=100)
    with pytest.raises(NasError, match="fit edge into an aux node"):
        SpaceFit(build_supernet(adabert))


def test_the_teacher_shape_is_checked_with_the_fix(space):
    teacher = {"num_attention_heads": 12, "num_hidden_layers": 6, "hidden_size": 384}
    with pytest.raises(ConfigError, match="set space.heads to 12"):
        check_teacher_fits(space, teacher)
    wide = get_space("efficientbert", **{**SMALL, "heads": 12})
    with pytest.raises(ConfigError, match="set space.fit_size to 384"):
        check_teacher_fits(wide, teacher)
    check_teacher_fits(get_space("efficientbert", **{**SMALL, "heads": 12, "fit_size": 384}),
                       teacher)


# ----------------------------------------------------------------- warm-up cache


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_warm_up_trains_once_then_comes_from_the_cache_and_resumes(space, tiny_teacher, cache,
                                                                   monkeypatch):
    import nas.cache
    from nas.cache import load_weights
    from nas.data import load_task

    train = load_task("sst2", "train").head(16)
    settings = WarmupSettings(corpus_splits=["valid"], max_texts=32, max_seq_len=16,
                              batch_size=16, max_steps=2, checkpoint_every=1)
    kw = dict(task="sst2", task_train=train)

    def interrupted(module, path):  # the training finished, the entry was not written
        raise KeyboardInterrupt

    monkeypatch.setattr(nas.cache, "save_weights", interrupted)
    with pytest.raises(KeyboardInterrupt):
        warmup_supernet(space, str(tiny_teacher), settings, **kw)
    [entry] = (cache / "warmup").iterdir()
    assert (entry / "checkpoint.safetensors").is_file() and not (entry / "result.json").exists()
    monkeypatch.undo()
    monkeypatch.setenv("NAS_CACHE_DIR", str(cache))

    first = warmup_supernet(space, str(tiny_teacher), settings, **kw)  # resumes at step 2
    assert first.record["steps"] == 2 and not first.record["from_cache"]
    assert first.record["mapping"] == [1, 2] and first.record["arch"] == dict(warmup_arch(space))
    assert not (entry / "checkpoint.safetensors").exists()
    again = warmup_supernet(space, str(tiny_teacher), settings, **kw)
    assert again.record["from_cache"] and again.weights == first.weights
    rng = torch.random.get_rng_state()
    net = again.load(space)
    assert torch.equal(rng, torch.random.get_rng_state())  # a seeded stage may load it
    fresh = build_supernet(space)
    load_weights(fresh, first.weights)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(),
                                                 fresh.state_dict().values(), strict=True))
    other = warmup_supernet(space, str(tiny_teacher),
                            WarmupSettings(**{**settings.__dict__, "lr": 1e-3}), **kw)
    assert not other.record["from_cache"] and other.weights != first.weights


def test_warm_up_starts_from_the_teachers_word_embeddings_unless_told_not_to(space, tiny_teacher,
                                                                             cache):
    """``embedding_init: teacher-pca`` (the default) copies the teacher's table, factorised to
    the embedding width, before the first step; ``random`` keeps the fresh one."""
    from nas.data import load_task
    from nas.distill.init import teacher_embedding_init

    train = load_task("sst2", "train").head(16)
    # one step at a negligible learning rate: the weights are the starting ones
    settings = dict(corpus_splits=["valid"], max_texts=16, max_seq_len=16, batch_size=16,
                    max_steps=1, lr=1e-12)
    width = space.config["embedding_size"]
    table = teacher_embedding_init(str(tiny_teacher), width)

    def words(init):
        result = warmup_supernet(space, str(tiny_teacher),
                                 WarmupSettings(**settings, embedding_init=init),
                                 task="sst2", task_train=train)
        return result.load(space).nodes["emb"].word_embeddings.weight.detach()

    assert torch.allclose(words("teacher-pca"), table, atol=1e-6)
    assert not torch.allclose(words("random"), table, atol=1e-2)


# ----------------------------------------------------------------- configuration


def test_the_smoke_experiment_loads_and_bad_keys_are_named():
    method, config = load_experiment(SMOKE)
    assert method.name == "efficientbert" and method.default_searcher() == "lanas"
    assert config.stage1.n_trials == 4 and config.stage2.enabled and config.stage3.enabled
    with pytest.raises(ConfigError, match="unknown key 'trials'"):
        load_experiment(SMOKE, ["stage1.trials=3"])
    with pytest.raises(ConfigError, match="warmup.max_seq_len"):
        load_experiment(SMOKE, ["warmup.max_seq_len=32"])
    with pytest.raises(ConfigError, match="space.num_labels comes from the task"):
        load_experiment(SMOKE, ["space.num_labels=3"])
    with pytest.raises(ConfigError, match="proxy: gamma must be a number > 0"):
        load_experiment(SMOKE, ["proxy.gamma=0"])
    assert load_experiment(SMOKE, ["proxy.gamma=10"])[1].proxy.gamma == 10
    _, skipped = load_experiment(SMOKE, ["stage1.enabled=false", "stage3.enabled=false"])
    assert not skipped.stage1.enabled and not skipped.stage3.enabled


def test_a_space_that_does_not_fit_the_teacher_fails_before_any_stage(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
                 "--set", "space.heads=4"]) == 2
    assert "set space.heads to 12" in capsys.readouterr().err
    assert not (run_dir / "teacher.json").exists()


# ----------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
    """The session's smoke run (the first warm-up of its settings)."""
    return smoke_runs("efficientbert")


def test_smoke_run_searches_in_three_stages_retrains_reports_and_exports(smoke_run, capsys):
    from nas.report import write_report
    from nas.runtime import load

    metrics = json.loads((smoke_run / "metrics.json").read_text())
    stages = metrics["stages"]
    assert list(stages) == ["stage1", "stage2", "stage3"]
    budget = metrics["budget"]["max_params"]
    space = get_space("efficientbert", num_labels=2, **load_experiment(SMOKE)[1].space)
    # stage 2 kept stage 1's N and r; stage 3 kept stage 2's expressions
    s1, s2, s3 = (space.validate(stages[n]["best"]) for n in ("stage1", "stage2", "stage3"))
    shape = _shape(space)
    assert all(s1[n] == s2[n] for n in shape)
    assert all(s2[n] == s3[n] for n in space.choice_map if n not in shape)
    assert stages["stage1"]["n_trials"] == 4 and stages["stage2"]["fixed"] == {
        n: s1[n] for n in shape}
    assert len(stages["stage3"]["candidates"]) == 4
    assert all(c["params"] <= budget for c in stages["stage3"]["candidates"])
    for name in ("stage1", "stage2"):  # every trial a warmup-kd proxy score with costs
        for trial in (smoke_run / name / "trials").iterdir():
            result = json.loads((trial / "result.json").read_text())["result"]
            assert result["status"] == "complete" and result["costs"]["inherited"]
            assert result["costs"]["latency_ms"] > 0 and len(result["intermediate"]) == 2
            assert result["costs"]["params"] <= budget

    searched = metrics["searched"]
    assert searched["arch_id"] == s3.id and searched["params"] <= budget
    assert 0.0 <= searched["test"]["accuracy"] <= 1.0 and "accuracy" in searched["dev"]
    assert [b["tag"] for b in metrics["baselines"]] == ["efficientbert_paper", "hand-designed"]
    assert len(metrics["random"]["runs"]) == 1
    assert not metrics["warmup"]["from_cache"]

    text, _ = write_report(smoke_run)
    assert "| searched |" in text and "## EfficientBERT search" in text
    assert "| hand-designed |" in text and "stage3: best" in text

    capsys.readouterr()
    assert main(["evaluate", str(smoke_run), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["split"] == "test" and scored["metrics"] == searched["test"]
    texts = ["a wonderful , moving film", "dull and far too long"]
    native, onnx = load(smoke_run / "export"), load(smoke_run / "export", runtime="onnx")
    batch = native.encode(texts)
    assert np.allclose(np.asarray(native(batch)), np.asarray(onnx(batch)), atol=1e-4)

    # the run let go of its folder when it ended, not when its process exits: another
    # process (here maybe another test worker) may resume it now
    assert not list(smoke_run.glob(".lock*"))
    # a resumed finished run redoes nothing
    log_lines = (smoke_run / "log.jsonl").read_text().splitlines()
    assert main(["run", str(SMOKE), "--run-dir", str(smoke_run), "--no-progress",
                 "--resume"]) == 0
    new = [json.loads(x)["stage"] for x in
           (smoke_run / "log.jsonl").read_text().splitlines()[len(log_lines):]]
    assert not {"stage1", "stage2", "stage3", "searched", "stage3_supernet"} & set(new)
    assert json.loads((smoke_run / "metrics.json").read_text())["searched"] == searched
    assert not list(smoke_run.glob(".lock*"))


@pytest.mark.slow
def test_an_interrupted_search_resumes_where_it_stopped(tmp_path, monkeypatch):
    """Ctrl-C during stage 1's third trial: ``--resume`` keeps the two finished trials,
    runs the rest of the study and the later stages, and redoes nothing else."""
    from evaluators.warmup_kd import WarmupKDEvaluator

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    run_dir = tmp_path / "run"
    args = ["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
            "--set", "stage2.enabled=false", "--set", "baselines={}"]
    original = WarmupKDEvaluator.evaluate
    calls = []

    def interrupting(self, arch, trial=None):
        calls.append(arch.id)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return original(self, arch, trial)

    monkeypatch.setattr(WarmupKDEvaluator, "evaluate", interrupting)
    assert main(args) == 130  # the CLI's answer to Ctrl-C
    assert not (run_dir / "stage1.json").exists()
    monkeypatch.setattr(WarmupKDEvaluator, "evaluate", original)
    assert main([*args, "--resume"]) == 0
    stage1 = json.loads((run_dir / "stage1.json").read_text())
    assert stage1["outcomes"] == {"complete": 4, "stale": 1}  # the interrupted trial
    evaluated = {json.loads((d / "result.json").read_text())["arch_id"]
                 for d in (run_dir / "stage1" / "trials").iterdir()}
    assert set(calls[:2]) <= evaluated and len(evaluated) == 4
    stages = [json.loads(x)["stage"] for x in (run_dir / "log.jsonl").read_text().splitlines()]
    assert stages.count("warmup") == 2 and stages.count("stage1") == 1
    assert stages.count("stage3") == 1 and stages[-1] == "done"
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert "stage2" not in metrics["stages"] and metrics["warmup"]["from_cache"]


def test_an_architecture_file_keeps_the_first_layers_of_a_smaller_space(space, tmp_path):
    from nas.architecture import load_for_space

    paper = load_for_space(space, "experiments/archs/efficientbert_paper.json")
    assert (paper["L0.stack"], paper["L0.ratio"], paper["L1.stack"]) == (4, "1/2", 2)
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"space": "efficientbert", "choices": {"L0.stack": 2,
                                                                       "L0.old_slot": "relu"}}))
    with pytest.raises(ArchitectureError, match="'L0.old_slot' is not a choice"):
        load_for_space(space, str(stale))


def test_the_cached_teacher_gives_the_teachers_states_in_fp16(tiny_teacher, tmp_path):
    from nas.distill.general import CachedTeacher
    from nas.hf import load_teacher_as_design

    _, teacher = load_teacher_as_design(str(tiny_teacher))
    loads = []
    cached = CachedTeacher(lambda: loads.append(1) or teacher, tmp_path / "states")
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(0, 30522, (2, 6), generator=g),
             "attention_mask": torch.tensor([[1] * 6, [1] * 4 + [0] * 2]),
             "token_type_ids": torch.zeros(2, 6, dtype=torch.long)}
    record = ("attention_scores", "hidden_states")
    first = cached(batch, record)
    again = cached(batch, record)
    with torch.no_grad():
        direct = teacher(batch, record=record)
    assert (cached.misses, cached.hits, len(loads)) == (1, 1, 1)
    for kind in record:
        assert len(again.records[kind]) == len(direct.records[kind]) == 2
        for a, b, c in zip(first.records[kind], again.records[kind], direct.records[kind],
                           strict=True):
            assert torch.equal(a, b)  # a miss gives what a hit gives
            # masked scores (≤ −100, maybe −inf in fp16) are zeroed by the loss anyway
            b, c = (torch.where(t <= -100, torch.zeros_like(t), t) for t in (b, c))
            assert torch.allclose(b, c, rtol=2e-3, atol=2e-3)
    assert torch.allclose(again.logits, direct.logits, atol=1e-2)
    other = cached(batch, ("hidden_states",))  # other states asked: another entry
    assert cached.misses == 2 and "attention_scores" not in other.records


@pytest.mark.slow
def test_the_proxy_noise_script_scores_one_architecture_per_seed(smoke_run, monkeypatch, capsys):
    """experiments/efficientbert_proxy_noise.py: a score per seed, then mean and sd; the
    same seed gives the same score in a new evaluator (the warm-up comes from the cache);
    ``--full`` scores by the run's own final recipe."""
    import runpy

    script = str(ROOT / "experiments" / "efficientbert_proxy_noise.py")
    arch = str(smoke_run / "derived_arch.json")

    def scores(*extra: str) -> list[dict]:
        monkeypatch.setattr("sys.argv", [script, "--config", str(SMOKE), "--arch", arch,
                                         *extra])
        runpy.run_path(script, run_name="__main__")
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    first = scores("--seeds", "2")
    assert [r.get("seed") for r in first] == [0, 1, None]
    assert {r["status"] for r in first[:2]} == {"complete"}
    assert first[2]["mean"] == pytest.approx((first[0]["score"] + first[1]["score"]) / 2)
    again = scores("--seeds", "1")
    assert again[0]["score"] == first[0]["score"]
    # --full at seed 0 is the run's own retrain of that architecture, to the digit
    [full, _] = scores("--seeds", "1", "--full")
    searched = json.loads((smoke_run / "searched.json").read_text())
    assert full["score"] == searched["dev"]["accuracy"]
    # a missing architecture file: one line naming it, before any teacher or data work
    monkeypatch.setattr("sys.argv", [script, "--config", str(SMOKE), "--arch", "nope.json"])
    with pytest.raises(SystemExit) as stop:
        runpy.run_path(script, run_name="__main__")
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "architecture file 'nope.json' does not exist" in err
