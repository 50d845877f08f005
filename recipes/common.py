"""The run skeleton every recipe shares: the configuration header, the task data, the
context the stages read, the run around them and the multi-trial stage.

A method module holds its paper's steps and nothing else (as litgpt's ``finetune/*.py``
do): it declares a :class:`MethodConfig` subclass with its own sections, a
:class:`TaskContext` subclass when its stages share more than the task (a space, probe
logits...), and a :class:`Recipe` subclass whose :meth:`Recipe.stages` runs the steps
in order. :meth:`Recipe.run` does the rest the same way for every method::

    task name resolved -> run folder opened (lock, configuration snapshot)
      -> ctx = context(config).prepare()     # teacher, data, batches (cached)
      -> metrics["teacher"] = the teacher's row
      -> metrics |= stages(ctx)              # the method's steps
      -> metrics.json (merged with what is on disk), log "done"

What goes where: task data and batches live in :class:`TaskContext`; a stage that scores
several architectures uses :func:`run_study_stage`, its worker processes
:meth:`TaskContext.worker_parts` with the method's one study objective; an evaluator by
name is :meth:`TaskContext.build_evaluator`; the end of a model's part of the run (score,
row, export, record) is :meth:`TaskContext.finish`.
"""

from __future__ import annotations

import contextlib
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import numpy as np
import torch

from nas.config import ConfigError, cap_ok, check_fields
from nas.device import DEVICES, PRECISIONS, is_device_spec
from nas.methods import Method, RunOptions, load_experiment
from nas.rundir import RunDir
from nas.seeding import (
    REPORT_SAMPLE_STAGE,
    SEED_RANGE,
    is_seed,
    sample_rows,
    seed_stage,
    stage_seed,
)
from nas.teacher import FinetuneConfig
from nas.transfer import TransferText

if TYPE_CHECKING:
    from nas.network import GraphNet

log = logging.getLogger("nas.recipe")

DEV_SUBSETS = ("head", "seeded")
#: what every export of a run records (:meth:`TaskContext.export_keywords`)
EXPORT_KEYWORDS = frozenset({"labels", "tokenizer", "max_length", "task"})


# ---------------------------------------------------------------------------- config


@dataclass
class DataSettings:
    """The task data of a run (one meaning per cap, for every method).

    ``max_train_examples``: a seeded random subset of train (``None``: all of it; the
    seed is the run's, stage ``data``). ``max_dev_examples``: the dev split capped to its
    first N rows (``dev_subset: head``) or to a seeded random N (``seeded``, for dev files
    sorted by label such as SNIPS's). ``val_fraction``: the part of the training subset
    held out to score candidates, for methods that search (never dev, never test).
    ``max_seq_len``: the token length of every batch. ``max_report_examples``: the report
    split (``test``) capped to a seeded random N (``None``: all of it, what every recorded
    result uses; the smoke runs cap it, their point being the pipeline); the report says
    how many of how many it scored.
    """

    max_train_examples: int | None = None
    max_dev_examples: int | None = None
    max_report_examples: int | None = None
    dev_subset: str = "head"
    max_seq_len: int = 64
    val_fraction: float = 0.1

    def __post_init__(self) -> None:
        # 0 is refused, not read as "no cap": a cap of 0 rows kept every row, or none
        check_fields([("max_train_examples", cap_ok(self.max_train_examples, 2),
                       "null (all rows) or an integer >= 2"),
                      ("max_dev_examples", cap_ok(self.max_dev_examples),
                       "null (all rows) or an integer >= 1"),
                      ("max_report_examples", cap_ok(self.max_report_examples),
                       "null (all rows) or an integer >= 1"),
                      ("dev_subset", self.dev_subset in DEV_SUBSETS, " or ".join(DEV_SUBSETS)),
                      ("max_seq_len", 8 <= self.max_seq_len <= 512, "in [8, 512]"),
                      ("val_fraction", 0.0 < self.val_fraction < 1.0, "in (0, 1)")], self)


@dataclass
class MethodConfig:
    """The fields every experiment file has: the run's ``name``, the ``task`` (a name, a
    data file or a mapping: :mod:`nas.data.files`), the ``teacher`` (default: the packaged
    MiniLM), the run's ``seed``, the ``data`` caps, the teacher's fine-tuning overrides
    (``teacher_finetune``, a typed :class:`~nas.teacher.FinetuneConfig`: every key is
    checked before any stage; ``enabled: false`` takes ``teacher`` as a classifier the user
    fine-tuned already, its labels matched by name or by ``teacher_labels``, data label →
    model label: :func:`nas.teacher.own_teacher`) and ``latency_repeats``.

    ``device`` (``auto``: a CUDA GPU when there is one, else the CPU; ``cpu``, ``cuda``,
    ``cuda:N``) is where every stage computes, ``precision`` (``fp32``, ``bf16``, ``fp16``)
    the training precision: :mod:`nas.device`. Their defaults leave the configuration
    snapshot as it was before they existed."""

    name: str
    task: str | dict
    teacher: str | None = None
    seed: int = 0
    data: DataSettings = field(default_factory=DataSettings)
    teacher_finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    teacher_labels: dict[str, str] | None = None
    latency_repeats: int = 10
    device: str = "auto"
    precision: str = "fp32"

    def __post_init__(self) -> None:
        check_fields([("name", bool(str(self.name).strip()), "a non-empty name"),
                      ("name", is_plain_name(str(self.name)),
                       "a plain folder name (runs/NAME holds the run): no '/', '\\', '..' "
                       "or absolute path"),
                      ("task", bool(self.task if isinstance(self.task, dict)
                                    else str(self.task).strip()),
                       "a task name, a data file or a mapping"),
                      ("seed", is_seed(self.seed), SEED_RANGE),
                      ("latency_repeats", self.latency_repeats >= 1, "an integer >= 1"),
                      ("device", is_device_spec(self.device), DEVICES),
                      ("precision", self.precision in PRECISIONS, " or ".join(PRECISIONS))],
                     self)
        self.device = str(self.device).strip().lower()
        labels = self.teacher_labels
        if labels is not None:
            if not all(isinstance(x, str | int) and not isinstance(x, bool)
                       for pair in labels.items() for x in pair):
                raise ConfigError(f"teacher_labels must map each data label to a model label, "
                                  f"names both (e.g. {{negative: LABEL_0}}), got {labels!r}")
            self.teacher_labels = {str(k): str(v) for k, v in labels.items()}  # 0: as "0"
        if labels and self.teacher_finetune.enabled:
            raise ConfigError("teacher_labels names the labels of a teacher fine-tuned "
                              "already; set teacher_finetune.enabled=false with it, or remove "
                              "teacher_labels")

    def finetune_config(self) -> FinetuneConfig:
        return self.teacher_finetune


