"""Where a study lives, and what happens to the trials of a worker that died
(docs/reference.md#optuna).

* **Storage.** A URL with a scheme (``sqlite:///runs/x/study.db``,
  ``postgresql+psycopg://user@host/db``) is an Optuna RDB storage; anything else is the
  path of an Optuna journal file (``JournalStorage(JournalFileBackend(path))``), the
  default being ``RUN_DIR/study.journal``. A journal file takes several processes on one
  machine; Optuna's FAQ advises against SQLite for parallel workers, and several
  machines need PostgreSQL (or MySQL).
* **Trial handles.** Optuna has no public call for "trial number N of this study as a live
  trial" or "a live trial's system attributes"; :func:`live_trial` and
  :func:`system_attrs` are those calls, and this module is the one place that reaches into
  Optuna's private attributes (``study._storage``, ``trial._trial_id``). So are
  :func:`start_trial` (``Study.ask`` with the worker named from the start) and
  :func:`propose_once` (a trial's whole proposal in one write), which make a kill at any
  instant resumable exactly (docs/optuna.md#exact-resume).
* **Dead workers.** Every trial records its worker (host, process id, process start
  time) in the user attribute ``worker``. A RUNNING trial whose worker is gone is failed
  and queued again with the same parameters (Optuna's
  :class:`~optuna.storages.RetryHeartbeatStaleTrialCallback`, up to ``retries`` times):

  - on RDB storage through Optuna's heartbeat: a thread records the trial's heartbeat
    every ``heartbeat_interval`` seconds, and :func:`optuna.storages.fail_stale_trials`
    fails a trial whose heartbeat is older than ``grace_period`` (any machine);
  - on a journal file, which has no heartbeat, through a lease of our own: a RUNNING
    trial whose worker process no longer runs on *this* host (the process id is gone,
    or it now belongs to a process started later) is failed by the next worker that
    looks. Workers on other hosts are left alone: their liveness cannot be seen here.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import logging
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import optuna
from optuna.exceptions import UpdateFinishedTrialError
from optuna.storages import (
    BaseStorage,
    JournalStorage,
    RDBStorage,
    RetryHeartbeatStaleTrialCallback,
    fail_stale_trials,
)
from optuna.storages.journal import JournalFileBackend, JournalFileSymlinkLock
from optuna.trial import TrialState

if TYPE_CHECKING:
    from optuna.storages._heartbeat import BaseHeartbeat

from nas.errors import NasError
from searchers.resume import PROPOSAL

JOURNAL_FILE = "study.journal"
RDB_SCHEMES = ("sqlite", "postgresql", "mysql")

log = logging.getLogger("nas.study")


class StorageError(NasError):
    """A study storage cannot be opened (bad URL, missing driver, unreachable server)."""


#: the storage of a study kept in this process's memory only (tests, tabular benchmarks:
#: thousands of short studies, no file, no resume, one worker)
MEMORY = ":memory:"


def storage_url(given: str | None, run_dir: str | Path) -> str:
    """The canonical storage string, to open: a URL as given (an SQLite file made
    absolute), :data:`MEMORY`, or an absolute journal file path (``RUN_DIR/study.journal``
    by default)."""
    if given is None:
        return str((Path(run_dir) / JOURNAL_FILE).resolve())
    if given == MEMORY:
        return MEMORY
    if "://" in given:
        scheme = given.split("://", 1)[0].split("+", 1)[0]
        if scheme not in RDB_SCHEMES:
            raise StorageError(f"--storage {masked(given)}: unknown scheme {scheme!r}; use "
                               "sqlite:///FILE, postgresql+psycopg://USER@HOST/DB or a journal "
                               "file path")
        file, query = sqlite_file(given)
        return given if file is None else f"sqlite:///{file.expanduser().resolve()}{query}"
    return str(Path(given).expanduser().resolve())


def sqlite_file(url: str) -> tuple[Path | None, str]:
    """The database file of an ``sqlite:///FILE[?query]`` URL and its query (``None`` for
    other URLs and an in-memory database)."""
    if not url.startswith("sqlite:///"):
        return None, ""
    path, sep, query = url[len("sqlite:///"):].partition("?")
    if path in ("", ":memory:"):
        return None, ""
    return Path(path), sep + query


def storage_file(url: str) -> Path | None:
    """The file a storage lives in (a journal or an SQLite database), else ``None``."""
    return Path(url) if is_journal(url) else sqlite_file(url)[0]


def record_path(path: str | Path, run_dir: str | Path) -> str:
    """A file as a run folder records it: relative to the folder when inside it, else
    absolute (the inverse is :func:`resolve_path`)."""
    path = Path(path).resolve()
    try:
        return path.relative_to(Path(run_dir).resolve()).as_posix()
    except ValueError:
        return str(path)


def resolve_path(recorded: str | Path, run_dir: str | Path) -> Path:
    """A file recorded by :func:`record_path`, seen from ``run_dir``."""
    return (Path(run_dir) / recorded).resolve()  # an absolute ``recorded`` stays itself


def record_storage(url: str, run_dir: str | Path) -> str:
    """``url`` as a run folder records it (``study.json``): a file inside the folder
    relative to it, so that a moved or copied run folder opens its own file; any other
    storage as given (absolute for a file)."""
    file = storage_file(url)
    if file is None:
        return url
    rel = record_path(file, run_dir)
    if Path(rel).is_absolute():
        return url
    return rel if is_journal(url) else f"sqlite:///{rel}{sqlite_file(url)[1]}"


def resolve_recorded(recorded: str, run_dir: str | Path) -> str:
    """A storage recorded by :func:`record_storage`, to open from ``run_dir`` (a relative
    file is the run folder's own)."""
    file = storage_file(recorded)
    if file is None or file.is_absolute():
        return recorded
    if is_journal(recorded):
        return str(resolve_path(file, run_dir))
    return f"sqlite:///{resolve_path(file, run_dir)}{sqlite_file(recorded)[1]}"


def is_journal(url: str) -> bool:
    return "://" not in url and url != MEMORY


def masked(url: str) -> str:
    """``url`` without its password (for messages and files)."""
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    return f"{scheme}://{creds.split(':', 1)[0]}:***@{host}" if ":" in creds else url


def open_storage(url: str, *, retries: int = 1, heartbeat_interval: int = 10,
                 grace_period: int = 30) -> BaseStorage:
    """The Optuna storage behind ``url`` (see :func:`storage_url`; :data:`MEMORY`: a new
    in-memory storage)."""
    if url == MEMORY:
        return optuna.storages.InMemoryStorage()
    if is_journal(url):
        path = Path(url)
        if path.is_dir():
            raise StorageError(f"--storage {path}: is a folder; name a journal file (e.g. "
                               f"{path / JOURNAL_FILE}) or a sqlite:/// URL")
        check_journal(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        repair_journal(path)
        return JournalStorage(JournalFileBackend(str(path)))
    try:
        with warnings.catch_warnings():  # heartbeats are "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            callback = RetryHeartbeatStaleTrialCallback(max_retry=retries)
            return RDBStorage(url, heartbeat_interval=heartbeat_interval,
                              grace_period=grace_period,
                              heartbeat_stale_trial_callback=callback)
    except ImportError as err:
        raise StorageError(f"--storage {masked(url)}: the database driver is missing "
                           f"({err.name or err}); pip install 'psycopg[binary]' for "
                           "postgresql+psycopg://") from None
    except Exception as err:  # sqlalchemy's connection errors: one line, no password
        message = " ".join(str(err).split())[:200]
        raise StorageError(f"--storage {masked(url)}: cannot open the storage "
                           f"({type(err).__name__}: {message})") from None


def check_storage(given: str, *, attach: bool = False) -> None:
    """Open the study storage the user named (``--storage``, or the file's ``storage:``)
    before stage 1: an unreachable database, a garbage or pickled file, a folder, a
    journal whose folder cannot be written, or a missing journal to ``--attach`` to fails
    now, in one line, not after the teacher and the data stages."""
    url = storage_url(given, ".")  # a URL as given, a journal file as an absolute path
    if is_journal(url) and not Path(url).exists():
        if attach:
            raise StorageError(f"--storage {given}: no such journal file to --attach to; name "
                               "the first worker's storage, or start without --attach")
        above = Path(url).parent
        while not above.exists() and above != above.parent:
            above = above.parent
        if not above.is_dir() or not os.access(above, os.W_OK | os.X_OK):
            raise StorageError(f"--storage {given}: the journal cannot be made in {above} "
                               "(not a folder this process can write to); name a journal "
                               "file in a writable folder")
        return  # a new journal: created by the study, nothing more to validate yet
    open_storage(url)


def check_journal(path: Path) -> None:
    """Refuse, in one line naming the file, a ``path`` that exists and is not an Optuna
    journal (a garbage or pickled file once failed with a bare ``UnicodeDecodeError``
    only after stages 1-2 had run).

    Optuna's reader keeps quiet about a bad line until a later line follows it, so a file
    of one garbage line would pass its own opening and fail at the first write; here every
    complete line must be a JSON object with an ``op_code``. A last line without its
    newline (what a kill during a write leaves) is not judged here: that is a cut
    journal, not a foreign file, unless nothing before it is a journal line.
    """
    if not path.exists():
        return
    fix = "name the study.journal of a run, a new file, or a sqlite:/// URL"
    try:
        data = path.read_bytes()
    except OSError as err:
        raise StorageError(f"--storage {path}: cannot read it ({err.strerror}); {fix}") from None
    lines = data.split(b"\n")
    complete, cut = lines[:-1], lines[-1]
    for number, line in enumerate(complete, start=1):
        try:
            entry = json.loads(line)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError (a binary file)
            entry = None
        if not isinstance(entry, dict) or "op_code" not in entry:
            if number > 1:  # a journal (its first line is one) damaged further on
                raise StorageError(f"{path}: line {number} of the study journal is damaged "
                                   "(not a journal entry); restore the file from a backup, "
                                   "or start the search again in a new --run-dir")
            raise StorageError(f"--storage {path}: line {number} is not an Optuna journal "
                               f"entry, so the file is not a journal; {fix}")
    if cut and not complete:
        raise StorageError(f"--storage {path}: not an Optuna journal file (no complete "
                           f"entry); {fix}")


def _damaged_line(data: bytes) -> int | None:
    """The number (from 1) of the first complete line of a journal that is not JSON."""
    for number, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            json.loads(line)
        except ValueError:
            return number
    return None


def repair_journal(path: Path) -> None:
    """Drop a journal's cut last line (what a kill during a write leaves: Optuna skips it
    on reading, but the next append would glue a record onto it and make the journal
    unreadable), with one warning line; a damaged line before the end is refused. The
    cut is checked again under Optuna's own write lock, so a line another worker is
    writing at this moment is left alone."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    bad = _damaged_line(data)
    if bad is not None:
        raise StorageError(f"{path}: line {bad} of the study journal is damaged (not JSON); "
                           "restore the file from a backup, or start the search again in a "
                           "new --run-dir")
    if data.endswith(b"\n"):
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        data = path.read_bytes()
        keep = data.rfind(b"\n") + 1
        if keep == len(data):
            return  # the writer finished its line
        with path.open("r+b") as f:
            f.truncate(keep)
            os.fsync(f.fileno())
    finally:
        lock.release()
    log.warning("%s: dropped its last line, cut during a write (%d bytes); the record it "
                "held is lost, the study resumes from the one before", path, len(data) - keep)


# ---------------------------------------------------------------------------
# trial handles
# ---------------------------------------------------------------------------


def trial_id(study: optuna.Study, number: int) -> int:
    """The storage's id of trial ``number``."""
    return study._storage.get_trial_id_from_study_id_trial_number(study._study_id, number)


def live_trial(study: optuna.Study, number: int) -> optuna.Trial:
    """Trial ``number`` as an :class:`optuna.Trial`, to set its attributes, report to it
    or tell it (a trial this process did not ask, or asked before a restart)."""
    return optuna.Trial(study, trial_id(study, number))


def claim_waiting(study: optuna.Study, number: int) -> optuna.Trial | None:
    """Waiting trial ``number`` taken as this process's running trial: what
    :meth:`optuna.Study.ask` does with the *first* waiting trial, for a chosen one (an
    atomic WAITING → RUNNING, so two workers never both get it); ``None`` if another
    worker took it first."""
    tid = trial_id(study, number)
    try:
        if not study._storage.set_trial_state_values(tid, TrialState.RUNNING):
            return None
    except UpdateFinishedTrialError:
        return None
    study._thread_local.cached_all_trials = None  # as Study.ask: the samplers see it now
    return optuna.Trial(study, tid)


def start_trial(study: optuna.Study, user_attrs: dict[str, Any],
                first: int | None = None) -> optuna.Trial:
    """A running trial for this process that carries ``user_attrs`` (the worker) from the
    moment it runs: :meth:`optuna.Study.ask` (waiting trial ``first``, else the first
    waiting one, else a new one) without its window in which a trial runs with no worker
    named. A process killed in that window left a RUNNING trial that no worker could
    recognise as dead: it stayed so for ever, counted as a claim on the study's trials.

    A waiting trial gets the attributes just before it is claimed (a waiting trial is
    not run by anyone, and the claim, WAITING → RUNNING, is atomic); a new trial is
    created with them in one storage write."""
    storage = study._storage
    study._thread_local.cached_all_trials = None  # as Study.ask: sync once per trial
    waiting = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,))]
    if first is not None and first in waiting:
        waiting.remove(first)
        waiting.insert(0, first)
    for number in waiting:
        tid = trial_id(study, number)
        try:
            for key, value in user_attrs.items():
                storage.set_trial_user_attr(tid, key, value)
        except UpdateFinishedTrialError:  # another worker ran it meanwhile
            continue
        trial = claim_waiting(study, number)
        if trial is not None:
            if any(trial.user_attrs.get(k) != v for k, v in user_attrs.items()):
                for key, value in user_attrs.items():  # a worker that lost the claim wrote
                    trial.set_user_attr(key, value)   # its own between ours and the claim
            return trial
    template = optuna.trial.FrozenTrial(
        number=-1, trial_id=-1, state=TrialState.RUNNING, value=None, values=None,
        datetime_start=datetime.datetime.now(), datetime_complete=None, params={},
        distributions={}, user_attrs=dict(user_attrs), system_attrs={},
        intermediate_values={})
    return optuna.Trial(study, storage.create_new_trial(study._study_id, template))


