"""The method registry: ``method:`` in an experiment YAML names a recipe (one module
per method and a table from name to recipe, as litgpt's ``__main__``; plug-ins register
themselves through entry points).

A method is one readable module (``recipes/adabert.py`` …) that composes the shared
parts — data, teacher, searcher, evaluator, training loop, export — in the order its
paper describes. It registers a :class:`Method` subclass under its name; the core never
names a method: installed packages add theirs through the ``nas.methods`` entry-point
group, and ``nas run EXPERIMENT.yaml`` dispatches through :data:`METHODS`.

Hooks, in the order the CLI calls them::

    method = METHODS.get(name)()
    config = method.load_config(data, where)   # typed, range-checked, before any stage runs
    metrics = method.run(config, options)      # every stage; results land in options.run_dir
    method.report_sections(run, metrics)       # optional extra report lines and plots
"""

from __future__ import annotations

import abc
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from nas.config import ConfigError, apply_overrides, from_dict, read_yaml
from nas.errors import DataError
from nas.registry import Registry

if TYPE_CHECKING:
    from nas.rundir import RunDir

METHODS: Registry[type[Method]] = Registry("method", entry_point_group="nas.methods")


def register_method(name: str):
    """Class decorator: register a :class:`Method` subclass under ``name``."""

    def decorator(cls: type[Method]) -> type[Method]:
        cls.name = name
        METHODS.add(name, cls)
        return cls

    return decorator


@dataclass
class RunOptions:
    """How a method runs, from the command line (none of it changes the result)."""

    run_dir: Path
    data_dir: str | None = None
    searcher: str | None = None  # None: the method's default
    resume: bool = False
    progress: bool = True
    break_lock: bool = False  # take over a run folder whose lock a dead process left
    # the multi-trial stage's settings from the command line (storage, n_trials, timeout,
    # workers, attach: a ``searchers.loop.StudyOptions``; the core does not import it)
    study: Any = None


class Method(abc.ABC):
    """A recipe: a typed configuration and the stages that run it."""

    name: ClassVar[str] = ""
    #: the configuration dataclass; it must have ``name: str`` and ``task`` (a name,
    #: a path, or a mapping: :func:`nas.data.resolve.resolve_task` turns it into a name)
    config_class: ClassVar[type]
    #: searcher names this method accepts; the first is the default
    searchers: ClassVar[tuple[str, ...]] = ()

    def load_config(self, data: dict[str, Any], where: str) -> Any:
        return from_dict(self.config_class, data, where)

    def default_searcher(self) -> str | None:
        return self.searchers[0] if self.searchers else None

    def check_searcher(self, searcher: str | None) -> str | None:
        """The searcher to use; an unaccepted one is a one-line error."""
        if searcher is None:
            return self.default_searcher()
        if searcher not in self.searchers:
            known = ", ".join(self.searchers) or "none (it does not search)"
            raise ConfigError(f"method {self.name!r} cannot use --searcher {searcher}; "
                              f"it accepts: {known}")
        return searcher

    @abc.abstractmethod
    def run(self, config: Any, options: RunOptions) -> dict[str, Any]:
        """Run every stage; write results into ``options.run_dir``; return the metrics."""

    def audit_parts(self, config: Any, options: RunOptions) -> Any:
        """The parts of ``nas audit`` (:class:`evaluators.audit.AuditParts`): the space,
        the proxy evaluators and the full one, prepared in ``options.run_dir``. Methods
        whose candidates have a cheap proxy and a full evaluation override this."""
        raise ConfigError(f"method {self.name!r} has no proxy evaluator to audit; `nas audit` "
                          "works for methods that score candidates by a proxy "
                          "(e.g. efficientbert)")

    def validate(self, config: Any, options: RunOptions, *, calibrate: bool = True
                 ) -> list[str]:
        """Every check :meth:`run` makes before its first training step, and those it
        would make later that need no training, raised as the run's one-line errors; the
        run and ``nas run --dry-run`` both call it first, so that a dry run that passes
        means the run starts. ``calibrate=False`` (the dry run) measures nothing: a check
        that would need a measurement first is skipped and returned as a note saying why
        (the notes are empty otherwise). None here: a method on the shared skeleton
        has the run's (``recipes.common.Recipe.validate``)."""
        return []

    def dry_run(self, config: Any, options: RunOptions) -> dict[str, Any]:
        """What :meth:`run` would do, found without training or writing a run folder
        (``nas run --dry-run``): the resolved configuration, the data sizes, the steps per
        stage and an estimated wall time. Methods built on the shared run skeleton have it
        (``recipes.plan``)."""
        raise ConfigError(f"method {self.name!r} has no dry run")

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        """Method-specific lines and pictures for ``nas report`` (none by default)."""
        return [], []


