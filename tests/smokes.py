"""The smoke experiments' recorded results: the ``# expected:`` block of a smoke file's
header, read and written.

Format (one simple rule, in the comment header of ``experiments/*_smoke.yaml``)::

    # expected (seed 0, measured at commit 43a4924 from an empty cache): ...
    # expected: teacher.dev.accuracy=0.6796875 teacher.params=22713986
    # expected: searched.test.accuracy=0.49917627677100496

Every header line that starts with ``# expected:`` holds space-separated ``KEY=VALUE``
pairs. ``KEY`` is a dotted path into the run's ``metrics.json`` (a list item by its index:
``random.runs.0.dev.accuracy``); ``VALUE`` is the JSON value there (floats as Python's
``repr``, which reads back to the same float). A run reproduces the recording when every
key holds exactly that value. What is recorded: the dev and test metrics and the parameter
count of each scored model, never latency or wall time (they vary with the machine).

Record or refresh a file's block from a finished run (say in the commit why it moved)::

    python tests/smokes.py RUN_DIR experiments/X_smoke.yaml COMMIT
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = ROOT / "experiments"
PREFIX = "# expected:"


def smoke_file(name: str) -> Path:
    """``experiments/<name>_smoke.yaml``: the smoke experiment of a method (or a variant
    such as ``lanas``, the AdaBERT method with the LaNAS searcher)."""
    return EXPERIMENTS / f"{name}_smoke.yaml"


def _header(path: Path) -> list[str]:
    """The comment lines before the first setting."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def read_expected(path: Path) -> dict[str, Any]:
    """The recorded ``KEY: value`` pairs of a smoke file (empty when it has none)."""
    expected: dict[str, Any] = {}
    for line in _header(path):
        if line.startswith(PREFIX):
            for pair in line[len(PREFIX):].split():
                key, _, value = pair.partition("=")
                expected[key] = json.loads(value)
    return expected


def lookup(metrics: Any, key: str) -> Any:
    """The value at a dotted ``key`` of ``metrics`` (list items by index); ``KeyError``
    naming the key when the path does not exist."""
    node = metrics
    for part in key.split("."):
        if isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        elif isinstance(node, dict) and part in node:
            node = node[part]
        else:
            raise KeyError(f"{key} (no {part!r})")
    return node


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """What a smoke run records: every number under a ``dev`` or ``test`` mapping and
    every ``params`` count, by dotted key (the run's ``evaluation`` block describes the
    data, not a model, and is left out)."""
    found: dict[str, Any] = {}

    def walk(node: Any, path: list[str], scored: bool) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, [*path, str(key)], scored or key in ("dev", "test"))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, [*path, str(i)], scored)
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            if scored or path[-1] == "params":
                found[".".join(path)] = node

    walk({k: v for k, v in metrics.items() if k != "evaluation"}, [], False)
    return found


def record(run_dir: Path, path: Path, commit: str, width: int = 100) -> None:
    """Write ``run_dir``'s headline numbers into ``path``'s header (replacing an old
    block), as the last header lines."""
    values = headline(json.loads((run_dir / "metrics.json").read_text()))
    head = [line for line in _header(path)
            if not line.startswith(PREFIX) and not line.startswith("# expected (")]
    body = path.read_text().splitlines()[len(_header(path)):]
    block = [f"# expected (seed 0, measured at commit {commit} from an empty cache; "
             "format: tests/smokes.py):"]
    line = PREFIX
    for key, value in values.items():
        pair = f" {key}={json.dumps(value)}"
        if len(line) + len(pair) > width and line != PREFIX:
            block.append(line)
            line = PREFIX
        line += pair
    block.append(line)
    path.write_text("\n".join([*head, *block, *body]) + "\n")


if __name__ == "__main__":
    record(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
