"""Compress the teacher (``method: compress``, issue 30): search the fine-tuned teacher's
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
   (``latency: predicted`` by the latency model, or ``measured``; the ``objectives`` and
   ``constraints`` of method search), each candidate scored by
   ``inherited-kd``
   (:mod:`evaluators.inherited_kd`: the sorted teacher's slice, a short distillation
   from the full teacher, the validation score). The Puzzle-style ``blockwise``
   evaluator and its knapsack (Bercovich et al. 2025) plug in here by name, as any
   registered evaluator that takes this context's parts;
4. **final** — ``final.select`` (default: per speed-up 2, 5 and 15 over the teacher, the
   front point nearest it), each retrained ``final.seeds`` times by the full
   distillation of ``retrain:`` *from the inherited weights* (the same evaluator with the
   run's whole training subset and budget; issue 30, item 3c), scored on dev and the
   report split;
5. **export** — stock ``transformers`` ``BertForSequenceClassification`` where the child
   has that shape (whole layers dropped, all heads, one FFN width, the teacher's hidden
   width: SPEC §10), else the runtime as remote code (:mod:`nas.export`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, ClassVar

from nas.config import ConfigError, check_fields
from nas.methods import register_method
from recipes.common import seeded_subset
from recipes.search import (
    PROVIDED_PARTS,
    EvaluatorChoice,
    FinalSettings,
    Search,
    SearchConfig,
    SearchContext,
)

#: the space this method searches
SPACE = "bert-subnet"
#: where the search's batch-1 latency comes from
LATENCIES = ("predicted", "measured")


@dataclass
class ImportanceSettings:
    """The sort: ``method`` (``activation`` or ``gradient``) on ``samples`` calibration
    sequences of the candidates' training part (Minitron used 1,024; issue 30: 256)."""

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
    teacher shape and cached) or ``measured`` on each trained candidate (noisier; no
    calibration, as the smoke run uses)."""

    provided_parts: ClassVar[tuple[str, ...]] = (*PROVIDED_PARTS, "supernet", "logits_loss")

    space: str = SPACE
    importance: ImportanceSettings = field(default_factory=ImportanceSettings)
    evaluator: EvaluatorChoice = field(default_factory=lambda: EvaluatorChoice(
        name="inherited-kd", settings={"max_steps": 30, "lr": 1e-4, "hidden_weight": 1.0}))
    objectives: list = field(default_factory=lambda: ["accuracy", "latency_ms"])
    final: FinalSettings = field(default_factory=lambda: FinalSettings(
        select="latency_ratios", ratios=[2, 5, 15], seeds=2))
    latency: str = "predicted"

    def __post_init__(self) -> None:
        if self.space != SPACE:
            raise ConfigError(f"space: method compress searches {SPACE!r} (the teacher's own "
                              f"sub-networks), got {self.space!r}; use method search for "
                              "another space")
        check_fields([("latency", self.latency in LATENCIES, " or ".join(LATENCIES))], self)
        other = sorted(set(self.space_config) - {"layers"})
        if other:
            raise ConfigError(f"space_config.{other[0]}: method compress takes the shape from "
                              "the teacher; only layers (any or first) may be set")
        super().__post_init__()


class CompressContext(SearchContext):
    """Stages 1–2 of method search, then the sort, and the space and supernet made from
    the sorted teacher (module docstring)."""

    cfg: CompressConfig  # the search context's configuration, with the importance section

    def make_space(self) -> tuple[Any, dict[str, Any]]:
        """The sort (cached), then ``bert-subnet`` of the teacher's shape with the sorted
        teacher as its supernet."""
        from nas.compress.importance import sort_teacher
        from spaces.bert_subnet import bert_subnet_space, from_design

        imp = self.cfg.importance
        design, teacher = self.task_teacher()
        calibration = seeded_subset(self.search_train, imp.samples, self.seed, "calibration",
                                    "importance.samples")
        self.stage(2, "importance sort (%s) on %d sequences (cached by its settings)",
                   imp.method, len(calibration))
        with self.timed("sort"):
            sorted_teacher, _ = sort_teacher(
                teacher, list(self.batches(calibration, self.eval_batch_size)), imp.method,
                task=self.task, seed=self.seed)
        layers = self.cfg.space_config.get("layers", "any")
        space, self.supernet = from_design(sorted_teacher, design.config, layers)
        self.sort_info = {"method": imp.method, "samples": len(calibration),
                          "seconds": self.seconds["sort"]}
        self.run.log("sort", **self.sort_info)
        names = inspect.signature(bert_subnet_space).parameters
        return space, {k: v for k, v in space.config.items() if k in names}

    def evaluator_parts(self) -> dict[str, Any]:
        """The sorted teacher's supernet. The place to hand a further evaluator what it
        needs from the sort (the Puzzle-style ``blockwise`` evaluator: calibration
        batches, the teacher's block activations), with its names added to
        :attr:`CompressConfig.provided_parts`."""
        return {"supernet": self.supernet}

    def study_latency_fn(self) -> Any:
        """With ``latency: predicted``, this machine's latency model for the space (batch
        1, one thread, the run's length), calibrated once and cached when its table has
        none (:func:`nas.latency.space_predictor`)."""
        if self.cfg.latency != "predicted":
            return None
        from nas.latency import space_predictor

        def note(message: str) -> None:
            self.run.log("latency_model", note=message)

        return space_predictor(self.space, seq_len=self.max_seq_len, log=note)


@register_method("compress")
class Compress(Search):
    """``method: compress`` — the teacher's own sub-networks (module docstring)."""

    config_class = CompressConfig
    context_class = CompressContext
    export_format = "hf"

    def final_evaluator(self, ctx: SearchContext) -> tuple[str, dict[str, Any]]:
        """``inherited-kd`` with ``retrain:``'s budget, from the sorted teacher's slice;
        the hidden-state weight is the search evaluator's when it has one."""
        settings = ctx.cfg.evaluator.settings
        return "inherited-kd", ({"hidden_weight": settings["hidden_weight"]}
                                if "hidden_weight" in settings else {})

    def stages(self, ctx: CompressContext) -> dict[str, Any]:  # type: ignore[override]  # context_class makes ctx a CompressContext
        return {"sort": ctx.sort_info, **super().stages(ctx)}


__all__ = ["Compress", "CompressConfig", "CompressContext", "ImportanceSettings"]
