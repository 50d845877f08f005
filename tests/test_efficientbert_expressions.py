"""EfficientBERT's FFN expression space (docs/reference.md#efficientbert): validity rules,
functional de-duplication, the enumeration, its encoding, the published architecture, and every
enumerated expression running with shared linears."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

from nas.architecture import load_architecture
from nas.builder import build_supernet, extract_child
from nas.cost import batch_for, count_costs
from nas.cost_tables import tables_for
from nas.errors import ArchitectureError, SpaceDefinitionError
from nas.ops.basic import ACTIVATIONS, BINARY_FUNCTIONS
from nas.ops.expression import Expr, FFNExpression, canonical, parse
from nas.space import get_space, small_config
from spaces.efficientbert import (
    SEED_EXPRESSION,
    canonical_expression,
    enumerate_expressions,
    expression_problem,
    functional_hash,
)

PAPER = "experiments/archs/efficientbert_paper.json"
PAPER_EXPRESSIONS = [
    "tanh(linear2(gelu(linear1(x))))",
    "elu(linear2(gelu(linear1(x))))",
    "sigmoid(linear2(relu(linear1(x))))",
    "linear2(gelu(linear1(max(x, tanh(x)))))",
    "linear2(relu(mul(linear1(x), x)))",
    "leaky_relu(linear2(gelu(linear1(x))))",
]


# --------------------------------------------------------------------------- rules


@pytest.mark.parametrize(("text", "phrase"), [
    ("linear2(gelu(linear1(y)))", "does not use the input x"),
    ("linear2(add(linear1(x), y))", "x is the only input"),
    ("linear2(gelu(x))", "0 linear1 and 1 linear2"),
    ("linear2(gelu(linear1(tanh(linear1(x)))))", "2 linear1"),
    ("add(linear2(gelu(linear1(x))), linear2(x))", "2 linear2"),
    ("linear1(gelu(linear2(x)))", "does not feed linear1 into linear2"),
    ("linear2(tanh(gelu(linear1(x))))", "activation directly to an activation"),
    ("linear2(linear1(x))", "linear directly to a linear"),
    ("linear2(gelu(linear1(add(x, x))))", "two identical arguments"),
    ("linear2(gelu(linear1(max(tanh(x), tanh(x)))))", "two identical arguments"),
    ("linear2(gelu(linear1(max(x, tanh(x)))))", "height 5, above the bound 4"),
    ("add(linear2(mul(linear1(x), tanh(x))), relu(x))", "4 math ops, above the bound 3"),
])
def test_each_rule_rejects_a_hand_made_expression(text, phrase):
    problem = expression_problem(parse(text), max_height=4, max_ops=3)
    assert problem is not None and phrase in problem


def test_the_published_expressions_break_no_rule():
    for text in [SEED_EXPRESSION, *PAPER_EXPRESSIONS]:
        assert expression_problem(parse(text)) is None, text


@pytest.mark.parametrize(("text", "phrase"), [
    ("linear2(foo(linear1(x)))", "unknown op 'foo'"),
    ("linear2(add(linear1(x)))", "add takes 2 argument(s), got 1"),
    ("linear2(gelu(linear1(x))", "missing ')'"),
    ("linear2(gelu(linear1(x))) x", "unexpected 'x' after"),
    ("linear2(gelu(linear1(x+1)))", "unexpected '+1"),
])
def test_unreadable_expressions_are_one_line_errors(text, phrase):
    with pytest.raises(ArchitectureError, match=None) as err:
        parse(text)
    assert phrase in str(err.value) and "\n" not in str(err.value)


def test_the_space_names_the_rule_an_invalid_expression_breaks():
    space = get_space("efficientbert", **small_config("efficientbert"))
    bad = {**space.default(), "L1.expr": "linear2(gelu(linear1(add(x, x))))"}
    with pytest.raises(ArchitectureError, match=r"choice 'L1.expr': .*identical arguments"):
        space.validate(bad)


# --------------------------------------------------------------------------- dedup


def test_commuted_and_equivalent_expressions_collapse():
    # commuted arguments: one canonical text, one hash
    a, b = parse("linear2(relu(mul(x, linear1(x))))"), parse("linear2(relu(mul(linear1(x), x)))")
    assert canonical(a) == canonical(b) and functional_hash(a) == functional_hash(b)
    assert canonical_expression(a.text) == "linear2(relu(mul(linear1(x), x)))"
    # another form of the same function: max(x, relu(x)) is relu(x)
    long = "linear2(gelu(linear1(max(x, relu(x)))))"
    assert expression_problem(parse(long)) is None
    assert canonical_expression(long) == "linear2(gelu(linear1(relu(x))))"
    assert long not in enumerate_expressions()
    # different functions keep different hashes
    assert functional_hash(parse(SEED_EXPRESSION)) != functional_hash(
        parse("linear2(relu(linear1(x)))"))


def test_the_space_accepts_equivalent_forms_as_their_canonical_value():
    space = get_space("efficientbert", **small_config("efficientbert"))
    arch = space.validate({**space.default(), "L0.expr": "linear2(relu(mul(x, linear1(x))))"})
    assert arch["L0.expr"] == "linear2(relu(mul(linear1(x), x)))"


def test_enumerated_expressions_are_valid_canonical_and_distinct_functions():
    texts = enumerate_expressions()
    assert len(set(texts)) == len(texts)
    hashes = set()
    for t in texts:
        e = parse(t)
        assert canonical(e).text == t and expression_problem(e) is None, t
        hashes.add(functional_hash(e))
    assert len(hashes) == len(texts)


def test_the_number_of_expressions_is_stable():
    """Changing the rules, the ops or the hash changes these counts: say why in the
    space's docstring when updating them."""
    assert len(enumerate_expressions()) == 3645  # height ≤ 5, ≤ 3 math ops (the default)
    assert len(enumerate_expressions(4, 2)) == 248
    assert len(enumerate_expressions(5, 1)) == 10  # 7 activations + 3 binaries with x
    assert SEED_EXPRESSION in enumerate_expressions()
    assert all(t in enumerate_expressions() for t in PAPER_EXPRESSIONS)


