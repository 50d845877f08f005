"""Choices, architectures and registries: the value types every other part relies on."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from nas.architecture import Architecture, load_architecture
from nas.choices import Categorical, IntChoice, per_layer
from nas.errors import ArchitectureError, RegistryError, SpaceDefinitionError
from nas.registry import Registry


def test_categorical_validate_names_choice_value_and_allowed_values():
    c = Categorical("act", ("gelu", "relu"))
    assert c.validate("relu") == "relu"
    with pytest.raises(ArchitectureError) as err:
        c.validate("tanh")
    assert str(err.value) == "choice 'act': 'tanh' is not allowed; allowed values: 'gelu', 'relu'"


def test_int_choice_range_default_and_numeric_encoding():
    depth = IntChoice("depth", 1, 4, default=3)
    assert depth.values == (1, 2, 3, 4) and depth.default == 3
    assert depth.validate(2.0) == 2 and isinstance(depth.validate(2.0), int)
    assert depth.encode(3) == [3.0] and depth.decode([3.4]) == 3
    with pytest.raises(SpaceDefinitionError):
        IntChoice("bad", 3, 1)


def test_fraction_values_are_numeric_and_largest():
    ratio = Categorical("ratio", ("1", "1/2", "1/3", "1/4"), kind="width")
    assert ratio.numeric and ratio.largest() == "1"
    assert ratio.encode("1/4") == [0.25] and ratio.decode([0.3]) == "1/3"


def test_one_hot_encoding_round_trip_and_bad_length():
    c = Categorical("op", ("a", "b", "c"))
    assert c.encode("b") == [0.0, 1.0, 0.0]
    assert c.decode([0.1, 0.2, 0.9]) == "c"
    with pytest.raises(ArchitectureError, match="expected 3 numbers, got 2"):
        c.decode([1.0, 0.0])


def test_bool_and_int_values_are_kept_apart():
    c = Categorical("flag", (True, False))
    with pytest.raises(ArchitectureError):
        c.index(1)


def test_per_layer_names_each_copy():
    names = [c.name for c in per_layer(Categorical("ratio", ("1", "1/2")), 3)]
    assert names == ["L0.ratio", "L1.ratio", "L2.ratio"]


def test_architecture_is_canonical_immutable_and_has_a_stable_id():
    a = Architecture({"b": 2, "a": "x"}, space="demo")
    b = Architecture({"a": "x", "b": 2}, space="demo")
    assert a == b and hash(a) == hash(b)
    assert a.to_json() == '{"a":"x","b":2}'
    # the id is the SHA-1 of "space:canonical json": stable across processes and machines
    assert a.id == hashlib.sha1(b'demo:{"a":"x","b":2}', usedforsecurity=False).hexdigest()[:12]
    with pytest.raises(TypeError):
        a["a"] = "y"  # type: ignore[index]  # a frozen mapping, written on purpose
    assert a.replace(b=3)["b"] == 3 and a["b"] == 2


def test_architecture_rejects_non_scalar_values():
    with pytest.raises(ArchitectureError, match="JSON scalars"):
        Architecture({"a": [1, 2]})


def test_load_architecture_from_file_inline_and_errors(tmp_path):
    path = tmp_path / "arch.json"
    Architecture({"depth": 3}, "adabert").save(path)
    assert load_architecture(path) == Architecture({"depth": 3}, "adabert")
    assert load_architecture('{"depth": 3}')["depth"] == 3
    with pytest.raises(ArchitectureError, match="inline JSON: broken JSON at line 1 column 12"):
        load_architecture('{"depth": 3')
    with pytest.raises(ArchitectureError, match="does not exist"):
        load_architecture(str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"space": "x", "choices": {}, "extra": 1}))
    with pytest.raises(ArchitectureError, match="unexpected keys \\['extra'\\]"):
        load_architecture(bad)


def test_registry_duplicates_unknown_names_and_wildcards():
    reg: Registry[int] = Registry("widget")
    reg.register("tiny-bert")(1)
    reg.add("mobile-bert", 2)
    reg.add("resnet", 3)
    with pytest.raises(RegistryError, match="already registered"):
        reg.add("resnet", 4)
    with pytest.raises(RegistryError) as err:
        reg.get("tiny-brt")
    assert "did you mean 'tiny-bert'" in str(err.value)
    assert reg.names("*bert*") == ["mobile-bert", "tiny-bert"]
    assert reg.get("resnet") == 3 and len(reg) == 3


def test_space_validation_messages():
    from nas.space import get_space

    space = get_space("adabert")
    with pytest.raises(ArchitectureError, match="has no choice 'dpth'; did you mean 'depth'"):
        space.validate({**space.default(), "dpth": 2})
    with pytest.raises(ArchitectureError, match="lacks choice\\(s\\) depth"):
        space.validate({k: v for k, v in space.default().items() if k != "depth"})
    with pytest.raises(ArchitectureError, match="choice 'depth': 9 is not allowed"):
        space.validate({**space.default(), "depth": 9})


def test_space_size_counts_valid_architectures_only():
    from nas.space import get_space

    space = get_space("efficientbert", layers=1)
    # per layer: 3,645 valid, distinct FFN expressions × stack 4 × ratio 4
    assert space.size() == 3645 * 4 * 4
    rng = np.random.default_rng(0)
    for _ in range(20):
        space.validate(space.sample(rng))
