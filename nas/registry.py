"""Name registries filled by a decorator (the timm ``register_model`` pattern).

A duplicate name is an error, an unknown name lists the close matches, and
``names("*bert*")`` lists with a shell-style wildcard.
"""

from __future__ import annotations

import difflib
import fnmatch
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from nas.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """A mapping from names to objects of one kind (spaces, ops, searchers...)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated object."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        if not name or not isinstance(name, str):
            raise RegistryError(f"{self.kind} names must be non-empty strings, got {name!r}")
        if name in self._items:
            raise RegistryError(
                f"{self.kind} {name!r} is already registered; pick another name "
                f"(registered: {', '.join(sorted(self._items))})"
            )
        self._items[name] = obj

    def get(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(self._unknown_message(name)) from None

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), list(self._items), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        known = ", ".join(sorted(self._items)) or "none"
        return f"unknown {self.kind} {name!r}{hint} (known: {known})"

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names matching a shell-style wildcard, sorted."""
        return sorted(n for n in self._items if fnmatch.fnmatchcase(n, pattern))

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)
