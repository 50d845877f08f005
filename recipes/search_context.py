"""The context of ``method: search``: stages 1–2 plus the space, the held-out part that
scores candidates and the parts an evaluator asks for (:meth:`SearchContext.evaluator`,
an evaluator by name)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas.config import ConfigError
from nas.device import table_rows
from nas.timing import ONNX_RUNTIMES
from nas.transfer import transfer_kd_loss
from recipes.common import (
    TaskContext,
)
from recipes.search_config import (
    Distillation,
    SearchConfig,
    check_evaluator,
    evaluator_settings,
)


@dataclass(frozen=True)
class Assistant:
    """A teacher assistant of ``final.chain`` (Mirzadeh et al. 2020): the retrained point
    ``tag`` (frozen, eval mode) and its logits on the final retrain's data."""

    tag: str
    model: Any
    logits: np.ndarray


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

    def final_data(self) -> Any:
        """The final retrain's training set: :meth:`final_train`, followed by the
        ``transfer:`` rows when the file gives some (their loss is the soft term only:
        :func:`nas.transfer.transfer_kd_loss`)."""
        return self.with_transfer(self.final_train())

    def teacher_latency_ms(self) -> float | None:
        """The teacher's batch-1 latency on the scale of the study's ``latency_ms``, which
        ``final.select: latency_ratios`` divides by each ratio: on torch the one timed in
        stage 1, as each candidate's is timed by its evaluator; on an ONNX runtime its
        graph timed there once (:meth:`teacher_runtime_ms`)."""
        if self.cfg.latency_settings.runtime in ONNX_RUNTIMES:
            return self.teacher_runtime_ms()
        latency = (self.run.load_json("teacher.json") or {}).get("latency", {})
        return latency.get("batch1", {}).get("median_ms")

    def teacher_runtime_ms(self) -> float:
        """The teacher (the engine's ``bert`` design of it) exported to the section's ONNX
        runtime and timed as a candidate is (the smallest latency batch), once a run."""
        if not hasattr(self, "_teacher_runtime_ms"):
            from nas.onnx_latency import measure_onnx_latency

            runtime = self.cfg.latency_settings.runtime
            batch = self.latency_batches[min(self.latency_batches)]
            timed = measure_onnx_latency(self.task_teacher()[1], batch, runtime,
                                         repeats=self.cfg.latency_repeats)
            self.run.log("teacher_latency", **timed.to_dict())
            self._teacher_runtime_ms = timed.median_ms
        return float(self._teacher_runtime_ms)

    def study_latency_fn(self) -> Any:
        """The study's ``latency_ms`` (objective, target): with ``latency: {source:
        predicted}``, this machine's latency model of the section's runtime for the space
        (batch 1, one thread, the run's length; calibrated once and cached when its table
        has none: :func:`nas.latency.space_predictor`); else ``None``, the candidate's
        latency as its evaluator measured it (on that runtime: :meth:`scoring_fields`)."""
        latency = self.cfg.latency_settings
        if latency.source != "predicted":
            return None
        from nas.latency import space_predictor

        def note(message: str) -> None:
            self.run.log("latency_model", note=message)

        return space_predictor(self.space, seq_len=self.max_seq_len, log=note,
                               runtime=latency.runtime)

    def scoring_fields(self, val_batches: list[Any] | None = None) -> dict[str, Any]:
        """The run's scoring fields, and the runtime a ``measured`` latency is timed on
        (``latency.runtime``; a predicted search's candidates are timed in torch, the
        cheaper record beside the objective)."""
        latency = self.cfg.latency_settings
        runtime = latency.runtime if latency.source == "measured" else "torch"
        return {**super().scoring_fields(val_batches), "latency_runtime": runtime}

    def evaluator_parts(self, wanted: set[str]) -> dict[str, Any]:
        """Parts beyond the training pieces that this context gives an evaluator asking
        for ``wanted`` (none here; compress adds the sorted teacher's supernet and, when
        asked, its blockwise table)."""
        return {}

    def _check_head(self) -> None:
        check_head(self.space, self.train.num_labels)

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

    def assistant(self, tag: str, arch: Any, weights: Path, data: Any) -> Assistant:
        """The retrained point ``tag`` (``arch`` with the ``weights`` its final retrain
        wrote, read back on resume too) as a teacher assistant, with its logits on
        ``data``, kept beside its weights as a memory-mapped array keyed by the data's
        fingerprint and length (as the teacher's are: computed once)."""
        from nas.builder import build_child
        from nas.cache import load_weights
        from nas.checkpoint import atomic_target
        from nas.distill.general import model_logits

        model = build_child(self.space, arch)
        load_weights(model, weights)
        for p in model.parameters():
            p.requires_grad_(False)
        model.eval()
        path = weights.parent / f"logits-{data.fingerprint}-L{self.max_seq_len}.npy"
        if not path.is_file():
            logits = model_logits(model, data, self.tokenizer, self.max_seq_len,
                                  self.progress, desc=f"{tag} logits")
            with atomic_target(path) as tmp, open(tmp, "wb") as f:
                np.save(f, logits, allow_pickle=False)
        return Assistant(tag, model, np.load(path, mmap_mode="r"))

    def distillation(self, data: Any, settings: Distillation, stage: str,
                     logits: np.ndarray | None = None) -> dict[str, Any]:
        """The training parts of an evaluator over ``data``: seeded batches, steps per
        epoch and the KD loss against the teacher's logits on ``data`` (or ``logits``, a
        teacher assistant's) (``loss`` on the model, ``logits_loss`` on logits an
        evaluator computed itself); transfer rows (no label) learn the teacher's
        distribution alone."""
        if logits is None:
            logits = self.teacher_logits(data)

        def logits_loss(out: torch.Tensor, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            return transfer_kd_loss(out, table_rows(logits, batch["index"], out),
                                    batch["labels"], settings.temperature, settings.alpha)

        def loss(model: Any, batch: Mapping[str, torch.Tensor]) -> torch.Tensor:
            return logits_loss(model(batch).logits, batch)

        return {"train_batches": self.train_batches(data, settings.batch_size, stage),
                "steps_per_epoch": math.ceil(len(data) / settings.batch_size), "loss": loss,
                "logits_loss": logits_loss}

    def evaluator(self, name: str, settings: Mapping[str, Any], *, data: Any,
                  val_batches: list[Any] | None, test: bool, workdir: Path, seed: int,
                  stage: str, assistant: Assistant | None = None) -> Any:
        """The registered evaluator ``name`` built with the parts it asks for; one this
        recipe cannot give (a warm-up supernet, a teacher fit layer...) is refused in
        one line. ``assistant``: distil from it instead of the full teacher (its logits,
        and its hidden states for an evaluator that reads them)."""
        from evaluators.base import EVALUATORS

        check_evaluator(name, self.space.name, self.cfg.provided_parts)
        required, optional = EVALUATORS.get(name).parts()
        given, train = evaluator_settings(name, settings, self.cfg.retrain)
        wanted = {*required, *optional}
        pool: dict[str, Any] = {
            "space": self.space, "seed": seed, "workdir": workdir, "init": self.init_model,
            **(self.distillation(data, train, stage, None if assistant is None
                                 else assistant.logits)
               if wanted & {"loss", "logits_loss"} else {}),
            **self.evaluator_parts(wanted),
            **({"assistant": assistant.model} if assistant is not None else {})}
        return self.build_evaluator(name, given, pool, val_batches=val_batches, test=test)


def check_head(space: Any, labels: int) -> None:
    """The space's classifier answers the task's ``labels`` (a space passed as an object,
    or one whose factory takes no ``num_labels``, may not): its default child is built
    and run on one short batch."""
    from nas.builder import build_child
    from nas.cost import batch_for

    with torch.no_grad():  # ids within the space's vocabulary (a small teacher's too)
        out = build_child(space, space.default()).eval()(batch_for(space, 1, 8))
    found = int(out.logits.shape[-1])
    if found != labels:
        raise ConfigError(f"space {space.name!r}: its head gives {found} outputs and "
                          f"the task has {labels} labels; build it with num_labels={labels}")


__all__ = ["SearchContext", "check_head"]
