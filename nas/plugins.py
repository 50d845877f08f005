"""Plug-ins named by a run: Python files or modules imported before the experiment is read,
so that a space (or searcher, evaluator, method) defined in ``my_space.py`` next to the
YAML registers itself without being installed.

``plugins: [my_space.py, my_pkg.spaces]`` in an experiment file, ``nas run --plugin FILE``
and ``nas.search(plugins=[...])`` all end here. A file is looked up relative to the
experiment file first, then the current directory; anything without a ``.py`` suffix or
a path separator is a module name. Installed packages use entry points instead
(:mod:`nas.registry`).

A file is imported once per process under a name derived from its resolved path, so a
second import (a resumed run, a worker process, the same file named twice) registers
nothing twice. A file that fails to import is answered in one line with its file and
line (:class:`PluginError`), never with a traceback.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from nas.errors import NasError


class PluginError(NasError):
    """A plug-in that cannot be found or imported."""


def is_file_plugin(name: str) -> bool:
    """Whether ``name`` names a Python file rather than a module."""
    return name.endswith(".py") or "/" in name or "\\" in name


def resolve_plugin(name: str, base: str | Path | None = None) -> Path:
    """The file a plug-in entry names: relative to ``base`` (the experiment's folder) when
    it exists there, else to the current directory."""
    path = Path(name).expanduser()
    candidates = [path] if path.is_absolute() else (
        [Path(base) / path] if base is not None else []) + [Path.cwd() / path]
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    where = " or ".join(str(c.parent) for c in candidates)
    raise PluginError(f"plugin {name}: no such file (looked in {where}); give a path relative "
                      "to the experiment file or the current directory")


def import_plugins(names: Sequence[str], base: str | Path | None = None) -> list[str]:
    """Import every plug-in of ``names`` (files resolved against ``base``); returns how each
    is recorded: a file as its absolute path, a module as its name."""
    if isinstance(names, str) or not all(isinstance(n, str) and n.strip() for n in names):
        raise PluginError(f"plugins must be a list of file paths or module names, got "
                          f"{names!r}")
    recorded = []
    for name in names:
        if is_file_plugin(name):
            path = resolve_plugin(name, base)
            import_file(path)
            recorded.append(str(path))
        else:
            import_module(name)
            recorded.append(name)
    return recorded


def module_name(path: Path) -> str:
    """The name a plug-in file is imported under: its stem plus a hash of its path."""
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]  # noqa: S324 (a name, not security)
    stem = "".join(ch if ch.isalnum() else "_" for ch in path.stem)
    return f"nas_plugin_{stem}_{digest}"


def import_file(path: Path) -> ModuleType:
    """Import the plug-in file ``path`` (once per process)."""
    name = module_name(path)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {path}: not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look it up
    try:
        spec.loader.exec_module(module)
    except KeyboardInterrupt:
        del sys.modules[name]
        raise
    except BaseException as err:  # noqa: BLE001  (sys.exit too: the plug-in's, in one line)
        del sys.modules[name]
        raise PluginError(f"plugin {path} failed to import: {_where(err, path)}"
                          f"{_raised(err)}; fix the file or drop it from plugins") from None
    return module


def import_module(name: str) -> ModuleType:
    """Import the plug-in module ``name``."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as err:
        if err.name and name.startswith(err.name):
            raise PluginError(f"plugin {name}: no module of that name; give a file path "
                              "(ending in .py) or install the package") from None
        raise PluginError(f"plugin {name} failed to import: {type(err).__name__}: {err}") \
            from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001  (sys.exit too: the plug-in's, in one line)
        raise PluginError(f"plugin {name} failed to import: {_raised(err)}") from None


def _raised(err: BaseException) -> str:
    """What a plug-in raised, in one line: ``SystemExit(3) (it called sys.exit)``, or the
    exception's type and message. A plug-in that exits or raises a ``BaseException`` of
    its own must not end ``nas`` silently or with a traceback."""
    if isinstance(err, SystemExit):
        return f"SystemExit({err.code!r}) (it called sys.exit or exit)"
    message = " ".join(str(err).split())
    return f"{type(err).__name__}: {message}" if message else type(err).__name__


def import_run_plugins(run_dir: str | Path) -> list[str]:
    """The plug-ins a run recorded (its ``config.yaml``'s ``plugins:``, absolute paths or
    module names), imported again so that a later command (``nas report``, ``nas export
    --run``) knows the user's own space."""
    from nas.rundir import RunDir

    plugins = RunDir(run_dir).config.get("plugins") or []
    return import_plugins(plugins) if plugins else []


def _where(err: BaseException, path: Path) -> str:
    """``line N: `` of the innermost frame of the failure inside the plug-in file."""
    if isinstance(err, SyntaxError) and err.lineno is not None:
        return f"line {err.lineno}: "
    lines = [f.lineno for f in traceback.extract_tb(err.__traceback__)
             if Path(f.filename).resolve() == path]
    return f"line {lines[-1]}: " if lines else ""


__all__ = ["PluginError", "import_file", "import_plugins", "import_run_plugins", "is_file_plugin",
           "resolve_plugin"]
