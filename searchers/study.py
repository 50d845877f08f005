"""One study of a run folder: what identifies it (:class:`StudySpec`), the pointer
``RUN_DIR/study.json`` that names its storage, and opening it (created with its user
attributes and seed architectures the first time; refused when another search made it).
"""

from __future__ import annotations

import json
import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import optuna

from evaluators.base import Objective
from nas.checkpoint import atomic_write_json
from nas.errors import NasError
from searchers.optuna_bridge import Budget
from searchers.proposals import StudySearch
from searchers.seeds import seed_architectures
from searchers.settings import StudyOptions, StudySettings, make_pruner
from searchers.storage import (
    open_storage,
    record_storage,
    resolve_recorded,
    storage_file,
    storage_url,
    worker_info,
)

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from nas.space import SearchSpace
    from searchers.base import MultiTrialSearcher

log = logging.getLogger("nas.study")

POINTER = "study.json"
#: the keys of ``study.json``: enough to find the study and to refuse another search's
POINTER_KEYS = ("storage", "study_name", "searcher")


@dataclass
class StudySpec:
    """Everything that identifies a study and how a worker runs it (picklable)."""

    searcher: str
    study_name: str
    storage: str
    seed: int
    settings: StudySettings
    run_dir: str
    n_trials: int | None = None  # None: the study's own (an attached worker)
    timeout: float | None = None
    seq_len: int = 128
    progress: bool = False
    resume: bool = False  # continue the run folder's study
    attach: bool = False  # join an existing study (a worker of its own run folder)
    workers: int = 1
    #: how to export a trial's model (``nas export --run``): labels, tokenizer, task...
    export: dict = field(default_factory=dict)

    @classmethod
    def for_run(cls, *, searcher: str, name: str, run_dir: str | Path, seed: int,
                settings: StudySettings, options: StudyOptions | None, default_trials: int,
                resume: bool = False, seq_len: int = 128, progress: bool = False,
                export: dict[str, Any] | None = None) -> StudySpec:
        """The spec of a method's multi-trial stage: the storage from the command line, or
        the one a resumed run used, or ``RUN_DIR/study.journal``. ``export``: how
        ``nas export --run`` rebuilds a trial's model (labels, tokenizer, max_length,
        task)."""
        options = options or StudyOptions()
        pointer = read_pointer(run_dir) if resume else None
        if pointer is not None and pointer["searcher"] != searcher:
            raise NasError(f"{Path(run_dir) / POINTER}: this run folder holds a "
                           f"{pointer['searcher']} study; resume it with --searcher "
                           f"{pointer['searcher']} or use another --run-dir")
        if options.storage is not None:
            url = storage_url(options.storage, run_dir)
        elif pointer is not None:
            url = pointer["storage"]
            check_own_storage(pointer, run_dir)
        else:
            url = storage_url(None, run_dir)
        n_trials = options.n_trials
        if n_trials is None and not options.attach:
            n_trials = settings.n_trials or default_trials
        return cls(searcher=searcher, study_name=f"{name}-{searcher}", storage=url, seed=seed,
                   settings=settings, run_dir=str(Path(run_dir).resolve()),
                   n_trials=n_trials, timeout=options.timeout, seq_len=seq_len,
                   progress=progress, resume=resume, attach=options.attach,
                   workers=options.workers, export=dict(export or {}))


def read_pointer(run_dir: str | Path) -> dict[str, Any] | None:
    """``RUN_DIR/study.json``: which storage and study a run folder's search uses, its
    ``storage`` to open from this folder (a file the pointer records relative to the
    folder is this folder's own: :func:`searchers.storage.record_storage`)."""
    path = Path(run_dir) / POINTER
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not all(k in data for k in POINTER_KEYS):
            raise ValueError(f"it needs the keys {', '.join(POINTER_KEYS)}")
    except (ValueError, OSError) as err:
        raise NasError(f"{path}: unreadable study pointer ({err}); delete it to start the "
                       "search again") from None
    data["recorded_storage"] = data["storage"]
    if data.get("relative_to_folder") or is_folder_relative(str(data["storage"])):
        # older pointers hold what the run was given (always absolute)
        check_inside(path, str(data["storage"]), run_dir)
        data["storage"] = resolve_recorded(str(data["storage"]), run_dir)
    return data


