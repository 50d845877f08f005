"""Transfer text: unlabeled text that the teacher labels, added to a final retrain.

A distilled student learns from the teacher's answer distribution, which needs no human
label, so text without labels teaches it too, and far more of it is at hand: TinyBERT's
task distillation augments the training set for the same reason (Jiao et al. 2020,
§3.1). The experiment's top-level block::

    transfer:
      texts: FILE        # a text file (one text a line), or CSV / TSV / JSONL
      text: COLUMN       # a table's text column (default: ``text``, else its only column)
      text_pair: COLUMN  # a pair task's second text (MRPC): required there
      max_texts: N       # the first N texts kept after the overlap check (default: all)
      augment: {n: N, rows: sentences}  # and/or TinyBERT's augmentation of the task's rows

``augment`` (:class:`TransferAugment`) is a second source: TinyBERT's word-replacement
augmentation (Jiao et al. 2020, §3.1; :mod:`nas.augment`, cached) of the final
retrain's own rows, by default only its whole sentences (``rows: sentences``: the rows
contained in no longer row; SST-2's training split holds every phrase of each sentence,
and a phrase's variants teach little), its N variants per row labelled by the teacher
the same way (the originals are training rows already).

The file is read a row at a time (:func:`nas.textfile.read_rows`); a text that shares an
8-word phrase with dev or the report split, equals one of their texts or lies inside one
(:func:`nas.data.overlap.overlapping`) is dropped, and the run log says how many. The
rows become a :class:`~nas.data.TaskData` whose labels are all :data:`NO_LABEL`: the
loss reads the teacher's distribution for them (the soft term only,
:func:`transfer_kd_loss`), never a label. The block stays out of the task's identity:
the teacher is fine-tuned and cached as without it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas.errors import DataError

#: the label of a transfer row: no class (``cross_entropy`` refuses it, so a loss that
#: read it as a label would fail instead of training on a placeholder)
NO_LABEL = -1
#: a dev or report text shares a phrase of this many words with a dropped transfer text
MIN_WORDS = 8
#: bytes read to tell a binary file (a NUL byte) from text
_SNIFF = 8192


#: ``transfer.augment.rows``: which of the final retrain's rows are augmented
AUGMENT_ROWS = ("sentences", "all")


@dataclass
class TransferAugment:
    """``transfer.augment``: ``n`` TinyBERT variants of each of the final retrain's
    ``rows`` (``sentences``: rows contained in no longer row, :func:`sentence_rows`;
    ``all``), with :class:`nas.augment.AugmentSettings`' ``m``, ``p_t``,
    ``multi_piece`` and ``seed``. ``n: 0`` (the default): none."""

    n: int = 0
    rows: str = "sentences"
    m: int = 15
    p_t: float = 0.4
    multi_piece: str = "skip"
    seed: int = 0

    def __post_init__(self) -> None:
        from nas.config import check_fields

        check_fields([("n", self.n >= 0, "an integer >= 1 (0: no augmentation)"),
                      ("rows", self.rows in AUGMENT_ROWS, " or ".join(AUGMENT_ROWS))], self)
        self.settings()  # m, p_t and multi_piece checked now

    def settings(self) -> Any:
        from nas.augment import AugmentSettings

        return AugmentSettings(n=max(self.n, 1), m=self.m, p_t=self.p_t,
                               multi_piece=self.multi_piece, seed=self.seed)


@dataclass
class TransferText:
    """The ``transfer:`` block (module docstring). ``texts`` unset and ``augment.n`` 0:
    no transfer text."""

    texts: str | None = None
    text: str | None = None
    text_pair: str | None = None
    max_texts: int | None = None
    augment: TransferAugment = field(default_factory=TransferAugment)

    def __post_init__(self) -> None:
        from nas.config import cap_ok, check_fields

        check_fields([("max_texts", cap_ok(self.max_texts), "null (all) or an integer >= 1"),
                      ("texts", self.texts is not None or (
                          self.text is None and self.text_pair is None
                          and self.max_texts is None), "a file of texts")], self)

    @property
    def enabled(self) -> bool:
        """Whether the block adds any rows (a file, or augmentation)."""
        return self.texts is not None or self.augment.n > 0


def _fail(path: str, problem: str) -> DataError:
    return DataError(f"transfer.texts: {path}: {problem}")


def normalise_texts(texts: str, base_dir: Path | None) -> str:
    """``transfer.texts`` as an absolute path (as given, else relative to the current
    directory, else to the experiment file's folder); a missing file is refused here,
    before any stage."""
    from nas.data.files import _find

    found = _find(str(texts), base_dir)
    if found is None or not found.is_file():
        where = f"{Path.cwd()}" + (f" or {base_dir}" if base_dir is not None else "")
        raise _fail(str(texts), f"no such file (looked in {where}); give an existing text, "
                    "CSV, TSV or JSONL file")
    return str(found)


def _rows(settings: TransferText) -> Iterator[Any]:
    """The file's rows (:func:`nas.textfile.read_rows`), its one-line errors named after
    the ``transfer:`` keys instead of ``nas predict``'s flags."""
    from nas.textfile import read_rows

    path = Path(str(settings.texts))
    if not path.is_file():
        raise _fail(str(path), "no such file; give an existing text, CSV, TSV or JSONL file")
    with path.open("rb") as f:
        if b"\0" in f.read(_SNIFF):
            raise _fail(str(path), "a binary file, not text; give a UTF-8 text, CSV, TSV or "
                        "JSONL file")
    try:
        yield from read_rows(path, settings.text, settings.text_pair)
    except DataError as err:
        message = str(err).replace(f"--file {path}: ", "", 1)
        message = message.replace("--text-column", "transfer.text").replace(
            "--pair-column", "transfer.text_pair")
        raise _fail(str(path), message) from None


def check_transfer(settings: TransferText, task: str, kind: str | None = None) -> None:
    """Refuse a transfer block that cannot serve ``task``, in one line, before any stage:
    a task of another ``kind`` than single texts or pairs; a binary or empty file, a
    column it does not have, a first row without its text; for a pair task, a file
    without ``text_pair`` (``kind`` ``None``: not known yet, checked when read)."""
    if kind is not None:
        _check_kind(settings, task, kind)
    if settings.texts is None:
        return
    _check_pair(settings, None if kind is None else kind == "pair")
    if next(_rows(settings), None) is None:
        raise _fail(str(settings.texts), "no text in it; give a file with one text a line "
                    "(or a table with a text column)")


def _check_kind(settings: TransferText, task: str, kind: str) -> None:
    if kind not in ("single", "pair"):
        raise DataError(f"transfer: task {task} is a {kind} task; transfer text is for "
                        "sentence and sentence-pair classification; drop the transfer: block")


def _check_pair(settings: TransferText, pair: bool | None) -> None:
    if pair and settings.text_pair is None:
        raise _fail(str(settings.texts), "the task reads sentence pairs; name the second "
                    "text's column as transfer.text_pair (in a CSV, TSV or JSONL file)")
    if pair is False and settings.text_pair is not None:
        raise _fail(str(settings.texts), "the task reads single texts; drop "
                    "transfer.text_pair")


def load_transfer(settings: TransferText, like: Any, held_out: Sequence[Any]
                  ) -> tuple[Any, dict[str, Any]]:
    """``(data, info)``: the transfer rows as a :class:`~nas.data.TaskData` shaped like
    ``like`` (the task's training data: its labels, kind, metric), every label
    :data:`NO_LABEL`; texts that overlap a split of ``held_out`` (dev, the report split)
    are dropped before ``max_texts`` is counted. ``info``: the source and the counts the
    run log records."""
    from nas.data import TaskData
    from nas.data.overlap import NONE, overlapping

    _check_kind(settings, like.task, like.kind)
    _check_pair(settings, like.is_pair)
    guard = [t for d in held_out for t in (*d.texts_a, *(d.texts_b or ()))]
    key = hashlib.sha256("\0".join(guard).encode()).hexdigest()[:16]
    texts_a: list[str] = []
    texts_b: list[str] = []
    read = dropped = 0
    cap = settings.max_texts
    chunk: list[Any] = []

    def flush() -> int:
        """Keep the chunk's rows that share no phrase with the held-out texts."""
        flags = overlapping(guard, [r.text + (" " + r.text_pair if r.text_pair else "")
                                    for r in chunk], MIN_WORDS, train_key=key)
        for row, flag in zip(chunk, flags, strict=True):
            if flag == NONE and (cap is None or len(texts_a) < cap):
                texts_a.append(row.text)
                if like.is_pair:
                    texts_b.append(row.text_pair)
        chunk.clear()
        return sum(f != NONE for f in flags)

    for row in _rows(settings):
        read += 1
        chunk.append(row)
        if len(chunk) == 4096:
            dropped += flush()
            if cap is not None and len(texts_a) >= cap:
                break
    dropped += flush()
    if not texts_a:
        raise _fail(str(settings.texts), f"none of its {read} texts is left after dropping "
                    "those that overlap dev or the report split; give other text")
    digest = hashlib.sha256()
    for a, b in zip(texts_a, texts_b or [""] * len(texts_a), strict=True):
        digest.update(f"{a}\0{b}\0".encode())
    data = TaskData(task=like.task, split="transfer", kind=like.kind, texts_a=tuple(texts_a),
                    texts_b=tuple(texts_b) if like.is_pair else None,
                    labels=(NO_LABEL,) * len(texts_a), label_names=like.label_names,
                    metric=like.metric, fingerprint=f"transfer-{digest.hexdigest()[:16]}",
                    sources=(str(settings.texts),))
    info = {"file": str(settings.texts), "read": read, "overlap_dropped": dropped,
            "rows": len(texts_a)}
    return data, info


def sentence_rows(data: Any) -> Any:
    """The rows of ``data`` whose text is contained in no longer row (word for word), each
    once: a treebank's whole sentences without their phrases (SST-2's training split
    holds every phrase of each sentence). A row inside a longer one is inside a maximal
    one too, so only the maximal rows' word spans are kept to look rows up in (a few
    hundred per sentence). Pair tasks: every row."""
    if data.is_pair:
        return data
    words = [tuple(t.lower().split()) for t in data.texts_a]
    order = sorted(range(len(words)), key=lambda i: -len(words[i]))
    spans: set[int] = set()
    kept: list[int] = []
    seen: set[tuple[str, ...]] = set()
    for i in order:
        w = words[i]
        if not w or w in seen or hash(w) in spans:
            continue
        seen.add(w)
        kept.append(i)
        spans.update(hash(w[a:b]) for a in range(len(w)) for b in range(a + 1, len(w) + 1))
    return data.subset(sorted(kept), split=f"{data.split}-sentences")


def augmented_transfer(data: Any, settings: TransferAugment, teacher: str, max_seq_len: int,
                       held_out: Sequence[Any], progress: bool = False
                       ) -> tuple[Any, dict[str, Any]]:
    """``(rows, info)``: ``settings.n`` TinyBERT variants of each of ``data``'s
    ``settings.rows`` (:func:`nas.augment.augment_task` with ``teacher``'s candidates,
    cached), the originals left out, variants overlapping a split of ``held_out``
    dropped, every label :data:`NO_LABEL`."""
    from nas.augment import augment_task, load_augmented
    from nas.data import TaskData
    from nas.data.overlap import NONE, overlapping

    _check_kind(TransferText(), data.task, data.kind)
    source = sentence_rows(data) if settings.rows == "sentences" else data
    summary = augment_task(source, teacher=teacher,
                           config=settings.settings().config(max_seq_len), progress=progress)
    rows = load_augmented(summary["cache_file"], like=source)
    variants = [j for j in range(len(rows)) if j % (settings.n + 1)]  # originals first
    guard = [t for d in held_out for t in (*d.texts_a, *(d.texts_b or ()))]
    flags = overlapping(guard, [rows.texts_a[j] + (" " + rows.texts_b[j] if rows.texts_b
                                                   else "") for j in variants], MIN_WORDS)
    keep = [j for j, f in zip(variants, flags, strict=True) if f == NONE]
    texts_b = tuple(rows.texts_b[j] for j in keep) if rows.texts_b is not None else None
    out = TaskData(task=data.task, split="transfer-augmented", kind=data.kind,
                   texts_a=tuple(rows.texts_a[j] for j in keep), texts_b=texts_b,
                   labels=(NO_LABEL,) * len(keep), label_names=data.label_names,
                   metric=data.metric, fingerprint=f"{rows.fingerprint}-transfer",
                   sources=rows.sources)
    info = {"augmented_rows": len(source), "of": len(data), "rows_kind": settings.rows,
            "variants": len(variants), "overlap_dropped": len(variants) - len(keep),
            "rows": len(keep), "from_cache": summary["from_cache"]}
    return out, info


def with_transfer(data: Any, transfer: Any) -> Any:
    """The task's rows followed by the transfer rows, as one training set (its
    fingerprint names both)."""
    from dataclasses import replace

    joined = hashlib.sha256(f"{data.fingerprint}+{transfer.fingerprint}".encode())
    return replace(data, split=f"{data.split}+transfer",
                   texts_a=data.texts_a + transfer.texts_a,
                   texts_b=None if data.texts_b is None else data.texts_b + transfer.texts_b,
                   labels=data.labels + transfer.labels,
                   fingerprint=joined.hexdigest()[:16])


def transfer_kd_loss(logits: Any, teacher_logits: Any, labels: Any, temperature: float,
                     alpha: float) -> Any:
    """Knowledge distillation over a batch that may hold transfer rows: a labelled row's
    loss is :func:`nas.distill.losses.kd_loss`'s, (1−α)·CE + α·T²·KL; a transfer row
    (label :data:`NO_LABEL`) has only the teacher's distribution to learn, so its loss is
    the soft term T²·KL alone; the batch's loss is the mean over its rows. A batch of
    labelled rows only is exactly ``kd_loss``."""
    import torch.nn.functional as F

    from nas.distill.losses import kd_loss

    labelled = labels != NO_LABEL
    if bool(labelled.all()):
        return kd_loss(logits, teacher_logits, labels, temperature, alpha)
    log_s = F.log_softmax(logits / temperature, dim=-1)
    log_t = F.log_softmax(teacher_logits.detach().to(logits.dtype) / temperature, dim=-1)
    soft = temperature ** 2 * (log_t.exp() * (log_t - log_s)).sum(-1)  # (B,)
    per_row = soft.clone()
    if bool(labelled.any()):
        ce = F.cross_entropy(logits[labelled], labels[labelled], reduction="none")
        per_row[labelled] = (1.0 - alpha) * ce + alpha * soft[labelled]
    return per_row.mean()


__all__ = ["AUGMENT_ROWS", "NO_LABEL", "TransferAugment", "TransferText", "augmented_transfer",
           "check_transfer", "load_transfer", "normalise_texts", "sentence_rows",
           "transfer_kd_loss", "with_transfer"]