class _Deferred:
    """A trial's storage that keeps the parameter writes in ``drawn`` instead of writing
    them (everything else reaches the storage)."""

    def __init__(self, storage: BaseStorage, drawn: dict[str, tuple[float, Any]]) -> None:
        self._storage = storage
        self._drawn = drawn

    def set_trial_param(self, trial_id: int, name: str, value: float, distribution: Any
                        ) -> None:
        self._drawn[name] = (value, distribution)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)


def propose_once(trial: optuna.Trial, suggest: Callable[[optuna.Trial], dict[str, Any]]
                 ) -> dict[str, Any]:
    """``suggest(trial)`` (every parameter of the trial), with the whole proposal in the
    storage before its first parameter, in one write, so that a kill at any instant
    leaves either no proposal or all of it (docs/optuna.md#exact-resume).

    Optuna records a trial's parameters one write each; a kill between two of them left
    some, and the retry kept those and drew the others again, from another search space
    (TPE's relative sampling leaves the fixed ones out), so another architecture was
    evaluated. Here the parameters are drawn first without being written (Optuna's own
    sampling: relative, then independent, in the same order), the proposal is written as
    the system attribute :data:`PROPOSAL`, and then the parameters. A trial that has one
    (a retry, which inherits its system attributes) takes its values as fixed
    parameters, so it is proposed again identically; a trial given fixed parameters (a
    queued architecture) needs none."""
    found = system_attrs(trial)
    if PROPOSAL in found:
        trial._fixed_params = {**found[PROPOSAL], **trial._fixed_params}
        return suggest(trial)
    if "fixed_params" in found:
        return suggest(trial)
    real = trial.storage
    drawn: dict[str, tuple[float, Any]] = {}
    trial.storage = cast(BaseStorage, _Deferred(real, drawn))
    try:
        params = suggest(trial)
    finally:
        trial.storage = real
    real.set_trial_system_attr(trial._trial_id, PROPOSAL, params)
    for name, (value, distribution) in drawn.items():
        real.set_trial_param(trial._trial_id, name, value, distribution)
    return params


