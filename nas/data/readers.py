"""File readers for the data formats of the built-in tasks (:mod:`nas.data.tasks` names
each task's files under ``$NAS_DATA_DIR``).

Every reader names the file and the 1-based line of the first bad row in its
:class:`~nas.errors.DataError`, so a broken file can be fixed without a debugger.

* GLUE TSV (SST-2, MRPC): header row, tab-separated, quoting disabled (texts contain
  quote characters), an optional UTF-8 byte-order mark (MRPC files start with one);
* SNIPS: three aligned files ``seq.in`` (whitespace tokens), ``seq.out`` (IOB tags, one
  per token) and ``label`` (the intent);
* plain text (WikiText): one paragraph a line, blank lines and `` = Heading = `` lines
  dropped.
"""

from __future__ import annotations

import csv
import io
import sys
from collections.abc import Sequence
from pathlib import Path

from nas.errors import DataError

# GLUE rows can be long (MRPC pairs); the csv default field limit of 128 KiB is plenty,
# but raise it anyway so a pathological row reports a column error, not a csv one.
csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


def _require_file(path: Path) -> None:
    if not path.is_file():
        raise DataError(
            f"{path}: file not found; check --data-dir / NAS_DATA_DIR "
            f"(the folder holding sst2/, mrpc/, snips/, wikitext2/)"
        )


def read_text(path: Path) -> str:
    """A data file's text (UTF-8, an optional byte-order mark dropped).

    A byte that is not UTF-8 is a :class:`DataError` naming the file, the line and the
    column, so the bad row can be found and fixed.
    """
    _require_file(path)
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        column = err.start - (data.rfind(b"\n", 0, err.start) + 1) + 1
        raise DataError(f"{path}:{line}: not UTF-8 text (byte 0x{data[err.start]:02x} at "
                        f"column {column}); save the file as UTF-8") from None


def read_tsv(path: Path, columns: Sequence[str]) -> list[tuple[int, list[str]]]:
    """Read a headed TSV and return ``(line_number, [value per requested column])`` rows.

    ``columns`` are header names; the first row is the header. Quoting is disabled
    (``csv.QUOTE_NONE``) because SST-2 and MRPC texts contain unbalanced quotes, and a
    leading byte-order mark is accepted (``utf-8-sig``) because MRPC files carry one.
    """
    with io.StringIO(read_text(path), newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        try:
            header = next(reader)
        except StopIteration:
            raise DataError(f"{path}:1: empty file, expected a header row") from None
        header = [h.strip() for h in header]
        missing = [c for c in columns if c not in header]
        if missing:
            raise DataError(
                f"{path}:1: missing column(s) {missing}; the header has {header}"
            )
        index = [header.index(c) for c in columns]
        width = max(index) + 1
        rows: list[tuple[int, list[str]]] = []
        for row in reader:
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # trailing blank line
            if len(row) < width:
                raise DataError(
                    f"{path}:{line}: expected at least {width} tab-separated fields "
                    f"(for columns {list(columns)}), got {len(row)}"
                )
            rows.append((line, [row[i] for i in index]))
    if not rows:
        raise DataError(f"{path}:2: empty file, the header is not followed by any row")
    return rows


def _read_lines(path: Path) -> list[str]:
    lines = read_text(path).split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline does not start another example
    if not lines:
        raise DataError(f"{path}:1: empty file")
    return lines


def read_snips(folder: Path) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """Read a SNIPS split folder: ``(tokens, tags, intents)``, one entry per example.

    Checks that the three files have the same number of lines and that every line of
    ``seq.out`` has exactly as many tags as ``seq.in`` has tokens.
    """
    seq_in, seq_out, label = folder / "seq.in", folder / "seq.out", folder / "label"
    tokens_lines, tags_lines, intents = _read_lines(seq_in), _read_lines(seq_out), _read_lines(
        label
    )
    counts = {seq_in: len(tokens_lines), seq_out: len(tags_lines), label: len(intents)}
    if len(set(counts.values())) != 1:
        shortest = min(counts, key=counts.__getitem__)
        raise DataError(
            f"{shortest}:{counts[shortest] + 1}: SNIPS files must be aligned line by line, "
            f"but the line counts differ: " + ", ".join(f"{p.name}={n}" for p, n in counts.items())
        )
    tokens: list[list[str]] = []
    tags: list[list[str]] = []
    for i, (t_line, g_line) in enumerate(zip(tokens_lines, tags_lines, strict=True)):
        toks, tgs = t_line.split(), g_line.split()
        if len(toks) != len(tgs):
            raise DataError(
                f"{seq_out}:{i + 1}: {len(tgs)} IOB tags for {len(toks)} tokens in "
                f"{seq_in.name} line {i + 1}; each token needs exactly one tag"
            )
        if not toks:
            raise DataError(f"{seq_in}:{i + 1}: empty example (no tokens)")
        tokens.append(toks)
        tags.append(tgs)
    return tokens, tags, [s.strip() for s in intents]


def read_text_corpus(path: Path, min_chars: int = 1) -> list[str]:
    """Read a plain-text corpus as a list of paragraphs.

    WikiText headings (`` = Title = ``) and blank lines are dropped: they carry no
    sentence for MLM or distillation. ``<unk>`` markers are kept as they are.
    """
    out: list[str] = []
    for line in read_text(path).splitlines():
        s = line.strip()
        if len(s) < min_chars:
            continue
        if s.startswith("=") and s.endswith("="):
            continue
        out.append(s)
    if not out:
        raise DataError(f"{path}:1: empty corpus (no non-blank, non-heading line)")
    return out
