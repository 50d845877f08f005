"""Your own data: a task read from CSV, TSV, JSONL or Parquet files, or a saved `datasets`
folder, with no Python (issue 19).

``task:`` in an experiment and ``--task`` on the command line name a task in one of
these ways, tried in this order (:func:`resolve_task`):

1. an existing path: a data file, or a folder written by ``datasets``' ``save_to_disk``
   (absolute, relative to the current directory, or relative to the experiment file);
2. a registered task (``sst2``, ``mrpc``, ``snips``, plug-ins);
3. a Hugging Face hub name with a slash (``glue/sst2``);
4. a mapping, the full form::

       task:
         train: data/train.csv
         validation: data/valid.csv   # optional: carved from train when absent
         test: data/test.csv          # optional: reports use it when present
         text: review                 # column keys: text, text_pair, label, tokens, tags
         label: sentiment

Files are read with ``datasets`` (``load_dataset("csv" | "json" | "parquet")``, TSV as
CSV with a tab delimiter and quoting off, ``load_from_disk`` for a folder). A file is
registered as a task under a stable name (its stem and a hash of its content and
settings, ``reviews-3f2a9c1d``), so everything downstream (teacher cache, probes,
reports, export) keeps working with a task name and :class:`~nas.data.tasks.TaskData`.

Labels may be words or whole numbers: the classes are the sorted distinct training
labels (numbers in numeric order; a ``ClassLabel`` column keeps its own names), and
their names travel to the export and ``nas predict``. Every problem with a file is one
:class:`~nas.errors.DataError` line naming the file and the fix.
"""

from __future__ import annotations

import csv
import hashlib
import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nas.data.overlap import exact_overlap
from nas.errors import DataError, RegistryError

log = logging.getLogger("nas.data")

#: file suffix → reader format (``format:`` in the mapping overrides it)
FORMATS = {".csv": "csv", ".tsv": "tsv", ".tab": "tsv", ".jsonl": "json", ".json": "json",
           ".ndjson": "json", ".parquet": "parquet", ".pq": "parquet"}
READER_FORMATS = ("csv", "tsv", "json", "parquet")
SPLITS = ("train", "validation", "test")
COLUMN_KEYS = ("text", "text_pair", "label", "tokens", "tags")
OPTION_KEYS = ("path", "name", "header", "format", "val_fraction", "metric")
#: split names a saved DatasetDict may use for validation
_VALIDATION_NAMES = ("validation", "dev", "valid", "val")
_DEFAULT_VAL_FRACTION = 0.1


# ------------------------------------------------------------------ what the user wrote


