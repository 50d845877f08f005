"""Transformer spaces and fixed designs: registry, counts against published figures and HF.

Parameter counts are checked twice: against the counts of docs/reference.md#costs (within
2%) and exactly against the ``transformers`` model of the same config, built on the meta
device (no weights, no download). FLOPs (= 2 × MACs) are checked within 3% against the
MobileBERT paper's (Sun et al. 2020, its GLUE and SQuAD results tables).
"""

from __future__ import annotations

import pytest
import torch

from nas.cost import count_costs
from nas.errors import ArchitectureError, SpaceDefinitionError
from nas.space import get_space, list_spaces

FIXED = ["bert", "bert-base", "bert-large", "minilm-l6-h384", "tinybert", "mixedvocab",
         "mixedvocab-l6", "mixedvocab-l12", "mobilebert", "mobilebert-tiny",
         "mobilebert-paper", "ib-bert-large"]

#: Parameter counts of docs/reference.md#costs (HF unless marked "paper").
PUBLISHED_PARAMS = {
    "bert-base": 109.5e6, "bert-large": 335.1e6, "minilm-l6-h384": 22.7e6,
    "tinybert": 14.35e6, "mobilebert": 24.84e6, "mobilebert-tiny": 15.75e6,
    "ib-bert-large": 293e6,  # paper
    "mobilebert-paper": 25.3e6,  # paper
    "mixedvocab-l6": 6.20e6, "mixedvocab-l12": 10.94e6,
}

#: FLOPs at sequence lengths 128 and 384 (Sun et al. 2020; docs/reference.md#costs);
#: MobileBERT-tiny's 3.1B is from the same table.
PUBLISHED_FLOPS = {
    ("bert-base", 128): 22.5e9, ("bert-base", 384): 71.2e9, ("bert-large", 128): 79.2e9,
    ("mobilebert-paper", 128): 5.7e9, ("mobilebert-paper", 384): 18.2e9,
    ("mobilebert-tiny", 128): 3.1e9,
}


def test_registry_lists_the_designs_and_marks_them_fixed():
    names = set(list_spaces())
    assert set(FIXED) | {"mobilebert-grid"} <= names
    for name in FIXED:
        space = get_space(name)
        assert space.is_fixed and space.size() == 1 and len(space.default()) == 0
        assert space.describe()["fixed"] is True
    assert not get_space("mobilebert-grid").is_fixed
    assert list_spaces("mobilebert*") == ["mobilebert", "mobilebert-grid", "mobilebert-paper",
                                          "mobilebert-tiny"]


def test_fixed_design_rejects_choices_and_takes_kwargs():
    space = get_space("tinybert", num_labels=5)
    with pytest.raises(ArchitectureError, match="fixed design"):
        space.validate({"hidden_size": 312})
    assert space.config["num_labels"] == 5
    assert get_space("mixedvocab", num_hidden_layers=12).config["num_hidden_layers"] == 12
    with pytest.raises(SpaceDefinitionError, match="divisible"):
        get_space("bert", hidden_size=100, num_attention_heads=12)


@pytest.mark.parametrize("name", sorted(PUBLISHED_PARAMS))
def test_parameter_counts_match_spec(name):
    costs = count_costs(get_space(name))
    assert abs(costs.params - PUBLISHED_PARAMS[name]) <= 0.02 * PUBLISHED_PARAMS[name], costs.params


@pytest.mark.parametrize(("name", "seq_len"), sorted(PUBLISHED_FLOPS))
def test_flops_match_spec(name, seq_len):
    flops = count_costs(get_space(name), seq_len=seq_len).flops
    target = PUBLISHED_FLOPS[(name, seq_len)]
    assert abs(flops - target) <= 0.03 * target, flops / 1e9


