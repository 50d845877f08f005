"""Every ``# type: ignore`` in the type-checked packages names its error code and says why
on the same line, so that an ignore can be judged without running mypy."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("nas", "spaces", "searchers", "evaluators", "recipes")
IGNORE = re.compile(r"#\s*type:\s*ignore")
EXPLAINED = re.compile(r"#\s*type:\s*ignore\[[a-z-]+(,\s*[a-z-]+)*\]\s+#\s*\S")


def unexplained(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1)
            if IGNORE.search(line) and not EXPLAINED.search(line)]


def test_every_type_ignore_names_its_code_and_reason():
    bad = [f"{path.relative_to(ROOT)}:{n}"
           for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
           for n in unexplained(path.read_text(encoding="utf-8"))]
    assert not bad, "a type: ignore without [code]  # reason:\n" + "\n".join(bad)


def test_the_check_catches_bare_and_unexplained_ignores():
    assert unexplained("x = 1  # type: ignore\ny = 2  # type: ignore[misc]\n") == [1, 2]
    assert unexplained("z = f()  # type: ignore[arg-type, misc]  # stubs lack it\n") == []
