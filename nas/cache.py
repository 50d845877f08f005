"""The cache: its root folder, the keys of its entries, one writer per entry, weight files.

Every expensive step whose result depends only on its settings is cached under one root
(:func:`cache_root`) and found again by a key hashed from those settings: fine-tuned
teachers (:mod:`nas.teacher`), teacher outputs (:mod:`nas.distill.cache`), general
distillation and the supernet warm-up (docs/reference.md#efficientbert, #tinybert), augmented data,
latency tables and downloaded datasets. The keys must stay byte-identical across releases, or every
cached teacher would be fine-tuned again: :func:`json_key` is the one hash they all use.

Importing this module does not import torch: a cache hit must stay cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

log = logging.getLogger("nas.cache")

#: The environment variable that moves the cache.
CACHE_ENV = "NAS_CACHE_DIR"


def cache_root(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The cache directory: ``cache_dir``, else ``$NAS_CACHE_DIR``, else ~/.cache/nas-engine."""
    if cache_dir is None:
        cache_dir = os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "nas-engine"
    return Path(cache_dir).expanduser()


def json_key(obj: Any, digits: int = 16) -> str:
    """The first ``digits`` hex digits of the SHA-256 of ``obj`` as sorted-key JSON.

    Values JSON cannot write (paths, enums) are written as ``str(value)``. Dict order,
    and so the order in which settings were given, does not change the key.
    """
    text = json.dumps(obj, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:digits]


def settings_key(**parts: Any) -> str:
    """A 16-hex cache key of JSON-able settings: ``json_key(parts)``. Under a mixed
    training precision (:func:`nas.device.current_precision`: bf16, fp16) the precision
    is one of the parts, since what such a run trains is not what fp32 trains; fp32
    keys are what they always were. The device is not a part."""
    from nas.device import current_precision

    precision = current_precision()
    return json_key(parts if precision == "fp32" else {**parts, "precision": precision})


