"""Plug-ins register through entry points; the registries load them lazily (timm's
registry pattern: the registry never names the plug-ins).

The registry-level tests build tiny installed distributions (a ``*.dist-info`` folder with
``entry_points.txt`` beside a module) under ``tmp_path``, put that folder on ``sys.path``
and use a private entry-point group with a fresh :class:`Registry`, so nothing leaks into
the real registries. The command-line tests run ``nas`` in a subprocess with the fixture
distribution ``tests/fixtures/plugin_dist`` on ``PYTHONPATH``: exactly what
``pip install nas-demo-plugin`` would give.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from nas.registry import DuplicateNameError, PluginWarning, Registry

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIST = ROOT / "tests" / "fixtures" / "plugin_dist"
GROUP = "nas_test.things"  # a private group: only the distributions made here declare it


def make_dist(root: Path, name: str, entry_points: dict[str, dict[str, str]],
              modules: dict[str, str]) -> None:
    """Write an installed distribution ``name`` 0.1 with its modules under ``root``."""
    info = root / f"{name.replace('-', '_')}-0.1.dist-info"  # as pip names the folder
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items())
        for group, eps in entry_points.items()))
    for module, source in modules.items():
        (root / f"{module}.py").write_text(source)
    importlib.invalidate_caches()  # the folder may already be on sys.path


@pytest.fixture
def things(monkeypatch, tmp_path):
    """A fresh registry for GROUP, importable by the plug-ins as ``_nas_test_host.THINGS``."""
    registry: Registry[object] = Registry("thing", entry_point_group=GROUP)
    host = types.ModuleType("_nas_test_host")
    host.THINGS = registry
    host.imports = []
    monkeypatch.setitem(sys.modules, "_nas_test_host", host)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield registry
    for module in [m for m in sys.modules if m.startswith("_nas_t_")]:
        del sys.modules[module]  # the plug-in modules imported by the test


def plugin_module(name: str, body: str) -> dict[str, str]:
    """A plug-in module that records its import and then runs ``body``."""
    return {name: f"import _nas_test_host as host\nhost.imports.append({name!r})\n{body}\n"}


def test_lookup_loads_modules_and_register_functions_once(things, tmp_path):
    make_dist(tmp_path, "by-module", {GROUP: {"mod": "_nas_t_mod"}},
              plugin_module("_nas_t_mod", "host.THINGS.add('alpha', 1)"))
    make_dist(tmp_path, "by-function", {GROUP: {"fn": "_nas_t_fn:register"}},
              plugin_module("_nas_t_fn", "def register():\n    host.THINGS.add('beta', 2)"))
    host = sys.modules["_nas_test_host"]

    things.add("core", 0)  # registering never loads plug-ins
    assert host.imports == []
    assert things.get("alpha") == 1  # the first lookup loads the whole group
    assert sorted(host.imports) == ["_nas_t_fn", "_nas_t_mod"]
    assert things.names() == ["alpha", "beta", "core"] and len(things) == 3
    assert "beta" in things and list(things) == ["alpha", "beta", "core"]
    assert sorted(host.imports) == ["_nas_t_fn", "_nas_t_mod"]  # once, not per lookup


def test_a_broken_plugin_warns_in_one_line_and_the_others_load(things, tmp_path):
    make_dist(tmp_path, "broken-plugin", {GROUP: {"broken": "_nas_t_broken"}},
              {"_nas_t_broken": "raise RuntimeError('boom: the plug-in is broken')\n"})
    make_dist(tmp_path, "good-plugin", {GROUP: {"good": "_nas_t_good"}},
              plugin_module("_nas_t_good", "host.THINGS.add('good', 1)"))
    with pytest.warns(PluginWarning) as caught:
        assert things.names() == ["good"]
    (warning,) = caught
    message = str(warning.message)
    assert "\n" not in message
    assert "'broken'" in message and "broken-plugin 0.1" in message
    assert "RuntimeError: boom: the plug-in is broken" in message


def test_a_name_registered_by_two_packages_is_an_error_naming_both(things, tmp_path):
    make_dist(tmp_path, "pkg-one", {GROUP: {"one": "_nas_t_one"}},
              plugin_module("_nas_t_one", "host.THINGS.add('same', 1)"))
    make_dist(tmp_path, "pkg-two", {GROUP: {"two": "_nas_t_two"}},
              plugin_module("_nas_t_two", "host.THINGS.add('same', 2)"))
    for _ in range(2):  # the conflict stays an error on every lookup, not just the first
        with pytest.raises(DuplicateNameError, match="'same' is already registered") as err:
            things.get("same")
        assert "pkg-one 0.1" in str(err.value) and "pkg-two 0.1" in str(err.value)


def test_an_empty_group_says_how_to_install(things):
    with pytest.raises(KeyError, match="no 'nas_test.things' entry points are installed"):
        things.get("anything")


def test_a_name_registered_twice_outside_plugins_names_both_modules():
    registry: Registry[object] = Registry("thing")
    registry.add("x", make_dist)
    with pytest.raises(DuplicateNameError,
                       match=f"by module {__name__} and is registered again by module json;"):
        registry.add("x", json.dumps)


# ---------------------------------------------------------------------- the command line
def run_nas(*args: str, extra_path: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m nas.cli ARGS`` with the fixture distribution (and ``extra_path``) installed."""
    paths = [str(FIXTURE_DIST), str(ROOT)]
    if extra_path is not None:
        paths.insert(0, str(extra_path))
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run([sys.executable, "-m", "nas.cli", *args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=300)


def test_nas_spaces_list_shows_the_installed_plugin_space_and_task():
    out = run_nas("spaces", "list", "demo*")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["demo-tiny", "search"]
    assert "plug-in demo" in out.stdout and out.stderr == ""
    code = ("from nas.data.tasks import TASKS; from nas.space import get_space; "
            "print(TASKS.get('demo-sentiment').kind, get_space('demo-tiny').size())")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(FIXTURE_DIST), str(ROOT)])}
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split() == ["single", "3"]


