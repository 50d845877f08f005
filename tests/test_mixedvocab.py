"""Mixed-vocabulary distillation (docs/reference.md#mixed-vocabulary): conlleval's span F1 on
hand-worked cases, the per-word mixed segmentation, masking per vocabulary, the stage-I model, the
joint intent + slot head, and the smoke run end to end through ``nas run`` and ``nas predict``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from nas.cli import main
from nas.errors import ExportError, SpaceDefinitionError
from nas.tagging import first_piece_positions, iob_spans, slot_spans, span_f1

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "experiments" / "mixedvocab_smoke.yaml"


# --------------------------------------------------------------- conlleval span F1


def test_chunks_follow_conlleval_including_its_reading_of_invalid_iob():
    assert iob_spans(["B-a", "I-a", "O", "B-b"]) == [("a", 0, 1), ("b", 3, 3)]
    assert iob_spans(["B-a", "B-a", "I-a"]) == [("a", 0, 0), ("a", 1, 2)]
    # I- after O, or after another type, opens a chunk (conlleval's startOfChunk)
    assert iob_spans(["O", "I-x", "I-x", "B-x", "I-y"]) == [("x", 1, 2), ("x", 3, 3),
                                                            ("y", 4, 4)]
    assert iob_spans(["I-a", "I-a"]) == [("a", 0, 1)]
    assert iob_spans(["O", "O"]) == []
    with pytest.raises(ValueError, match="not IOB"):
        iob_spans(["X-a"])


def test_span_f1_on_hand_worked_cases():
    # one sentence: 2 gold chunks, 2 predicted, 1 exact match (wrong type on the other)
    assert span_f1([["B-a", "I-a", "O", "B-b"]], [["B-a", "I-a", "O", "B-c"]]) == \
        pytest.approx({"precision": 0.5, "recall": 0.5, "f1": 0.5})
    # a chunk with the wrong end is wrong: nothing correct, F1 0
    assert span_f1([["B-a", "I-a"]], [["B-a", "O"]]) == {"precision": 0.0, "recall": 0.0,
                                                         "f1": 0.0}
    # counts add up over sentences: gold 3 chunks, predicted 2, correct 2
    # → P = 2/2, R = 2/3, F1 = 2·1·(2/3)/(1 + 2/3) = 0.8
    gold = [["B-a", "I-a", "O", "B-b"], ["B-c", "O"]]
    pred = [["B-a", "I-a", "O", "B-b"], ["O", "O"]]
    assert span_f1(gold, pred) == pytest.approx({"precision": 1.0, "recall": 2 / 3,
                                                 "f1": 0.8})
    # O tags are not chunks: all-O sentences count for nothing
    assert span_f1([["O"]], [["O"]]) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    with pytest.raises(ValueError, match="2 gold tags but 1 predicted"):
        span_f1([["O", "O"]], [["O"]])


def test_first_pieces_and_slot_spans():
    # [CLS] play(0) ade(1) ##le(1) [SEP] pad: word 2 was cut off
    assert first_piece_positions([None, 0, 1, 1, None, None], 3) == [1, 2, -1]
    words = "play the latest song by adele".split()
    tags = ["O", "O", "B-sort", "B-music_item", "O", "B-artist"]
    assert slot_spans(words, tags) == [
        {"slot": "sort", "text": "latest", "start": 2, "end": 3},
        {"slot": "music_item", "text": "song", "start": 3, "end": 4},
        {"slot": "artist", "text": "adele", "start": 5, "end": 6}]


# ------------------------------------------------------------------ segmentation


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    from nas.data import load_corpus
    from nas.teacher import resolve_teacher
    from nas.tokenization import load_tokenizer, train_student_vocab

    texts = load_corpus("wikitext2", "valid")[:300]
    folder = train_student_vocab(texts, tmp_path_factory.mktemp("vocab"), vocab_size=400,
                                 min_frequency=1)
    return load_tokenizer(resolve_teacher(None)), load_tokenizer(folder)


WORDS = "the unbelievable film premiered in 1998 , said adele".split()


def test_all_teacher_or_all_student_segmentation_is_each_tokenizers_own(tokenizers):
    from nas.distill.mixedvocab import MixedSegmenter, batch_rng

    teacher, student = tokenizers
    for p, tok, specials, vocab in ((0.0, teacher, "teacher", 0), (1.0, student, "student", 1)):
        seg = MixedSegmenter(teacher, student, p, 64, specials=specials)
        s = seg.segment(WORDS, batch_rng(0, 0, 0))
        assert s.ids == tok(WORDS, is_split_into_words=True)["input_ids"]
        assert set(s.vocab) == {vocab}
        # word boundaries kept: each word's pieces are contiguous and in order
        inner = [w for w in s.words if w >= 0]
        assert inner == sorted(inner) and set(inner) == set(range(len(WORDS)))


def test_mixed_segmentation_draws_per_word_and_is_reproducible(tokenizers):
    from nas.distill.mixedvocab import TEACHER, MixedSegmenter, batch_rng

    teacher, student = tokenizers
    seg = MixedSegmenter(teacher, student, 0.5, 512)
    a = seg.segment(WORDS, batch_rng(7, 1, 3))
    assert a == seg.segment(WORDS, batch_rng(7, 1, 3))  # the same seed: the same cut
    assert any(seg.segment(WORDS, batch_rng(7, 1, b)) != a for b in range(4, 10))
    # every piece of a word comes from one vocabulary, the one drawn for that word
    for w in range(len(WORDS)):
        vocabs = {v for v, o in zip(a.vocab, a.words, strict=True) if o == w}
        assert len(vocabs) == 1
        (v,) = vocabs
        tok = seg.tokenizers[v]
        pieces = [i for i, o in zip(a.ids, a.words, strict=True) if o == w]
        assert pieces == tok(WORDS[w], add_special_tokens=False)["input_ids"]
    assert a.vocab[0] == a.vocab[-1] == TEACHER  # [CLS] and [SEP] are the teacher's
    # p_SV = 0.5: about half of many words go to the student vocabulary
    many = ["word"] * 4000
    s = MixedSegmenter(teacher, student, 0.5, 20_000).segment(many, batch_rng(0, 0, 0))
    share = np.mean([s.vocab[s.words.index(w)] for w in range(len(many))])
    assert 0.46 < share < 0.54


def test_sentences_are_cut_at_a_word_boundary_and_first_pieces_found(tokenizers):
    from nas.distill.mixedvocab import MixedSegmenter, batch_rng

    teacher, student = tokenizers
    seg = MixedSegmenter(teacher, student, 1.0, 8, specials="student")
    b = seg.batch([WORDS, WORDS[:2]], batch_rng(0, 0, 0))
    assert b["input_ids"].shape[1] <= 8
    first = b["first_piece"]
    for r in range(2):
        words = b["word_ids"][r].tolist()
        for w, pos in enumerate(first[r].tolist()):
            if pos >= 0:
                assert words[pos] == w and (pos == 0 or words[pos - 1] != w)
            else:  # a word is cut off whole, never in the middle
                assert w not in words
    assert (first[1, 2:] == -1).all()


def test_masking_uses_each_positions_own_vocabulary(tokenizers):
    from nas.distill.mixedvocab import (
        IGNORE,
        STUDENT,
        TEACHER,
        MixedSegmenter,
        batch_rng,
        mask_tokens,
    )

    teacher, student = tokenizers
    seg = MixedSegmenter(teacher, student, 0.5, 512)
    rng = batch_rng(0, 0, 0)
    batch = seg.batch([WORDS * 40] * 4, rng)
    out = mask_tokens(batch, seg, rng, 0.15)
    chosen = out["labels"] != IGNORE
    assert (out["labels"][chosen] == batch["input_ids"][chosen]).all()
    assert not chosen[batch["word_ids"] < 0].any()  # never [CLS], [SEP] or padding
    assert 0.12 < float(chosen.sum()) / float((batch["word_ids"] >= 0).sum()) < 0.18
    for v, mask_id in ((TEACHER, teacher.mask_token_id), (STUDENT, student.mask_token_id)):
        here = chosen & (batch["vocab"] == v)
        masked = out["input_ids"][here] == mask_id
        assert 0.7 < float(masked.float().mean()) < 0.9
        assert int(out["input_ids"][here].max()) < seg.sizes[v]
    assert (out["input_ids"][~chosen] == batch["input_ids"][~chosen]).all()


# ---------------------------------------------------------------- stage I model


def _tiny_teacher(vocab: int = 60):
    from nas.builder import build_child
    from nas.space import get_space

    return build_child(get_space("bert", vocab_size=vocab, hidden_size=16,
                                 num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=32, max_position_embeddings=32))


def test_student_pieces_enter_up_projected_and_are_predicted_over_their_vocabulary():
    from nas.distill.mixedvocab import IGNORE, MixedVocabMLM, MLMHead

    torch.manual_seed(0)
    model = MixedVocabMLM(_tiny_teacher(), student_vocab_size=20, student_dim=8)
    ids = torch.tensor([[1, 5, 7, 9, 2]])
    vocab = torch.tensor([[0, 1, 0, 1, 0]])
    x = model.word_vectors(ids, vocab)
    assert torch.allclose(x[0, 2], model.teacher_table()[7])
    assert torch.allclose(x[0, 1], model.up(model.student_embeddings.weight[5]))
    # the head starts from the tied embeddings: identity transform, zero biases
    head = MLMHead(16, 20)
    h = torch.randn(3, 16)
    table = torch.randn(20, 16)
    expected = head.LayerNorm(torch.nn.functional.gelu(h)) @ table.t()
    assert torch.allclose(head(h, table), expected, atol=1e-6)
    # only student pieces masked: the teacher head and table get no gradient from them
    batch = {"input_ids": ids, "vocab": vocab, "attention_mask": torch.ones_like(ids),
             "token_type_ids": torch.zeros_like(ids),
             "labels": torch.tensor([[IGNORE, 5, IGNORE, 9, IGNORE]])}
    loss, info = model(batch)
    loss.backward()
    assert torch.isfinite(loss) and np.isnan(info["mlm_loss_teacher"])
    assert 0.0 <= info["mlm_acc_student"] <= 1.0
    assert model.teacher_head.bias.grad is None or not model.teacher_head.bias.grad.any()
    assert model.student_head.bias.grad[[5, 9]].ne(0).all()
    assert model.student_embeddings.weight.grad.any() and model.up.weight.grad.any()
    assert model.teacher.nodes["L0_attn"].self.query.weight.grad.any()


def test_bert_init_puts_every_table_at_berts_scale():
    """A built child's tables start at N(0, 1); a stage-I word table (std ~0.02) added to
    such position embeddings was erased by the LayerNorm after them (the student then
    learned nothing from its words). After bert_init every table is at BERT's scale."""
    from nas.distill.mixedvocab import bert_init

    torch.manual_seed(0)
    model = _tiny_teacher(vocab=400)
    emb = model.nodes["emb"]
    assert float(emb.position_embeddings.weight.detach().std()) > 0.5  # default: N(0, 1)
    bert_init(model)
    for name, p in model.named_parameters():
        if p.ndim >= 2:
            assert 0.015 < float(p.detach().std()) < 0.025, name
        elif name.endswith("weight"):
            assert torch.equal(p, torch.ones_like(p)), name
        else:
            assert not p.any(), name


