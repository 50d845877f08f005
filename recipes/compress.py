"""Compress the teacher (``method: compress``, docs/compress.md): search the fine-tuned teacher's
own sub-networks, starting each from the teacher's importance-sorted weights.

It is ``method: search`` (:mod:`recipes.search`) with these differences:

1. **teacher** — as every method (fine-tuned on the task, cached by its settings);
2. **data** — as method search (``data.val_fraction`` of the training subset held out to
   score candidates), then the **sort**: the teacher, in the engine's ``bert`` design,
   reordered by importance (:func:`nas.compress.importance.sort_teacher`; ``activation``,
   Minitron, Muralidharan et al. 2024, §2.1, or ``gradient``, Michel et al. 2019, §4.1
   and DynaBERT, Hou et al. 2020, §3.1) on ``importance.samples`` sequences of the
   candidates' training part, cached by the teacher's weights, task, method, sample and
   seed. The space is ``bert-subnet`` of that teacher's shape
   (:func:`spaces.bert_subnet.from_design`), its supernet the sorted teacher, so every
   leading slice a child keeps holds the most important heads, neurons and channels;
3. **search** — any searcher over validation accuracy against batch-1 latency
   (``latency: predicted`` by the latency model, or ``measured``, on the runtime the
   model ships in: ``latency: {source, runtime: torch | onnx | onnx-int8}``; the
   ``objectives`` and ``constraints`` of method search), each candidate scored by
   ``inherited-kd``
   (:mod:`evaluators.inherited_kd`: the sorted teacher's slice, a short distillation
   from the full teacher, the validation score); the Puzzle-style ``blockwise`` proxy
   (Bercovich et al. 2025, §3) plugs in by name, its table built on the sorted teacher
   when asked for. Or a planned searcher over what the sort made: ``searcher: knapsack``
   (:mod:`searchers.knapsack`): the blockwise table of the sorted teacher (its block
   states cached), then Puzzle's multiple-choice knapsack (§4) at each budget of a range
   (its settings, or the ``knapsack:`` section; latency or parameters), each distinct
   pick recorded as a trial of the run's study and scored by the configured evaluator,
   so the Pareto front, the final selection, the report and the exports treat it as any
   searcher's. Or ``searcher: truncation`` (:mod:`searchers.truncation`), the baseline:
   the sorted teacher's first k whole layers, k = 1..L, queued and retrained the same way;
4. **final** — ``final.select`` (default: per speed-up 2, 5 and 15 over the teacher, the
   front point nearest it), each retrained ``final.seeds`` times by the full
   distillation of ``retrain:`` *from the inherited weights* (the same evaluator with the
   run's whole training subset and budget; docs/compress.md#steps), scored on dev and the
   report split;
5. **export** — the teacher's stock ``transformers`` class (``BertForSequenceClassification``,
   ``RobertaForSequenceClassification``..., :data:`nas.hf.TEACHER_TYPES`) where the child
   has that shape (whole layers dropped, all heads, one FFN width, the teacher's hidden
   width: docs/reference.md#teacher-compression), else the runtime as remote code
   (:mod:`nas.export`).
"""

from __future__ import annotations

import inspect
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

import numpy as np

from nas.config import ConfigError, check_fields
from nas.methods import RunOptions, register_method
from recipes.common import seeded_subset
from recipes.search import Search
from recipes.search_config import (
    PROVIDED_PARTS,
    SEARCHER_PARTS,
    EvaluatorChoice,
    FinalSettings,
    LatencySettings,
    SearchConfig,
)
from recipes.search_context import SearchContext
from searchers.knapsack import KnapsackSettings

#: the space this method searches
SPACE = "bert-subnet"
#: the planned searchers over what the sort makes (searchers/knapsack.py,
#: searchers/truncation.py): the blockwise knapsack, and uniform truncation (the first k
#: whole layers, the baseline it must beat)
KNAPSACK = "knapsack"
TRUNCATION = "truncation"


@dataclass
class ImportanceSettings:
    """The sort: ``method`` (``activation`` or ``gradient``) on ``samples`` calibration
    sequences of the candidates' training part (Minitron used 1,024; here 256)."""

    method: str = "activation"
    samples: int = 256

    def __post_init__(self) -> None:
        from nas.compress.importance import METHODS

        check_fields([("method", self.method in METHODS, " or ".join(METHODS)),
                      ("samples", self.samples >= 1, "an integer >= 1")], self)


