"""The core never names its plug-ins (STYLE.md 19): ``nas/`` imports no plug-in package.

Spaces, searchers, evaluators and method recipes register through entry points
(``docs/plugins.md``); the core reaches them only through its registries. The command
line (``nas/cli/``) is the one layer above them all and may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "nas"
PLUGIN_PACKAGES = ("spaces", "searchers", "evaluators", "recipes")
EXCLUDED = (CORE / "cli",)


def plugin_imports(source: str, filename: str = "<string>") -> list[tuple[int, str]]:
    """``(line, module)`` for every import of a plug-in package in ``source``.

    Counts ``import x``, ``from x import y`` (absolute only: a relative import stays inside
    its own package) and ``importlib.import_module("x...")`` / ``__import__("x...")`` with
    a string literal.
    """
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names = [node.args[0].value]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] in PLUGIN_PACKAGES]
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Attribute):  # importlib.import_module(...)
        return func.attr == "import_module"
    return isinstance(func, ast.Name) and func.id in ("import_module", "__import__")


def core_files() -> list[Path]:
    return sorted(p for p in CORE.rglob("*.py")
                  if not any(p.is_relative_to(excluded) for excluded in EXCLUDED))


def test_the_core_imports_no_plugin_package():
    offenders = [f"{path.relative_to(ROOT)}:{line}: imports {module}"
                 for path in core_files()
                 for line, module in plugin_imports(path.read_text(), str(path))]
    assert not offenders, "the core names a plug-in package:\n" + "\n".join(offenders)


def test_the_walk_covers_the_core():
    names = {p.relative_to(CORE).as_posix() for p in core_files()}
    assert {"space.py", "registry.py", "data/tasks.py", "ops/base.py"} <= names
    assert not any(n.startswith("cli/") for n in names)


@pytest.mark.parametrize("source, expected", [
    ("import spaces", ["spaces"]),
    ("import os, searchers.base as b", ["searchers.base"]),
    ("from evaluators.kd import score", ["evaluators.kd"]),
    ("from recipes import adabert", ["recipes"]),
    ("def f():\n    import spaces.bert", ["spaces.bert"]),
    ("importlib.import_module('searchers.differentiable')", ["searchers.differentiable"]),
    ("from importlib import import_module\nimport_module('spaces')", ["spaces"]),
    ("__import__('evaluators')", ["evaluators"]),
    ("from . import spaces", []),  # relative: a module of the importing package
    ("import spacesx\nimport nas.spaces_util\nimportlib.import_module(name)", []),
])
def test_the_check_finds_every_form_of_import(source, expected):
    assert [m for _, m in plugin_imports(source)] == expected
