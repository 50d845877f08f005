"""Reading a user's data file into examples: the readers, the columns, the labels.

The part of :mod:`nas.data.files` that opens files. A CSV, TSV, JSONL or Parquet file is
read with ``datasets.load_dataset`` (TSV as CSV with a tab delimiter and quoting off, like
GLUE's files; every CSV/TSV row as data first, so that whether the first row is a header
is decided here, :func:`_headed`), a saved folder with ``load_from_disk``. Prepared
Arrow files are cached under ``$NAS_CACHE_DIR/datasets``.

The columns to use come from the task mapping, else from their usual names (``text``,
``text_pair``, ``label``; ``tokens``, ``tags``), else from the position in a two-column
file (text, then label). Labels are canonical strings: a word as written, a whole number
in decimal (``1``, ``1.0`` and ``"1"`` are one class), ``true``/``false``; a
``ClassLabel`` column gives its names. Every problem is one :class:`~nas.errors.DataError`
line naming the file (and row) and the fix.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas.errors import DataError

#: file suffix → reader format (``format:`` in the mapping overrides it)
FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "json", ".json": "json",
           ".ndjson": "json", ".parquet": "parquet", ".pq": "parquet"}
READER_FORMATS = ("csv", "tsv", "json", "parquet")
#: split names a saved DatasetDict may use for validation
_VALIDATION_NAMES = ("validation", "dev", "valid", "val")

# ------------------------------------------------------------------------ reading


@dataclass
class Table:
    """One split's columns, as read from a file (``where`` names it in messages)."""

    where: str
    columns: list[str]
    data: dict[str, list[Any]]
    class_names: dict[str, tuple[str, ...]] = field(default_factory=dict)  # ClassLabel names

    def __len__(self) -> int:
        return len(self.data[self.columns[0]]) if self.columns else 0


def _format_of(path: Path, given: str | None) -> str:
    if path.is_dir():
        return "disk"
    if given:
        return given
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise DataError(f"{path}: unknown file type {path.suffix or '(no suffix)'!r}; use "
                        f".csv, .tsv, .jsonl, .parquet or a datasets folder, or set "
                        f"format: csv|tsv|json|parquet in the task mapping")
    return fmt


def _datasets_cache() -> str:
    from nas.cache import cache_root

    return str(cache_root() / "datasets")


def _first_line(err: BaseException) -> str:
    cause = err.__cause__ or err.__context__ or err
    text = f"{type(cause).__name__}: {cause}" if cause is not err else str(err)
    return " ".join(text.split())[:200]


def _load(path: Path, fmt: str) -> Any:
    """A ``datasets.Dataset`` (or ``DatasetDict`` for a folder) read from ``path``."""
    import datasets

    enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()  # "Generating train split": noise for a small file
    try:
        if fmt == "disk":
            return datasets.load_from_disk(str(path))
        kwargs: dict[str, Any] = {}
        if fmt in ("csv", "tsv"):
            # every row as data (the header is decided below), empty fields as "" (a
            # review saying "NA" stays a text), TSV with quoting off like GLUE's files
            kwargs = dict(header=None, na_filter=False, encoding="utf-8-sig")  # Excel's BOM
            if fmt == "tsv":
                kwargs.update(delimiter="\t", quoting=csv.QUOTE_NONE)
        reader = "csv" if fmt == "tsv" else fmt
        return datasets.load_dataset(reader, data_files={"train": str(path)}, split="train",
                                     cache_dir=_datasets_cache(), **kwargs)
    except UnicodeDecodeError:
        raise DataError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
    except Exception as err:  # noqa: BLE001 - pandas/pyarrow raise many kinds; one line each
        reason = _first_line(err)
        if "No columns to parse" in reason or "corresponds to no data" in reason:
            raise DataError(f"{path}: empty file (no rows); add examples, one per line"
                            ) from None
        if isinstance(err, UnicodeDecodeError) or "codec can't decode" in reason:
            raise DataError(f"{path}: not UTF-8 text; save the file as UTF-8") from None
        raise DataError(f"{path}: cannot read it as {fmt} ({reason}); check the file's "
                        f"format or set format: in the task mapping") from None
    finally:
        if enabled:
            datasets.enable_progress_bars()


