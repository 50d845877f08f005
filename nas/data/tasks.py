"""Task definitions and loaders: GLUE TSV, SNIPS, your own files, hub names, corpora.

A task is declared once as a :class:`TaskSpec` in :data:`TASKS` (name → files, columns,
label set); :func:`load_registered` turns a registered task name and a split into a
typed :class:`TaskData`. Names containing a ``/`` (``glue/sst2``) are read from the Hugging
Face hub with ``datasets`` and fail with a clear message when offline. A path to a data
file (CSV, TSV, JSONL, Parquet, a saved ``datasets`` folder) or a ``task:`` mapping is
registered as a task of its own by :mod:`nas.data.files`; :mod:`nas.data.resolve`
(``load_task``) takes any of these forms.

Splits are ``train``, ``validation`` and, when a task has one, ``test``. ``dev`` is
the same split as ``validation`` (the built-in tasks call it ``dev``, which keeps their
fingerprints and so the caches keyed by them); either name works everywhere.

The data directory comes from the ``data_dir`` argument (the CLI's ``--data-dir``) or the
``NAS_DATA_DIR`` environment variable; there is deliberately no default, so a run never
silently reads another copy of the data.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from nas.data.readers import read_snips, read_text_corpus, read_tsv
from nas.errors import DataError
from nas.registry import Registry

DATA_DIR_ENV = "NAS_DATA_DIR"


def resolve_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: ``data_dir`` if given, else ``$NAS_DATA_DIR``, else an error."""
    if data_dir is None:
        env = os.environ.get(DATA_DIR_ENV)
        if not env:
            raise DataError(
                f"no data directory: pass --data-dir DIR or set the {DATA_DIR_ENV} environment "
                f"variable to the folder holding sst2/, mrpc/, snips/, wikitext2/"
            )
        data_dir = env
    path = Path(data_dir).expanduser()
    if not path.is_dir():
        raise DataError(
            f"data directory {path} does not exist (from --data-dir or {DATA_DIR_ENV})"
        )
    return path


@dataclass(frozen=True)
class TaskSpec:
    """How to read one task from the data directory.

    ``kind``: ``"single"`` (one sentence → label), ``"pair"`` (two sentences → label),
    ``"tagging"`` (tokens → one IOB tag per token, plus the intent as ``labels``).
    ``files`` maps a split name to a path relative to the data directory.
    ``label_values`` are the raw strings found in the files, in class-index order;
    ``label_names`` are their readable names. ``None`` means "derive from train".
    ``loader``, when set, returns a split's :class:`TaskData` itself (tasks read from a
    user's files, :mod:`nas.data.files`); ``files`` then holds absolute paths, for
    messages and :func:`report_split`, and no data directory is needed.
    """

    name: str
    kind: str
    files: dict[str, str]
    text_columns: tuple[str, ...] = ()
    label_column: str = ""
    label_values: tuple[str, ...] | None = None
    label_names: tuple[str, ...] | None = None
    metric: str = "accuracy"  # "accuracy" or "accuracy+f1" (binary F1 of class 1)
    doc: str = ""
    #: the Hugging Face Hub dataset and configuration the task's data come from
    #: (``("nyu-mll/glue", "sst2")``), for model cards; ``None``: not on the Hub
    hub_dataset: tuple[str, str] | None = None
    loader: Callable[[str], TaskData] | None = field(default=None, compare=False, repr=False)


#: Tasks by name: the built-in ones below, and those of installed packages, which register
#: through the ``nas.tasks`` entry-point group (loaded on the first lookup, :mod:`nas.registry`).
TASKS: Registry[TaskSpec] = Registry("task", entry_point_group="nas.tasks")

TASK_KINDS = ("single", "pair", "tagging")
METRICS = ("accuracy", "accuracy+f1")


