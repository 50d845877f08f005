"""Run directories: everything a long run produces, in one folder a later command reads.

Layout::

    RUN/config.yaml        the configuration snapshot the run was started with
    RUN/.lock              the writer's process id and host while a run is working in it
    RUN/log.jsonl          one JSON line per stage or epoch (appended, never rewritten)
    RUN/checkpoint.safetensors  the last checkpoint (nas.checkpoint format, atomic)
    RUN/*.json             results: derived architecture, metrics...
    RUN/export/            the standalone model

A run interrupted at any point loses nothing that was finished: checkpoints and
results are written to a temporary file and renamed (:mod:`nas.checkpoint`).

**One writer per folder.** ``RunDir(path, config)`` (a run starting or resuming) takes
``RUN/.lock``, a JSON file with the process id, the host and the start time, and
releases it on :meth:`RunDir.close`, at the end of a ``with`` block or at exit. A lock
whose process is gone on the same host is stale: it is reported in one line and taken
over. A lock held by a live process, or by a process on another host (whose liveness
cannot be checked from here), refuses the second writer; ``break_lock=True``
(``--break-lock``) takes a lock from another host over. ``RunDir(path)`` alone only
reads and takes no lock (``nas report``, ``nas evaluate``). Processes that write
disjoint files of one run (one random-baseline sample each) name themselves with
``writer="random3"``: each named writer has a lock of its own (``RUN/.lock-random3``),
so they share the folder while two processes doing the same sample still cannot.

**Starting, resuming, re-running.** ``resume=True`` on a folder with no run is an
error (it never quietly starts afresh). A folder whose run finished no stage yet (it
failed in its first stage, e.g. on a task-name typo) is not worth protecting: a
re-run, with or without ``resume``, replaces its configuration snapshot.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import re
import socket
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import yaml

from nas.checkpoint import (
    atomic_write_json,
    atomic_write_text,
    load_state,
)
from nas.errors import NasError

log = logging.getLogger("nas.rundir")

CHECKPOINT_SUFFIX = ".safetensors"
SNAPSHOT = "config.yaml"
LOG_FILE = "log.jsonl"
LOCK_FILE = ".lock"
START_STAGE = "start"  # the log line a run writes when it starts or resumes


def run_folder(given: str | os.PathLike[str] | None, default: str | Path,
               flag: str = "--run-dir") -> Path:
    """The run folder to use: ``given``, or ``default`` (``runs/<name>``) when none was
    given. An empty or blank ``given`` is refused: ``Path("")`` is the current folder,
    and a falsy test would quietly write into ``runs/<name>`` instead."""
    if given is None:
        return Path(default)
    if not str(given).strip():
        raise NasError(f"{flag} {str(given)!r}: empty; name a folder (e.g. {flag} "
                       f"{default}) or leave {flag} out for {default}")
    return Path(given)


class RunLockError(NasError):
    """Another process is writing to the run directory."""


# ---------------------------------------------------------------------------- locking


def _process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), or ``None`` if unknown.

    Linux only (``/proc``); elsewhere the pid alone decides whether a lock is live.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text()
                    .splitlines() if line.startswith("btime "))
        ticks = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: start time in ticks
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _process_alive(pid: int, since: Any) -> bool:
    """Whether the process that took a lock at time ``since`` is still running.

    A pid can be reused once its process is gone: a live process with that pid that
    started after the lock was taken is another process.
    """
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        pass
    except (OSError, OverflowError):  # no such pid can exist
        return False
    started = _process_start_time(pid)
    if started is None or not isinstance(since, int | float) or isinstance(since, bool):
        return True  # cannot tell: a live pid keeps the lock
    return started <= since + 1.0


class _Held:
    """A lock this process holds (counted: one process may open a run folder twice)."""

    def __init__(self, path: Path, token: str) -> None:
        self.path = path
        self.token = token
        self.count = 1
        self.owner = os.getpid()  # a forked child must not release its parent's lock


_HELD: dict[Path, _Held] = {}


def _read_lock(path: Path) -> dict[str, Any] | None:
    """The lock's content; ``None`` if it vanished; ``{}`` if it is unreadable."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _describe(owner: dict[str, Any]) -> str:
    return f"process {owner.get('pid', '?')} on {owner.get('host', '?')}"


