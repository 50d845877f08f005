"""Your own data: a task read from CSV, TSV, JSONL or Parquet files, or a saved `datasets`
folder, with no Python (docs/own_data.md).

``task:`` in an experiment and ``--task`` on the command line name a task in one of
these ways, tried in this order (:func:`nas.data.resolve.resolve_task`):

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

import hashlib
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from nas.data.overlap import exact_overlap
from nas.data.tables import (
    FORMATS,
    READER_FORMATS,
    Columns,
    Examples,
    Table,
    class_order,
    map_to_classes,
    pick_columns,
    read_examples,
    read_table,
    tag_order,
)
from nas.data.tasks import (
    TASKS,
    TaskData,
    TaskSpec,
    _hash_strings,
    file_digest,
    register_task,
    train_val_split,
)
from nas.errors import DataError

log = logging.getLogger("nas.data")

SPLITS = ("train", "validation", "test")
COLUMN_KEYS = ("text", "text_pair", "label", "tokens", "tags")
OPTION_KEYS = ("path", "name", "header", "format", "val_fraction", "metric")
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
                     f"existing path, absolute or relative to one of those folders")


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
            return parsed  # a folder named like a task ($NAS_DATA_DIR/sst2): the task
        if _looks_like_path(parsed) and found is None:
            raise _missing_path(parsed, base)
        return parsed
    return parsed.to_source()


def task_for_overrides(task: Any, keys: Sequence[str], base_dir: str | Path | None = None
                       ) -> Any:
    """The ``task:`` that ``--set task.KEY=VALUE`` settings (``keys``: the ``KEY`` parts)
    apply to: a mapping stays itself; a name or a path becomes a mapping, so that
    ``--set task.train=FILE`` on an experiment whose ``task:`` is ``sst2`` replaces the
    name with your file. With only column or option keys (``task.label=sentiment``) a
    path stays the data (``path:``); a registered name has no columns to rename, which
    is refused in one line."""
    if not isinstance(task, str):
        return task
    fields = [k.split(".")[0] for k in keys]
    if any(k in (*SPLITS, "dev", "path") for k in fields):
        return {}  # the data is given anew: the name or path is replaced
    found = _find(task.strip(), Path(base_dir) if base_dir is not None else None)
    if found is not None and (found.is_file() or _is_datasets_folder(found)):
        return {"path": str(found)}
    raise DataError(f"task.{fields[0]}: the task is {task!r}, a named task whose columns are "
                    f"set; give your data too (--set task.train=FILE), or --task FILE")


_PATH_KEYS = (*SPLITS, "dev", "path")


def record_task(task: Any, run_dir: str | Path) -> Any:
    """A normalised ``task:`` (absolute paths) as a run folder's ``config.yaml`` records
    it, by the rule of the run folder's own storage: a data file inside the
    run folder relative to it, so a moved or copied run reads its own copy; a user's
    data anywhere else as given (absolute). The inverse is :func:`recorded_task`."""
    folder = Path(run_dir).resolve()

    def record(value: Any) -> Any:
        if not isinstance(value, str) or not Path(value).is_absolute():
            return value  # a task name
        try:
            return Path(value).relative_to(folder).as_posix()
        except ValueError:
            return value

    if isinstance(task, Mapping):
        return {k: record(v) if k in _PATH_KEYS else v for k, v in task.items()}
    return record(task)


def recorded_task(task: Any, run_dir: str | Path) -> Any:
    """A ``task:`` read from a run folder's ``config.yaml``, with the paths
    :func:`record_task` made relative to the folder made absolute again (from wherever
    the folder is now); names and absolute paths stay as they are."""
    folder = Path(run_dir)

    def resolve(value: Any) -> Any:
        if not isinstance(value, str) or Path(value).is_absolute():
            return value
        inside = folder / value
        return str(inside.resolve()) if inside.exists() else value

    if isinstance(task, Mapping):
        return {k: resolve(v) if k in _PATH_KEYS else v for k, v in task.items()}
    return resolve(task)


# ---------------------------------------------------------------- identity and name


def _digest_path(path: Path) -> list[str]:
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


def _sources(spec: FileTask) -> dict[str, Path]:
    """What feeds each split: a single file is the training data, as ``train: FILE`` is."""
    if spec.path is None:
        return dict(spec.splits)
    return {"path" if spec.path.is_dir() else "train": spec.path}


def _digests(spec: FileTask) -> list[str]:
    return [f"{k}={d}" for k, p in sorted(_sources(spec).items()) for d in _digest_path(p)]


def _task_name(spec: FileTask, digests: list[str], cols: Columns) -> str:
    """The stem and a hash of the files' content and the settings that were used (the
    columns actually read, not how they were named): a copied data folder, or ``--task
    FILE`` and the mapping that names the same columns, share one name and teacher cache."""
    settings = json.dumps({"data": digests, "columns": asdict(cols), "format": spec.format,
                           "val_fraction": spec.val_fraction, "metric": spec.metric},
                          sort_keys=True)
    return f"{_display_name(spec)}-{hashlib.sha256(settings.encode()).hexdigest()[:8]}"


# ------------------------------------------------------------------- registration


def _read_splits(spec: FileTask) -> dict[str, Table]:
    """Every split the files hold: ``train``, and ``validation`` / ``test`` when given."""
    source = spec.path
    if source is None:
        paths = dict(spec.splits)
    elif source.is_dir():
        paths = {s: source for s in SPLITS}  # a saved DatasetDict holds the splits
    else:
        paths = {"train": source}
    tables = {}
    for split, path in paths.items():
        table = read_table(path, split, spec.format, spec.header, spec.columns)
        if table is not None:
            tables[split] = table
    return tables


def _check_overlap(train: Sequence[str], other: Sequence[str], where: str, train_where: str,
                   split: str) -> None:
    """Warn (one line, never fail) when validation or test texts repeat training texts."""
    found = exact_overlap(train, other)
    if found:
        log.warning("%s: %d of %d %s texts also occur in the training data %s (exact "
                    "duplicates); scores on them overstate accuracy on new text: remove them "
                    "from one of the files (a warning: the run goes on)", where, found,
                    len(other), split, train_where)


def _texts(data: TaskData) -> list[str]:
    """One string per example (pairs joined by a tab), for the overlap check."""
    b = data.texts_b or ("",) * len(data)
    return [f"{x}\t{y}" for x, y in zip(data.texts_a, b, strict=True)]


def _tag_ids(ex: Examples, tags: tuple[str, ...], table: Table, train_where: str
             ) -> tuple[tuple[int, ...], ...]:
    index = {t: i for i, t in enumerate(tags)}
    for row, seq in enumerate(ex.tag_keys or (), start=1):
        unknown = [t for t in seq if t not in index]
        if unknown:
            raise DataError(f"{table.where}: tag {unknown[0]!r} (row {row}) never occurs in "
                            f"the training data {train_where}; add training examples of it "
                            f"or remove those rows")
    return tuple(tuple(index[t] for t in seq) for seq in ex.tag_keys or ())


def _carve_validation(train: TaskData, fraction: float, where: str
                      ) -> tuple[TaskData, TaskData]:
    """``(rest, validation)``: the seeded, stratified split of :func:`train_val_split`."""
    try:
        rest, carved = train_val_split(train, fraction, seed=0)
    except DataError as err:
        raise DataError(f"{where}: cannot carve a validation split from it ({err}); add a "
                        f"validation file (validation: FILE) or more training examples"
                        ) from None
    return (replace(rest, split="train", sources=(f"{where} (the rest)",)),
            replace(carved, split="validation",
                    sources=(f"{where} ({fraction:g} carved, seed 0)",)))


def _build(spec: FileTask, name: str, digests: list[str], tables: dict[str, Table],
           cols: Columns) -> TaskSpec:
    """Check every split against train, and register the task."""
    train_table = tables["train"]
    train_where = train_table.where
    examples = {split: read_examples(table, cols) for split, table in tables.items()}
    train = examples["train"]
    classes = class_order(train.label_kind, train.label_keys,
                          train_table.class_names.get(cols.label))
    if len(classes) < 2:
        raise DataError(f"{train_where}: every training label is {classes[0]!r}; a "
                        f"classifier needs two or more classes")
    if spec.metric == "accuracy+f1" and len(classes) != 2:
        raise DataError(f"task.metric: accuracy+f1 is for two classes, {train_where} has "
                        f"{len(classes)}; use metric: accuracy")
    tags = (tag_order(train.tag_keys or (), train_table.class_names.get(cols.tags))
            if cols.kind == "tagging" else None)
    datas: dict[str, TaskData] = {}
    for split, ex in examples.items():
        table = tables[split]
        if ex.label_kind != train.label_kind:
            raise DataError(f"{table.where}: labels are {ex.label_kind}s but the training "
                            f"data's are {train.label_kind}s; mixed label types: write them "
                            f"the same way in every file")
        datas[split] = TaskData(
            task=name, split=split, kind=cols.kind, texts_a=ex.texts_a, texts_b=ex.texts_b,
            labels=map_to_classes(table, cols.label, ex.label_keys, classes, train_where),
            label_names=classes, tokens=ex.tokens,
            tags=None if tags is None else _tag_ids(ex, tags, table, train_where),
            tag_names=tags, metric=spec.metric,
            fingerprint=_hash_strings([name, split, *digests]), sources=(table.where,))
    if "validation" not in datas:
        datas["train"], datas["validation"] = _carve_validation(
            datas["train"], spec.val_fraction, train_where)
    for split in ("validation", "test"):
        if split in datas:
            _check_overlap(_texts(datas["train"]), _texts(datas[split]),
                           datas[split].sources[0], train_where, split)
    loader: Callable[[str], TaskData] = datas.__getitem__
    return register_task(TaskSpec(
        name=name, kind=cols.kind, files={s: d.sources[0] for s, d in datas.items()},
        text_columns=tuple(c for c in (cols.text, cols.text_pair) if c),
        label_column=cols.label, label_values=classes, label_names=classes,
        metric=spec.metric, doc=f"your data: {train_where}", loader=loader))


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
    key = _stat_key(spec)
    if key in _RESOLVED and _RESOLVED[key] in TASKS:
        return _RESOLVED[key]
    tables = _read_splits(spec)
    cols = pick_columns(tables["train"], spec.columns)
    digests = _digests(spec)
    name = _task_name(spec, digests, cols)
    if name not in TASKS:
        _build(spec, name, digests, tables, cols)
        log.info("task %s: read from %s", name, tables["train"].where)
    _RESOLVED[key] = name
    return name


def refuse_unreadable_path(text: str, base_dir: str | Path | None = None) -> None:
    """Raise the one-line error for a task ``text`` that names a path but no readable data:
    a folder that ``datasets`` did not write, or a path-like name that does not exist."""
    base = Path(base_dir) if base_dir is not None else None
    found = _find(text, base)
    if found is not None and found.is_dir():
        raise DataError(f"task: {found} is a folder but not one written by datasets' "
                        f"save_to_disk (no dataset_dict.json or state.json); name a data "
                        f"file in it (train.csv) or a mapping with train: FILE")
    if _looks_like_path(text):
        raise _missing_path(text, base)