def load_experiment(path: str | Path, overrides: Sequence[str] = (),
                    plugins: Sequence[str] = (), task: str | None = None
                    ) -> tuple[Method, Any]:
    """Read an experiment YAML: the method it names and its typed configuration.

    ``task`` (``nas run --task FILE|DIR|NAME``) replaces the file's ``task:`` (a relative
    path is the current directory's). ``overrides`` are ``KEY=VALUE`` settings (``nas run
    --set``) applied to the file's mapping after it and before the typed loading, so they
    pass the same checks; ``task.KEY`` settings on a task given as a name or a path turn
    it into a mapping first (:func:`nas.data.files.task_for_overrides`). ``task:``, when
    it names files, has its paths made absolute here (relative ones are looked up in the
    current directory, then beside the experiment file), so the run's configuration
    snapshot finds the data again from any folder.
    """
    data = read_yaml(path)
    base = Path(path).resolve().parent
    if task is not None:
        from nas.data.files import normalise_task

        try:
            data["task"] = normalise_task(task, Path.cwd())
        except DataError as err:
            raise ConfigError(f"--task {task}: {err}") from None
    task_keys = [item.partition("=")[0].strip()[len("task."):] for item in overrides
                 if item.strip().startswith("task.")]
    if task_keys and "task" in data:
        from nas.data.files import task_for_overrides

        try:
            data["task"] = task_for_overrides(data["task"], task_keys, base)
        except DataError as err:
            raise ConfigError(f"--set {err}") from None
    data = apply_overrides(data, list(overrides), str(path))
    # relative to the file itself: a linked experiment (experiments/search_smoke.yaml)
    # finds its plug-ins and data beside the file it links to
    return method_config(data, str(path), base, plugins)


def method_config(data: dict[str, Any], where: str, base: Path | None = None,
                  plugins: Sequence[str] = ()) -> tuple[Method, Any]:
    """The method and typed configuration of an experiment mapping (a read file, or
    :func:`nas.search`'s keywords). ``plugins`` (``--plugin``) are imported with the
    mapping's own ``plugins:`` first (:mod:`nas.plugins`, files relative to ``base``, then
    the current directory), so a method, space or evaluator they register can be named;
    a method whose configuration has a ``plugins`` field records them as absolute paths,
    so its workers and a resume import them again."""
    path = where
    listed, extra = data.get("plugins", []), list(plugins)
    if listed or extra:
        from nas.plugins import PluginError, import_plugins

        try:
            recorded = import_plugins(listed, base) + import_plugins(extra)
        except PluginError as err:
            raise ConfigError(f"{where}: {err}") from None
        data = {**data, "plugins": recorded}
    if "task" in data:
        from nas.data.files import normalise_task

        try:
            data["task"] = normalise_task(data["task"], base or Path.cwd())
        except DataError as err:
            raise ConfigError(f"{path}: {err}") from None
    if "random_samples" in data:  # merged into the study's own setting
        raise ConfigError(f"{path}: random_samples is now multi_trial.n_trials; write "
                          "`multi_trial: {n_trials: N}` instead")
    name = data.pop("method", None)
    if name is None:
        raise ConfigError(f"{path}: missing key 'method' (one of: "
                          f"{', '.join(METHODS.names()) or 'none installed'})")
    if not isinstance(name, str):
        raise ConfigError(f"{path}: method must be a name, got {name!r}")
    method = METHODS.get(name)()
    if (isinstance(data.get("transfer"), dict) and {"texts", "augment"} & set(data["transfer"])
            and not getattr(method, "uses_transfer", False)):
        raise ConfigError(f"{path}: transfer: method {name} does not distil on transfer "
                          "text (methods search and compress do, in their final retrain); "
                          "drop the transfer: block")
    transfer = data.get("transfer")
    if isinstance(transfer, dict) and transfer.get("texts") is not None:
        from nas.transfer import normalise_texts

        try:  # absolute, found like task files (a missing one is refused now)
            data["transfer"] = {**transfer, "texts": normalise_texts(transfer["texts"],
                                                                     base or Path.cwd())}
        except DataError as err:
            raise ConfigError(f"{path}: {err}") from None
    if "plugins" in data and "plugins" not in getattr(method.config_class,
                                                      "__dataclass_fields__", {}):
        data.pop("plugins")  # imported above; this method's workers do not re-import them
    return method, method.load_config(data, str(path))


def start_run(method: Method, config: Any, *, run_dir: str | Path | None,
              searcher: Any = None, dry_run: bool = False, run_dir_flag: str = "--run-dir",
              study: Callable[[str | None], Any] | None = None, **options: Any
              ) -> tuple[Path, dict[str, Any]]:
    """What ``nas run`` and ``nas.run`` both do once the configuration is loaded: the
    searcher checked (``searcher``, as ``--searcher`` gives it, else the configuration's
    ``searcher:``), the run folder (``run_dir`` or ``runs/<name>``; an empty one is refused
    naming ``run_dir_flag``), logging set up when nothing set it up, then the method's
    plan (``dry_run``: :meth:`Method.dry_run`, no training, no folder) or its run
    (:meth:`Method.run`, which makes the same checks first). ``study`` turns the checked
    searcher into :attr:`RunOptions.study` (the command line's multi-trial flags);
    ``options`` are :class:`RunOptions`' other fields. Returns the run folder and the
    plan or the metrics."""
    from nas.rundir import run_folder

    given = searcher if searcher is not None else getattr(config, "searcher", None)
    checked = method.check_searcher(given)
    study_options = study(checked) if study is not None else None
    folder = run_folder(run_dir, Path("runs") / config.name, run_dir_flag)
    # a no-op where logging is set up already (a notebook or a script may have done it)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    run_options = RunOptions(run_dir=folder, searcher=checked, study=study_options, **options)
    if dry_run:
        return folder, method.dry_run(config, run_options)
    return folder, method.run(config, run_options)


def method_of_run(run: RunDir) -> Method | None:
    """The method a run directory was made by (``None`` for runs of other commands)."""
    name = run.config.get("method")
    return METHODS.get(name)() if isinstance(name, str) and name in METHODS else None