@dataclass(frozen=True)
class FileTask:
    """A task as the user wrote it: its files and column settings, paths made absolute.

    ``splits`` maps ``train`` / ``validation`` / ``test`` to a file or a saved-``datasets``
    folder; ``path`` is a single source holding every split (a ``DatasetDict`` folder)
    or the training data alone (a file). ``columns`` maps a column key (``text``,
    ``text_pair``, ``label``, ``tokens``, ``tags``) to the column's name in the files.
    """

    splits: dict[str, Path] = field(default_factory=dict)
    path: Path | None = None
    columns: dict[str, str] = field(default_factory=dict)
    name: str | None = None
    header: bool | None = None
    format: str | None = None
    val_fraction: float = _DEFAULT_VAL_FRACTION
    metric: str = "accuracy"

    def to_source(self) -> dict[str, Any] | str:
        """The normalised ``task:`` value (absolute paths): what a run's snapshot records."""
        out: dict[str, Any] = {}
        if self.path is not None:
            if not (self.splits or self.columns or self.name or self.header is not None
                    or self.format or self.val_fraction != _DEFAULT_VAL_FRACTION
                    or self.metric != "accuracy"):
                return str(self.path)
            out["path"] = str(self.path)
        out.update({k: str(v) for k, v in self.splits.items()})
        out.update(self.columns)
        for key in ("name", "header", "format"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        if self.val_fraction != _DEFAULT_VAL_FRACTION:
            out["val_fraction"] = self.val_fraction
        if self.metric != "accuracy":
            out["metric"] = self.metric
        return out


def _find(text: str, base_dir: Path | None) -> Path | None:
    """The existing file or folder ``text`` names: as given (absolute), else relative to
    the current directory, else relative to ``base_dir`` (the experiment file's folder)."""
    path = Path(text).expanduser()
    candidates = [path] if path.is_absolute() else [Path.cwd() / path]
    if base_dir is not None and not path.is_absolute():
        candidates.append(Path(base_dir) / path)
    for candidate in candidates:
        if candidate.exists():
            return candidate.resolve()
    return None


def _is_datasets_folder(path: Path) -> bool:
    return path.is_dir() and any((path / n).is_file() for n in ("dataset_dict.json",
                                                                 "state.json"))


def _looks_like_path(text: str) -> bool:
    return (Path(text).suffix.lower() in FORMATS or text.startswith((".", "/", "~"))
            or text.endswith(("/", "\\")))


def _missing_path(text: str, base_dir: Path | None, key: str = "task") -> DataError:
    where = f"{Path.cwd()}" + (f" or {base_dir}" if base_dir is not None else "")
    return DataError(f"{key}: {text}: no such file or folder (looked in {where}); give an "
                     f"existing path, absolute or relative to the current directory")


def parse_task(task: Any, base_dir: str | Path | None = None) -> FileTask | str:
    """What ``task`` names: a :class:`FileTask` for files, else the name (unchanged).

    Checks the mapping's keys and value types and that every named path exists; reads
    nothing yet.
    """
    base = Path(base_dir) if base_dir is not None else None
    if isinstance(task, str):
        text = task.strip()
        if not text:
            raise DataError("task: empty; give a task name (sst2), a data file or a mapping")
        found = _find(text, base)
        if found is not None and (found.is_file() or _is_datasets_folder(found)):
            return FileTask(path=found)
        return text  # a registered or hub name, checked by resolve_task
    if isinstance(task, Mapping):
        return _parse_mapping(task, base)
    raise DataError(f"task: expected a name, a path or a mapping, got {task!r}")


def _parse_mapping(task: Mapping[str, Any], base: Path | None) -> FileTask:
    known = (*SPLITS, "dev", *COLUMN_KEYS, *OPTION_KEYS)
    for key in task:
        if key not in known:
            raise DataError(f"task: unknown key {key!r}; known keys: {', '.join(known)}")
    if "dev" in task and "validation" in task:
        raise DataError("task: give either validation or dev (the same split), not both")

    def path_of(key: str) -> Path:
        value = task[key]
        if not isinstance(value, str) or not value.strip():
            raise DataError(f"task.{key}: expected a path, got {value!r}")
        found = _find(value.strip(), base)
        if found is None:
            raise _missing_path(value, base, f"task.{key}")
        if found.is_dir() and not _is_datasets_folder(found):
            raise DataError(f"task.{key}: {found} is a folder but not one written by datasets' "
                            f"save_to_disk (no dataset_dict.json or state.json); name a file")
        return found

    splits = {("validation" if k == "dev" else k): path_of(k)
              for k in (*SPLITS, "dev") if k in task}
    path = path_of("path") if "path" in task else None
    if path is None and "train" not in splits:
        raise DataError("task: a mapping needs train: FILE (or path: a datasets folder)")
    if path is not None and splits:
        raise DataError("task: give either path (one source for all splits) or "
                        "train/validation/test files, not both")
    columns = {}
    for key in COLUMN_KEYS:
        if key in task:
            value = task[key]
            if isinstance(value, bool) or not isinstance(value, str | int) or str(value) == "":
                raise DataError(f"task.{key}: expected a column name, got {value!r}")
            columns[key] = str(value)
    header = task.get("header")
    if header is not None and not isinstance(header, bool):
        raise DataError(f"task.header: expected true or false, got {header!r}")
    fmt = task.get("format")
    if fmt is not None and fmt not in READER_FORMATS:
        raise DataError(f"task.format: {fmt!r} is not one of {', '.join(READER_FORMATS)}")
    name = task.get("name")
    if name is not None and (not isinstance(name, str) or not _slug(name)):
        raise DataError(f"task.name: expected a short name (letters, digits), got {name!r}")
    val_fraction = task.get("val_fraction", _DEFAULT_VAL_FRACTION)
    if (isinstance(val_fraction, bool) or not isinstance(val_fraction, int | float)
            or not 0.0 < val_fraction < 1.0):
        raise DataError(f"task.val_fraction: expected a number in (0, 1), got {val_fraction!r}")
    metric = task.get("metric", "accuracy")
    if metric not in ("accuracy", "accuracy+f1"):
        raise DataError(f"task.metric: {metric!r} is not accuracy or accuracy+f1")
    return FileTask(splits=splits, path=path, columns=columns, name=name, header=header,
                    format=fmt, val_fraction=float(val_fraction), metric=metric)


def normalise_task(task: Any, base_dir: str | Path | None = None) -> Any:
    """``task`` with its paths made absolute (a name stays as it is): what an experiment
    file's ``task:`` becomes at load time, so a run's snapshot is valid from any folder."""
    parsed = parse_task(task, base_dir)
    if isinstance(parsed, str):
        base = Path(base_dir) if base_dir is not None else None
        found = _find(parsed, base)
        if found is not None and found.is_dir() and not _looks_like_path(parsed):
            return parsed  # a folder named like a task (shared/data/sst2): the task name
        if _looks_like_path(parsed) and found is None:
            raise _missing_path(parsed, base)
        return parsed
    return parsed.to_source()


# ------------------------------------------------------------------------ reading


@dataclass
class _Table:
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
    from nas.teacher import cache_root  # light: no torch at import

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
            kwargs = dict(header=None, na_filter=False)
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


def _table_from_dataset(ds: Any, where: str) -> _Table:
    columns = list(ds.column_names)
    return _Table(where, columns, {c: list(ds[c]) for c in columns}, _class_names(ds.features))


def _split_of_dict(dd: Any, split: str, path: Path) -> Any | None:
    names = _VALIDATION_NAMES if split == "validation" else (split,)
    for name in names:
        if name in dd:
            return dd[name]
    if split == "train":
        raise DataError(f"{path}: the saved datasets folder has no train split (it has "
                        f"{', '.join(dd)}); name the splits train, validation, test")
    return None


def _read_table(path: Path, split: str, fmt: str | None, header: bool | None,
                columns: Mapping[str, str]) -> _Table | None:
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


def _headed(ds: Any, where: str, header: bool | None, columns: Mapping[str, str]) -> _Table:
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
        return _Table(where, names, {n: list(col) for n, col in zip(names, raw, strict=True)})
    if len(ds) == 1:
        raise DataError(f"{where}: empty file, the header is not followed by any row")
    if len(set(first)) != len(first) or "" in first:
        raise DataError(f"{where}: the header row {first} has empty or repeated column names; "
                        f"name every column once (or set header: false)")
    return _Table(where, first, {n: list(col[1:]) for n, col in zip(first, raw, strict=True)})


# ------------------------------------------------------------------------ columns


@dataclass(frozen=True)
class _Columns:
    kind: str  # single, pair, tagging
    text: str = ""
    text_pair: str = ""
    label: str = ""
    tokens: str = ""
    tags: str = ""


def _pick_columns(table: _Table, given: Mapping[str, str]) -> _Columns:
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
                        f"{', '.join(cols)}); name yours in the task mapping: "
                        f"text: COLUMN, label: COLUMN")
    for key, column in chosen.items():
        if column not in cols:
            raise DataError(f"{table.where}: no column {column!r} for {key} (the columns are "
                            f"{', '.join(cols)}); set {key}: COLUMN in the task mapping")
    if kind == "tagging" and "label" not in given and "label" not in cols:
        raise DataError(f"{table.where}: a tagging task also needs a sentence label column "
                        f"(like SNIPS's intent), none called 'label' (the columns are "
                        f"{', '.join(cols)}); set label: COLUMN in the task mapping")
    return _Columns(kind=kind, **chosen)


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