def register_task(spec: TaskSpec) -> TaskSpec:
    """Check ``spec`` and register it under ``spec.name``; returns it.

    A plug-in package calls this from the module its ``nas.tasks`` entry point names.
    The checks are the ones :func:`load_task` relies on, so a bad declaration fails when
    it is registered, naming the field, instead of when the data is first read.
    """
    where = f"task {spec.name!r}"
    if spec.kind not in TASK_KINDS:
        raise DataError(f"{where}: kind {spec.kind!r} is not one of {', '.join(TASK_KINDS)}")
    if spec.metric not in METRICS:
        raise DataError(f"{where}: metric {spec.metric!r} is not one of {', '.join(METRICS)}")
    if "train" not in spec.files:
        raise DataError(f"{where}: files needs a 'train' entry, got {sorted(spec.files)}")
    wanted = {"single": 1, "pair": 2}.get(spec.kind)
    if wanted is not None and (len(spec.text_columns) != wanted or not spec.label_column):
        raise DataError(
            f"{where}: a {spec.kind!r} task needs {wanted} text column(s) and a label_column, "
            f"got text_columns={spec.text_columns!r}, label_column={spec.label_column!r}"
        )
    if not spec.label_values or len(spec.label_values) != len(spec.label_names or ()):
        raise DataError(
            f"{where}: label_values and label_names must be given, one name per value "
            f"(got {spec.label_values!r} and {spec.label_names!r})"
        )
    TASKS.add(spec.name, spec)
    return spec


register_task(
    TaskSpec(
        name="sst2",
        kind="single",
        # dev.tsv is a 10% carve of the GLUE training set and shares its phrases, so it
        # serves validation (search batches, early stopping); results are reported on
        # the sentence-level test set, which shares no phrase with train.
        files={"train": "sst2/train.tsv", "dev": "sst2/dev.tsv",
               "test": "sst2/test_sentences.tsv"},
        text_columns=("sentence",),
        label_column="label",
        label_values=("0", "1"),
        label_names=("negative", "positive"),
        doc="SST-2 binary sentiment (GLUE), single sentence",
        hub_dataset=("nyu-mll/glue", "sst2"),
    )
)
register_task(
    TaskSpec(
        name="mrpc",
        kind="pair",
        files={"train": "mrpc/train.tsv", "dev": "mrpc/dev.tsv"},
        text_columns=("#1 String", "#2 String"),
        label_column="Quality",
        label_values=("0", "1"),
        label_names=("not_paraphrase", "paraphrase"),
        metric="accuracy+f1",
        doc="MRPC paraphrase (GLUE), sentence pair",
        hub_dataset=("nyu-mll/glue", "mrpc"),
    )
)
SNIPS_INTENTS = (
    "AddToPlaylist",
    "BookRestaurant",
    "GetWeather",
    "PlayMusic",
    "RateBook",
    "SearchCreativeWork",
    "SearchScreeningEvent",
)
register_task(
    TaskSpec(
        name="snips",
        kind="tagging",
        files={"train": "snips/train", "dev": "snips/valid"},
        label_values=SNIPS_INTENTS,
        label_names=SNIPS_INTENTS,
        doc="SNIPS intent classification (labels) and IOB slot tagging (tags)",
    )
)

CORPORA: dict[str, dict[str, str]] = {
    # WikiText-2 raw as shipped in the data folder has only the valid and test parts.
    "wikitext2": {"valid": "wikitext2/wiki.valid.txt", "test": "wikitext2/wiki.test.txt"},
}


