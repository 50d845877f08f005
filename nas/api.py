"""The Python route to every method: :func:`run` runs any registered method (``nas run``'s
checks, the same code) from keywords, as ``nas run`` does from a file, and returns a
:class:`RunResult`; :func:`search` is ``run("search", space=...)``, its keywords listed.

    import nas
    result = nas.search(space="tiny-cell", plugins=["examples/custom_space.py"],
                        task="examples/reviews.csv", searcher="tpe", n_trials=20,
                        constraints={"max_params": 2e6}, run_dir="runs/tiny")
    result.best, result.pareto, result.trials       # the chosen model, the front, a table
    result.export("tiny_hf", format="hf")

    plan = nas.run("adabert", task="sst2", dry_run=True)    # nas run --dry-run's plan
    result = nas.run("tinybert", task="sst2", data={"max_train_examples": 2000})
    print(result.report())

The module is ``nas.api`` so that no module shadows the functions ``nas.search`` and
``nas.run``. A ``SearchSpace`` object (a space made in a notebook cell) is searched without
registration; it lives in this process only, so it cannot be searched by ``workers`` > 1.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas.errors import NasError

#: spaces given as objects, by name (their registered factory returns them)
_OBJECT_SPACES: dict[str, Any] = {}


@dataclass
class RunResult:
    """What a finished run of any method left in ``run_dir`` (read from it, so a result can
    also be opened later with :meth:`open`): its ``metrics.json``, its report and its
    export."""

    run_dir: Path
    metrics: dict[str, Any] = field(repr=False)

    @classmethod
    def open(cls, run_dir: str | Path) -> RunResult:
        """The result of a finished run folder (``nas run`` or :func:`run`)."""
        from nas.rundir import RunDir

        metrics = RunDir(run_dir).load_json("metrics.json")
        if not isinstance(metrics, dict):
            raise NasError(f"{run_dir}: no finished run here (metrics.json); run nas.run(..., "
                           "run_dir=...) or nas run first")
        return cls(Path(run_dir), metrics)

    def report(self) -> str:
        """``nas report RUN_DIR``'s text (Markdown; its plots are written into the run
        folder)."""
        from nas.report import write_report

        return write_report(self.run_dir)[0]

    def export(self, directory: str | Path, format: str = "native", *,  # noqa: A002
               trial: int | str | None = None, overwrite: bool = False,
               quantize: str | None = None) -> Path:
        """The run's model (a search's best final one; or study trial ``trial``'s model,
        ``"best"`` or a number, after a multi-trial search) written to ``directory`` as
        ``native``, ``hf`` or ``onnx``; ``quantize="int8"``
        (``onnx`` only, not with ``trial``): ONNX Runtime's int8 graph, compared with fp32
        on the run's dev (:mod:`nas.quantize`)."""
        if quantize is not None:
            from nas.export import convert
            from nas.quantize import check_quantize, run_dev, run_max_drop
            from nas.rundir import RunDir

            check_quantize(quantize, format)
            if trial is not None:
                raise NasError("quantize goes with the run's final model, not with a trial")
            source = self.run_dir / "export"
            convert(source, directory, format, overwrite=overwrite, quantize=quantize,
                    dev=run_dev(self.run_dir, source), max_int8_drop=run_max_drop(self.run_dir),
                    metrics=RunDir(self.run_dir).load_json("metrics.json"))
            return Path(directory)
        if trial is not None:
            from searchers.results import export_trial

            out, _ = export_trial(self.run_dir, trial, directory, fmt=format,
                                  overwrite=overwrite)
            return out
        from nas.export import convert
        from nas.rundir import RunDir

        convert(self.run_dir / "export", directory, format, overwrite=overwrite,
                metrics=RunDir(self.run_dir).load_json("metrics.json"))
        return Path(directory)