def test_nas_warns_about_a_broken_plugin_and_still_lists_the_others(tmp_path):
    make_dist(tmp_path, "broken-spaces", {"nas.spaces": {"broken": "_nas_broken_spaces"}},
              {"_nas_broken_spaces": "import a_module_that_does_not_exist\n"})
    out = run_nas("spaces", "list", "demo*", extra_path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("demo-tiny")
    (line,) = out.stderr.splitlines()
    assert line.startswith("warning: space plug-in skipped: entry point 'broken'")
    assert "broken-spaces 0.1" in line and "ModuleNotFoundError" in line


def test_an_installed_plugin_that_exits_is_skipped_with_one_warning(tmp_path):
    """An entry-point plug-in that calls ``sys.exit`` while loading (a ``BaseException``,
    which ``except Exception`` lets through) is skipped and named, and ``nas`` goes on."""
    make_dist(tmp_path, "exiting-spaces", {"nas.spaces": {"exiting": "_nas_exiting_spaces"}},
              {"_nas_exiting_spaces": "import sys\nsys.exit(3)\n"})
    out = run_nas("spaces", "list", "demo*", extra_path=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("demo-tiny")
    (line,) = out.stderr.splitlines()
    assert line.startswith("warning: space plug-in skipped: entry point 'exiting'")
    assert "SystemExit(3) (it called sys.exit or exit)" in line


def test_nas_reports_a_space_name_taken_by_two_packages(tmp_path):
    source = ("from nas.space import register_space\n"
              "register_space('demo-tiny')(lambda: None)\n")
    make_dist(tmp_path, "demo-clash", {"nas.spaces": {"clash": "_nas_demo_clash"}},
              {"_nas_demo_clash": source})
    out = run_nas("spaces", "list", extra_path=tmp_path)
    assert out.returncode == 2
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: space 'demo-tiny' is already registered by entry point")
    assert "nas-demo-plugin 0.1" in line and "demo-clash 0.1" in line
