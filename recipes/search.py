"""Search a space of your own (``method: search``): any registered space, any searcher,
any evaluator, then the chosen architectures retrained with distillation and exported.

The steps, in order (:meth:`Search.stages`):

1. **teacher** — fine-tuned on the task (cached by its settings), as in every method;
2. **data** — the training subset, dev and the report split; ``data.val_fraction`` of
   the training subset is held out to score candidates, so that dev chooses nothing
   the search saw and the report split chooses nothing at all;
3. **search** —
   * a multi-trial searcher (``random``, ``tpe``, ``nsga2``, ``gp``, ``lanas``, or one a
     plug-in registers) proposes architectures on an Optuna study; ``evaluator`` scores
     each on the held-out part (default ``distilled-retrain``: the child trained from
     scratch on the rest with knowledge distillation from the teacher's logits, Hinton
     et al., 2015); ``objectives`` adds predicted or counted costs as minimised
     objectives; ``constraints`` go to the sampler as Optuna constraints;
   * or the one-shot ``differentiable`` searcher (GDAS, Dong & Yang 2019; AdaBERT, Chen
     et al. 2020, §3.2): one supernet trained with hard Gumbel samples of every op and
     depth choice, the KD loss and an optional efficiency term, then its argmax;
   * or a planned searcher (one that proposes a fixed list from what the run hands it,
     :class:`searchers.base.PlannedSearcher`): its list queued on the study and scored
     by the evaluator as any searcher's trials;
4. **final** — what ``final.select`` picks (the best trial, the Pareto front, or the
   front points nearest given speed-ups over the teacher) retrained on the whole training
   subset with ``final.seeds`` seeds, scored on dev and the report split;
5. **export** — the first chosen architecture at ``RUN/export``, every chosen one at
   ``RUN/final/<tag>/export``.

A space file next to the experiment needs no install: ``plugins: [my_space.py]``
(:mod:`nas.plugins`). :func:`nas.search` is the same run from Python.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from nas.config import ConfigError, are_ratios, check_fields, from_dict
from nas.device import table_rows
from nas.distill.losses import kd_loss
from nas.errors import NasError
from nas.methods import RunOptions, register_method
from nas.quantize import MAX_INT8_DROP, QUANTIZATIONS
from nas.rundir import RunDir
from nas.train import TrainSettings, loop_settings
from recipes.common import (
    MethodConfig,
    Recipe,
    TaskContext,
    load_typed,
    mean_std,
    report_reference,
    run_study_stage,
    worker_options,
)

log = logging.getLogger("nas.search")

#: what ``objectives:`` may list: the evaluator's validation score, then costs to minimise
OBJECTIVES = ("accuracy", "latency_ms", "params", "flops")
SELECTIONS = ("best", "pareto", "latency_ratios", "all")
#: the parts this recipe can hand an evaluator (:func:`evaluators.build.build_evaluator`)
PROVIDED_PARTS = ("space", "train_batches", "steps_per_epoch", "loss", "test_batches", "init",
                  "seed", "workdir", "latency_repeats", "progress", "latency_fn", "inner")
#: the run parts this recipe can hand a planned searcher (:meth:`Search.searcher_parts`):
#: the space, the study's budget (hard limits, costed as any proposal is), the trial
#: count, the constraints as numbers and the speed-ups ``final.select: latency_ratios``
#: asks for
SEARCHER_PARTS = ("space", "budget", "n_trials", "constraints", "final_ratios")


# ---------------------------------------------------------------------------- config


class _DefaultSettings(dict):
    """``evaluator.settings`` when the file gives none (told apart from given ones)."""


@dataclass
class EvaluatorChoice:
    """The evaluator of every trial: a registered name and its settings (for
    ``distilled-retrain``, the training loop's settings). Settings left out are a
    training evaluator's one epoch at ``lr`` 1e-3, and none for another evaluator (which
    would refuse the training keys)."""

    name: str = "distilled-retrain"
    settings: dict = field(default_factory=lambda: _DefaultSettings(epochs=1, lr=1e-3))

    def __post_init__(self) -> None:
        if isinstance(self.settings, _DefaultSettings) and not is_training_evaluator(self.name):
            self.settings = {}
        self.settings = dict(self.settings)  # a plain mapping, as the snapshot writes it


def is_training_evaluator(name: str) -> bool:
    """Whether the registered evaluator ``name`` takes a training loop's settings (a
    :class:`~nas.train.TrainSettings`); an unknown name is left to
    :func:`check_evaluator`, which names the registered ones."""
    from evaluators.base import EVALUATORS

    if name not in EVALUATORS:
        return True
    typed = EVALUATORS.get(name).settings_type()
    return isinstance(typed, type) and issubclass(typed, TrainSettings)


@dataclass
class Constraints:
    """Hard limits on every architecture the search may propose: parameters, FLOPs at the
    run's length, and batch-1 latency predicted by the latency model on this machine."""

    max_params: float | None = None
    max_flops: float | None = None
    max_latency_ms: float | None = None

    def __post_init__(self) -> None:
        check_fields([(name, getattr(self, name) is None or getattr(self, name) > 0,
                       "None or a positive number")
                      for name in ("max_params", "max_flops", "max_latency_ms")], self)


@dataclass
class Distillation(TrainSettings):
    """Training with knowledge distillation from the teacher's logits (Hinton et al., 2015):
    (1 − α)·CE(labels) + α·T²·CE(softmax(z_T / T), softmax(z_S / T))."""

    epochs: int = 2
    temperature: float = 2.0
    alpha: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        check_fields([("temperature", self.temperature > 0, "a positive number"),
                      ("alpha", 0.0 <= self.alpha <= 1.0, "in [0, 1]")], self)


@dataclass
class OneShot:
    """A one-shot searcher's supernet training: ``epochs`` over the training part, weight
    SGD at ``lr`` (cosine to ``lr_min``); for ``differentiable``, architecture Adam at
    ``arch_lr``, α frozen for the first ``arch_warmup`` of the steps, τ lowered every
    ``tau_every`` steps and ``beta`` times the efficiency loss on the space's own op costs
    (0: off); for ``sampled-supernet``, ``candidates`` sub-networks scored with their
    inherited weights."""

    epochs: int = 1
    batch_size: int = 32
    lr: float = 2e-2
    lr_min: float = 5e-4
    arch_lr: float = 3e-4
    arch_warmup: float = 0.0
    tau_every: int = 100
    beta: float = 0.0
    checkpoint_every: int = 200
    candidates: int = 16

    def __post_init__(self) -> None:
        check_fields([("epochs", self.epochs >= 1, "an integer >= 1"),
                      ("batch_size", self.batch_size >= 1, "an integer >= 1"),
                      ("beta", self.beta >= 0, "a number >= 0"),
                      ("candidates", self.candidates >= 1, "an integer >= 1"),
                      ("arch_warmup", 0.0 <= self.arch_warmup < 1.0, "in [0, 1)")], self)