def test_mlm_batches_are_a_function_of_epoch_and_batch_index(tokenizers):
    """What makes a resumed stage exact: batch k of an epoch is the same whether the
    epoch starts at 0 or resumes at k (the Trainer restores the rest)."""
    from nas.distill.mixedvocab import MixedSegmenter, mlm_batches, word_windows

    teacher, student = tokenizers
    seg = MixedSegmenter(teacher, student, 0.5, 32)
    windows = word_windows([" ".join(WORDS)] * 9, 5)
    batches, steps = mlm_batches(seg, windows, 4, seed=3, mask_probability=0.15)
    assert steps == 5
    full = list(batches(1, 0))
    resumed = list(batches(1, 3))
    assert len(full) == 5 and len(resumed) == 2
    for a, b in zip(full[3:], resumed, strict=True):
        assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(full[0]["input_ids"], list(batches(2, 0))[0]["input_ids"])


# ------------------------------------------------------------------ joint head


def test_joint_head_shapes_costs_and_refusals(tmp_path):
    from nas.builder import build_child
    from nas.cost import count_costs
    from nas.export import export
    from nas.ops.transformer import split_joint
    from nas.space import get_space

    space = get_space("mixedvocab", vocab_size=500, head="joint", num_labels=7, num_tags=9,
                      hidden_size=32, num_attention_heads=4, intermediate_size=48,
                      num_hidden_layers=2)
    assert space.config["vocab_size"] == 500 and space.config["head"] == "joint"
    model = build_child(space).eval()
    assert count_costs(space, None, 16).params == sum(p.numel() for p in model.parameters())
    ids = torch.randint(5, 500, (2, 6))
    logits = model({"input_ids": ids, "attention_mask": torch.ones_like(ids)}).logits
    assert logits.shape == (2, 6, 16)
    intent, tags = split_joint(logits, 7)
    assert intent.shape == (2, 7) and tags.shape == (2, 6, 9)
    assert torch.equal(logits[:, 3, :7], intent)  # the intent is the same at every position
    with pytest.raises(SpaceDefinitionError, match="num_tags"):
        get_space("bert", **{"head": "joint"})
    with pytest.raises(SpaceDefinitionError, match="head must be one of"):
        get_space("bert", head="crf")
    labels = [f"i{k}" for k in range(7)] + [f"t{k}" for k in range(9)]
    with pytest.raises(ExportError, match="needs its head entry"):  # would read as a classifier
        export(space, None, tmp_path / "bare", model=model, fmt="hf", labels=labels)
    head = {"kind": "joint", "num_intents": 7, "intents": labels[:7], "tags": labels[7:]}
    out = export(space, None, tmp_path / "hf", model=model, fmt="hf", labels=labels, head=head)
    config = json.loads((out / "config.json").read_text())
    assert re.fullmatch(r"modeling_nas_graph_[0-9a-f]{12}\.NasGraphForJointIntentSlot",
                        config["auto_map"]["AutoModel"])
    assert config["num_intents"] == 7 and "AutoModelForSequenceClassification" not in \
        config["auto_map"]