def _class_names(features: Any) -> dict[str, tuple[str, ...]]:
    """``ClassLabel`` names of each column (or of its items, for tag sequences)."""
    out = {}
    for column, feature in features.items():
        inner = getattr(feature, "feature", None)
        names = getattr(feature, "names", None) or getattr(inner, "names", None)
        if names:
            out[column] = tuple(str(n) for n in names)
    return out


def _table_from_dataset(ds: Any, where: str) -> Table:
    columns = list(ds.column_names)
    return Table(where, columns, {c: list(ds[c]) for c in columns}, _class_names(ds.features))


def _split_of_dict(dd: Any, split: str, path: Path) -> Any | None:
    names = _VALIDATION_NAMES if split == "validation" else (split,)
    for name in names:
        if name in dd:
            return dd[name]
    if split == "train":
        raise DataError(f"{path}: the saved datasets folder has no train split (it has "
                        f"{', '.join(dd)}); name the splits train, validation, test")
    return None


def read_table(path: Path, split: str, fmt: str | None, header: bool | None,
               columns: Mapping[str, str]) -> Table | None:
    """The rows of ``split`` in ``path`` (``None``: a DatasetDict without that split)."""
    fmt = _format_of(path, fmt)
    ds = _load(path, fmt)
    where = str(path)
    if isinstance(ds, dict):  # a DatasetDict (a dict of splits)
        ds = _split_of_dict(ds, split, path)
        if ds is None:
            return None
        where = f"{path} ({ds.split or split} split)"
    elif fmt == "disk" and split != "train":
        return None  # a single saved Dataset holds the training data only
    if len(ds) == 0:
        raise DataError(f"{where}: empty file (no rows); add examples, one per line")
    if fmt in ("csv", "tsv"):
        return _headed(ds, where, header, columns)
    return _table_from_dataset(ds, where)


def _headed(ds: Any, where: str, header: bool | None, columns: Mapping[str, str]) -> Table:
    """A CSV/TSV read with every row as data: decide whether the first row is a header.

    A header is assumed when ``header: true``, when the task names its columns, or when
    the first row holds ``text`` and ``label`` (or ``tokens`` and ``tags``). A file of
    exactly two columns without those names is header-less (text, then label) when its
    first row's label also labels another row: a header's ``sentiment`` would not.
    """
    raw = [ds[c] for c in ds.column_names]
    first = [str(col[0]).strip() for col in raw]
    if header is None:
        named = [v for v in columns.values() if not v.isdigit()]
        numbered = [v for v in columns.values() if v.isdigit()]
        if named:
            header = True
        elif numbered:
            header = False
        elif {"text", "label"} <= set(first) or {"tokens", "tags"} <= set(first):
            header = True
        elif len(raw) == 2:
            header = first[1] not in {str(v).strip() for v in raw[1][1:]}
        else:
            header = True
    if not header:
        names = [str(i) for i in range(len(raw))]
        return Table(where, names, {n: list(col) for n, col in zip(names, raw, strict=True)})
    if len(ds) == 1:
        raise DataError(f"{where}: empty file, the header is not followed by any row")
    if len(set(first)) != len(first) or "" in first:
        raise DataError(f"{where}: the header row {first} has empty or repeated column names; "
                        f"name every column once (or set header: false)")
    return Table(where, first, {n: list(col[1:]) for n, col in zip(first, raw, strict=True)})


# ------------------------------------------------------------------------ columns


@dataclass(frozen=True)
class Columns:
    """The task's kind and the file columns it reads ("" for the ones it does not use)."""

    kind: str  # single, pair, tagging
    text: str = ""
    text_pair: str = ""
    label: str = ""
    tokens: str = ""
    tags: str = ""