def _acquire(lock: Path, break_lock: bool) -> None:
    """Take the lock file ``lock`` of a run folder for this process (module docstring)."""
    run = lock.parent
    path = lock.resolve()
    held = _HELD.get(path)
    if held is not None and held.owner == os.getpid():
        held.count += 1
        return
    host = socket.gethostname()
    token = uuid.uuid4().hex
    record = {"pid": os.getpid(), "host": host, "started": time.time(), "token": token}
    for _ in range(20):  # a few rounds: another process may be taking or freeing it
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as f:
                json.dump(record, f)
            _HELD[path] = _Held(path, token)
            return
        owner = _read_lock(path)
        if owner is None:
            continue  # released meanwhile: try again
        if not owner:  # a writer may be filling it in; a crash mid-write leaves it broken
            time.sleep(0.05)
            if _read_lock(path) != {}:
                continue
            _take_over(path, owner, f"{path}: unreadable lock file, taken over")
            continue
        refusal = _lock_refusal(run, owner, break_lock)
        if refusal is not None:
            raise refusal
        if owner.get("host") == host:
            _take_over(path, owner, f"{run}: stale lock of {_describe(owner)} (the process "
                                    "is gone), taken over")
            continue
        _take_over(path, owner, f"{run}: lock of {_describe(owner)} broken (--break-lock)")
    raise RunLockError(f"{path}: cannot take the lock (other processes keep taking it); "
                       "try again")


def _lock_refusal(run: Path, owner: dict[str, Any], break_lock: bool) -> RunLockError | None:
    """Why the lock ``owner`` holds on ``run`` keeps this process out (``None``: it may be
    taken over): a live process on this host, or one on another host without
    ``break_lock``."""
    if owner.get("host") == socket.gethostname():
        pid = owner.get("pid")
        # our own pid in a lock we do not hold: a gone process whose pid we reuse
        if (isinstance(pid, int) and pid != os.getpid()
                and _process_alive(pid, owner.get("started"))):
            return RunLockError(f"{run} is in use by {_describe(owner)}; wait for it or "
                                "stop it")
        return None
    if not break_lock:
        return RunLockError(f"{run} is locked by {_describe(owner)}, which cannot be "
                            "checked from here; if that run is over, pass --break-lock")
    return None


def _take_over(path: Path, seen: dict[str, Any], message: str) -> None:
    """Remove the lock ``seen`` if it is still the one in place (then retry the create)."""
    if _read_lock(path) != seen:
        return  # someone else replaced it meanwhile: look again
    warnings.warn(message, stacklevel=3)
    path.unlink(missing_ok=True)


def _release(path: Path) -> None:
    held = _HELD.get(path)
    if held is None or held.owner != os.getpid():
        return
    held.count -= 1
    if held.count > 0:
        return
    del _HELD[path]
    current = _read_lock(path)
    if current and current.get("token") == held.token:
        path.unlink(missing_ok=True)


@atexit.register
def _release_all() -> None:
    for path, held in list(_HELD.items()):
        if held.owner == os.getpid():
            held.count = 1
            _release(path)


# ---------------------------------------------------------------------------- the folder