def system_attrs(trial: optuna.Trial) -> dict[str, Any]:
    """A live trial's system attributes (``fixed_params`` of an enqueued trial,
    ``failed_trial`` of a retry), read from the storage."""
    return trial.storage.get_trial_system_attrs(trial._trial_id)


# ---------------------------------------------------------------------------
# workers and leases
# ---------------------------------------------------------------------------


def process_start_time(pid: int) -> float | None:
    """When process ``pid`` started (seconds since the epoch), ``None`` if unknown
    (no such process, or no ``/proc``)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text()
                    .splitlines() if line.startswith("btime "))
        return boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def worker_info(run_dir: str | Path | None = None) -> dict[str, Any]:
    """This process as a worker: host, pid, start time and run folder."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid,
            "started": process_start_time(pid) or time.time(),
            "run_dir": None if run_dir is None else str(Path(run_dir).resolve())}


def worker_alive(worker: dict[str, Any]) -> bool:
    """Whether the worker process is still running (only answerable on its own host:
    a worker of another host counts as alive)."""
    if worker.get("host") != socket.gethostname():
        return True
    try:
        pid = int(worker["pid"])
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # alive, another user's
    except (KeyError, TypeError, ValueError, OverflowError, OSError):
        return False
    started = process_start_time(pid)
    recorded = worker.get("started")
    if started is None or not isinstance(recorded, int | float):
        return True
    return abs(started - float(recorded)) < 2.0  # else the pid was reused