@pytest.mark.slow  # ONNX tracing: ~9 s on the busy machine; the smoke run's test checks it too
def test_the_joint_onnx_graph_takes_what_its_tokenizer_gives(tokenizers, tmp_path):
    """A student vocabulary's tokenizer gives ``input_ids`` and
    ``attention_mask`` only; the joint model's ONNX graph takes exactly those (token
    types are filled inside), its tokenizer config pins them and names a class 4.x knows,
    and the graph answers as the torch model does."""
    from nas.builder import build_child
    from nas.export import export
    from nas.runtime import load
    from nas.space import get_space

    student = tokenizers[1]
    space = get_space("mixedvocab", vocab_size=len(student), head="joint", num_labels=3,
                      num_tags=4, hidden_size=32, num_attention_heads=4,
                      intermediate_size=48, num_hidden_layers=1)
    torch.manual_seed(0)
    labels = ["a", "b", "c", "O", "B-x", "I-x", "B-y"]
    head = {"kind": "joint", "num_intents": 3, "intents": labels[:3], "tags": labels[3:]}
    out = export(space, None, tmp_path / "j", model=build_child(space).eval(), fmt="onnx",
                 labels=labels, head=head, tokenizer=student.name_or_path, max_length=16)
    settings = json.loads((out / "tokenizer_config.json").read_text())
    produced = sorted(student("a"))
    assert sorted(settings["model_input_names"]) == produced == ["attention_mask", "input_ids"]
    assert settings["tokenizer_class"] != "TokenizersBackend"  # a 5.x-only name
    onnx_model, torch_model = load(out, "onnx"), load(out)
    assert sorted(i.name for i in onnx_model.network.get_inputs()) == produced
    text = ["play the latest song by adele"]
    assert onnx_model.predict_slots(text)[0]["tags"] == torch_model.predict_slots(text)[0]["tags"]
    enc = student(text, return_tensors="pt")
    assert (onnx_model(dict(enc)) - torch_model(dict(enc))).abs().max() <= 1e-4


