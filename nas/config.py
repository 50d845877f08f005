"""Typed experiment configurations read from YAML, with errors that name the key."""

from __future__ import annotations

import copy
import dataclasses
import math
import re
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from nas.errors import NasError

T = TypeVar("T")

_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


class ConfigError(NasError):
    """An experiment file is missing, malformed, or has an unknown key or a wrong type."""


def check_fields(pairs: list[tuple[str, bool, str]], values: Any) -> None:
    """Range checks of a settings dataclass: each ``(field, ok, allowed)`` that is not ok
    raises one ``ValueError`` naming the field, what it allows and the value given."""
    for name, ok, allowed in pairs:
        if not ok:
            raise ValueError(f"{name} must be {allowed}, got {getattr(values, name)!r}")


def cap_ok(cap: int | None, least: int = 1) -> bool:
    """Whether ``cap`` is a row cap: ``None`` (no cap: every row) or at least ``least``.
    Written for the checks of every ``max_*_examples`` setting, so that a cap of 0 is
    refused rather than read as "no cap" by a falsy test (``cap or least``)."""
    return cap is None or cap >= least


def are_ratios(values: Any, *, above_one: bool) -> bool:
    """Whether ``values`` is a list of ratios of the teacher's cost: numbers (``true`` is
    not one) of at least 1, or above 1 (``above_one``: a speed-up; 1 is the teacher
    itself). A ratio below 1 (or ``true``, read as 1) asks for a model costlier than the
    teacher, which is not a speed-up; the final retrain and the knapsack check theirs
    alike."""
    return isinstance(values, list) and all(
        isinstance(r, int | float) and not isinstance(r, bool) and math.isfinite(r)
        and (r > 1 if above_one else r >= 1) for r in values)


def from_dict(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from ``data``, checking keys and scalar types."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # T: any dataclass
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: "
                          f"{', '.join(sorted(fields))}")
    missing = [n for n, f in fields.items() if n not in data
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r} (required: "
                          f"{', '.join(missing)})")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in data.items():
        values[name] = _check(hints[name], value, f"{where}.{name}")
    try:
        return cls(**values)
    except ValueError as err:  # a dataclass's own range checks (__post_init__)
        raise ConfigError(f"{where}: {err}") from None


def _check(hint: Any, value: Any, where: str) -> Any:
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):  # a class, not an instance
        return from_dict(hint, value, where)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        for option in options:
            if option is type(None):
                continue
            try:
                return _check(option, value, where)
            except ConfigError:
                continue
        raise ConfigError(f"{where}: expected {_name(hint)}, got {value!r}")
    if origin is dict or hint is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {value!r}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{where}: expected a finite number, got {value!r}")
    if hint in (int, float, str, bool):
        if not isinstance(value, hint) or (hint is int and isinstance(value, bool)):
            raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}")
    return value


def _name(hint: Any) -> str:
    return " or ".join(getattr(a, "__name__", str(a)) for a in typing.get_args(hint))


#: the most values a document may expand to through its aliases (``*name``): a few
#: nested aliases can otherwise expand a small file into billions of values ("billion
#: laughs"), which the typed loading then walks for minutes in gigabytes of memory
MAX_ALIAS_EXPANSION = 100_000


class YamlRefused(ValueError):
    """A YAML document that parses but is refused: a key given twice in one mapping, or
    aliases that expand too far (the message names the line)."""


class StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing what it would accept silently: a key given twice
    in one mapping (PyYAML keeps the last value, so a file's earlier setting is dropped
    unseen) and aliases that expand a document beyond :data:`MAX_ALIAS_EXPANSION` values
    or into itself."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        _expanded_size(node)
        return node

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            _refuse_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicate_keys(node: yaml.MappingNode) -> None:
    """A mapping's scalar keys, each once (``<<`` merge keys are YAML's own override)."""
    seen: set[str] = set()
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        if key.value in seen:
            raise YamlRefused(f"key {key.value!r} given twice in one mapping (again at line "
                              f"{key.start_mark.line + 1}); keep one")
        seen.add(key.value)


