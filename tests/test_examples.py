"""The examples run as documented, and the code that docs/plugins.md shows is theirs."""

from __future__ import annotations

import re
import runpy
import subprocess
import sys
from pathlib import Path

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
                          "examples/custom_evaluator.py"}
    for name, code in shown.items():
        assert code.strip() in (EXAMPLE.parents[1] / name).read_text(), name
    assert '@register_space("tiny-cell"' in shown["examples/custom_space.py"]


def test_custom_searcher_example_runs(monkeypatch, capsys):
    """In this process (Optuna is imported already), with the registry restored afterwards
    so that no other test sees the example's searcher."""
    from searchers.base import SEARCHERS

    SEARCHERS.names()  # the built-in searchers are registered before the copy
    monkeypatch.setattr(SEARCHERS, "_items", dict(SEARCHERS._items))
    monkeypatch.setattr(SEARCHERS, "_origins", dict(SEARCHERS._origins))
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
