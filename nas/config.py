"""Typed experiment configurations read from YAML, with errors that name the key."""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml

from nas.errors import NasError

T = TypeVar("T")


class ConfigError(NasError):
    """An experiment file is missing, malformed, or has an unknown key or a wrong type."""


def from_dict(cls: type[T], data: Any, where: str) -> T:
    """Build dataclass ``cls`` from ``data``, checking keys and scalar types."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; known keys: "
                          f"{', '.join(sorted(fields))}")
    missing = [n for n, f in fields.items() if n not in data
               and f.default is dataclasses.MISSING
               and f.default_factory is dataclasses.MISSING]  # type: ignore[misc]
    if missing:
        raise ConfigError(f"{where}: missing key {missing[0]!r} (required: "
                          f"{', '.join(missing)})")
    hints = typing.get_type_hints(cls)
    values = {}
    for name, value in data.items():
        values[name] = _check(hints[name], value, f"{where}.{name}")
    try:
        return cls(**values)  # type: ignore[call-arg]
    except ValueError as err:  # a dataclass's own range checks (__post_init__)
        raise ConfigError(f"{where}: {err}") from None


def _check(hint: Any, value: Any, where: str) -> Any:
    if dataclasses.is_dataclass(hint):
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


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"experiment file {str(p)!r} does not exist")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except UnicodeDecodeError as err:
        raise ConfigError(f"{p}: not UTF-8 text (byte 0x{err.object[err.start]:02x} at "
                          f"offset {err.start}); save the file as UTF-8") from None
    except yaml.YAMLError as err:  # one line: where and what, not PyYAML's excerpt
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        what = getattr(err, "problem", None) or " ".join(str(err).split())
        raise ConfigError(f"{p}: broken YAML{where}: {what}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{p}: expected a mapping of settings at the top level")
    return data


def apply_overrides(data: dict[str, Any], overrides: list[str] | tuple[str, ...],
                    where: str) -> dict[str, Any]:
    """``data`` with ``KEY=VALUE`` overrides applied (``nas run --set``).

    ``KEY`` is a dotted path into the mapping (``losses.attention``, ``seed``); ``VALUE``
    is read as YAML (``false``, ``3``, ``1.0e-4``, ``{epochs: 2}``). Intermediate
    mappings are created when missing; the typed loading that follows checks the result
    as if it had been written in the file.
    """
    out = dict(data)
    for item in overrides:
        key, sep, text = item.partition("=")
        parts = key.strip().split(".")
        if not sep or not all(p.strip() for p in parts):
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE (e.g. seed=1, "
                              "losses.attention=false)")
        try:
            value = yaml.safe_load(text) if text.strip() else ""
        except yaml.YAMLError:
            raise ConfigError(f"--set {item!r}: the value is not valid YAML") from None
        node = out
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise ConfigError(f"--set {item!r}: {where}: "
                                  f"{'.'.join(parts[: i + 1])} is not a mapping")
            node[part] = child = dict(child)
            node = child
        node[parts[-1]] = value
    return out