#: A method's configuration class: the context and the recipe of a method are typed by it,
#: so that its stages read their own sections (``ctx.cfg.search``) with their types.
ConfigT = TypeVar("ConfigT", bound=MethodConfig)
#: A context, returned as its own class by :meth:`TaskContext.prepare`.
ContextT = TypeVar("ContextT", bound="TaskContext[Any]")


def is_plain_name(name: str) -> bool:
    """Whether ``name`` names one folder inside ``runs/`` (the default run folder is
    ``runs/NAME``): a name with a path separator, ``..`` or an absolute path would put
    the run elsewhere."""
    return not ("/" in name or "\\" in name or ".." in name or name.strip() == "."
                or PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute())


#: the run-placement settings and the values that leave a snapshot as it was before them
_PLACEMENT_DEFAULTS = {"device": "auto", "precision": "fp32"}
#: settings added later, left out of a snapshot at these values (a run folder made before
#: them resumes)
_LATER_DEFAULTS = {"teacher_labels": None}


def snapshot(method: str, config: MethodConfig) -> dict[str, Any]:
    """The run folder's ``config.yaml``: every setting, defaults included, so that a
    resume can tell whether anything changed; ``device`` and ``precision`` only when set
    to other than ``auto`` and ``fp32``, so that a run folder made before they existed
    resumes."""
    values = asdict(config)
    for key, default in {**_PLACEMENT_DEFAULTS, **_LATER_DEFAULTS}.items():
        if key in values and values[key] == default:
            values.pop(key)
    finetune = values.get("teacher_finetune")
    if isinstance(finetune, dict) and finetune.get("enabled") is True:
        finetune.pop("enabled")
    transfer = values.get("transfer")
    if isinstance(transfer, dict) and asdict(TransferText()) == transfer:  # as before it was
        values.pop("transfer")
    return {"method": method, **values}


def load_typed(path: str | Path, method_class: type[Method], overrides: Any = ()) -> Any:
    """An experiment file's typed configuration, for a script that needs one method."""
    method, config = load_experiment(path, overrides)
    if not isinstance(method, method_class):
        raise ConfigError(f"{path}: method {method.name!r} is not {method_class.name}")
    return config


# --------------------------------------------------------------------- the context