@dataclass
class FinalExport:
    """How every final point is exported (``final.export``): ``format`` (default: the
    method's: ``native``; compress: ``hf``), ``quantize: int8`` (with ``format: onnx``:
    ONNX Runtime's dynamic int8 graph, :mod:`nas.quantize`, compared with fp32 on dev)
    and ``max_int8_drop``, the dev points it may lose before its most sensitive layers
    stay fp32; ``trim_vocab: true`` keeps only the word pieces of the task's train texts
    (and the special tokens) in the tokenizer and embedding rows (:mod:`nas.vocab_trim`),
    scored before and after on the report split."""

    format: str | None = None
    quantize: str | None = None
    max_int8_drop: float = MAX_INT8_DROP
    trim_vocab: bool = False

    def __post_init__(self) -> None:
        from nas.export import FORMATS

        check_fields([("format", self.format in (None, *FORMATS), " or ".join(FORMATS)),
                      ("quantize", self.quantize in (None, *QUANTIZATIONS)
                       and (self.quantize is None or self.format == "onnx"),
                       "int8, with format: onnx"),
                      ("max_int8_drop", isinstance(self.max_int8_drop, int | float)
                       and self.max_int8_drop >= 0, "a number of points >= 0")], self)


@dataclass
class FinalSettings:
    """What gets the full retrain: ``best`` (the ``n`` best trials), ``pareto`` (up to ``n``
    points of the front, spread along the first cost) or ``latency_ratios`` (per ratio
    r, the front point whose latency is nearest the teacher's / r; needs ``latency_ms``
    among the objectives) or ``all`` (every completed trial, in trial order: for a
    study of a few queued picks, as compress's truncation arm); each retrained with
    ``seeds`` seeds.

    ``train_examples``: what the final retrain trains on. ``None`` (the default): the
    run's training subset (``data.max_train_examples``), as the search did; ``all``: the
    task's whole train split; an integer N: N rows of it drawn with the run's seed
    (stage ``final-data``). Only the last stage reads it, so the sort, the held-out part
    and the search stay as they were: candidates are chosen cheaply on the subset, and
    the few chosen ones distil on more text (Minitron, Sreenivas et al. 2024, §3: a
    pruned model recovers with a short distillation on more tokens)."""

    select: str = "best"
    n: int = 1
    ratios: list = field(default_factory=list)
    seeds: int = 1
    train_examples: int | str | None = None
    export: FinalExport = field(default_factory=FinalExport)

    def __post_init__(self) -> None:
        check_fields([("select", self.select in SELECTIONS, " or ".join(SELECTIONS)),
                      ("n", self.n >= 1, "an integer >= 1"),
                      ("seeds", self.seeds >= 1, "an integer >= 1"),
                      ("ratios", are_ratios(self.ratios, above_one=True)
                       and (self.select != "latency_ratios" or bool(self.ratios)),
                       "speed-ups over the teacher, numbers > 1 (e.g. [2, 5]); "
                       "select latency_ratios needs at least one"),
                      ("train_examples", self.train_examples in (None, "all") or (
                          isinstance(self.train_examples, int)
                          and not isinstance(self.train_examples, bool)
                          and self.train_examples >= 2),
                       "all, or an integer >= 2 (rows of the train split); leave it out "
                       "for the run's training subset")],
                     self)