def _label_keys(table: _Table, column: str) -> tuple[str, list[str]]:
    """The type (``number``, ``word`` or ``bool``) and canonical labels of a column.

    A ``ClassLabel`` column maps its indices to its names. A column mixing numbers and
    words (``1``, ``spam``) is an error: the classes would depend on how each row is
    written.
    """
    values = table.data[column]
    if column in table.class_names:
        names = table.class_names[column]
        return "word", [names[int(v)] if v is not None and 0 <= int(v) < len(names)
                        else _bad_class_index(table, column, i, v)
                        for i, v in enumerate(values, start=1)]
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


def _bad_class_index(table: _Table, column: str, row: int, value: Any) -> str:
    raise DataError(f"{table.where}: row {row}: class index {value!r} in column {column!r} is "
                    f"not one of the column's {len(table.class_names[column])} ClassLabel names")


def _class_order(kind: str, keys: Sequence[str], names: tuple[str, ...] | None) -> tuple[str, ...]:
    if names is not None:
        return names
    distinct = set(keys)
    if kind == "number":
        return tuple(sorted(distinct, key=int))
    return tuple(sorted(distinct))


def _map_to_classes(table: _Table, column: str, keys: Sequence[str], classes: Sequence[str],
                    train_where: str, what: str = "label") -> tuple[int, ...]:
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
class _Examples:
    """One split's examples in canonical form, before they become a TaskData."""

    texts_a: tuple[str, ...]
    texts_b: tuple[str, ...] | None
    label_keys: list[str]
    label_kind: str
    tokens: tuple[tuple[str, ...], ...] | None = None
    tag_keys: list[list[str]] | None = None