def _all_trees(height: int, ops: int, linears: int) -> set[Expr]:
    """Every tree over x with ≤ ``ops`` math ops and ≤ ``linears`` linear nodes, any
    placement (no pruning by rules): the brute force the typed enumeration must match."""
    if height < 0:
        return set()
    out = {Expr("x")}
    if height == 0:
        return out
    for lin in range(1, linears + 1):
        out |= {Expr(op, (a,)) for op in ("linear1", "linear2")
                for a in _all_trees(height - 1, ops, lin - 1)}
    if ops >= 1:
        for lin in range(linears + 1):
            sub = _all_trees(height - 1, ops - 1, lin)
            out |= {Expr(u, (a,)) for u in ACTIVATIONS for a in sub}
            for a, b in itertools.product(sub, repeat=2):
                if a.math_ops + b.math_ops <= ops - 1 and a.count("linear1") + \
                        b.count("linear1") + a.count("linear2") + b.count("linear2") <= lin:
                    out |= {Expr(op, (a, b)) for op in BINARY_FUNCTIONS}
    return out


def test_the_enumeration_equals_brute_force_on_small_bounds():
    height, ops = 4, 2
    valid = sorted((canonical(e) for e in _all_trees(height, ops, 2)
                    if expression_problem(e, height, ops) is None),
                   key=lambda e: (e.math_ops, e.height, e.text))
    kept: dict[str, str] = {}
    for e in valid:
        kept.setdefault(functional_hash(e), e.text)
    assert sorted(kept.values()) == sorted(enumerate_expressions(height, ops))


# --------------------------------------------------------------------------- encoding


def test_every_expression_has_a_distinct_slot_encoding_that_decodes_back():
    space = get_space("efficientbert", **small_config("efficientbert"))
    choice = space.choice("L0.expr")
    table = np.array([choice.encode(v) for v in choice.values])
    assert table.shape == (3645, choice.encoded_width) and choice.encoded_width < 200
    assert set(np.unique(table)) == {0.0, 1.0}
    assert len({tuple(r) for r in table}) == len(choice)
    for v in choice.values[::7]:
        assert choice.decode(choice.encode(v)) == v
    # one slot encoding: the seed and tanh(seed) differ in their output slot's token
    seed, tanh = choice.encode(SEED_EXPRESSION), choice.encode(f"tanh({SEED_EXPRESSION})")
    assert 0 < sum(abs(p - q) for p, q in zip(seed, tanh, strict=True)) < 12


def test_the_cost_tables_do_not_depend_on_the_expression():
    space = get_space("efficientbert")
    tables = tables_for(space, 128)
    assert not any(c.endswith(".expr") for g in tables.groups for c in g.choices)
    arch = space.default()
    other = arch.replace(**{f"L{i}.expr": "linear2(relu(mul(linear1(x), x)))"
                            for i in range(6)})
    assert count_costs(space, arch) == count_costs(space, other)


# --------------------------------------------------------------------------- the paper


def test_the_published_architecture_round_trips():
    space = get_space("efficientbert")
    arch = load_architecture(PAPER)
    assert [arch[f"L{i}.expr"] for i in range(6)] == PAPER_EXPRESSIONS
    assert space.validate(dict(arch)) == arch
    assert space.decode(space.encode(arch)) == arch
    again = json.loads(json.dumps(arch.to_dict()))
    assert space.validate(again["choices"]) == arch
    costs = count_costs(space, arch, 128)
    assert round(costs.params_paper / 1e6, 2) == 15.74
    assert space.default()["L0.expr"] == SEED_EXPRESSION


def test_ratios_above_one_are_refused():
    with pytest.raises(SpaceDefinitionError, match="expansion ratio '2' must be"):
        get_space("efficientbert", ratios=("1", "2"))
    with pytest.raises(SpaceDefinitionError, match="max_height must be an integer of at least 3"):
        get_space("efficientbert", max_height=2)


# --------------------------------------------------------------------------- running


