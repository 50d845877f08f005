"""Texts to predict, read from a file a row at a time (``nas predict DIR --file F``).

A plain text file (any extension but the ones below) is one text per line; blank lines
are skipped. A ``.csv``, ``.tsv`` or ``.jsonl`` file is a table: its text column is
``--text-column`` (default ``text``, else the only column), the second text of a pair
``--pair-column`` (default ``text_pair`` when the model reads pairs). Rows are read
lazily with the standard library (no ``datasets``, nothing held in memory), so a file of
any length streams through :meth:`nas.runtime.ExportedModel.predict_stream`. Every
problem is one :class:`~nas.errors.DataError` line naming the file, the row and the fix.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from nas.errors import DataError

#: table formats by extension; anything else is one text per line
TABLE_FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl"}


@dataclass(frozen=True)
class Row:
    """One example of the file: where it is (``line``, 1-based, of a text file or a
    table's row counting the header) and its text(s)."""

    line: int
    text: str
    text_pair: str | None = None


def file_format(path: Path) -> str:
    """``csv``, ``tsv``, ``jsonl`` or ``lines`` (one text per line)."""
    return TABLE_FORMATS.get(path.suffix.lower(), "lines")


def _decoded(path: Path) -> Iterator[str]:
    """The lines of ``path`` as text, decoded one at a time, so that a byte that is not
    UTF-8 is reported on its own line (a block decoder would name the block's first)."""
    if not path.is_file():
        raise DataError(f"--file {path}: no such file; name a text, CSV, TSV or JSONL file")
    with path.open("rb") as f:
        for number, raw in enumerate(_raw_lines(f), start=1):
            try:
                # utf-8-sig: a byte-order mark (Excel's CSV) is not part of the first text
                yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"--file {path}: line {number} is not UTF-8 text (byte "
                                f"0x{raw[err.start]:02x}); save the file as UTF-8") from None


#: a line ends at ``\r\n``, ``\n`` or a lone ``\r`` (old Mac files, mixed exports):
#: Python's universal newlines; neither byte occurs inside a UTF-8 character
_LINE_END = re.compile(rb"\r\n|\r|\n")


def _raw_lines(f: BinaryIO, block: int = 1 << 16) -> Iterator[bytes]:
    """The lines of a binary file with their line ends, read a block at a time (a file's
    own line iteration splits at ``\n`` only, so a CR-only file would be one text)."""
    rest = b""
    while True:
        data = f.read(block)
        rest += data
        start = 0
        for end in _LINE_END.finditer(rest):
            if end.group() == b"\r" and end.end() == len(rest) and data:
                break  # a \r ending the block: its \n may start the next one
            yield rest[start:end.end()]
            start = end.end()
        rest = rest[start:]
        if not data:
            if rest:
                yield rest
            return


def _delimiter(fmt: str) -> str:
    return "\t" if fmt == "tsv" else ","


def columns(path: Path) -> list[str]:
    """The column names of a table file (its header, or the first JSON object's keys)."""
    fmt = file_format(path)
    if fmt == "lines":
        return []
    lines = _decoded(path)
    if fmt == "jsonl":
        for number, line in enumerate(lines, start=1):
            if line.strip():
                return list(_json_row(line, path, number))
        return []
    return next(csv.reader(lines, delimiter=_delimiter(fmt)), [])


def read_rows(path: Path, text_column: str | None = None, pair_column: str | None = None
              ) -> Iterator[Row]:
    """The examples of ``path`` in file order (see the module docstring)."""
    fmt = file_format(path)
    if fmt == "lines":
        flag = "--text-column" if text_column else "--pair-column" if pair_column else None
        if flag:
            raise DataError(f"--file {path}: {flag} is for a table (.csv, .tsv, .jsonl); a "
                            "text file is one text per line")
        for number, line in enumerate(_decoded(path), start=1):
            text = line.rstrip("\r\n")
            if text.strip():
                yield Row(number, text)
        return
    names = columns(path)
    text = text_column or ("text" if "text" in names or len(names) != 1 else names[0])
    for flag, column in (("--text-column", text), ("--pair-column", pair_column)):
        if column is not None and column not in names:
            raise DataError(f"--file {path}: no column {column!r} (the columns are "
                            f"{', '.join(map(repr, names)) or 'none'}); pass {flag} NAME")
    if fmt == "jsonl":
        for number, line in enumerate(_decoded(path), start=1):
            if line.strip():
                yield _row(_json_row(line, path, number), number, path, text, pair_column)
        return
    # strict: a quote left open is an error, not a text swallowing the rest of the file
    reader = csv.DictReader(_decoded(path), delimiter=_delimiter(fmt), strict=True)
    try:
        for record in reader:
            yield _row(record, reader.line_num, path, text, pair_column)
    except csv.Error as err:
        raise DataError(f"--file {path}: after line {reader.line_num}: not valid {fmt.upper()} "
                        f"({err}); fix the quoting") from None


def _json_row(line: str, path: Path, number: int) -> dict:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as err:
        raise DataError(f"--file {path}: line {number}: not JSON ({err.msg}); write one JSON "
                        "object per line") from None
    if not isinstance(record, dict):
        raise DataError(f"--file {path}: line {number}: expected a JSON object with a text "
                        f"field, got {type(record).__name__}")
    return record


def _row(record: dict, number: int, path: Path, text: str, pair: str | None) -> Row:
    def value(column: str) -> str:
        got = record.get(column)
        if not isinstance(got, str):
            what = "missing" if got is None else f"not a text ({got!r})"
            raise DataError(f"--file {path}: line {number}: column {column!r} is {what}; "
                            "give every row a text")
        return got

    return Row(number, value(text), value(pair) if pair is not None else None)


def count_rows(path: Path) -> int:
    """How many examples :func:`read_rows` will give, for a progress bar's total (a
    table's quoted line breaks may make it an overcount: the bar only estimates)."""
    fmt = file_format(path)
    with path.open("rb") as f:
        count = sum(1 for line in _raw_lines(f) if line.strip())
    return max(count - 1, 0) if fmt in ("csv", "tsv") else count


__all__ = ["Row", "columns", "count_rows", "file_format", "read_rows"]
