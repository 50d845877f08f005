"""The Python route to a search: :func:`search` runs ``method: search`` (``recipes/search.py``)
from keywords, as ``nas run`` does from a file, and returns a :class:`SearchResult`.

    import nas
    result = nas.search(space="tiny-cell", plugins=["examples/custom_space.py"],
                        task="examples/reviews.csv", searcher="tpe", n_trials=20,
                        constraints={"max_params": 2e6}, run_dir="runs/tiny")
    result.best, result.pareto, result.trials       # the chosen model, the front, a table
    result.export("tiny_hf", format="hf")

The module is ``nas.api`` so that no module shadows the function ``nas.search``. A
``SearchSpace`` object (a space made in a notebook cell) is searched without registration;
it lives in this process only, so it cannot be searched by ``workers`` > 1.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nas.errors import NasError

#: spaces given as objects, by name (their registered factory returns them)
_OBJECT_SPACES: dict[str, Any] = {}


@dataclass
class SearchResult:
    """What a finished search left in ``run_dir`` (read from it, so a result can also be
    opened later with :meth:`open`)."""

    run_dir: Path
    metrics: dict[str, Any] = field(repr=False)

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

    def export(self, directory: str | Path, format: str = "native", *,  # noqa: A002
               trial: int | str | None = None, overwrite: bool = False,
               quantize: str | None = None) -> Path:
        """The best final model (or study trial ``trial``'s model, ``"best"`` or a number)
        written to ``directory`` as ``native``, ``hf`` or ``onnx``; ``quantize="int8"``
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


def search(space: Any, *, task: str | Mapping[str, Any],
           plugins: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] = (),
           searcher: str = "tpe", evaluator: str | Mapping[str, Any] = "distilled-retrain",
           objectives: Sequence[str] = ("accuracy",),
           constraints: Mapping[str, float] | None = None, n_trials: int = 12,
           run_dir: str | Path | None = None, name: str | None = None, seed: int = 0,
           teacher: str | None = None, final: Mapping[str, Any] | None = None,
           resume: bool = False, progress: bool = True, data_dir: str | None = None,
           workers: int = 1, storage: str | None = None, timeout: float | None = None,
           device: str = "auto", precision: str = "fp32", **settings: Any) -> SearchResult:
    """Search ``space`` on ``task`` and retrain, score and export what ``final`` chooses.

    ``space``: a registered name (a file in ``plugins`` may register it) or a
    ``SearchSpace``. ``task``: a task name, a data file or a mapping (as ``task:`` in a
    file). ``evaluator``: a registered name, or ``{"name": ..., "settings": {...}}``.
    ``settings``: any other key of ``method: search`` (``retrain``, ``one_shot``, ``data``,
    ``teacher_finetune``, ``space_config``, ``multi_trial``...). The run folder (default
    ``runs/<name>``) is what ``nas report`` and ``nas export --run`` read; ``resume=True``
    continues an interrupted one. Progress bars show in a terminal and in a notebook.
    ``device`` (``auto``: a CUDA GPU when there is one; ``cpu``, ``cuda``, ``cuda:N``) and
    ``precision`` (``fp32``, ``bf16``, ``fp16``: mixed-precision training) are the
    experiment file's ``device:`` and ``precision:`` (:mod:`nas.device`).
    """
    from nas.methods import RunOptions, method_config
    from nas.rundir import run_folder

    space_name = _space_name(space, workers)
    data: dict[str, Any] = {
        "method": "search", "name": name or f"search-{space_name}", "task": task,
        "space": space_name, "plugins": _plugin_list(plugins), "searcher": searcher,
        "evaluator": ({"name": evaluator} if isinstance(evaluator, str) else dict(evaluator)),
        "objectives": list(objectives), "constraints": dict(constraints or {}),
        "n_trials": n_trials, "seed": seed, "teacher": teacher, "workers": workers,
        "storage": storage, "timeout": timeout, "device": device, "precision": precision,
        **settings}
    if final is not None:
        data["final"] = dict(final)
    method, config = method_config(data, "nas.search()")
    folder = run_folder(run_dir, Path("runs") / config.name, "run_dir")
    if not logging.getLogger().handlers:  # a notebook or a script without logging set up
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    metrics = method.run(config, RunOptions(run_dir=folder, data_dir=data_dir,
                                            searcher=searcher, resume=resume,
                                            progress=progress))
    return SearchResult(folder, metrics)


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


def _space_name(space: Any, workers: int) -> str:
    """The registered name to search: ``space`` itself, or a ``SearchSpace`` object's name,
    registered for this process (a different object under a taken name is refused)."""
    from nas.space import SPACES, SearchSpace

    if isinstance(space, str):
        return space
    if not isinstance(space, SearchSpace):
        raise NasError(f"space must be a registered name or a SearchSpace, got "
                       f"{type(space).__name__}")
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


__all__ = ["SearchResult", "search"]
