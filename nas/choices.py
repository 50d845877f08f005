"""Choices: the named dimensions of a search space.

A choice is a finite, ordered set of allowed values with a name. Two kinds cover
every family in docs/reference.md:

* :class:`Categorical` -- any JSON scalars (op names, ratios such as ``"1/2"``);
* :class:`IntChoice` -- an integer range ``low..high`` (depth, stack number).

A choice is *shared* when one name is referenced from many places of a graph
(AdaBERT's cell structure is shared by all stacked cells, docs/reference.md#adabert) and *per layer*
when a space declares one choice per layer (EfficientBERT, docs/reference.md#efficientbert); see
:func:`per_layer`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from nas.errors import ArchitectureError, SpaceDefinitionError

Scalar = str | int | float | bool


def as_number(value: Scalar) -> float | None:
    """The numeric reading of a value (``"1/3"`` → 0.333…), or ``None`` when it has none."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return float(Fraction(value))
        except (ValueError, ZeroDivisionError):
            return None
    return None


def number(value: Scalar) -> float:
    """:func:`as_number` of a value known to have one (a value of a numeric choice)."""
    n = as_number(value)
    if n is None:
        raise ValueError(f"{value!r} has no numeric reading")
    return n


#: Feature tables already checked, by identity (a space shares one table among its layers).
_CHECKED_FEATURES: dict[int, tuple] = {}


