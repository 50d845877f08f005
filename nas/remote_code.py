"""Bundle the search-free runtime into an export folder as ``transformers`` remote code.

Hugging Face's convention for architectures ``transformers`` does not ship: the folder
holds ``configuration_*.py`` and ``modeling_*.py``, ``config.json`` names their classes in
``auto_map``, and ``AutoModelForSequenceClassification.from_pretrained(DIR,
trust_remote_code=True)`` imports them. Remote code may import installed packages and
files of the same folder (relative imports, one flat folder), so :func:`bundle` copies
:mod:`nas.hf_remote`'s two files and the modules of every op the graph uses (and what
those import from the same project) into the folder, each ``nas.x.y`` import rewritten
to ``.nas_x_y``. The folder then works where ``torch`` and ``transformers`` are installed
and this package is not (``tests/test_export_remote.py`` loads it in such a process).
A user space's ops are bundled the same way from their own module.

Two rules make a folder load on every ``transformers`` the package declares:

* the modeling file imports every bundled module itself: ``transformers`` 4.x copies a
  local folder's remote code into its module cache one level deep (only the modeling
  file's own relative imports), so a module imported only by an op module was missing;
* every bundled file name ends in the bundle's tag (:func:`bundle_tag`, a hash of the
  code): ``transformers`` names the remote modules after the folder (``hf``, the default,
  for every run), so two exports with different ops once shared ``nas_ops.py`` in one
  process and the second failed with "unknown op". Equal code gets the same names (and
  shares its modules), different code different names.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
import inspect
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nas.errors import ExportError

MODEL_TYPE = "nas_graph"
CONFIG_MODULE = "nas.hf_remote.configuration_nas_graph"
MODEL_MODULE = "nas.hf_remote.modeling_nas_graph"
AUTO_MAP = {
    "AutoConfig": "configuration_nas_graph.NasGraphConfig",
    "AutoModelForSequenceClassification": "modeling_nas_graph.NasGraphForSequenceClassification",
}
ARCHITECTURES = ["NasGraphForSequenceClassification"]
#: A joint intent + slot head (docs/reference.md#mixed-vocabulary) has no transformers auto class of
#: its own: it loads with ``AutoModel.from_pretrained(DIR, trust_remote_code=True)``.
JOINT_AUTO_MAP = {
    "AutoConfig": "configuration_nas_graph.NasGraphConfig",
    "AutoModel": "modeling_nas_graph.NasGraphForJointIntentSlot",
}
JOINT_ARCHITECTURES = ["NasGraphForJointIntentSlot"]
#: The op registry's package: its stand-in in the folder imports only the ops used.
OPS_PACKAGE = "nas.ops"
#: Packages the bundled files may import from the environment (what a user has when
#: they run a transformers model); anything else is named by the export's error.
ALLOWED = frozenset({"torch", "transformers", "numpy", "safetensors", "__future__"})


#: Hex digits of the bundle's code hash in its file names (48 bits: two different bundles
#: in one process share a name with odds of about 1e-14).
TAG_LENGTH = 12


def flat_name(module: str, tag: str = "") -> str:
    """The file (module) name a module gets in the flat folder, ending in ``_tag``."""
    base = module.rsplit(".", 1)[1] if module in (CONFIG_MODULE, MODEL_MODULE) \
        else module.replace(".", "_")
    return f"{base}_{tag}" if tag else base


def _used_ops(graph: Mapping[str, Any]) -> set[str]:
    return {str(x["op"]) for x in (*graph["nodes"], *graph["edges"])}


def _source(module: str) -> tuple[str, bool]:
    """(source text, is a package) of an importable module."""
    try:
        mod = importlib.import_module(module)
        path = inspect.getsourcefile(mod)
    except (ImportError, TypeError) as err:
        raise ExportError(f"cannot bundle module {module} into the export ({err})") from None
    if path is None:
        raise ExportError(f"cannot bundle module {module}: it has no Python source")
    return Path(path).read_text(encoding="utf-8"), Path(path).name == "__init__.py"


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def _rewrite(module: str, roots: frozenset[str], tag: str = ""
             ) -> tuple[str, list[str], set[str]]:
    """The module's source with its project imports made relative (to the files named
    with ``tag``); the project modules it imports; the other top-level packages it
    imports."""
    source, is_package = _source(module)
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, int, str]] = []  # (first line, last line, column, text)
    local: list[str] = []
    external: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in roots:
                    raise ExportError(f"{module}: 'import {alias.name}' cannot be bundled; "
                                      f"write 'from {alias.name} import ...'")
                external.add(top)
        elif isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            top = target.split(".")[0]
            if top not in roots:
                external.add(top)
                continue
            for alias in node.names:
                if _is_module(f"{target}.{alias.name}"):
                    raise ExportError(f"{module}: 'from {target} import {alias.name}' imports "
                                      f"a module, which cannot be bundled; import names "
                                      f"from {target}.{alias.name}")
            if target != OPS_PACKAGE:
                local.append(target)
            names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "")
                              for a in node.names)
            text = f"from .{flat_name(target, tag)} import {names}"
            edits.append((node.lineno, node.end_lineno or node.lineno, node.col_offset, text))
    for first, last, col, text in sorted(edits, reverse=True):
        indent = lines[first - 1][:col]
        lines[first - 1:last] = [indent + text + "\n"]
    return "".join(lines), local, external


def _modules(graph: Mapping[str, Any]) -> tuple[list[str], dict[str, str], frozenset[str]]:
    """The op modules ``graph`` uses, every module the bundle holds (name -> original
    source) and the project roots whose imports are rewritten."""
    from nas.ops import OPS

    op_modules = sorted({OPS.get(op).__module__ for op in _used_ops(graph)})
    roots = frozenset({"nas", *(m.split(".")[0] for m in op_modules)})
    sources: dict[str, str] = {}
    queue = [CONFIG_MODULE, MODEL_MODULE, "nas.ops.base", *op_modules]
    while queue:
        module = queue.pop()
        if module in sources:
            continue
        _, local, _ = _rewrite(module, roots)
        sources[module] = _source(module)[0]
        queue.extend(local)
    return op_modules, sources, roots


def bundle_tag(graph: Mapping[str, Any]) -> str:
    """The tag every bundled file name of ``graph``'s export ends in: a hash of the code
    the bundle holds (the modules and which ops register), so equal code gets equal
    names and different code never shares a module in one process."""
    return _tag(*_modules(graph)[:2])


def _tag(op_modules: list[str], sources: Mapping[str, str]) -> str:
    digest = hashlib.sha256(json.dumps([op_modules, sorted(sources.items())]).encode())
    return digest.hexdigest()[:TAG_LENGTH]


def bundle(graph: Mapping[str, Any]) -> dict[str, str]:
    """The remote-code files (name → text) that run ``graph``: the configuration, the
    model, the ops it uses and what they import from their project, each file name
    ending in :func:`bundle_tag`; the modeling file imports every one of them."""
    return _bundle(graph)[0]


def _bundle(graph: Mapping[str, Any]) -> tuple[dict[str, str], str]:
    op_modules, sources, roots = _modules(graph)
    tag = _tag(op_modules, sources)
    files: dict[str, str] = {}
    external: dict[str, set[str]] = {}
    for module in sorted(sources):
        text, _, ext = _rewrite(module, roots, tag)
        files[flat_name(module, tag) + ".py"] = text
        external[module] = ext
    files[flat_name(OPS_PACKAGE, tag) + ".py"] = _ops_stand_in(op_modules, tag)
    model_file = flat_name(MODEL_MODULE, tag) + ".py"
    files[model_file] += _direct_imports(
        sorted(Path(f).stem for f in files if f != model_file
               and f != flat_name(CONFIG_MODULE, tag) + ".py"))
    stdlib = set(sys.stdlib_module_names)
    for module, tops in sorted(external.items()):
        bad = sorted(t for t in tops if t not in stdlib and t not in ALLOWED)
        if bad:
            raise ExportError(f"the module {module} imports {', '.join(bad)}; the exported "
                              "folder may only need torch and transformers, so this model "
                              "cannot be exported with remote code")
    return files, tag


def _direct_imports(stems: Iterable[str]) -> str:
    """The block appended to the modeling file: every bundled module imported from it."""
    lines = "".join(f"from .{stem} import __name__ as _bundled_{i}  # noqa: F401,E402\n"
                    for i, stem in enumerate(stems))
    return ("\n\n# Every bundled module, imported here directly: transformers 4.x copies into its\n"
            "# module cache only the modeling file's own relative imports (nas.remote_code).\n"
            + lines)


def _ops_stand_in(op_modules: Iterable[str], tag: str) -> str:
    imports = "".join(f"from .{flat_name(m, tag)} import __name__ as _registers_{i}  "
                      "# noqa: F401\n" for i, m in enumerate(op_modules))
    return (
        '"""The op registry of this model: the ops it uses register on import (generated by '
        'nas.remote_code)."""\n\n'
        f"from .{flat_name('nas.ops.base', tag)} import OPS, Context, Op, SelectOp, "
        "register_op  # noqa: F401\n" + imports
    )


