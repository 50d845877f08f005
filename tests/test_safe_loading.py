"""No file is ever unpickled: a static check over the repository's Python sources.

ruff's bandit rules (``S``, in ``pyproject.toml``) flag ``pickle`` and unsafe YAML; they
know nothing of ``torch.load`` or numpy's ``allow_pickle``, which this test covers.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("nas", "spaces", "searchers", "evaluators", "recipes", "experiments", "examples",
           "benchmarks", "tests")


def _sources() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def _keyword(call: ast.Call, name: str) -> object:
    for kw in call.keywords:
        if kw.arg == name and isinstance(kw.value, ast.Constant):
            return kw.value.value
    return None


def _unsafe_loads(tree: ast.AST, lines: list[str]) -> list[tuple[int, str]]:
    """Unsafe load calls, except on lines marked ``# unpickle-ok`` (a test proving that its
    own payload is live)."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = node.func.value
        owner_name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
        call = f"{owner_name}.{node.func.attr}"
        if "# unpickle-ok" in lines[node.lineno - 1]:
            continue
        if call == "torch.load" and _keyword(node, "weights_only") is not True:
            found.append((node.lineno, "torch.load without weights_only=True"))
        if call in ("np.load", "numpy.load") and _keyword(node, "allow_pickle") is True:
            found.append((node.lineno, "np.load with allow_pickle=True"))
        if call in ("pickle.load", "pickle.loads", "dill.load", "joblib.load"):
            found.append((node.lineno, call))
    return found


def test_the_check_finds_what_it_looks_for():
    code = ("torch.load(p)\ntorch.load(p, weights_only=False)\ntorch.load(p, weights_only=True)\n"
            "np.load(p, allow_pickle=True)\nnp.load(p)\npickle.loads(b)\n"
            "pickle.loads(b)  # unpickle-ok: a test's own payload\n")
    found = _unsafe_loads(ast.parse(code), code.splitlines())
    assert [line for line, _ in found] == [1, 2, 4, 6]


def test_no_source_file_unpickles_anything():
    sources = _sources()
    assert len(sources) > 50  # the walk found the repository
    problems = [f"{path.relative_to(ROOT)}:{line}: {what}" for path in sources
                for text in [path.read_text()]
                for line, what in _unsafe_loads(ast.parse(text, str(path)), text.splitlines())]
    assert problems == []


def test_a_pickled_teacher_output_is_named_with_its_fix_and_never_unpickled(tmp_path):
    """A cache file planted as a pickle (an object array) is refused in one line naming the
    file and the fix, instead of numpy's 'Array can't be memory-mapped'."""
    import numpy as np
    import pytest

    from nas.data import load_task
    from nas.distill.cache import TeacherOutputCache
    from nas.errors import NasError

    cache = TeacherOutputCache("t", load_task("sst2", "dev").head(4), cache_dir=tmp_path,
                               teacher_id="planted")
    cache.path.mkdir(parents=True)
    np.save(cache.file("logits"), np.array([{"x": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(NasError, match=r"logits\.npy: a cached teacher output that does not "
                                       r"load .*nas cache clear outputs") as err:
        cache.load("logits")
    assert "\n" not in str(err.value)


def test_a_garbage_weights_file_never_advises_weights_only_false(tmp_path):
    import pytest

    from nas.errors import NasError
    from nas.export import read_checkpoint

    bad = tmp_path / "w.pt"
    bad.write_bytes(b"\x80\x04garbage that is no checkpoint")
    with pytest.raises(NasError, match=r"w\.pt: cannot read it as a torch checkpoint") as err:
        read_checkpoint(bad)
    assert "weights_only=False" not in str(err.value) and "\n" not in str(err.value)