@dataclass
class SearchResult(RunResult):
    """What a finished search (``method: search`` or ``compress``) left in ``run_dir``: a
    :class:`RunResult` with its final retrains and its study."""

    @classmethod
    def open(cls, run_dir: str | Path) -> SearchResult:
        """The result of a finished ``method: search`` run folder."""
        from nas.rundir import RunDir

        metrics = RunDir(run_dir).load_json("metrics.json")
        if metrics is None or "final" not in metrics:
            raise NasError(f"{run_dir}: no finished search here (metrics.json with a final "
                           "stage); run nas.search(..., run_dir=...) or nas run first")
        return cls(Path(run_dir), metrics)

    @property
    def best(self) -> dict[str, Any]:
        """The first chosen architecture's final retrain: ``arch``, ``arch_id``, ``trial``,
        its scores per seed (``seeds``) and their mean and sd on the report split."""
        return self.metrics["final"][0]

    @property
    def final(self) -> list[dict[str, Any]]:
        """Every chosen architecture's final retrain, in the order chosen."""
        return list(self.metrics["final"])

    @property
    def study(self) -> Any:
        """The ``optuna.Study`` of a multi-trial search (``None`` after a one-shot one)."""
        from searchers.results import open_run_study

        if not (self.run_dir / "study.json").is_file():
            return None
        return open_run_study(self.run_dir)

    @property
    def pareto(self) -> list[dict[str, Any]]:
        """The study's Pareto front (the best trial for one objective): trial number,
        architecture, objective values and costs."""
        from searchers.results import pareto_front

        study = self.study
        if study is None:
            return [{"trial": None, "arch": self.best["arch"], "values": None}]
        names = study.metric_names or [f"objective{i}" for i in range(len(study.directions))]
        return [{"trial": t.number, "arch": t.user_attrs["arch"],
                 "arch_id": t.user_attrs["arch_id"], "values": dict(zip(names, t.values,
                                                                        strict=True)),
                 "costs": t.user_attrs.get("costs", {})} for t in pareto_front(study)]

    @property
    def trials(self) -> Any:
        """Every trial of the study as a ``pandas.DataFrame`` (Optuna's
        ``trials_dataframe``: number, values, state, parameters, user attributes)."""
        study = self.study
        if study is None:
            raise NasError(f"{self.run_dir}: a one-shot search has no trials; see .best")
        return study.trials_dataframe()


class _KeywordsFromConfig:
    """The type of :func:`search`: its function, with a signature (``help(nas.search)``,
    ``inspect.signature``, an editor's completion) that lists method search's
    configuration keys and their defaults, read from the configuration class when asked
    for: the keywords are never a hand-kept copy of it, and ``import nas`` imports no
    recipe (no torch)."""

    def __init__(self, function: Callable[..., SearchResult], method: str) -> None:
        functools.update_wrapper(self, function)
        self._function, self._method = function, method

    def __call__(self, *args: Any, **kwargs: Any) -> SearchResult:
        return self._function(*args, **kwargs)

    @property
    def __signature__(self) -> inspect.Signature:
        from nas.methods import METHODS

        own = inspect.signature(self._function)
        fixed = [p for p in own.parameters.values() if p.kind is not p.VAR_KEYWORD]
        taken = {p.name for p in fixed} | {"method"}
        config = METHODS.get(self._method).config_class
        keys = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=f.type,
                                  default=_default(f))
                for f in dataclasses.fields(config) if f.name not in taken]
        return own.replace(parameters=[*fixed, *keys])


