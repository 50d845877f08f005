"""The cache: its root folder, the keys of its entries, one writer per entry, weight files.

Every expensive step whose result depends only on its settings is cached under one root
(:func:`cache_root`) and found again by a key hashed from those settings: fine-tuned
teachers (:mod:`nas.teacher`), teacher outputs (:mod:`nas.distill.cache`), general
distillation and the supernet warm-up (SPEC §3, §5), augmented data, latency tables and
downloaded datasets. The keys must stay byte-identical across releases, or every cached
teacher would be fine-tuned again: :func:`json_key` is the one hash they all use.

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
    """A 16-hex cache key of JSON-able settings: ``json_key(parts)``."""
    return json_key(parts)


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


__all__ = ["CACHE_ENV", "cache_root", "cached_entry", "exclusive", "json_key", "load_weights",
           "save_weights", "settings_key"]