def pick_columns(table: Table, given: Mapping[str, str]) -> Columns:
    """The columns to use: the ones named in the mapping, else ``text``/``label`` (and
    ``text_pair``, or ``tokens``/``tags``) when present, else text and label of a
    two-column file."""
    cols = table.columns
    if "tokens" in given or "tags" in given or (
            "text" not in given and "text" not in cols and {"tokens", "tags"} <= set(cols)):
        chosen = {"tokens": given.get("tokens", "tokens"), "tags": given.get("tags", "tags"),
                  "label": given.get("label", "label")}
        kind = "tagging"
    elif given or "text" in cols:
        chosen = {"text": given.get("text", "text"), "label": given.get("label", "label")}
        if "text_pair" in given or "text_pair" in cols:
            chosen["text_pair"] = given.get("text_pair", "text_pair")
        kind = "pair" if "text_pair" in chosen else "single"
    elif len(cols) == 2:
        chosen, kind = {"text": cols[0], "label": cols[1]}, "single"
    else:
        raise DataError(f"{table.where}: no column called 'text' (the columns are "
                        f"{', '.join(cols)}); name yours in the task mapping: text: COLUMN, "
                        f"label: COLUMN (in a file without a header row, header: false and "
                        f"the columns' numbers from 0)")
    for key, column in chosen.items():
        if column not in cols:
            raise DataError(f"{table.where}: no column {column!r} for {key} (the columns are "
                            f"{', '.join(cols)}); set {key}: COLUMN in the task mapping")
    if kind == "tagging" and "label" not in given and "label" not in cols:
        raise DataError(f"{table.where}: a tagging task also needs a sentence label column "
                        f"(like SNIPS's intent), none called 'label' (the columns are "
                        f"{', '.join(cols)}); set label: COLUMN in the task mapping")
    return Columns(kind=kind, **chosen)


# ------------------------------------------------------------------------- labels

_INTEGER = re.compile(r"[+-]?\d+")


def _label_key(value: Any, where: str, row: int, column: str) -> tuple[str, str]:
    """``(type, canonical string)`` of one label: ``number``, ``word`` or ``bool``."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise DataError(f"{where}: row {row} has no label in column {column!r}; fill it in "
                        f"or remove the row")
    if isinstance(value, bool):
        return "bool", str(value).lower()
    if isinstance(value, int):
        return "number", str(value)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise DataError(f"{where}: row {row}: label {value!r} in column {column!r} is not "
                            f"a class (only classification: use words or whole numbers)")
        return "number", str(int(value))
    if isinstance(value, str):
        text = value.strip()
        return ("number", str(int(text))) if _INTEGER.fullmatch(text) else ("word", text)
    raise DataError(f"{where}: row {row}: label {value!r} in column {column!r} is not a word "
                    f"or a number; write one class name per row")


def _label_keys(table: Table, column: str) -> tuple[str, list[str]]:
    """The type (``number``, ``word`` or ``bool``) and canonical labels of a column.

    A ``ClassLabel`` column maps its indices to its names. A column mixing numbers and
    words (``1``, ``spam``) is an error: the classes would depend on how each row is
    written.
    """
    values = table.data[column]
    if column in table.class_names:
        names = table.class_names[column]
        for row, value in enumerate(values, start=1):
            if value is None or not 0 <= int(value) < len(names):
                raise DataError(f"{table.where}: row {row}: class index {value!r} in column "
                                f"{column!r} is not one of its {len(names)} ClassLabel names "
                                f"(-1 marks an unlabelled example: use a labelled split)")
        return "word", [names[int(v)] for v in values]
    kinds: dict[str, tuple[int, str]] = {}
    keys = []
    for row, value in enumerate(values, start=1):
        kind, key = _label_key(value, table.where, row, column)
        kinds.setdefault(kind, (row, key))
        keys.append(key)
    if len(kinds) > 1:
        examples = " and ".join(f"{k}s (e.g. {v[1]!r} at row {v[0]})"
                                for k, v in kinds.items())
        raise DataError(f"{table.where}: column {column!r} mixes label types: {examples}; "
                        f"write every label the same way")
    return next(iter(kinds)), keys


def class_order(kind: str, keys: Sequence[str], names: tuple[str, ...] | None
                ) -> tuple[str, ...]:
    """The classes in index order: a ClassLabel's names, else the sorted distinct labels
    (numbers numerically: 2 before 10)."""
    if names is not None:
        return names
    distinct = set(keys)
    if kind == "number":
        return tuple(sorted(distinct, key=int))
    return tuple(sorted(distinct))


def map_to_classes(table: Table, column: str, keys: Sequence[str], classes: Sequence[str],
                   train_where: str, what: str = "label") -> tuple[int, ...]:
    """Class indices of ``keys``; a label the training data never has is an error."""
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for row, key in enumerate(keys, start=1):
        if key not in index:
            shown = ", ".join(classes[:10]) + (", ..." if len(classes) > 10 else "")
            raise DataError(f"{table.where}: {what} {key!r} (row {row}) never occurs in the "
                            f"training data {train_where} ({shown}); the model cannot learn "
                            f"it: add training examples of it or remove those rows")
        out.append(index[key])
    return tuple(out)


# -------------------------------------------------------------------- the examples


@dataclass
class Examples:
    """One split's examples in canonical form, before they become a TaskData."""

    texts_a: tuple[str, ...]
    texts_b: tuple[str, ...] | None
    label_keys: list[str]
    label_kind: str
    tokens: tuple[tuple[str, ...], ...] | None = None
    tag_keys: list[list[str]] | None = None