def is_folder_relative(recorded: str) -> bool:
    """Whether a recorded storage is a file named relative to the run folder (the
    folder's own, as :func:`searchers.storage.record_storage` writes it)."""
    file = storage_file(recorded)
    return file is not None and not file.is_absolute()


def check_inside(pointer: Path, recorded: str, run_dir: str | Path) -> None:
    """Refuse a storage recorded relative to the run folder that resolves outside it
    (``../other_run/study.journal``, or a symlink out of the folder): the pointer only
    ever records the folder's own files that way, so such a value was edited or planted,
    and a resume would write another run's study and export its trials as this one's.
    A storage the user gave (an absolute file, a database URL) is recorded as given."""
    if not is_folder_relative(recorded):
        return
    here = Path(run_dir).resolve()
    file = storage_file(resolve_recorded(recorded, run_dir))
    if file is not None and not file.is_relative_to(here):
        raise NasError(f"{pointer}: storage {recorded!r} resolves outside the run folder "
                       f"({file}); a relative storage must be the folder's own file: set it "
                       "to study.journal, or pass --storage to name another storage")


def check_own_storages(run_dir: str | Path) -> None:
    """:func:`check_own_storage` for the studies of a run folder about to be resumed (its
    own and those of its stages' subfolders), so that a refusal comes before any work."""
    folder = Path(run_dir)
    for path in [folder / POINTER, *sorted(folder.glob(f"*/{POINTER}"))]:
        pointer = read_pointer(path.parent)
        if pointer is not None:
            check_own_storage(pointer, path.parent)


def check_own_storage(pointer: dict[str, Any], run_dir: str | Path) -> None:
    """Refuse to resume a run folder whose pointer still names a file in another run
    folder: a copy of a run made before pointers recorded the folder's own files
    relative to it (a resume would write into the original). A storage the user named
    (``--storage``) is recorded as given and left alone: only an old pointer without
    ``relative_to_folder`` whose file lies in another run folder (one with its own
    ``study.json``), or has a namesake here, is refused."""
    if pointer.get("relative_to_folder"):
        return
    file = storage_file(pointer["storage"])
    if file is None:
        return
    here = Path(run_dir).resolve()
    file = file.resolve()
    if file.is_relative_to(here):
        return
    own = here / file.name
    if (file.parent / POINTER).is_file() or own.exists():
        fix = (f"resume with --storage {own} to continue this folder's own copy"
               if own.exists() else "pass --storage to name the storage to use")
        raise NasError(f"{here / POINTER}: its study storage {file} lies in another run "
                       f"folder ({file.parent}); a resume would write there; {fix}")


def write_pointer(spec: StudySpec, search: StudySearch) -> None:
    """``RUN_DIR/study.json`` for ``spec``'s study (the study holds the trials; this file
    only names it)."""
    atomic_write_json(Path(spec.run_dir) / POINTER, {
        "storage": record_storage(spec.storage, spec.run_dir), "relative_to_folder": True,
        "study_name": spec.study_name, "searcher": spec.searcher,
        "objectives": [o.to_dict() for o in search.objectives], "space": search.space.name})


def spec_storage(spec: StudySpec) -> BaseStorage:
    """The Optuna storage of ``spec`` (with its retry and heartbeat settings)."""
    s = spec.settings
    return open_storage(spec.storage, retries=s.retries, heartbeat_interval=s.heartbeat_interval,
                        grace_period=s.grace_period)


