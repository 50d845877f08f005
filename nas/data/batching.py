"""Batches of tokenised examples for training and for teacher forward passes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from nas.data.tasks import TaskData
from nas.tokenization import encode, encode_tagged

if TYPE_CHECKING:
    import torch


def token_lengths(tokenizer: Any, data: Any, max_seq_len: int) -> np.ndarray:
    """Tokens per example of a :class:`~nas.data.TaskData` (pairs joined), capped."""
    out: list[int] = []
    step = 4096
    for start in range(0, len(data), step):
        a = list(data.texts_a[start:start + step])
        b = list(data.texts_b[start:start + step]) if data.texts_b is not None else None
        enc = tokenizer(a, b, max_length=max_seq_len,
                        truncation=True if b is None else "longest_first")
        out.extend(len(ids) for ids in enc["input_ids"])
    return np.asarray(out, dtype=np.int64)


def batch_order(n: int, batch_size: int, shuffle: bool, seed: int = 0) -> list[np.ndarray]:
    """Index arrays of each batch; a seeded permutation when ``shuffle`` (no global RNG).

    Training uses ``seed + epoch`` so a resumed run sees the same order as an unbroken one.
    """
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n)
    return [order[i : i + batch_size] for i in range(0, n, batch_size)]


def length_grouped_order(lengths: Any, batch_size: int, seed: int = 0,
                         group: int = 50) -> list[np.ndarray]:
    """Shuffled batches of examples of similar length (seeded; no global RNG).

    A seeded permutation is cut into windows of ``group`` batches; each window is sorted
    by length and cut into batches, and the batches of all windows are shuffled. Batches
    padded to their longest example then carry little padding (SST-2 sentences: mean 13
    tokens, longest of 32 random ones 40), while every batch still mixes examples from
    across the data set. ``lengths``: one token count per example.
    """
    lengths = np.asarray(lengths)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(lengths))
    window = batch_size * group
    batches = []
    for start in range(0, len(order), window):
        part = order[start : start + window]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def iter_batches(
    data: TaskData,
    tokenizer: Any,
    batch_size: int = 32,
    max_length: int = 128,
    shuffle: bool = False,
    seed: int = 0,
    separate_b: bool = False,
    start_batch: int = 0,
    lengths: Any = None,
) -> Iterator[dict[str, torch.Tensor]]:
    """Yield tokenised batches of ``data`` with ``labels`` and ``index`` (example ids).

    Each batch holds the keys of :func:`nas.tokenization.encode` (``input_ids``,
    ``attention_mask``, ``token_type_ids`` and, for pairs with ``separate_b``,
    ``input_ids_a``/``input_ids_b``...), ``labels`` (B,) and ``index`` (B,), the
    positions in ``data`` (what the teacher-output cache is indexed by).
    ``start_batch`` skips the first batches (resuming inside an epoch). ``lengths`` (one
    token count per example) with ``shuffle`` groups examples of similar length
    (:func:`length_grouped_order`: less padding, same batches for the same seed).
    """
    import torch  # lazily: importing nas.data must stay cheap

    order = (length_grouped_order(lengths, batch_size, seed)
             if shuffle and lengths is not None else batch_order(len(data), batch_size,
                                                                 shuffle, seed))
    for idx in order[start_batch:]:
        texts_a = [data.texts_a[i] for i in idx]
        texts_b = [data.texts_b[i] for i in idx] if data.texts_b is not None else None
        if data.tokens is not None:  # tagging task (SNIPS): words given, tags per word
            tags = [data.tags[i] for i in idx] if data.tags is not None else None
            batch = encode_tagged(tokenizer, [data.tokens[i] for i in idx], tags, max_length)
        else:
            batch = encode(tokenizer, texts_a, texts_b, max_length=max_length,
                           separate_b=separate_b)
        batch["labels"] = torch.tensor([data.labels[i] for i in idx], dtype=torch.long)
        batch["index"] = torch.as_tensor(idx, dtype=torch.long)
        yield batch
