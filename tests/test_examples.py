"""The README's "define your own space" example runs as documented."""

from __future__ import annotations

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


def test_readme_shows_the_example_space():
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    assert '@register_space("tiny-cell"' in readme and "examples/custom_space.py" in readme


def test_custom_evaluator_example_runs_and_is_in_the_readme(tmp_path):
    example = EXAMPLE.parent / "custom_evaluator.py"
    proc = subprocess.run([sys.executable, str(example)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and all(" complete " in line for line in lines)
    readme = (EXAMPLE.parents[1] / "README.md").read_text()
    assert '@EVALUATORS.register("params-per-layer")' in readme
    start = readme.index('@EVALUATORS.register("params-per-layer")')
    block = readme[start:readme.index("```", start)]
    assert len(block.strip().splitlines()) <= 30  # the worked example stays short
