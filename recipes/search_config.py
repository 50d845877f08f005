"""The configuration of ``method: search`` (and of ``method: compress``, which extends
it): the evaluator choice, constraints, distillation, the one-shot search's and the final
retrain's settings, and the checks of an evaluator's settings against what the method can
hand it, all made before any stage runs."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nas.config import ConfigError, are_ratios, check_fields, from_dict
from nas.errors import NasError
from nas.quantize import MAX_INT8_DROP, QUANTIZATIONS
from nas.timing import LATENCY_RUNTIMES
from nas.train import TrainSettings, loop_settings
from nas.transfer import TransferText
from recipes.common import (
    MethodConfig,
)

#: what ``objectives:`` may list: the evaluator's validation score, then costs to minimise
OBJECTIVES = ("accuracy", "latency_ms", "params", "flops")
SELECTIONS = ("best", "pareto", "latency_ratios", "all")
#: where a search's ``latency_ms`` comes from: the latency model's prediction, or a
#: timing of each trained candidate
LATENCIES = ("predicted", "measured")
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
class LatencySettings:
    """``latency: {source, runtime}``: the study's ``latency_ms`` is ``predicted`` by the
    latency model of ``runtime`` or ``measured`` on each trained candidate in it; the
    runtime is the one the model ships in (:data:`nas.timing.LATENCY_RUNTIMES`:
    ``torch``, ``onnx`` fp32, ``onnx-int8`` as ``nas export --quantize int8`` makes it).
    A bare string is the source (``latency: predicted``), on ``torch``; a mapping without
    a source has the method's (``measured`` for search, ``predicted`` for compress)."""

    source: str = "measured"
    runtime: str = "torch"

    def __post_init__(self) -> None:
        check_fields([("source", self.source in LATENCIES, " or ".join(LATENCIES)),
                      ("runtime", self.runtime in LATENCY_RUNTIMES,
                       " or ".join(LATENCY_RUNTIMES))], self)

    @classmethod
    def read(cls, value: Any, source: str = "measured") -> LatencySettings:
        """The section from what a file gives: a source name or a mapping (``source``:
        the method's when it names none)."""
        if isinstance(value, LatencySettings):
            return value
        if isinstance(value, Mapping):
            value = {"source": source, **value}
        if isinstance(value, str):
            try:
                return cls(source=value)
            except ValueError as err:
                raise ConfigError(f"latency: {err} (or {{source: ..., runtime: "
                                  f"{' | '.join(LATENCY_RUNTIMES)}}})") from None
        return from_dict(cls, value, "latency")


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
    pruned model recovers with a short distillation on more tokens).

    ``chain``: teacher assistants (Mirzadeh et al. 2020, §3): the chosen points are
    retrained from the slowest to the fastest on the study's latency scale, each
    distilled from the previous retrained point (seed s from seed s) instead of the full
    teacher; the slowest from the teacher. Each row records ``distilled_from``."""

    select: str = "best"
    n: int = 1
    ratios: list = field(default_factory=list)
    seeds: int = 1
    train_examples: int | str | None = None
    export: FinalExport = field(default_factory=FinalExport)
    chain: bool = False

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
    #: unlabeled text the teacher labels, added to the final retrain (:mod:`nas.transfer`)
    transfer: TransferText = field(default_factory=TransferText)
    #: the ``latency:`` section's source when a mapping names none
    default_latency_source: ClassVar[str] = "measured"
    #: where ``latency_ms`` comes from and on which runtime (:class:`LatencySettings`; a
    #: bare string is the source); the constraint ``max_latency_ms`` is predicted by the
    #: latency model of that runtime either way
    latency: str | dict | LatencySettings = field(default_factory=LatencySettings)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.latency = LatencySettings.read(self.latency, self.default_latency_source)
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
        repeated = sorted({o for o in self.objectives if self.objectives.count(o) > 1})
        if repeated:
            raise ValueError(f"objectives: {repeated[0]!r} is listed twice; list each "
                             "objective once")
        if self.final.select == "latency_ratios" and "latency_ms" not in self.objectives:
            raise ValueError("final.select latency_ratios needs latency_ms among the objectives")
        if self.final.chain and "latency_ms" not in self.objectives:
            raise ValueError("final.chain orders the chosen points by the study's latency: "
                             "add latency_ms to the objectives, or drop final.chain")
        self.check_searcher_name()
        owned = {"n_trials", "max_params", "max_flops", "max_latency_ms", "latency_runtime",
                 "extra_objectives"}
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
            return {k: v for k, v in one_shot_settings(self.one_shot).items() if k in own}
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

    @property
    def latency_settings(self) -> LatencySettings:
        """The ``latency:`` section, read (:meth:`LatencySettings.read`) when the
        configuration was made."""
        return LatencySettings.read(self.latency, self.default_latency_source)

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
                    "latency_runtime": self.latency_settings.runtime,
                    "extra_objectives": list(self.objectives[1:])}
        return from_dict(StudySettings, settings, "multi_trial")

    def build_space(self, num_labels: int, vocab_size: int | None = None) -> Any:
        """The space, built with ``space_config`` and the task's label count (and the
        teacher tokenizer's vocabulary size) where its factory takes them."""
        from nas.space import SPACES, get_space

        factory = SPACES.get(self.space)
        accepts = accepted_keywords(factory)
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


def accepted_keywords(factory: Any) -> set[str]:
    """The keyword names a space factory accepts (``**`` when it takes any)."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return {"**"}
    return {"**" if p.kind is p.VAR_KEYWORD else p.name for p in params}


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


def one_shot_settings(s: OneShot) -> dict[str, Any]:
    """The searcher settings that ``one_shot:`` holds (the rest of it is the supernet
    training's): ``differentiable``'s β, optimisers and τ with ``derive: argmax`` (every
    relaxed choice takes its most probable value), ``sampled-supernet``'s candidates."""
    return {"beta": s.beta, "lr": s.lr, "lr_min": s.lr_min, "arch_lr": s.arch_lr,
            "tau_every": s.tau_every, "arch_warmup": s.arch_warmup,
            "checkpoint_every": s.checkpoint_every, "derive": "argmax",
            "candidates": s.candidates}


__all__ = ["Constraints", "Distillation", "EvaluatorChoice", "FinalSettings", "OBJECTIVES",
           "OneShot", "PROVIDED_PARTS", "SEARCHER_PARTS", "SELECTIONS", "SearchConfig",
           "accepted_keywords", "check_evaluator", "check_evaluator_settings",
           "evaluator_settings", "is_training_evaluator", "one_shot_settings"]