def _texts(table: _Table, column: str) -> tuple[str, ...]:
    out = []
    for row, value in enumerate(table.data[column], start=1):
        if value is None:
            raise DataError(f"{table.where}: row {row} has no text in column {column!r}; fill "
                            f"it in or remove the row")
        if isinstance(value, list | dict):
            raise DataError(f"{table.where}: row {row}: column {column!r} holds a "
                            f"{type(value).__name__}, not a text; name a text column")
        out.append(str(value))
    return tuple(out)


def _sequence(value: Any, where: str, row: int, column: str) -> list[Any]:
    if isinstance(value, str):
        return value.split()
    if isinstance(value, list | tuple):
        return list(value)
    raise DataError(f"{where}: row {row}: column {column!r} should hold a list (or a "
                    f"space-separated string), got {value!r}")


def _examples(table: _Table, cols: _Columns) -> _Examples:
    label_kind, label_keys = _label_keys(table, cols.label)
    if cols.kind != "tagging":
        return _Examples(_texts(table, cols.text),
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
    return _Examples(tuple(" ".join(t) for t in tokens), None, label_keys, label_kind,
                     tokens=tuple(tokens), tag_keys=tags)


def _tag_order(tags: Sequence[Sequence[str]], names: tuple[str, ...] | None) -> tuple[str, ...]:
    if names is not None:
        return names
    distinct = {t for seq in tags for t in seq}
    return (("O",) if "O" in distinct else ()) + tuple(sorted(distinct - {"O"}))


# ---------------------------------------------------------------- identity and name


def _digest_path(path: Path) -> list[str]:
    from nas.data.tasks import file_digest

    if path.is_file():
        return [file_digest(path)]
    return [f"{p.relative_to(path)}:{file_digest(p)}" for p in sorted(path.rglob("*"))
            if p.is_file()]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def _display_name(spec: FileTask) -> str:
    if spec.name:
        return _slug(spec.name)
    source = spec.path or spec.splits["train"]
    stem = source.name if source.is_dir() else source.stem
    if stem.lower() in ("train", "data", "dataset") and source.parent.name:
        stem = source.parent.name  # agnews/train.tsv → agnews
    return _slug(stem) or "data"


def _identity(spec: FileTask) -> tuple[str, list[str]]:
    """``(name, digests)``: the task's name hashes the files' content and the settings,
    not their paths, so a copied data folder keeps its teacher cache."""
    sources = {"path": spec.path} if spec.path is not None else dict(spec.splits)
    digests = [f"{k}={d}" for k, p in sorted(sources.items()) for d in _digest_path(p)]
    settings = json.dumps({"columns": spec.columns, "header": spec.header,
                           "format": spec.format, "val_fraction": spec.val_fraction,
                           "metric": spec.metric, "kinds": {k: p.is_dir() for k, p in
                                                           sorted(sources.items())},
                           "data": digests}, sort_keys=True)
    key = hashlib.sha256(settings.encode()).hexdigest()[:8]
    return f"{_display_name(spec)}-{key}", digests


# ------------------------------------------------------------------- registration


def _check_overlap(train: _Examples, other: _Examples, where: str, train_where: str,
                   split: str) -> None:
    """Warn (one line, never fail) when validation or test texts repeat training texts."""

    def texts(e: _Examples) -> list[str]:
        b = e.texts_b or ("",) * len(e.texts_a)
        return [f"{x}\t{y}" for x, y in zip(e.texts_a, b, strict=True)]

    found = exact_overlap(texts(train), texts(other))
    if found:
        log.warning("%s: %d of %d %s texts also occur in the training data %s (exact "
                    "duplicates); scores on them overstate accuracy on new text: remove them "
                    "from one of the files (a warning: the run goes on)", where, found,
                    len(other.texts_a), split, train_where)


def _build(spec: FileTask, name: str, digests: list[str]) -> Any:
    """Read every split, check it, and return the registered :class:`TaskSpec`."""
    from nas.data.tasks import TaskData, TaskSpec, _hash_strings, register_task

    source = spec.path
    paths = {s: source for s in SPLITS} if source is not None and source.is_dir() else (
        {"train": source} if source is not None else dict(spec.splits))
    tables = {}
    for split, path in paths.items():
        table = _read_table(path, split, spec.format, spec.header, spec.columns)
        if table is not None:
            tables[split] = table
    train_table = tables["train"]
    cols = _pick_columns(train_table, spec.columns)
    examples = {"train": _examples(train_table, cols)}
    for split, table in tables.items():
        if split != "train":
            missing = [c for c in (cols.text, cols.text_pair, cols.label, cols.tokens,
                                   cols.tags) if c and c not in table.columns]
            if missing:
                raise DataError(f"{table.where}: no column {missing[0]!r} (the columns are "
                                f"{', '.join(table.columns)}); give every split the training "
                                f"data's columns")
            examples[split] = _examples(table, cols)
    train = examples["train"]
    classes = _class_order(train.label_kind, train.label_keys,
                           train_table.class_names.get(cols.label))
    if len(classes) < 2:
        raise DataError(f"{train_table.where}: every training label is {classes[0]!r}; a "
                        f"classifier needs two or more classes")
    if spec.metric == "accuracy+f1" and len(classes) != 2:
        raise DataError(f"task.metric: accuracy+f1 is for two classes, {train_table.where} "
                        f"has {len(classes)}; use metric: accuracy")
    tag_classes = (_tag_order(train.tag_keys or (), train_table.class_names.get(cols.tags))
                   if cols.kind == "tagging" else None)
    datas: dict[str, Any] = {}
    for split, ex in examples.items():
        table = tables[split]
        if ex.label_kind != train.label_kind and split != "train":
            raise DataError(f"{table.where}: labels are {ex.label_kind}s but the training "
                            f"data's are {train.label_kind}s; mixed label types: write them "
                            f"the same way in every file")
        labels = _map_to_classes(table, cols.label, ex.label_keys, classes, train_table.where)
        tags = None
        if tag_classes is not None:
            index = {t: i for i, t in enumerate(tag_classes)}
            for row, seq in enumerate(ex.tag_keys or (), start=1):
                unknown = [t for t in seq if t not in index]
                if unknown:
                    raise DataError(f"{table.where}: tag {unknown[0]!r} (row {row}) never "
                                    f"occurs in the training data {train_table.where}; add "
                                    f"training examples of it or remove those rows")
            tags = tuple(tuple(index[t] for t in seq) for seq in ex.tag_keys or ())
        if split != "train":
            _check_overlap(train, ex, table.where, train_table.where, split)
        datas[split] = TaskData(
            task=name, split=split, kind=cols.kind, texts_a=ex.texts_a, texts_b=ex.texts_b,
            labels=labels, label_names=classes, tokens=ex.tokens, tags=tags,
            tag_names=tag_classes, metric=spec.metric,
            fingerprint=_hash_strings([name, split, *digests]), sources=(table.where,))
    files = {split: table.where for split, table in tables.items()}
    if "validation" not in datas:
        # carved from train with the seeded, stratified split; train keeps the rest
        from nas.data.tasks import train_val_split

        try:
            rest, carved = train_val_split(datas["train"], spec.val_fraction, seed=0)
        except DataError as err:
            raise DataError(f"{train_table.where}: cannot carve a validation split from it "
                            f"({err}); add a validation file (validation: FILE) or more "
                            f"training examples") from None
        note = f"{train_table.where} ({spec.val_fraction:g} carved, seed 0)"
        datas["train"] = replace(rest, split="train", sources=(f"{train_table.where} (the "
                                                              f"rest)",))
        datas["validation"] = replace(carved, split="validation", sources=(note,))
        files["validation"] = note
    loader: Callable[[str], Any] = datas.__getitem__
    return register_task(TaskSpec(
        name=name, kind=cols.kind, files=files,
        text_columns=tuple(c for c in (cols.text, cols.text_pair) if c),
        label_column=cols.label, label_values=classes, label_names=classes,
        metric=spec.metric, doc=f"your data: {train_table.where}", loader=loader))


#: normalised source + file stats → the registered name, so that resolving the same
#: files again in one process costs a few stats, not a read and a hash
_RESOLVED: dict[str, str] = {}


def _stat_key(spec: FileTask) -> str:
    paths = [spec.path] if spec.path is not None else list(spec.splits.values())
    stats = []
    for p in paths:
        for f in ([p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())):
            st = f.stat()
            stats.append((str(f), st.st_size, st.st_mtime_ns))
    return json.dumps([spec.to_source(), stats], sort_keys=True, default=str)


def register_files(spec: FileTask) -> str:
    """Read, check and register the task ``spec`` describes; returns its name."""
    from nas.data.tasks import TASKS

    key = _stat_key(spec)
    if key in _RESOLVED and _RESOLVED[key] in TASKS:
        return _RESOLVED[key]
    name, digests = _identity(spec)
    if name not in TASKS:
        _build(spec, name, digests)
        log.info("task %s: read from %s", name, TASKS.get(name).doc.removeprefix("your data: "))
    _RESOLVED[key] = name
    return name


def resolve_task(task: Any, base_dir: str | Path | None = None) -> str:
    """The registered task name for whatever ``task`` is (see the module docstring).

    Files are read, checked and registered on the first call; a registered name is
    returned as it is (its data is read by :func:`~nas.data.tasks.load_task`).
    """
    from nas.data.tasks import TASKS

    parsed = parse_task(task, base_dir)
    if isinstance(parsed, FileTask):
        return register_files(parsed)
    if parsed in TASKS:
        return parsed
    base = Path(base_dir) if base_dir is not None else None
    found = _find(parsed, base)
    if found is not None and found.is_dir():
        raise DataError(f"task: {found} is a folder but not one written by datasets' "
                        f"save_to_disk (no dataset_dict.json or state.json); name a data "
                        f"file in it (train.csv) or a mapping with train: FILE")
    if _looks_like_path(parsed):
        raise _missing_path(parsed, base)
    if "/" in parsed:
        return parsed  # a hub name
    try:
        TASKS.get(parsed)
    except RegistryError as err:
        raise RegistryError(f"{err.args[0]}; or give a data file (train.csv), a saved "
                            f"datasets folder, or a hub name with a slash (glue/sst2)"
                            ) from None
    return parsed  # pragma: no cover - TASKS.get raised above
