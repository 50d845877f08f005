"""Seeded random mutation of every kind of input file: only NasError may come out.

Four targets, each fed mutants of a valid input (structural edits of the parsed data:
values of another type or sign, keys deleted or added; and byte edits of the text:
flips, cuts, invalid UTF-8, stray tabs and newlines):

* architecture JSON, as ``nas cost adabert --arch ...`` reads it;
* experiment YAML (:func:`nas.methods.load_experiment`);
* a task's TSV file (:func:`nas.data.load_task` on a data folder laid out like ``sst2/``);
* an export's ``config.json`` (:func:`nas.runtime.load`, then one forward pass).

An input is either accepted or refused with a :class:`~nas.errors.NasError` (the CLI
prints that as one line); any other exception is a traceback waiting for a user, and
fails the test with the mutant that caused it. The mutator is seeded, so a failure
replays exactly.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from nas.errors import NasError

# mutants with zero widths build empty layers; torch warns, which is not the point here
pytestmark = pytest.mark.filterwarnings("ignore:Initializing zero-element tensors")

ROOT = Path(__file__).resolve().parents[1]
SEED = 20240611
ODD_VALUES: list[Any] = [None, True, False, 0, -1, -5, 1, 3, 2**40, -(2**63), 0.5, -2.5,
                         float("nan"), float("inf"), "", "abc", "-1", "1e9", "\x00", "é",
                         "x" * 300, [], [1, 2, 3], ["a"], {}, {"a": 1}, {"depth": []}]
ODD_BYTES = [b"\xff", b"\xe9", b"\xc3", b"\x00", b"\t", b"\n", b"\r", b'"', b"{", b"]",
             b":", b"-", b"#", b"!!python/object:os.system", b"*", b"&a", b"\t\t\t"]


# ------------------------------------------------------------------------------ mutator


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a value inside nested dicts and lists."""
    out = [prefix]
    if isinstance(tree, dict):
        for k, v in tree.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(tree, list):
        for i, v in enumerate(tree[:6]):  # long lists (graph nodes): their head is enough
            out += _paths(v, (*prefix, i))
    return out


def mutate_tree(tree: Any, rng: random.Random, paths: list[tuple] | None = None) -> Any:
    """A deep copy of ``tree`` with one to three structural edits."""
    tree = copy.deepcopy(tree)
    for _ in range(rng.randint(1, 3)):
        candidates = [p for p in (paths or _paths(tree)) if p]
        if not candidates:  # everything was deleted
            break
        path = rng.choice(candidates)
        parent = tree
        try:
            for key in path[:-1]:
                parent = parent[key]
            last = path[-1]
            old = parent[last]
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed it
        action = rng.random()
        if action < 0.55:
            parent[last] = copy.deepcopy(rng.choice(ODD_VALUES))
        elif action < 0.7 and isinstance(parent, dict):
            del parent[last]
        elif action < 0.8 and isinstance(old, int | float) and not isinstance(old, bool):
            parent[last] = rng.choice([-old, 0, old * 1000, str(old), float(old) + 0.5])
        elif action < 0.9 and isinstance(parent, dict):
            parent[rng.choice(["extra", "epocs", str(last) + "s", ""])] = rng.choice(ODD_VALUES)
        else:
            parent[last] = [old] if rng.random() < 0.5 else {"wrapped": old}
    return tree