def test_joint_remote_code_splits_the_head_and_scores_both_labels(tmp_path):
    """The joint head's remote code (transformers has no class for it) gives the intent and
    slot logits that nas computes, and the summed cross-entropy of both label sets."""
    from transformers import AutoModel

    from nas.builder import build_child
    from nas.export import export
    from nas.ops.transformer import split_joint
    from nas.space import get_space

    torch.manual_seed(0)
    space = get_space("mixedvocab", vocab_size=300, head="joint", num_labels=3, num_tags=5,
                      hidden_size=32, num_attention_heads=4, intermediate_size=48,
                      num_hidden_layers=1)
    model = build_child(space).eval()
    labels = ["a", "b", "c", "O", "B-x", "I-x", "B-y", "I-y"]
    head = {"kind": "joint", "num_intents": 3, "intents": labels[:3], "tags": labels[3:]}
    out = export(space, None, tmp_path / "hf", model=model, fmt="hf", labels=labels, head=head)
    remote = AutoModel.from_pretrained(str(out), trust_remote_code=True).eval()
    assert type(remote).__name__ == "NasGraphForJointIntentSlot"
    ids = torch.randint(5, 300, (2, 7))
    mask = torch.ones_like(ids)
    mask[1, 5:] = 0
    with torch.no_grad():
        want = split_joint(model({"input_ids": ids, "attention_mask": mask,
                                  "token_type_ids": torch.zeros_like(ids)}).logits, 3)
        intent_labels = torch.tensor([0, 2])
        slot_labels = torch.tensor([[-100, 0, 1, 2, 0, 3, -100], [-100, 4, 0, 0, 0, -100, -100]])
        got = remote(input_ids=ids, attention_mask=mask, intent_labels=intent_labels,
                     slot_labels=slot_labels)
    assert torch.allclose(got.intent_logits, want[0], atol=1e-5)
    assert torch.allclose(got.slot_logits, want[1], atol=1e-5)
    expected = (torch.nn.functional.cross_entropy(want[0], intent_labels)
                + torch.nn.functional.cross_entropy(want[1].reshape(-1, 5), slot_labels.view(-1),
                                                    ignore_index=-100))
    assert got.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_joint_loss_and_evaluation_read_each_words_first_piece():
    from nas.distill.mixedvocab import evaluate_joint, joint_loss

    class Fixed(torch.nn.Module):
        def __init__(self, logits):
            super().__init__()
            self.logits = logits

        def forward(self, batch):
            from nas.network import ModelOutput

            return ModelOutput(self.logits)

    tag_names = ["O", "B-a", "I-a"]
    # one sentence of 3 words whose first pieces are at positions 1, 3 and 5
    logits = torch.zeros(1, 6, 2 + 3)
    logits[0, :, 1] = 5.0  # intent 1
    for pos, tag in ((1, 1), (3, 2), (4, 0), (5, 0)):
        logits[0, pos, 2 + tag] = 5.0
    batch = {"first_piece": torch.tensor([[1, 3, 5]]), "labels": torch.tensor([1]),
             "tag_labels": torch.tensor([[1, 2, 0]])}
    score = evaluate_joint(Fixed(logits), [batch], 2, tag_names)
    assert score["intent_accuracy"] == 1.0 and score["slot_f1"] == 1.0
    batch["tag_labels"] = torch.tensor([[1, 0, 0]])  # gold chunk (a, 0, 0) ≠ predicted (a, 0, 1)
    assert evaluate_joint(Fixed(logits), [batch], 2, tag_names)["slot_f1"] == 0.0
    loss, info = joint_loss(logits, batch, 2, None, 0.0, 1.0)
    assert float(loss) == pytest.approx(info["gold"])
    # the teacher's soft targets equal to the student's own: the soft term is its entropy
    t = (logits[:, 0, :2], logits[0, [1, 3, 5], 2:].unsqueeze(0))
    mixed, parts = joint_loss(logits, batch, 2, t, 0.5, 1.0)
    assert float(mixed) == pytest.approx(0.5 * parts["gold"] + 0.5 * parts["soft"])


