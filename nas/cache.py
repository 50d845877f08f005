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

#: The file the engine writes at the cache root when it first writes or reads an entry there:
#: ``nas cache clear`` acts only on a folder that has it (or that :func:`check_cache` accepts
#: as an older cache), so a mistyped ``--cache-dir`` never loses its contents.
MARKER = ".nas-engine-cache"

#: The kinds (top-level folders) the engine's own steps write. An unmarked folder whose
#: folders are all of these kinds is a cache from before the marker, and gets it.
KNOWN_KINDS = frozenset({
    "augment", "block-activations", "datasets", "general", "importance", "latency",
    "mixedvocab", "outputs", "overlap", "own-teachers", "teacher-answers", "teacher-costs",
    "teacher_states", "teachers", "warmup"})

#: The lock file readers hold (shared) beside the writers' ``.lock``: one file per role, so
#: a process that reads an entry and later rewrites it never waits for itself.
READERS = ".readers"


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

    mark_cache_of(path)
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
    hold_shared(folder)  # the caller reads the entry's files next
    record = {k: _relocated(v, folder) for k, v in read_record(result).items()}
    return {**record, "from_cache": not trained}, trained


def read_record(path: Path) -> dict[str, Any]:
    """A cache entry's JSON record; a file that is no JSON object (cut, overwritten,
    not UTF-8) is a :class:`~nas.errors.NasError` naming it and the command that clears it."""
    from nas.errors import NasError

    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise NasError(corrupt_message(path, f"not a JSON record ({type(err).__name__})")
                       ) from None
    if not isinstance(record, dict):
        raise NasError(corrupt_message(path, "not a JSON record (no object)"))
    return record


def _relocated(value: Any, folder: Path) -> Any:
    """``value``, or, when it is a path into this entry as it was named before the cache
    moved (``/old/cache/<kind>/<entry>/file``, gone now), the same file in ``folder``: a
    record written with absolute paths keeps working in a moved cache."""
    if not isinstance(value, str) or not value.startswith("/") or Path(value).exists():
        return value
    anchor = f"/{folder.parent.name}/{folder.name}/"
    if anchor not in value:
        return value
    moved = folder / value.split(anchor, 1)[1]
    return str(moved) if moved.exists() else value


def _kind_of(path: Path) -> str | None:
    """The cache kind ``path`` lies in: the folder below the nearest ancestor with the
    :data:`MARKER`, else the nearest ancestor named as a known kind; ``None`` outside a
    cache."""
    parents = [path, *path.parents]
    for child, parent in zip(parents, parents[1:], strict=False):
        if (parent / MARKER).is_file():
            return child.name
    return next((p.name for p in parents[1:] if p.name in KNOWN_KINDS), None)


def clear_hint(path: Path, otherwise: str = "delete it and run again") -> str:
    """How to get rid of a broken or stale cache file: ``nas cache clear KIND`` (it is
    computed again on the next run) when ``path`` is in a cache, else ``otherwise``."""
    kind = _kind_of(Path(path))
    return (f"clear it with `nas cache clear {kind}` and run again (it is computed again)"
            if kind else otherwise)


def moved_hint(path: Path) -> str:
    """For a missing folder that a record named inside a cache: why it is gone and the fix
    (``""`` for a path outside any cache), to append to a "does not exist" message."""
    kind = _kind_of(Path(path))
    if kind is None:
        return ""
    return (f" (it was in the cache's {kind!r} folder: the cache was moved or the entry "
            f"cleared; run again to rebuild it, or set ${CACHE_ENV} to where the cache is now)")


def corrupt_message(path: Path, what: str) -> str:
    """The one line for a cache file that does not load: the file, why, and the fix."""
    return f"{path}: a cache file that does not load ({what}); {clear_hint(path)}"


# ---------------------------------------------------------------------------
# the marker and the readers' locks
# ---------------------------------------------------------------------------


