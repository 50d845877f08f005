"""The repository stands alone: no file cites a document or a path that
lives outside it, and every citation of the method reference resolves.

Code comments, docs and experiment headers cite papers (authors, year, section) or a
section of ``docs/reference.md``. Two files that once sat beside the repository (a method
specification and a style guide) must not be cited, nor the data folder's location on one
machine: the data sets are found through ``$NAS_DATA_DIR``.
Nor is the project's issue tracker cited by number: it is not in the repository either.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference.md"

#: Files not checked yet, each with its reason (none now; the rewritten README is checked).
NOT_YET_CHECKED: set[str] = set()

#: The one place a data location outside the repository may appear: the default of the
#: data setting in the README's two commands (and the docs' Home page, which opens with the
#: main one word for word), which is where the data live on the project's own machines and
#: CI. It is a setting a user overrides, not a citation.
COMMAND_PAGES = ("README.md", "docs/index.md")
DATA_DEFAULT = re.compile(r"NAS_DATA_DIR=\$\{NAS_DATA_DIR:-[^}]*\}")

# The names are assembled so that this file does not cite them itself.
_SPEC, _STYLE, _SHARED, _WORK = "SP" + "EC", "STY" + "LE", "sha" + "red", "wo" + "rk"
#: What a stand-alone repository never contains, with what to write instead.
FORBIDDEN = [
    (re.compile(rf"\b{_SPEC}\b"), "the outside method specification: cite the paper or "
                                  "docs/reference.md#<section>"),
    (re.compile(rf"\b{_STYLE}\.md\b"), "the outside style guide: name the public codebase "
                                       "whose pattern is meant"),
    (re.compile(rf"\.\./{_SHARED}\b|/{_WORK}/{_SHARED}\b|\b{_SHARED}/data\b"),
     "a data folder outside the repository: write $NAS_DATA_DIR"),
    (re.compile(rf"(?<![\w.~-])/{_WORK}/"),
     "a folder of the development machine: write a path relative to the repository "
     "(runs/..., as the commands make it)"),
]

#: Where this project's own issue tracker must not be cited: it is not part of the
#: repository, so its numbers mean nothing to a reader of a clone.
ISSUE_SCOPE = ("nas/", "spaces/", "searchers/", "evaluators/", "recipes/", "docs/",
               "experiments/", "examples/", "benchmarks/", "README.md", "CONTRIBUTING.md",
               "pyproject.toml")
#: "issue 27", "Issues 30 and 31", "issue-30": a number on this project's tracker. An
#: outside project's tracker is cited as ``owner/repo#N``, which this does not match.
ISSUE_NUMBER = re.compile(r"\bissues?[ -]#?[0-9]+", re.IGNORECASE)

#: ``reference.md#<section>``, then any further ``, #<section>`` of the same citation (which
#: may run onto the next comment line).
LINK = re.compile(r"reference\.md#([a-z0-9-]+)((?:,\s*(?:#:?\s+)?#[a-z0-9-]+)*)")


def _tracked_files() -> list[str]:
    """Tracked files plus new ones git does not ignore (so an uncommitted file counts)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others",  # noqa: S607 (git from PATH)
             "--exclude-standard"],
            cwd=ROOT, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the tracked files are unknown")
    return sorted({p for p in out.decode().split("\0") if p and (ROOT / p).is_file()})


def _texts() -> dict[str, str]:
    texts = {}
    for path in _tracked_files():
        try:
            texts[path] = (ROOT / path).read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images, databases: no citations in them
            continue
    return texts


def _slug(heading: str) -> str:
    """The anchor that mkdocs (and GitHub) give a heading: lower case, punctuation
    dropped, spaces to hyphens."""
    return re.sub(r"\s+", "-", re.sub(r"[^\w\s-]", "", heading.strip().lower()))


def _anchors() -> set[str]:
    return {_slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+)$",
                                                   REFERENCE.read_text(encoding="utf-8"),
                                                   re.MULTILINE)}


def test_no_file_cites_anything_outside_the_repository():
    found = []
    for path, text in _texts().items():
        if path in NOT_YET_CHECKED:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if path in COMMAND_PAGES:
                line = DATA_DEFAULT.sub("NAS_DATA_DIR=<default>", line)
            for pattern, fix in FORBIDDEN:
                if pattern.search(line):
                    found.append(f"{path}:{number}: {line.strip()[:80]!r} cites {fix}")
    assert not found, "\n".join(found)


def test_no_file_cites_this_projects_issue_numbers():
    """Code, docs, experiment headers and benchmarks say what an issue number stood for:
    the paper, the section of docs/reference.md, the commit or the feature's name."""
    found = []
    for path, text in _texts().items():
        if path in NOT_YET_CHECKED or not path.startswith(ISSUE_SCOPE):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if ISSUE_NUMBER.search(line):
                found.append(f"{path}:{number}: {line.strip()[:80]!r}")
    assert not found, ("cites this project's issue tracker: name the paper, the section of "
                       "docs/reference.md, the commit (git log -S) or the feature "
                       "instead:\n" + "\n".join(found))


def test_every_reference_link_names_a_section_of_the_reference():
    anchors = _anchors()
    assert {"costs", "adabert", "efficientbert", "tinybert", "mobilebert"} <= anchors
    broken = []
    for path, text in _texts().items():
        for m in LINK.finditer(text):
            names = [m.group(1), *re.findall(r"#([a-z0-9-]+)", m.group(2))]
            line = text.count("\n", 0, m.start()) + 1
            broken += [f"{path}:{line}: #{n}" for n in names if n not in anchors]
    assert not broken, "no such section in docs/reference.md:\n" + "\n".join(broken)


def test_the_checks_catch_what_they_are_for():
    """The patterns match the citations they exist to keep out, and the anchors follow the
    headings, so neither test above passes by matching nothing."""
    bad = [f"(see {_SPEC} §3)", f"{_STYLE}.md pattern 6", f"NAS_DATA_DIR=../{_SHARED}/data",
           f"--run-dir /{_WORK}/runs/x"]
    assert all(any(p.search(b) for p, _ in FORBIDDEN) for b in bad)
    assert not any(p.search("SPECIAL_TOKENS, docs/reference.md#costs, shared weights")
                   for p, _ in FORBIDDEN)
    cited = ["(issue 27, item 4)", "Issues 30 and 31", "the issue-30 run", "Issue 20's promise"]
    assert all(ISSUE_NUMBER.search(c) for c in cited)
    assert not any(ISSUE_NUMBER.search(c) for c in
                   ["huggingface/tokenizers#1794", "the issue's target", "tissue 3"])
    assert "docs/reference.md".startswith(ISSUE_SCOPE)
    assert not "tests/test_standalone.py".startswith(ISSUE_SCOPE)
    assert _slug("DARTS and GDAS") == "darts-and-gdas"
    m = LINK.search("(docs/reference.md#adabert,\n    #darts-and-gdas).")
    assert m is not None and m.group(1) == "adabert" and "#darts-and-gdas" in m.group(2)
