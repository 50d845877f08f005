"""The packages' layering (CONTRIBUTING.md, "What goes where").

* The core never names its plug-ins (plug-ins register themselves): ``nas/`` imports no plug-in
  package. Spaces, searchers, evaluators and method recipes register through entry points
  (``docs/plugins.md``); the core reaches them only through its registries. The command
  line (``nas/cli/``) and its Python face (``nas/api.py``: ``nas.search``, which the CLI's
  ``method: search`` mirrors) are the one layer above them all and may import anything.
* Between the packages, only the arrows of :data:`ALLOWED` (``spaces`` import ``nas``
  alone; ``searchers`` may import ``evaluators``, never the reverse; ``recipes`` may
  import everything).
* No import circle anywhere in ``nas/``, ``spaces/``, ``searchers/``, ``evaluators/`` and
  ``recipes/``, inside a package or across them, and nothing in ``nas/`` outside
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


# --- the import graph of every package: circles and the arrows between packages ----------
#
# The graph counts every import a module names: module-level ones, the lazy ones inside
# functions (``nas`` defers torch and heavy modules that way, and a lazy import that closes
# a circle is still a circle: the two modules cannot be understood, tested or moved apart)
# and those under ``if TYPE_CHECKING:`` (a type named for annotations is still a module the
# reader must know first). A dynamic import counts when its module is a string literal (a
# computed name, as in ``nas/__init__.py``'s PEP 562 table, cannot be read statically).

PACKAGES = ("nas", *PLUGIN_PACKAGES)
#: the packages each package may import besides itself (spaces' and searchers' helpers of
#: one space family, such as ``spaces.bert_subnet.truncation``, are allowed below them)
ALLOWED = {
    "nas": set(),
    "spaces": {"nas"},
    "evaluators": {"nas", "spaces"},
    "searchers": {"nas", "spaces", "evaluators"},
    "recipes": {"nas", "spaces", "evaluators", "searchers"},
}
#: the modules of ``nas`` above every package: the command line and its Python face
TOP_OF_CORE = ("nas.cli", "nas.api", "nas.__main__")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(source: str, module: str, is_package: bool) -> set[str]:
    """Dotted names that ``module`` imports: ``import a.b``, ``from a import b`` (as both
    ``a`` and ``a.b``: which one is a module is decided by the caller), relative imports
    resolved against ``module``'s package, and literal ``import_module("a.b")``; lazy and
    ``TYPE_CHECKING`` imports too."""
    package = module if is_package else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
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


def import_graph() -> nx.DiGraph:
    """Modules of every package (``nas``'s CLI included) and the imports between them."""
    paths = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
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


def test_no_import_circle_in_any_package_or_across_them():
    graph = import_graph()
    circles = sorted(" -> ".join([*c, c[0]]) for c in nx.simple_cycles(graph))
    assert not circles, "import circles:\n" + "\n".join(circles)


def forbidden_arrows(edges: list[tuple[str, str]]) -> list[str]:
    """``a imports b`` for each edge between packages that :data:`ALLOWED` does not allow."""
    out = []
    for a, b in edges:
        source, target = a.split(".")[0], b.split(".")[0]
        if source == target or target in ALLOWED[source]:
            continue
        if source == "nas" and any(a == top or a.startswith(top + ".") for top in TOP_OF_CORE):
            continue
        out.append(f"{a} imports {b}")
    return sorted(out)


def test_packages_import_only_their_allowed_arrows():
    offenders = forbidden_arrows(list(import_graph().edges))
    assert not offenders, "imports against the layering:\n" + "\n".join(offenders)


@pytest.mark.parametrize("edge, allowed", [
    (("searchers.loop", "evaluators.base"), True),
    (("evaluators.retrain", "searchers.loop"), False),
    (("spaces.bert", "nas.space"), True),
    (("spaces.bert", "evaluators.base"), False),
    (("nas.teacher", "recipes.common"), False),
    (("nas.cli.search", "recipes.plan"), True),
    (("nas.api", "searchers.results"), True),
    (("recipes.search", "spaces.bert_subnet"), True),
])
def test_the_arrow_rule(edge, allowed):
    assert (forbidden_arrows([edge]) == []) is allowed


def test_only_the_cli_imports_the_cli():
    graph = import_graph()
    # ``python -m nas`` (nas/__main__.py) is the command line's other door
    offenders = sorted(f"{a} imports {b}" for a, b in graph.edges
                       if b.startswith("nas.cli") and not a.startswith("nas.cli")
                       and a != "nas.__main__")
    assert not offenders, "the core imports its command line:\n" + "\n".join(offenders)


def test_the_import_graph_sees_every_form():
    graph = import_graph()
    assert graph.has_edge("nas.data", "nas.data.tasks")  # from nas.data.tasks import ...
    assert graph.has_edge("nas.cli", "nas.cli.common") or graph.has_edge(
        "nas.cli.search", "nas.cli.common")
    names = imported_names("from . import files\nfrom .tasks import x\n"
                           "if TYPE_CHECKING:\n    import nas.space\n"
                           "def f():\n    import nas.train\n", "nas.data.batching", False)
    assert {"nas.data.files", "nas.data.tasks", "nas.train", "nas.space"} <= names
    assert graph.has_edge("nas.teacher", "nas.data")  # imported inside a function only
    assert graph.has_edge("searchers.loop", "evaluators.base")  # across packages