def _root_of(path: Path) -> Path | None:
    """The cache root ``path`` lies in: ``$NAS_CACHE_DIR`` (or the default) when under it,
    else the folder above the nearest ancestor named as a known kind; ``None`` otherwise."""
    path = Path(path).absolute()
    default = cache_root().absolute()
    if path.is_relative_to(default) and path != default:
        return default
    return next((p.parent for p in path.parents if p.name in KNOWN_KINDS), None)


def mark_cache(root: Path) -> None:
    """Write the :data:`MARKER` at ``root`` (an existing folder) if it lacks it; a folder
    that cannot be written (a read-only shared cache) stays as it is."""
    marker = Path(root) / MARKER
    if marker.is_file() or not Path(root).is_dir():
        return
    with contextlib.suppress(OSError):
        marker.write_text("This folder is a nas-engine cache: `nas cache list|clear` act "
                          "on it.\n")


def mark_cache_of(path: Path) -> None:
    """Mark the cache that ``path`` (an entry or its lock, being written or read) lies in."""
    root = _root_of(path)
    if root is not None:
        mark_cache(root)


#: The readers' locks this process holds: lock file → its open file (``LOCK_SH``).
_held: dict[str, Any] = {}


def _readers_lock(entry: Path) -> Path:
    """The readers' lock of an entry: ``ENTRY/.readers`` for a folder, ``.NAME.readers``
    beside a file (as :func:`nas.latency.space_predictor` puts ``.NAME.lock``)."""
    return entry / READERS if entry.is_dir() else entry.with_name(f".{entry.name}{READERS}")


def hold_shared(entry: Path) -> None:
    """Hold a shared lock on the cache entry ``entry`` (a folder or a file) while this run
    reads it: ``nas cache clear`` leaves an entry that any process holds alone. Held until
    :func:`read_scope` ends (the recipe skeleton opens one per run) or the process exits;
    taking it twice in one process holds it once. A read-only cache is read unlocked."""
    import fcntl

    entry = Path(entry)
    if not entry.exists() or _root_of(entry) is None:  # a file of the user's own: unlocked
        return
    lock = _readers_lock(entry)
    key = str(lock.absolute())
    if key in _held:
        return
    mark_cache_of(entry)
    try:
        f = open(lock, "a+")  # noqa: SIM115 (held open past this call: that is the lock)
    except OSError:
        return
    fcntl.flock(f, fcntl.LOCK_SH)  # waits only while a clear is removing this very entry
    if not lock.exists():  # it was: the caller's read fails with its own message
        f.close()
        return
    _held[key] = f


@contextlib.contextmanager
def read_scope() -> Iterator[None]:
    """Release, at its end, the readers' locks (:func:`hold_shared`) taken inside it."""
    before = set(_held)
    try:
        yield
    finally:
        for key in set(_held) - before:
            _held.pop(key).close()


def save_weights(module: torch.nn.Module, path: Path) -> None:
    """A module's tensors as safetensors, written atomically (canonical header: the same
    tensors give the same bytes)."""
    from nas.checkpoint import save_safetensors

    save_safetensors({k: v.detach().contiguous() for k, v in module.state_dict().items()},
                     path)


