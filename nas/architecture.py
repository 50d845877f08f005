"""Architectures: frozen, canonical, serialisable choice assignments.

An :class:`Architecture` maps choice names to values. It is immutable, hashable,
has a canonical JSON form (sorted keys, no spaces) and a stable id derived from
that form, so a run directory, a cache key and a log line all name the same
architecture the same way (as litgpt's config dataclasses and Archai's ``archid`` do). Architectures
are data, never code.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from nas.errors import ArchitectureError


class Architecture(Mapping[str, Any]):
    """An immutable mapping ``choice name -> value``, optionally tagged with its space."""

    __slots__ = ("_values", "space", "_json")

    def __init__(self, values: Mapping[str, Any] | None = None, space: str | None = None) -> None:
        values = dict(values or {})
        for name, value in values.items():
            if not isinstance(name, str):
                raise ArchitectureError(f"choice names must be strings, got {name!r}")
            if not isinstance(value, str | int | float | bool):
                raise ArchitectureError(
                    f"choice {name!r}: values must be JSON scalars (string, number, bool), "
                    f"got {type(value).__name__} {value!r}"
                )
        self._values = dict(sorted(values.items()))
        self.space = space
        self._json = json.dumps(self._values, sort_keys=True, separators=(",", ":"))

    # Mapping protocol
    def __getitem__(self, key: str) -> Any:
        return self._values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __hash__(self) -> int:
        return hash((self.space, self._json))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Architecture):
            return self._json == other._json and (
                self.space is None or other.space is None or self.space == other.space
            )
        if isinstance(other, Mapping):
            return self._values == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"Architecture(space={self.space!r}, id={self.id}, {self._json})"

    # Serialisation
    def to_json(self) -> str:
        """Canonical JSON of the choices alone (sorted keys, compact)."""
        return self._json

    @property
    def id(self) -> str:
        """A 12-hex-digit id stable across processes and machines."""
        text = f"{self.space or ''}:{self._json}"
        # an identifier, not a security hash: SHA-1 keeps the ids of existing runs
        return hashlib.sha1(text.encode(), usedforsecurity=False).hexdigest()[:12]

    def to_dict(self) -> dict[str, Any]:
        """The file form: ``{"space": ..., "choices": {...}}``."""
        return {"space": self.space, "choices": dict(self._values)}

    def replace(self, **changes: Any) -> Architecture:
        return Architecture({**self._values, **changes}, self.space)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "architecture") -> Architecture:
        """Accept ``{"space": s, "choices": {...}}`` or a plain ``{choice: value}`` mapping."""
        if not isinstance(data, Mapping):
            raise ArchitectureError(
                f"{source}: expected a JSON object of choices, got {type(data).__name__}"
            )
        if "choices" in data:
            extra = set(data) - {"space", "choices", "id", "meta", "space_config"}
            if extra:
                raise ArchitectureError(
                    f"{source}: unexpected keys {sorted(extra)}; an architecture file has "
                    "'space' and 'choices' (and optional 'meta', 'id', 'space_config')"
                )
            choices = data["choices"]
            if not isinstance(choices, Mapping):
                raise ArchitectureError(f"{source}: 'choices' must be a JSON object")
            return cls(choices, data.get("space"))
        return cls(data)


def load_architecture(text_or_path: str | Path | Mapping[str, Any] | None) -> Architecture | None:
    """Read an architecture from a JSON file, inline JSON text or a mapping.

    Errors name the file (or say "inline JSON") and what is wrong with it.
    """
    if text_or_path is None:
        return None
    if isinstance(text_or_path, Architecture):
        return text_or_path
    if isinstance(text_or_path, Mapping):
        return Architecture.from_dict(text_or_path)
    text = str(text_or_path)
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):  # JSON, not a path (a list is refused below)
        source, content = "inline JSON", text
    else:
        path = Path(text)
        shown = text if len(text) <= 80 else text[:77] + "..."
        try:
            exists = path.is_file()
        except OSError:  # e.g. a name too long to be a path
            exists = False
        if not exists:
            raise ArchitectureError(
                f"architecture file {shown!r} does not exist; pass a JSON file path or inline "
                'JSON such as \'{"depth": 3}\''
            )
        try:
            source, content = str(path), path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ArchitectureError(f"{path}: cannot read it as JSON text ({err})") from None
    try:
        data = json.loads(content)
    except json.JSONDecodeError as err:
        raise ArchitectureError(
            f"{source}: broken JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None
    return Architecture.from_dict(data, source)


def load_for_space(space: Any, path: str) -> Architecture:
    """An architecture file on ``space`` (a path as given, else relative to the
    repository): the choices of layers beyond the space's depth (``L<i>.`` names) are
    dropped, so a smaller space keeps the first layers of a published architecture;
    missing choices take the space's defaults; any other choice the space lacks is an
    error (a file of another version of the space)."""
    import re

    given = Path(path)
    root = Path(__file__).resolve().parents[1]
    found = given if given.is_file() or given.is_absolute() else root / given
    loaded = load_architecture(str(found if found.is_file() else given))
    if loaded is None:
        raise ArchitectureError(f"{path}: not an architecture file")
    names, layers = set(space.choice_map), int(space.config.get("layers", 0))
    kept = {}
    for name, value in loaded.items():
        layer = re.match(r"L(\d+)\.", name)
        if name in names:
            kept[name] = value
        elif layer is None or int(layer.group(1)) < layers:
            raise ArchitectureError(f"{path}: choice {name!r} is not a choice of space "
                                    f"{space.name!r}; the file is for another version of "
                                    "the space")
    return space.validate({**space.default(), **kept})