@dataclass(frozen=True)
class TaskData:
    """One split of a task, ready for tokenising.

    ``texts_b`` is set for pair tasks. ``labels`` are class indices into
    ``label_names``. For tagging tasks ``tokens`` and ``tags`` (indices into
    ``tag_names``) are set and ``texts_a`` holds the whitespace-joined tokens.
    ``fingerprint`` identifies the content (source files' hashes, split, subset) and is
    what teacher and output caches are keyed by.
    """

    task: str
    split: str
    kind: str
    texts_a: tuple[str, ...]
    labels: tuple[int, ...]
    label_names: tuple[str, ...]
    texts_b: tuple[str, ...] | None = None
    tokens: tuple[tuple[str, ...], ...] | None = None
    tags: tuple[tuple[int, ...], ...] | None = None
    tag_names: tuple[str, ...] | None = None
    metric: str = "accuracy"
    fingerprint: str = ""
    sources: tuple[str, ...] = field(default=(), compare=False)

    def __len__(self) -> int:
        return len(self.texts_a)

    @property
    def num_labels(self) -> int:
        return len(self.label_names)

    @property
    def is_pair(self) -> bool:
        return self.texts_b is not None

    def subset(self, indices: Sequence[int], split: str | None = None) -> TaskData:
        """The examples at ``indices`` (in that order), with a fingerprint that says so."""
        idx = [int(i) for i in indices]

        def pick(seq):
            return None if seq is None else tuple(seq[i] for i in idx)

        digest = hashlib.sha256(np.asarray(idx, dtype=np.int64).tobytes()).hexdigest()[:16]
        return replace(
            self,
            split=split or self.split,
            texts_a=pick(self.texts_a),
            texts_b=pick(self.texts_b),
            labels=pick(self.labels),
            tokens=pick(self.tokens),
            tags=pick(self.tags),
            fingerprint=_hash_strings([self.fingerprint, "subset", digest]),
        )

    def head(self, n: int | None) -> TaskData:
        """The first ``n`` examples (all when ``n`` is ``None`` or not smaller)."""
        if n is None or n >= len(self):
            return self
        return self.subset(range(n))


def cap_note(split: str, rows: int, used: int, setting: str) -> str:
    """How a cap cut a split, in the words the run log and the console use
    (a cap must never cut a user's data without a word):
    ``train: 2,000 rows, using 256: data.max_train_examples``."""
    return f"{split}: {rows:,} rows, using {used:,}: {setting}"