def open_search(spec: StudySpec, space: SearchSpace, objectives: tuple[Objective, ...],
                storage: BaseStorage | None = None,
                searcher: MultiTrialSearcher | None = None) -> StudySearch:
    """The spec's search on its storage (the study is created if it does not exist,
    without the user attributes :func:`create` adds); ``searcher``: a built sampler
    factory instead of the registered ``spec.searcher`` (a method's queue,
    :mod:`searchers.queued`)."""
    s = spec.settings
    return StudySearch.open(
        space, searcher if searcher is not None else spec.searcher, seed=spec.seed,
        objectives=objectives,
        storage=storage if storage is not None else spec_storage(spec),
        study_name=spec.study_name, budget=study_budget(spec, space),
        sampler_options=s.samplers.get(spec.searcher, {}), pruner=make_pruner(s),
        trial_attrs={"worker": worker_info(spec.run_dir)})


def study_budget(spec: StudySpec, space: SearchSpace) -> Budget:
    """The hard constraints of ``spec``'s study; ``max_latency_ms`` predicts batch-1
    latency at the run's length with one thread (as each worker runs) from this machine's
    latency table of the settings' ``latency_runtime``, calibrated once for the space
    and cached when it has none
    (:func:`nas.latency.space_predictor`; the first process does it, before any worker
    starts)."""
    s = spec.settings
    latency_fn = None
    if s.max_latency_ms is not None:
        from nas.latency import space_predictor

        latency_fn = space_predictor(space, seq_len=spec.seq_len, log=log.info,
                                     runtime=s.latency_runtime)
    return Budget(seq_len=spec.seq_len, latency_fn=latency_fn, **s.budget_kwargs)


def check_study(search: StudySearch, spec: StudySpec) -> None:
    """A study made by another search (searcher, objectives, space) is refused."""
    attrs = search.study.user_attrs
    mine = {"searcher": spec.searcher, "space": search.space.name,
            "objectives": [o.to_dict() for o in search.objectives]}
    for key, value in mine.items():
        if key in attrs and attrs[key] != value:
            raise NasError(f"study {spec.study_name!r} in {spec.storage} has {key} "
                           f"{attrs[key]!r}, this run {value!r}; use the same experiment, "
                           "or another storage or run folder")


#: the study user attribute that is true while :func:`create` has not finished
CREATING = "creating"


def create(search: StudySearch, spec: StudySpec,
           queue: Sequence[tuple[str, Mapping[str, Any]]] = ()) -> None:
    """A new study's user attributes (the search that made it, for ``--resume``,
    ``nas report`` and ``nas export``), its seed architectures and ``queue`` (a method's
    own picks), queued; :data:`CREATING` is true until all of it is written, so that a
    study whose creation was killed is created again (:func:`unfinished`) instead of
    resuming without its seeds."""
    study, space = search.study, search.space
    study.set_user_attr(CREATING, True)
    with warnings.catch_warnings():  # so that optuna-dashboard names the objectives
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([o.name for o in search.objectives])
    for key, value in {"searcher": spec.searcher, "space": space.name,
                       "space_config": space.config, "seed": spec.seed, "export": spec.export,
                       "objectives": [o.to_dict() for o in search.objectives],
                       "settings": asdict(spec.settings)}.items():
        study.set_user_attr(key, value)
    budget = search.bridge.budget
    for tag, arch in seed_architectures(space, spec.settings.seeds, budget):
        search.enqueue(arch, tag)
        log.info("seed %s: %s queued", tag, arch.id)
    for tag, picked in queue:
        search.enqueue(picked, tag)
    study.set_user_attr(CREATING, False)


def unfinished(study: optuna.Study) -> bool:
    """Whether the study's creation (:func:`create`) was interrupted: it is still
    :data:`CREATING`, or it has neither user attributes nor trials (killed right after
    Optuna made it). A queued architecture enqueued again is skipped (Optuna's
    ``skip_if_exists``), so creating such a study again gives the uninterrupted one's.
    Studies made before the attribute existed have finished their creation."""
    attrs = study.user_attrs
    return bool(attrs.get(CREATING)) or (not attrs and not study.get_trials(deepcopy=False))