@dataclass
class SearchConfig(MethodConfig):
    """``method: search``: see the module docstring for the steps and
    ``examples/custom_search.yaml`` for a file."""

    #: the parts this method's context can hand an evaluator (a subclass whose context
    #: gives more, as compress's sorted-teacher supernet, widens it)
    provided_parts: ClassVar[tuple[str, ...]] = PROVIDED_PARTS
    #: the run parts this method's context can hand a planned searcher (compress adds
    #: the sorted teacher's blockwise table and truncations)
    provided_searcher_parts: ClassVar[tuple[str, ...]] = SEARCHER_PARTS

    space: str = ""
    space_config: dict = field(default_factory=dict)
    plugins: list = field(default_factory=list)
    #: a registered searcher's name, or ``{name: NAME, settings: {...}}`` (its settings;
    #: a multi-trial searcher's are its sampler's options, as ``multi_trial.samplers``)
    searcher: str | dict = "tpe"
    evaluator: EvaluatorChoice = field(default_factory=EvaluatorChoice)
    objectives: list = field(default_factory=lambda: ["accuracy"])
    constraints: Constraints = field(default_factory=Constraints)
    embedding_init: str = "teacher-pca"
    n_trials: int = 12
    timeout: float | None = None
    workers: int = 1
    storage: str | None = None
    multi_trial: dict = field(default_factory=dict)
    one_shot: OneShot = field(default_factory=OneShot)
    final: FinalSettings = field(default_factory=FinalSettings)
    retrain: Distillation = field(default_factory=Distillation)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not str(self.space).strip():
            raise ValueError("space: name a registered space (nas spaces list), or one a file "
                             "in plugins: registers")
        from nas.distill.init import EMBEDDING_INITS

        check_fields([("n_trials", self.n_trials >= 1, "an integer >= 1"),
                      ("embedding_init", self.embedding_init in EMBEDDING_INITS,
                       " or ".join(EMBEDDING_INITS)),
                      ("workers", self.workers >= 1, "an integer >= 1"),
                      ("timeout", self.timeout is None or self.timeout > 0,
                       "None or a positive number of seconds"),
                      ("objectives", bool(self.objectives) and self.objectives[0] == "accuracy",
                       "a list starting with accuracy (the evaluator's validation score), "
                       f"then costs among {', '.join(OBJECTIVES[1:])}")], self)
        unknown = [o for o in self.objectives if o not in OBJECTIVES]
        if unknown:
            raise ValueError(f"objectives: unknown objective {unknown[0]!r}; use "
                             f"{', '.join(OBJECTIVES)}")
        if self.final.select == "latency_ratios" and "latency_ms" not in self.objectives:
            raise ValueError("final.select latency_ratios needs latency_ms among the objectives")
        self.check_searcher_name()
        owned = {"n_trials", "max_params", "max_flops", "max_latency_ms", "extra_objectives"}
        taken = sorted(owned & set(self.multi_trial))
        if taken:
            raise ValueError(f"multi_trial.{taken[0]}: method search sets it from the top-level "
                             "n_trials, constraints and objectives; write it there")
        self.study_settings()  # the remaining multi_trial keys, checked now
        self.check_space()
        check_evaluator(self.evaluator.name, self.space, self.provided_parts)
        check_evaluator_settings(self.evaluator.name, self.evaluator.settings, self.retrain)

    @property
    def searcher_name(self) -> str:
        """The name in ``searcher:`` (a bare name or ``{name, settings}``)."""
        from searchers.base import searcher_choice

        return searcher_choice(self.searcher)[0]

    def resolve_searcher(self, name: str | None = None, where: str = "searcher:") -> Any:
        """The searcher ``name`` (default: the file's ``searcher:``; ``nas run --searcher``
        passes its own) as :func:`searchers.base.resolve_searcher` finds it, with its
        settings: the file's ``{name, settings}`` over the older sections that held them
        (:meth:`legacy_searcher_settings`). A planned searcher whose run parts this
        method cannot hand is refused in one line."""
        from searchers.base import resolve_searcher, searcher_choice

        own_name, own = searcher_choice(self.searcher)
        name = name or own_name
        return resolve_searcher(name, settings={**self.legacy_searcher_settings(name),
                                                **(own if name == own_name else {})},
                                provided=self.provided_searcher_parts, where=where)

    def legacy_searcher_settings(self, name: str) -> dict[str, Any]:
        """Settings of searcher ``name`` written where files before ``searcher: {name,
        settings}`` put them, still read: a multi-trial searcher's
        ``multi_trial.samplers`` entry, a one-shot searcher's fields of ``one_shot:``
        (compress adds its ``knapsack:`` section)."""
        from dataclasses import fields, is_dataclass

        from searchers.base import SEARCHERS

        if name in SEARCHERS and SEARCHERS.kind_of(name) == "one-shot":
            typed = SEARCHERS.get(name).settings_type()
            if typed is None or not is_dataclass(typed):
                return {}  # the one_shot: values it takes come as keywords (one_shot())
            own = {f.name for f in fields(typed)}
            return {k: v for k, v in _one_shot_settings(self.one_shot).items() if k in own}
        return dict(self.multi_trial.get("samplers", {}).get(name) or {})

    def check_searcher_name(self, name: str | None = None, where: str = "searcher:") -> None:
        """``name`` (default: the file's ``searcher:``): a registered searcher (an unknown
        name lists the close ones) with valid settings; a planned one needs run parts
        this method hands (else refused in one line) and a run it can serve
        (:meth:`check_planned_searcher`)."""
        resolved = self.resolve_searcher(name, where)
        if resolved.kind == "planned":
            self.check_planned_searcher(resolved.name, resolved.cls)

    def check_planned_searcher(self, name: str, cls: Any) -> None:
        """What a planned searcher's run must meet, refused in one line: one process
        (its picks are queued on one study) and no seed architectures (its study runs
        its own picks only)."""
        if self.workers != 1:
            raise ConfigError(f"workers: searcher {name} runs its picks in one process; "
                              "set workers: 1")
        if self.multi_trial.get("seeds"):
            raise ConfigError(f"multi_trial.seeds: searcher {name}'s study runs its own "
                              "picks only; drop the seed architectures")

    def study_settings(self) -> Any:
        """The study's settings: ``multi_trial`` plus the trial count, the constraints and
        the cost objectives."""
        from searchers.base import searcher_choice, searcher_names
        from searchers.settings import StudySettings

        c = self.constraints
        name, own = searcher_choice(self.searcher)
        samplers = dict(self.multi_trial.get("samplers") or {})
        if own and name in searcher_names("multi-trial"):  # searcher: {name, settings}
            samplers[name] = {**dict(samplers.get(name) or {}), **own}
        settings = {**self.multi_trial, **({"samplers": samplers} if samplers else {}),
                    "n_trials": self.n_trials,
                    "max_params": c.max_params, "max_flops": c.max_flops,
                    "max_latency_ms": c.max_latency_ms,
                    "extra_objectives": list(self.objectives[1:])}
        return from_dict(StudySettings, settings, "multi_trial")

    def build_space(self, num_labels: int, vocab_size: int | None = None) -> Any:
        """The space, built with ``space_config`` and the task's label count (and the
        teacher tokenizer's vocabulary size) where its factory takes them."""
        from nas.space import SPACES, get_space

        factory = SPACES.get(self.space)
        accepts = _parameters(factory)
        given = dict(self.space_config)
        for key, value in (("num_labels", num_labels), ("vocab_size", vocab_size)):
            if value is not None and key not in given and (key in accepts or "**" in accepts):
                given[key] = value
        return get_space(self.space, **given), given

    def check_space(self) -> None:
        """The space exists (a missing one names ``plugins:``), builds, and has choices."""
        from nas.errors import RegistryError

        try:
            space, _ = self.build_space(2)
        except RegistryError as err:
            raise ConfigError(f"space: {err}; a space defined in a file of yours is found "
                              "with plugins: [my_space.py] (or nas run --plugin my_space.py)"
                              ) from None
        except NasError as err:
            raise ConfigError(f"space_config: {err}") from None
        if not space.choices():
            raise ConfigError(f"space {self.space!r} has no choices: there is nothing to "
                              "search; use it as a fixed design instead")


def _parameters(factory: Any) -> set[str]:
    """The keyword names a space factory accepts (``**`` when it takes any)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {"**"}
    return {"**" if p.kind is p.VAR_KEYWORD else p.name for p in params}


def load_config(path: str | Path, overrides: Any = ()) -> SearchConfig:
    """A generic search's typed configuration (``method: search``)."""
    return load_typed(path, Search, overrides)


# --------------------------------------------------------------------- the context