class RunDir:
    """A run's folder.

    ``RunDir(path, config)`` starts or resumes a run: it takes the folder's lock, then
    writes the configuration snapshot or checks it against the one already there.
    ``resume=True`` requires a run in the folder; ``break_lock=True`` takes over a lock
    left by another host. Use it as a context manager, or call :meth:`close`, to release
    the lock (it is released at exit otherwise). ``RunDir(path)`` opens a finished or
    running run for reading only.
    """

    def __init__(self, path: str | Path, config: dict[str, Any] | None = None,
                 resume: bool = False, break_lock: bool = False, writer: str = "") -> None:
        self.path = Path(path)
        self._lock: Path | None = None
        if writer and not re.fullmatch(r"[A-Za-z0-9_-]+", writer):
            raise ValueError(f"writer must be letters, digits, _ or -, got {writer!r}")
        lock_name = f"{LOCK_FILE}-{writer}" if writer else LOCK_FILE
        snapshot = self.path / SNAPSHOT
        if config is None:
            if not snapshot.is_file():
                raise NasError(f"{self.path} is not a run directory (no {SNAPSHOT})")
            return
        _check_place(self.path, resume)
        self.path.mkdir(parents=True, exist_ok=True)
        _acquire(self.path / lock_name, break_lock)
        self._lock = (self.path / lock_name).resolve()
        try:
            self._open(config, resume)
        except BaseException:
            self.close()
            raise
        self.log(START_STAGE, resume=resume, pid=os.getpid(), host=socket.gethostname())

    def _open(self, config: dict[str, Any], resume: bool) -> None:
        snapshot = self.path / SNAPSHOT
        if not snapshot.is_file():
            atomic_write_text(snapshot, yaml.safe_dump(config, sort_keys=False))
            return
        finished = self.finished_any_stage()
        if finished and resume:
            self._check_checkpoints()
        if not finished:
            if _read_snapshot(snapshot) != config:
                log.warning("%s: the run there finished no stage; starting it again with the "
                            "given configuration", self.path)
                atomic_write_text(snapshot, yaml.safe_dump(config, sort_keys=False))
            return
        refusal = _snapshot_refusal(self.path, config, resume)
        if refusal is not None:
            raise refusal

    def finished_any_stage(self) -> bool:
        """Whether the run in this folder finished a stage: a log line other than a start
        marker, a result file or a checkpoint. A run that did not can be started again."""
        if any(row.get("stage") != START_STAGE for row in self.read_log()):
            return True
        for p in self.path.iterdir():
            if p.name == SNAPSHOT or p.name.startswith("."):
                continue  # the snapshot, the lock, temporary files
            if p.suffix in (".json", CHECKPOINT_SUFFIX) or p.is_dir():
                return True
        return False

    def _check_checkpoints(self) -> None:
        """Refuse unreadable checkpoints before any stage runs (a resume would otherwise fail
        at them only after the earlier stages)."""
        from safetensors import safe_open

        for p in sorted(self.path.glob("*" + CHECKPOINT_SUFFIX)):
            try:
                with safe_open(str(p), framework="pt") as f:
                    is_state = "nas_state" in (f.metadata() or {})
            except Exception:  # any failure: load_state below names the problem
                is_state = True
            if is_state:  # plain weight files (no training state) are not checkpoints
                load_state(p)

    # ------------------------------------------------------------------ lock
    def close(self) -> None:
        """Release the folder's lock (idempotent)."""
        if self._lock is not None:
            _release(self._lock)
            self._lock = None

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ files
    @property
    def config(self) -> dict[str, Any]:
        path = self.path / SNAPSHOT
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise NasError(f"{path}: broken YAML ({' '.join(str(err).split())})") from None
        if not isinstance(data, dict):
            raise NasError(f"{path}: expected a mapping of settings")
        return data

    def log(self, stage: str, **values: Any) -> None:
        line = json.dumps({"time": time.time(), "stage": stage, **values}, default=str)
        path = self.path / LOG_FILE
        with open(path, "a+b") as f:
            f.seek(0, os.SEEK_END)
            if f.tell() and (f.seek(-1, os.SEEK_END), f.read(1))[1] != b"\n":
                f.write(b"\n")  # a killed writer left a partial line: keep it on its own
            f.write((line + "\n").encode())

    def read_log(self, stage: str | None = None) -> list[dict[str, Any]]:
        """The log's rows (of ``stage`` only, if given).

        A cut-off line (a run killed while writing it) is skipped with a warning; any
        other broken line is an error naming the file and line.
        """
        path = self.path / LOG_FILE
        if not path.is_file():
            return []
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise NasError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start}); the "
                           "log is damaged") from None
        lines = text.split("\n")
        rows = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                if not isinstance(row, dict):
                    raise ValueError("not a JSON object")
            except ValueError:
                # A run killed while writing leaves a line without its end (a later writer
                # starts a new line after it): skip it. A whole line that does not parse
                # means the log was damaged otherwise.
                if not line.rstrip().endswith("}"):
                    warnings.warn(f"{path}:{number}: cut-off line skipped (a run stopped "
                                  "while writing it)", stacklevel=2)
                    continue
                raise NasError(f"{path}:{number}: not a JSON object; the log is damaged") \
                    from None
            rows.append(row)
        return [r for r in rows if stage is None or r.get("stage") == stage]

    def save_json(self, name: str, data: Any) -> Path:
        path = self.path / name
        atomic_write_json(path, data, default=str)
        return path

    def load_json(self, name: str) -> Any | None:
        """The JSON file ``name`` of the run, ``None`` if absent; a damaged one is an error."""
        path = self.path / name
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except UnicodeDecodeError:
            raise NasError(f"{path}: not UTF-8 text; the file is damaged (delete it and "
                           "run the stage again with --resume)") from None
        except json.JSONDecodeError as err:
            raise NasError(f"{path}: broken JSON at line {err.lineno} column {err.colno}: "
                           f"{err.msg} (delete it and run the stage again with --resume)") \
                from None

    def checkpoint_path(self, name: str = "checkpoint") -> Path:
        """``RUN/<name>.safetensors``: where a stage's :class:`nas.train.Trainer` keeps its
        checkpoint (:mod:`nas.checkpoint` format)."""
        return self.path / (name.removesuffix(CHECKPOINT_SUFFIX) + CHECKPOINT_SUFFIX)

    def remove_checkpoint(self, name: str = "checkpoint") -> None:
        self.checkpoint_path(name).unlink(missing_ok=True)