@contextlib.contextmanager
def exclusive(path: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (released when the process ends, however): one
    writer per cache entry; a second run of the same settings waits, then finds it."""
    import fcntl

    with open(path, "a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process running %s", what)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cached_entry(folder: Path, what: str, train: Callable[[], dict[str, Any]]
                 ) -> tuple[dict[str, Any], bool]:
    """``(record, trained)`` of the cache entry in ``folder``: its ``result.json``, or,
    under the entry's lock (two runs of the same settings train it once), ``train()``,
    which writes the entry's files and returns its record. ``result.json`` is written
    last and marks the entry complete; an interrupted ``train()`` resumes from the
    entry's ``checkpoint.safetensors``, which is removed afterwards."""
    from nas.checkpoint import atomic_write_json

    result = folder / "result.json"
    trained = False
    if not result.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        with exclusive(folder / ".lock", f"{what} {folder}"):
            if not result.is_file():
                atomic_write_json(result, train())
                (folder / "checkpoint.safetensors").unlink(missing_ok=True)
                trained = True
    if not trained:
        log.info("%s from the cache (%s)", what, folder)
    return {**json.loads(result.read_text()), "from_cache": not trained}, trained


def save_weights(module: torch.nn.Module, path: Path) -> None:
    """A module's tensors as safetensors, written atomically."""
    from safetensors.torch import save_file

    from nas.checkpoint import atomic_target

    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    with atomic_target(path) as tmp:
        save_file(state, str(tmp))


def load_weights(module: torch.nn.Module, path: Path) -> None:
    """Load the tensors :func:`save_weights` wrote into ``module`` (strict: every name)."""
    from safetensors.torch import load_file

    module.load_state_dict(load_file(str(path)))


def weights_fingerprint(module: torch.nn.Module) -> str:
    """A 16-hex hash of a module's tensors (names, shapes, dtypes, values): the key part
    that tells two teachers held in memory apart (a folder has
    :func:`nas.teacher.teacher_identity`)."""
    import torch

    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        t = tensor.detach().cpu().contiguous()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        h.update(t.view(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:16]


# ---------------------------------------------------------------------------
# listing and clearing (``nas cache list|clear``)
# ---------------------------------------------------------------------------


def cache_kinds(root: Path) -> list[str]:
    """The kinds of entry in the cache: the root's folders (teachers, outputs, augment,
    general, warmup, mixedvocab, latency, overlap, …), sorted; none when it is missing."""
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and not p.is_symlink())


def _entries(folder: Path) -> list[Path]:
    return sorted(folder.iterdir()) if folder.is_dir() else []


def _walk(path: Path) -> Iterator[os.stat_result]:
    """The stats of ``path`` and, for a folder, of everything under it (links not followed)."""
    yield path.lstat()
    if path.is_dir() and not path.is_symlink():
        for dirpath, dirnames, filenames in os.walk(path):
            for name in dirnames + filenames:
                with contextlib.suppress(OSError):  # removed meanwhile
                    yield os.lstat(os.path.join(dirpath, name))


def entry_stats(path: Path) -> tuple[int, float]:
    """``(bytes, newest modification time)`` of a cache entry, file or folder."""
    stats = list(_walk(path))
    return sum(s.st_size for s in stats), max(s.st_mtime for s in stats)


def cache_usage(root: Path) -> list[dict[str, Any]]:
    """One row per kind: ``kind``, ``entries`` (the folder's items), ``bytes``, ``newest``
    (modification time, seconds since the epoch; ``None`` for an empty kind)."""
    rows = []
    for kind in cache_kinds(root):
        stats = [entry_stats(p) for p in _entries(root / kind)]
        rows.append({"kind": kind, "entries": len(stats), "bytes": sum(s for s, _ in stats),
                     "newest": max((t for _, t in stats), default=None)})
    return rows


def _busy(entry: Path) -> bool:
    """Whether another process holds the one-writer lock (:func:`exclusive`) of ``entry``:
    removing it under that writer would let a second writer start beside it."""
    import fcntl

    lock = entry / ".lock" if entry.is_dir() and not entry.is_symlink() else entry
    if ".lock" not in (lock.name, lock.suffix) or not lock.is_file():
        return False
    with open(lock, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def clear_cache(root: Path, kind: str | None = None, older_than_days: float | None = None,
                dry_run: bool = False) -> dict[str, Any]:
    """Remove the entries of one kind (``None``: every kind), only those not modified for
    ``older_than_days`` days when given; returns ``removed`` (paths), ``bytes`` and
    ``busy`` (entries another process is writing, left alone).

    Nothing outside ``root`` is ever removed: a kind must be one of :func:`cache_kinds`
    (folders, not links), a link inside it is unlinked without following it, and every
    other entry must resolve inside the root.
    """
    import shutil
    import time

    from nas.errors import NasError

    kinds = cache_kinds(root)
    if kind is not None and kind not in kinds:
        raise NasError(f"nas cache clear: unknown kind {kind!r}; the cache {root} holds "
                       f"{', '.join(kinds) or 'no kind (it is empty)'}")
    real_root = root.resolve()
    cutoff = None if older_than_days is None else time.time() - older_than_days * 86400
    removed: list[str] = []
    busy: list[str] = []
    total = 0
    for name in [kind] if kind is not None else kinds:
        for entry in _entries(root / name):
            size, newest = entry_stats(entry)
            if cutoff is not None and newest >= cutoff:
                continue
            if not entry.is_symlink() and not entry.resolve().is_relative_to(real_root):
                raise NasError(f"{entry} resolves outside the cache {root}; not removed "
                               "(remove it by hand)")
            if _busy(entry):
                busy.append(str(entry))
                continue
            if not dry_run:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
            removed.append(str(entry))
            total += size
    return {"root": str(root), "removed": removed, "bytes": total, "busy": busy,
            "dry_run": dry_run}


__all__ = ["CACHE_ENV", "cache_kinds", "cache_root", "cache_usage", "cached_entry",
           "clear_cache", "entry_stats", "exclusive", "json_key", "load_weights",
           "save_weights", "settings_key", "weights_fingerprint"]