class SearchContext(TaskContext[SearchConfig]):
    """Stages 1–2 plus the space (built for the task's labels and the teacher's
    vocabulary), the held-out part that scores candidates, and the training pieces every
    evaluator shares."""

    stage_count = 5

    def prepare(self) -> SearchContext:
        super().prepare()
        self.search_train, self.search_val = self.carve_validation()
        self.space, self.space_kwargs = self.make_space()
        self._check_head()
        return self

    def make_space(self) -> tuple[Any, dict[str, Any]]:
        """``(space, its factory's arguments)``: the configured space, built for the
        task's labels and the teacher's vocabulary (compress builds it from the teacher)."""
        return self.cfg.build_space(self.train.num_labels, len(self.tokenizer))

    def final_train(self) -> Any:
        """What the final retrain trains on (:class:`FinalSettings` ``train_examples``):
        the training subset, the whole train split or a seeded N rows of it; the cut is
        logged once."""
        n = self.cfg.final.train_examples
        if n is None:
            return self.train
        if not hasattr(self, "_final_train"):
            from recipes.common import seeded_subset

            self._final_train = self.full_train if n == "all" else seeded_subset(
                self.full_train, int(n), self.seed, "final-data", "final.train_examples")
            self.run.log("final_data", rows=len(self._final_train),
                         of=len(self.full_train), setting=n)
        return self._final_train

    def teacher_latency_ms(self) -> float | None:
        """The teacher's batch-1 latency on the scale of the study's ``latency_ms``, which
        ``final.select: latency_ratios`` divides by each ratio: here the one timed in
        stage 1, as each candidate's is timed by its evaluator."""
        latency = (self.run.load_json("teacher.json") or {}).get("latency", {})
        return latency.get("batch1", {}).get("median_ms")

    def study_latency_fn(self) -> Any:
        """The study's ``latency_ms`` (objective, target): ``None`` here, the candidate's
        latency as its evaluator measured it; compress can predict it instead."""
        return None

    def evaluator_parts(self, wanted: set[str]) -> dict[str, Any]:
        """Parts beyond the training pieces that this context gives an evaluator asking
        for ``wanted`` (none here; compress adds the sorted teacher's supernet and, when
        asked, its blockwise table)."""
        return {}

    def _check_head(self) -> None:
        """The space's classifier answers the task's labels (a space passed as an object,
        or one whose factory takes no ``num_labels``, may not)."""
        from nas.builder import build_child
        from nas.cost import batch_for

        with torch.no_grad():  # ids within the space's vocabulary (a small teacher's too)
            out = build_child(self.space, self.space.default()).eval()(
                batch_for(self.space, 1, 8))
        found, wanted = int(out.logits.shape[-1]), self.train.num_labels
        if found != wanted:
            raise ConfigError(f"space {self.space.name!r}: its head gives {found} outputs and "
                              f"the task has {wanted} labels; build it with num_labels={wanted}")

    def init_model(self, model: Any) -> None:
        """A fresh child's (or supernet's) start: its word table from the teacher's
        principal components (``embedding_init: teacher-pca``; a student learns little of
        a 30k-word table from a small task set), else as built."""
        if self.cfg.embedding_init == "teacher-pca":
            if not hasattr(self, "_embeddings"):
                from nas.distill.init import TeacherEmbeddings

                self._embeddings = TeacherEmbeddings(self.teacher.model_dir)
            self._embeddings(model)

    def export_info(self) -> dict[str, Any]:
        # how `nas export --run` rebuilds a trial's space: the factory's own arguments
        return {**super().export_info(), "space_kwargs": self.space_kwargs}

    def distillation(self, data: Any, settings: Distillation, stage: str) -> dict[str, Any]:
        """The training parts of an evaluator over ``data``: seeded batches, steps per
        epoch and the KD loss against the teacher's logits on ``data`` (``loss`` on the
        model, ``logits_loss`` on logits an evaluator computed itself)."""
        logits = self.teacher_logits(data)

        def logits_loss(out: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            return kd_loss(out, table_rows(logits, batch["index"], out), batch["labels"],
                           settings.temperature, settings.alpha)

        def loss(model: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            return logits_loss(model(batch).logits, batch)

        return {"train_batches": self.train_batches(data, settings.batch_size, stage),
                "steps_per_epoch": math.ceil(len(data) / settings.batch_size), "loss": loss,
                "logits_loss": logits_loss}

    def evaluator(self, name: str, settings: Mapping[str, Any], *, data: Any,
                  val_batches: list[Any] | None, test: bool, workdir: Path, seed: int,
                  stage: str) -> Any:
        """The registered evaluator ``name`` built with the parts it asks for; one this
        recipe cannot give (a warm-up supernet, a teacher fit layer...) is refused in
        one line."""
        from evaluators.base import EVALUATORS, FullTrainingData
        from evaluators.build import build_evaluator

        cls = EVALUATORS.get(name)
        check_evaluator(name, self.space.name, self.cfg.provided_parts)
        required, optional = cls.parts()
        given, train = evaluator_settings(name, settings, self.cfg.retrain)
        wanted = {*required, *optional}
        pool: dict[str, Any] = {
            "space": self.space, "seed": seed, "workdir": workdir, "init": self.init_model,
            "latency_repeats": self.cfg.latency_repeats, "progress": self.progress,
            "test_batches": self.report_batches_or_none() if test else None,
            **(self.distillation(data, train, stage) if wanted & {"loss", "logits_loss"}
               else {}),
            **self.evaluator_parts(wanted)}
        parts = {p: pool[p] for p in (*required, *optional) if p in pool}
        scoring = FullTrainingData(**self.scoring_fields(val_batches),
                                   test_batches=pool["test_batches"])
        return build_evaluator(name, given, scoring, **parts)


def evaluator_settings(name: str, settings: Mapping[str, Any], retrain: Distillation
                       ) -> tuple[dict[str, Any], Distillation]:
    """``(given, train)``: the settings the registered evaluator ``name`` is built with
    from the file's ``settings``, and the distillation (over ``retrain:``) that trains its
    candidates. A training evaluator (settings a :class:`~nas.train.TrainSettings`) reads
    the loop's keys and the KD keys (``temperature``, ``alpha``: this recipe's) over
    ``retrain:``, and its own keys (inherited-kd's ``hidden_weight``) as given; any other
    key is refused, naming the evaluator and its keys, since it would be dropped unseen
    (a typo such as ``epoch:``). Another evaluator gets ``settings`` as they are, which
    :func:`~evaluators.build.build_evaluator` checks against its settings type."""
    from evaluators.base import EVALUATORS

    if not is_training_evaluator(name):
        return dict(settings), Distillation(**_as_dict(retrain))
    kd = Distillation.__dataclass_fields__
    own = EVALUATORS.get(name).settings_type().__dataclass_fields__  # type: ignore[union-attr]  # is_training_evaluator(name): a TrainSettings
    unknown = sorted(set(settings) - set(kd) - set(own))
    if unknown:
        raise ConfigError(f"evaluator.settings: evaluator {name!r} has no setting "
                          f"{unknown[0]!r}; its settings: {', '.join(sorted({*kd, *own}))}")
    train = from_dict(Distillation, {**_as_dict(retrain),
                                     **{k: v for k, v in settings.items() if k in kd}},
                      f"evaluator.settings ({name!r})")
    loop = TrainSettings.__dataclass_fields__
    extra = {k: v for k, v in settings.items() if k in own and k not in loop}
    return {**_as_dict(loop_settings(train)), **extra}, train


def check_evaluator_settings(name: str, settings: Mapping[str, Any], retrain: Distillation
                             ) -> None:
    """The evaluator's settings, typed and range-checked as the evaluator will be built
    (:func:`evaluator_settings`, then its settings type), before any stage: an unknown
    key or a refused value (``epochs: 0``) is one line naming the evaluator and the key
    instead of a failure at the first trial."""
    from evaluators.base import EVALUATORS

    given, _ = evaluator_settings(name, settings, retrain)
    typed = EVALUATORS.get(name).settings_type()
    where = f"evaluator.settings ({name!r})"
    if typed is None:
        if given:
            raise ConfigError(f"{where}: unknown key {sorted(given)[0]!r}; evaluator {name!r} "
                              "takes no settings")
        return
    from_dict(typed, given, where)


def check_evaluator(name: str, space: str, provided: tuple[str, ...] = PROVIDED_PARTS) -> None:
    """An evaluator this recipe can build: one that needs a part it cannot give (a
    warm-up supernet with a teacher fit layer, a layer-wise transfer's teacher, the
    sorted teacher's supernet outside method compress...) is refused in one line, before
    any stage."""
    from evaluators.base import EVALUATORS

    required, _ = EVALUATORS.get(name).parts()
    missing = [p for p in required if p not in provided]
    if missing:
        raise ConfigError(
            f"evaluator {name!r} cannot score space {space!r} in method search: it needs "
            f"{', '.join(missing)}, which this method does not provide (it trains each child "
            "by distillation from the teacher's logits); use distilled-retrain, or the "
            f"method built for {name}")


def _as_dict(settings: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(settings)


# ------------------------------------------------------------------------- method


@register_method("search")
class Search(Recipe[SearchConfig]):
    """``method: search`` — any space, any searcher, any evaluator (module docstring)."""

    config_class = SearchConfig
    context_class = SearchContext
    #: the exports' format (:func:`nas.export.export`): ``native`` (the runtime as remote
    #: code); compress asks for ``hf``, stock transformers where the shape allows
    export_format: ClassVar[str] = "native"

    def final_evaluator(self, ctx: SearchContext) -> tuple[str, dict[str, Any]]:
        """The final retrain's evaluator and settings (over ``retrain:``): the distilled
        retrain from scratch (compress: from the inherited weights)."""
        return "distilled-retrain", {}

    def default_searcher(self) -> str | None:
        return None  # the file's `searcher:` (default tpe)

    def check_searcher(self, searcher: Any) -> str | None:
        """Any registered searcher of any kind (plug-ins' included: the command line
        loads the experiment's plug-ins first), named or written ``{name, settings}``; a
        planned one whose run parts this method cannot hand is refused in one line.
        Returns the name."""
        if searcher is None:
            return None
        from searchers.base import resolve_searcher

        return resolve_searcher(searcher, provided=self.config_class.provided_searcher_parts,
                                where="--searcher").name

    def searcher_of(self, config: SearchConfig, options: RunOptions) -> str:
        return options.searcher or config.searcher_name

    def done_fields(self, config: SearchConfig, options: RunOptions) -> dict[str, Any]:
        return {"searcher": self.searcher_of(config, options)}

    def prepared(self, config: SearchConfig, options: RunOptions, **extra: Any) -> Any:
        # before stage 1: --searcher checked against the file as `searcher:` is, and a
        # constraint no architecture meets, are answered now
        if options.searcher:
            config.check_searcher_name(options.searcher, "--searcher")
        self.check_feasible(config, options)
        return super().prepared(config, options, **extra)

    def check_feasible(self, config: SearchConfig, options: RunOptions) -> None:
        """A constraint no architecture meets is refused in one line before stage 1
        (:func:`searchers.feasibility.check_feasible`: a few thousand architectures
        costed by the cost model). A latency limit calibrates the latency model for the
        space now if this machine's table has none; the note goes to the run log at
        stage 3."""
        from nas.latency import latency_source
        from searchers.feasibility import InfeasibleConstraintError, check_feasible

        space, _ = config.build_space(2)
        latency_fn = None
        if config.constraints.max_latency_ms is not None:
            latency_fn = self.latency_model(space, config.data.max_seq_len)
        try:
            check_feasible(space, config.study_settings(), seq_len=config.data.max_seq_len,
                           seed=config.seed, latency_fn=latency_fn)
        except InfeasibleConstraintError as err:
            # a latency limit refused on predictions: say which table made them, and how
            source = latency_source(latency_fn) if "max_latency_ms" in str(err) else None
            if source is None:
                raise
            raise InfeasibleConstraintError(f"{err}; {source}") from None

    def latency_model(self, space: Any, seq_len: int) -> Any:
        """This machine's latency predictor for ``space`` (calibrated once and cached when
        its table has none: :func:`nas.latency.space_predictor`); what it did is logged
        and kept for the run log (:attr:`latency_notes`)."""
        from nas.latency import space_predictor

        if not hasattr(self, "latency_notes"):
            self.latency_notes: list[str] = []

        def note(message: str) -> None:
            log.info(message)
            self.latency_notes.append(message)

        return space_predictor(space, seq_len=seq_len, log=note)

    def stages(self, ctx: SearchContext) -> dict[str, Any]:
        search, chosen = self.search_stage(ctx, self.searcher_of(ctx.cfg, ctx.options))
        final = self.final(ctx, chosen)
        return {"search": search, "final": final, "searched": final[0]["seeds"][0]}

    def search_stage(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """Stage 3: ``(summary, [(tag, architecture, trial number)])``, by the searcher's
        kind: a one-shot search, a planned list queued on the study, or a study."""
        from searchers.base import SEARCHERS

        kind = SEARCHERS.kind_of(name)
        if kind == "one-shot":
            return self.one_shot(ctx, name)
        if kind == "planned":
            return self.planned(ctx, name)
        return self.multi_trial(ctx, name)

    # -- stage 3 -------------------------------------------------------------------
    def planned(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """A planned searcher: its list, from the run parts it asks for
        (:meth:`searcher_parts`), queued on the run's study, one trial each, scored by
        the configured evaluator; what it reports goes to the run log and the summary
        (under its name)."""
        with ctx.timed(name):
            plan = self.plan_of(ctx, name)
        seconds = ctx.seconds[name]
        ctx.run.log(name, **plan.info, seconds=seconds)
        ctx.stage(3, "%s: %d architecture(s) planned, %.2f s", name, len(plan.queue), seconds)
        summary, chosen = self.run_queue(ctx, name, plan.queue)
        if plan.info:
            summary[name] = {**plan.info, "seconds": seconds}
        return summary, chosen

    def plan_of(self, ctx: SearchContext, name: str) -> Any:
        """The :class:`~searchers.base.Plan` of the planned searcher ``name``, with the
        file's settings, over the run parts it asks for."""
        searcher = ctx.cfg.resolve_searcher(name).build()
        required, optional = searcher.parts()
        parts = self.searcher_parts(ctx, {*required, *optional})
        return searcher.plan(**{p: parts[p] for p in (*required, *optional) if p in parts})

    def searcher_parts(self, ctx: SearchContext, wanted: set[str]) -> dict[str, Any]:
        """The run parts a planned searcher asks for (``SEARCHER_PARTS``), each built only
        when wanted (the budget's latency model calibrates once)."""
        from searchers.optuna_bridge import Budget

        cfg = ctx.cfg
        limits = cfg.study_settings().budget_kwargs
        parts: dict[str, Any] = {"space": ctx.space, "n_trials": cfg.n_trials,
                                 "constraints": dict(limits),
                                 "final_ratios": [float(r) for r in cfg.final.ratios]
                                 if cfg.final.select == "latency_ratios" else []}
        if "budget" in wanted:
            # the latency model's notes reach the run log when the study starts
            latency_fn = (self.latency_model(ctx.space, ctx.max_seq_len)
                          if limits["max_latency_ms"] is not None else None)
            parts["budget"] = Budget(seq_len=ctx.max_seq_len, latency_fn=latency_fn, **limits)
        return parts

    def run_queue(self, ctx: SearchContext, name: str, queue: Sequence[tuple[str, Any]]
                  ) -> tuple[dict[str, Any], list[Any]]:
        """Architectures a method or a planned searcher chose, as the run's study, one
        trial each (:mod:`searchers.queued`)."""
        from searchers.queued import QueuedSearcher

        settings = replace(ctx.cfg.study_settings(), n_trials=len(queue))
        return self.multi_trial(ctx, name, factory=QueuedSearcher(name), queue=queue,
                                settings=settings)

    # -- stage 3 -------------------------------------------------------------------
    def multi_trial(self, ctx: SearchContext, name: str, *, factory: Any = None,
                    queue: Sequence[tuple[str, Any]] = (), settings: Any = None
                    ) -> tuple[dict[str, Any], list[Any]]:
        """The study: each proposal scored on the held-out part by the evaluator.
        ``factory``, ``queue`` and ``settings``: a method's own picks run as the study's
        trials (:func:`recipes.common.run_study_stage`), with the study's settings."""
        from functools import partial

        from searchers.loop import StudyOptions

        cfg = ctx.cfg
        settings = settings or cfg.study_settings()
        given = ctx.options.study or StudyOptions()
        study_options = replace(given, timeout=given.timeout or cfg.timeout,
                                storage=given.storage or cfg.storage,
                                workers=given.workers if given.workers != 1 else cfg.workers)
        ctx.options = replace(ctx.options, study=study_options)
        ctx.stage(3, "%s search over %s (%s architectures), %s, objectives %s", name,
                  ctx.space.name, f"{ctx.space.size():,}", cfg.evaluator.name,
                  ", ".join(cfg.objectives))
        if cfg.constraints.max_latency_ms is not None:  # the study's budget reads it
            self.latency_model(ctx.space, ctx.max_seq_len)
            for message in self.latency_notes:
                ctx.run.log("latency_model", note=message)
            self.latency_notes.clear()
        found = run_study_stage(ctx, searcher=name, space=ctx.space,
                                evaluator=_study_evaluator(ctx, factory or name),
                                settings=settings, default_trials=settings.n_trials,
                                parts=partial(_study_parts, cfg, ctx.options, name,
                                              type(ctx)), factory=factory, queue=queue)
        ctx.seconds["search"] = found.seconds
        if not found.trials:
            raise NasError(f"the {name} search finished no trial (see nas report "
                           f"{ctx.run.path}); loosen the constraints or add trials")
        teacher_ms = ctx.teacher_latency_ms() if cfg.final.select == "latency_ratios" else None
        chosen = select_trials(found.study, found.trials, cfg.final, teacher_ms=teacher_ms)
        summary = {"searcher": name, "study": found.spec.study_name,
                   **({"ratios_teacher_ms": teacher_ms} if teacher_ms is not None else {}),
                   **latency_scale(ctx, found.study.metric_names or cfg.objectives),
                   "n_trials": found.spec.n_trials, "evaluations": len(found.trials),
                   "objectives": list(found.study.metric_names or cfg.objectives),
                   "chosen": [t.number for t in chosen],
                   **mean_std([t.values[0] for t in found.trials])}
        ctx.run.log("search", chosen=summary["chosen"], seconds=found.seconds)
        picks = [(f"trial{t.number}", ctx.space.validate(t.user_attrs["arch"]), t.number)
                 for t in chosen]
        return summary, picks

    def one_shot(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """The supernet search; its derived architecture is kept and never searched again."""
        from nas.builder import build_supernet
        from nas.seeding import seed_stage

        done = ctx.run.load_json("derived_arch.json")
        if done is not None:
            arch = ctx.space.validate(done["choices"])
            ctx.stage(3, "search already finished, derived %s", dict(arch))
            return {"searcher": name, "derived": dict(arch)}, [("searched", arch, None)]
        s = ctx.cfg.one_shot
        supernet = build_supernet(ctx.space)
        ctx.init_model(supernet)
        trainer = _supernet_trainer(ctx, supernet, s)
        seed = seed_stage(ctx.seed, "search")
        resolved = ctx.cfg.resolve_searcher(name)
        searcher = resolved.build(**_one_shot_options(resolved.cls, seed, ctx.cfg, ctx.space))
        ctx.stage(3, "%s search over %s, %d epoch(s) × %d steps", name, ctx.space.name,
                  s.epochs, trainer.steps_per_epoch)
        with ctx.timed("search"):
            candidate = searcher.search(ctx.space, trainer)
        arch = candidate.arch
        ctx.run.save_json("derived_arch.json", {**arch.to_dict(), "id": arch.id,
                                                "space_config": ctx.space_kwargs,
                                                "params": candidate.params})
        ctx.run.log("derived", arch=dict(arch), id=arch.id, seconds=ctx.seconds["search"])
        ctx.run.remove_checkpoint("search")
        return {"searcher": name, "derived": dict(arch), **candidate.params}, [
            ("searched", arch, None)]

    # -- stages 4 and 5 --------------------------------------------------------------
    def final(self, ctx: SearchContext, chosen: list[tuple[str, Any, int | None]]
              ) -> list[dict[str, Any]]:
        """Each chosen architecture retrained on the whole training subset (or what
        ``final.train_examples`` says) with ``final.seeds`` seeds, scored on dev and the
        report split, and exported."""
        from evaluators.base import run_evaluation
        from evaluators.retrain import report_row
        from nas.export import export
        from nas.teacher import metric_score

        cfg, rows = ctx.cfg, []
        for number, (tag, arch, trial) in enumerate(chosen):
            done = ctx.run.load_json(f"final/{tag}/result.json")
            if done is not None and (ctx.run.path / "final" / tag / "export").is_dir():
                rows.append(done)
                continue
            ctx.stage(4, "final retrain of %s (%s), %d seed(s)", tag, arch.id, cfg.final.seeds)
            seeds = []
            final_name, final_settings = self.final_evaluator(ctx)
            for s in range(cfg.final.seeds):
                evaluator = ctx.evaluator(
                    final_name, final_settings, data=ctx.final_train(), val_batches=None,
                    test=True, workdir=ctx.run.path / "final" / tag / f"seed{s}",
                    seed=cfg.seed + s, stage=f"final:{s}")
                result = run_evaluation(evaluator, arch)
                if not result.ok:
                    raise NasError(f"the final retrain of {tag} ({arch.id}) {result.status}: "
                                   f"{result.reason}")
                seeds.append({**report_row(tag, arch, result, ctx.report_split),
                              "seed": cfg.seed + s})
                if s == 0:
                    ctx.stage(5, "export of %s", tag)
                    for folder in ([ctx.run.path / "export"] if number == 0 else []) + [
                            ctx.run.path / "final" / tag / "export"]:
                        export(ctx.space, arch, folder, weights=evaluator.weights_path(arch),
                               overwrite=True, **_export_keywords(ctx),
                               **self._format_keywords(ctx))
            split = ctx.report_split
            row = {"tag": tag, "trial": trial, "arch": dict(arch), "arch_id": arch.id,
                   "seeds": seeds, "split": split,
                   **{f"{split}_{k}": v for k, v in mean_std(
                       [metric_score(r[split], ctx.metric) for r in seeds]).items()}}
            ctx.run.save_json(f"final/{tag}/result.json", row)
            ctx.run.log("final", tag=tag, arch_id=arch.id, **{
                k: v for k, v in row.items() if k.startswith(split)})
            rows.append(row)
        return rows

    def _format_keywords(self, ctx: SearchContext) -> dict[str, Any]:
        """``final.export``: the format of every final point, its int8 settings
        (compared on dev, the report split untouched) and its vocabulary trim (the
        pieces of the whole train split; scored on the report split)."""
        settings = ctx.cfg.final.export
        from nas.vocab_trim import task_trim

        trim = {"trim": task_trim(ctx.full_train, ctx.report, ctx.report_split,
                                  ctx.metric)} if settings.trim_vocab else {}
        if not settings.quantize:
            return {"fmt": settings.format or self.export_format, **trim}
        from nas.quantize import DevSet

        dev = ctx.dev
        return {**trim, "fmt": settings.format, "quantize": settings.quantize,
                "max_int8_drop": float(settings.max_int8_drop),
                "dev": DevSet(list(dev.texts_a), list(dev.texts_b) if dev.texts_b else None,
                              list(dev.labels), ctx.metric)}

    def report_sections(self, run: RunDir, metrics: dict[str, Any]) -> tuple[list[str],
                                                                             list[Path]]:
        from searchers.report import study_sections

        final = metrics.get("final") or []
        split = metrics.get("evaluation", {}).get("split", "dev")
        lines = ["", "## Final retrains", "",
                 f"| model | trial | arch | seeds | {split} mean ± sd (%) |",
                 "|---|---|---|---|---|"]
        for row in final:
            lines.append(f"| {row['tag']} | {row['trial'] if row['trial'] is not None else '-'}"
                         f" | {row['arch_id']} | {len(row['seeds'])} | "
                         f"{100 * row[f'{split}_mean']:.2f} ± {100 * row[f'{split}_std']:.2f} |")
        if not (run.path / "study.json").is_file():
            return (lines if final else []) + one_shot_lines(metrics.get("search") or {}), []
        chosen = [r["trial"] for r in final if r.get("trial") is not None]
        more, pictures = study_sections(run.path, report_reference(metrics), chosen=chosen)
        return lines + more, pictures


def latency_scale(ctx: SearchContext, objectives: Sequence[str]) -> dict[str, Any]:
    """What the report's Pareto plot needs to draw the teacher on the trials' latency
    scale: ``latency_scale`` (``predicted`` by the latency model, or ``measured`` by the
    evaluator) and the teacher's batch-1 latency on it (``teacher_latency_ms``); nothing
    when latency is not an objective."""
    if "latency_ms" not in objectives:
        return {}
    scale = "predicted" if ctx.study_latency_fn() is not None else "measured"
    return {"latency_scale": scale, "teacher_latency_ms": ctx.teacher_latency_ms()}


def one_shot_lines(search: Mapping[str, Any], undecided: float = 0.05) -> list[str]:
    """The one-shot search's derived choices with their final probabilities, and a warning
    where a choice's distribution stayed within ``undecided`` of uniform: its argmax is then
    close to a random pick, not a decision (too few architecture steps)."""
    probabilities = search.get("probabilities") or {}
    derived = search.get("derived") or {}
    title = ["", f"## One-shot search: {search.get('searcher', '?')}", ""]
    if search.get("candidates"):
        return title + _candidate_lines(search["candidates"])
    if not probabilities:
        return []
    lines = [*title, "| choice | derived | its probability | uniform |", "|---|---|---|---|"]
    flat = []
    for name, probs in probabilities.items():
        top, uniform = max(probs), 1.0 / len(probs)
        lines.append(f"| {name} | {derived.get(name, '-')} | {top:.3f} | {uniform:.3f} |")
        if top - uniform < undecided:
            flat.append(name)
    if flat:
        lines += ["", f"Warning: {len(flat)} of {len(probabilities)} choices "
                      f"({', '.join(flat)}) ended within {undecided} of uniform: their derived "
                      "values are close to random picks; raise `one_shot.epochs` or "
                      "`one_shot.arch_lr`."]
    return lines


def _candidate_lines(candidates: list[Mapping[str, Any]], shown: int = 10) -> list[str]:
    """The sampled-supernet ranking: candidates by inherited-weight score (ties in draw
    order, the order the search breaks them in), and how many tie with the chosen one."""
    ranked = sorted(enumerate(candidates), key=lambda ic: (-ic[1]["value"], ic[0]))
    lines = ["| rank | arch | params | inherited score |", "|---|---|---|---|"]
    lines += [f"| {r} | {c['arch_id']} | {c['params']:,} | {c['value']:.4f} |"
              for r, (_, c) in enumerate(ranked[:shown], 1)]
    ties = sum(c["value"] == ranked[0][1]["value"] for _, c in ranked)
    if ties > 1:
        lines += ["", f"Warning: {ties} of {len(candidates)} candidates tie at the best "
                      "inherited score; the first drawn was chosen. Score on more held-out "
                      "examples (`data.val_fraction`) to separate them."]
    return lines


def _export_keywords(ctx: SearchContext) -> dict[str, Any]:
    info = ctx.export_info()
    return {k: info[k] for k in ("labels", "tokenizer", "max_length", "task")}


def select_trials(study: Any, trials: list[Any], final: FinalSettings,
                  teacher_ms: float | None = None) -> list[Any]:
    """The trials ``final`` retrains (see :class:`FinalSettings`), in a stable order."""
    from searchers.results import pareto_front

    first = study.directions[0]
    sign = 1.0 if first.name == "MAXIMIZE" else -1.0
    by_score = sorted(trials, key=lambda t: (-sign * t.values[0], t.number))
    if final.select == "all":
        return sorted(trials, key=lambda t: t.number)
    if final.select == "best" or len(study.directions) == 1:
        return by_score[:final.n]
    front = sorted(pareto_front(study), key=lambda t: (t.values[1], t.number))
    if final.select == "pareto":
        if len(front) <= final.n:
            return front
        picks = np.linspace(0, len(front) - 1, final.n).round().astype(int)
        return [front[i] for i in dict.fromkeys(picks.tolist())]
    if teacher_ms is None:
        raise NasError("final.select latency_ratios needs the teacher's measured latency "
                       "(teacher.json of the run folder)")
    index = study.metric_names.index("latency_ms") if study.metric_names else 1
    chosen: list[Any] = []
    for ratio in final.ratios:
        target = teacher_ms / float(ratio)
        best = min(front, key=lambda t: (abs(math.log(t.values[index] / target)), t.number))
        if best not in chosen:
            chosen.append(best)
    return chosen


def _study_evaluator(ctx: SearchContext, searcher: Any) -> Any:
    """The study's evaluator: the configured one on the held-out part, with the cost
    objectives the file asks for."""
    from searchers.loop import study_evaluator

    cfg = ctx.cfg
    inner = ctx.evaluator(cfg.evaluator.name, cfg.evaluator.settings, data=ctx.search_train,
                          val_batches=list(ctx.batches(ctx.search_val, ctx.eval_batch_size)),
                          test=False, workdir=ctx.run.path / "trial_weights", seed=cfg.seed,
                          stage="trials")
    return study_evaluator(inner, ctx.space, cfg.study_settings(), searcher,
                           seq_len=ctx.max_seq_len, latency_fn=ctx.study_latency_fn())


def _study_parts(config: SearchConfig, options: RunOptions, searcher: str,
                 context: type[SearchContext] = SearchContext) -> tuple[Any, Any]:
    """A worker process's space and evaluator (``--workers N``): the plug-ins imported
    again, stages 1–2 (and the method's own preparation) from the caches, in the run
    folder the first process holds."""
    from nas.plugins import import_plugins

    import_plugins(config.plugins)
    options = worker_options(options)
    ctx = context(config, RunDir(options.run_dir), options).prepare()
    return ctx.space, _study_evaluator(ctx, searcher)


def _supernet_trainer(ctx: SearchContext, supernet: Any, s: OneShot) -> Any:
    """The recipe's side of the one-shot search: KD on the training part, architecture
    steps on the held-out part, checkpoints and α logs in the run folder."""
    from searchers.supernet_training import KDSupernetTrainer

    settings = Distillation(batch_size=s.batch_size, temperature=ctx.cfg.retrain.temperature,
                            alpha=ctx.cfg.retrain.alpha)
    parts = ctx.distillation(ctx.search_train, settings, "search")
    val_logits = ctx.teacher_logits(ctx.search_val)
    train_logits = ctx.teacher_logits(ctx.search_train)

    def task_loss(out: Any, batch: Mapping[str, Any]) -> torch.Tensor:
        logits = val_logits if batch.get("split") == "val" else train_logits
        return kd_loss(out.logits, table_rows(logits, batch["index"], out.logits),
                       batch["labels"], settings.temperature, settings.alpha)

    def val_batches(epoch: int) -> list[Any]:
        from nas.seeding import stage_seed

        return list(ctx.batches(ctx.search_val, s.batch_size, shuffle=True,
                                seed=stage_seed(ctx.seed, f"search-val-order:{epoch}")))

    def on_epoch(epoch: int, info: Mapping[str, Any]) -> None:
        ctx.run.log("search_epoch", epoch=epoch + 1, **info)

    return KDSupernetTrainer(supernet, epochs=s.epochs, steps_per_epoch=parts["steps_per_epoch"],
                             train_batches=parts["train_batches"], val_batches=val_batches,
                             task_loss=task_loss, checkpoint=ctx.run.checkpoint_path("search"),
                             progress=ctx.progress, on_epoch=on_epoch)


def _one_shot_settings(s: OneShot) -> dict[str, Any]:
    """The searcher settings that ``one_shot:`` holds (the rest of it is the supernet
    training's): ``differentiable``'s β, optimisers and τ with ``derive: argmax`` (every
    relaxed choice takes its most probable value), ``sampled-supernet``'s candidates."""
    return {"beta": s.beta, "lr": s.lr, "lr_min": s.lr_min, "arch_lr": s.arch_lr,
            "tau_every": s.tau_every, "arch_warmup": s.arch_warmup,
            "checkpoint_every": s.checkpoint_every, "derive": "argmax",
            "candidates": s.candidates}


def _one_shot_options(cls: Any, seed: int, cfg: SearchConfig, space: Any) -> dict[str, Any]:
    """A one-shot searcher's keywords from the file's ``one_shot:`` section, each given
    only if its class takes it (a plug-in's one-shot searcher gets what it asks for;
    ``searcher: {name, settings}`` overrides them):

    * ``differentiable``: ``derive="argmax"`` (every relaxed choice takes its most probable
      value), β, the weight and architecture optimisers, τ's staircase;
    * ``sampled-supernet`` (EfficientBERT's stage 3): every choice kind of the space
      sampled under ``constraints.max_params``, ``one_shot.candidates`` candidates scored
      with inherited weights, the same weight optimiser as the differentiable search."""
    from searchers.differentiable import weight_settings

    s = cfg.one_shot
    pool = {"seed": seed, **_one_shot_settings(s),
            "kinds": tuple(sorted({c.kind for c in space.choices()})),
            "max_params": cfg.constraints.max_params, "seq_len": cfg.data.max_seq_len,
            "settings": weight_settings(epochs=s.epochs, lr=s.lr, lr_min=s.lr_min,
                                        checkpoint_every=s.checkpoint_every)}
    accepts = _parameters(cls.__init__)
    return {k: v for k, v in pool.items() if k in accepts or "**" in accepts}


__all__ = ["Search", "SearchConfig", "load_config", "select_trials"]