def mutate_bytes(data: bytes, rng: random.Random) -> bytes:
    """``data`` with one to four byte-level edits."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        at = rng.randrange(len(data) + 1)
        action = rng.random()
        if action < 0.35:
            data[at:at] = rng.choice(ODD_BYTES)
        elif action < 0.55 and data:
            data[min(at, len(data) - 1)] = rng.randrange(256)
        elif action < 0.75:
            del data[at: at + rng.randint(1, 40)]
        elif action < 0.85:
            del data[at:]  # cut off
        else:
            lines = bytes(data).split(b"\n")
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def _check(kind: str, mutants: list[Any], target: Callable[[Any], Any]) -> tuple[int, int]:
    """Run ``target`` on each mutant; return (accepted, refused); fail on anything else."""
    accepted = refused = 0
    for i, mutant in enumerate(mutants):
        try:
            target(mutant)
        except NasError as err:
            assert "\n" not in str(err), f"{kind} mutant {i}: a multi-line error: {err!r}"
            refused += 1
        except Exception as err:  # noqa: BLE001 (the point: nothing else may escape)
            shown = repr(mutant)[:400]
            pytest.fail(f"{kind} mutant {i} raised {type(err).__name__}: {err}\n"
                        f"mutant: {shown}")
        else:
            accepted += 1
    return accepted, refused


# ------------------------------------------------------------------------------ targets


def test_architecture_json(tmp_path):
    from nas.cli.common import arch_from_args
    from nas.cost import count_costs
    from nas.space import get_space

    space = get_space("adabert", vocab_size=500, hidden=16, max_depth=3)
    rng = random.Random(SEED)
    valid = {"space": "adabert", "choices": dict(space.sample(1))}
    text = json.dumps(valid).encode()
    mutants = [json.dumps(mutate_tree(valid, rng)) for _ in range(35)]
    mutants += [mutate_bytes(text, rng).decode("utf-8", "replace") for _ in range(20)]
    mutants += [json.dumps(mutate_tree(valid["choices"], rng)) for _ in range(10)]

    def target(arch_text: str) -> None:
        path = tmp_path / "arch.json"
        path.write_text(arch_text)
        for given in (arch_text, str(path)):  # inline, and as a file
            count_costs(space, arch_from_args(space, given), 32)

    accepted, refused = _check("architecture", mutants, target)
    assert accepted and refused  # the mutants reach both sides


def test_experiment_yaml(tmp_path):
    from nas.methods import load_experiment

    rng = random.Random(SEED + 1)
    source = ROOT / "experiments" / "adabert_smoke.yaml"
    valid = yaml.safe_load(source.read_text())
    mutants = [yaml.safe_dump(mutate_tree(valid, rng)).encode() for _ in range(40)]
    mutants += [mutate_bytes(source.read_bytes(), rng) for _ in range(25)]

    def target(content: bytes) -> None:
        path = tmp_path / "experiment.yaml"
        path.write_bytes(content)
        load_experiment(path)

    accepted, refused = _check("experiment", mutants, target)
    assert accepted and refused


def test_task_data_files(tmp_path):
    from nas.data import load_task, resolve_data_dir

    rng = random.Random(SEED + 2)
    original = (resolve_data_dir() / "sst2" / "train.tsv").read_bytes()
    valid = b"\n".join(original.split(b"\n")[:25]) + b"\n"
    rows = [line.split(b"\t") for line in valid.split(b"\n")]
    mutants = [mutate_bytes(valid, rng) for _ in range(30)]
    for _ in range(10):  # row-level edits: a label, a column, a header
        edited = copy.deepcopy(rows)
        row = edited[rng.randrange(len(edited) - 1)]
        row[rng.randrange(len(row))] = rng.choice([b"", b"2", b"-1", b"pos", b"1\t1", b"\xff"])
        mutants.append(b"\n".join(b"\t".join(r) for r in edited))
    (tmp_path / "sst2").mkdir()

    def target(content: bytes) -> None:
        (tmp_path / "sst2" / "train.tsv").write_bytes(content)
        load_task("sst2", "train", tmp_path)

    accepted, refused = _check("data file", mutants, target)
    assert accepted and refused


def test_export_config(tmp_path):
    from nas.export import export
    from nas.runtime import load, random_batch
    from nas.space import get_space

    space = get_space("bert", vocab_size=300, hidden_size=16, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=24,
                      max_position_embeddings=64)
    folder = export(space, None, tmp_path / "export", labels=["neg", "pos"], random_init=True)
    config_path = folder / "config.json"
    valid = json.loads(config_path.read_text())
    rng = random.Random(SEED + 3)
    # edits anywhere, and more of them in the graph, where the network is built from
    graph_paths = [("graph", *p) for p in _paths(valid["graph"]) if p]
    mutants = [json.dumps(mutate_tree(valid, rng)).encode() for _ in range(30)]
    mutants += [json.dumps(mutate_tree(valid, rng, graph_paths)).encode() for _ in range(20)]
    mutants += [mutate_bytes(json.dumps(valid, indent=1).encode(), rng) for _ in range(10)]

    def target(content: bytes) -> None:
        config_path.write_bytes(content)
        model = load(folder)
        model(random_batch(model, 2, 8))

    accepted, refused = _check("export config", mutants, target)
    assert accepted and refused