def load_tensors(path: Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, on ``device``; one that is none (cut,
    overwritten) is a :class:`~nas.errors.NasError` naming it and the fix, not
    safetensors' bare error."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    from nas.errors import NasError

    try:
        return load_file(str(path), device=device)
    except (SafetensorError, UnicodeDecodeError) as err:
        raise NasError(corrupt_message(Path(path), " ".join(str(err).split())[:120])
                       ) from None


def load_weights(module: torch.nn.Module, path: Path) -> None:
    """Load the tensors :func:`save_weights` wrote into ``module`` (strict: every name)."""
    module.load_state_dict(load_tensors(path))


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


def check_cache(root: Path, command: str) -> None:
    """Refuse, in one line, a folder the engine does not recognise as its cache: one
    without the :data:`MARKER` that holds anything but folders of :data:`KNOWN_KINDS`
    (hidden files and links aside; a hidden folder such as ``.git`` is no kind). A cache from before
    the marker (known kinds only) is accepted and marked; a missing or empty folder is an
    empty cache."""
    from nas.errors import NasError

    if not root.is_dir() or (root / MARKER).is_file():
        if root.exists() and not root.is_dir():
            raise NasError(f"{command}: {root} is a file, not a cache folder; pass the cache "
                           f"folder with --cache-dir (or ${CACHE_ENV})")
        return
    items = [p for p in root.iterdir() if not p.is_symlink()  # links: never followed
             and (p.is_dir() or not p.name.startswith("."))]
    strange = sorted(p.name for p in items if not p.is_dir() or p.name not in KNOWN_KINDS)
    if strange:
        raise NasError(
            f"{command}: {root} is not a nas-engine cache (no {MARKER} file, and it holds "
            f"{strange[0]!r}, which the engine never writes); nothing touched: pass the "
            f"cache folder with --cache-dir (or ${CACHE_ENV})")
    if items:
        mark_cache(root)


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
    (modification time, seconds since the epoch; ``None`` for an empty kind). A folder that
    is not a cache (:func:`check_cache`) is refused."""
    check_cache(root, "nas cache list")
    rows = []
    for kind in cache_kinds(root):
        stats = [entry_stats(p) for p in _entries(root / kind)]
        rows.append({"kind": kind, "entries": len(stats), "bytes": sum(s for s, _ in stats),
                     "newest": max((t for _, t in stats), default=None)})
    return rows


def _locks(entry: Path) -> list[Path]:
    """The lock files that guard ``entry``: a folder's ``.lock`` (its writer) and
    ``.readers`` (its readers); beside a file, ``.NAME.lock`` and ``.NAME.readers``; a
    lock file guards itself."""
    if entry.is_dir() and not entry.is_symlink():
        candidates = [entry / ".lock", entry / READERS]
    elif entry.suffix in (".lock", READERS) or entry.name == ".lock":
        candidates = [entry]
    else:
        candidates = [entry.with_name(f".{entry.name}{suffix}") for suffix in (".lock", READERS)]
    return [lock for lock in candidates if lock.is_file() and not lock.is_symlink()]


@contextlib.contextmanager
def _claimed(entry: Path, removing: bool) -> Iterator[bool]:
    """Whether no one holds ``entry`` (its writer's or its readers' lock; a lock this
    process holds through another open file counts too): when free, the locks stay held
    exclusively for the body, and a folder being removed gets its readers' lock first, so
    that no reader starts on what is being removed (it waits, then finds it gone)."""
    import fcntl

    locks = _locks(entry)
    if removing and entry.is_dir() and not entry.is_symlink() and entry / READERS not in locks:
        locks.append(entry / READERS)
    with contextlib.ExitStack() as stack:
        for lock in locks:
            f = stack.enter_context(open(lock, "a"))
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
        yield True


def clear_cache(root: Path, kind: str | None = None, older_than_days: float | None = None,
                dry_run: bool = False) -> dict[str, Any]:
    """Remove the entries of one kind (``None``: every kind), only those not modified for
    ``older_than_days`` days when given; returns ``removed`` (paths), ``bytes`` and
    ``busy`` (entries a process is writing or reading, left alone). A folder that is not
    a cache (:func:`check_cache`) is refused before anything is removed.

    Nothing outside ``root`` is ever removed: a kind must be one of :func:`cache_kinds`
    (folders, not links), a link inside it is unlinked without following it, and every
    other entry must resolve inside the root.
    """
    import shutil
    import time

    from nas.errors import NasError

    check_cache(root, "nas cache clear")
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
            with _claimed(entry, removing=not dry_run) as free:
                if not free:
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


__all__ = ["CACHE_ENV", "KNOWN_KINDS", "MARKER", "cache_kinds", "cache_root", "cache_usage",
           "cached_entry", "check_cache", "clear_cache", "clear_hint", "corrupt_message",
           "entry_stats", "exclusive", "hold_shared", "json_key", "load_tensors", "load_weights",
           "mark_cache", "moved_hint", "read_record", "read_scope", "save_weights", "settings_key",
           "weights_fingerprint"]
