"""Transfer text: unlabeled text that the teacher labels, added to a final retrain.

A distilled student learns from the teacher's answer distribution, which needs no human
label, so text without labels teaches it as well as the task's own rows do, and far more
of it is at hand: TinyBERT's task distillation augments the training set for the same
reason (Jiao et al. 2020, §3.1), and DistilBERT / Patient-KD-style students gain most
from more transfer data. The experiment's top-level block::

    transfer:
      texts: FILE        # a text file (one text a line), or CSV / TSV / JSONL
      text: COLUMN       # a table's text column (default: ``text``, else its only column)
      text_pair: COLUMN  # a pair task's second text (MRPC): required there
      max_texts: N       # the first N texts kept after the overlap check (default: all)

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
from dataclasses import dataclass
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


@dataclass
class TransferText:
    """The ``transfer:`` block (module docstring). ``texts`` unset: no transfer text."""

    texts: str | None = None
    text: str | None = None
    text_pair: str | None = None
    max_texts: int | None = None

    def __post_init__(self) -> None:
        from nas.config import cap_ok, check_fields

        check_fields([("max_texts", cap_ok(self.max_texts), "null (all) or an integer >= 1"),
                      ("texts", self.texts is not None or (
                          self.text is None and self.text_pair is None
                          and self.max_texts is None), "a file of texts")], self)

    @property
    def enabled(self) -> bool:
        return self.texts is not None


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


def check_transfer(settings: TransferText, pair: bool | None = None) -> None:
    """Refuse a transfer file that cannot be read, in one line, before any stage: a
    binary or empty file, a column it does not have, a first row without its text; for
    a ``pair`` task, a table without ``text_pair`` (``None``: not known yet)."""
    if not settings.enabled:
        return
    _check_pair(settings, pair)
    if next(_rows(settings), None) is None:
        raise _fail(str(settings.texts), "no text in it; give a file with one text a line "
                    "(or a table with a text column)")


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

    if like.kind not in ("single", "pair"):
        raise _fail(str(settings.texts), f"task {like.task} is a {like.kind} task; transfer "
                    "text is for sentence and sentence-pair classification")
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


__all__ = ["NO_LABEL", "TransferText", "check_transfer", "load_transfer", "normalise_texts",
           "transfer_kd_loss", "with_transfer"]