@pytest.mark.parametrize("seq_len", [128, 384])
def test_released_mobilebert_differs_from_table1_by_its_mha_inputs(seq_len):
    """HF's MobileBERT (shared k/q bottleneck) has fewer MACs than the paper's Table 1 block
    (MHA on the 512 feature map) by exactly the projections it saves, worked by hand:
    per token and layer, 3·512·128 (q, k, v from 512) vs 512·128 + 2·128·128 + 512·128."""
    paper = count_costs(get_space("mobilebert-paper"), seq_len=seq_len)
    released = count_costs(get_space("mobilebert"), seq_len=seq_len)
    saved = 3 * 512 * 128 - (512 * 128 + 2 * 128 * 128 + 512 * 128)
    assert paper.macs - released.macs == 24 * seq_len * saved
    assert released.flops == pytest.approx(5.39e9 if seq_len == 128 else 17.36e9, rel=0.01)


def _hf_params(config, model_cls) -> int:
    with torch.device("meta"):
        model = model_cls(config)
    return sum(p.numel() for p in model.parameters())


def _hf_count(space, arch=None) -> int:
    """Parameters of the HF base model of the child, plus its classifier (ours has one)."""
    from transformers import BertModel, MobileBertModel

    from nas.hf import hf_config

    config = hf_config(space.config, arch or {})
    cls = BertModel if space.config["family"] == "bert" else MobileBertModel
    return _hf_params(config, cls) + config.num_labels * (config.hidden_size + 1)


@pytest.mark.parametrize("name", ["bert-base", "bert-large", "minilm-l6-h384", "tinybert",
                                  "mixedvocab-l6", "mixedvocab-l12", "mobilebert",
                                  "mobilebert-tiny"])
def test_parameter_counts_equal_transformers_exactly(name):
    space = get_space(name)
    assert count_costs(space).params == _hf_count(space)


def test_every_grid_child_is_an_hf_mobilebert_of_the_same_size():
    space = get_space("mobilebert-grid")
    for seed in range(4):
        arch = space.sample(seed)
        assert count_costs(space, arch).params == _hf_count(space, arch), dict(arch)


def test_grid_default_is_the_released_mobilebert():
    grid, fixed = get_space("mobilebert-grid"), get_space("mobilebert")
    arch = grid.default()
    assert arch["intra_bottleneck_size"] == 128 and arch["num_feedforward_networks"] == 4
    assert arch["normalization_type"] == "no_norm" and arch["hidden_act"] == "relu"
    for seq_len in (128, 384):
        a, b = count_costs(grid, arch, seq_len), count_costs(fixed, seq_len=seq_len)
        assert (a.params, a.macs) == (b.params, b.macs)


def test_grid_choices_and_heads_constraint():
    space = get_space("mobilebert-grid")
    names = {c.name for c in space.choices()}
    assert names == {"hidden_size", "intra_bottleneck_size", "num_attention_heads",
                     "num_feedforward_networks", "intermediate_size", "num_hidden_layers",
                     "normalization_type", "hidden_act", "attention_input", "trigram_input"}
    bad = {**space.default(), "intra_bottleneck_size": 128, "num_attention_heads": 3}
    with pytest.raises(ArchitectureError, match="not divisible by num_attention_heads=3"):
        space.validate(bad)
    # the paper's grid points (docs/reference.md#mobilebert) are valid architectures
    for intra, heads, stack in ((192, 6, 1), (160, 5, 2), (128, 4, 4), (96, 3, 8)):
        space.validate({**space.default(), "intra_bottleneck_size": intra,
                        "num_attention_heads": heads, "num_feedforward_networks": stack})


def test_bert_design_records_distillation_states():
    space = get_space("bert", vocab_size=100, hidden_size=16, num_hidden_layers=3,
                      num_attention_heads=2, intermediate_size=24, fit_size=32)
    from nas.builder import build_child

    model = build_child(space).eval()
    batch = {"input_ids": torch.randint(0, 100, (2, 5)),
             "attention_mask": torch.ones(2, 5, dtype=torch.long)}
    out = model(batch, record=("embeddings", "hidden_states", "attention_scores", "aux"))
    assert len(out.records["embeddings"]) == 1
    assert [h.shape for h in out.records["hidden_states"]] == [(2, 5, 16)] * 3
    assert [a.shape for a in out.records["attention_scores"]] == [(2, 2, 5, 5)] * 3
    assert out.aux["fit"].shape == (2, 5, 32)
    costs = count_costs(space)
    assert costs.params_by_group["distill"] == 16 * 32 + 32