def _changed_keys(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """The dotted keys whose values differ between two configuration snapshots."""
    keys = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, "<absent>"), new.get(key, "<absent>")
        if isinstance(a, dict) and isinstance(b, dict):
            keys += _changed_keys(a, b, f"{prefix}{key}.")
        elif a != b:
            keys.append(f"{prefix}{key}: {a!r} -> {b!r}")
    return keys


def _read_snapshot(snapshot: Path) -> Any:
    """A run folder's configuration snapshot (``None`` when it is unreadable: replaceable
    only if the run finished no stage)."""
    try:
        return yaml.safe_load(snapshot.read_text())
    except yaml.YAMLError:
        return None


def _snapshot_refusal(path: Path, config: dict[str, Any], resume: bool) -> NasError | None:
    """Why a run that finished a stage in ``path`` cannot be opened with ``config``:
    without ``resume`` it is another run's folder, with it the configuration must be the
    one the run started with."""
    if not resume:
        return NasError(f"run directory {path} already holds a run; pass --resume to "
                        "continue it or choose another --run-dir")
    snapshot = path / SNAPSHOT
    old = _read_snapshot(snapshot)
    if old == config:
        return None
    changed = ", ".join(_changed_keys(old if isinstance(old, dict) else {}, config)[:3])
    return NasError(f"{snapshot}: the configuration differs from the one the run was "
                    f"started with ({changed}); resume with the same file and version, or "
                    "start a new run")


def _check_place(path: Path, resume: bool) -> None:
    """``path`` can hold the run: a run to resume is there, it is no file, and the
    nearest folder that exists above it (where it will be made) is one this process can
    write to."""
    if resume and not (path / SNAPSHOT).is_file():
        raise NasError(f"{path} holds no run to resume; drop --resume to start one")
    if path.exists() and not path.is_dir():
        raise NasError(f"{path}: is a file, not a run directory; choose another --run-dir")
    above = path.absolute()
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise NasError(f"{path}: {above} is a file, not a folder; choose another --run-dir")
    if not os.access(above, os.W_OK | os.X_OK):
        raise NasError(f"{path}: the folder {above} is not writable; choose another "
                       "--run-dir")


def check_run_folder(path: str | Path, config: dict[str, Any], *, resume: bool = False,
                     break_lock: bool = False) -> None:
    """What ``RunDir(path, config, resume=..., break_lock=...)`` would refuse, found
    without writing or locking anything (``nas run --dry-run`` and the run's checks
    before stage 1): no run to resume, a file or an unwritable folder, a lock another
    live writer holds, another run's folder without ``resume``, a changed configuration
    on ``resume``, an unreadable checkpoint."""
    path = Path(path)
    _check_place(path, resume)
    if not path.is_dir():
        return
    owner = _read_lock(path / LOCK_FILE)
    locked = _lock_refusal(path, owner, break_lock) if owner else None
    if locked is not None:
        raise locked
    if not (path / SNAPSHOT).is_file():
        return
    run = RunDir(path)
    if not run.finished_any_stage():
        return  # started again with this configuration
    if resume:
        run._check_checkpoints()
    refusal = _snapshot_refusal(path, config, resume)
    if refusal is not None:
        raise refusal