@dataclass
class CompressConfig(SearchConfig):
    """``method: compress``: see the module docstring; ``experiments/compress_sst2.yaml``
    for a file. ``space_config`` may set only ``layers`` (``any`` or ``first``): the shape
    is the teacher's. ``latency``: the search's ``latency_ms`` is ``predicted`` by this
    machine's latency model (batch 1, one thread, the run's length; calibrated once per
    teacher shape and runtime and cached) or ``measured`` on each trained candidate
    (noisier; no calibration), on its ``runtime`` (``torch`` unless the section says
    ``onnx`` or ``onnx-int8``: :class:`~recipes.search_config.LatencySettings`)."""

    provided_parts: ClassVar[tuple[str, ...]] = (*PROVIDED_PARTS, "supernet", "logits_loss",
                                                 "table")
    #: beyond method search's: the sorted teacher's blockwise table (built when asked
    #: for) and its truncations (the first k whole layers)
    provided_searcher_parts: ClassVar[tuple[str, ...]] = (*SEARCHER_PARTS, "table",
                                                          "truncations")

    space: str = SPACE
    importance: ImportanceSettings = field(default_factory=ImportanceSettings)
    evaluator: EvaluatorChoice = field(default_factory=lambda: EvaluatorChoice(
        name="inherited-kd", settings={"max_steps": 30, "lr": 1e-4, "hidden_weight": 1.0}))
    objectives: list = field(default_factory=lambda: ["accuracy", "latency_ms"])
    final: FinalSettings = field(default_factory=lambda: FinalSettings(
        select="latency_ratios", ratios=[2, 5, 15], seeds=2))
    default_latency_source: ClassVar[str] = "predicted"
    latency: str | dict | LatencySettings = field(
        default_factory=lambda: LatencySettings("predicted"))
    #: the knapsack searcher's settings as files before ``searcher: {name, settings}``
    #: wrote them (still read; the searcher's own settings win)
    knapsack: KnapsackSettings = field(default_factory=KnapsackSettings)
    #: a multi-trial searcher's study starts with the truncations (the first k whole
    #: layers within the constraints) as its first trials, so that it models the
    #: baseline it must beat instead of having to find it (they count in n_trials)
    seed_truncations: bool = False

    def __post_init__(self) -> None:
        if self.space != SPACE:
            raise ConfigError(f"space: method compress searches {SPACE!r} (the teacher's own "
                              f"sub-networks), got {self.space!r}; use method search for "
                              "another space")
        other = sorted(set(self.space_config) - {"layers"})
        if other:
            raise ConfigError(f"space_config.{other[0]}: method compress takes the shape from "
                              "the teacher; only layers (any or first) may be set")
        super().__post_init__()

    def legacy_searcher_settings(self, name: str) -> dict[str, Any]:
        """Method search's, and the ``knapsack:`` section for the knapsack searcher."""
        if name == KNAPSACK:
            return asdict(self.knapsack)
        return super().legacy_searcher_settings(name)

    def check_searcher_name(self, name: str | None = None, where: str = "searcher:") -> None:
        """Method search's check, and ``seed_truncations`` only for a multi-trial
        searcher: a planned one runs its own picks, a one-shot one has no trials to
        seed."""
        super().check_searcher_name(name, where)
        name = name or self.searcher_name
        if not self.seed_truncations:
            return
        from searchers.base import SEARCHERS

        if SEARCHERS.kind_of(name) != "multi-trial":
            raise ConfigError(f"seed_truncations: searcher {name} has no study to seed; use "
                              "it with a multi-trial searcher (tpe, random, nsga2, gp, lanas, "
                              "lamoo), or drop it")

    def check_planned_searcher(self, name: str, cls: Any) -> None:
        """Method search's checks, and for one that reads the blockwise table (the
        knapsack), what the table cannot serve: first-k layers (its picks are of the
        any-subset space) and a FLOPs limit (it costs parameters and latency)."""
        if "table" in cls.parts()[0]:
            if self.space_config.get("layers", "any") != "any":
                raise ConfigError(f"searcher: {name} queues architectures of the any-subset "
                                  "space; drop space_config.layers: first, or use another "
                                  "searcher")
            if self.constraints.max_flops is not None:
                raise ConfigError(f"constraints.max_flops: searcher {name} costs its picks "
                                  "by the block table's parameters and latency, not FLOPs; "
                                  "use max_params or max_latency_ms")
        super().check_planned_searcher(name, cls)