def test_every_enumerated_expression_builds_runs_and_trains_both_linears():
    torch.manual_seed(0)
    hidden, inner = 8, 4
    op = FFNExpression([hidden], hidden, {"inner": inner, "expr": SEED_EXPRESSION})
    x = torch.randn(2, 3, hidden)
    for text in enumerate_expressions():
        op.zero_grad()
        y = op([x], hidden, {"inner": inner, "expr": text}, None)
        assert y.shape == (2, 3, hidden) and torch.isfinite(y).all(), text
        y.pow(2).sum().backward()
        assert op.linear1.weight.grad is not None and op.linear2.weight.grad is not None, text


def test_children_with_published_expressions_equal_the_supernet_slice():
    torch.manual_seed(0)
    space = get_space("efficientbert", **{**small_config("efficientbert"), "layers": 6})
    supernet = build_supernet(space).eval()
    batch = batch_for(space, batch_size=2, seq_len=10)
    paper = load_architecture(PAPER)
    arch = space.validate({**space.default(), **{k: v for k, v in paper.items()
                                                 if k.endswith(".expr") or k.endswith(".stack")},
                           **{f"L{i}.ratio": "1/2" for i in range(6)}})
    with torch.no_grad():
        child = extract_child(supernet, space, arch).eval()
        assert torch.allclose(child(batch).logits, supernet(batch, arch=arch).logits, atol=1e-5)
    # every expression of a stack slot shares the slot's two linears
    names = [n for n, _ in supernet.named_parameters() if "L0_f0_ffn" in n]
    assert sorted(names) == sorted(f"nodes.L0_f0_ffn.{m}.{t}" for m in ("linear1", "linear2")
                                   for t in ("weight", "bias"))


def test_relaxed_expressions_mix_and_one_hot_weights_equal_the_fixed_architecture():
    torch.manual_seed(0)
    space = get_space("efficientbert", **{**small_config("efficientbert"), "max_ops": 1})
    supernet = build_supernet(space).eval()
    batch = batch_for(space, batch_size=2, seq_len=8)
    arch = space.sample(1)
    weights = {c.name: torch.nn.functional.one_hot(torch.tensor(c.index(arch[c.name])),
                                                   len(c)).float()
               for c in space.choices() if c.kind != "width"}
    with torch.no_grad():
        fixed = supernet(batch, arch=arch).logits
        mixed = supernet(batch, weights=weights, arch={c.name: arch[c.name]
                                                       for c in space.choices()
                                                       if c.kind == "width"}).logits
    assert torch.allclose(fixed, mixed, atol=1e-5)
    # a hard sample scales by its weight, so the expression's logits get a gradient
    logits = {n: torch.zeros(len(space.choice(n)), requires_grad=True) for n in weights}
    soft = {n: torch.softmax(v, 0) for n, v in logits.items()}
    supernet(batch, weights=soft, hard=True).logits.sum().backward()
    assert logits["L0.expr"].grad is not None and logits["L0.expr"].grad.abs().sum() > 0


def test_lanas_searches_the_expressions_through_their_slot_encoding():
    """LaNAS's classifiers see the slot encoding (not a 3,645-wide one-hot) and propose
    valid, distinct architectures inside the learned region."""
    import optuna

    from searchers.lanas import LaNASSampler
    from searchers.optuna_bridge import SpaceBridge

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = get_space("efficientbert", **small_config("efficientbert"))
    bridge = SpaceBridge(space)
    sampler = LaNASSampler(search_space=bridge.distributions,
                           encodings=bridge.encoding_tables(), seed=0, n_startup_trials=12,
                           rebuild_every=4, leaf_size=4, max_draws=2000)
    assert sampler._encoding(bridge.distributions).width == space.encoded_width < 250
    study = optuna.create_study(direction="maximize", sampler=sampler)
    seen = set()
    for _ in range(24):
        trial = study.ask()
        arch = bridge.architecture(bridge.suggest(trial))
        assert arch.id not in seen
        seen.add(arch.id)
        # a synthetic score: an activation on layer 0's output pays (a third of all
        # expressions have one)
        study.tell(trial, float(arch["L0.expr"].split("(")[0] in ACTIVATIONS))
    late = [t.value for t in study.trials[12:]]
    # the tree learned the rule (random draws score 1/3; 12 draws at 1/3 reach half in 12%)
    assert sum(late) >= 0.5 * len(late), late


def test_a_categorical_with_features_encodes_by_them():
    from nas.choices import Categorical

    c = Categorical("c", ("a", "b", "c"), features=[[0, 1], [1, 0], [1, 1]])
    assert c.encoded_width == 2 and c.encode("b") == [1.0, 0.0]
    assert c.decode([0.9, 0.2]) == "b" and c.decode([0.8, 0.9]) == "c"
    with pytest.raises(SpaceDefinitionError, match="one non-empty vector per value"):
        Categorical("c", ("a", "b"), features=[[1.0]])
    with pytest.raises(SpaceDefinitionError, match="same features"):
        Categorical("c", ("a", "b"), features=[[1.0], [1.0]])