# ----------------------------------------------------------------- experiments


def test_the_full_student_is_l6_h256_with_6_2m_parameters_on_the_papers_vocabulary():
    from nas.cost import count_costs
    from recipes.common import load_typed
    from recipes.mixedvocab import MixedVocab

    config = load_typed(ROOT / "experiments" / "mixedvocab_snips.yaml", MixedVocab)
    space = config.student.build_space(vocab_size=4928, num_labels=7, num_tags=72)
    assert (space.config["num_hidden_layers"], space.config["hidden_size"]) == (6, 256)
    assert 6.15e6 < count_costs(space, None, 64).params < 6.25e6  # 6.2M (Zhao et al. 2021)


@pytest.mark.parametrize(("override", "message"), [
    ("stage1.p_student=1.5", r"p_student must be in \[0, 1\]"),
    ("stage2.init=teacher", "init must be stage1 or random"),
    ("student.vocabulary=both", "vocabulary must be student or teacher"),
    ("student.config={vocab_size: 10}", "student.config.vocab_size: set by the recipe"),
])
def test_bad_settings_are_one_line_errors(override, message, tmp_path, capsys):
    code = main(["run", str(SMOKE), "--run-dir", str(tmp_path / "r"), "--set", override])
    assert code != 0
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert __import__("re").search(message, err)