class CompressContext(SearchContext):
    """Stages 1–2 of method search, then the sort, and the space and supernet made from
    the sorted teacher (module docstring)."""

    cfg: CompressConfig  # the search context's configuration, with the importance section
    #: the sorted teacher's blockwise table, built on first use (:meth:`block_table`)
    _table: Any = None

    def make_space(self) -> tuple[Any, dict[str, Any]]:
        """The sort (cached), then ``bert-subnet`` of the teacher's shape with the sorted
        teacher as its supernet."""
        from nas.compress.importance import sort_teacher
        from spaces.bert_subnet import bert_subnet_space, from_design

        imp = self.cfg.importance
        design, teacher = self.task_teacher()
        calibration = seeded_subset(self.search_train, imp.samples, self.seed, "calibration",
                                    "importance.samples")
        self.calibration = calibration
        self.stage(2, "importance sort (%s) on %d sequences (cached by its settings)",
                   imp.method, len(calibration))
        with self.timed("sort"):
            sorted_teacher, _ = sort_teacher(
                teacher, list(self.batches(calibration, self.eval_batch_size)), imp.method,
                task=self.task, seed=self.seed)
        layers = self.cfg.space_config.get("layers", "any")
        space, self.supernet = from_design(sorted_teacher, design.config, layers)
        self.sorted_teacher, self.design_config = sorted_teacher, design.config
        self.sort_info = {"method": imp.method, "samples": len(calibration),
                          "seconds": self.seconds["sort"]}
        self.run.log("sort", **self.sort_info)
        names = inspect.signature(bert_subnet_space).parameters
        return space, {k: v for k, v in space.config.items() if k in names}

    def evaluator_parts(self, wanted: set[str]) -> dict[str, Any]:
        """The sorted teacher's supernet, and its blockwise table for an evaluator that
        asks for one (the ``blockwise`` proxy). A further evaluator's parts from the sort
        go here, with their names added to :attr:`CompressConfig.provided_parts`."""
        parts: dict[str, Any] = {"supernet": self.supernet}
        if "table" in wanted:
            parts["table"] = self.block_table()
        return parts

    def block_table(self) -> Any:
        """The blockwise table of the sorted teacher (:func:`evaluators.blockwise.
        block_table`), built once per run on the sort's calibration sample, sorted by
        length so that batches carry little padding; the teacher's block states are
        cached in the engine cache by the sorted teacher's weights, the task and the
        sample. Its latency is this machine's latency model's (batch 1, one thread, the
        run's length). A ``layers: first`` space gets the table of its any-subset twin,
        which the ``blockwise`` proxy reads for it."""
        if self._table is not None:
            return self._table
        from evaluators.blockwise import block_table
        from nas.distill.general import token_lengths
        from nas.latency import space_predictor
        from spaces.bert_subnet import from_design

        space, supernet = self.space, self.supernet
        if space.config.get("layers") != "any":
            space, supernet = from_design(self.sorted_teacher, self.design_config, "any")
        lengths = token_lengths(self.tokenizer, self.calibration, self.max_seq_len)
        sample = self.calibration.subset([int(i) for i in np.argsort(lengths, kind="stable")])

        def note(message: str) -> None:
            self.run.log("latency_model", note=message)

        self.stage(3, "blockwise table of the sorted teacher on %d sequences", len(sample))
        latency_fn = space_predictor(space, seq_len=self.max_seq_len, log=note)
        with self.timed("table"):
            self._table = block_table(space, supernet,
                                      list(self.batches(sample, self.eval_batch_size)),
                                      task=self.task, seed=self.seed, seq_len=self.max_seq_len,
                                      latency_fn=latency_fn)
        self.run.log("block_table", seconds={k: round(v, 3)
                                             for k, v in self._table.seconds.items()},
                     widths=list(self._table.widths), layers=self._table.layers,
                     options=len(self._table.options))
        return self._table

    def teacher_latency_ms(self) -> float | None:
        """With ``latency: predicted``, the latency model's prediction for the teacher
        (the space's full child) at the run's length on the section's runtime, the scale
        of every trial's ``latency_ms``; the teacher's timed latency (stage 1, at the
        report split's median length) would set the ratios on another scale. (Runs before
        this was fixed, 2026-11-24, divided the timed one: their "2x" pick was about 2.5x
        predicted.)"""
        predict = self.study_latency_fn()
        if predict is None:
            return super().teacher_latency_ms()
        return float(predict(self.space.default()))


