"""The core's layering (CONTRIBUTING.md, "What goes where").

* The core never names its plug-ins (plug-ins register themselves): ``nas/`` imports no plug-in
  package. Spaces, searchers, evaluators and method recipes register through entry points
  (``docs/plugins.md``); the core reaches them only through its registries. The command
  line (``nas/cli/``) and its Python face (``nas/api.py``: ``nas.search``, which the CLI's
  ``method: search`` mirrors) are the one layer above them all and may import anything.
* No import circle inside ``nas/`` (issue 26), and nothing in ``nas/`` outside
  ``nas/cli/`` imports ``nas.cli``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ROOT / "nas"
PLUGIN_PACKAGES = ("spaces", "searchers", "evaluators", "recipes")
EXCLUDED = (CORE / "cli", CORE / "api.py")


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
    assert not any(n.startswith("cli/") for n in names) and "api.py" not in names


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


# --- no import circles inside the core, and the core never imports its CLI -----------------
#
# The graph counts every import a module can execute: module-level ones and the lazy ones
# inside functions (``nas`` defers torch and heavy modules that way, and a lazy import
# that closes a circle is still a circle: the two modules cannot be understood, tested or
# moved apart). Only imports under ``if TYPE_CHECKING:`` are left out, because they never
# run and name a type for annotations only. A dynamic import counts when its module is a
# string literal (a computed name, as in ``nas/__init__.py``'s PEP 562 table, cannot be
# read statically).


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _executed_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Dotted names that ``module`` imports: ``import a.b``, ``from a import b`` (as both
    ``a`` and ``a.b``: which one is a module is decided by the caller), relative imports
    resolved against ``module``'s package, and literal ``import_module("a.b")``."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in _executed_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package.split(".")
                base_parts = base_parts[:len(base_parts) - (node.level - 1)]
                base = ".".join(base_parts + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names


def core_import_graph() -> nx.DiGraph:
    """Modules of ``nas/`` (the CLI included) and the imports between them."""
    paths = sorted(CORE.rglob("*.py"))
    modules = {_module_name(p): p for p in paths}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in imported_names(path.read_text(), name, path.name == "__init__.py"):
            # ``from nas.data import tasks`` imports the module nas.data.tasks; ``from
            # nas.data import load_task`` imports nas.data: take the longest module prefix.
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph.add_edge(name, target)
    return graph


def test_the_core_has_no_import_circle():
    graph = core_import_graph()
    circles = sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(graph))
    assert not circles, "import circles in nas/:\n" + "\n".join(circles)


def test_only_the_cli_imports_the_cli():
    graph = core_import_graph()
    # ``python -m nas`` (nas/__main__.py) is the command line's other door
    offenders = sorted(f"{a} imports {b}" for a, b in graph.edges
                       if b.startswith("nas.cli") and not a.startswith("nas.cli")
                       and a != "nas.__main__")
    assert not offenders, "the core imports its command line:\n" + "\n".join(offenders)


def test_the_import_graph_sees_every_form():
    graph = core_import_graph()
    assert graph.has_edge("nas.data", "nas.data.tasks")  # from nas.data.tasks import ...
    assert graph.has_edge("nas.cli", "nas.cli.common") or graph.has_edge(
        "nas.cli.search", "nas.cli.common")
    names = imported_names("from . import files\nfrom .tasks import x\n"
                           "if TYPE_CHECKING:\n    import nas.space\n"
                           "def f():\n    import nas.train\n", "nas.data.batching", False)
    assert {"nas.data.files", "nas.data.tasks", "nas.train"} <= names
    assert "nas.space" not in names
    assert graph.has_edge("nas.teacher", "nas.data")  # imported inside a function only