def _default(f: dataclasses.Field) -> Any:
    """A configuration field's default as a keyword shows it (``name``: ``None``, which
    means ``search-<space>``)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def _keywords_from_config(method: str) -> Callable[[Callable[..., SearchResult]],
                                                  _KeywordsFromConfig]:
    """Decorator: the function, its signature completed by method ``method``'s
    configuration keys (:class:`_KeywordsFromConfig`)."""
    return lambda function: _KeywordsFromConfig(function, method)


@_keywords_from_config("search")
def search(space: Any, *, task: str | Mapping[str, Any], run_dir: str | Path | None = None,
           resume: bool = False, progress: bool = True, data_dir: str | None = None,
           **settings: Any) -> SearchResult:
    """Search ``space`` on ``task`` and retrain, score and export what ``final`` chooses:
    ``nas.run("search", space=space, ...)`` with method search's keys listed.

    ``space``: a registered name (a file in ``plugins`` may register it) or a
    ``SearchSpace``. ``task``: a task name, a data file or a mapping (as ``task:`` in a
    file). ``settings``: the keys of ``method: search``'s configuration, as an experiment
    file writes them, which the signature lists with their defaults
    (``recipes.search_config.SearchConfig``: ``plugins``, ``searcher``, ``evaluator``,
    ``objectives``, ``constraints``, ``n_trials``, ``final``, ``retrain``, ``one_shot``,
    ``data``, ``seed``, ``teacher``, ``workers``, ``storage``, ``timeout``, ``device``,
    ``precision``...; docs/search.md), checked by that class as a file is (an unknown
    key or a bad value is one line naming it); ``name`` defaults to ``search-<space>``.
    ``searcher`` and ``evaluator`` are a registered name (a plug-in's included) or
    ``{"name": ..., "settings": {...}}``; the searcher is checked as ``nas run
    --searcher`` checks it. ``device`` (``auto``: a CUDA GPU when there is one;
    ``cpu``, ``cuda``, ``cuda:N``) and ``precision`` (``fp32``, ``bf16``, ``fp16``) are the
    file's (:mod:`nas.device`). The run folder (default ``runs/<name>``) is what ``nas
    report`` and ``nas export --run`` read; ``resume=True`` continues an interrupted one.
    Progress bars show in a terminal and in a notebook.
    """
    folder, metrics = _start("search", "nas.search()", dict(
        space=space, task=task, **settings), run_dir=run_dir, resume=resume,
        progress=progress, data_dir=data_dir)
    return SearchResult(folder, metrics)


def run(method: str, *, task: str | Mapping[str, Any], run_dir: str | Path | None = None,
        resume: bool = False, progress: bool = True, data_dir: str | None = None,
        dry_run: bool = False, **settings: Any) -> RunResult | dict[str, Any]:
    """Run registered method ``method`` on ``task``, as ``nas run`` runs a file naming it
    (the same code, so the same checks: the method's ``validate``, its searcher, the run
    folder), and return its :class:`RunResult` (a :class:`SearchResult` after methods
    search and compress); ``dry_run=True`` returns ``nas run --dry-run``'s plan instead (a
    dict: the resolved configuration, data sizes, steps per stage, estimated time),
    training nothing and writing no folder.

    ``method``: ``adabert``, ``efficientbert``, ``tinybert``, ``mobilebert``,
    ``mixedvocab``, ``search``, ``compress`` or a plug-in's (an entry point, or a file in
    ``plugins=``, imported first). ``task``: a task name, a data file or a mapping (as
    ``task:`` in a file). ``run_dir``: default ``runs/<name>``; ``resume=True`` continues
    an interrupted run; ``progress``: progress bars; ``data_dir``: default
    ``$NAS_DATA_DIR``.

    ``settings``: the method's configuration keys, as its experiment file writes them,
    checked by its configuration class as a file is (an unknown key or a bad value is one
    line naming it). They are documented with each method: docs/adabert.md,
    docs/efficientbert.md, docs/tinybert.md, docs/mobilebert.md, docs/mixedvocab.md,
    docs/search.md, docs/compress.md (the shipped ``experiments/*.yaml`` are examples);
    a plug-in's are its configuration class's fields
    (``nas.methods.METHODS.get(NAME).config_class``). Every method has ``name`` (default
    ``METHOD``, or ``METHOD-SPACE`` when ``space=`` names one), ``teacher``, ``seed``,
    ``data``, ``teacher_finetune``, ``device`` and ``precision``. ``space`` may be a
    ``SearchSpace`` object; ``evaluator`` a name or ``{"name": ..., "settings": {...}}``;
    ``plugins`` one file or a list. ``searcher`` is the configuration's key where it has
    one, else ``nas run --searcher`` (``efficientbert``); either way it is checked as the
    command line checks it.
    """
    folder, result = _start(method, "nas.run()", dict(task=task, **settings),
                            run_dir=run_dir, resume=resume, progress=progress,
                            data_dir=data_dir, dry_run=dry_run)
    if dry_run:
        return result
    return (SearchResult if isinstance(result.get("final"), list) else RunResult)(folder, result)


def _start(method: str, where: str, settings: dict[str, Any], *, run_dir: str | Path | None,
           dry_run: bool = False, **options: Any) -> tuple[Path, dict[str, Any]]:
    """Method ``method`` run (or planned) from keywords: their mapping as a file would
    hold it (:func:`_experiment`), loaded and checked as ``nas run`` loads a file
    (:func:`nas.methods.method_config`, errors naming ``where``), then started as ``nas run``
    starts it (:func:`nas.methods.start_run`)."""
    from nas.methods import method_config, start_run

    data, searcher = _experiment(method, settings)
    chosen, config = method_config(data, where)
    return start_run(chosen, config, run_dir=run_dir, searcher=searcher, dry_run=dry_run,
                     run_dir_flag="run_dir", **options)


def _experiment(method: str, settings: dict[str, Any]) -> tuple[dict[str, Any], Any]:
    """The keywords as an experiment file's mapping (plain values, ``plugins`` a list, an
    ``evaluator`` name as ``{name: ...}``, a ``SearchSpace`` object registered by name,
    ``name`` by default ``METHOD`` or ``METHOD-SPACE``), and the ``searcher`` to give as
    ``--searcher`` would be: one the configuration has no key for (else ``None``)."""
    data = {k: _plain(v) for k, v in settings.items()}
    if "plugins" in data:
        data["plugins"] = _plugin_list(settings["plugins"])
    space = settings.get("space")
    if space is not None and not isinstance(space, (str, Mapping)):  # a SearchSpace
        data["space"] = _space_name(space, settings.get("workers", 1))
    default_name = f"{method}-{data['space']}" if isinstance(data.get("space"), str) else method
    data["name"] = data.pop("name", None) or default_name
    if isinstance(data.get("evaluator"), str):
        data["evaluator"] = {"name": data["evaluator"]}
    searcher = None
    if "searcher" in data and not _has_key(method, "searcher"):
        searcher = data.pop("searcher")
    return {**data, "method": method}, searcher


def _has_key(method: str, key: str) -> bool:
    """Whether registered method ``method``'s configuration has ``key`` (``True`` for a
    method not registered yet, a plug-in file's: its class checks the key)."""
    from nas.methods import METHODS

    if method not in METHODS:
        return True
    return key in {f.name for f in dataclasses.fields(METHODS.get(method).config_class)}


def _plugin_list(plugins: Any) -> list[str]:
    """``plugins=`` as a list of names: one file as a string or path is one plug-in (a
    string is a sequence too, and ``list("my_space.py")`` would be its characters)."""
    if isinstance(plugins, (str, os.PathLike)):
        return [os.fspath(plugins)]
    if not isinstance(plugins, (list, tuple)) or not all(
            isinstance(p, (str, os.PathLike)) for p in plugins):
        raise NasError(f"plugins={plugins!r}: expected a file path or module name, or a list "
                       "of them; e.g. plugins=['my_space.py']")
    return [os.fspath(p) for p in plugins]


def _plain(value: Any) -> Any:
    """A keyword's value as a file would hold it: tuples as lists, mappings as dicts."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def _space_name(space: Any, workers: int) -> str:
    """The registered name to search: a ``SearchSpace`` object's name, registered for this
    process (a different object under a taken name is refused)."""
    from nas.space import SPACES, SearchSpace

    if not isinstance(space, SearchSpace):
        raise NasError(f"space must be a registered name, a SearchSpace or a mapping (as a "
                       f"file's space:), got {type(space).__name__}")
    if workers > 1:
        raise NasError(f"space {space.name!r} is an object of this process; worker processes "
                       "cannot see it: define it in a file, pass plugins=[FILE] and its name")
    if space.name in SPACES and space.name not in _OBJECT_SPACES:
        raise NasError(f"space {space.name!r}: a registered space has that name; give your "
                       "SearchSpace another name")
    if space.name not in _OBJECT_SPACES:
        SPACES.add(space.name, lambda **_: _OBJECT_SPACES[space.name])
    _OBJECT_SPACES[space.name] = space
    return space.name


__all__ = ["RunResult", "SearchResult", "run", "search"]