@register_method("compress")
class Compress(Search):
    """``method: compress`` — the teacher's own sub-networks (module docstring)."""

    config_class = CompressConfig
    context_class = CompressContext
    export_format = "hf"

    def final_evaluator(self, ctx: SearchContext) -> tuple[str, dict[str, Any]]:
        """``inherited-kd`` with ``retrain:``'s budget, from the sorted teacher's slice;
        the hidden-state weight and layer map are the search evaluator's when it sets
        them."""
        settings = ctx.cfg.evaluator.settings
        return "inherited-kd", {k: settings[k] for k in ("hidden_weight", "layer_mapping")
                                if k in settings}

    def check_head(self, config: SearchConfig, options: RunOptions) -> None:
        """None to check: the space is the teacher's, with a head for the task's labels."""

    def stages(self, ctx: CompressContext) -> dict[str, Any]:  # type: ignore[override]  # context_class makes ctx a CompressContext
        return {"sort": ctx.sort_info, **super().stages(ctx)}

    def audit_parts(self, config: CompressConfig, options: RunOptions) -> Any:
        """``nas audit`` (docs/compress.md): the search's evaluator (``inherited-kd``: the
        slice, the short distillation, the held-out score) and the blockwise proxy
        (minus the summed block error) against the final retrain (``inherited-kd`` with
        ``retrain:``'s budget on the whole training subset, from the inherited weights,
        scored on dev; the report split is never looked at). The latency model of the
        space predicts each candidate's batch-1 latency, which ``--select
        latency-spread`` spreads them over."""
        from evaluators.audit import AuditParts
        from nas.latency import space_predictor

        ctx = self.prepared(config, options, audit=True)
        run = ctx.run
        assert isinstance(ctx, CompressContext)  # noqa: S101 (this method's context)
        cfg = ctx.cfg
        val = list(ctx.batches(ctx.search_val, ctx.eval_batch_size))
        # an arm is named by its evaluator and, when not the metric, its score: a resumed
        # audit then adds a proxy scored otherwise beside the recorded ones
        arms = {_arm_label(name, settings): ctx.evaluator(
                    name, settings, data=ctx.search_train, val_batches=val, test=False,
                    workdir=run.path / "audit_proxy" / _arm_label(name, settings),
                    seed=cfg.seed, stage="trials")
                for name, settings in ((cfg.evaluator.name, cfg.evaluator.settings),
                                       ("blockwise", {}))}
        final_name, final_settings = self.final_evaluator(ctx)
        full = ctx.evaluator(final_name, final_settings, data=ctx.final_train(),
                             val_batches=None, test=False, workdir=run.path / "audit_full",
                             seed=cfg.seed, stage="final:0")

        def note(message: str) -> None:
            run.log("latency_model", note=message)

        notes = {"proxy": {"name": cfg.evaluator.name, **cfg.evaluator.settings},
                 "full": f"{final_name} with retrain: " + ", ".join(
                     f"{k}={v}" for k, v in asdict(cfg.retrain).items()),
                 "budget": cfg.constraints.max_params, "sort": ctx.sort_info}
        return AuditParts(space=ctx.space, arms=arms, full=full, folder=run.path,
                          max_params=cfg.constraints.max_params, seq_len=ctx.max_seq_len,
                          notes=notes, latency_fn=space_predictor(
                              ctx.space, seq_len=ctx.max_seq_len, log=note,
                              runtime=cfg.latency_settings.runtime))

    def search_stage(self, ctx: SearchContext, name: str) -> tuple[dict[str, Any], list[Any]]:
        """Stage 3: method search's, a multi-trial study seeded with the truncations when
        ``seed_truncations`` asks for them."""
        assert isinstance(ctx, CompressContext)  # noqa: S101 (this method's context)
        if ctx.cfg.seed_truncations:  # a multi-trial searcher (checked with the config)
            queue = self.truncation_queue(ctx)
            ctx.run.log("seeded", truncations=[tag for tag, _ in queue])
            return self.multi_trial(ctx, name, queue=queue)
        return super().search_stage(ctx, name)

    def searcher_parts(self, ctx: SearchContext, wanted: set[str]) -> dict[str, Any]:
        """Method search's parts, the sorted teacher's truncations (the first k whole
        layers, k = 1..L) and its blockwise table (built when asked for)."""
        from spaces.bert_subnet import truncation

        assert isinstance(ctx, CompressContext)  # noqa: S101 (this method's context)
        parts = super().searcher_parts(ctx, wanted)
        parts["truncations"] = [truncation(ctx.space, k) for k in
                                range(1, int(ctx.space.config["num_hidden_layers"]) + 1)]
        if "table" in wanted:
            parts["table"] = ctx.block_table()
        return parts

    def truncation_queue(self, ctx: CompressContext) -> list[tuple[str, Any]]:
        """``[("first-k", architecture)]`` for k = 1..L within the run's constraints (all
        of them, FLOPs included when a seeded study has that limit): the ``truncation``
        searcher's plan, which seeds a multi-trial study."""
        return self.plan_of(ctx, TRUNCATION).queue


def _arm_label(name: str, settings: Any) -> str:
    """An audit arm's name: the evaluator's, with its ``score`` when that is not the
    metric (``inherited-kd, teacher-kl``)."""
    score = dict(settings or {}).get("score", "metric")
    return name if score == "metric" else f"{name}, {score}"


__all__ = ["KNAPSACK", "TRUNCATION", "Compress", "CompressConfig", "CompressContext",
           "ImportanceSettings", "KnapsackSettings"]
