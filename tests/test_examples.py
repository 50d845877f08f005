"""The examples run as documented, and the code that docs/plugins.md shows is theirs."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "custom_space.py"


def test_custom_space_example_runs(tmp_path):
    proc = subprocess.run([sys.executable, str(EXAMPLE)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "space size: 27" in proc.stdout
    assert "child == supernet[arch]: max |diff| = 0.0e+00" in proc.stdout
    assert (tmp_path / "tiny_cell.png").read_bytes()[:4] == b"\x89PNG"


PLUGINS_PAGE = EXAMPLE.parents[1] / "docs" / "plugins.md"


def _shown_examples() -> dict[str, str]:
    """docs/plugins.md's Python blocks that start with ``# examples/NAME.py``, by file."""
    shown = {}
    for block in re.findall(r"```python\n(.*?)```", PLUGINS_PAGE.read_text(), flags=re.S):
        first, _, code = block.partition("\n")
        if first.startswith("# examples/"):
            shown[first[2:]] = code
    return shown


def test_the_plugins_page_shows_the_examples_code_verbatim():
    shown = _shown_examples()
    assert set(shown) == {"examples/custom_space.py", "examples/custom_searcher.py",
                          "examples/custom_one_shot.py", "examples/custom_planned.py",
                          "examples/custom_evaluator.py"}
    for name, code in shown.items():
        assert code.strip() in (EXAMPLE.parents[1] / name).read_text(), name
    assert '@register_space("tiny-cell"' in shown["examples/custom_space.py"]


@pytest.fixture
def own_searchers(monkeypatch):
    """The searcher registry, restored afterwards (and the example plug-in files
    forgotten), so that no other test sees an example's searcher."""
    from nas.plugins import module_name
    from searchers.base import SEARCHERS

    for name in SEARCHERS.names():  # every built-in searcher is registered before the copy
        SEARCHERS.get(name)
    monkeypatch.setattr(SEARCHERS, "_items", dict(SEARCHERS._items))
    monkeypatch.setattr(SEARCHERS, "_origins", dict(SEARCHERS._origins))
    yield SEARCHERS
    for name in ("custom_searcher.py", "custom_one_shot.py", "custom_planned.py"):
        sys.modules.pop(module_name((EXAMPLE.parent / name).resolve()), None)


def test_custom_searcher_example_runs(own_searchers, capsys):
    """In this process (Optuna is imported already)."""
    SEARCHERS = own_searchers
    runpy.run_path(str(EXAMPLE.parent / "custom_searcher.py"), run_name="__main__")
    assert capsys.readouterr().out == "best: {'op': 'std_conv_3', 'depth': 8} value 2.0\n"
    assert SEARCHERS.get("tpe-univariate").kind == "multi-trial"


def test_custom_evaluator_example_runs_and_is_on_the_plugins_page(tmp_path):
    example = EXAMPLE.parent / "custom_evaluator.py"
    proc = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and all(" complete " in line for line in lines)
    block = _shown_examples()["examples/custom_evaluator.py"]
    assert '@EVALUATORS.register("params-per-layer")' in block
    assert len(block.strip().splitlines()) <= 30  # the worked example stays short


def test_custom_one_shot_example_runs_and_meets_the_contract(own_searchers, capsys):
    """The one-shot example derives a valid architecture, and passes the one-shot
    searcher contract as registered (one file, one registration)."""
    from nas.space import get_space, small_config
    from tests.test_searcher_contract import test_one_shot_search_returns_a_valid_candidate

    runpy.run_path(str(EXAMPLE.parent / "custom_one_shot.py"), run_name="__main__")
    out = capsys.readouterr().out
    assert re.fullmatch(r"derived: [0-9a-f]{12} val loss \d+\.\d{4}\n", out), out
    assert own_searchers.get("single-path").kind == "one-shot"
    test_one_shot_search_returns_a_valid_candidate(
        "single-path", get_space("adabert", **small_config("adabert")))


def test_custom_planned_example_runs_and_meets_the_contract(own_searchers, capsys, tmp_path):
    """The planned example plans the listed architectures in order, and passes the
    planned searcher contract (a valid, repeatable plan that runs as queued trials)."""
    import tests.test_searcher_contract as contract

    runpy.run_path(str(EXAMPLE.parent / "custom_planned.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == ["mine-0", "mine-1"]
    assert len({line.split()[1] for line in lines}) == 2
    assert own_searchers.get("my-list").kind == "planned"
    parts = contract.planned_run_parts()
    contract.test_a_planned_searcher_proposes_valid_architectures_the_same_each_time(
        "my-list", parts)
    contract.test_a_planned_searchers_list_runs_as_a_study_of_queued_trials(
        "my-list", parts, tmp_path)


def test_searcher_finds_a_searcher_that_a_plugins_file_registers(own_searchers, tmp_path,
                                                                 capsys):
    """``--searcher NAME`` is checked once the experiment's ``plugins:`` are imported: a
    plug-in's searcher is found (here, a planned one, so the study flag that needs a
    multi-trial searcher is what refuses the run, naming it), and a misspelt name is
    refused in one line that lists it among the known ones."""
    import yaml

    from nas.cli import main

    data = yaml.safe_load((EXAMPLE.parent / "custom_search.yaml").read_text())
    data["plugins"] = [str(EXAMPLE.parent / "custom_space.py"),
                       str(EXAMPLE.parent / "custom_planned.py")]
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    run = ["run", str(path), "--run-dir", str(tmp_path / "run")]
    assert main([*run, "--searcher", "my-lst"]) == 2
    err = capsys.readouterr().err
    assert "--searcher unknown searcher 'my-lst'; did you mean 'my-list'?" in err
    assert len(err.strip().splitlines()) == 1
    assert main([*run, "--searcher", "my-list", "--n-trials", "2"]) == 2
    assert "--n-trials needs a multi-trial searcher" in capsys.readouterr().err
    assert own_searchers.kind_of("my-list") == "planned"
    assert not (tmp_path / "run").exists()  # refused before any stage