def test_layer_distillation_needs_the_student_vocabulary():
    from nas.config import ConfigError
    from recipes.common import load_typed
    from recipes.mixedvocab import MixedVocab

    with pytest.raises(ConfigError, match="distill_layers"):
        load_typed(SMOKE, MixedVocab, ["student.vocabulary=teacher", "stage2.distill_layers=true"])


def test_dev_is_capped_to_a_seeded_subset_by_default():
    """SNIPS's dev file is sorted by intent: the method's dev cap is a seeded sample; the
    run folder's snapshot records it (and every other setting)."""
    from nas.methods import load_experiment

    method, config = load_experiment(SMOKE)
    assert config.data.dev_subset == "seeded"
    assert method.snapshot(config)["data"]["dev_subset"] == "seeded"
    method, config = load_experiment(SMOKE, ["data.dev_subset=head"])
    assert method.snapshot(config)["data"]["dev_subset"] == "head"


def test_class_reader_batches_carry_the_teachers_logits_of_their_rows(tokenizers):
    """The task stage's classification batches: every row once per epoch, each with its
    own teacher logits, and batch k the same when an epoch resumes at k."""
    from nas.distill.general import unlabeled
    from nas.distill.mixedvocab import ClassReader

    teacher, _ = tokenizers
    data = unlabeled("t", [" ".join(WORDS[:k + 1]) for k in range(9)], "test")
    targets = np.arange(9, dtype=np.float32)[:, None]
    source = ClassReader(teacher, 16).train_batches(data, 4, seed=1, targets=targets)
    full = list(source(0, 0))
    assert sorted(i for b in full for i in b["index"].tolist()) == list(range(9))
    for b in full:
        assert torch.equal(b["t_logits"][:, 0], b["index"].float())
    resumed = list(source(0, 1))
    assert len(resumed) == len(full) - 1
    assert all(torch.equal(a["input_ids"], b["input_ids"])
               for a, b in zip(full[1:], resumed, strict=True))
    assert [b["index"].tolist() for b in full] != [b["index"].tolist() for b in source(1, 0)]


# ------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def smoke_run(smoke_runs):
    return smoke_runs("mixedvocab")