def write(out: Path, graph: Mapping[str, Any]) -> str:
    """Write the remote-code files into ``out``; returns their tag (:func:`bundle_tag`,
    what :func:`hf_keys` names them by)."""
    files, tag = _bundle(graph)
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return tag


def auto_map(tag: str, joint: bool = False) -> dict[str, str]:
    """``config.json``'s ``auto_map`` for the files named with ``tag``."""
    names = JOINT_AUTO_MAP if joint else AUTO_MAP
    out = {}
    for auto, target in names.items():
        module, cls = target.split(".")
        out[auto] = f"{module}_{tag}.{cls}" if tag else target
    return out


def hf_keys(labels: list[str], num_intents: int | None = None, tag: str = ""
            ) -> dict[str, Any]:
    """The ``config.json`` keys that make an export a ``transformers`` model: a sequence
    classifier, or with ``num_intents`` a joint intent + slot model whose ``labels`` are
    the intents followed by the tags; ``tag``: the bundle's (:func:`bundle_tag`)."""
    keys: dict[str, Any] = {
        "model_type": MODEL_TYPE, "architectures": ARCHITECTURES, "auto_map": auto_map(tag),
        "id2label": {str(i): name for i, name in enumerate(labels)},
        "label2id": {name: i for i, name in enumerate(labels)}}
    if num_intents is not None:
        keys.update(architectures=JOINT_ARCHITECTURES, auto_map=auto_map(tag, joint=True),
                    num_intents=int(num_intents))
    return keys


__all__ = ["AUTO_MAP", "MODEL_TYPE", "auto_map", "bundle", "bundle_tag", "hf_keys",
           "write"]