def _hash_strings(parts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def file_digest(path: Path) -> str:
    """SHA-256 of a file's bytes (first 16 hex digits): the data's identity for caches.

    Hashing content rather than path + mtime keeps caches valid across copies of the
    data folder; the files here are a few MB, so this costs milliseconds.
    """
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _map_labels(
    raw: Sequence[tuple[int, str]], values: Sequence[str], path: Path, what: str = "label"
) -> tuple[int, ...]:
    index = {v: i for i, v in enumerate(values)}
    out = []
    for line, value in raw:
        v = value.strip()
        if v not in index:
            raise DataError(
                f"{path}:{line}: {what} {v!r} is not in the task's {what} set {list(values)}"
            )
        out.append(index[v])
    return tuple(out)


def _snips_tag_names(tags: Sequence[Sequence[str]]) -> tuple[str, ...]:
    # Full IOB set over the slot types seen in train (B- and I- for each), so a dev
    # example that starts a slot with I- still maps to a known tag.
    types = sorted({t[2:] for seq in tags for t in seq if t[:2] in ("B-", "I-")})
    return ("O",) + tuple(f"{p}-{t}" for t in types for p in ("B", "I"))


#: the other name of a split: ``dev`` (built-in tasks) is ``validation`` (the hub, files)
SPLIT_ALIASES = {"dev": "validation", "validation": "dev"}


def split_key(spec: TaskSpec, split: str) -> str:
    """The name ``spec`` files ``split`` under (``validation`` ↔ ``dev``)."""
    if split not in spec.files and SPLIT_ALIASES.get(split) in spec.files:
        return SPLIT_ALIASES[split]
    return split


def _load_local(spec: TaskSpec, split: str, root: Path | None) -> TaskData:
    split = split_key(spec, split)
    if split not in spec.files:
        raise DataError(
            f"task {spec.name!r} has no split {split!r}; known splits: {sorted(spec.files)} "
            f"(carve a validation split from train with nas.data.train_val_split)"
        )
    if spec.loader is not None:
        return spec.loader(split)
    assert root is not None  # noqa: S101 - load_task passes the data dir for file-less specs
    path = root / spec.files[split]
    if spec.kind in ("single", "pair"):
        rows = read_tsv(path, (*spec.text_columns, spec.label_column))
        # register_task fills both for these kinds (an internal invariant, not user input)
        assert spec.label_values is not None and spec.label_names is not None  # noqa: S101
        labels = _map_labels([(ln, r[-1]) for ln, r in rows], spec.label_values, path)
        texts_a = tuple(r[0] for _, r in rows)
        texts_b = tuple(r[1] for _, r in rows) if spec.kind == "pair" else None
        return TaskData(
            task=spec.name,
            split=split,
            kind=spec.kind,
            texts_a=texts_a,
            texts_b=texts_b,
            labels=labels,
            label_names=spec.label_names,
            metric=spec.metric,
            fingerprint=_hash_strings([spec.name, split, file_digest(path)]),
            sources=(str(path),),
        )
    if spec.kind == "tagging":
        tokens, tags, intents = read_snips(path)
        train_tags = tags if split == "train" else read_snips(root / spec.files["train"])[1]
        tag_names = _snips_tag_names(train_tags)
        tag_index = {t: i for i, t in enumerate(tag_names)}
        tag_ids = []
        for line, seq in enumerate(tags, start=1):
            for t in seq:
                if t not in tag_index:
                    raise DataError(
                        f"{path / 'seq.out'}:{line}: tag {t!r} is not in the tag set derived "
                        f"from the train split ({len(tag_names)} tags)"
                    )
            tag_ids.append(tuple(tag_index[t] for t in seq))
        # register_task fills both for these kinds (an internal invariant, not user input)
        assert spec.label_values is not None and spec.label_names is not None  # noqa: S101
        labels = _map_labels(list(enumerate(intents, start=1)), spec.label_values,
                             path / "label", what="intent")
        files = [path / n for n in ("seq.in", "seq.out", "label")]
        return TaskData(
            task=spec.name,
            split=split,
            kind="tagging",
            texts_a=tuple(" ".join(t) for t in tokens),
            labels=labels,
            label_names=spec.label_names,
            tokens=tuple(tuple(t) for t in tokens),
            tags=tuple(tag_ids),
            tag_names=tag_names,
            metric=spec.metric,
            fingerprint=_hash_strings([spec.name, split, *map(file_digest, files)]),
            sources=tuple(map(str, files)),
        )
    raise AssertionError(f"unknown task kind {spec.kind!r}")  # register_task checks kinds


# Hub names that datasets knows under another split name.
_HUB_SPLITS = {"dev": "validation"}


def _load_hub(name: str, split: str) -> TaskData:
    """Load ``owner/config`` (``glue/sst2``) from the Hugging Face hub with ``datasets``."""
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a dependency
        raise DataError(f"loading hub task {name!r} needs the `datasets` package") from e
    path, _, config = name.partition("/")
    hub_split = _HUB_SPLITS.get(split, split)
    try:
        ds = datasets.load_dataset(path, config or None, split=hub_split)
    except Exception as e:  # offline: ConnectionError, OfflineModeIsEnabled, FileNotFound...
        raise DataError(
            f"could not load {name!r} (split {hub_split!r}) from the Hugging Face hub: "
            f"{type(e).__name__}: {str(e)[:200]}. Without a network, use a local task "
            f"({', '.join(TASKS)}) with --data-dir / {DATA_DIR_ENV}, or pre-download the "
            f"dataset into the datasets cache and set HF_DATASETS_OFFLINE=1"
        ) from e
    cols = ds.column_names
    text_cols = [c for c in ("sentence", "sentence1", "question", "premise", "text") if c in cols]
    pair_cols = [c for c in ("sentence2", "question2", "hypothesis") if c in cols]
    if "question1" in cols:
        text_cols = ["question1"]
    if not text_cols or "label" not in cols:
        raise DataError(f"hub dataset {name!r} has columns {cols}; expected a text and a label")
    feature = ds.features["label"]
    label_names = tuple(getattr(feature, "names", None) or sorted(set(ds["label"])))
    labels = tuple(int(x) for x in ds["label"])
    if any(x < 0 for x in labels):
        raise DataError(
            f"hub split {name!r}/{hub_split} has no labels (-1: a GLUE test split); "
            f"use train or dev"
        )
    return TaskData(
        task=name,
        split=split,
        kind="pair" if pair_cols else "single",
        texts_a=tuple(ds[text_cols[0]]),
        texts_b=tuple(ds[pair_cols[0]]) if pair_cols else None,
        labels=labels,
        label_names=tuple(str(n) for n in label_names),
        metric="accuracy+f1" if config in ("mrpc", "qqp") else "accuracy",
        fingerprint=_hash_strings([name, hub_split, getattr(ds, "_fingerprint", "")]),
        sources=(f"hub:{name}",),
    )


def load_registered(
    name: str, split: str, data_dir: str | os.PathLike[str] | None = None
) -> TaskData:
    """Split ``split`` (``train``, ``validation`` alias ``dev``, ``test``) of a task by the
    name :func:`nas.data.resolve.resolve_task` gives: a registered task read from the data
    directory (or its own loader), or a hub name with a slash (``glue/sst2``)."""
    if name not in TASKS and "/" in name:
        return _load_hub(name, split)
    spec = TASKS.get(name)
    root = None if spec.loader is not None else resolve_data_dir(data_dir)
    return _load_local(spec, split, root)


def load_corpus(
    name: str, split: str = "valid", data_dir: str | os.PathLike[str] | None = None
) -> list[str]:
    """Unlabeled paragraphs of a text corpus (``wikitext2``) for distillation and MLM.

    ``name`` may also be a path to any plain-text file.
    """
    if name in CORPORA:
        files = CORPORA[name]
        if split not in files:
            raise DataError(f"corpus {name!r} has no split {split!r}; known: {sorted(files)}")
        return read_text_corpus(resolve_data_dir(data_dir) / files[split])
    path = Path(name)
    if path.suffix or path.exists():
        return read_text_corpus(path)
    raise DataError(f"unknown corpus {name!r}; known: {sorted(CORPORA)} or a path to a .txt file")


def train_val_split(
    data: TaskData, val_fraction: float = 0.1, seed: int = 0, stratify: bool = True
) -> tuple[TaskData, TaskData]:
    """Carve a deterministic validation split out of ``data`` (usually train).

    Used for bilevel search (architecture steps on the validation part,
    docs/reference.md#darts-and-gdas) and for scoring candidates on data the weights never saw
    (docs/reference.md#efficientbert). The split depends only on ``seed``, ``val_fraction`` and the
    data (a private ``numpy`` generator, no global RNG); with ``stratify`` each label keeps its
    share in both parts.
    """
    if not 0.0 < val_fraction < 1.0:
        raise DataError(f"val_fraction must be in (0, 1), got {val_fraction}")
    if len(data) < 2:
        raise DataError(f"cannot split {len(data)} example(s) of {data.task}/{data.split}")
    rng = np.random.default_rng(seed)
    labels = np.asarray(data.labels)
    if stratify:
        val_idx: list[int] = []
        for c in np.unique(labels):
            members = np.flatnonzero(labels == c)
            rng.shuffle(members)
            val_idx.extend(members[: int(round(len(members) * val_fraction))].tolist())
        val = np.sort(np.asarray(val_idx, dtype=np.int64))
    else:
        perm = rng.permutation(len(data))
        val = np.sort(perm[: max(1, int(round(len(data) * val_fraction)))])
    if len(val) == 0 or len(val) == len(data):
        raise DataError(
            f"val_fraction={val_fraction} leaves an empty part of {len(data)} examples"
        )
    mask = np.ones(len(data), dtype=bool)
    mask[val] = False
    train = np.flatnonzero(mask)
    tag = f"{seed}:{val_fraction}"
    return (
        data.subset(train.tolist(), split=f"{data.split}-search-train[{tag}]"),
        data.subset(val.tolist(), split=f"{data.split}-search-val[{tag}]"),
    )