def test_smoke_run_report_export_and_predict(smoke_run, capsys):
    from nas.report import write_report
    from nas.runtime import load

    metrics = json.loads((smoke_run / "metrics.json").read_text())
    student, teacher = metrics["searched"], metrics["teacher"]
    for row in (student, teacher):
        assert set(row["dev"]) >= {"intent_accuracy", "slot_f1"}
        assert {"batch1", "batch32"} <= set(row["latency"])
    assert student["embedding_params"] == student["vocab_size"] * 32
    assert student["params"] < teacher["params"] / 100
    recipe = student["recipe"]
    assert recipe["stage1"]["enabled"] and recipe["stage1"]["segmentation"]["p_student"] == 0.5
    last = recipe["stage1_last_epoch"]
    assert {"mlm_loss_teacher", "mlm_acc_teacher", "mlm_loss_student",
            "mlm_acc_student"} <= set(last)
    stages = [json.loads(line)["stage"] for line in
              (smoke_run / "log.jsonl").read_text().splitlines()]
    assert [s for s in stages if s in ("vocabulary", "stage1", "stage2", "teacher", "task",
                                       "student")] == ["vocabulary", "stage1", "stage2",
                                                       "teacher", "task", "student"]
    text, _ = write_report(smoke_run)
    assert "## Mixed-vocabulary recipe" in text and "intent_accuracy / slot_f1" in text

    # the export ships the student vocabulary and answers with intent and slots
    export = smoke_run / "export"
    vocab_dir = Path(recipe["vocab_dir"])
    assert (export / "vocab.txt").read_text() == (vocab_dir / "vocab.txt").read_text()
    config = json.loads((export / "config.json").read_text())
    assert config["head"]["kind"] == "joint" and config["vocab_size"] == student["vocab_size"]
    capsys.readouterr()
    text_in = "play the latest song by adele"
    assert main(["predict", str(export), text_in, "--json"]) == 0
    torch_result = json.loads(capsys.readouterr().out)
    assert torch_result["intent"] in config["head"]["intents"]
    assert torch_result["words"] == text_in.split() and len(torch_result["tags"]) == 6
    assert main(["predict", str(export), text_in, "--runtime", "onnx", "--json"]) == 0
    onnx_result = json.loads(capsys.readouterr().out)
    assert onnx_result["tags"] == torch_result["tags"]
    assert onnx_result["intent_probability"] == pytest.approx(
        torch_result["intent_probability"], abs=1e-4)
    assert main(["predict", str(export), text_in]) == 0
    assert capsys.readouterr().out.startswith(f"intent\t{torch_result['intent']}\t")
    # nas evaluate scores a joint model on the whole dev split, the same on both runtimes
    assert main(["evaluate", str(smoke_run), "--split", "dev", "--json"]) == 0
    scored = json.loads(capsys.readouterr().out)
    assert scored["examples"] == 700 and set(scored["metrics"]) >= {"intent_accuracy",
                                                                    "slot_f1"}
    assert main(["evaluate", str(smoke_run), "--split", "dev", "--runtime", "onnx",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["metrics"] == pytest.approx(scored["metrics"])
    # ONNX on a longer input than it was traced with: the sequence axis is dynamic
    model = load(export, "onnx")
    # the graph takes exactly what its tokenizer gives (a student vocabulary has no
    # token_type_ids), as stock transformers loads that tokenizer
    from transformers import AutoTokenizer

    produced = sorted(AutoTokenizer.from_pretrained(str(export), trust_remote_code=True)("a"))
    assert sorted(i.name for i in model.network.get_inputs()) == produced
    long = model.predict_slots(["add the song to my playlist of the best songs of the year"])
    assert len(long[0]["tags"]) == 13


#: Loads a joint export with transformers alone (``without_this_project``) and tags a text
#: the way nas predict does: each word at its first piece.
JOINT_RUNNER = """
import json, sys
import torch
from transformers import AutoModel, AutoTokenizer
from transformers.utils import logging
logging.set_verbosity_error()
directory, text = sys.argv[1], sys.argv[2]
model = AutoModel.from_pretrained(directory, trust_remote_code=True).eval()
tokenizer = AutoTokenizer.from_pretrained(directory, trust_remote_code=True)
words = text.split()
enc = tokenizer(words, is_split_into_words=True, return_tensors="pt")
with torch.no_grad():
    out = model(**enc)
labels = [model.config.id2label[i] for i in range(len(model.config.id2label))]
n = model.config.num_intents
first = {}
for position, word in enumerate(enc.word_ids(0)):
    if word is not None and word not in first:
        first[word] = position
tags = [labels[n + int(out.slot_logits[0, first[w]].argmax())] for w in range(len(words))]
intent = labels[int(out.intent_logits[0].argmax())]
print(json.dumps({"intent": intent, "tags": tags,
                  "leaked": sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)}))
"""


def test_the_joint_model_exports_as_remote_code_for_transformers(smoke_run, tmp_path, capsys,
                                                                  without_this_project):
    """``nas export --run RUN --format hf`` of a joint model: stock transformers loads it
    (``AutoModel``, remote code, in a process without this project) and tags a text as
    ``nas predict`` does; the folder ships the student vocabulary."""
    out = tmp_path / "hf"
    assert main(["export", "--run", str(smoke_run), "--format", "hf", "-o", str(out)]) == 0
    assert (out / "vocab.txt").read_text() == (smoke_run / "export" / "vocab.txt").read_text()
    text_in = "play the latest song by adele"
    capsys.readouterr()
    assert main(["predict", str(out), text_in, "--json"]) == 0
    ours = json.loads(capsys.readouterr().out)
    theirs = json.loads(without_this_project(JOINT_RUNNER, str(out), text_in).splitlines()[-1])
    assert theirs["leaked"] == []
    assert theirs["intent"] == ours["intent"] and theirs["tags"] == ours["tags"]


def test_the_stages_are_cached_and_an_ablation_arm_reuses_the_vocabulary(smoke_run, tmp_path):
    run_dir = tmp_path / "arm"
    assert main(["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
                 "--set", "stage2.init=random"]) == 0
    first = json.loads((smoke_run / "metrics.json").read_text())["searched"]
    arm = json.loads((run_dir / "metrics.json").read_text())["searched"]
    assert arm["recipe"]["vocab_dir"] == first["recipe"]["vocab_dir"]
    assert not arm["recipe"]["stage1"]["enabled"] and arm["recipe"]["stage2_init"] == "random"
    assert arm["recipe"]["stage2"]["key"] != first["recipe"]["stage2"]["key"]
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    (teacher,) = [row for row in log if row["stage"] == "teacher"]
    assert teacher["from_cache"]  # the task teacher is shared by every arm


@pytest.mark.slow
def test_the_classification_path_on_mrpc(smoke_run, tmp_path, capsys):
    """MRPC through the same recipe: the shared fine-tuned teacher, the classifier head,
    pairs in the student vocabulary, accuracy and F1, an export that predicts a pair."""
    run_dir = tmp_path / "mrpc"
    assert main(["run", str(SMOKE), "--run-dir", str(run_dir), "--no-progress",
                 "--set", "task=mrpc", "--set",
                 "teacher_finetune={epochs: 1, max_train_examples: 64, max_dev_examples: 32, "
                 "max_seq_len: 24, batch_size: 16}"]) == 0
    metrics = json.loads((run_dir / "metrics.json").read_text())
    student = metrics["searched"]
    assert metrics["metric"] == "accuracy+f1" and set(student["dev"]) == {"accuracy", "f1"}
    assert set(metrics["teacher"]["dev"]) == {"accuracy", "f1"}
    config = json.loads((run_dir / "export" / "config.json").read_text())
    assert "head" not in config and config["labels"] == ["not_paraphrase", "paraphrase"]
    capsys.readouterr()
    assert main(["predict", str(run_dir / "export"), "the cat sat", "a cat was sitting",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["label"] in config["labels"]


@pytest.mark.slow
def test_an_interrupted_stage_one_resumes_to_the_same_weights(smoke_run, tmp_path,
                                                              monkeypatch):
    """Stage I killed after step 3 (its checkpoint is from step 2) and started again
    ends with the very weights of the uninterrupted smoke run's stage I."""
    import shutil

    from safetensors.torch import load_file

    import nas.distill.mixedvocab as mv

    monkeypatch.setenv("NAS_CACHE_DIR", str(tmp_path / "cache"))
    # the same vocabulary as the unbroken run: the WordPiece trainer breaks count ties in
    # hash-map order (huggingface/tokenizers#1794), so a fresh one may differ in a token
    log = [json.loads(line) for line in (smoke_run / "log.jsonl").read_text().splitlines()]
    (vocab,) = [row for row in log if row["stage"] == "vocabulary"]
    shutil.copytree(vocab["dir"], tmp_path / "cache" / "mixedvocab" / Path(vocab["dir"]).name)
    real = mv.step_logger

    def interrupting(stage, every=50):
        log_step = real(stage, every)

        def after(step, info):
            if stage == "stage I" and step == 3:
                raise KeyboardInterrupt("killed")
            log_step(step, info)
        return after

    monkeypatch.setattr(mv, "step_logger", interrupting)
    # the CLI turns Ctrl-C into a message and a non-zero exit
    assert main(["run", str(SMOKE), "--run-dir", str(tmp_path / "a"), "--no-progress"]) != 0
    (folder,) = (tmp_path / "cache" / "mixedvocab").glob("stage1-*")
    assert (folder / "checkpoint.safetensors").is_file()
    assert not (folder / "result.json").exists()
    monkeypatch.setattr(mv, "step_logger", real)
    assert main(["run", str(SMOKE), "--run-dir", str(tmp_path / "b"), "--no-progress"]) == 0
    assert not (folder / "checkpoint.safetensors").exists()
    (first,) = [row for row in log if row["stage"] == "stage1"]
    assert Path(first["weights"]).parent.name == folder.name  # the same settings, same key
    resumed, unbroken = load_file(str(folder / "weights.safetensors")), load_file(
        first["weights"])
    assert resumed.keys() == unbroken.keys()
    assert all(torch.equal(resumed[k], unbroken[k]) for k in resumed)