def recover_stale_trials(study: optuna.Study, retries: int) -> list[int]:
    """Fail the RUNNING trials of dead workers and queue their retries; returns the
    failed trial numbers (module docstring). The process-id lease applies to every
    storage (for workers on this host); RDB storage adds Optuna's heartbeat."""
    storage = study._storage
    failed = []
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = trial.user_attrs.get("worker")
        if not isinstance(worker, dict) or worker_alive(worker):
            continue
        if _fail_and_retry(study, trial._trial_id, retries):
            failed.append(trial.number)
    if not isinstance(storage, JournalStorage):
        running = {t.number for t in study.get_trials(deepcopy=False,
                                                       states=(TrialState.RUNNING,))}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            fail_stale_trials(study)  # the storage's callback queues the retries
        failed += [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
                   if t.number in running and t.user_attrs.get("outcome") is None]
    return sorted(failed)


def abandon_trial(study: optuna.Study, number: int, retries: int) -> None:
    """Fail a trial this worker cannot finish (it was interrupted) and queue its retry,
    as if its worker had died: the next run takes it up again."""
    _fail_and_retry(study, trial_id(study, number), retries)


def _fail_and_retry(study: optuna.Study, tid: int, retries: int) -> bool:
    """Fail running trial ``tid`` with no ``outcome`` and queue its retry; ``False`` when
    another worker failed or finished it first.

    A trial is closed by its user attributes (``outcome`` first) and then its state,
    several writes: a worker killed between them left a RUNNING trial that already said
    ``complete`` (or ``rejected``...), which the failed trial and its retry, a copy of
    its attributes, would both have counted as an evaluation. What it said is not the
    study's until its state does, so it is cleared here."""
    storage = study._storage
    try:
        if storage.get_trial(tid).user_attrs.get("outcome") is not None:
            storage.set_trial_user_attr(tid, "outcome", None)
        # only one worker wins this: the others get False or UpdateFinishedTrialError
        if not storage.set_trial_state_values(tid, TrialState.FAIL):
            return False
    except UpdateFinishedTrialError:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=retries)(
            study, copy.deepcopy(storage.get_trial(tid)))
    return True


@contextlib.contextmanager
def heartbeat(study: optuna.Study, trial_number: int) -> Iterator[None]:
    """Record the trial's heartbeat in a thread while the block runs (RDB storage with a
    heartbeat; nothing otherwise)."""
    storage = study._storage
    interval = getattr(storage, "get_heartbeat_interval", lambda: None)()
    if interval is None:
        yield
        return
    tid = trial_id(study, trial_number)
    stop = threading.Event()
    beating = cast("BaseHeartbeat", storage)  # it has a heartbeat interval: Optuna's mixin

    def beat() -> None:
        while True:
            with contextlib.suppress(Exception):  # a lost beat is what staleness detects
                beating.record_heartbeat(tid)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, daemon=True, name=f"heartbeat-{trial_number}")
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