class TaskContext(Generic[ConfigT]):
    """Stages 1–2 of every method and what the later stages share.

    :meth:`prepare` fine-tunes (or finds) the teacher, reads the splits, takes the
    subsets, checks dev and the report split for overlap with train, loads the teacher's
    tokenizer and makes the evaluation and latency batches. A subclass adds what its
    method's stages share (a space, probe logits...) by extending :meth:`prepare`.

    ``pair_input``: ``joined`` (``[CLS] a [SEP] b [SEP]``, as the teacher reads a pair) or
    ``separate`` (each sentence tokenised alone, AdaBERT §3.1). ``eval_batch_size``: the
    batch size of the dev, report-split and latency batches.
    """

    pair_input: ClassVar[str] = "joined"
    #: how many stages the method logs ("stage 2/8: data")
    stage_count: ClassVar[int] = 0

    def __init__(self, config: ConfigT, run: RunDir, options: RunOptions,
                 eval_batch_size: int = 32) -> None:
        self.cfg: ConfigT = config
        self.run, self.options = run, options
        self.eval_batch_size = eval_batch_size
        self.seconds: dict[str, float] = {}
        self._teacher_logits: dict[str, np.ndarray] = {}

    # -- settings shortcuts ----------------------------------------------------------
    @property
    def task(self) -> str:
        return self.cfg.task  # type: ignore[return-value]  # a name once the run resolved it

    @property
    def seed(self) -> int:
        return self.cfg.seed

    @property
    def max_seq_len(self) -> int:
        return self.cfg.data.max_seq_len

    @property
    def progress(self) -> bool:
        return self.options.progress

    def stage(self, number: int, text: str, *args: Any) -> None:
        """One log line per stage: ``stage 2/8: data``."""
        prefix = f"stage {number}/{self.stage_count}: " if self.stage_count else ""
        log.info(prefix + text, *args)

    @property
    def evaluated_splits(self) -> str:
        """The splits a model is scored on, for log lines: "dev and test", or "dev" when
        the report split is dev (MRPC)."""
        return " and ".join(dict.fromkeys(["dev", self.report_split]))

    @classmethod
    def check_config(cls, config: ConfigT) -> None:
        """What the method's stages need of ``config`` that only a file outside it can
        say (the teacher's shape, read from its configuration), refused in one line; part
        of :meth:`Recipe.validate`, so before stage 1 and in ``nas run --dry-run``. None
        here."""

    # -- stages 1 and 2 -----------------------------------------------------------------
    def prepare(self: ContextT) -> ContextT:
        self.prepare_teacher()
        self.prepare_data()
        self.prepare_batches()
        return self

    def prepare_teacher(self, number: int = 1) -> None:
        """Stage 1 (``number``): the teacher fine-tuned on the task (cached by its
        settings), or, with ``teacher_finetune.enabled: false``, the user's own fine-tuned
        classifier, its labels matched with the task's and its dev score measured."""
        from nas.teacher import finetune_teacher, own_teacher

        t0 = time.time()
        finetune = self.cfg.finetune_config()
        seed_stage(self.seed, "teacher")
        if finetune.enabled:
            self.stage(number, "teacher (fine-tuned on %s; cached by its settings)", self.task)
            self.teacher = finetune_teacher(self.task, self.cfg.teacher, self.options.data_dir,
                                            config=finetune, progress=self.progress)
        else:
            self.stage(number, "teacher (%s as fine-tuned already: teacher_finetune.enabled="
                       "false)", self.cfg.teacher)
            self.teacher = own_teacher(self.task, self.cfg.teacher, self.options.data_dir,
                                       config=finetune, labels=self.cfg.teacher_labels,
                                       progress=self.progress)
        self.run.log("teacher", model_dir=self.teacher.model_dir, metrics=self.teacher.metrics,
                     from_cache=self.teacher.from_cache,
                     **({} if finetune.enabled else {"fine_tuned_here": False}))
        self.seconds["teacher"] = round(time.time() - t0, 1)

    def prepare_data(self, number: int = 2) -> None:
        """Stage 2 (``number``): the training subset, dev (capped), the report split
        (``test`` where the task has one), and their overlap with train (logged, warned
        above 5%)."""
        from nas.measure import overlap_counts

        self.stage(number, "data")
        cuts = self.select_data()
        sizes = {"train": len(self.train), "dev": len(self.dev),
                 self.report_split: len(self.report)}  # the report split may be dev
        self.run.log("data", **sizes, cuts=cuts)
        self.overlap = overlap_counts(self.task, self.full_train,
                                      {"dev": self.dev, self.report_split: self.report})
        self.run.log("overlap", **self.overlap)
        self.transfer = self.load_transfer()

    def load_transfer(self) -> Any:
        """The ``transfer:`` rows (:func:`nas.transfer.load_transfer`: texts that overlap
        dev or the report split dropped, every label ``NO_LABEL``), or ``None``; what was
        read and dropped goes to the run log."""
        settings = getattr(self.cfg, "transfer", None)
        if not isinstance(settings, TransferText) or settings.texts is None:
            return None
        from nas.transfer import load_transfer

        data, info = load_transfer(settings, self.full_train, [self.dev, self.report])
        self.run.log("transfer", **info)
        log.info("transfer text: %d rows of %s (%d read, %d dropped: they overlap dev or "
                 "the report split)", info["rows"], info["file"], info["read"],
                 info["overlap_dropped"])
        return data

    def with_transfer(self, data: Any) -> Any:
        """``data`` followed by the transfer rows (when ``transfer:`` gives some: the
        file's, then the augmented variants of ``data``'s rows), with the teacher's logits
        on every part (each cached on disk by its own fingerprint, so the transfer text's
        are computed once for every run and seed that reads it)."""
        parts = [p for p in (getattr(self, "transfer", None), self.augmented(data))
                 if p is not None]
        if not parts:
            return data
        from nas.transfer import with_transfer

        joined = data
        for part in parts:
            joined = with_transfer(joined, part)
        if joined.fingerprint not in self._teacher_logits:
            self._teacher_logits[joined.fingerprint] = np.concatenate(
                [self.teacher_logits(p) for p in (data, *parts)])
        return joined

    def augmented(self, data: Any) -> Any:
        """``transfer.augment``'s variants of ``data``'s rows (:func:`nas.transfer.
        augmented_transfer`, cached by the teacher, the rows and the settings), or
        ``None``; the counts go to the run log once per data."""
        settings = getattr(self.cfg, "transfer", None)
        if not isinstance(settings, TransferText) or settings.augment.n == 0:
            return None
        if not hasattr(self, "_augmented"):
            self._augmented: dict[str, Any] = {}
        if data.fingerprint not in self._augmented:
            from nas.transfer import augmented_transfer

            rows, info = augmented_transfer(data, settings.augment, self.teacher.model_dir,
                                            self.max_seq_len, [self.dev, self.report],
                                            self.progress)
            self.run.log("transfer_augment", **info)
            log.info("transfer augmentation: %d variants of %d of %d rows (%s), %d kept",
                     info["variants"], info["augmented_rows"], info["of"], info["rows_kind"],
                     info["rows"])
            self._augmented[data.fingerprint] = rows
        return self._augmented[data.fingerprint]

    def select_data(self) -> list[str]:
        """The splits read and capped as ``data`` says (``train``, ``dev``, ``report``;
        ``full_train`` and ``report_rows`` before the caps); returns the cuts made, as
        the run log records them (``nas run --dry-run`` stops here)."""
        from nas.data import load_task, report_split

        d, data_dir = self.cfg.data, self.options.data_dir
        cuts: list[str] = []
        self.full_train = load_task(self.task, "train", data_dir)
        self.train = seeded_subset(self.full_train, d.max_train_examples, self.seed, "data",
                                   "data.max_train_examples", cuts)
        full_dev = load_task(self.task, "dev", data_dir)
        if d.dev_subset == "seeded":
            self.dev = seeded_subset(full_dev, d.max_dev_examples, self.seed, "dev-subset",
                                     "data.max_dev_examples", cuts)
        else:
            self.dev = full_dev.head(d.max_dev_examples)
            if len(self.dev) < len(full_dev):
                _note_cut(full_dev.split, len(full_dev), len(self.dev),
                          "data.max_dev_examples (the first rows)", cuts)
            _warn_lost_classes(full_dev, self.dev)
        self.report_split = report_split(self.task)
        if self.report_split == "dev":
            self.report = self.dev
            self.report_rows = len(self.dev)
        else:
            full_report = load_task(self.task, self.report_split, data_dir)
            self.report_rows = len(full_report)
            self.report = seeded_subset(full_report, d.max_report_examples, self.seed,
                                        REPORT_SAMPLE_STAGE, "data.max_report_examples", cuts)
        return cuts

    def prepare_batches(self) -> None:
        """The teacher's tokenizer, the dev and report-split batches, and the latency
        batches (batch 1 and 32 at the report split's median length)."""
        from nas.measure import median_length_batches
        from nas.tokenization import load_tokenizer

        self.tokenizer = load_tokenizer(self.teacher.model_dir)
        bs = self.eval_batch_size
        self.dev_batches = list(self.batches(self.dev, bs))
        self.report_batches = list(self.batches(self.report, bs))
        self.median_tokens, self.latency_batches = median_length_batches(
            self.report, self.tokenizer, self.max_seq_len, self.batches)

    def carve_validation(self) -> tuple[Any, Any]:
        """``(search_train, search_val)``: ``data.val_fraction`` of the training subset held
        out (seeded, stage ``split``) to score candidates; dev and test stay unseen."""
        from nas.data import train_val_split

        if not hasattr(self, "_carve"):
            self._carve = train_val_split(self.train, self.cfg.data.val_fraction,
                                          stage_seed(self.seed, "split"))
        return self._carve

    # -- batches --------------------------------------------------------------------------
    def batches(self, data: Any, batch_size: int, *, shuffle: bool = False, seed: int = 0,
                start: int = 0) -> Iterator[dict[str, torch.Tensor]]:
        """Batches of ``data`` with the teacher's tokenizer (in data order unless
        ``shuffle``); pairs as ``pair_input`` says."""
        from nas.data import iter_batches

        separate = self.pair_input == "separate" and self.train.is_pair
        for b in iter_batches(data, self.tokenizer, batch_size, self.max_seq_len,
                              shuffle=shuffle, seed=seed, separate_b=separate,
                              start_batch=start):
            if separate:  # the first sentence is the model's input; the second rides along
                b = {**b, "input_ids": b["input_ids_a"], "attention_mask": b["attention_mask_a"]}
            yield b

    def train_batches(self, data: Any, batch_size: int, stage: str
                      ) -> Callable[[int, int], Iterator[Any]]:
        """A stage's seeded training batch source over ``data`` (length-bucketed, the same
        for every candidate and on resume: :func:`nas.distill.general.seeded_batches`)."""
        from nas.distill.general import seeded_batches, token_lengths

        return seeded_batches(data, self.tokenizer, batch_size, self.max_seq_len, self.seed,
                              stage, token_lengths(self.tokenizer, data, self.max_seq_len))

    def fit_stage(self, stage: str, model: torch.nn.Module, settings: Any, data: Any,
                  loss: Callable[..., Any], *, out: Path, saved: torch.nn.Module | None = None,
                  desc: str | None = None, log_fields: Mapping[str, Any] | None = None,
                  **hooks: Any) -> Any:
        """Train ``model`` for one stage of the run and keep the result.

        Seeded from the run's seed and ``stage`` (:func:`nas.seeding.seed_stage`, just
        before the loop, so the model is built first), on :meth:`train_batches` of
        ``data``, checkpointed as ``RUN/<stage>.safetensors`` (``--resume`` continues
        there); then the weights of ``saved`` (default ``model``) go to ``out``, and the
        stage's steps, time and loss history to the run log. ``hooks``: the
        :class:`nas.train.Trainer`'s (``on_epoch_end``, ``after_step``...).
        """
        from nas.cache import save_weights
        from nas.train import Trainer, loop_settings

        seed_stage(self.seed, stage)
        t0 = time.time()
        result = Trainer(model, loop_settings(settings),
                         self.train_batches(data, settings.batch_size, stage),
                         math.ceil(len(data) / settings.batch_size), loss,
                         checkpoint=self.run.checkpoint_path(stage), progress=self.progress,
                         desc=desc or stage, **hooks).fit()
        save_weights(saved or model, out)
        self.seconds[stage] = round(time.time() - t0, 1)
        self.run.log(stage, steps=result.steps, seconds=round(result.seconds, 1),
                     history=result.history, **(log_fields or {}))
        self.run.remove_checkpoint(stage)
        return result

    def worker_parts(self, objective: StudyObjective, *args: Any) -> Callable[[], tuple[Any, Any]]:
        """What :func:`run_study_stage` hands a worker process (``parts``): it prepares
        this method's context there and calls ``objective(ctx, *args)``."""
        from functools import partial

        return partial(worker_parts, type(self), self.cfg, self.options, objective, *args)

    @contextlib.contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Record the wall time of a block in ``metrics.json``'s ``wall_seconds``."""
        t0 = time.time()
        yield
        self.seconds[name] = round(time.time() - t0, 1)

    @property
    def latency_repeats(self) -> int:
        return self.cfg.latency_repeats

    # -- the teacher ------------------------------------------------------------------------
    def task_teacher(self) -> tuple[Any, Any]:
        """``(space, model)``: the fine-tuned teacher in the engine's ``bert`` design
        (it records pre-softmax attention scores, which ``transformers`` 5.x does not
        return), frozen, in eval mode."""
        from nas.hf import load_teacher_as_design

        if not hasattr(self, "_task_teacher"):
            space, model = load_teacher_as_design(self.teacher.model_dir)
            for p in model.parameters():
                p.requires_grad_(False)
            model.eval()
            self._task_teacher = (space, model)
        return self._task_teacher

    def teacher_logits(self, data: Any) -> np.ndarray:
        """The fine-tuned teacher's logits on ``data`` (N, C), cached on disk by the
        data's fingerprint (:func:`nas.distill.general.cached_teacher_logits`)."""
        from nas.distill.general import cached_teacher_logits

        key = data.fingerprint
        if key not in self._teacher_logits:
            self._teacher_logits[key] = cached_teacher_logits(
                self.teacher.model_dir, lambda: self.task_teacher()[1], data, self.tokenizer,
                self.max_seq_len, self.progress)
        return self._teacher_logits[key]

    def teacher_costs(self) -> dict[str, Any]:
        """The teacher's row of the report (kept in ``teacher.json``)."""
        from nas.measure import cached_teacher_costs

        return cached_teacher_costs(
            self.run, self.teacher, self.train.num_labels, report_split=self.report_split,
            report=self.report, tokenizer=self.tokenizer, max_seq_len=self.max_seq_len,
            latency_batches=self.latency_batches, latency_repeats=self.cfg.latency_repeats,
            engine_teacher=lambda: self.task_teacher()[1])

    def speedup(self, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
        """The searched model's speed-up over the teacher, both timed now in interleaved
        rounds (:func:`nas.measure.paired_speedups`): as engine graphs in PyTorch fp32, or,
        for an export that ships an ONNX graph, in that graph against the teacher exported
        the same way, with the speed-ups against the teacher in PyTorch fp32 and the
        structural one beside it (:mod:`nas.shipped`); each final point with an export of
        its own (``final/<tag>``, methods search and compress) under ``final``. ``None``
        when the run exported no native model."""
        searched = (metrics.get("searched") or {}).get("tag") or "searched"
        found = self._paired_export(self.run.path / "export", searched)
        if found is None or "searched" not in metrics:
            return None
        # the searched export is the first final point's (the same model, copied): timed once
        finals = {tag: found if tag == searched else self._paired_export(folder, tag)
                  for tag, folder in self.final_exports(metrics).items()}
        finals = {tag: timed for tag, timed in finals.items() if timed is not None}
        return {**found, **({"final": finals} if finals else {})}

    def final_exports(self, metrics: Mapping[str, Any]) -> dict[str, Path]:
        """Each final point's own export folder (``final/<tag>/export``, methods search
        and compress: seed 0's), by tag, in the run's order."""
        return {row["tag"]: self.run.path / "final" / row["tag"] / "export"
                for row in metrics.get("final") or [] if isinstance(row.get("tag"), str)}

    def paired(self, metrics: Mapping[str, Any]) -> dict[str, Any] | None:
        """Each export of the run (the searched one, and each final point's seed-0 export
        under ``final/<tag>``) against the teacher on the same report-split examples:
        McNemar's test and the paired difference (:mod:`nas.paired`), the shipped file
        against the teacher as fine-tuned. ``None`` for a tagging task or a run without
        an export."""
        from nas.errors import NasError
        from nas.paired import paired_with_teacher

        report = getattr(self, "report", None)
        if report is None or report.kind == "tagging" or not (
                self.run.path / "export").is_dir():
            return None
        searched = (metrics.get("searched") or {}).get("tag") or "searched"
        exports = {searched: self.run.path / "export", **self.final_exports(metrics)}
        try:
            return paired_with_teacher(self.teacher.model_dir, exports, report)
        except NasError as err:  # an extra the run can do without; say why it is missing
            log.warning("no paired comparison with the teacher: %s", err)
            return None

    def _paired_export(self, folder: Path, what: str) -> dict[str, Any] | None:
        """The export in ``folder`` timed against the teacher: in PyTorch fp32, both as
        engine graphs (:func:`nas.runtime.timed_callable`), or in the ONNX graph it ships
        (:func:`nas.shipped.shipped_speedups`, on the CPU); ``None`` without an export."""
        from nas.device import to_device
        from nas.measure import paired_speedups
        from nas.runtime import load, timed_callable
        from nas.shipped import shipped_speedups, ships_onnx

        if not (folder / "config.json").is_file():
            return None
        teacher = self.task_teacher()[1]
        device = next(teacher.parameters()).device
        if ships_onnx(folder) and device.type == "cpu":
            return shipped_speedups(teacher, self.teacher_export(), folder,
                                    self.latency_batches, self.cfg.latency_repeats, what=what)
        student = timed_callable(load(folder, device=str(device)))
        batches = {bs: to_device(b, device) for bs, b in self.latency_batches.items()}
        with torch.no_grad():
            return paired_speedups(teacher, student, batches, self.cfg.latency_repeats,
                                   device=device, what=what)

    def teacher_export(self) -> Path:
        """The teacher exported, once per run folder, in the format and precision the
        run's students ship in (``final.export``; :func:`nas.shipped.teacher_export`):
        what their speed-up in the same runtime is timed against."""
        from nas.shipped import TEACHER_EXPORT, teacher_export

        space, model = self.task_teacher()
        return teacher_export(self.export_model, space, model,
                              (self.run.path / TEACHER_EXPORT).absolute(),
                              self.format_keywords("onnx"))

    # -- what evaluators, exports and the report read --------------------------------------
    def scoring_fields(self, val_batches: list[Any] | None = None) -> dict[str, Any]:
        """An evaluator task's scoring fields (:class:`evaluators.base.ScoringData`) as
        keywords: validation batches (dev unless given), the metric, the latency batches
        and the FLOPs length."""
        return {"val_batches": self.dev_batches if val_batches is None else val_batches,
                "metric": self.dev.metric, "latency_batches": self.latency_batches,
                "seq_len": self.max_seq_len}

    def scoring_data(self, val_batches: list[Any] | None = None) -> Any:
        """What :func:`evaluators.build.build_evaluator` scores with: the scoring fields,
        the report split's batches (when it is not dev) and no initialisation."""
        from evaluators.base import FullTrainingData

        return FullTrainingData(**self.scoring_fields(val_batches),
                                test_batches=self.report_batches_or_none())

    def build_evaluator(self, name: str, settings: Mapping[str, Any] | None,
                        parts: Mapping[str, Any], *, val_batches: list[Any] | None = None,
                        test: bool = False) -> Any:
        """The registered evaluator ``name`` with its ``settings``, scored on dev (or
        ``val_batches``) and, with ``test``, on the report split. It gets the parts it asks
        for (:meth:`evaluators.base.Evaluator.parts`) from ``parts`` (what the method can
        give: a space, training batches, a loss...) and from the run (``latency_repeats``,
        ``progress``, ``test_batches``); a part it needs and nobody gave is refused in one
        line (:func:`evaluators.build.build_evaluator`)."""
        from evaluators.base import EVALUATORS, FullTrainingData
        from evaluators.build import build_evaluator

        required, optional = EVALUATORS.get(name).parts()
        test_batches = self.report_batches_or_none() if test else None
        pool = {"latency_repeats": self.latency_repeats, "progress": self.progress,
                "test_batches": test_batches, **parts}
        given = {p: pool[p] for p in (*required, *optional) if p in pool}
        scoring = FullTrainingData(**self.scoring_fields(val_batches), test_batches=test_batches)
        return build_evaluator(name, settings, scoring, **given)

    def report_batches_or_none(self) -> list[Any] | None:
        """The report split's batches, or ``None`` when it is dev (scored once only)."""
        return self.report_batches if self.report_split != "dev" else None

    def export_keywords(self) -> dict[str, Any]:
        """What an export of this run records: labels, tokenizer, length, task (the
        keywords :meth:`export_model` gives :func:`nas.export.export`)."""
        return {"labels": list(self.train.label_names), "tokenizer": self.teacher.model_dir,
                "max_length": self.max_seq_len, "task": self.task}

    def export_info(self) -> dict[str, Any]:
        """What a study records for ``nas export --run`` (a context adds how it rebuilds
        its space)."""
        return self.export_keywords()

    # -- the end of a run: the model's score, its row, its export and its record --------
    def score_model(self, space: Any, arch: Any, model: torch.nn.Module) -> dict[str, Any]:
        """A trained model's row of ``metrics.json``: ``dev`` and report-split metrics,
        parameters and FLOPs from the cost model at the run's length, batch-1 and batch-32
        latency at the report split's median length (:mod:`nas.measure`), the same for
        every method so that ``nas report`` compares like with like."""
        from nas.architecture import Architecture
        from nas.cost import count_costs, measure_latency
        from nas.evaluate import classify

        arch = arch if arch is not None else Architecture({}, space.name)
        model.eval()
        counted = count_costs(space, arch if len(arch) else None, self.max_seq_len)
        row: dict[str, Any] = {
            "arch": dict(arch), "arch_id": arch.id, "space": space.name,
            "dev": classify(model, self.dev_batches, self.dev.metric),
            "params": counted.params, "flops": counted.flops, "seq_len": counted.seq_len,
            "latency": {f"batch{bs}": measure_latency(model, batch,
                                                      repeats=self.latency_repeats).to_dict()
                        for bs, batch in self.latency_batches.items()},
        }
        if self.report_split != "dev":
            row[self.report_split] = classify(model, self.report_batches, self.dev.metric)
        return row

    def evaluate(self, evaluator: Any, arch: Any, what: str) -> Any:
        """``evaluator``'s :class:`~evaluators.base.EvalResult` for ``arch``; a failed or
        pruned one stops the run in one line naming ``what`` was scored."""
        from evaluators.base import run_evaluation
        from nas.errors import NasError

        result = run_evaluation(evaluator, arch)
        if not result.ok:
            raise NasError(f"{what} ({arch.id}) {result.status}: {result.reason}")
        return result

    def result_row(self, tag: str, arch: Any, result: Any) -> dict[str, Any]:
        """An evaluator's result (or a study trial's stored metrics and costs) as a row of
        ``metrics.json`` (:func:`evaluators.retrain.report_row`)."""
        from evaluators.retrain import report_row

        return report_row(tag, arch, result, self.report_split)

    def export_model(self, space: Any, arch: Any, folder: str | Path, *, fmt: str = "native",
                     model: GraphNet | None = None, weights: Any = None,
                     **keywords: Any) -> Path:
        """Export ``arch`` of ``space`` (a trained ``model``, or ``weights``) into
        ``folder`` (relative: inside the run folder) as ``fmt``, with the run's labels,
        tokenizer, length and task (``keywords`` replace or add to them: a student's own
        vocabulary, a tagging head); one place for every method's export."""
        from nas.export import export

        if not EXPORT_KEYWORDS <= set(keywords):  # a context without a teacher gives all four
            keywords = {**self.export_keywords(), **keywords}
        return export(space, arch if arch else None, self.run.path / folder, model=model,
                      weights=weights, fmt=fmt, overwrite=True, **keywords)

    def export_label(self, fmt: str) -> str:
        """What a folder the method exports as ``fmt`` is written as, in words for the log:
        the file's ``final.export`` format where it sets one, with its quantisation."""
        final = getattr(getattr(self.cfg, "final", None), "export", None)
        written = getattr(final, "format", None) or fmt
        quantize = getattr(final, "quantize", None)
        return f"{written} {quantize}" if quantize else written

    def format_keywords(self, fmt: str) -> dict[str, Any]:
        """The export format of a folder the method exports as ``fmt``, its int8 settings
        and its vocabulary trim, as the file's ``final.export`` sets them (methods search
        and compress: ``format``, ``quantize: int8`` compared with fp32 on dev, the report
        split untouched, ``max_int8_drop``, and ``trim_vocab``: the pieces of the whole
        train split, scored on the report split); ``fmt`` alone for a method without it."""
        final = getattr(getattr(self.cfg, "final", None), "export", None)
        trim: dict[str, Any] = {}
        if getattr(final, "trim_vocab", False):  # the pieces of the whole train split
            from nas.vocab_trim import task_trim

            trim = {"trim": task_trim(self.full_train, self.report, self.report_split,
                                      self.metric)}
        if final is None or not final.quantize:
            return {"fmt": getattr(final, "format", None) or fmt, **trim}
        from nas.quantize import DevSet

        return {**trim, "fmt": final.format, "quantize": final.quantize,
                "max_int8_drop": float(final.max_int8_drop),
                "dev": DevSet.of(self.dev, metric=self.metric)}

    def finish(self, tag: str, space: Any, arch: Any, *, model: GraphNet | None = None,
               evaluator: Any = None, what: str = "the retrain",
               exports: Mapping[str, str] | None = None, stage: int | None = None,
               extra: Mapping[str, Any] | None = None, record: str | None = None
               ) -> dict[str, Any]:
        """The end of a model's part of the run, the same for every method: score it (a
        trained ``model`` by :meth:`score_model`, or ``arch`` by ``evaluator``, which
        trains it), make its row (``tag``, with ``extra``), export it into each
        ``folder → format`` of ``exports`` (default ``export`` as ``native``; ``stage``
        numbers the log line) and save the row as ``record`` in the run folder.
        Returns the row."""
        weights = None
        if model is not None:
            row = {"tag": tag, **self.score_model(space, arch, model)}
        else:
            row = self.result_row(tag, arch, self.evaluate(evaluator, arch, what))
            weights = evaluator.weights_path(arch)
        row.update(extra or {})
        exports = {"export": "native"} if exports is None else exports
        if exports and stage is not None:
            self.stage(stage, "export of %s (%s)", tag, ", ".join(dict.fromkeys(
                self.export_label(fmt) for fmt in exports.values())))
        from nas.export import copy_export

        made: dict[str, Path] = {}
        for folder, fmt in exports.items():
            if fmt in made:  # the same model in the same format: the same files, copied
                copy_export(made[fmt], self.run.path / folder)
                continue
            made[fmt] = self.export_model(space, arch, folder, model=model, weights=weights,
                                          **self.format_keywords(fmt))
        if record is not None:
            self.run.save_json(record, row)
        return row

    def evaluation(self) -> dict[str, Any]:
        """``metrics.json``'s ``evaluation``: the report split, its files and size, the
        latency length and the overlap with train."""
        out = {"split": self.report_split, "file": ", ".join(self.report.sources),
               "examples": len(self.report), "latency_tokens": self.median_tokens,
               "overlap_with_train": self.overlap}
        if len(self.report) < self.report_rows:
            out["of_examples"] = self.report_rows  # a seeded sample of the split
        return {**out, **trivial_answers(self.report)}

    @property
    def metric(self) -> str:
        return self.dev.metric


def seeded_subset(data: Any, n: int | None, seed: int, stage: str, setting: str,
                  cuts: list[str] | None = None) -> Any:
    """``n`` rows of ``data`` drawn with the run's seed for ``stage``, in file order; all
    of it when ``n`` is ``None`` or not smaller. The cut is logged with the setting that
    made it (and added to ``cuts``, which the run log records)."""
    rows = sample_rows(len(data), n, seed, stage)
    if rows is None:
        return data
    _note_cut(data.split, len(data), len(rows), setting, cuts)
    return data.subset(rows)


def _note_cut(split: str, rows: int, used: int, setting: str, cuts: list[str] | None) -> None:
    from nas.data.tasks import cap_note

    note = cap_note(split, rows, used, setting)
    log.info("%s", note)
    if cuts is not None:
        cuts.append(note)


def trivial_answers(data: Any) -> dict[str, Any]:
    """What a model that learned nothing scores on ``data``: ``classes`` (chance is one
    in that many) and ``majority``, the most frequent label and its share (always
    answering it). The report flags a model within 2 points of either."""
    if not data.labels:
        return {}
    counts = np.bincount(np.asarray(data.labels), minlength=data.num_labels)
    top = int(np.argmax(counts))
    return {"classes": data.num_labels,
            "majority": {"label": data.label_names[top], "share": float(counts[top] / len(data))}}


def _warn_lost_classes(full: Any, head: Any) -> None:
    """The first N rows of a split sorted by label hold fewer classes than the split:
    the score would then be of a few classes only. One warning line, with the fix."""
    if len(head) == len(full) or not full.labels:
        return
    kept, present = len(set(head.labels)), len(set(full.labels))
    if kept < present:
        log.warning("data.max_dev_examples keeps the first %d dev rows, which hold %d of the "
                    "%d classes; set data.dev_subset=seeded for a seeded sample", len(head),
                    kept, present)


# ------------------------------------------------------------------------- the run


class Recipe(Method, Generic[ConfigT]):
    """A method whose run is the shared skeleton around its :meth:`stages`.

    A subclass sets ``config_class`` (a :class:`MethodConfig` subclass), optionally
    ``context_class`` (a :class:`TaskContext` subclass) and ``searchers``, and writes
    :meth:`stages`. Everything else — the task's resolution, the run folder, stages 1–2,
    the teacher's row, ``metrics.json`` and the log — is done here the same way for all.
    """

    context_class: ClassVar[type[TaskContext[Any]]] = TaskContext
    #: whether the method's final retrain distils on ``transfer:`` text (methods search
    #: and compress: a ``transfer`` field of type :class:`~nas.transfer.TransferText`);
    #: another method's file is refused in one line (:func:`nas.methods.method_config`)
    uses_transfer: ClassVar[bool] = False

    def run(self, config: ConfigT, options: RunOptions) -> dict[str, Any]:
        """Every stage on the configuration's ``device`` in its ``precision``
        (:func:`nas.device.use_device`: what the builders, the teacher, the training loop
        and scoring read); under ``torchrun`` the process joins its group first (NCCL on
        GPUs, gloo on the CPU). The cache entries the run reads (teacher, importance
        scores, teacher outputs, latency table) stay locked for readers until it ends
        (:func:`nas.cache.read_scope`): ``nas cache clear`` leaves them alone meanwhile."""
        from nas.cache import read_scope
        from nas.device import describe, init_distributed, use_device

        self.validate(config, options)
        # a plug-in's configuration that is not a MethodConfig runs where auto says
        precision = getattr(config, "precision", "fp32")
        with read_scope(), use_device(getattr(config, "device", "auto"), precision) as device:
            init_distributed(device)
            log.info("device %s, precision %s", describe(device), precision)
            return self._run(config, options)

    def _run(self, config: ConfigT, options: RunOptions) -> dict[str, Any]:
        started = time.time()
        options = replace(options, resume=self.resumes(config, options))
        ctx = self.prepared(config, options)
        # the folder's lock ends with the run, not with the process: a notebook's
        # ``nas.search`` must leave it free for `nas run --resume` or another worker
        with ctx.run:
            return self._stages_to_metrics(ctx, options, started)

    def _stages_to_metrics(self, ctx: Any, options: RunOptions, started: float
                           ) -> dict[str, Any]:
        """The stages, the exports against the teacher, the evaluation and the run's
        records, on a prepared context; returns the metrics it saved."""
        config, run = ctx.cfg, ctx.run
        metrics: dict[str, Any] = {}
        if getattr(ctx, "teacher", None) is not None:
            t0 = time.time()
            metrics["teacher"] = ctx.teacher_costs()
            ctx.seconds["teacher_costs"] = round(time.time() - t0, 1)
        metrics.update(self.stages(ctx))
        # the exports against the teacher: timed beside it (never cached), then answered
        # example by example on the report split (unless the stages wrote their own)
        for name in ("speedup", "paired"):
            if (getattr(ctx, "teacher", None) is None or not hasattr(ctx, name)
                    or name in metrics):
                continue
            t0 = time.time()
            found = getattr(ctx, name)(metrics)
            if found is not None:
                metrics[name] = found
                ctx.seconds[name] = round(time.time() - t0, 1)
        metrics.setdefault("metric", ctx.metric)
        if getattr(ctx, "report", None) is not None and "evaluation" not in metrics:
            metrics["evaluation"] = ctx.evaluation()  # unless the stages wrote their own
        # wall time of the stages this process ran (a resumed run shows what it redid)
        metrics["wall_seconds"] = {**ctx.seconds, "total": round(time.time() - started, 1)}
        metrics["environment"] = environment()
        # merged with what is on disk now: stages of one run folder may run in separate
        # processes (AdaBERT's searched and random arms) and finish in either order
        run.save_json("metrics.json", {**(run.load_json("metrics.json") or {}), **metrics})
        write_cards(run)
        run.log("done", **self.done_fields(config, options))
        return metrics

    def open(self, config: ConfigT, options: RunOptions,
             **snapshot_extra: Any) -> tuple[ConfigT, RunDir]:
        """The task's files read and checked, then the run folder (locked, with the
        configuration snapshot); returns the configuration with the task as a name."""
        from nas.data import resolve_task

        task = resolve_task(config.task)
        self.check_transfer(config, task)
        if options.resume and getattr(options.study, "storage", None) is None:
            from searchers.study import check_own_storages

            check_own_storages(options.run_dir)  # a copy naming its original: before stage 1
        run = RunDir(options.run_dir, self.recorded(config, options, **snapshot_extra),
                     resume=options.resume, break_lock=options.break_lock)
        return replace(config, task=task), run

    def recorded(self, config: ConfigT, options: RunOptions, **snapshot_extra: Any
                 ) -> dict[str, Any]:
        """The configuration snapshot the run folder records (and a resume compares):
        :meth:`snapshot` with ``snapshot_extra``, the task's data inside the run folder
        relative to it, a user's own files as given (absolute)."""
        from nas.data.files import record_task

        recorded = {**self.snapshot(config), **snapshot_extra}
        recorded["task"] = record_task(recorded["task"], options.run_dir)
        if isinstance(recorded.get("transfer"), dict):  # the same rule for its file
            recorded["transfer"] = {**recorded["transfer"], "texts": record_task(
                recorded["transfer"]["texts"], options.run_dir)}
        return recorded

    def validate(self, config: ConfigT, options: RunOptions, *, calibrate: bool = True
                 ) -> list[str]:
        """The checks of every method on the skeleton (:meth:`Method.validate`): the
        device and precision on this machine, the task's files, the study storage named
        (``--storage`` or ``storage:``), and the run folder (writable, not another run's,
        the same configuration on ``--resume``, no live writer), all without writing; a
        method adds its own by extending it. Returns the notes of checks not made."""
        from nas.data import resolve_task
        from nas.device import autocast, resolve_device
        from nas.rundir import check_run_folder

        autocast(getattr(config, "precision", "fp32"),  # the checks only, as use_device
                 resolve_device(getattr(config, "device", "auto")))
        self.context_class.check_config(config)
        self.check_transfer(config, resolve_task(config.task))
        options = replace(options, resume=self.resumes(config, options))
        given = getattr(options.study, "storage", None)
        storage = given or getattr(config, "storage", None)
        if storage is not None:
            from searchers.storage import check_storage

            check_storage(storage, attach=bool(getattr(options.study, "attach", False)))
        if options.resume and given is None:
            from searchers.study import check_own_storages

            check_own_storages(options.run_dir)  # a copy naming its original
        check_run_folder(options.run_dir, self.recorded(config, options), resume=options.resume,
                         break_lock=options.break_lock)
        return []

    def check_transfer(self, config: ConfigT, task: str) -> None:
        """A ``transfer:`` file that cannot be read, or that does not fit the ``task``'s
        kind (pairs without ``text_pair``, a tagging task), is refused in one line before
        the teacher stage (:func:`nas.transfer.check_transfer`)."""
        settings = getattr(config, "transfer", None)
        if not isinstance(settings, TransferText) or not settings.enabled:
            return
        from nas.data.tasks import TASKS
        from nas.transfer import check_transfer

        kind = TASKS.get(task).kind if task in TASKS else None  # a hub task: read later
        check_transfer(settings, task, kind)

    def prepared(self, config: ConfigT, options: RunOptions, **snapshot_extra: Any
                 ) -> Any:
        """The run opened and stages 1–2 done: the method's context (also for scripts
        and ``nas audit``, which go on with single stages)."""
        config, run = self.open(config, options, **snapshot_extra)
        try:
            return self.context(config, run, options).prepare()
        except BaseException:
            run.close()  # nothing holds the folder when preparing it failed
            raise

    def snapshot(self, config: ConfigT) -> dict[str, Any]:
        return snapshot(self.name, config)

    def dry_run(self, config: ConfigT, options: RunOptions) -> dict[str, Any]:
        from recipes.plan import dry_run

        return dry_run(self, config, options)

    def resumes(self, config: ConfigT, options: RunOptions) -> bool:
        """Whether the run folder is opened to resume (``--resume``, by default); the
        stages see the decision as ``ctx.options.resume``."""
        return options.resume

    def context(self, config: ConfigT, run: RunDir, options: RunOptions
                ) -> TaskContext[ConfigT]:
        return self.context_class(config, run, options)

    def done_fields(self, config: ConfigT, options: RunOptions) -> dict[str, Any]:
        """Extra fields of the log's ``done`` line."""
        return {}

    def stages(self, ctx: Any) -> dict[str, Any]:
        """The method's steps after stages 1–2, in its paper's order; returns the metrics
        they add to ``metrics.json`` (``searched``: the method's model)."""
        raise NotImplementedError


#: The folders a run exports its searched model into (:meth:`TaskContext.finish` with
#: ``hf`` as the second's format; the model cards of both carry the run's metrics).
RESULT_FOLDERS = ("export", "export_hf")


def write_cards(run: RunDir) -> None:
    """The model cards of the run's result folders, written again with ``metrics.json``:
    a stage exports before the run's metrics (the teacher's row, the report split) are
    complete (:mod:`nas.model_card`)."""
    from nas.model_card import write_card

    metrics = run.load_json("metrics.json")
    for folder in RESULT_FOLDERS:
        if (run.path / folder / "config.json").is_file():
            write_card(run.path / folder, metrics)


def environment() -> dict[str, Any]:
    """What a recorded result depends on besides its configuration: the engine's commit
    (``None`` outside a git checkout) and version, the libraries' versions and the number
    of torch threads. Float sums reduce in another order with more threads, so a small
    model's score can move with the thread count (MobileBERT's smoke arm: dev 0.5 at one
    thread, 0.53125 at two): compare results measured at the same count. A run on another
    device than the CPU records it (``device``): a GPU's sums differ again."""
    import subprocess

    import transformers

    import nas

    try:  # the checkout this engine runs from; no shell, a fixed command
        commit = subprocess.run(["git", "rev-parse", "HEAD"],  # noqa: S603, S607
                                cwd=Path(__file__).resolve().parents[1], capture_output=True,
                                text=True, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        commit = None
    from nas.device import current_device, describe

    device = current_device()  # a GPU run says which GPU; CPU rows keep their fields
    return {"commit": commit, "engine": nas.__version__, "torch": torch.__version__,
            "transformers": transformers.__version__, "threads": torch.get_num_threads(),
            **({"device": describe(device)} if device.type != "cpu" else {})}


# ------------------------------------------------------------ the multi-trial stage


@dataclass
class StudyStage:
    """What a finished multi-trial stage gives its recipe."""

    study: Any
    spec: Any
    trials: list[Any]  # the complete trials, in number order
    seconds: float


def mean_std(scores: list[float]) -> dict[str, float]:
    """``{"mean", "std"}`` of a stage's scores (the sample sd; 0 for one score)."""
    return {"mean": statistics.mean(scores),
            "std": statistics.stdev(scores) if len(scores) > 1 else 0.0}


def run_study_stage(ctx: TaskContext, *, searcher: str, space: Any, evaluator: Any,
                    settings: Any, parts: Callable[[], tuple[Any, Any]], name: str | None = None,
                    run_dir: Path | None = None, seed: int | None = None,
                    default_trials: int = 12, resume: bool | None = None,
                    factory: Any = None, queue: Sequence[tuple[str, Any]] = ()) -> StudyStage:
    """Run (or resume) one multi-trial stage on an Optuna study: ``evaluator`` (the
    study's, :func:`searchers.loop.study_evaluator`) scores each candidate of ``space``
    proposed by ``searcher``; ``parts`` builds a worker process's space and evaluator
    (``--workers N``). The storage, trial count and timeout come from the command line
    (``RunOptions.study``), else from ``settings``; the study lives in ``run_dir``
    (default: the run folder). ``factory`` and ``queue``: a method's own picks, run as
    the study's trials (:func:`searchers.loop.run_study`, :mod:`searchers.queued`)."""
    from searchers.loop import StudySpec, run_study
    from searchers.results import complete_trials

    folder = run_dir or ctx.run.path
    spec = StudySpec.for_run(
        searcher=searcher, name=name or ctx.cfg.name, run_dir=folder,
        seed=ctx.seed if seed is None else seed, settings=settings,
        options=ctx.options.study, default_trials=default_trials,
        resume=ctx.options.resume if resume is None else resume, seq_len=ctx.max_seq_len,
        progress=ctx.progress)
    spec.export = ctx.export_info()
    t0 = time.time()
    study = run_study(spec, space, evaluator, parts=parts, searcher=factory, queue=queue)
    return StudyStage(study=study, spec=spec, trials=complete_trials(study),
                      seconds=round(time.time() - t0, 1))


#: A method's study objective: ``objective(ctx, *args) -> (space, evaluator)``, the space a
#: study searches and the evaluator that scores its trials
#: (:func:`searchers.loop.study_evaluator`)
StudyObjective = Callable[..., tuple[Any, Any]]


def worker_parts(context_class: type[TaskContext[Any]], config: MethodConfig,
                 options: RunOptions, objective: StudyObjective, *args: Any
                 ) -> tuple[Any, Any]:
    """A worker process's space and evaluator (``--workers N``), for every method: the
    experiment's plug-ins imported again, stages 1–2 and the method's own preparation from
    the caches, in the run folder the first process holds (read-only here, no progress
    bars), then the method's study ``objective(ctx, *args)``, as the first process built
    its own. Built by :meth:`TaskContext.worker_parts` (picklable: module-level parts)."""
    plugins = getattr(config, "plugins", None)
    if plugins:
        from nas.plugins import import_plugins

        import_plugins(plugins)
    options = replace(options, progress=False)
    ctx = context_class(config, RunDir(options.run_dir), options).prepare()
    return objective(ctx, *args)


def report_reference(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """The teacher as the reference point of a study's Pareto plot, on the trials' scale:
    when the study's ``latency_ms`` was predicted by the latency model (the search
    summary's ``latency_scale``), the teacher's predicted latency; else (measured, or no
    scale recorded: the methods whose studies time each trial) the teacher's latency
    timed in the run, as the trials were, in PyTorch fp32, or on the ONNX runtime the
    trials were timed on (``latency_runtime``: the summary's ``teacher_latency_ms``).
    Never a measured point among predicted ones, nor a torch one among int8 ones."""
    from nas.teacher import metric_score

    teacher, metric = metrics.get("teacher") or {}, metrics.get("metric", "accuracy")
    if not (teacher.get("dev") and teacher.get("latency")):
        return {}
    point = {f"val_{metric}": metric_score(teacher["dev"], metric),
             "params": teacher["params"], "flops": teacher["flops"]}
    search = metrics.get("search") or {}
    if search.get("latency_scale") == "predicted" and "teacher_latency_ms" in search:
        point["latency_ms"] = search["teacher_latency_ms"]
    elif search.get("latency_scale", "measured") == "measured":
        if search.get("latency_runtime", "torch") == "torch":
            point["latency_ms"] = teacher["latency"]["batch1"]["median_ms"]
        elif "teacher_latency_ms" in search:
            point["latency_ms"] = search["teacher_latency_ms"]
    return {"teacher": point}


__all__ = ["DataSettings", "MethodConfig", "Recipe", "StudyStage", "TaskContext",
           "load_typed", "mean_std", "report_reference", "run_study_stage",
           "seeded_subset", "snapshot", "worker_parts"]
