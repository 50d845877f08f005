"""Name registries filled by a decorator (the timm ``register_model``
pattern; the registry never names the plug-ins that fill it).

A duplicate name is an error, an unknown name lists the close matches, and
``names("*bert*")`` lists with a shell-style wildcard.

Plug-ins register themselves; the registry never names them. A registry created with an
``entry_point_group`` (``nas.spaces``, ``nas.tasks``, ``nas.searchers``,
``nas.evaluators``, ``nas.methods``) loads every installed entry point of that group the
first time it is asked for a name (``get``, ``names``, ``in``, iteration, ``len``), once.
An entry point names either

- a **module** (``builtin = "spaces"``): importing it runs its ``@register`` decorators; or
- a **registration function** taking no arguments (``demo = "my_pkg.nas_plugin:register"``):
  it is called once after it is imported. Point entry points at a module or at such a
  function, never at a factory or a class: a class is only imported, any other callable is
  called with no arguments.

A plug-in that fails to load is skipped with a one-line :class:`PluginWarning` naming the
entry point and the error; the other plug-ins still load. Two packages registering the
same name is a :class:`DuplicateNameError` naming both, raised by every lookup until the
conflict is resolved. Loading is lazy so that ``import nas`` and the CLI's parser stay
cheap (``tests/test_import_cost.py``).
"""

from __future__ import annotations

import difflib
import fnmatch
import functools
import inspect
import warnings
from collections.abc import Callable, Iterator
from importlib import metadata
from typing import Generic, TypeVar

from nas.errors import RegistryError

T = TypeVar("T")


class PluginWarning(UserWarning):
    """An installed plug-in failed to load and was skipped."""


class DuplicateNameError(RegistryError):
    """Two packages (or two modules) register the same name in one registry."""


def _describe_entry_point(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    package = f"{dist.name} {dist.version}" if dist is not None else "an unknown package"
    return f"entry point {ep.name!r} = {ep.value!r} of {package} (group {ep.group})"


class Registry(Generic[T]):
    """A mapping from names to objects of one kind (spaces, ops, searchers...).

    ``entry_point_group``: the entry-point group whose plug-ins are loaded on the first
    lookup (see the module docstring); ``None`` for a registry filled only by imports
    of the core (ops).
    """

    def __init__(self, kind: str, entry_point_group: str | None = None) -> None:
        self.kind = kind
        self.entry_point_group = entry_point_group
        self._items: dict[str, T] = {}
        self._origins: dict[str, str] = {}  # name -> who registered it, for duplicate errors
        self._loaded = entry_point_group is None
        self._loading: metadata.EntryPoint | None = None
        self._entry_points_found = 0
        self._conflict: DuplicateNameError | None = None

    # ------------------------------------------------------------------ filling
    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: ``@REGISTRY.register("name")`` adds the decorated object."""

        def decorator(obj: T) -> T:
            self.add(name, obj)
            return obj

        return decorator

    def add(self, name: str, obj: T) -> None:
        """Register ``obj`` under ``name`` (never triggers plug-in loading)."""
        if not name or not isinstance(name, str):
            raise RegistryError(f"{self.kind} names must be non-empty strings, got {name!r}")
        origin = self._origin_of(obj)
        if name in self._items:
            raise DuplicateNameError(
                f"{self.kind} {name!r} is already registered by {self._origins[name]} and is "
                f"registered again by {origin}; rename one of them or uninstall one package"
            )
        self._items[name] = obj
        self._origins[name] = origin

    def _origin_of(self, obj: object) -> str:
        if self._loading is not None:
            return _describe_entry_point(self._loading)
        target = obj.func if isinstance(obj, functools.partial) else obj
        module = getattr(target, "__module__", None) or type(obj).__module__
        return f"module {module}"

    # ------------------------------------------------------------------ plug-ins
    def load_plugins(self) -> None:
        """Load this registry's entry-point group now (lookups do it on first use)."""
        if self._loaded:
            return
        # Set first: a plug-in that looks a name up while importing must not recurse.
        self._loaded = True
        group = self.entry_point_group  # None: a registry without plug-ins
        eps = metadata.entry_points(group=group) if group is not None else ()
        self._entry_points_found = len(eps)
        for ep in eps:
            self._loading = ep
            try:
                loaded = ep.load()
                if callable(loaded) and not inspect.isclass(loaded):
                    loaded()
            except DuplicateNameError as err:
                self._conflict = err
                break
            except KeyboardInterrupt:
                raise
            except BaseException as err:  # noqa: BLE001  (any broken plug-in is skipped,
                # one that calls sys.exit or raises a BaseException of its own too: it must
                # not end `nas` silently)
                what = (f"SystemExit({err.code!r}) (it called sys.exit or exit)"
                        if isinstance(err, SystemExit) else f"{type(err).__name__}: {err}")
                warnings.warn(
                    f"{self.kind} plug-in skipped: {_describe_entry_point(ep)} failed to load: "
                    f"{what}",
                    PluginWarning,
                    stacklevel=2,
                )
            finally:
                self._loading = None

    def _ensure_loaded(self) -> None:
        self.load_plugins()
        if self._conflict is not None:
            raise self._conflict

    # ------------------------------------------------------------------ lookups
    def get(self, name: str) -> T:
        self._ensure_loaded()
        try:
            return self._items[name]
        except KeyError:
            raise RegistryError(self._unknown_message(name)) from None

    def _unknown_message(self, name: str) -> str:
        close = difflib.get_close_matches(str(name), list(self._items), n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
        known = ", ".join(sorted(self._items)) or "none"
        message = f"unknown {self.kind} {name!r}{hint} (known: {known})"
        if self.entry_point_group and not self._items and not self._entry_points_found:
            # A source tree that was never installed has no entry points, hence no names.
            message += (f"; no {self.entry_point_group!r} entry points are installed: "
                        f"run `pip install -e .` in the repository")
        return message

    def names(self, pattern: str = "*") -> list[str]:
        """Registered names matching a shell-style wildcard, sorted."""
        self._ensure_loaded()
        return sorted(n for n in self._items if fnmatch.fnmatchcase(n, pattern))

    def __contains__(self, name: object) -> bool:
        self._ensure_loaded()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self._ensure_loaded()
        return iter(sorted(self._items))

    def __len__(self) -> int:
        self._ensure_loaded()
        return len(self._items)