def _expanded_size(root: Any) -> int:
    """The number of values ``root`` holds with every alias expanded; refused past
    :data:`MAX_ALIAS_EXPANSION` or when an alias contains itself. Shared nodes are sized
    once, so the walk is as long as the file, not as its expansion."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        known = sizes.get(id(node))
        if known == -1:
            raise YamlRefused(f"the value at line {node.start_mark.line + 1} contains an "
                              "alias of itself; write the value out")
        if known is not None:
            return known
        sizes[id(node)] = -1
        children: list[Any] = []
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        total = 1 + sum(size(child) for child in children)
        if total > MAX_ALIAS_EXPANSION:
            raise YamlRefused(f"the value at line {node.start_mark.line + 1} expands through "
                              f"its aliases to more than {MAX_ALIAS_EXPANSION:,} values; write "
                              "the values out instead of nesting aliases")
        sizes[id(node)] = total
        return total

    return size(root) if root is not None else 0


def parse_yaml(text: str) -> Any:
    """``text`` read as YAML by :class:`StrictLoader`: the one reader of every YAML a user
    gives the engine (experiment files, ``--set`` and ``-c`` values). Raises
    ``yaml.YAMLError`` for broken YAML and :class:`YamlRefused` for refused YAML."""
    loader = StrictLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict[str, Any]:
    """An experiment file's top-level mapping (:func:`parse_yaml`); every problem is one
    :class:`ConfigError` line naming the file and, where known, the line."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"experiment file {str(p)!r} does not exist")
    try:
        data = parse_yaml(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at "
                          f"offset {err.start}); save the file as UTF-8") from None
    except YamlRefused as err:
        raise ConfigError(f"{p}: {err}") from None
    except yaml.YAMLError as err:  # one line: where and what, not PyYAML's excerpt
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(err, "problem", None) or " ".join(str(err).split())
        raise ConfigError(f"{p}: broken YAML{where}: {what}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of settings at the top level")
    return data


def apply_overrides(data: dict[str, Any], items: list[str] | tuple[str, ...], where: str
                    ) -> dict[str, Any]:
    """``data`` with each ``KEY=VALUE`` of ``items`` set (``--set retrain.epochs=1``).

    ``KEY`` is a dotted path into the mapping (missing levels are created, so that an
    unknown key is reported by the typed loading like one written in the file);
    ``VALUE`` is read as YAML (``1`` an integer, ``1e-3`` a number, ``[a, b]`` a list,
    ``null``). The overrides apply before the typed loading, so the same type and range
    checks as for the file apply to them.
    """
    out = copy.deepcopy(data)
    for item in items:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ConfigError(f"--set expects KEY=VALUE with a dotted KEY (retrain.epochs=1), "
                              f"got {item!r}")
        try:
            value = parse_yaml(text)
        except YamlRefused as err:
            raise ConfigError(f"--set {key}: {err}") from None
        except yaml.YAMLError as err:
            what = getattr(err, "problem", None) or " ".join(str(err).split())
            raise ConfigError(f"--set {key}: the value {text!r} is not valid YAML ({what}); "
                              f"quote it") from None
        if isinstance(value, str) and _NUMBER.fullmatch(value.strip()):
            value = float(value)  # YAML 1.1 reads 2e-4 (no dot) as a string
        node = out
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part.strip())
            if child is None:  # absent, or an empty `retrain:` in the file
                child = node[part.strip()] = {}
            if not isinstance(child, dict):
                dotted = ".".join(parts[:depth + 1])
                raise ConfigError(f"--set {item}: {where}: {dotted} is {child!r}, not a mapping "
                                  f"of settings; set {dotted}=VALUE instead")
            node = child
        node[parts[-1].strip()] = value
    return out