@dataclass(frozen=True)
class Categorical:
    """A named choice among an ordered list of values.

    ``kind`` says what the choice controls: ``"op"`` (an op on an edge or a node),
    ``"depth"`` (how many of a repeated block are active), ``"width"`` (an elastic
    dimension) or ``"other"``. Searchers treat them alike; the supernet relaxes
    ``op`` and ``depth`` choices and takes the largest value of ``width`` choices.

    ``features`` (optional) gives each value, in order, a numeric vector that model-based
    samplers see instead of the default encoding (value or one-hot, :meth:`encode`): a
    choice over many structured values (EfficientBERT's FFN expressions,
    docs/reference.md#efficientbert) is better described by what its values are made of than by a
    one-hot over thousands of names. The vectors must be distinct and equally long.
    """

    name: str
    values: tuple[Scalar, ...]
    default: Scalar | None = None
    kind: str = "op"
    doc: str = ""
    features: tuple[tuple[float, ...], ...] | None = field(default=None, repr=False,
                                                           compare=False, hash=False)
    _index: dict[Scalar, int] = field(init=False, repr=False, compare=False, hash=False)
    _matrix: Any = field(init=False, default=None, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        values = tuple(self.values)
        object.__setattr__(self, "values", values)
        if not values:
            raise SpaceDefinitionError(f"choice {self.name!r} has no values")
        if len(set(map(_key, values))) != len(values):
            raise SpaceDefinitionError(f"choice {self.name!r} repeats a value: {values}")
        if self.kind not in ("op", "depth", "width", "other"):
            raise SpaceDefinitionError(
                f"choice {self.name!r}: kind must be op, depth, width or other, got {self.kind!r}"
            )
        if self.default is None:
            object.__setattr__(self, "default", values[0])
        object.__setattr__(self, "_index", {_key(v): i for i, v in enumerate(values)})
        if _key(self.default) not in self._index:
            raise SpaceDefinitionError(
                f"choice {self.name!r}: default {self.default!r} is not one of "
                f"{shown_values(values)}"
            )
        if self.features is not None:
            rows = self.features
            if _CHECKED_FEATURES.get(id(rows)) is rows and len(rows) == len(values):
                return  # the same table as another choice's (one per layer): checked already
            if not (isinstance(rows, tuple) and all(type(r) is tuple for r in rows)):
                rows = tuple(tuple(float(x) for x in row) for row in rows)
            if len(rows) != len(values) or len({len(r) for r in rows}) != 1 or not rows[0]:
                raise SpaceDefinitionError(
                    f"choice {self.name!r}: features need one non-empty vector per value, all "
                    f"equally long ({len(values)} values, {len(rows)} vectors)")
            if len(set(rows)) != len(rows):
                raise SpaceDefinitionError(
                    f"choice {self.name!r}: two values have the same features; the encoding "
                    "could not tell them apart")
            object.__setattr__(self, "features", rows)
            if len(_CHECKED_FEATURES) >= 64:
                _CHECKED_FEATURES.clear()
            _CHECKED_FEATURES[id(rows)] = rows

    # -- queries ---------------------------------------------------------
    def __len__(self) -> int:
        return len(self.values)

    @property
    def numeric(self) -> bool:
        """True when every value has a numeric reading (ints, floats, fractions)."""
        return all(as_number(v) is not None for v in self.values)

    def index(self, value: Any) -> int:
        """Position of ``value``; raises :class:`ArchitectureError` naming the allowed values."""
        try:
            return self._index[_key(value)]
        except (KeyError, TypeError):
            raise ArchitectureError(
                f"choice {self.name!r}: {value!r} is not allowed; "
                f"allowed values: {shown_values(self.values)}"
            ) from None

    def validate(self, value: Any) -> Scalar:
        """Return the canonical allowed value equal to ``value`` (``1.0`` → ``1`` for ints)."""
        return self.values[self.index(value)]

    def largest(self) -> Scalar:
        """The value with the largest numeric reading (the supernet's size for widths)."""
        if not self.numeric:
            return self.values[-1]
        return max(self.values, key=number)

    def sample(self, rng: np.random.Generator) -> Scalar:
        return self.values[int(rng.integers(len(self.values)))]

    # -- numeric encoding (for the LaNAS tree and other model-based samplers) --
    @property
    def encoded_width(self) -> int:
        if self.features is not None:
            return len(self.features[0])
        return 1 if self.numeric else len(self.values)

    def encode(self, value: Any) -> list[float]:
        """The value's ``features`` when the choice has them; else numeric choices encode
        as their value, others one-hot."""
        i = self.index(value)
        if self.features is not None:
            return list(self.features[i])
        if self.numeric:
            return [number(self.values[i])]
        return [1.0 if j == i else 0.0 for j in range(len(self.values))]

    def decode(self, vector: Sequence[float]) -> Scalar:
        """Inverse of :meth:`encode`: the value with the nearest features (Euclidean), the
        nearest value (numeric) or the arg-max (one-hot)."""
        if len(vector) != self.encoded_width:
            raise ArchitectureError(
                f"choice {self.name!r}: expected {self.encoded_width} numbers, got {len(vector)}"
            )
        if self.features is not None:
            if self._matrix is None:  # the features as an array, made once
                object.__setattr__(self, "_matrix", np.asarray(self.features, dtype=np.float64))
            table = self._matrix
            distance = ((table - np.asarray(vector, dtype=np.float64)) ** 2).sum(axis=1)
            return self.values[int(np.argmin(distance))]
        if self.numeric:
            target = float(vector[0])
            return min(self.values, key=lambda v: abs(number(v) - target))
        return self.values[int(np.argmax(np.asarray(vector, dtype=float)))]

    def describe(self) -> str:
        shown = ", ".join(map(str, self.values[:12]))
        if len(self.values) > 12:
            shown += f", ... ({len(self.values)} values)"
        return f"{self.name} [{self.kind}] ∈ {{{shown}}} (default {self.default})"


def shown_values(values: Sequence[Scalar], limit: int = 12) -> str:
    """``values`` for a message: all of them, or the first few and how many there are."""
    if len(values) <= limit:
        return ", ".join(map(repr, values))
    return f"{', '.join(map(repr, values[:limit]))}, ... ({len(values)} values)"


def IntChoice(  # noqa: N802 - reads as a type at call sites
    name: str, low: int, high: int, default: int | None = None, kind: str = "depth", doc: str = ""
) -> Categorical:
    """An integer choice ``low..high`` inclusive (depth K, stack number N)."""
    if not (isinstance(low, int) and isinstance(high, int)) or low > high:
        raise SpaceDefinitionError(f"choice {name!r}: need integers low <= high, got {low}..{high}")
    return Categorical(name, tuple(range(low, high + 1)), default, kind=kind, doc=doc)


def per_layer(choice: Categorical, layers: int, fmt: str = "L{i}.{name}") -> list[Categorical]:
    """One copy of ``choice`` per layer, named ``L0.name``, ``L1.name``...
    (docs/reference.md#efficientbert)."""
    return [
        Categorical(fmt.format(i=i, name=choice.name), choice.values, choice.default,
                    choice.kind, choice.doc, choice.features)
        for i in range(layers)
    ]


def _key(value: Any) -> Any:
    # 1 and 1.0 and True are equal in Python; keep bools apart and ints/floats together.
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return value
