"""The cost tables (15bb29e) count exactly what the plan walk counts.

``count_costs`` reads per-space tables (:mod:`nas.cost_tables`); ``count_costs_reference``
walks each architecture's plan. They must agree on every architecture of every registered
space; the thop cross-check of the tables' counts is ``test_space_contract.py``'s.
"""

from __future__ import annotations

import numpy as np
import pytest

from nas import cost_tables
from nas.architecture import Architecture
from nas.cost import count_costs, count_costs_reference
from nas.errors import ArchitectureError
from nas.space import get_space, list_spaces, small_config

ARCHS = 50


def draws(space, n: int = ARCHS, seed: int = 0) -> list[Architecture]:
    """``n`` random architectures (the one architecture of a fixed design)."""
    rng = np.random.default_rng(seed)
    return [space.sample(rng) for _ in range(1 if space.is_fixed else n)]


@pytest.mark.parametrize("name", list_spaces(tabular=False))
def test_tables_equal_the_reference_on_every_registered_space(name):
    space = get_space(name)
    for arch in draws(space):
        assert count_costs(space, arch, 128) == count_costs_reference(space, arch, 128), arch


@pytest.mark.parametrize("name", list_spaces(tabular=False))
def test_tables_equal_the_reference_on_small_configs_at_other_lengths(name):
    space = get_space(name, **small_config(name))
    for seq_len in (1, 37):
        for arch in draws(space, 20, seed=seq_len):
            assert count_costs(space, arch, seq_len) == count_costs_reference(
                space, arch, seq_len), (seq_len, arch)


def test_shared_modules_and_pairs_count_as_in_the_reference():
    """AdaBERT for sentence pairs embeds sentence B with sentence A's module (``share``)."""
    space = get_space("adabert", pair=True)
    for arch in draws(space):
        assert count_costs(space, arch) == count_costs_reference(space, arch)
    # every edge 'zero': the cells read nothing, so no embedding is needed at all
    empty = space.default().replace(**{c.name: "zero" for c in space.choices()
                                       if c.name != "depth"})
    assert count_costs(space, empty) == count_costs_reference(space, empty)
    assert "embeddings" not in count_costs(space, empty).params_by_group


@pytest.mark.parametrize("name", ["adabert", "efficientbert", "mobilebert-grid", "mobilebert"])
def test_the_fallback_for_untabulated_elements_is_exact(name, monkeypatch):
    """With no table allowed, every element is computed per architecture (_Child)."""
    monkeypatch.setattr(cost_tables, "ENUMERATION_LIMIT", 0)
    space = get_space(name, **small_config(name))
    tables = cost_tables.tables_for(space, 16)
    assert tables.entries == 0 and all(g.table == {} for g in tables.groups)
    for arch in draws(space, 30):
        assert count_costs(space, arch, 16) == count_costs_reference(space, arch, 16), arch
    assert tables.entries > 0


@pytest.mark.parametrize("limit", [3, 12, 40])
@pytest.mark.parametrize("name", ["adabert", "efficientbert", "mobilebert-grid"])
def test_tables_under_a_small_enumeration_limit_are_exact(name, limit, monkeypatch):
    """Small limits take every path of the analysis: tables narrowed to the inputs that
    matter, elements without a table, groups filled as architectures come."""
    monkeypatch.setattr(cost_tables, "ENUMERATION_LIMIT", limit)
    space = get_space(name, **small_config(name))
    for arch in draws(space, 30, seed=limit):
        assert count_costs(space, arch, 16) == count_costs_reference(space, arch, 16), arch


def test_tables_depend_on_few_choices():
    """What makes the tables fast: an element depends on few choices (a MobileBERT
    block's linear on its widths and depth, not on all ten choices)."""
    for name in ("adabert", "efficientbert", "mobilebert-grid"):
        tables = cost_tables.tables_for(get_space(name), 128)
        assert max(len(g.choices) for g in tables.groups) <= 6, name
        assert len(tables.groups) <= 40, name
        assert all(g.table for g in tables.groups), f"{name}: a table left to fill"


def test_inputs_are_still_validated_and_canonicalised():
    space = get_space("adabert", **small_config("adabert"))
    arch = dict(space.default())
    as_float = {**arch, "depth": float(arch["depth"])}
    assert count_costs(space, as_float) == count_costs(space, arch)
    with pytest.raises(ArchitectureError, match="depth"):
        count_costs(space, {**arch, "depth": 99})
    with pytest.raises(ArchitectureError, match="no choice"):
        count_costs(space, {**arch, "dept": 2})
    with pytest.raises(ArchitectureError, match="not 'adabert'"):
        count_costs(space, Architecture(arch, "efficientbert"))
    eb = get_space("efficientbert", **small_config("efficientbert"))
    bad = eb.default().replace(**{"L0.expr": "linear2(gelu(linear1(add(x, x))))"})  # x + x
    with pytest.raises(ArchitectureError, match="identical arguments"):
        count_costs(eb, dict(bad), seq_len=16)


def test_tables_are_cached_per_space_object_and_length():
    space = get_space("tinybert", **small_config("tinybert"))
    assert cost_tables.tables_for(space, 8) is cost_tables.tables_for(space, 8)
    assert cost_tables.tables_for(space, 8) is not cost_tables.tables_for(space, 9)
    other = get_space("tinybert")
    assert count_costs(other).params != count_costs(space).params