def _texts(table: Table, column: str) -> tuple[str, ...]:
    out = []
    for row, value in enumerate(table.data[column], start=1):
        if value is None:
            raise DataError(f"{table.where}: row {row} has no text in column {column!r}; fill "
                            f"it in or remove the row")
        if isinstance(value, list | dict):
            raise DataError(f"{table.where}: row {row}: column {column!r} holds a "
                            f"{type(value).__name__}, not a text; name a text column")
        text = str(value)
        if not text.strip():  # an empty text trains and scores as nothing but [CLS] [SEP]
            raise DataError(f"{table.where}: row {row}: the text in column {column!r} is "
                            f"{'empty' if not text else 'only whitespace'}; fill it in or "
                            f"remove the row")
        out.append(text)
    return tuple(out)


def _sequence(value: Any, where: str, row: int, column: str) -> list[Any]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list | tuple):
        return list(value)
    raise DataError(f"{where}: row {row}: column {column!r} should hold a list (or a "
                    f"space-separated string), got {value!r}")


def read_examples(table: Table, cols: Columns) -> Examples:
    """The texts (or tokens and tags) and canonical labels of ``table``'s rows."""
    label_kind, label_keys = _label_keys(table, cols.label)
    if cols.kind != "tagging":
        return Examples(_texts(table, cols.text),
                         _texts(table, cols.text_pair) if cols.kind == "pair" else None,
                         label_keys, label_kind)
    tag_names = table.class_names.get(cols.tags)
    tokens, tags = [], []
    for row, (toks, tgs) in enumerate(zip(table.data[cols.tokens], table.data[cols.tags],
                                          strict=True), start=1):
        toks = [str(t) for t in _sequence(toks, table.where, row, cols.tokens)]
        tgs = _sequence(tgs, table.where, row, cols.tags)
        if len(toks) != len(tgs) or not toks:
            raise DataError(f"{table.where}: row {row}: {len(tgs)} tags for {len(toks)} tokens; "
                            f"each token needs exactly one tag")
        if tag_names is not None:
            tgs = [tag_names[int(t)] for t in tgs]
        tokens.append(tuple(toks))
        tags.append([str(t).strip() for t in tgs])
    return Examples(tuple(" ".join(t) for t in tokens), None, label_keys, label_kind,
                     tokens=tuple(tokens), tag_keys=tags)


def tag_order(tags: Sequence[Sequence[str]], names: tuple[str, ...] | None
              ) -> tuple[str, ...]:
    """The tag set: a ClassLabel's names, else ``O`` first and the others sorted."""
    if names is not None:
        return names
    distinct = {t for seq in tags for t in seq}
    return (("O",) if "O" in distinct else ()) + tuple(sorted(distinct - {"O"}))
